"""The cohort-shared classical preemption search gives exactly the straightforward search's targets
(issue 15, item 7).

The reference is ``Preemptor`` with ``shared = False``: Kueue's algorithm step by step on the quota tree. Random
cohorts mix what the shared search models (two-level trees, borrowing limits, a cohort quota of its own, nested
cohorts beside the head's queue, evicted candidates, every preemption policy) with what it hands back to the
reference (lending limits, heads below the root, queues without cohort).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, cast

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpufleet.api.manifests import Manifests
from gpufleet.api.objects import (
    BorrowWithinCohort,
    ClusterQueue,
    Cohort,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    ObjectMeta,
    PreemptionPolicy,
    Quota,
    ResourceFlavor,
    ResourceGroup,
    SchedulerConfig,
)
from gpufleet.cluster.workloads import Workload
from gpufleet.scheduling.kueue import KueuePolicy
from gpufleet.scheduling.kueue.admitted import AdmittedQueue
from gpufleet.scheduling.kueue.cohort_search import CohortSearch
from gpufleet.scheduling.kueue.info import AdmissionRecord, AdmissionShape, WorkloadInfo
from gpufleet.scheduling.kueue.preemption_order import standing
from gpufleet.scheduling.quota import FR, QuotaTree

CPU: FR = ("default", "cpu")
MEM: FR = ("default", "memory")


@dataclass(frozen=True)
class QueueSpec:
    nominal: tuple[int, int]  # cpu, memory
    borrowing_limit: int | None
    lending_limit: int | None
    parent: str | None  # "pool", "sub" or None
    within: str
    reclaim: str
    bwc: bool
    threshold: int | None


@st.composite
def queue_specs(draw: st.DrawFn, lending: bool, deep: bool) -> QueueSpec:
    parents = ["pool"] * 4 + ([None] if deep else []) + (["sub"] if deep else [])
    parent = draw(st.sampled_from(parents))
    reclaim = draw(st.sampled_from(["Never", "LowerPriority", "Any", "Any"]))
    return QueueSpec(
        nominal=(draw(st.integers(0, 6)), draw(st.integers(0, 4))),
        borrowing_limit=draw(st.none() | st.integers(0, 5)) if parent else None,
        lending_limit=draw(st.none() | st.integers(0, 3)) if parent and lending else None,
        parent=parent,
        within=draw(st.sampled_from(["Never", "LowerPriority", "LowerOrNewerEqualPriority"])),
        reclaim=reclaim,
        bwc=reclaim != "Never" and draw(st.booleans()),
        threshold=draw(st.none() | st.integers(0, 3)),
    )


@dataclass(frozen=True)
class Admitted:
    queue: int
    cpu: int
    memory: int
    priority: int
    reserved: int  # reservation time: ties are frequent on purpose
    evicting: bool


@dataclass(frozen=True)
class Head:
    queue: int
    cpu: int
    memory: int
    priority: int
    created: int
    contested: int  # 1: cpu, 2: memory, 3: both


admitted_specs = st.builds(Admitted, queue=st.integers(0, 5), cpu=st.integers(0, 3), memory=st.integers(0, 2),
                           priority=st.integers(0, 4), reserved=st.integers(0, 3),
                           evicting=st.sampled_from([False, False, False, False, True]))
head_specs = st.builds(Head, queue=st.integers(0, 5), cpu=st.integers(0, 6), memory=st.integers(0, 3),
                       priority=st.integers(0, 5), created=st.integers(0, 6), contested=st.integers(1, 3))


def manifests(queues: list[QueueSpec], pool_quota: int, fair: bool = False) -> Manifests:
    m = Manifests(config=SchedulerConfig(fair_sharing=fair))
    m.flavors.append(ResourceFlavor(ObjectMeta("default")))
    m.cohorts.append(Cohort(ObjectMeta("pool"), None, [
        ResourceGroup(("cpu", "memory"), [FlavorQuotas("default", {"cpu": Quota(pool_quota), "memory": Quota(0)})])]))
    m.cohorts.append(Cohort(ObjectMeta("sub"), "pool"))
    for i, q in enumerate(queues):
        quotas = {"cpu": Quota(q.nominal[0], q.borrowing_limit, q.lending_limit),
                  "memory": Quota(q.nominal[1], None, None)}
        m.cluster_queues.append(ClusterQueue(
            ObjectMeta(f"cq{i}"), [ResourceGroup(("cpu", "memory"), [FlavorQuotas("default", quotas)])],
            cohort=q.parent, namespace_selector=LabelSelector(),
            preemption=PreemptionPolicy(cast(Any, q.within), cast(Any, q.reclaim),
                                        BorrowWithinCohort(cast(Any, "LowerPriority" if q.bwc else "Never"),
                                                           q.threshold))))
        m.local_queues.append(LocalQueue(ObjectMeta("q", namespace=f"cq{i}"), f"cq{i}"))
    return m


def info_for(key: str, queue: str, priority: int, created: float) -> WorkloadInfo:
    ns, name = key.split("/")
    wl = Workload(key=key, namespace=ns, name=name, kind="Workload", queue="q", priority=priority,
                  created=created, pod_sets=[], pods=[], uid=f"uid-{random.Random(key).random():.6f}")
    return WorkloadInfo(wl, [], local_queue="q", cluster_queue=queue, queue_ts=created)


def build(queues: list[QueueSpec], pool_quota: int, admitted: list[Admitted], fair: bool = False) -> KueuePolicy:
    policy = KueuePolicy(manifests(queues, pool_quota, fair))
    state = policy.state
    for i, a in enumerate(admitted):
        queue = f"cq{a.queue % len(queues)}"
        usage = {fr: v for fr, v in ((CPU, a.cpu), (MEM, a.memory)) if v}
        info = info_for(f"{queue}/w{i}", queue, a.priority, float(i))
        state.infos[info.key] = info
        state.commit_admission(info, queue, AdmissionShape.of([], usage), [], 0.0, admitted_at=float(a.reserved),
                               ready=True)
        if a.evicting:
            info.evicting = "Preempted"
    return policy


def compare(policy: KueuePolicy, heads: list[Head], queues: list[QueueSpec]) -> int:
    """Both searches for every head, the shared one answering all heads within one nomination (so that heads of
    a cohort share its lists and runs); returns how many the shared search answered itself."""
    preemptor = policy.state.preemptor
    tree = policy.state.tree
    before = tree.nonzero_usage()
    asks = []
    for n, h in enumerate(heads):
        queue = f"cq{h.queue % len(queues)}"
        info = info_for(f"{queue}/head{n}", queue, h.priority, float(h.created))
        # A zero request is kept now and then: both searches must read it the same way.
        usage = {fr: v for fr, v in ((CPU, h.cpu), (MEM, h.memory)) if v or n % 3 == 0}
        if any(usage.values()):
            frs = {fr for fr, bit in ((CPU, 1), (MEM, 2)) if h.contested & bit and fr in usage} or set(usage)
            asks.append((queue, info, frs, usage))
    preemptor.shared = False
    with preemptor.nomination():
        reference = [[(t.info.key, t.reason) for t in preemptor.targets(info, frs, usage)]
                     for _, info, frs, usage in asks]
    assert tree.nonzero_usage() == before
    preemptor.shared = True
    answered = 0
    with preemptor.nomination():
        search = CohortSearch(tree, policy.state.admitted)
        for (queue, info, frs, usage), want in zip(asks, reference, strict=True):
            shared = [(t.info.key, t.reason) for t in preemptor.targets(info, frs, usage)]
            assert shared == want, (queue, info.priority, usage, frs)
            if policy.config.fair_sharing:
                continue  # fair sharing shares the snapshot's queue shares, not the classical runs
            direct = search.classical_targets(info, policy.config.cluster_queues[queue], tree.cluster_queue(queue),
                                              frozenset(frs), usage)
            if direct is not None:
                answered += 1
                assert [(t.info.key, t.reason) for t in direct] == want
                event("answered by the shared search" + (" (targets)" if want else " (none)"))
            else:
                event("handed to the reference search")
    assert tree.nonzero_usage() == before
    return answered


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queues=st.lists(queue_specs(lending=False, deep=False), min_size=2, max_size=6),
       pool_quota=st.sampled_from([0, 0, 2]), admitted=st.lists(admitted_specs, max_size=24),
       heads=st.lists(head_specs, min_size=1, max_size=6))
def test_shared_search_matches_the_reference_on_two_level_cohorts(
        queues: list[QueueSpec], pool_quota: int, admitted: list[Admitted], heads: list[Head]) -> None:
    compare(build(queues, pool_quota, admitted), heads, queues)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queues=st.lists(queue_specs(lending=True, deep=True), min_size=2, max_size=6),
       pool_quota=st.sampled_from([0, 2]), admitted=st.lists(admitted_specs, max_size=24),
       heads=st.lists(head_specs, min_size=1, max_size=6))
def test_shared_search_matches_the_reference_with_lending_limits_and_nested_cohorts(
        queues: list[QueueSpec], pool_quota: int, admitted: list[Admitted], heads: list[Head]) -> None:
    compare(build(queues, pool_quota, admitted), heads, queues)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queues=st.lists(queue_specs(lending=True, deep=True), min_size=2, max_size=6),
       pool_quota=st.sampled_from([0, 2]), admitted=st.lists(admitted_specs, max_size=24),
       heads=st.lists(head_specs, min_size=1, max_size=6))
def test_fair_sharing_search_with_shared_snapshot_shares_matches_the_reference(
        queues: list[QueueSpec], pool_quota: int, admitted: list[Admitted], heads: list[Head]) -> None:
    # The heads of a nomination share every queue's and cohort's dominant resource share as the snapshot has it.
    compare(build(queues, pool_quota, admitted, fair=True), heads, queues)


class CountingTree(QuotaTree):
    """Counts usage changes: the straightforward search pays one per removal and add-back."""

    changes = 0

    def add_usage(self, cq: str, usage: Any) -> None:
        CountingTree.changes += 1
        super().add_usage(cq, usage)

    def remove_usage(self, cq: str, usage: Any) -> None:
        CountingTree.changes += 1
        super().remove_usage(cq, usage)


def test_a_head_that_must_shrink_its_own_queue_does_not_walk_the_cohort() -> None:
    # The bench's worst case: the head's queue is below nominal but would borrow with the head, borrowing is not
    # allowed for reclaim, so the greedy removes every other queue's candidate, then its own, then adds nearly all
    # back. The shared search reaches the same targets without touching the tree.
    spec = QueueSpec((20, 0), 100, None, "pool", "LowerPriority", "Any", False, None)
    queues = [spec] * 40
    admitted = []
    for q in range(40):
        if q % 2:  # borrowers: 9 cpu above nominal in small workloads
            admitted += [Admitted(q, 1, 0, 50, r % 4, False) for r in range(29)]
        elif q:  # lenders: 10 cpu below nominal
            admitted += [Admitted(q, 5, 0, 100, 1, False) for _ in range(2)]
    admitted += [Admitted(0, 5, 0, 100, 2, False), Admitted(0, 5, 0, 100, 3, False)]
    policy = KueuePolicy(manifests(queues, 0), quota_tree_factory=CountingTree)
    state = policy.state
    for i, a in enumerate(admitted):
        info = info_for(f"cq{a.queue}/w{i}", f"cq{a.queue}", a.priority, float(i))
        state.commit_admission(info, f"cq{a.queue}", AdmissionShape.of([], {CPU: a.cpu}), [], 0.0,
                               admitted_at=float(a.reserved))
    head = info_for("cq0/big", "cq0", 200, 0.0)
    preemptor = state.preemptor
    preemptor.shared = False
    CountingTree.changes = 0
    with preemptor.nomination():
        reference = preemptor.targets(head, {CPU}, {CPU: 20})
    reference_changes = CountingTree.changes
    preemptor.shared = True
    CountingTree.changes = 0
    with preemptor.nomination():
        shared = preemptor.targets(head, {CPU}, {CPU: 20})
    assert [(t.info.key, t.reason) for t in shared] == [(t.info.key, t.reason) for t in reference]
    assert {t.info.cluster_queue for t in shared} >= {"cq0"}  # its own queue had to shrink
    # The reference removes and adds back each of the 20 borrowers' 9 removable candidates.
    assert reference_changes >= 2 * 9 * 20 and CountingTree.changes == 0


@settings(max_examples=100, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(0, 15), st.integers(0, 3), st.integers(0, 3)),
                    max_size=60))
def test_admitted_queue_keeps_candidate_order_through_admissions_and_releases(
        ops: list[tuple[bool, int, int, int]]) -> None:
    queue = AdmittedQueue()
    model: dict[str, WorkloadInfo] = {}
    for add, n, priority, reserved in ops:
        key = f"ns/w{n}"
        if add:
            info = info_for(key, "cq", priority, 0.0)
            info.admission = AdmissionRecord("cq", [], {}, float(reserved))
            queue[key] = info
            model[key] = info
        elif key in model:
            del queue[key]
            del model[key]
        assert queue.ordered() == sorted(model.values(), key=standing)
        assert queue.standings() == [standing(i) for i in queue.ordered()]
        assert set(queue) == set(model) and len(queue) == len(model)
