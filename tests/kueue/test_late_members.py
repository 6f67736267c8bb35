"""Pods joining their admitted workload and leaving it (``KueuePolicy.join`` / ``leave``, kueue/late_members.py):
a replacement for a failed pod, a StatefulSet's next ordinal. They take the admission's flavors, hold no quota of
their own, wait without evicting anyone when there is no room, and a pod gone frees its node, not its quota."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.cluster.state import ClusterState
from gpufleet.cluster.workloads import Workload
from gpufleet.scheduling.kueue import KueuePolicy, PlacerFactory, first_fit_factory
from gpufleet.scheduling.kueue.info import State
from gpufleet.scheduling.kueue.late_members import joins_late
from tests.kueue.scenario import Scenario, job, names
from tests.kueue.test_cohorts import FLAVOR, cq
from tests.kueue.test_gangs import PLACERS, POOLS, node, placed_pods

FR = ("default", "cpu")


def pods_of(s: Scenario, workload: str) -> list[str]:
    return [p.key for w in s.workloads if w.key == f"default/{workload}" for p in w.pods]


def record_pods(s: Scenario, workload: str) -> set[str]:
    info = s.policy.info(f"default/{workload}")
    assert info is not None and info.admission is not None
    return {p.pod for p in info.admission.pods}


@pytest.mark.parametrize("placer", PLACERS)
def test_a_pod_that_left_rejoins_its_workload_with_the_quota_it_already_had(placer: PlacerFactory | None) -> None:
    s = Scenario(FLAVOR + cq("team", 6, None) + node("n1") + node("n2") + job("web", "team", cpu="2", count=3),
                 cluster=True, placer_factory=placer)
    s.cycle()
    gone = pods_of(s, "web")[0]
    assert s.usage("team") == 6000
    assert s.policy.leave("default/web", gone, s.now)
    assert gone not in placed_pods(s, "web") and gone not in record_pods(s, "web")
    assert s.usage("team") == 6000  # the quota is the workload's: a pod gone gives none back
    joining = s.policy.join("default/web", [gone], s.now)
    assert joining is not None and joining.waiting is None
    assert [p.pod for p in joining.placed] == [gone] and placed_pods(s, "web")[gone] in ("n1", "n2")
    assert gone in record_pods(s, "web") and s.usage("team") == 6000
    assert not s.policy.leave("default/web", "default/not-a-pod", s.now)
    assert s.policy.join("default/web", [gone], s.now) is None  # placed already: nothing to decide


@pytest.mark.parametrize("placer", PLACERS)
def test_a_late_pod_takes_the_flavor_its_workload_was_admitted_with(placer: PlacerFactory | None) -> None:
    s = Scenario(POOLS + job("w", "team", cpu="2", count=2), cluster=True, placer_factory=placer)
    s.cycle()
    assert s.flavors_of("w") == {"cpu": "pool-b"}
    gone = pods_of(s, "w")[1]
    s.policy.leave("default/w", gone, s.now)
    joining = s.policy.join("default/w", [gone], s.now)
    assert joining is not None and joining.placed
    assert joining.placed[0].node in {"b1", "b2", "b3", "b4"}  # a1 has room, but not pool-b's label


def test_a_late_pod_without_room_waits_and_evicts_nobody() -> None:
    s = Scenario(FLAVOR + cq("team", 100, None) + node("n1") + job("web", "team", cpu="2", count=2, created=1),
                 cluster=True)
    s.cycle()
    gone = pods_of(s, "web")[0]
    s.policy.leave("default/web", gone, s.now)
    s.add(job("squatter", None, cpu="2", created=2))  # no queue: gated only by nodes, it takes the room freed
    assert names(s.cycle().admitted) == ["squatter"]
    before = dict(s.policy.cluster.placements) if s.policy.cluster is not None else {}
    joining = s.policy.join("default/web", [gone], s.now)
    assert joining is not None and joining.placed == () and joining.waiting
    assert "admitted; this pod, created after it, waits for room" in joining.message("Job")
    assert s.policy.cluster is not None and s.policy.cluster.placements == before
    d = s.cycle()
    assert not d.preempted and gone not in record_pods(s, "web")


def test_a_pod_that_leaves_wakes_workloads_waiting_for_nodes() -> None:
    s = Scenario(FLAVOR + cq("team", 100, None) + node("n1") + job("web", "team", cpu="2", count=2, created=1) +
                 job("next", "team", cpu="2", created=2), cluster=True)
    assert names(s.cycle().admitted) == ["web"]
    s.cycle()
    assert "next" in s.pending() and s.policy.state.placement_parked  # parked until nodes free up
    s.policy.leave("default/web", pods_of(s, "web")[0], s.now)
    assert names(s.cycle().admitted) == ["next"]


def test_nothing_to_join_without_an_admission_or_without_nodes() -> None:
    s = Scenario(FLAVOR + cq("team", 2, None) + node("n1") + job("a", "team", cpu="2", created=1) +
                 job("b", "team", cpu="2", created=2), cluster=True)
    s.cycle()
    assert s.policy.join("default/b", pods_of(s, "b"), s.now) is None  # pending, not admitted
    assert s.policy.join("default/a", [], s.now) is None
    assert s.policy.join("default/nobody", ["default/nobody-x"], s.now) is None
    quota_only = Scenario(FLAVOR + cq("team", 2, None) + job("a", "team", cpu="2"))
    quota_only.cycle()
    assert quota_only.policy.join("default/a", pods_of(quota_only, "a"), quota_only.now) is None


def test_which_kinds_join_late() -> None:
    def kind(k: str) -> Workload:
        return Workload(key="ns/x", namespace="ns", name="x", kind=k, queue=None, priority=0, created=0.0,
                        pod_sets=[], pods=[])

    assert all(joins_late(kind(k)) for k in ("Job", "JobSet", "StatefulSet", "LeaderWorkerSet"))
    assert not any(joins_late(kind(k)) for k in ("Pod", "PodGroup", "Workload"))


# ---- property: pods leaving and joining keep the books right --------------------------------------------------

op = st.tuples(st.sampled_from(["leave", "join", "cycle"]), st.integers(0, 7), st.integers(0, 7))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.integers(1, 3), jobs=st.lists(st.tuples(st.integers(1, 3), st.integers(1, 3)), min_size=1,
                                               max_size=5), ops=st.lists(op, max_size=25))
def test_leaving_and_joining_never_touch_quota_and_join_all_or_none(
        nodes: int, jobs: list[tuple[int, int]], ops: list[tuple[str, int, int]]) -> None:
    """Whatever pods leave and join, in whatever order, between cycles: quota usage is what the admissions charged
    (neither call changes it), each admission records exactly its workload's pods on nodes, the nodes' books add up,
    and a join places every pod asked for or leaves the cluster as it was."""
    text = FLAVOR + cq("team", 8, None) + "".join(node(f"n{i}") for i in range(nodes))
    text += "".join(job(f"j{i}", "team", cpu=str(cpu), count=count, created=i + 1)
                    for i, (cpu, count) in enumerate(jobs))
    s = Scenario(text, cluster=True, placer_factory=first_fit_factory)
    policy, cluster = s.policy, s.policy.cluster
    assert cluster is not None
    gone: dict[str, set[str]] = {}  # workload -> its pods that left and have not joined again
    for what, w, p in ops:
        admitted = sorted(i.key for i in policy.state.admitted_infos())
        if what == "cycle" or not admitted:
            for pre in s.cycle().preempted:
                gone.pop(pre.workload, None)  # evicted whole: requeued with every pod
            check(policy, cluster, s)
            continue
        key = admitted[w % len(admitted)]
        info = policy.info(key)
        assert info is not None and info.admission is not None
        if what == "leave" and info.admission.pods:
            pod = info.admission.pods[p % len(info.admission.pods)].pod
            assert policy.leave(key, pod, s.now)
            gone.setdefault(key, set()).add(pod)
        elif what == "join" and gone.get(key):
            asked = sorted(gone[key])
            before = dict(cluster.placements)
            joining = policy.join(key, asked, s.now)
            assert joining is not None
            if joining.waiting is None:
                assert sorted(pa.pod for pa in joining.placed) == asked
                assert all(pod in cluster.placements for pod in asked)
                del gone[key]
            else:
                assert joining.placed == () and cluster.placements == before
        check(policy, cluster, s)
    for key in [k for k, info in policy.state.infos.items() if info.state is State.ADMITTED]:
        policy.finish(key, s.now)
    assert not cluster.placements and s.usage("team") == 0  # whatever left and joined, finishing frees it all


def check(policy: KueuePolicy, cluster: ClusterState, s: Scenario) -> None:
    cluster.check_invariants()
    charged = sum(i.admission.usage.get(FR, 0) for i in policy.state.admitted_infos() if i.admission is not None)
    assert policy.state.tree.usage("team", FR) == charged
    recorded: set[str] = set()
    for info in policy.state.admitted_infos():
        assert info.admission is not None
        pods = {pa.pod for pa in info.admission.pods}
        assert len(pods) == len(info.admission.pods) and pods <= set(cluster.placements)
        recorded |= pods
    assert recorded == set(cluster.placements)
