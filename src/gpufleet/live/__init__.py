"""gpufleet.live: the live scheduler (``gpufleet scheduler``) on the API plumbing of :mod:`gpufleet.k8s`.

* :mod:`~gpufleet.live.scheduler`: the process (informers, leader election, the cycle loop, endpoints);
* :mod:`~gpufleet.live.cycle`: one cycle, snapshot to writes; :mod:`~gpufleet.live.world` (the core's input from
  the cache), :mod:`~gpufleet.live.increment` (cycles that carry on), :mod:`~gpufleet.live.planner` (the
  KueuePolicy run), :mod:`~gpufleet.live.gangs` (partial gangs, waitForPodsReady);
* the writes: :mod:`~gpufleet.live.binder` and :mod:`~gpufleet.live.bindqueue` (Bindings),
  :mod:`~gpufleet.live.claims` (DRA claims), :mod:`~gpufleet.live.evictor` (Eviction API),
  :mod:`~gpufleet.live.recorder` (events, PodScheduled), :mod:`~gpufleet.live.queuestatus` (queue status);
* :mod:`~gpufleet.live.settings` (the ``--config`` file), :mod:`~gpufleet.live.fleet_metrics`,
  :mod:`~gpufleet.live.ops` (its operations listeners).
"""
