"""What carries over into a policy rebuilt for the next cycle (kueue/parked_memory.py, kueue/shields.py): the
workloads the last policy left parked, parked again while nothing was released, and the workloads shielded from
preemption. The property: a rebuilt policy carrying the memory parks what the kept policy parks, and decides the
same admissions once something is released."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, cast

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpufleet.api.manifests import Manifests
from gpufleet.api.objects import (
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
)
from gpufleet.cluster.state import ClusterState, NodeState
from gpufleet.cluster.workloads import PodSet, Workload, WorkloadPod
from gpufleet.scheduling.kueue import KueuePolicy, first_fit_factory
from gpufleet.scheduling.kueue.info import State
from gpufleet.scheduling.kueue.parked_memory import Heads, ParkedMemory, Releases, parked_in
from gpufleet.scheduling.kueue.shields import Shields
from tests.kueue.scenario import Scenario, job, names, preempted
from tests.kueue.test_cohorts import FLAVOR, cq
from tests.kueue.test_gangs import PRIO, node, placed_pods

CPU = 1000
TOP = PRIO.replace("name: high", "name: top").replace("value: 100", "value: 200")
SAME = Releases(1, 7, frozenset({"ns/a"}))


def test_what_counts_as_a_release() -> None:
    assert not SAME.released_since(SAME)
    assert not replace(SAME, holders=frozenset({"ns/a", "ns/b"})).released_since(SAME)  # a new holder frees nothing
    assert replace(SAME, holders=frozenset()).released_since(SAME)  # a holder gone
    assert replace(SAME, nodes=8).released_since(SAME)
    assert replace(SAME, queues=2).released_since(SAME)
    unknown = replace(SAME, queues=0)
    assert unknown.released_since(unknown)  # a generation nobody knows holds nothing


# ---- a BestEffortFIFO queue whose head does not fit on the nodes ---------------------------------------------

BACKLOG = (FLAVOR + cq("team", 100, None, spec="\n  queueingStrategy: BestEffortFIFO") + node("n1") +
           job("huge", "team", cpu="8", created=1) + job("small", "team", cpu="2", created=2) +
           job("also", "team", cpu="2", created=3))


def rebuilt(s: Scenario) -> KueuePolicy:
    """A policy built afresh from ``s``'s workloads, those ``s`` admitted bound where they were placed (as the live
    scheduler rebuilds its policy from the cluster)."""
    cluster = ClusterState.from_nodes(s.manifests.nodes)
    policy = KueuePolicy(s.manifests, cluster)
    placements = s.policy.cluster.placements if s.policy.cluster is not None else {}
    for w in s.workloads:
        pods = [replace(p, node_name=placements[p.key].node if p.key in placements else None) for p in w.pods]
        policy.submit(replace(w, pods=pods), s.now)
    return policy


def test_a_rebuilt_policy_parks_again_what_the_last_one_parked() -> None:
    s = Scenario(BACKLOG, cluster=True)
    s.until_stable()
    assert names([a for d in s.history for a in d.admitted]) == ["small", "also"]
    memory = ParkedMemory()
    memory.remember_parked(s.policy)
    assert set(memory.parked) == {"default/huge"} and memory.parked["default/huge"].for_nodes
    first = rebuilt(s)
    assert memory.carry(first, SAME) == 0  # nothing was seen before: nothing is known not to have been released
    memory.remember_parked(s.policy)
    again = rebuilt(s)
    assert memory.carry(again, SAME) == 1
    assert parked_in(again.state) == parked_in(s.policy.state)
    assert "default/huge" in again.state.placement_parked  # a release of nodes wakes it, as in the kept policy
    assert not again.cycle(s.now).admitted and again.state.last_evaluated == frozenset()  # no head left to try
    gone = rebuilt(s)
    assert memory.carry(gone, replace(SAME, holders=frozenset())) == 0  # a holder gone: everyone is tried again


def test_a_workload_admitted_or_gone_since_is_not_parked_again() -> None:
    s = Scenario(BACKLOG, cluster=True)
    s.until_stable()
    memory = ParkedMemory()
    memory.carry(rebuilt(s), SAME)
    memory.remember_parked(s.policy)
    s.workloads = [w for w in s.workloads if w.key != "default/huge"]
    policy = rebuilt(s)
    assert memory.carry(policy, SAME) == 0 and not parked_in(policy.state)


def test_the_heads_a_queue_keeps_first_are_kept_first_again_whatever_was_released() -> None:
    """A gang reserving its queue's quota (kueue.reservation) stays its queue's head in a policy built afresh, and a
    workload gone since is not held; a release changes nothing (a release is what they wait for)."""
    s = Scenario(BACKLOG, cluster=True)
    q = s.policy.state.queues.queues["team"]
    s.policy.state.reservations["team"] = "default/also"
    q.sticky = "default/also"
    memory = ParkedMemory()
    memory.remember_parked(s.policy)
    assert memory.heads == {"team": Heads("default/also", "default/also")}
    again = rebuilt(s)
    memory.carry(again, replace(SAME, holders=frozenset()))  # (a holder gone: a release)
    head = again.state.queues.queues["team"].peek()
    assert again.state.reservations == {"team": "default/also"} and head is not None and head.key == "default/also"
    s.workloads = [w for w in s.workloads if w.key != "default/also"]
    gone = rebuilt(s)
    memory.carry(gone, SAME)
    assert not gone.state.reservations and gone.state.queues.queues["team"].sticky is None


def test_a_shielded_workload_keeps_its_nodes_and_is_no_victim() -> None:
    text = FLAVOR + PRIO + cq("team", 100, None, spec="\n  preemption: {withinClusterQueue: LowerPriority}")
    two = node("n1") + job("a", "team", cpu="4", created=1) + node("n2") + job("b", "team", cpu="4", created=2)
    s = Scenario(text + TOP + two, cluster=True)
    s.until_stable()
    assert s.admitted() == {"a", "b"}
    s.policy.shield({"default/a"})  # a PodDisruptionBudget refused its eviction
    s.add(job("high", "team", cpu="4", priority_class="high", created=3))
    assert preempted(s.cycle()) == {"b": ("high", "InClusterQueue")}  # the one left to choose
    a = s.policy.info("default/a")
    assert a is not None and a.state is State.ADMITTED and len(placed_pods(s, "a")) == 1  # its node and quota kept
    s.cycle()
    assert s.policy.info("default/high") is not None and len(placed_pods(s, "high")) == 1
    s.policy.shield({"default/high"})
    s.add(job("top", "team", cpu="4", priority_class="top", created=4))
    assert not any(preempted(d) for d in s.run(3))  # a and high are lower, but shielded: no victim left


def test_shields_lapse() -> None:
    shields = Shields()
    shields.add("ns/a", 10.0)
    shields.add("ns/a", 5.0)  # an earlier lapse never shortens a shield
    shields.add("ns/b", 20.0)
    assert shields.next_expiry() == 10.0 and shields.active(9.0) == {"ns/a", "ns/b"}
    assert shields.active(10.0) == {"ns/b"} and shields.next_expiry() == 20.0
    assert shields.active(20.0) == set() and shields.next_expiry() is None


# ---- property: carried ≡ kept ---------------------------------------------------------------------------------

def _manifests(quota: int) -> Manifests:
    m = Manifests()
    m.flavors.append(ResourceFlavor(ObjectMeta("default")))
    m.cluster_queues.append(ClusterQueue(
        ObjectMeta("cq"), [ResourceGroup(("cpu",), [FlavorQuotas("default", {"cpu": Quota(quota * CPU)})])],
        namespace_selector=LabelSelector(), queueing_strategy=cast(Any, "BestEffortFIFO"),
        preemption=PreemptionPolicy(cast(Any, "Never"), cast(Any, "Never"))))
    m.local_queues.append(LocalQueue(ObjectMeta("q", namespace="ns"), "cq"))
    return m


def _workload(i: int, cpu: int, count: int) -> Workload:
    t = PodTemplate(labels={}, annotations={}, requests={"cpu": cpu * CPU}, limits={})
    key = f"ns/w{i}"
    return Workload(key=key, namespace="ns", name=f"w{i}", kind="Job", queue="q", priority=0, created=float(i),
                    pod_sets=[PodSet("main", count, t)], pods=[WorkloadPod(f"{key}-{k}", t, "main")
                                                               for k in range(count)], order=i)


def _cluster(nodes: int) -> ClusterState:
    return ClusterState([NodeState(f"n{i}", {"kubernetes.io/hostname": f"n{i}"}, (), {"cpu": 4 * CPU, "pods": 10},
                                   {}, []) for i in range(nodes)])


def _settle(policy: KueuePolicy, now: float) -> list[str]:
    admitted: list[str] = []
    for _ in range(50):
        admitted += [a.workload for a in policy.cycle(now).admitted]
        if policy.settled():
            break
    return admitted


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.integers(1, 3), quota=st.integers(2, 12),
       specs=st.lists(st.tuples(st.integers(1, 5), st.integers(1, 3)), min_size=1, max_size=10),
       ends=st.lists(st.integers(0, 9), max_size=3))
def test_a_rebuilt_policy_carrying_the_memory_decides_as_the_kept_one(
        nodes: int, quota: int, specs: list[tuple[int, int]], ends: list[int]) -> None:
    """Run a policy until it settles (its unfit heads parked), rebuild one from what it admitted, bound where it
    placed it, and carry the parked memory over: the rebuilt policy parks the same workloads, and when some of the
    admitted workloads end, both admit the same workloads next."""
    m = _manifests(quota)
    workloads = [_workload(i, cpu, count) for i, (cpu, count) in enumerate(specs)]
    kept = KueuePolicy(m, _cluster(nodes), placer_factory=first_fit_factory)
    for w in workloads:
        kept.submit(w, 100.0)
    _settle(kept, 100.0)
    memory = ParkedMemory()
    memory.carry(KueuePolicy(m, _cluster(nodes)), SAME)  # (what the driver saw the cycle before)
    memory.remember_parked(kept)
    assert kept.cluster is not None
    placements = kept.cluster.placements
    again = KueuePolicy(m, _cluster(nodes), placer_factory=first_fit_factory)
    for w in workloads:
        bound = [replace(p, node_name=placements[p.key].node if p.key in placements else None) for p in w.pods]
        again.submit(replace(w, pods=bound), 101.0)
    memory.carry(again, SAME)
    assert parked_in(again.state) == parked_in(kept.state)
    event("parked" if memory.parked else "nothing parked")
    assert not _settle(again, 101.0)  # nothing it parked is tried again, and nothing else fits
    admitted = sorted(i.key for i in kept.state.admitted_infos())
    for end in ends:
        if admitted:
            key = admitted.pop(end % len(admitted))
            kept.finish(key, 102.0)
            again.finish(key, 102.0)
    admitted_next = _settle(kept, 103.0)
    event("admitted after the release" if admitted_next else "nothing admitted after the release")
    assert _settle(again, 103.0) == admitted_next
