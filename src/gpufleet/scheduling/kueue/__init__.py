"""Kueue v0.14 (``kueue.x-k8s.io/v1beta1``) admission for gpufleet: queues, quotas through the cohort tree,
flavor assignment, classical and fair-sharing preemption, waitForPodsReady, and all-or-nothing gang placement.

Module map:

* :mod:`.config` - ClusterQueue/Cohort/LocalQueue configuration derived from manifests, and the quota tree;
* :mod:`.info` - per-workload scheduling state (requests, admission, backoff, flavor-resume state);
* :mod:`.queues` - one heap per ClusterQueue, parking of inadmissible workloads, StrictFIFO/BestEffortFIFO;
* :mod:`.modes`, :mod:`.selection`, :mod:`.flavors` - flavor assignment;
* :mod:`.preemption` - preemption targets (classical and fair sharing);
* :mod:`.ordering` - order of a cycle's heads (classical, fair-sharing tournament);
* :mod:`.gangs` - placing a workload's pods all or none through the placement engine's Placer
  (:mod:`.firstfit` is a simple reference placer for tests);
* :mod:`.state`, :mod:`.cycle` - the policy's state and one scheduling cycle;
* :mod:`.late_members` - pods that come after their workload's admission joining it, and pods leaving it;
* :mod:`.parked_memory`, :mod:`.shields` - what carries over into a policy rebuilt for the next cycle: the parked
  workloads, and the workloads shielded from preemption;
* :mod:`.policy` - :class:`KueuePolicy`, the :class:`~gpufleet.scheduling.types.Policy` drivers run.
"""

from gpufleet.scheduling.kueue.policy import KueuePolicy, PlacerFactory, engine_placer_factory, first_fit_factory

__all__ = ["KueuePolicy", "PlacerFactory", "engine_placer_factory", "first_fit_factory"]
