"""The scheduler's metric catalogue: every metric's name, type, labels, help text and buckets, in one neutral module
that both drivers read. The live scheduler records into a :class:`SchedulerMetrics` on a registry of its own (tests
run several schedulers in one process; the global default registry would refuse the second set of names), and
``gpufleet simulate --metrics-out`` (gpufleet.sim.openmetrics) writes simulated series under the same names, types
and help texts, taken from here. Nothing here imports the live driver or the simulator.

Where Kueue has the same thing, the metric is Kueue's name and labels under the ``gpufleet_`` prefix
(``kueue_admitted_active_workloads{cluster_queue}`` is ``gpufleet_admitted_active_workloads{cluster_queue}``), so
a Kueue dashboard moves over by renaming. ``gpufleet_pending_workloads`` keeps its ``reason`` label and gains
Kueue's ``status``. What only gpufleet knows (GPUs per node pool and model, fragmentation, gangs, cost) is
described on each metric. :mod:`gpufleet.live.fleet_metrics` computes the values.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# Cycles range from a millisecond (nothing changed) to seconds (thousands of nodes, a big gang search).
_CYCLE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# From a pod's informer event to its Binding: milliseconds when it fits at once (the 100 ms of issue 27's goal is a
# bucket edge, so the share within it is read exactly), minutes behind a backlog.
SLI_BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0,
               120.0, 300.0, 600.0)
# Kueue's wait-time buckets: 1 s, then 2.5 s doubling 13 times (up to 10240 s, almost three hours).
WAIT_BUCKETS = (1.0, *(2.5 * 2**i for i in range(13)))

# Pending reasons (gpufleet.live.cycle.pending_reason) of workloads Kueue would count as "active" (in the
# admission queue); every other reason is "inadmissible" (evaluated and parked, or unable to queue at all).
ACTIVE_PENDING_REASONS = frozenset({"Queued", "Preempting"})
_QUEUE_LABELS = ["cohort", "cluster_queue", "flavor", "resource"]
_FLEET_LABELS = ["node_pool", "model"]


class SchedulerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._shown: dict[int, set[tuple[str, ...]]] = {}  # label values each replaced gauge shows
        reg = self.registry
        self.cycle_duration = Histogram(
            "gpufleet_cycle_duration_seconds", "Duration of one scheduling cycle (rebuild, policy, API writes).",
            registry=reg, buckets=_CYCLE_BUCKETS)
        self.cycle_phase = Counter(
            "gpufleet_cycle_phase_seconds", "Time spent per cycle phase: core (rebuild and policy) or api (writes).",
            ["phase"], registry=reg)
        self.pod_scheduling_sli = Histogram(
            "gpufleet_pod_scheduling_sli_duration_seconds", "From the informer event that first showed a pod of "
            "this scheduler waiting for a node to its Binding: sent (until=\"binding_sent\", the scheduler's own "
            "part) or accepted by the API server (until=\"bound\", as kube-scheduler's pod scheduling SLI). Each "
            "pod is counted once per stage.", ["until"], buckets=SLI_BUCKETS, registry=reg)
        self.pods_scheduled = Counter("gpufleet_pods_scheduled", "Pods bound to a node.", registry=reg)
        self.pending_workloads = Gauge(
            "gpufleet_pending_workloads", "Pending workloads by ClusterQueue, Kueue's status (active: in the "
            "admission queue; inadmissible: evaluated and parked, or not queueable) and reason.",
            ["cluster_queue", "status", "reason"], registry=reg)
        self.preemptions = Counter("gpufleet_preemptions", "Workloads preempted (evicted), by reason.", ["reason"],
                                   registry=reg)
        self.gang_timeouts = Counter("gpufleet_gang_timeouts",
                                     "Workloads evicted because their pods were not all ready in time, or because a "
                                     "partially bound gang could not be completed.", ["reason"], registry=reg)
        self.bind_errors = Counter("gpufleet_bind_errors", "Failed Binding attempts, by HTTP status (0: no answer).",
                                   ["code"], registry=reg)
        self.binds_in_flight = Gauge("gpufleet_binds_in_flight", "Pods handed to the binding workers whose "
                                     "Binding has not ended yet.", registry=reg)
        self.events_dropped = Counter("gpufleet_events_dropped", "Events not written: the event queue was full "
                                      "(1000 waiting) or the scheduler was stopping.", registry=reg)
        self.eviction_refusals = Counter("gpufleet_eviction_refusals",
                                         "Evictions refused by a PodDisruptionBudget (429).", registry=reg)
        self.metrics_failures = Counter("gpufleet_metrics_failures", "Cycles whose fleet metrics could not be "
                                        "computed (the error is logged; scheduling goes on).", registry=reg)
        self.cycle_failures = Counter("gpufleet_cycle_failures", "Scheduling cycles that raised an error.",
                                      registry=reg)
        self.rejected_objects = Gauge(
            "gpufleet_rejected_objects", "Objects the scheduler leaves out: Invalid (they do not parse) or "
            "CycleFailure (set aside because scheduling failed with them and succeeds without).",
            ["kind", "reason"], registry=reg)
        # --- Kueue's, under gpufleet_ ---------------------------------------------------------------------
        self.admitted_active = Gauge(
            "gpufleet_admitted_active_workloads", "Admitted workloads that are active (hold their quota).",
            ["cluster_queue"], registry=reg)
        self.admitted = Counter("gpufleet_admitted_workloads", "Workloads admitted (all their pods bound).",
                                ["cluster_queue"], registry=reg)
        self.admission_wait = Histogram(
            "gpufleet_admission_wait_time_seconds", "Time from a workload's creation (or requeue) until it was "
            "admitted and bound.", ["cluster_queue"], registry=reg, buckets=WAIT_BUCKETS)
        self.evicted = Counter(
            "gpufleet_evicted_workloads", "Workloads evicted, by ClusterQueue and reason (Preempted, "
            "PodsReadyTimeout, GangIncomplete).", ["cluster_queue", "reason"], registry=reg)
        self.preempted = Counter(
            "gpufleet_preempted_workloads", "Workloads preempted, by the preemptor's ClusterQueue and reason "
            "(InClusterQueue, InCohortReclamation, InCohortFairSharing, InCohortReclaimWhileBorrowing).",
            ["preempting_cluster_queue", "reason"], registry=reg)
        self.cq_status = Gauge(
            "gpufleet_cluster_queue_status", "1 for the ClusterQueue's status (pending: stopped or invalid; "
            "active), 0 for the other.", ["cluster_queue", "status"], registry=reg)
        self.cq_usage = Gauge(
            "gpufleet_cluster_queue_resource_usage", "Admitted usage per ClusterQueue, flavor and resource, in the "
            "resource's unit (GPUs, cores, bytes).", _QUEUE_LABELS, registry=reg)
        self.cq_nominal = Gauge("gpufleet_cluster_queue_nominal_quota", "Nominal quota per ClusterQueue, flavor "
                                "and resource.", _QUEUE_LABELS, registry=reg)
        self.cq_borrowing = Gauge(
            "gpufleet_cluster_queue_borrowing_limit", "Borrowing limit per ClusterQueue, flavor and resource "
            "(+Inf: none).", _QUEUE_LABELS, registry=reg)
        self.cq_lending = Gauge(
            "gpufleet_cluster_queue_lending_limit", "Lending limit per ClusterQueue, flavor and resource "
            "(+Inf: none).", _QUEUE_LABELS, registry=reg)
        # --- what only gpufleet knows ------------------------------------------------------------------------
        self.gpus_capacity = Gauge("gpufleet_gpus_capacity", "Physical GPUs per node pool and GPU model.",
                                   _FLEET_LABELS, registry=reg)
        self.gpus_held = Gauge(
            "gpufleet_gpus_held", "GPUs held by pods (of every scheduler), by share: a time-slice replica of 4 "
            "is 0.25, a MIG instance its compute slices over the GPU's.", _FLEET_LABELS, registry=reg)
        self.gpus_idle = Gauge("gpufleet_gpus_idle", "Healthy GPU capacity no pod holds, by share.", _FLEET_LABELS,
                               registry=reg)
        self.gpus_unhealthy = Gauge("gpufleet_gpus_unhealthy", "GPUs the node's inventory marks Unhealthy.",
                                    _FLEET_LABELS, registry=reg)
        self.gpus_fragmented = Gauge(
            "gpufleet_fragmented_gpus", "Idle GPUs stranded: on nodes a pending GPU pod could use were they free, "
            "where none fits now (0 while no GPU pod is pending): capacity that exists and that nobody waiting can "
            "use.", _FLEET_LABELS, registry=reg)
        self.queue_gpus_held = Gauge(
            "gpufleet_cluster_queue_gpus_held", "GPUs held by the pods of each ClusterQueue's workloads (empty "
            "cluster_queue: pods without a queue, or of other schedulers).", ["cluster_queue", *_FLEET_LABELS],
            registry=reg)
        self.queue_cost = Gauge(
            "gpufleet_cluster_queue_cost_per_hour", "What the GPUs each ClusterQueue holds cost per hour, at the "
            "GPU catalog's prices.", ["cluster_queue", *_FLEET_LABELS], registry=reg)
        self.gpu_price = Gauge("gpufleet_gpu_price_per_hour", "The GPU catalog's price of one GPU-hour, per model "
                               "in the fleet (what the cost metrics multiply by).", ["model"], registry=reg)
        self.gang_pending = Gauge(
            "gpufleet_gang_pending_seconds", "How long each pending gang (a workload of more than one pod) has "
            "waited since it was created or requeued.", ["cluster_queue", "namespace", "workload"], registry=reg)
        self.gang_wait = Histogram(
            "gpufleet_gang_wait_seconds", "Wait of gangs until all their pods were bound.", ["cluster_queue"],
            registry=reg, buckets=WAIT_BUCKETS)
        self.is_leader = Gauge("gpufleet_is_leader", "1 while this replica holds the Lease.", registry=reg)
        self.informers_synced = Gauge("gpufleet_informers_synced", "1 once every informer has listed.", registry=reg)

    def set_pending(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Replace the pending gauge: series of queues and reasons no longer pending must disappear."""
        self.replace(self.pending_workloads, {
            (queue, "active" if reason in ACTIVE_PENDING_REASONS else "inadmissible", reason): n
            for (queue, reason), n in counts.items()})

    def set_rejected(self, counts: Mapping[tuple[str, str], int]) -> None:
        self.replace(self.rejected_objects, {(kind, reason): n for (kind, reason), n in counts.items()})

    def replace(self, gauge: Gauge, values: Mapping[tuple[str, ...], float]) -> None:
        """Set ``gauge`` to exactly ``values`` (label values -> value): series not in it disappear. New values
        are set before old series are removed, so a scrape in between never sees the gauge empty."""
        for labels, value in values.items():
            gauge.labels(*labels).set(value)
        shown = self._shown.setdefault(id(gauge), set())
        for gone in shown - values.keys():
            gauge.remove(*gone)
        self._shown[id(gauge)] = set(values)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
