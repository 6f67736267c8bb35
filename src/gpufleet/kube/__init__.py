"""gpufleet.kube: the Kubernetes API layer the scheduler runs on.

* :mod:`~gpufleet.kube.client`: :class:`KubeClient`, a typed httpx client (list/watch/get/create/patch,
  binding, eviction, events, status) with errors mapped to :mod:`~gpufleet.kube.errors`.
* :mod:`~gpufleet.kube.config`: kubeconfig, in-cluster and plain-host connection settings.
* :mod:`~gpufleet.kube.informer`: list-then-watch informers feeding a thread-safe :class:`ObjectCache`.
* :mod:`~gpufleet.kube.leader`: Lease-based leader election.
* :mod:`~gpufleet.kube.resources`: the resource types (core kinds and the gpufleet.io/v1alpha1 CRDs).

Nothing is imported here, so ``import gpufleet`` never needs httpx.
"""
