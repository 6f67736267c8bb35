"""Invariants over random queue configurations and workload streams (hypothesis):

* admitted usage never exceeds what nominal quotas, borrowing limits and lending limits allow once the
  evictions decided in the cycle complete, checked against an independent recomputation from the admitted
  workloads;
* every preemption is allowed by the preemptor's ClusterQueue policy (withinClusterQueue,
  reclaimWithinCohort, borrowWithinCohort and its threshold), and reclaims only from queues above nominal;
* with nodes, a workload is either admitted with every pod placed, or holds no node at all;
* the same input gives the same decisions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpufleet.api.manifests import Manifests
from gpufleet.api.objects import (
    BorrowWithinCohort,
    ClusterQueue,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    ObjectMeta,
    PodTemplate,
    PreemptionPolicy,
    Quota,
    ResourceFlavor,
    ResourceGroup,
    SchedulerConfig,
)
from gpufleet.cluster.state import ClusterState, NodeState
from gpufleet.cluster.workloads import PodSet, Workload, WorkloadPod
from gpufleet.scheduling.kueue import KueuePolicy, first_fit_factory
from gpufleet.scheduling.kueue.info import State, WorkloadInfo
from gpufleet.scheduling.kueue.preemption import priority_allows
from gpufleet.scheduling.types import Decisions

CPU = 1000
FR = ("default", "cpu")


@dataclass(frozen=True)
class QueueSpec:
    nominal: int
    borrowing_limit: int | None
    lending_limit: int | None
    within: str
    reclaim: str
    borrow_within: bool
    threshold: int | None
    strategy: str
    in_cohort: bool


@st.composite
def queue_specs(draw: st.DrawFn) -> QueueSpec:
    # Weighted towards contention: cohorts, small quotas and preemption enabled.
    nominal = draw(st.integers(0, 5))
    in_cohort = draw(st.sampled_from([True, True, True, False]))
    reclaim = draw(st.sampled_from(["Never", "LowerPriority", "LowerPriority", "Any", "Any"]))
    return QueueSpec(
        nominal=nominal,
        borrowing_limit=draw(st.none() | st.integers(0, 4)) if in_cohort else None,
        lending_limit=draw(st.none() | st.integers(0, nominal)) if in_cohort else None,
        within=draw(st.sampled_from(["Never", "LowerPriority", "LowerPriority", "LowerOrNewerEqualPriority"])),
        reclaim=reclaim,
        borrow_within=reclaim != "Never" and draw(st.booleans()),
        threshold=draw(st.none() | st.integers(0, 3)),
        strategy=draw(st.sampled_from(["BestEffortFIFO", "StrictFIFO"])),
        in_cohort=in_cohort,
    )


@dataclass(frozen=True)
class WorkloadSpec:
    queue: int
    cpu: int
    count: int
    priority: int
    arrival: int  # cycle at which it is submitted
    runtime: int  # cycles it runs once admitted


@st.composite
def workload_specs(draw: st.DrawFn) -> WorkloadSpec:
    # Later arrivals tend to have higher priority, so that they find lower-priority work to preempt.
    arrival = draw(st.integers(0, 4))
    return WorkloadSpec(queue=draw(st.integers(0, 3)), cpu=draw(st.integers(1, 4)), count=draw(st.integers(1, 3)),
                        priority=arrival + draw(st.integers(0, 2)), arrival=arrival, runtime=draw(st.integers(1, 6)))


def manifests(queues: list[QueueSpec], fair: bool) -> Manifests:
    m = Manifests()
    m.flavors.append(ResourceFlavor(ObjectMeta("default")))
    for i, q in enumerate(queues):
        name = f"cq{i}"
        quota = Quota(q.nominal * CPU, None if q.borrowing_limit is None else q.borrowing_limit * CPU,
                      None if q.lending_limit is None else q.lending_limit * CPU)
        bwc = BorrowWithinCohort(cast(Any, "LowerPriority" if q.borrow_within else "Never"), q.threshold)
        m.cluster_queues.append(ClusterQueue(
            ObjectMeta(name), [ResourceGroup(("cpu",), [FlavorQuotas("default", {"cpu": quota})])],
            cohort="pool" if q.in_cohort else None, namespace_selector=LabelSelector(),
            queueing_strategy=cast(Any, q.strategy),
            preemption=PreemptionPolicy(cast(Any, q.within), cast(Any, q.reclaim), bwc)))
        m.local_queues.append(LocalQueue(ObjectMeta("q", namespace=name), name))
    m.config = SchedulerConfig(fair_sharing=fair)
    return m


def workload(i: int, spec: WorkloadSpec, queues: int) -> Workload:
    ns = f"cq{spec.queue % queues}"
    t = PodTemplate(labels={}, annotations={}, requests={"cpu": spec.cpu * CPU}, limits={})
    key = f"{ns}/w{i}"
    return Workload(key=key, namespace=ns, name=f"w{i}", kind="Job", queue="q", priority=spec.priority,
                    created=float(spec.arrival * 10 + i % 7), pod_sets=[PodSet("main", spec.count, t)],
                    pods=[WorkloadPod(f"{key}-{k}", t, "main") for k in range(spec.count)], order=i)


def check_quota(policy: KueuePolicy, queues: list[QueueSpec]) -> None:
    """Limits hold for the usage that remains once this cycle's evictions complete: like Kueue's ``fits``,
    a cycle lets later heads use quota its preemptors are freeing."""
    used = [0] * len(queues)
    evicting = [0] * len(queues)
    for info in policy.state.admitted_infos():
        assert info.cluster_queue is not None
        i = int(info.cluster_queue[2:])
        (evicting if info.evicting else used)[i] += info.usage.get(FR, 0)
    for i, q in enumerate(queues):
        assert used[i] + evicting[i] == policy.state.tree.usage(f"cq{i}", FR)
        if not q.in_cohort:
            assert used[i] <= q.nominal * CPU
        elif q.borrowing_limit is not None:
            assert used[i] <= (q.nominal + q.borrowing_limit) * CPU
    members = [i for i, q in enumerate(queues) if q.in_cohort]
    local: dict[int, int] = {}
    for i in members:
        lending = queues[i].lending_limit
        local[i] = 0 if lending is None else (queues[i].nominal - lending) * CPU
    in_pool = sum(max(0, used[i] - local[i]) for i in members)
    assert in_pool <= sum(queues[i].nominal * CPU - local[i] for i in members)


def check_admitted_are_not_pending(policy: KueuePolicy) -> None:
    """An admitted workload is in no queue and no table of pending workloads: finishing it only releases it
    (KueuePolicy._forget)."""
    state = policy.state
    pending = [state.no_quota, state.unqueued, state.placement_parked, state.backoff]
    for q in state.queues.queues.values():
        pending += [q.active, q.parked]
    sticky = {q.sticky for q in state.queues.queues.values()}
    for info in state.admitted_infos():
        assert info.state is State.ADMITTED
        assert all(info.key not in table for table in pending), info.key
        assert info.key not in sticky, info.key


def check_preemptions(policy: KueuePolicy, queues: list[QueueSpec], d: Decisions, fair: bool) -> None:
    for p in d.preempted:
        event(f"preemption {p.reason}")
        victim = policy.info(p.workload)
        preemptor = policy.info(p.preemptor)
        assert victim is not None and preemptor is not None and victim.admission is not None
        vq, pq = victim.cluster_queue, preemptor.cluster_queue
        assert vq is not None and pq is not None
        spec = queues[int(pq[2:])]
        if p.reason == "InClusterQueue":
            assert vq == pq and priority_allows(spec.within, preemptor, victim)
            continue
        assert vq != pq and spec.in_cohort and queues[int(vq[2:])].in_cohort
        assert priority_allows(spec.reclaim, preemptor, victim)
        # Reclaim takes back only what the victim's queue holds above its nominal quota.
        assert policy.state.tree.usage(vq, FR) > queues[int(vq[2:])].nominal * CPU
        if p.reason == "InCohortReclaimWhileBorrowing":
            assert spec.borrow_within and victim.priority < preemptor.priority
            assert spec.threshold is None or victim.priority <= spec.threshold
        elif p.reason == "InCohortFairSharing":
            assert fair
        else:
            assert p.reason == "InCohortReclamation"


def simulate(queues: list[QueueSpec], specs: list[WorkloadSpec], fair: bool, nodes: int = 0
             ) -> list[tuple[list[tuple[str, str | None]], list[tuple[str, str, str]]]]:
    m = manifests(queues, fair)
    cluster = None
    if nodes:
        cluster = ClusterState([NodeState(f"n{i}", {"kubernetes.io/hostname": f"n{i}"}, (),
                                          {"cpu": 4 * CPU, "pods": 10}, {}, []) for i in range(nodes)])
    policy = KueuePolicy(m, cluster, placer_factory=first_fit_factory if nodes else None)
    wls = [workload(i, s, len(queues)) for i, s in enumerate(specs)]
    ends: dict[str, int] = {}
    trace = []
    for t in range(12):
        for w, s in zip(wls, specs, strict=True):
            if s.arrival == t:
                policy.submit(w, float(t * 10))
        for key in [k for k, end in ends.items() if end <= t]:
            del ends[key]
            policy.finish(key, float(t * 10))
        check_admitted_are_not_pending(policy)
        d = policy.cycle(float(t * 10))
        check_admitted_are_not_pending(policy)
        check_quota(policy, queues)
        check_preemptions(policy, queues, d, fair)
        if cluster is not None:
            check_gangs(policy, cluster)
        for p in d.preempted:
            ends.pop(p.workload, None)
            policy.evicted(p.workload, float(t * 10), requeue=True, reason=p.reason)
        check_admitted_are_not_pending(policy)
        runtime = {w.key: s.runtime for w, s in zip(wls, specs, strict=True)}
        for a in d.admitted:
            ends[a.workload] = t + runtime[a.workload]
        trace.append(([(a.workload, a.cluster_queue) for a in d.admitted],
                      [(p.workload, p.preemptor, p.reason) for p in d.preempted]))
    return trace


def check_gangs(policy: KueuePolicy, cluster: ClusterState) -> None:
    cluster.check_invariants()
    placed_by: dict[str, int] = {}
    for pod in cluster.placements:
        owner = pod.rsplit("-", 1)[0]
        placed_by[owner] = placed_by.get(owner, 0) + 1
    admitted: dict[str, WorkloadInfo] = {i.key: i for i in policy.state.admitted_infos()}
    for key, info in admitted.items():
        assert info.admission is not None
        wanted = sum(ps.count for ps in info.admission.podsets)
        assert placed_by.get(key, 0) == wanted == len(info.admission.pods)
    assert set(placed_by) <= set(admitted)


queue_lists = st.lists(queue_specs(), min_size=2, max_size=4)
workload_lists = st.lists(workload_specs(), min_size=3, max_size=16)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queues=queue_lists, specs=workload_lists, fair=st.booleans())
def test_quota_and_preemption_rules_hold(queues: list[QueueSpec], specs: list[WorkloadSpec], fair: bool) -> None:
    simulate(queues, specs, fair)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queues=queue_lists, specs=workload_lists, fair=st.booleans(), nodes=st.integers(1, 3))
def test_gangs_are_never_partial(queues: list[QueueSpec], specs: list[WorkloadSpec], fair: bool,
                                 nodes: int) -> None:
    simulate(queues, specs, fair, nodes)


@settings(max_examples=30, deadline=None)
@given(queues=queue_lists, specs=workload_lists, fair=st.booleans())
def test_same_input_same_decisions(queues: list[QueueSpec], specs: list[WorkloadSpec], fair: bool) -> None:
    assert simulate(queues, specs, fair) == simulate(queues, specs, fair)
