"""Fair-sharing preemption in a flat cohort (``kueue/flat_fair_search.py``) gives exactly the targets of Kueue's
step-by-step walk (``Preemptor.shared = False``), head by head within one nomination.

Random flat cohorts: up to 14 ClusterQueues, some weighted (zero weight included), every preemption policy, a cohort
quota of its own or none, evicted candidates, both strategies or one (in either order), and shares both fine and
coarse (the bench's 500-queue cohorts have integer shares of 0, 1 or 2 of a thousandth, so ties between the
preemptor's share and a target's are the rule there).
"""

from __future__ import annotations

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
from gpufleet.scheduling.kueue import KueuePolicy
from gpufleet.scheduling.kueue.first_at_least import FirstAtLeast
from gpufleet.scheduling.kueue.info import AdmissionShape
from tests.kueue.test_cohort_search import (
    CPU,
    MEM,
    Admitted,
    Head,
    QueueSpec,
    admitted_specs,
    compare,
    head_specs,
    info_for,
)

STRATEGIES = [("LessThanOrEqualToFinalShare", "LessThanInitialShare"), ("LessThanOrEqualToFinalShare",),
              ("LessThanInitialShare",), ("LessThanInitialShare", "LessThanOrEqualToFinalShare")]


@st.composite
def flat_queue_specs(draw: st.DrawFn) -> QueueSpec:
    reclaim = draw(st.sampled_from(["Never", "LowerPriority", "Any", "Any", "LowerOrNewerEqualPriority"]))
    return QueueSpec(
        nominal=(draw(st.integers(0, 6)), draw(st.integers(0, 4))),
        borrowing_limit=draw(st.none() | st.integers(0, 8)),
        lending_limit=None,
        parent="pool",
        within=draw(st.sampled_from(["Never", "LowerPriority", "LowerOrNewerEqualPriority", "Any"])),
        reclaim=reclaim,
        bwc=False,
        threshold=None,
    )


def manifests(queues: list[QueueSpec], pool_quota: int, weights: list[float], lender: int,
              strategies: tuple[str, ...]) -> Manifests:
    """One flat cohort, ``pool``, with ``lender`` (a queue that only lends: a large one makes shares coarse)."""
    m = Manifests(config=SchedulerConfig(fair_sharing=True, fair_sharing_strategies=cast(Any, strategies)))
    m.flavors.append(ResourceFlavor(ObjectMeta("default")))
    m.cohorts.append(Cohort(ObjectMeta("pool"), None, [ResourceGroup(("cpu", "memory"), [FlavorQuotas(
        "default", {"cpu": Quota(pool_quota), "memory": Quota(0)})])]))
    specs = [(f"cq{i}", q) for i, q in enumerate(queues)]
    specs.append(("lender", QueueSpec((lender, 0), None, None, "pool", "Never", "Never", False, None)))
    for i, (name, q) in enumerate(specs):
        quotas = {"cpu": Quota(q.nominal[0], q.borrowing_limit, None), "memory": Quota(q.nominal[1], None, None)}
        m.cluster_queues.append(ClusterQueue(
            ObjectMeta(name), [ResourceGroup(("cpu", "memory"), [FlavorQuotas("default", quotas)])],
            cohort="pool", namespace_selector=LabelSelector(),
            preemption=PreemptionPolicy(cast(Any, q.within), cast(Any, q.reclaim), BorrowWithinCohort("Never")),
            fair_weight=weights[i % len(weights)]))
        m.local_queues.append(LocalQueue(ObjectMeta("q", namespace=name), name))
    return m


def build(queues: list[QueueSpec], pool_quota: int, weights: list[float], lender: int, strategies: tuple[str, ...],
          admitted: list[Admitted]) -> KueuePolicy:
    policy = KueuePolicy(manifests(queues, pool_quota, weights, lender, strategies))
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


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queues=st.lists(flat_queue_specs(), min_size=2, max_size=14), pool_quota=st.sampled_from([0, 0, 3]),
       weights=st.lists(st.sampled_from([1.0, 1.0, 1.0, 2.0, 0.5, 0.0]), min_size=1, max_size=3),
       lender=st.sampled_from([0, 0, 200, 1000, 3000]), strategies=st.sampled_from(STRATEGIES),
       admitted=st.lists(admitted_specs, max_size=40), heads=st.lists(head_specs, min_size=1, max_size=8),
       big=st.integers(0, 12))
def test_flat_cohort_search_matches_the_step_by_step_walk(
        queues: list[QueueSpec], pool_quota: int, weights: list[float], lender: int, strategies: tuple[str, ...],
        admitted: list[Admitted], heads: list[Head], big: int) -> None:
    # With a large lender, candidates of a few units barely move a share: some borrow more to reach past it.
    scaled = [Admitted(a.queue, a.cpu * (1 + big * (lender > 0) * (n % 3 == 0)), a.memory, a.priority, a.reserved,
                       a.evicting) for n, a in enumerate(admitted)]
    policy = build(queues, pool_quota, weights, lender, strategies, scaled)
    preemptor = policy.state.preemptor
    with preemptor.nomination():
        flat = preemptor._flat
        assert flat is not None and flat.is_flat(policy.state.tree.cohort("pool"))
    event(f"lender {lender}")
    compare(policy, heads, queues)


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.tuples(st.integers(0, 3), st.sampled_from([0.0, 0.5, 1.0])), max_size=40),
       i=st.integers(0, 45), x=st.tuples(st.integers(0, 3), st.sampled_from([0.0, 0.5, 1.0])))
def test_first_at_least_is_the_first_such_place(values: list[tuple[int, float]], i: int,
                                                x: tuple[int, float]) -> None:
    want = next((j for j in range(i, len(values)) if values[j] >= x), len(values))
    assert FirstAtLeast(values, (-1, -1.0)).first(i, x) == want
