"""Prometheus metrics of the live scheduler, on a registry of its own (tests run several schedulers in one
process; the global default registry would refuse the second set of names)."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# Cycles range from a millisecond (nothing changed) to seconds (thousands of nodes, a big gang search).
_CYCLE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class SchedulerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        reg = self.registry
        self.cycle_duration = Histogram(
            "gpufleet_cycle_duration_seconds", "Duration of one scheduling cycle (rebuild, policy, API writes).",
            registry=reg, buckets=_CYCLE_BUCKETS)
        self.cycle_phase = Counter(
            "gpufleet_cycle_phase_seconds", "Time spent per cycle phase: core (rebuild and policy) or api (writes).",
            ["phase"], registry=reg)
        self.pods_scheduled = Counter("gpufleet_pods_scheduled", "Pods bound to a node.", registry=reg)
        self.pending_workloads = Gauge(
            "gpufleet_pending_workloads", "Pending workloads by ClusterQueue and reason.", ["cluster_queue", "reason"],
            registry=reg)
        self.preemptions = Counter("gpufleet_preemptions", "Workloads preempted (evicted), by reason.", ["reason"],
                                   registry=reg)
        self.gang_timeouts = Counter("gpufleet_gang_timeouts",
                                     "Workloads evicted because their pods were not all ready in time, or because a "
                                     "partially bound gang could not be completed.", ["reason"], registry=reg)
        self.bind_errors = Counter("gpufleet_bind_errors", "Failed Binding attempts, by HTTP status (0: no answer).",
                                   ["code"], registry=reg)
        self.eviction_refusals = Counter("gpufleet_eviction_refusals",
                                         "Evictions refused by a PodDisruptionBudget (429).", registry=reg)
        self.cycle_failures = Counter("gpufleet_cycle_failures", "Scheduling cycles that raised an error.",
                                      registry=reg)
        self.rejected_objects = Gauge(
            "gpufleet_rejected_objects", "Objects the scheduler leaves out: Invalid (they do not parse) or "
            "CycleFailure (set aside because scheduling failed with them and succeeds without).",
            ["kind", "reason"], registry=reg)
        self.is_leader = Gauge("gpufleet_is_leader", "1 while this replica holds the Lease.", registry=reg)
        self.informers_synced = Gauge("gpufleet_informers_synced", "1 once every informer has listed.", registry=reg)

    def set_pending(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Replace the pending gauge: series of queues and reasons no longer pending must disappear."""
        self.pending_workloads.clear()
        for (queue, reason), n in counts.items():
            self.pending_workloads.labels(queue, reason).set(n)

    def set_rejected(self, counts: Mapping[tuple[str, str], int]) -> None:
        self.rejected_objects.clear()
        for (kind, reason), n in counts.items():
            self.rejected_objects.labels(kind, reason).set(n)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
