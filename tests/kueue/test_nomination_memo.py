"""Remembered nominations decide exactly as nominating every head afresh (issue 15, item 7).

The reference is the same policy with ``state.memo = None``: every head gets its own flavor assignment and
preemption search in every cycle. Random setups are built to make the memo share as much as it can, and to trip
it where it must not: several ClusterQueues with the same spec side by side (so that queues alike share one
nomination), flavors with taints and node labels (pod sets that tolerate or select them), two resources in one
group and a second group, partial admission, every preemption policy, lending and borrowing limits, a nested
cohort, a namespace that one queue's selector refuses, fair sharing on or off. The driver submits, finishes,
evicts and runs cycles in a random order; every decision of every cycle (admissions with flavors and usage,
preemptions with preemptor and reason, pending workloads with their messages) and the final pending report must
be the same.

Queues above their quota are described by value only where no search of their heads can read another queue's
candidates (kueue.memo's docstring): the setups make such queues often (nominal quotas of 0, borrowing without
limit, low-priority workloads admitted first, then higher ones) on both sides of that condition
(borrowWithinCohort Never or not, reclaimWithinCohort Never, a nested cohort), and cut the number of own
candidates described by value low at times, so that a queue with more is keyed by its name.
``GPUFLEET_MEMO_EXAMPLES`` sets the number of examples (1000 by default).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpufleet.api.manifests import Manifests
from gpufleet.api.objects import (
    BorrowWithinCohort,
    ClusterQueue,
    Cohort,
    FlavorFungibility,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    Namespace,
    ObjectMeta,
    PodTemplate,
    PreemptionPolicy,
    Quota,
    ResourceFlavor,
    ResourceGroup,
    SchedulerConfig,
    Taint,
    Toleration,
)
from gpufleet.cluster.workloads import PodSet, Workload, WorkloadPod
from gpufleet.scheduling.kueue import KueuePolicy
from gpufleet.scheduling.kueue import memo as memo_module
from gpufleet.scheduling.kueue.admitted import AdmittedQueue, CandidateValue, CandidateValues, candidate_value
from gpufleet.scheduling.kueue.config import CQSpec
from gpufleet.scheduling.kueue.info import AdmissionRecord, WorkloadInfo
from gpufleet.scheduling.kueue.memo import Lookup, Nomination, NominationMemo
from gpufleet.scheduling.types import Decisions

CPU = 1000
GI = 1 << 30
FLAVORS = ("on-demand", "spot", "reserved")
EXAMPLES = int(os.environ.get("GPUFLEET_MEMO_EXAMPLES", "1000"))


@dataclass(frozen=True)
class QueueSpec:
    flavors: tuple[str, ...]  # of the cpu/memory group, in order
    nominal: tuple[int, int]  # cpu, memory (GiB), per flavor
    borrowing_limit: int | None
    lending_limit: int | None
    parent: str | None  # "pool", "sub" (a cohort below pool) or None
    within: str
    reclaim: str
    bwc: bool
    threshold: int | None
    strategy: str
    fungibility: tuple[str, str]
    gpus: int | None  # a second resource group (nvidia.com/gpu, flavor "reserved") when set
    copies: int  # queues made from this spec (alike but for their names)


@st.composite
def queue_specs(draw: st.DrawFn) -> QueueSpec:
    reclaim = draw(st.sampled_from(["Never", "LowerPriority", "Any", "Any"]))
    parent = draw(st.sampled_from(["pool", "pool", "pool", "sub", None]))
    # A tight queue (one flavor, 0 or 1 cpu and no memory of its own, no GPU group) is at or above every nominal
    # quota as soon as it borrows: the memo's condition for describing a queue above its quota by value.
    tight = draw(st.booleans())
    return QueueSpec(
        flavors=FLAVORS[:1] if tight else tuple(draw(st.lists(st.sampled_from(FLAVORS[:2]), min_size=1, max_size=2,
                                                               unique=True))),
        nominal=(draw(st.integers(0, 1)), 0) if tight else (draw(st.integers(0, 3)), draw(st.integers(0, 4))),
        borrowing_limit=draw(st.none() | st.none() | st.integers(0, 6)) if parent else None,
        lending_limit=draw(st.none() | st.integers(0, 2)) if parent else None,
        parent=parent,
        within=draw(st.sampled_from(["Never", "LowerPriority", "LowerPriority", "LowerOrNewerEqualPriority"])),
        reclaim=reclaim,
        bwc=reclaim != "Never" and draw(st.booleans()),
        threshold=draw(st.none() | st.integers(0, 3)),
        strategy=draw(st.sampled_from(["BestEffortFIFO", "BestEffortFIFO", "StrictFIFO"])),
        fungibility=(draw(st.sampled_from(["Borrow", "TryNextFlavor"])),
                     draw(st.sampled_from(["Preempt", "TryNextFlavor"]))),
        gpus=None if tight else draw(st.none() | st.integers(0, 2)),
        copies=draw(st.sampled_from([1, 2, 3, 3])),
    )


# A queue that lends: capacity in the root cohort for the others to borrow (and fight over).
LENDER = QueueSpec(flavors=FLAVORS[:2], nominal=(6, 4), borrowing_limit=None, lending_limit=None, parent="pool",
                   within="Never", reclaim="Never", bwc=False, threshold=None, strategy="BestEffortFIFO",
                   fungibility=("Borrow", "TryNextFlavor"), gpus=2, copies=1)


@dataclass(frozen=True)
class Shape:
    """What workloads of one kind ask for: few shapes, so that heads alike meet queues alike."""

    cpu: int
    memory: int
    gpu: int
    count: int
    min_count: int | None
    priority: int
    tolerate_spot: bool
    select: str | None  # node selector on the flavor label


@st.composite
def shapes(draw: st.DrawFn) -> Shape:
    count = draw(st.integers(1, 2))
    return Shape(
        cpu=draw(st.integers(1, 2)),
        memory=draw(st.integers(0, 1)),
        gpu=draw(st.sampled_from([0, 0, 0, 0, 1])),
        count=count,
        min_count=draw(st.none() | st.integers(1, count)) if count > 1 else None,
        priority=draw(st.integers(0, 3)),
        tolerate_spot=draw(st.sampled_from([True, True, False])),
        select=draw(st.sampled_from([None, None, None, None, None, "on-demand", "spot"])),
    )


@dataclass(frozen=True)
class WorkloadSpec:
    queue: int  # 11: from the namespace the first spec's queues refuse
    shape: int
    created: int
    mirror: bool = False  # one like it in every copy of its queue's spec (queues alike stay alike in usage)


def workload_specs() -> st.SearchStrategy[WorkloadSpec]:
    return st.builds(WorkloadSpec, queue=st.integers(0, 11), shape=st.integers(0, 2), created=st.integers(0, 9),
                     mirror=st.booleans())


# ("submit", n workloads) | ("cycle", 0) | ("finish", i) | ("evict", i) of the i-th running workload, modulo
# their number | ("confirm", 0): the pods of the earliest preempted workload are gone
Step = tuple[str, int]


def steps() -> st.SearchStrategy[list[Step]]:
    cycle = st.tuples(st.just("cycle"), st.just(0))
    return st.lists(st.one_of(st.tuples(st.just("submit"), st.integers(1, 12)), cycle, cycle, cycle,
                              st.tuples(st.sampled_from(["finish", "evict"]), st.integers(0, 50)),
                              st.tuples(st.just("confirm"), st.just(0))),
                    min_size=6, max_size=30)


def manifests(specs: list[QueueSpec], fair: bool) -> tuple[Manifests, list[str]]:
    m = Manifests(config=SchedulerConfig(fair_sharing=fair))
    m.flavors.append(ResourceFlavor(ObjectMeta("on-demand"), node_labels={"pool": "on-demand"}))
    m.flavors.append(ResourceFlavor(ObjectMeta("spot"), node_labels={"pool": "spot"},
                                    node_taints=(Taint("spot", "true", "NoSchedule"),)))
    m.flavors.append(ResourceFlavor(ObjectMeta("reserved")))
    m.cohorts.append(Cohort(ObjectMeta("pool")))
    m.cohorts.append(Cohort(ObjectMeta("sub"), parent="pool", resource_groups=[ResourceGroup(
        ("cpu", "memory"), [FlavorQuotas("on-demand", {"cpu": Quota(1 * CPU), "memory": Quota(1 * GI)})])]))
    m.namespaces.append(Namespace(ObjectMeta("outsider", labels={"team": "other"})))
    names: list[str] = []
    for i, q in enumerate(specs):
        for copy in range(q.copies):
            name = f"cq{i}-{copy}"
            names.append(name)
            flavors = [FlavorQuotas(f, {
                "cpu": Quota(q.nominal[0] * CPU, None if q.borrowing_limit is None else q.borrowing_limit * CPU,
                             None if q.lending_limit is None else q.lending_limit * CPU),
                "memory": Quota(q.nominal[1] * GI)}) for f in q.flavors]
            groups = [ResourceGroup(("cpu", "memory"), flavors)]
            if q.gpus is not None:
                groups.append(ResourceGroup(("nvidia.com/gpu",), [FlavorQuotas("reserved", {
                    "nvidia.com/gpu": Quota(q.gpus * 1000)})]))
            bwc = BorrowWithinCohort(cast(Any, "LowerPriority" if q.bwc else "Never"), q.threshold)
            # The queues of the first spec refuse the "outsider" namespace.
            selector = LabelSelector(match_labels=(("team", "mine"),)) if i == 0 else LabelSelector()
            m.cluster_queues.append(ClusterQueue(
                ObjectMeta(name), groups, cohort=q.parent, namespace_selector=selector,
                queueing_strategy=cast(Any, q.strategy),
                preemption=PreemptionPolicy(cast(Any, q.within), cast(Any, q.reclaim), bwc),
                flavor_fungibility=FlavorFungibility(cast(Any, q.fungibility[0]), cast(Any, q.fungibility[1]))))
            m.local_queues.append(LocalQueue(ObjectMeta("q", namespace=name), name))
            m.namespaces.append(Namespace(ObjectMeta(name, labels={"team": "mine"})))
        m.local_queues.append(LocalQueue(ObjectMeta(f"q{i}", namespace="outsider"), f"cq{i}-0"))
    return m, names


def workload(i: int, spec: WorkloadSpec, queues: list[str], kinds: list[Shape]) -> Workload:
    outsider = spec.queue == 11  # queued from a namespace the first spec's queues refuse
    queue = queues[spec.queue % len(queues)]
    ns = "outsider" if outsider else queue
    local = f"q{int(queue[2:].split('-')[0])}" if outsider else "q"
    shape = kinds[spec.shape % len(kinds)]
    requests = {"cpu": shape.cpu * CPU}
    if shape.memory:
        requests["memory"] = shape.memory * GI
    if shape.gpu:
        requests["nvidia.com/gpu"] = shape.gpu
    t = PodTemplate(labels={}, annotations={}, requests=requests, limits={},
                    node_selector={"pool": shape.select} if shape.select else {},
                    tolerations=(Toleration("spot", "Equal", "true", "NoSchedule"),) if shape.tolerate_spot else ())
    key = f"{ns}/w{i}"
    return Workload(key=key, namespace=ns, name=f"w{i}", kind="Job", queue=local, priority=shape.priority,
                    created=float(spec.created), pod_sets=[PodSet("main", shape.count, t, shape.min_count)],
                    pods=[WorkloadPod(f"{key}-{k}", t, "main") for k in range(shape.count)], order=i)


def submitted(i: int, spec: WorkloadSpec, queues: list[str], kinds: list[Shape]) -> list[Workload]:
    """The workload, and with ``mirror`` one like it in each other copy of its queue's spec."""
    first = workload(i, spec, queues, kinds)
    if not spec.mirror or spec.queue == 11:
        return [first]
    queue = queues[spec.queue % len(queues)]
    copies = [k for k, q in enumerate(queues) if q.split("-")[0] == queue.split("-")[0] and q != queue]
    return [first, *(workload(i, WorkloadSpec(k, spec.shape, spec.created), queues, kinds) for k in copies)]


def decided(d: Decisions) -> tuple[object, ...]:
    return (sorted((a.workload, a.cluster_queue, sorted(a.flavors.items()), sorted(a.usage.items()))
                   for a in d.admitted),
            [(p.workload, p.preemptor, p.reason) for p in d.preempted],
            sorted((p.workload, p.reason) for p in d.pending))


class WatchedMemo:
    """Counts, for the events of the property test, the lookups answered with a nomination made for another queue,
    and the lookups of queues above their quota that the memo described by value (its ``above_quota`` counter moved)
    by the reason it could (the queue's heads never read other queues' candidates, or only while the queue is at or
    above every nominal quota), with own candidates by value (a miss's ``Lookup.n``, a hit's mapped targets), and
    answered with another queue's nomination."""

    def __init__(self, memo: NominationMemo) -> None:
        self.seen: Counter[str] = Counter()
        self.shared = 0
        self._lookup = memo.lookup
        self._memo = memo
        memo.lookup = self.lookup  # type: ignore[method-assign]

    def lookup(self, info: WorkloadInfo, cq: CQSpec) -> Nomination | Lookup:
        above = self._memo.above_quota
        found = self._lookup(info, cq)
        another = isinstance(found, Nomination) and found.made_for != cq.name
        self.shared += another
        if self._memo.above_quota > above:
            why = "reclaimWithinCohort Never or no cohort" if self._memo._queues[cq.name].isolated else (
                "borrowWithinCohort Never, at its nominal quotas")
            self.seen[why] += 1
            if found.n if isinstance(found, Lookup) else found.maps_own:
                self.seen[why + ", with own candidates by value"] += 1
            if another:
                self.seen[why + ", answered with another queue's nomination"] += 1
        return found


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(queue_specs(), min_size=1, max_size=3), kinds=st.lists(shapes(), min_size=2, max_size=3),
       jobs=st.lists(workload_specs(), min_size=15, max_size=60), script=steps(), fair=st.booleans(),
       rising=st.booleans(), lender=st.booleans(), cap=st.sampled_from([1, 3, memo_module.MAX_OWN_BY_VALUE]))
def test_remembered_nominations_decide_as_fresh_ones(specs: list[QueueSpec], kinds: list[Shape],
                                                    jobs: list[WorkloadSpec], script: list[Step], fair: bool,
                                                    rising: bool, lender: bool, cap: int) -> None:
    with own_cap(cap):
        _decide_alike([*specs, LENDER] if lender else specs, kinds, jobs, script, fair, rising)


@st.composite
def contested_specs(draw: st.DrawFn) -> list[QueueSpec]:
    """Copies of a tight spec (one flavor, 0 or 1 cpu and no memory of its own) that borrow from a lender in the
    root cohort or below it, with every preemption policy: queues above their quota, alike, fighting over the
    same capacity, on both sides of the memo's condition for describing them by value."""
    reclaim = draw(st.sampled_from(["Never", "LowerPriority", "Any"]))
    parent = draw(st.sampled_from(["pool", "pool", "sub"]))
    tight = QueueSpec(
        flavors=FLAVORS[:1], nominal=(draw(st.integers(0, 1)), 0),
        borrowing_limit=draw(st.none() | st.integers(1, 6)), lending_limit=None, parent=parent,
        within=draw(st.sampled_from(["Never", "LowerPriority", "LowerOrNewerEqualPriority"])), reclaim=reclaim,
        bwc=reclaim != "Never" and draw(st.booleans()), threshold=draw(st.none() | st.integers(0, 2)),
        strategy=draw(st.sampled_from(["BestEffortFIFO", "StrictFIFO"])),
        fungibility=("Borrow", draw(st.sampled_from(["Preempt", "TryNextFlavor"]))), gpus=None,
        copies=draw(st.integers(2, 3)))
    # The root cohort holds the lender's cpu, the copies' and the nested cohort's 1: often a multiple of the
    # number of copies, so that copies filling it one workload at a time stay alike.
    lender = QueueSpec(flavors=FLAVORS[:1], nominal=(draw(st.sampled_from([1, 3, 5])), 0), borrowing_limit=None,
                       lending_limit=None, parent="pool", within="Never", reclaim="Never", bwc=False, threshold=None,
                       strategy="BestEffortFIFO", fungibility=("Borrow", "TryNextFlavor"), gpus=None, copies=1)
    return [tight, lender]


def contested_shapes() -> st.SearchStrategy[Shape]:
    return st.builds(Shape, cpu=st.just(1), memory=st.just(0), gpu=st.just(0), count=st.just(1),
                     min_count=st.none(), priority=st.integers(0, 3), tolerate_spot=st.just(False), select=st.none())


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=contested_specs(), kinds=st.lists(contested_shapes(), min_size=2, max_size=3),
       jobs=st.lists(st.builds(WorkloadSpec, queue=st.integers(0, 2), shape=st.integers(0, 2),
                               created=st.integers(0, 9), mirror=st.sampled_from([True, True, False])),
                     min_size=6, max_size=30),
       script=steps(), cap=st.sampled_from([1, 3, memo_module.MAX_OWN_BY_VALUE]))
def test_queues_above_quota_decide_as_fresh_ones(specs: list[QueueSpec], kinds: list[Shape],
                                                 jobs: list[WorkloadSpec], script: list[Step], cap: int) -> None:
    """The property above, on setups made for the memo's condition on queues above their quota: low-priority
    workloads first (mirrored in every copy, so that the copies stay alike), then the rest."""
    with own_cap(cap):
        _decide_alike(specs, kinds, jobs, script, False, True, warmup=5)


def _round(policies: list[KueuePolicy], now: float, workloads: list[Workload]) -> list[tuple[object, ...]]:
    """Submit ``workloads`` to every policy, run a cycle in each: their decisions, memo first."""
    for w in workloads:
        for p in policies:
            p.submit(w, now)
    return [decided(p.cycle(now)) for p in policies]


def _cpu_shape(cpu: int, priority: int) -> Shape:
    """One pod asking for ``cpu`` cpu and nothing else."""
    return Shape(cpu=cpu, memory=0, gpu=0, count=1, min_count=None, priority=priority, tolerate_spot=False,
                 select=None)


def _memo_and_reference(m: Manifests) -> list[KueuePolicy]:
    """Two policies on the same manifests: the first with the memo, the second the reference (every head
    nominated afresh)."""
    policies = [KueuePolicy(m), KueuePolicy(m)]
    policies[1].state.memo = None
    return policies


def _pair_beside_lender(pair_cpu: int, lender_cpu: int, bwc: bool) -> tuple[Manifests, list[str]]:
    """Two queues alike (nominal ``pair_cpu`` cpu and 0 memory, borrowing without limit, withinClusterQueue
    LowerPriority, reclaimWithinCohort Any, borrowWithinCohort as ``bwc``) under the root cohort beside a lender
    of ``lender_cpu`` cpu that preempts nothing."""
    pair = QueueSpec(flavors=("on-demand",), nominal=(pair_cpu, 0), borrowing_limit=None, lending_limit=None,
                     parent="pool", within="LowerPriority", reclaim="Any", bwc=bwc, threshold=None,
                     strategy="BestEffortFIFO", fungibility=("Borrow", "TryNextFlavor"), gpus=None, copies=2)
    lender = QueueSpec(flavors=("on-demand",), nominal=(lender_cpu, 0), borrowing_limit=None, lending_limit=None,
                       parent="pool", within="Never", reclaim="Never", bwc=False, threshold=None,
                       strategy="BestEffortFIFO", fungibility=("Borrow", "TryNextFlavor"), gpus=None, copies=1)
    return manifests([pair, lender], False)


def drive(policies: list[KueuePolicy], names: list[str], kinds: list[Shape], pending: list[tuple[int, WorkloadSpec]],
          script: list[Step], on_cycle: Callable[[list[Decisions], list[str]], None]) -> None:
    """Carry out ``script`` on every policy alike: submit the next jobs of ``pending``, confirm the oldest eviction,
    finish or evict a running workload, or run a cycle, whose decisions (one per policy) go to ``on_cycle`` with
    the workloads being evicted (preempted, their pods not gone yet: still admitted)."""
    now = 0.0
    terminating: list[str] = []
    for action, n in script:
        if action == "submit":
            batch, pending = pending[:n], pending[n:]
            for i, spec in batch:
                for w in submitted(i, spec, names, kinds):
                    for p in policies:
                        p.submit(w, now)
            continue
        if action == "confirm":
            if terminating:
                gone = terminating.pop(0)
                for p in policies:
                    p.evicted(gone, now, requeue=True)
            continue
        running = sorted(k for by_key in policies[0].state.admitted.values() for k in by_key)
        if action in ("finish", "evict"):
            if running:
                key = running[n % len(running)]
                for p in policies:
                    if action == "finish":
                        p.finish(key, now)
                    else:
                        p.evicted(key, now)
            continue
        now += 1.0
        results = [p.cycle(now) for p in policies]
        terminating.extend(victim.workload for victim in results[0].preempted)
        on_cycle(results, terminating)


@contextmanager
def own_cap(cap: int) -> Iterator[None]:
    """The most own candidates a queue is described by value with (a queue with more is keyed by its name)."""
    default_cap = memo_module.MAX_OWN_BY_VALUE
    memo_module.MAX_OWN_BY_VALUE = cap
    try:
        yield
    finally:
        memo_module.MAX_OWN_BY_VALUE = default_cap


def _decide_alike(specs: list[QueueSpec], kinds: list[Shape], jobs: list[WorkloadSpec], script: list[Step],
                  fair: bool, rising: bool, warmup: int = 3) -> None:
    m, names = manifests(specs, fair)
    policies = _memo_and_reference(m)
    memo = policies[0].state.memo
    assert memo is not None
    watched = WatchedMemo(memo)
    pending = list(enumerate(jobs))
    if rising:  # lower priorities first, admitted; higher ones arrive later and find them to preempt
        pending.sort(key=lambda job: kinds[job[1].shape % len(kinds)].priority)
        script = [("submit", len(pending) // 2), *[("cycle", 0)] * warmup, *script]
    if len({k.priority for k in kinds}) > 1:
        event("shapes of different priorities")

    def compared(results: list[Decisions], terminating: list[str]) -> None:
        got = [decided(d) for d in results]
        assert got[0] == got[1]
        if memo.hits:
            event("a nomination was recalled")
        if watched.shared:
            event("a nomination made for another queue was used")
        if memo.mapped:
            event("... with targets among the asking queue's own workloads")
        if got[0][1]:
            event("a cycle preempted")
        if memo.hits and got[0][1]:
            event("a cycle preempted with recalled nominations")
        if terminating and memo.hits:
            event("a nomination recalled while workloads were being evicted")

    drive(policies, names, kinds, pending, script, compared)
    for why in watched.seen:
        event("a queue above its quota described by value: " + why)
    assert ([(p.workload, p.reason) for p in policies[0].pending_report()]
            == [(p.workload, p.reason) for p in policies[1].pending_report()])


def test_queues_alike_share_a_nomination_and_each_preempts_its_own_workloads() -> None:
    """Three queues with the same spec and the same admitted workloads: a high-priority head in each needs room
    in its own queue (none may borrow). One nomination is made and recalled for the other two, its targets mapped
    to each queue's own workloads; the decisions are those of nominating each head afresh."""
    spec = QueueSpec(flavors=("on-demand",), nominal=(2, 4), borrowing_limit=0, lending_limit=None,
                     parent="pool", within="LowerPriority", reclaim="Never", bwc=False, threshold=None,
                     strategy="BestEffortFIFO", fungibility=("Borrow", "TryNextFlavor"), gpus=None, copies=3)
    low = _cpu_shape(1, 0)
    high = _cpu_shape(2, 3)
    m, names = manifests([spec], False)
    policies = _memo_and_reference(m)
    decisions = []
    for now, shape, n in ((1.0, 0, 6), (2.0, 0, 0), (3.0, 1, 3)):
        decisions.append(_round(policies, now, [
            workload(int(now) * 10 + i, WorkloadSpec(i % 3, shape, int(now)), names, [low, high]) for i in range(n)]))
    admitted = decisions[0][0][0] + decisions[1][0][0]
    preempted = decisions[2][0][1]
    assert len(admitted) == 6  # two low-priority workloads fill each queue, one per cycle
    assert len(preempted) == 6  # each high-priority head evicts both of its own queue's
    assert all(victim.split("/")[0] == preemptor.split("/")[0] for victim, preemptor, _ in preempted)
    assert all(fast == reference for fast, reference in decisions)
    memo = policies[0].state.memo
    assert memo is not None and memo.mapped == 2


def test_queues_alike_in_spec_but_not_in_usage_do_not_share_a_nomination() -> None:
    """Two queues with the same spec (nominal 1 cpu, no borrowing): the first is full, its next head cannot be
    admitted; the second is empty. A head of the same shape in the second queue must be admitted: the nomination
    remembered for the first queue's head (no fit, in the cycle before, with the tree unchanged since) is not the
    second's, since their usage differs (a memo keyed without the queue's usage recalled it)."""
    spec = QueueSpec(flavors=("on-demand",), nominal=(1, 1), borrowing_limit=0, lending_limit=None,
                     parent="pool", within="Never", reclaim="LowerPriority", bwc=False, threshold=None,
                     strategy="StrictFIFO", fungibility=("Borrow", "Preempt"), gpus=None, copies=2)
    one = _cpu_shape(1, 0)
    m, names = manifests([spec], False)
    policies = _memo_and_reference(m)
    decisions = []
    for now, queues in ((1.0, (0, 0)), (2.0, ()), (3.0, (1,))):
        decisions.append(_round(policies, now, [workload(int(now) * 10 + i, WorkloadSpec(q, 0, int(now)), names,
                                                         [one, one]) for i, q in enumerate(queues)]))
    assert all(fast == reference for fast, reference in decisions)
    assert [a[0] for a in decisions[0][0][0]] == ["cq0-0/w10"]
    assert decisions[1][0][0] == []  # the first queue is full: its second workload waits
    assert [a[0] for a in decisions[2][0][0]] == ["cq0-1/w30"]  # the second queue's head fits


def _borrowing_pair(bwc: bool) -> tuple[list[list[tuple[object, ...]]], NominationMemo]:
    """Two queues alike (nominal 1 cpu and 0 memory, borrowing without limit, reclaimWithinCohort Any) under the
    root cohort beside a lender (3 cpu) and the nested cohort (1 cpu): three low-priority workloads each fill the
    cohort's 6 cpu, both queues at 3 cpu, above their quota and at or above every nominal quota. Then a
    high-priority head of 1 cpu arrives in each. Returns each cycle's decisions with the memo and without it, and
    the memo."""
    low = _cpu_shape(1, 0)
    high = _cpu_shape(1, 3)
    m, names = _pair_beside_lender(1, 3, bwc)
    assert names[:2] == ["cq0-0", "cq0-1"]
    policies = _memo_and_reference(m)
    decisions = []
    for now, shape, n in ((1.0, 0, 6), (2.0, 0, 0), (3.0, 0, 0), (4.0, 1, 2)):
        decisions.append(_round(policies, now, [
            workload(int(now) * 10 + i, WorkloadSpec(i % 2, shape, int(now)), names, [low, high]) for i in range(n)]))
    assert sum(len(d[0][0]) for d in decisions[:3]) == 6  # one low-priority workload per queue and cycle
    memo = policies[0].state.memo
    assert memo is not None
    return [d[0] for d in decisions] + [d[1] for d in decisions], memo


def test_queues_above_quota_that_may_not_borrow_to_preempt_share_a_nomination() -> None:
    """borrowWithinCohort Never: each head may only take its own queue's workloads (Kueue makes one attempt that
    allows borrowing, and skips every candidate of another queue in it). The two queues, alike and both above
    their quota, share one nomination, its target mapped to each queue's own workload."""
    decisions, memo = _borrowing_pair(bwc=False)
    fast, reference = decisions[:4], decisions[4:]
    assert fast == reference
    preempted = fast[3][1]
    assert len(preempted) == 2
    assert all(victim.split("/")[0] == preemptor.split("/")[0] for victim, preemptor, _ in preempted)
    # Recalled twice: the third low-priority workload (both queues at 2 cpu) and the high-priority one.
    assert memo.above_quota_hits == 2 and memo.mapped == 1


def test_queues_above_quota_that_may_borrow_to_preempt_do_not_share_a_nomination() -> None:
    """borrowWithinCohort LowerPriority: each head, borrowing, reclaims a low-priority workload of the *other*
    queue (other queues' candidates come first). The queues are alike in spec, usage and own workloads, but their
    nominations differ (each targets the other's workload): recalling the first for the second would have it
    preempt its own queue's workload, or overlap with the first's target. The memo keys them by name."""
    decisions, memo = _borrowing_pair(bwc=True)
    fast, reference = decisions[:4], decisions[4:]
    assert fast == reference
    preempted = fast[3][1]
    assert len(preempted) == 2
    assert all(victim.split("/")[0] != preemptor.split("/")[0] for victim, preemptor, _ in preempted)
    assert {reason for _, _, reason in preempted} == {"InCohortReclaimWhileBorrowing"}
    assert memo.above_quota == 0


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["admit", "release", "evict", "describe"]), st.integers(0, 7),
                              st.integers(0, 2), st.integers(1, 3)), max_size=40),
       limit=st.sampled_from([2, 1 << 16]))
def test_value_ids_follow_the_queue(ops: list[tuple[str, int, int, int]], limit: int) -> None:
    """An AdmittedQueue's value ids, once asked for, stay those of its workloads in standing order as workloads
    come and go and evictions begin or are called off; equal ids mean equal values, also across a table that
    started afresh (a small ``limit``)."""
    values = CandidateValues(limit)
    queue = AdmittedQueue(values)
    infos = {}
    seen: dict[int, CandidateValue] = {}
    for action, k, priority, cpu in ops:
        key = f"ns/w{k}"
        if action == "admit":
            w = Workload(key=key, namespace="ns", name=f"w{k}", kind="Job", queue="q", priority=priority,
                         created=0.0, pod_sets=[], pods=[], order=k)
            info = infos[key] = WorkloadInfo(w, [], cluster_queue="cq")
            info.admission = AdmissionRecord("cq", [], {("on-demand", "cpu"): cpu * CPU}, float(len(seen)))
            queue[key] = info
        elif action == "release" and key in queue:
            del queue[key]
        elif action == "evict" and key in queue:
            infos[key].evicting = None if infos[key].evicting else "Preempted"
            queue.evicting_changed(key)
        elif action == "describe":
            ids = queue.value_ids()
            assert len(ids) == len(queue.ordered())
            for vid, info in zip(ids, queue.ordered(), strict=True):
                assert seen.setdefault(vid, candidate_value(info)) == candidate_value(info)
    ids = queue.value_ids()
    for vid, info in zip(ids, queue.ordered(), strict=True):
        assert seen.setdefault(vid, candidate_value(info)) == candidate_value(info)
    if limit > len(ops):  # the table never started afresh: equal values have equal ids
        assert len({candidate_value(i) for i in queue.ordered()}) == len(set(ids))


def test_a_queue_with_an_eviction_under_way_is_not_alike_one_without() -> None:
    """Two queues alike (nominal 2 cpu, borrowing without limit, borrowWithinCohort Never), each holding a 2-cpu
    and then a 1-cpu low-priority workload, 3 cpu: above their quota, alike in usage. A 2-cpu head in the first
    takes its 2-cpu workload, whose eviction is then under way (it keeps its quota); that head is deleted. Then a
    1-cpu head arrives in each: the first's search takes the workload being evicted (evicted ones come first),
    the second's its 1-cpu workload. The queues differ only in that flag: the memo must see it
    (SchedulerState.begin_eviction tells the queue), or one of them would be handed the other's target
    positions."""
    big = _cpu_shape(2, 0)
    small = _cpu_shape(1, 0)
    high_big = _cpu_shape(2, 3)
    high = _cpu_shape(1, 3)
    kinds = [big, small, high_big, high]
    m, names = _pair_beside_lender(2, 1, False)
    policies = _memo_and_reference(m)
    decisions = []
    for now, shape, queues in ((1.0, 0, (0, 1)), (2.0, 1, (0, 1)), (3.0, 2, (0,)), (4.0, 3, (0, 1))):
        if now == 4.0:
            for p in policies:
                p.finish("cq0-0/w30", now)  # the 2-cpu head: its victim is still being evicted
        decisions.append(_round(policies, now, [
            workload(int(now) * 10 + q, WorkloadSpec(q, shape, int(now)), names, kinds) for q in queues]))
    assert all(fast == reference for fast, reference in decisions)
    assert decisions[2][0][1] == [("cq0-0/w10", "cq0-0/w30", "InClusterQueue")]
    # The first queue's head takes the workload already being evicted (nothing new), the second's its 1-cpu one.
    assert decisions[3][0][1] == [("cq0-1/w21", "cq0-1/w41", "InClusterQueue")]
    memo = policies[0].state.memo
    assert memo is not None and memo.above_quota >= 3
