"""The live scheduler's view of the fleet as Prometheus metrics, computed from one cycle's World and Plan.

:meth:`FleetMetrics.observe` replaces every gauge after the policy has run (what holds, what waits, what the
queues' quotas are), so a series whose object is gone disappears. Counters count what happened, never the plan
alone (a failed bind is planned again next cycle): a workload is admitted (with its wait) once the cache shows
all its pods bound, seen by :meth:`FleetMetrics.observe`; an eviction once the Eviction API accepted it, told
by :meth:`FleetMetrics.carried_out`.

Nothing here is a second bookkeeping of the cluster: GPU shares come from the cluster state's devices
(:mod:`gpufleet.cluster.holdings`, which the simulator's metrics use too), fragmentation from
:mod:`gpufleet.scheduling.placement.stranded`, queue usage from the policy's quota tree and admitted counts from
:class:`~gpufleet.live.queuestatus.QueueCounts`, as the ClusterQueue status shows them. The GPU gauges are
summed node by node (:mod:`gpufleet.live.fleet_tally`), each node's part kept while the node does not change.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Collection, Iterable

from gpufleet.api.objects import PodTemplate
from gpufleet.gpu.constants import MILLI
from gpufleet.live.evictor import Victim
from gpufleet.live.fleet_tally import FleetTally
from gpufleet.live.planner import Plan
from gpufleet.live.queuestatus import QueueCounts
from gpufleet.live.world import World
from gpufleet.scheduler_metrics import SchedulerMetrics
from gpufleet.scheduling.charges import quota_value
from gpufleet.scheduling.kueue import KueuePolicy
from gpufleet.scheduling.kueue.info import State, WorkloadInfo

log = logging.getLogger(__name__)

Labels = tuple[str, ...]


def is_gang(info: WorkloadInfo) -> bool:
    """A workload whose pods are admitted together and that has (or declares) more than one pod."""
    w = info.workload
    return w.gang and max(w.size, w.expected_pods or 0) > 1


def _queue_of(info: WorkloadInfo | None) -> str:
    """The ClusterQueue a workload is charged to (its admission's), else the one it waits in; "" for none."""
    if info is None:
        return ""
    if info.admission is not None and info.admission.cluster_queue:
        return info.admission.cluster_queue
    return info.cluster_queue or ""


class FleetMetrics:
    def __init__(self, metrics: SchedulerMetrics, *, refresh: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.metrics = metrics
        # The gauges cost about a tenth of a cycle's core on a large cluster (bench/fleet_metrics.py); cycles can
        # run back to back, Prometheus scrapes every few seconds at most: they are recomputed at most this often.
        self.refresh = refresh
        self.clock = clock
        self._due = -math.inf
        self._bound: set[str] | None = None  # workloads all of whose pods the last cycle saw bound
        # The GPU gauges node by node, kept while the cycles carry on with one cluster state (only the nodes that
        # changed are looked at again).
        self.tally = FleetTally()

    # --- gauges, after the policy --------------------------------------------------------------------

    def observe(self, world: World, plan: Plan, *, counts: QueueCounts | None = None,
                changed: Collection[str] | None = None) -> None:
        """Replace the gauges; a failure is logged and counted, never allowed to stop the scheduling cycle.
        ``counts``: the policy's queue counts where the caller keeps them; ``changed``: the only workloads whose
        pods' bindings may have changed since the last call (a cycle that carried on from the last), None: any."""
        try:
            self._observe(world, plan, counts, changed)
        except Exception:
            log.exception("computing the fleet metrics failed; they keep their previous values")
            self.metrics.metrics_failures.inc()

    def _observe(self, world: World, plan: Plan, counts: QueueCounts | None, changed: Collection[str] | None) -> None:
        policy = plan.policy
        # Every cycle: a workload bound and gone between two would be missed.
        self._admissions(world, policy, changed)
        started = self.clock()
        if started < self._due:
            return
        self._due = started + self.refresh  # (a failure below waits as long before the next try)
        self._queues(world, policy, counts)
        self._gpus(world, policy, plan.pending)
        self._holders(world, policy)  # (after _gpus: both read the tally it updates)
        self._gangs(world, policy, plan.pending)
        # Never more than a tenth of the time: at 5,000 nodes the gauges cost half a second after a full cycle (a new
        # cluster state: every node looked at), a few milliseconds while cycles carry on.
        self._due = started + max(self.refresh, 10 * (self.clock() - started))

    def _queues(self, world: World, policy: KueuePolicy, counts: QueueCounts | None) -> None:
        m = self.metrics
        counts = counts if counts is not None else QueueCounts(policy)
        config = policy.config
        usage = policy.usage()
        status: dict[Labels, float] = {}
        amounts: dict[str, dict[Labels, float]] = {"usage": {}, "nominal": {}, "borrowing": {}, "lending": {}}
        for name, spec in config.cluster_queues.items():
            state = "pending" if spec.stopped else "active"
            status.update({(name, s): float(s == state) for s in ("pending", "active")})
            for (flavor, resource), quota in spec.quotas.items():
                key = (spec.cohort or "", name, flavor, resource)
                amounts["usage"][key] = quota_value(resource, usage.get(name, {}).get(flavor, {}).get(resource, 0))
                amounts["nominal"][key] = quota_value(resource, quota.nominal)
                amounts["borrowing"][key] = math.inf if quota.borrowing_limit is None else \
                    quota_value(resource, quota.borrowing_limit)
                amounts["lending"][key] = math.inf if quota.lending_limit is None else \
                    quota_value(resource, quota.lending_limit)
        # A ClusterQueue that does not parse (or names a missing flavor) is in the cluster but cannot admit.
        for e in world.queues.problems.errors:
            if e.kind == "ClusterQueue" and e.name and e.name not in config.cluster_queues:
                status.update({(e.name, "pending"): 1.0, (e.name, "active"): 0.0})
        m.replace(m.cq_status, status)
        active: dict[Labels, float] = {(cq,): 0.0 for cq in config.cluster_queues}
        active.update({(cq,): float(n) for cq, n in counts.cq_admitted.items()})
        m.replace(m.admitted_active, active)
        m.replace(m.cq_usage, amounts["usage"])
        m.replace(m.cq_nominal, amounts["nominal"])
        m.replace(m.cq_borrowing, amounts["borrowing"])
        m.replace(m.cq_lending, amounts["lending"])

    def _gpus(self, world: World, policy: KueuePolicy, pending: Iterable[str]) -> None:
        m = self.metrics
        # Per (pool, model): capacity, held, idle, unhealthy, fragmented (thousandths of GPUs but for the counts); a
        # stranded node's idle capacity is all stranded (placement.stranded looks at healthy GPUs only).
        self.tally.update(world.cluster, policy, _pending_templates(policy, pending),
                          lambda pod: _queue_of(policy.info(w)) if (w := world.workload_of.get(pod)) else "")
        totals = self.tally.gpus()
        m.replace(m.gpus_capacity, {k: float(v[0]) for k, v in totals.items()})
        m.replace(m.gpus_held, {k: v[1] / MILLI for k, v in totals.items()})
        m.replace(m.gpus_idle, {k: v[2] / MILLI for k, v in totals.items()})
        m.replace(m.gpus_unhealthy, {k: float(v[3]) for k, v in totals.items()})
        m.replace(m.gpus_fragmented, {k: v[4] / MILLI for k, v in totals.items()})
        m.replace(m.gpu_price, {(model,): world.cluster.catalog.price(model) for _, model in totals})

    def _holders(self, world: World, policy: KueuePolicy) -> None:
        """GPUs held and their cost per queue, pool and model, from the tally :meth:`_gpus` brought up to date."""
        m = self.metrics
        sums = self.tally.holders()
        held = {labels: share for labels, (share, _) in sums.items()}
        cost = {labels: price for labels, (_, price) in sums.items()}
        # Every ClusterQueue shows, at 0 when it holds nothing, so a dashboard lists the idle ones too.
        for cq in policy.config.cluster_queues:
            if not any(k[0] == cq for k in held):
                held[(cq, "", "")] = cost[(cq, "", "")] = 0.0
        m.replace(m.queue_gpus_held, held)
        m.replace(m.queue_cost, cost)

    def _gangs(self, world: World, policy: KueuePolicy, pending: Iterable[str]) -> None:
        waits: dict[Labels, float] = {}
        for workload in pending:
            info = policy.info(workload)
            if info is None or info.state is not State.PENDING or not is_gang(info):
                continue
            waits[(info.cluster_queue or "", info.namespace, info.workload.name)] = max(0.0,
                                                                                      world.now - info.queue_ts)
        self.metrics.replace(self.metrics.gang_pending, waits)

    # --- counters, after the writes ------------------------------------------------------------------

    def carried_out(self, plan: Plan, victims: Iterable[Victim], evicted: Collection[str]) -> None:
        """Count the evictions the API server accepted (a failure is logged and counted, as in
        :meth:`observe`)."""
        try:
            self._carried_out(plan, victims, evicted)
        except Exception:
            log.exception("counting the cycle's evictions failed")
            self.metrics.metrics_failures.inc()

    def _carried_out(self, plan: Plan, victims: Iterable[Victim], evicted: Collection[str]) -> None:
        labels = self.eviction_labels(plan, victims)
        for v in victims:
            if v.workload in evicted:
                self.count_eviction(v, labels[v.workload])

    @staticmethod
    def eviction_labels(plan: Plan, victims: Iterable[Victim]) -> dict[str, tuple[str, str]]:
        """Each victim's ClusterQueue and its preemptor's ("" for none), read from the plan's policy on the cycle's
        thread, for :meth:`count_eviction` once the eviction's answer comes (on another thread)."""
        policy = plan.policy
        return {v.workload: (_queue_of(policy.info(v.workload)),
                             _queue_of(policy.info(v.preemptor)) if v.preemptor else "") for v in victims}

    def count_eviction(self, victim: Victim, labels: tuple[str, str]) -> None:
        """An eviction the API server accepted, counted under ``labels`` (:meth:`eviction_labels`)."""
        m = self.metrics
        queue, preemptor_queue = labels
        if victim.preemptor:
            m.evicted.labels(queue, "Preempted").inc()
            m.preempted.labels(preemptor_queue, victim.reason).inc()
        else:
            m.evicted.labels(queue, victim.reason).inc()

    def _admissions(self, world: World, policy: KueuePolicy, changed: Collection[str] | None = None) -> None:
        """Count each workload of ours once its pods are all bound, as the cache shows them, with its wait from
        creation (or requeue) to the bind (``gpufleet.io/assigned-at``). Bindings end after the cycle that
        planned them, and some fail; the cache is what happened. The first cycle only notes what is already
        bound: those were admitted before this process (or this leader) counted anything."""
        bound: set[str] = set() if changed is None or self._bound is None else set(self._bound)
        for workload in (world.pods_of if changed is None or self._bound is None else changed):
            if workload not in world.pods_of:
                bound.discard(workload)  # ended
                continue
            entries = [world.pods[k] for k in world.pods_of.get(workload, ()) if k in world.pods]
            live = [e for e in entries if not e.terminal]
            if live and all(e.bound for e in live):
                bound.add(workload)
        if self._bound is not None:
            m = self.metrics
            for workload in sorted(bound - self._bound):
                info = policy.info(workload)
                if info is None:
                    continue
                stamps = [e.intent.at for k in world.pods_of[workload] if (e := world.pods.get(k)) is not None
                          and e.intent is not None and e.intent.at is not None]
                wait = max(0.0, (max(stamps) if stamps else world.now) - info.queue_ts)
                queue = _queue_of(info)
                m.admitted.labels(queue).inc()
                m.admission_wait.labels(queue).observe(wait)
                if is_gang(info):
                    m.gang_wait.labels(queue).observe(wait)
        self._bound = bound


def _pending_templates(policy: KueuePolicy, pending: Iterable[str]) -> list[PodTemplate]:
    """The distinct GPU pod templates of the workloads still waiting (what fragmentation asks to fit): many
    pending pods share a shape, and each distinct one costs a fit check on every node."""
    out: list[PodTemplate] = []
    for workload in pending:
        info = policy.info(workload)
        if info is not None and info.state is State.PENDING:
            out.extend(t for ps in info.podsets if (t := ps.template).gpu.wants_gpu and t not in out)
    return out

