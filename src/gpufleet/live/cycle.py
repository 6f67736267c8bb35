"""One live scheduling cycle: snapshot → world → policy → writes. No threads of its own, no state kept
beyond the assumed pods and the PodDisruptionBudget shields the caller passes in.

1. *Core* (no I/O): snapshot the informer cache, rebuild the world (:mod:`.world`), complete or give up
   partial gangs (:mod:`.gangs`), run the policy (:mod:`.planner`), and turn its decisions into write
   plans: bind jobs, victims, pending messages, queue statuses. Pods about to be bound are *assumed* before
   any write, so a cycle that starts while these writes are in flight sees their capacity taken. A cycle that
   carries on from the last works out what only the other writes and the metrics read (the pods' pending
   messages, the parked memory's holders, the pending gauge) after its Bindings are handed off.
2. *API*: carry the plans out concurrently (one job per workload; a gang's pods in order inside its job).
   Bind jobs are handed to the binding workers and not waited for (:mod:`.bindqueue`): the next cycle may
   start while they run, the assumptions keeping it from reusing their capacity; a bind that fails releases
   its assumption when it ends. Evictions, conditions and queue statuses are waited for, and victims a
   PodDisruptionBudget protects are shielded.

The two phases are timed separately; the benchmark reports their share.
"""

from __future__ import annotations

import copy
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from gpufleet.api.dra_need import ClaimResult, DraNeed
from gpufleet.api.errors import shown
from gpufleet.api.objects import PodsReadyPolicy
from gpufleet.cluster.workloads import Workload
from gpufleet.k8s import resources as r
from gpufleet.k8s.annotations import Intent
from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.eventsink import EventSink
from gpufleet.k8s.informer import CacheChange, CacheSnapshot, ObjectCache
from gpufleet.k8s.parsing import ParseCache
from gpufleet.k8s.ratelimit import TokenBucket
from gpufleet.k8s.resources import SCHEDULER_RESOURCES, ResourceType
from gpufleet.live import beside, bindstream, gangs, observed_memory, owner_changes, planner
from gpufleet.live.assumed import AssumedPods
from gpufleet.live.binder import Binder, BindJob, ClaimWrite, PodBind
from gpufleet.live.bindqueue import BindQueue
from gpufleet.live.bindstream import BindStream
from gpufleet.live.claim_release import DeletedPodClaims
from gpufleet.live.decide import decide, placed, queue_kinds_read
from gpufleet.live.evictor import Evictor, EvictResult, Victim
from gpufleet.live.fleet_metrics import FleetMetrics
from gpufleet.live.gpu_oom import REASON as OOM_REASON
from gpufleet.live.gpu_oom import GpuOomMemory
from gpufleet.live.grants import visible_devices
from gpufleet.live.increment import (
    UNJOINED_WAIT,
    Carried,
    ChangeLog,
    Kept,
    apply_nodes,
    carried_pods,
    extend,
    hold_left_claims,
    read_owners,
    read_queue_changes,
    regrouped,
    release,
    remove_nodes,
)
from gpufleet.live.mig_resize import MigResizer
from gpufleet.live.pending_since import PendingSince
from gpufleet.live.quarantine import Quarantine, find_culprit
from gpufleet.live.queuesource import QueueChooser, QueueKinds
from gpufleet.live.queuestatus import QueueCounts, queue_statuses, write_status
from gpufleet.live.recorder import Recorder
from gpufleet.live.requeues import RequeueMemory
from gpufleet.live.settings import SchedulerSettings
from gpufleet.live.wakeup import Wakeup
from gpufleet.live.world import World, owners_of
from gpufleet.scheduler_metrics import SchedulerMetrics
from gpufleet.scheduling.kueue import KueuePolicy
from gpufleet.scheduling.kueue.info import WorkloadInfo
from gpufleet.scheduling.kueue.pending import PendingReason
from gpufleet.scheduling.kueue.shields import Shields
from gpufleet.scheduling.kueue.state import CLUSTER_QUEUE_STOPPED
from gpufleet.scheduling.memory import OomLesson
from gpufleet.scheduling.placement.dra_results import assignment_claims, pod_needs
from gpufleet.scheduling.types import AdmittedWorkload, PreemptedWorkload

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]


# How long a cycle waits for the pods it evicted to leave the cache (their watch events follow the answers).
_EVICTED_SEEN_WITHIN = 2.0
# A cycle that fails sets aside at most this many objects before it gives up (and retries next period).
MAX_CULPRITS_PER_CYCLE = 3
# Queue statuses are worked out from every workload the policy holds: a cycle that carries on from the last
# works them out at most this often (seconds), a timer bringing the last word when a burst ends.
STATUS_EVERY = 1.0


@dataclass(slots=True)
class _Decided:
    world: World
    repairs: list[gangs.GangAction]
    plan: planner.Plan
    jobs: list[BindJob]
    victims: list[Victim]
    # The pods' Unschedulable conditions to write; None: worked out once the Bindings are handed off (a carried
    # cycle: see CycleRunner._after_hand_off).
    unschedulable: list[tuple[JsonDict, str]] | None
    statuses: list[tuple[Any, JsonDict, JsonDict]]
    world_s: float
    policy_s: float
    due: list[float] = field(default_factory=list)  # times a timer falls due (wall clock): see next_due
    counts: QueueCounts | None = None  # the policy's workloads per queue, when worked out
    # The workloads whose pods' bindings changed since the last cycle, when carried on from it; None: any.
    changed: set[str] | None = None
    # The pods a carried cycle placed, for the parked memory's holders once the Bindings are handed off; None: the
    # parked memory was brought up to date in full (a full cycle).
    placed: list[str] | None = None
    # Pods that ran out of GPU memory, told to the policy this cycle, with what it learnt: their Warning events
    ooms: list[tuple[JsonDict, OomLesson]] = field(default_factory=list)
    # The policy's own next timer (a requeue backoff, a waitForPodsReady deadline): the loop wakes then, and a cycle
    # that carries on from this one runs the kept policy, which acts on it as the simulator's does
    wake: float | None = None
    # Pods to mark as of a workload seen with all its pods Ready, one of which is not any more (gangs.tell_readiness)
    ready_marks: list[JsonDict] = field(default_factory=list)


@dataclass(slots=True)
class CycleReport:
    number: int
    started: float  # wall clock
    policy_cycles: int = 0
    admitted: list[str] = field(default_factory=list)  # workloads
    bound: list[str] = field(default_factory=list)  # pods
    bind_failed: dict[str, str] = field(default_factory=dict)
    evicted: list[str] = field(default_factory=list)  # workloads
    refused: list[str] = field(default_factory=list)  # workloads a PodDisruptionBudget protected
    completed_gangs: list[str] = field(default_factory=list)
    pending: int = 0
    core_s: float = 0.0  # everything before the Bindings are handed off; world_s and policy_s are parts of it
    world_s: float = 0.0
    policy_s: float = 0.0
    api_s: float = 0.0
    carried: bool = False  # carried on from the last cycle's world and policy (gpufleet.live.increment)
    bind_cpu_s: float = 0.0  # CPU our API client spent in the bind jobs (all writer threads together)
    # When the next cycle must run though nothing changes (wall clock): the earliest timer of the world and the
    # policy (a gang's repair timeout, waitForPodsReady, a requeue backoff's end), of the pods
    # assumed and of the PodDisruptionBudget shields; None when no timer is pending.
    next_due: float | None = None


def pending_reason(info: WorkloadInfo | None) -> str:
    """A short, bounded label for the pending gauge (the full message goes to the pod's condition): the word the
    core set when it decided (gpufleet.scheduling.kueue.pending), or what keeps the workload from queueing."""
    if info is None:
        return PendingReason.UNKNOWN
    if info.problem and info.workload.hold:
        return PendingReason.HELD
    if info.problem:
        return PendingReason.UNQUEUED
    if info.placement_parked:
        return PendingReason.INSUFFICIENT_NODES
    return info.pending


def _claim_writes(needs: dict[str, DraNeed], world: World, key: str, node: str,
                  devices: Sequence[str]) -> tuple[ClaimWrite, ...]:
    """What the binder writes on the pod's DRA claims before its Binding: each claim's allocation results (the
    devices placement gave the pod, handed to the claims' requests); none for a pod without claims."""
    by_claim: dict[str, list[ClaimResult]] = {}
    for res in assignment_claims(needs, world.cluster, key, node, devices):
        by_claim.setdefault(res.claim, []).append(res)
    return tuple(ClaimWrite(claim.partition("/")[0], claim.partition("/")[2], tuple(found))
                 for claim, found in by_claim.items())


def _timeout_note(plan: planner.Plan, evicted: PreemptedWorkload) -> str:
    """What the eviction's Event says of a waitForPodsReady timeout, or of a ClusterQueue drained ("" for a
    preemption: its reason says it)."""
    if evicted.reason == CLUSTER_QUEUE_STOPPED:
        info = plan.policy.info(evicted.workload)
        return f"The ClusterQueue {info.cluster_queue if info else ''} is stopped (stopPolicy HoldAndDrain)"
    if evicted.reason != gangs.PODS_READY_TIMEOUT or (policy := plan.pods_ready_policy(evicted.workload)) is None:
        return ""
    return f"not all pods were ready {policy.timeout_s:g}s after the workload was bound"


def _unjoined_due(world: World) -> list[float]:
    """When the members of a gang that arrived in part stop waiting for the rest (gpufleet.live.increment), if
    any wait."""
    since = world.unjoined_since
    return [since + UNJOINED_WAIT] if since is not None else []


class CycleRunner:
    def __init__(self, client: KubeClient, cache: ObjectCache, settings: SchedulerSettings, *, identity: str,
                 metrics: SchedulerMetrics, may_write: Callable[[], bool], clock: Callable[[], float] = time.time,
                 pool: ThreadPoolExecutor | None = None,
                 resources: Sequence[ResourceType] = SCHEDULER_RESOURCES) -> None:
        self.client = client
        self.cache = cache
        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        self.may_write = may_write
        self.parse = ParseCache()
        self.assumed = AssumedPods(settings.binding.assume_timeout)
        self.shields = Shields()
        self.parked = planner.ParkedMemory()
        # Kueue's requeue state of the workloads evicted for PodsReadyTimeout (a rebuilt policy is told it), and the
        # waitForPodsReady policy of each workload the last cycle timed out (for its backoff once evicted).
        self.requeues = RequeueMemory()
        # The UIDs of the pods seen Ready with all of their workload's: such a workload is not timed out again when
        # one of them stops being Ready (gpufleet.live.gangs.tell_readiness).
        self.seen_ready: set[str] = set()
        self._marked: set[str | None] = set()  # the pods whose gangs.WAS_READY_CONDITION this process wrote
        self.ooms = GpuOomMemory()  # what the policies learnt of pods that ran out of GPU memory (live.gpu_oom)
        self._timed_out: dict[str, tuple[PodsReadyPolicy, frozenset[str]]] = {}
        self.quarantine = Quarantine()
        # Two token buckets of clientConnection's settings, as kube-scheduler's two clients: writes and events.
        cc = settings.client_connection
        self.writes = client.limited(TokenBucket(cc.qps, cc.burst))
        self.events = EventSink(client.limited(TokenBucket(cc.qps, cc.burst)), on_drop=metrics.events_dropped.inc)
        self.recorder = Recorder(self.writes, settings.scheduler_name, identity, self.events)
        b = settings.binding
        # Listens before the wakeup and the change log do, so a pod's first event is noted before a cycle reads it.
        self.pending_since = PendingSince(cache, settings.scheduler_name)
        self.binder = Binder(self.writes, self.recorder, metrics, may_write=may_write, retries=b.retries,
                             backoff=b.retry_backoff, pending=self.pending_since,
                             cached_claim=lambda ns, name: cache.get(r.RESOURCE_CLAIMS, f"{ns}/{name}"))
        self.evictor = Evictor(self.writes, self.recorder, metrics, may_write=may_write)
        self.resizer = MigResizer(self.writes, tuple(resources), cache.get)
        self.pool = pool or ThreadPoolExecutor(b.workers, thread_name_prefix="gpufleet-api")
        # When the next cycle is worth running (not for our own Bindings landing), and the Bindings in flight.
        self.wakeup = Wakeup(cache, self.assumed, scheduler_name=settings.scheduler_name)
        self.binds = BindQueue(self.binder, self.assumed, workers=b.workers, metrics=metrics,
                               on_release=self._released)
        # What the next cycle may carry on from (gpufleet.live.increment): the last world and policy, the cache's
        # changes since, whether a Binding was given up since, whether the last round stopped at its budget.
        self.changes = ChangeLog(cache)
        self.kept: Kept | None = None
        self._released_since = False
        self._round_cut = False
        # Evictions answered after their cycle kept its state (_answer_later) that were not accepted
        self._answers_lock = threading.Lock()
        self._lapsed: list[tuple[CycleReport, Victim, EvictResult | None, float]] = []
        self._last_full = float("-inf")
        self._statuses_at = float("-inf")  # when queue statuses were last worked out
        self._status_due: float | None = None  # when they are to be worked out again, if changes wait for it
        self.count = 0
        # The running cycle's rounds hand their admissions to the binders as they make them (gpufleet.live.bindstream):
        # how (None between cycles), the pods handed over so far, and the DRA needs of the world they came from.
        self._send: Callable[[World, list[AdmittedWorkload]], None] | None = None
        self._streamed: set[str] = set()
        self._stream_needs: tuple[World, dict[str, DraNeed]] | None = None
        self.fleet = FleetMetrics(metrics)  # gpufleet.live.fleet_metrics: the fleet's gauges and counters
        # The DRA claims of our deleted pods, released as the deletion reaches the cache (gpufleet.live.claim_release)
        self.claim_release = DeletedPodClaims(cache, self.writes, settings.scheduler_name, may_write)
        # Whose queue objects each cycle reads (gpufleet.live.queuesource), and beside Kueue, Kueue's Workloads.
        self.queues = QueueChooser(resources)
        self.watched = {res.key: res for res in resources}  # what the informers watch, in the version served
        self.queue_kinds: QueueKinds = self.queues.kinds(cache.snapshot())
        self.kueue_workloads = beside.WorkloadParses()

    def close(self) -> None:
        self.binds.close()  # the Bindings in flight end first (a gang is bound to its end)
        self.binder.close()
        self.claim_release.close()
        self.pool.shutdown(wait=True)
        self.events.close()
        self.wakeup.close()
        self.changes.close()
        self.pending_since.close()

    def _released(self) -> None:
        """A Binding was given up: its capacity is free, which the kept policy does not know."""
        self._released_since = True
        self.wakeup.poke()

    # --- the cycle --------------------------------------------------------------------------------------

    def run(self) -> CycleReport:
        self.count += 1
        now = self.clock()
        report = CycleReport(self.count, now)
        started = time.perf_counter()
        snapshot = self.cache.snapshot()
        self._send = functools.partial(self._send_early, report, now)
        self._streamed = set()
        try:
            d = self._carry_on(snapshot, now)
            report.carried = d is not None
            if d is None:
                self._last_full = self._statuses_at = now
                self._status_due = None
                d = self._decide_isolating(snapshot, now)
        finally:
            self._send = self._stream_needs = None
        world, plan = d.world, d.plan
        report.world_s, report.policy_s = d.world_s, d.policy_s
        self._assume(world, d.jobs, now)
        report.policy_cycles = plan.cycles
        report.admitted = [a.workload for a in plan.admitted]
        report.completed_gangs = [a.workload for a in d.repairs if a.kind == "complete"]
        report.pending = len(plan.pending)
        report.core_s = time.perf_counter() - started
        victims = d.victims

        api_started = time.perf_counter()
        # A preemption's evictions whose answers the next cycles need not wait for (see _answer_later).
        later = bool(victims) and self._preemption_only(d, victims) and self._keepable_beside_evictions(d)
        labels = self.fleet.eviction_labels(plan, victims) if later else {}
        try:
            evictions = self._hand_off(report, d.jobs, victims, now)
        finally:
            self._after_hand_off(d)  # (the parked memory must not be left half brought up to date)
        if later:
            self._answer_later(report, evictions, labels, now)
        # What only metrics and writes read comes after the Bindings: a new pod waits for none of it.
        self._gauge(world, plan)
        self._reject(world)
        assert d.unschedulable is not None
        self._finish_writes(report, [] if later else evictions, victims, d.unschedulable, d.statuses, now,
                            d.ready_marks)
        keepable = later or self._keepable(d, victims, report)
        if victims and not keepable:
            # A full cycle must not see the pods just evicted as still running (it would pick them as victims
            # again): wait, briefly, for their deletion to reach the cache. A cycle that carries on knows them on
            # their way out already, and reads their deletion when it comes.
            evicted = {v.workload for v in victims} & set(report.evicted)
            self._await_gone([p for v in victims if v.workload in evicted for p in v.pods], _EVICTED_SEEN_WITHIN)
        if d.ooms and self.may_write():
            for pod, lesson in d.ooms:
                if lesson.offered and lesson.mig is not None:  # (the event once the resize is written, or not)
                    self.pool.submit(self._resize_mig, pod, lesson)
                else:
                    self.recorder.event(pod, OOM_REASON, lesson.text(), "Scheduling", type="Warning")
        # The fleet's gauges after the writes: the Bindings are on their way while they are worked out.
        self.fleet.observe(world, plan, counts=d.counts, changed=d.changed)
        if not later:
            self.fleet.carried_out(plan, victims, report.evicted)
        # After the writes (a refused eviction shields its victim); a gang that arrived in part wakes the loop when
        # its wait is over (not a timer of the kept cycle: the gang may be whole by then).
        report.next_due = self._next_due([*d.due, *_unjoined_due(world),
                                        *([] if d.wake is None else [d.wake])], now)
        self._keep(d, snapshot, keepable)
        report.api_s = time.perf_counter() - api_started
        self.metrics.cycle_phase.labels("core").inc(report.core_s)
        self.metrics.cycle_phase.labels("api").inc(report.api_s)
        self.metrics.cycle_duration.observe(report.core_s + report.api_s)
        if report.admitted or report.evicted or report.bind_failed or report.refused:
            log.info("cycle %d: %d admitted, %d pods bound, %d evicted, %d pending", report.number,
                     len(report.admitted), len(report.bound), len(report.evicted), report.pending,
                     extra={"cycle": report.number, "core_s": round(report.core_s, 4),
                            "api_s": round(report.api_s, 4), "policy_cycles": report.policy_cycles})
        return report

    # --- carrying on from the last cycle (gpufleet.live.increment) ----------------------------------------

    def _carry_on(self, snapshot: CacheSnapshot, now: float) -> _Decided | None:
        """The cycle's decisions from the last cycle's world and policy and the changes since, when those allow
        it (see gpufleet.live.increment); None: this cycle must rebuild everything."""
        kept, self.kept = self.kept, None  # taken whatever happens: a failure must not leave it half-changed
        if self._lapsed_answers():
            return None  # (an eviction the kept policy counted on was refused, or failed)
        changes = self.changes.between(kept.version if kept is not None else 0, snapshot.version)
        released, self._released_since = self._released_since, False
        # An assumption or a shield lapsing changes what the kept policy holds (capacity, candidates): a full cycle.
        lapsed = any(t is not None and t <= now for t in (self.assumed.next_expiry(), self.shields.next_expiry()))
        if (kept is None or changes is None or released or lapsed or kept.timer_due(now) or self.quarantine.held
                or now - self._last_full >= self.settings.cycle_period
                or any(t <= now for t in _unjoined_due(kept.world))):
            return None
        try:
            return self._decide_carried(snapshot, kept, changes, now)
        except Exception:
            log.exception("carrying on from the last cycle failed; rebuilding everything instead")
            return None

    def _decide_carried(self, snapshot: CacheSnapshot, kept: Kept, changes: list[CacheChange],
                        now: float) -> _Decided | None:
        started = time.perf_counter()
        s = self.settings
        carried = carried_pods(kept, changes, scheduler_name=s.scheduler_name, parse=self.parse,
                               assumed=self.assumed, require_mutation=s.webhook.require_mutation)
        if kept.owners_refused:
            self.parked.owners_changed()
        if carried is None or any(e.problem is not None for e in carried.new):
            return None
        queue_kinds = queue_kinds_read(self.queue_kinds.resources)
        # Objects of ours changed in place: their workloads grouped as they were before any read of the objects (a
        # queue change's reads the owners too: a review found an owner's move to another queue carried, unseen,
        # beside a Namespace relabelled), to compare with how they group after.
        before = self._changed_owners(kept, carried)
        if before is None:
            self.parked.owners_changed()
            return None
        # (before the owners: their read holds the world's queue generation to the cache's)
        if (carried.namespaces or carried.local_queues or carried.queue_specs) and not read_queue_changes(
                kept, snapshot, carried, now, parse=self.parse, scheduler_name=s.scheduler_name,
                queue_kinds=queue_kinds,
                requeue=lambda keys: self.requeues.apply(kept.policy, now, functools.partial(owners_of, kept.world),
                                                         only=keys)):
            return None
        if (carried.owners or carried.owners_gone) and not read_owners(
                kept.world, snapshot, carried.owners, parse=self.parse, scheduler_name=s.scheduler_name,
                queue_kinds=queue_kinds):
            return None
        if before and not owner_changes.read_same(kept.world, kept.policy, before,
                                                  {key: regrouped(kept.world, key) for key in before}):
            self.parked.owners_changed()
            return None
        # Nodes cordoned, tainted, relabelled or turning ready: in place, before anything is placed.
        apply_nodes(kept.world, kept.policy, carried.nodes, now)
        if carried.nodes or carried.gone:
            self.parked.nodes_changed()  # (its fingerprint of the nodes is a full cycle's)
        # What the node agent saw pods use, then the pods that ran out of GPU memory, told while their devices are
        # still theirs in the kept state (in a full cycle's order: what was free beside an OOM reads the
        # observations), the latter on a copy, kept only if this cycle carries on (a full cycle instead must tell
        # its own policy).
        if carried.observed:
            observed_memory.tell(kept.world, kept.policy, now, carried.observed)
        oom_memory = self.ooms.copy() if carried.oom else None
        ooms = oom_memory.learn(kept.world, kept.policy, carried.oom) if oom_memory is not None else []
        # What ended first: a Job's next pod after its last one finished makes a workload of its own again, as a
        # rebuild makes it (the kept world is dropped if extend() then says a full cycle is needed).
        release(kept, carried, now)
        if not hold_left_claims(kept.world, carried.claims_left):  # (their claims allocated until released)
            return None
        readmitted = list(carried.regroup)  # (made again from their pods, on their way out)
        if not remove_nodes(kept, carried.gone, now, readmitted):  # (drained, the releases took the last pods off)
            return None
        submitted = extend(kept, carried.new, now, readmitted)
        if submitted is None:
            return None
        world, policy = kept.world, kept.policy
        if len(self.requeues) and (submitted or readmitted):  # (a Job evicted for PodsReadyTimeout, made again)
            self.requeues.apply(policy, now, functools.partial(owners_of, world),
                                only={*(w.key for w in submitted), *readmitted})
        if carried.terminating:  # (workloads whose pods are all being deleted: on their way out)
            planner.terminating(world, policy, carried.terminating)
        # Pods created after their workload's admission, before anything new (a full cycle tries them all).
        repairs = gangs.join(world, policy, only=set(world.late)) if world.late else []
        due = [t for t in kept.due if t > now]
        landed = {world.workload_of[k] for k in carried.landed if k in world.workload_of}
        changed = landed | set(carried.ended) | {workload for workload, _ in carried.left} | {
            a.workload for a in repairs} | set(readmitted)
        # waitForPodsReady: the readiness of every workload whose pods changed (landed: their clocks start;
        # restated; a member gone, which may leave only unready ones; late members placed, or waiting for room: no
        # clock while a pod has no node), told to the core as a rebuild tells it all of them; the kept policy's own
        # deadlines (its timers) evict those that run out.
        marks = gangs.tell_readiness(world, policy, now, only=changed | set(world.late) | {
            world.workload_of[k] for k in carried.restated if k in world.workload_of}, seen_ready=self.seen_ready)
        world_s = time.perf_counter() - started
        plan = planner.run(policy, now, max_cycles=s.max_cycles_per_round, budget_s=s.round_budget,
                           on_admitted=None if (stream := self._stream()) is None else functools.partial(stream, world))
        self._timed_out = self._timeout_policies(world, plan)
        planner.ready_as_bound(policy, plan, now)
        self.parked.remember_parked(policy)  # its holders once the Bindings are handed off (_after_hand_off)
        if carried.namespaces or carried.local_queues or carried.queue_specs:  # (in place: what this round parks holds)
            self.parked.queues_changed(world.queue_generation)
        policy_s = time.perf_counter() - started - world_s
        counts = self._carried_counts(kept.counts, policy, submitted, plan)
        if oom_memory is not None:
            oom_memory.keep(policy)
            self.ooms = oom_memory
        return _Decided(world, repairs, plan, self._jobs(world, plan, repairs), self._victims(world, plan, repairs),
                        None, self._carried_statuses(snapshot, world, policy, counts, now), world_s, policy_s, due,
                        counts, changed, placed(plan), ooms, policy.next_wakeup(now), marks)

    @staticmethod
    def _changed_owners(kept: Kept, carried: Carried) -> dict[str, Workload | None] | None:
        """The workloads the objects of ours changed in place claim, as their pods group now (before the objects
        are read again); None (a full cycle) when one of them is made again in this cycle from its pods otherwise
        (a member finished, the workload ended or on its way out)."""
        if not carried.changed:
            return {}
        keys = owner_changes.affected(kept.world, carried.changed)
        busy = {*carried.regrouped, *carried.regroup, *carried.ended, *(w for w, _ in carried.left)}
        if keys is None or keys & busy or owner_changes.set_aside(kept.world, carried.changed):
            return None
        return {key: regrouped(kept.world, key) for key in keys}

    def _after_hand_off(self, d: _Decided) -> None:
        """What a carried cycle leaves until its Bindings are handed off, each of which looks at every pod of the
        cluster: the parked memory's holders (the pods this cycle placed count whether or not they are marked on
        their nodes by now, so the set is the one the policy's round ended with), and the pods' Unschedulable
        conditions (the pods sent to nodes meanwhile were not among them: the policy did not find them unfit)."""
        if d.placed is not None:
            self.parked.remember_holders(d.world, d.placed)
            d.placed = None
        if d.unschedulable is None:
            d.unschedulable = self._unschedulable(d.world, d.plan)

    @staticmethod
    def _carried_counts(counts: QueueCounts | None, policy: KueuePolicy, submitted: list[Workload],
                        plan: planner.Plan) -> QueueCounts:
        """The kept counts with this cycle's submissions and admissions; counted afresh after a preemption (its
        victims and their preemptors change state in ways not tracked here)."""
        if counts is None or plan.preempted:
            return QueueCounts(policy)
        new = {w.key for w in submitted}
        for key in new:
            if (info := policy.info(key)) is not None:
                counts.add(info)  # as it stands: pending, or admitted in this very cycle
        for a in plan.admitted:
            if a.workload not in new and (info := policy.info(a.workload)) is not None:
                counts.admitted(info)
        return counts

    def _carried_statuses(self, snapshot: CacheSnapshot, world: World, policy: KueuePolicy, counts: QueueCounts,
                          now: float) -> list[tuple[Any, JsonDict, JsonDict]]:
        """Queue statuses, at most every :data:`STATUS_EVERY` seconds: the work grows with every workload the
        policy holds, and a burst of new pods must not pay it for each."""
        if now - self._statuses_at < STATUS_EVERY:
            self._status_due = self._statuses_at + STATUS_EVERY
            return []
        self._statuses_at, self._status_due = now, None
        kinds = self.queue_kinds
        problems = {e.name or "": e.message for e in world.queues.problems.errors if e.kind == "ClusterQueue"}
        return queue_statuses(snapshot, policy, problems, now, cluster_queues=kinds.cluster_queues,
                              local_queues=kinds.local_queues, counts=counts)

    def _assume(self, world: World, jobs: list[BindJob], now: float) -> None:
        """The pods of ``jobs``, about to be handed to the binders, assumed where they are going (a cycle that
        starts meanwhile counts them there), and holding their nodes in the world this cycle keeps, as a rebuild
        sees them: a later cycle that carries on must find them there (their capacity, a preemption's victims)."""
        for job in jobs:
            for p in job.pods:
                self.assumed.assume(p.key, p.uid, Intent(p.node, p.devices, now), now)
                entry = world.pods.get(p.key)
                # (a pod a gang's repair or a late join placed holds its node in the world already: completing)
                if entry is not None and (entry.node is None or entry.completing):
                    entry.node, entry.devices, entry.assumed = p.node, p.devices, True
                    entry.intent = Intent(p.node, p.devices, now)

    @staticmethod
    def _preemption_only(d: _Decided, victims: list[Victim]) -> bool:
        """Whether ``victims`` are a preemption's alone (every one has a preemptor), and every workload the plan
        preempted among them."""
        evicted = {v.workload for v in victims}
        return all(v.preemptor for v in victims) and evicted == {p.workload for p in d.plan.preempted}

    def _keepable(self, d: _Decided, victims: list[Victim], report: CycleReport | None) -> bool:
        """Whether the next cycle may carry on from this one: not beside Kueue, with objects set aside or invalid (a
        full cycle holds their pods back), or after evictions but a preemption's and waitForPodsReady timeouts' whose
        every eviction was accepted. Those victims are on their way out in the kept policy (the core marked them so
        when it chose them, a timeout's as a preemption's): they hold their quota and nodes until their pods are
        gone, which the cycles that carry on read as they read any pod ending, and are not chosen again. A repair's
        evictions, a refusal (a shield the kept policy does not know), or a preempted workload
        with nothing to evict take a full cycle. (A preemption's evictions alone are kept before their answers:
        :meth:`_answer_later`.)"""
        if victims or d.plan.preempted:
            evicted = {v.workload for v in victims}
            if (report is None or report.refused or not evicted <= set(report.evicted)
                    or evicted != {p.workload for p in d.plan.preempted}  # (every one the policy evicts: a victim)
                    or any(not v.preemptor and v.reason != gangs.PODS_READY_TIMEOUT for v in victims)):
                return False
        return self._keepable_beside_evictions(d)

    def _keepable_beside_evictions(self, d: _Decided) -> bool:
        """:meth:`_keepable` but for the cycle's evictions."""
        # (unaccounted: pods a full cycle could not charge on their nodes; it retries at each cycle, as capacity
        # comes free, which carrying on would give to new pods instead. Not those bound to a node that is gone:
        # nothing comes free for them, and a node of that name joining takes a full cycle.)
        world = d.world
        return not (self.settings.beside_kueue.enabled or self.quarantine.held or world.invalid
                    or any((e := world.pods.get(k)) is not None and e.holds_capacity and e.node in world.cluster.nodes
                           for k in world.unaccounted))

    def _keep(self, d: _Decided, snapshot: CacheSnapshot, keepable: bool) -> None:
        """What the next cycle may carry on from (:meth:`_keepable` says whether it may)."""
        if not keepable:
            self.kept = None
            return
        # The room a preemption holds on nodes for its preemptor (the core's nominations) is not kept: a rebuilt
        # policy holds none, and makes it again when the preemptor is processed; kept, it would hold back workloads
        # a rebuild admits first. Nor is where the preemptor's flavor search was to resume (at the flavors of the
        # room, for its sake): with no room held it searches from the first flavor, as a rebuild does and as Kueue
        # does after a preemption (a review found it waiting for its victims in a later flavor while an earlier one
        # had come free).
        policy = d.plan.policy
        for key in policy.state.nominations:
            if (info := policy.info(key)) is not None:
                info.last_tried = None
        policy.state.nominations = {}
        self.kept = Kept(d.world, d.plan.policy, snapshot.version, d.due, d.counts)

    def _answer_later(self, report: CycleReport, evictions: list[tuple[Victim, Future[EvictResult]]],
                      labels: dict[str, tuple[str, str]], now: float) -> None:
        """A preemption's evictions, answered while the next cycles run: the cycle that chose them keeps its state
        at once (the victims on their way out), so a new pod waits for no eviction's round trips. An accepted one is
        counted on the report and in the metrics as it comes; a refused or failed one makes the next cycle a full
        one (:meth:`_lapsed_answers`: the refusal's shield first), which reads the victims off their pods again."""

        def answered(victim: Victim, ev: Future[EvictResult]) -> None:
            try:
                outcome: EvictResult | None = ev.result()
            except Exception:
                log.exception("eviction of %s failed", victim.workload)
                outcome = None
            if outcome is not None and outcome.outcome == "evicted":
                report.evicted.append(victim.workload)
                self.fleet.count_eviction(victim, labels[victim.workload])
                return
            with self._answers_lock:
                self._lapsed.append((report, victim, outcome, now))
            self.wakeup.poke()

        for victim, ev in evictions:
            ev.add_done_callback(functools.partial(answered, victim))

    def _lapsed_answers(self) -> bool:
        """The evictions answered since the last cycle that were not accepted (:meth:`_answer_later`): a refusal
        shields its victim, as a cycle that waited for it does. Whether there were any (a full cycle)."""
        with self._answers_lock:
            lapsed, self._lapsed = self._lapsed, []
        for report, victim, outcome, at in lapsed:
            if outcome is not None and outcome.outcome == "refused":
                report.refused.append(victim.workload)
                self.shields.add(victim.workload, at + (outcome.retry_after or self.settings.disruption_budget_backoff))
        return bool(lapsed)

    def _next_due(self, due: list[float], now: float) -> float | None:
        """The earliest of the cycle's timers, the assumptions' and the shields' expiries, after ``now`` (one
        already past was acted on by this cycle, or is not a timer: it must not make the loop spin)."""
        times = [*due, *(t for t in (self.assumed.next_expiry(), self.shields.next_expiry(), self._status_due)
                         if t is not None)]
        return min((t for t in times if t > now), default=None)

    # --- the core, and what to do when it fails ----------------------------------------------------------

    def _decide(self, snapshot: CacheSnapshot, now: float, assumed: AssumedPods,
                parked: planner.ParkedMemory, stream: BindStream | None = None,
                requeues: RequeueMemory | None = None, ooms: GpuOomMemory | None = None,
                seen_ready: set[str] | None = None) -> _Decided:
        """Everything the cycle decides from ``snapshot``: the part a poisoned object can make fail, and the part
        :meth:`_decide_isolating` reruns to find which object it is. Without a single write, but for the
        Bindings ``stream`` starts during the round. The decisions are :func:`gpufleet.live.decide.decide`'s, the
        dashboard's too."""
        started = time.perf_counter()
        s = self.settings
        kinds = self.queue_kinds = self.queues.kinds(snapshot)
        held = [(res, h.key, h.message) for h in self.quarantine.held
                if (res := self._resource(h.resource)) is not None]
        d = decide(snapshot, now, s, parse=self.parse, queue_resources=kinds.resources, assumed=assumed, parked=parked,
                   shields=self.shields.active(now), held=held, on_admitted=stream,
                   requeues=self.requeues if requeues is None else requeues,
                   seen_ready=self.seen_ready if seen_ready is None else seen_ready,
                   ooms=(memory := self.ooms.copy() if ooms is None else ooms))
        if ooms is None:  # (kept once the decisions are made: a failed attempt must not have told anything)
            self.ooms = memory
        world, repairs, due = d.world, d.repairs, d.due
        if self._marked:  # (those of pods gone: forgotten)
            self._marked &= {e.uid for e in world.pods.values()}
        if d.policy is None or d.plan is None:  # beside Kueue
            return self._decide_beside(snapshot, world, repairs, started, due)
        policy, plan = d.policy, d.plan
        self._timed_out = self._timeout_policies(world, plan)
        problems = {e.name or "": e.message for e in world.queues.problems.errors if e.kind == "ClusterQueue"}
        counts = QueueCounts(policy)
        return _Decided(world, repairs, plan, self._jobs(world, plan, repairs),
                        self._victims(world, plan, repairs), self._unschedulable(world, plan),
                        queue_statuses(snapshot, policy, problems, now, cluster_queues=kinds.cluster_queues,
                                       local_queues=kinds.local_queues, counts=counts), d.world_s, d.policy_s, due,
                        counts, ooms=d.ooms, wake=d.wake, ready_marks=d.ready_marks)

    @staticmethod
    def _timeout_policies(world: World, plan: planner.Plan) -> dict[str, tuple[PodsReadyPolicy, frozenset[str]]]:
        """What the requeue memory records of each workload the plan evicts for a waitForPodsReady timeout, once
        its eviction is accepted: its waitForPodsReady policy and its owners (gpufleet.live.requeues)."""
        return {p.workload: (policy, owners_of(world, p.workload)) for p in plan.preempted
                if p.reason == gangs.PODS_READY_TIMEOUT and (policy := plan.pods_ready_policy(p.workload)) is not None}

    def _decide_beside(self, snapshot: CacheSnapshot, world: World, repairs: list[gangs.GangAction],
                       started: float, due: list[float]) -> _Decided:
        """Beside Kueue (gpufleet.live.beside): Kueue admitted, we place and answer our AdmissionChecks; Kueue
        writes the queue statuses and does preemption and waitForPodsReady."""
        s = self.settings
        world_s = time.perf_counter() - started
        result = beside.plan(world, snapshot, controller=s.beside_kueue.admission_check_controller,
                             profile=s.placement_profile, parses=self.kueue_workloads,
                             max_cycles=s.max_cycles_per_round, budget_s=s.round_budget)
        policy_s = time.perf_counter() - started - world_s
        plan = result.plan
        return _Decided(world, repairs, plan, self._jobs(world, plan, repairs), self._victims(world, plan, repairs),
                        self._unschedulable(world, plan), beside.status_writes(result, world.now), world_s, policy_s,
                        due)

    def _decide_isolating(self, snapshot: CacheSnapshot, now: float) -> _Decided:
        """:meth:`_decide`, and when it raises, find the object responsible, set it aside and decide again
        without it (at most :data:`MAX_CULPRITS_PER_CYCLE` times); re-raise what no object explains."""
        for attempt in range(MAX_CULPRITS_PER_CYCLE + 1):
            filtered = self.quarantine.filter(snapshot)
            try:
                # A stream per attempt: what a failed one buffered is not sent with the next one's admissions.
                return self._decide(filtered, now, self.assumed, self.parked, self._stream())
            except Exception as exc:
                if attempt == MAX_CULPRITS_PER_CYCLE:
                    raise
                log.exception("scheduling cycle %d failed; looking for the object responsible", self.count)
                culprit = find_culprit(filtered, lambda trial: self._fails(trial, now))
                if culprit is None:
                    raise
                if culprit[0] == r.PODS.key and culprit[1] in self._streamed:
                    # Its Binding is on its way (handed over during the failed round): set aside, it would no longer
                    # be counted where it is going. The next cycle finds it there.
                    log.error("scheduling cycle %d failed on pod %s, whose Binding is already on its way; it is not "
                              "set aside", self.count, culprit[1])
                    raise
                self._hold(filtered, culprit, exc)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _fails(self, snapshot: CacheSnapshot, now: float) -> bool:
        """Whether the core raises on ``snapshot``, run on copies of the state it would otherwise change."""
        try:
            self._decide(snapshot, now, self.assumed.copy(), copy.copy(self.parked), requeues=self.requeues.copy(),
                         ooms=self.ooms.copy(), seen_ready=set(self.seen_ready))
        except Exception:
            return True
        return False

    def _hold(self, snapshot: CacheSnapshot, culprit: tuple[str, str], exc: Exception) -> None:
        resource_key, key = culprit
        resource = self._resource(resource_key)
        obj = snapshot.objects[resource_key][key]
        why = f"{type(exc).__name__}: {shown(str(exc), 200)}"
        self.quarantine.hold(resource or r.PODS, key, obj, why)
        kind = resource.kind if resource else resource_key
        log.error("%s %s set aside: without it the scheduling cycle succeeds (%s); it gets another chance when "
                  "it changes", kind, key, why, extra={"object": f"{kind}/{key}"})
        message = (f"gpufleet set this {kind} aside: scheduling failed with it ({why}) and succeeds without it; "
                   "edit or recreate it to have it considered again")
        if resource is not None and self.may_write():
            self.pool.submit(self._tell, resource, obj, message, time.time())

    def _tell(self, resource: ResourceType, obj: JsonDict, message: str, now: float) -> None:
        """A Warning event on the object (and, for a pod of ours, the Unschedulable condition)."""
        regarding = {**obj, "apiVersion": resource.api_version, "kind": resource.kind}
        spec = obj.get("spec") or {}
        if resource is r.PODS and spec.get("schedulerName") == self.settings.scheduler_name \
                and not spec.get("nodeName"):
            self.recorder.unschedulable(regarding, message, now)
        else:
            self.recorder.event(regarding, "Rejected", message, "Scheduling", type="Warning")

    def _reject(self, world: World) -> None:
        """Count invalid and set-aside objects; tell about each invalid one once per version (our pending
        pods are told through their Unschedulable condition already)."""
        leading = self.may_write()
        fresh = self.quarantine.set_invalid(world.invalid, tell=leading)
        if leading:
            for rejection, obj in fresh:
                if rejection.kind != "Pod":
                    log.warning("%s %s: %s", rejection.kind, rejection.key, rejection.message)
                    resource = self._resource(rejection.resource)
                    if resource is not None:
                        self.pool.submit(self._tell, resource, dict(obj), rejection.message, time.time())
        self.metrics.set_rejected(self.quarantine.counts())

    def _resource(self, key: str) -> ResourceType | None:
        """The type of a resource key: as watched (the version the cluster serves), else as gpufleet knows it."""
        return self.watched.get(key) or r.by_key(key)

    # --- plans ------------------------------------------------------------------------------------------

    def _stream(self) -> BindStream | None:
        """A new stream for a round of the running cycle (None outside :meth:`run`)."""
        return None if self._send is None else BindStream(self._send, bindstream.BATCH, bindstream.EVERY_S)

    def _send_early(self, report: CycleReport, now: float, world: World, admitted: list[AdmittedWorkload]) -> None:
        """Start the Bindings of admissions the round has just made (gpufleet.live.bindstream): their pods assumed
        and marked as sent in the world, as :meth:`run` does with the cycle's jobs, so the round's end leaves
        them out."""
        if self._stream_needs is None or self._stream_needs[0] is not world:
            self._stream_needs = (world, self._needs(world))
        jobs = self._admission_jobs(world, self._stream_needs[1], admitted)
        self._assume(world, jobs, now)
        self._streamed.update(p.key for job in jobs for p in job.pods)
        self.binds.submit(report, jobs, now)

    @staticmethod
    def _needs(world: World) -> dict[str, DraNeed]:
        """The pods' resolved DRA claims (none to look up without DRA claims in the cluster)."""
        return pod_needs((p.key, p.template.dra) for w in world.workloads for p in w.pods) \
            if world.dra.resource_claims else {}

    def _admission_jobs(self, world: World, needs: dict[str, DraNeed],
                        admissions: Iterable[AdmittedWorkload]) -> list[BindJob]:
        """A bind job per admission, of its pods placed and not sent to a node yet."""
        jobs: list[BindJob] = []
        for admitted in admissions:
            members = [p for p in admitted.pods if p.node is not None and p.pod in world.pods]
            pods = tuple(self._pod_bind(world, needs, p.pod) for p in members
                         if world.pods[p.pod].node is None and not world.pods[p.pod].bound)
            if pods:
                jobs.append(BindJob(admitted.workload, pods))
        return jobs

    def _jobs(self, world: World, plan: planner.Plan, repairs: Iterable[gangs.GangAction]) -> list[BindJob]:
        jobs: list[BindJob] = []
        # The pods' resolved DRA claims, once per cycle.
        needs = self._stream_needs[1] if self._stream_needs is not None and self._stream_needs[0] is world \
            else self._needs(world)
        for action in repairs:
            if action.kind == "complete":
                jobs.append(BindJob(action.workload,
                                    tuple(self._pod_bind(world, needs, k) for k in action.pods)))
        for key in world.claim_bound:
            # its claims are allocated and reserved for it: it is bound where they are (kube-scheduler binds such
            # a pod to its allocation's node too)
            if key in world.workload_of and key in world.cluster.placements:
                jobs.append(BindJob(world.workload_of[key], (self._pod_bind(world, needs, key),)))
        world.claim_bound.clear()  # sent once: a cycle that carries on from this world must not send them again
        # (the admissions sent during the round are marked on their nodes: left out)
        jobs += self._admission_jobs(world, needs, plan.admitted)
        return jobs

    def _pod_bind(self, world: World, needs: dict[str, DraNeed], key: str) -> PodBind:
        entry = world.pods[key]
        placement = world.cluster.placements[key]
        node = world.cluster.nodes[placement.node]
        visible = visible_devices(node, placement.grants)
        devices = placement.device_ids
        return PodBind(key, entry.uid, placement.node, devices, visible, entry.raw,
                       claims=_claim_writes(needs, world, key, placement.node, devices))

    def _victims(self, world: World, plan: planner.Plan, actions: Iterable[gangs.GangAction]) -> list[Victim]:
        out: list[Victim] = []
        for p in plan.preempted:
            pods = tuple(world.pods[k].raw for k in world.pods_of.get(p.workload, [])
                         if k in world.pods and world.pods[k].holds_capacity)
            if pods:  # nothing on a node (already gone): nothing to evict
                out.append(Victim(p.workload, p.preemptor, p.reason, pods, _timeout_note(plan, p)))
        preempted = {v.workload for v in out}
        for a in actions:
            if a.kind == "evict" and a.workload not in preempted:  # (preempted already: evicted once, as that)
                out.append(Victim(a.workload, "", a.reason, tuple(world.pods[k].raw for k in a.pods), a.message))
        return out

    def _unschedulable(self, world: World, plan: planner.Plan) -> list[tuple[JsonDict, str]]:
        out: list[tuple[JsonDict, str]] = []
        for e in world.pending():
            if e.completing:
                continue
            if e.problem is not None or e.waiting is not None:
                out.append((e.raw, e.problem or e.waiting or ""))
                continue
            workload = world.workload_of.get(e.key)
            message = plan.pending.get(workload or "")
            # Only workloads the policy evaluated and found unfit get the condition, as kube-scheduler sets it
            # only after an attempt: one merely waiting for its turn in a queue (Kueue keeps those gated)
            # shows in the queue's status and the pending gauge instead. Thousands of queued pods would
            # otherwise cost two writes each whenever the queue moves.
            info = plan.policy.info(workload) if workload is not None else None
            if not message or info is None or not info.message:
                continue  # not evaluated, or evaluated and fit: its place in the queue is all there is to say
            out.append((e.raw, message))
        return out

    def _gauge(self, world: World, plan: planner.Plan) -> None:
        counts: dict[tuple[str, str], int] = {}
        for workload in plan.pending:
            info = plan.policy.info(workload)
            key = ((info.cluster_queue or "") if info else "", pending_reason(info))
            counts[key] = counts.get(key, 0) + 1
        for e in world.pending():
            if e.problem is not None:
                counts[("", "Invalid")] = counts.get(("", "Invalid"), 0) + 1
        self.metrics.set_pending(counts)

    # --- writes -----------------------------------------------------------------------------------------

    def _hand_off(self, report: CycleReport, jobs: list[BindJob], victims: list[Victim],
                  now: float) -> list[tuple[Victim, Future[EvictResult]]]:
        """Start the evictions and the Bindings; the evictions' futures, for :meth:`_finish_writes`."""
        pool = self.pool
        evictions: list[tuple[Victim, Future[EvictResult]]] = [(v, pool.submit(self.evictor.evict, v))
                                                               for v in victims]
        # Not waited for: the binding workers fill in the report's bound and bind_failed as the jobs end, and
        # release the assumptions of pods not bound (gpufleet.live.bindqueue).
        self.binds.submit(report, jobs, now)
        self._round_cut = (report.policy_s >= self.settings.round_budget
                           or report.policy_cycles >= self.settings.max_cycles_per_round)
        if self._round_cut:
            self.wakeup.poke()  # the round stopped at its budget or cycle limit: there may be more to admit
        return evictions

    def _resize_mig(self, pod: JsonDict, lesson: OomLesson) -> None:
        """A MIG resize the core offered after an OOM, written on the workload's object (gpufleet.live.mig_resize);
        the pod's Warning event says what was written, or why nothing was."""
        try:
            text = self.resizer.resize(pod, lesson) if self.may_write() else lesson.text()
        except Exception:  # a bug here must cost the resize, not the pool's thread or the event
            log.exception("MIG resize after an OOM failed")
            text = lesson.text()
        self.recorder.event(pod, OOM_REASON, text, "Scheduling", type="Warning")

    def _finish_writes(self, report: CycleReport, evictions: list[tuple[Victim, Future[EvictResult]]],
                       victims: list[Victim], unschedulable: list[tuple[JsonDict, str]],
                       statuses: list[tuple[Any, JsonDict, JsonDict]], now: float,
                       ready_marks: Sequence[JsonDict] = ()) -> None:
        """The conditions and queue statuses, then wait for them and for the evictions :meth:`_hand_off` started."""
        pool = self.pool
        others: list[Future[Any]] = []
        if self.may_write():
            others += [pool.submit(self.recorder.unschedulable, pod, msg, now) for pod, msg in unschedulable
                       if self.recorder.unschedulable_is_new(pod, msg)]
            others += [pool.submit(write_status, self.writes, res, obj, st) for res, obj, st in statuses]
            for pod in ready_marks:  # (once per pod: the cache shows the condition a moment later)
                uid = (pod.get("metadata") or {}).get("uid")
                if uid not in self._marked:
                    self._marked.add(uid)
                    others.append(pool.submit(self.recorder.was_ready, pod, gangs.WAS_READY_CONDITION, now))
        for victim, ev in evictions:
            try:
                outcome = ev.result()
            except Exception:
                log.exception("eviction of %s failed", victim.workload)
                continue
            if outcome.outcome == "evicted":
                self._evicted(report, victim, now)
            elif outcome.outcome == "refused":
                report.refused.append(victim.workload)
                backoff = outcome.retry_after or self.settings.disruption_budget_backoff
                self.shields.add(victim.workload, now + backoff)
        for other in others:
            try:
                other.result()
            except Exception:
                log.exception("a status or condition write failed")

    def _evicted(self, report: CycleReport, victim: Victim, now: float) -> None:
        """``victim``'s eviction, waited for by its cycle, was accepted: counted, and a waitForPodsReady timeout's
        remembered for the workload's requeue backoff (gpufleet.live.requeues)."""
        report.evicted.append(victim.workload)
        if victim.reason in (gangs.PODS_READY_TIMEOUT, gangs.GANG_INCOMPLETE):
            self.metrics.gang_timeouts.labels(victim.reason).inc()
        timed_out = self._timed_out.get(victim.workload)
        if victim.reason == gangs.PODS_READY_TIMEOUT and timed_out is not None:
            ready_policy, owners = timed_out
            pods = frozenset(uid for p in victim.pods if (uid := (p.get("metadata") or {}).get("uid")))
            self.requeues.evicted(victim.workload, ready_policy, now, owners, pods)

    def _await_gone(self, pods: list[JsonDict], timeout: float) -> None:
        """Until the cache shows every pod of ``pods`` deleted, replaced or terminating, or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        version = self.cache.version

        def present(raw: JsonDict) -> bool:
            cached = self.cache.get(r.PODS, r.PODS.object_key(raw))
            meta = (cached or {}).get("metadata") or {}
            return cached is not None and meta.get("uid") == (raw.get("metadata") or {}).get("uid") \
                and not meta.get("deletionTimestamp")

        while any(present(p) for p in pods):
            left = deadline - time.monotonic()
            if left <= 0:
                log.debug("evicted pods still in the cache after %gs", timeout)
                return
            version = self.cache.wait_for_change(version, timeout=left)

