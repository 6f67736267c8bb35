"""gpufleet.k8s: the Kubernetes API plumbing every process shares (the scheduler, the node agent, the
dashboard, ``gpufleet snapshot``): the client (:mod:`~gpufleet.k8s.client`, :mod:`~gpufleet.k8s.direct`,
:mod:`~gpufleet.k8s.ratelimit`, :mod:`~gpufleet.k8s.errors`), where the API server is
(:mod:`~gpufleet.k8s.config`) and what it serves (:mod:`~gpufleet.k8s.discovery`, :mod:`~gpufleet.k8s.resources`),
informers (:mod:`~gpufleet.k8s.informer`), leader election (:mod:`~gpufleet.k8s.leader`), events
(:mod:`~gpufleet.k8s.eventsink`), listeners and operations endpoints (:mod:`~gpufleet.k8s.serving`,
:mod:`~gpufleet.k8s.health`, :mod:`~gpufleet.k8s.metrics_auth`), logs (:mod:`~gpufleet.k8s.logs`), API objects
into gpufleet's (:mod:`~gpufleet.k8s.parsing`), the annotations gpufleet writes on pods
(:mod:`~gpufleet.k8s.annotations`) and the cluster snapshot (:mod:`~gpufleet.k8s.snapshot`).

Nothing is imported here, so ``import gpufleet`` never needs httpx.
"""
