"""gpufleet.kube: the Kubernetes API layer the scheduler runs on.

* :mod:`~gpufleet.kube.client`: :class:`KubeClient`, a typed httpx client (list/watch/get/create/patch,
  binding, eviction, events, status) with errors mapped to :mod:`~gpufleet.kube.errors`.
* :mod:`~gpufleet.kube.config`: kubeconfig, in-cluster and plain-host connection settings.
* :mod:`~gpufleet.kube.informer`: list-then-watch informers feeding a thread-safe :class:`ObjectCache`.
* :mod:`~gpufleet.kube.leader`: Lease-based leader election.
* :mod:`~gpufleet.kube.resources`: the resource types (core kinds and the gpufleet.io/v1alpha1 CRDs).

The live scheduler (``gpufleet scheduler``) on top of them:

* :mod:`~gpufleet.kube.scheduler`: the process (informers, leader election, the cycle loop, endpoints);
* :mod:`~gpufleet.kube.cycle`: one cycle, snapshot to writes; :mod:`~gpufleet.kube.world` (the core's input
  rebuilt from the cache, via :mod:`~gpufleet.kube.parsing`, :mod:`~gpufleet.kube.grants`,
  :mod:`~gpufleet.kube.assumed`), :mod:`~gpufleet.kube.gangs` (partial gangs, waitForPodsReady),
  :mod:`~gpufleet.kube.planner` (the KueuePolicy run);
* the writes: :mod:`~gpufleet.kube.binder` (Bindings that carry the intent annotations), :mod:`~gpufleet.kube.evictor`
  (Eviction API, PodDisruptionBudget shields), :mod:`~gpufleet.kube.recorder` (events, PodScheduled),
  :mod:`~gpufleet.kube.queuestatus` (ClusterQueue/LocalQueue status); :mod:`~gpufleet.kube.annotations` names
  what is written on pods;
* :mod:`~gpufleet.kube.webhook` and :mod:`~gpufleet.kube.webhook_server`: the fractional-GPU admission webhook;
* :mod:`~gpufleet.kube.settings` (the ``--config`` file), :mod:`~gpufleet.scheduler_metrics`,
  :mod:`~gpufleet.kube.health`, :mod:`~gpufleet.kube.logs`.

Nothing is imported here, so ``import gpufleet`` never needs httpx.
"""
