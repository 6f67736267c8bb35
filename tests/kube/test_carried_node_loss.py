"""A node removed under its pods (a node lost, a spot instance reclaimed: the pods stay bound to it until the pod
garbage collector deletes them) no longer makes every cycle a full one: the kept state leaves them where a rebuild
leaves them, charged nowhere, their workloads admitted again as a rebuild admits them, and the cycles that carry
on decide what a rebuild decides on the same snapshot. A node of that name joining again takes a full cycle (which
charges them there); a pod of a workload of several pods on it does too (a gang's repair judges it).

In process, as tests/kube/test_carried_cycles.py: an ObjectCache filled by hand, runners that never write."""

from __future__ import annotations

import time
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from live_env import NS, fast_settings, gpu_uuid, local_queue, node, pod, stamp
from test_carried_cycles import BLOCKING, Cluster, _nonzero, first_cycle, outcome, runner
from test_carried_evictions import _rebuilt, _step

from gpufleet.k8s import resources as r
from gpufleet.k8s.annotations import intent_annotations
from gpufleet.live.cycle import _Decided
from gpufleet.live.queuestatus import QueueCounts

JsonDict = dict[str, Any]


def _pooled_queue(quota: int) -> JsonDict:
    """A ClusterQueue of two flavors told apart by the nodes' ``pool`` label: a pod's quota is charged to the
    flavor of the node it runs on, so one left on a node that is gone is charged as a rebuild charges it."""
    flavors = [{"name": f, "resources": [{"name": "cpu", "nominalQuota": "100000"},
                                          {"name": "memory", "nominalQuota": "10Ti"},
                                          {"name": "nvidia.com/gpu", "nominalQuota": quota}]} for f in ("a", "b")]
    return {"apiVersion": "gpufleet.io/v1alpha1", "kind": "ClusterQueue", "metadata": {"name": "cq"},
            "spec": {"namespaceSelector": {}, "resourceGroups": [
                {"coveredResources": ["cpu", "memory", "nvidia.com/gpu"], "flavors": flavors}]}}


def _cluster(nodes: int, gpus: int, held: int, quota: int, grouped: bool) -> Cluster:
    c = Cluster()
    for f in ("a", "b"):
        c.put(r.RESOURCE_FLAVORS, {"apiVersion": "gpufleet.io/v1alpha1", "kind": "ResourceFlavor",
                                   "metadata": {"name": f}, "spec": {"nodeLabels": {"pool": f}}})
    c.put(r.CLUSTER_QUEUES, _pooled_queue(quota), "MODIFIED")
    c.put(r.LOCAL_QUEUES, local_queue("lq", "cq"), "MODIFIED")
    for i in range(nodes):
        name = f"n{i}"
        c.put(r.NODES, node(name, gpus=gpus, labels={"pool": "a" if i % 2 == 0 else "b"}))
        for j in range(min(held, gpus)):
            devices = intent_annotations(name, (gpu_uuid(name, j),), 1_700_000_000.0, None)
            group = {"group": f"g{i}", "group_size": 2} if grouped and j < 2 and held >= 2 and i == 0 else {}
            scheduler = "default-scheduler" if j == 2 else "gpufleet"
            c.put(r.PODS, pod(f"run-{i}-{j}", queue="lq" if scheduler == "gpufleet" else None, node_name=name,
                              scheduler=scheduler, created=stamp(100.0 + j),
                              annotations=devices if scheduler == "gpufleet" else None, **group))
    return c


def _started(**shape: Any) -> tuple[Cluster, Any, float]:
    """:func:`_cluster` of ``shape``, a runner on it, and its first (full) cycle run and kept: when it ran."""
    c = _cluster(**shape)
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    return c, run, now


def _lose(c: Cluster, name: str) -> JsonDict:
    """The node ``name`` deleted under its pods; its object, to bring it back."""
    lost = c.cache.get(r.NODES, name)
    c.put(r.NODES, lost, "DELETED")
    return lost


def _check(c: Cluster, run: Any, at: float) -> tuple[_Decided, bool]:
    rebuilt = _rebuilt(c, run, at)
    d, carried = _step(run, at)
    if carried:
        assert outcome(d)[0] == outcome(rebuilt)[0] and set(outcome(d)[1]) == set(outcome(rebuilt)[1])
        assert d.counts is not None and _nonzero(d.counts) == _nonzero(QueueCounts(d.plan.policy))
        assert _nonzero(QueueCounts(d.plan.policy)) == _nonzero(QueueCounts(rebuilt.plan.policy))
        assert {n.name for n in d.world.nodes} == {n.name for n in rebuilt.world.nodes}
    d.world.cluster.check_invariants()
    return d, carried


def test_a_node_lost_under_its_pods_is_carried_until_they_are_collected_and_its_return_is_a_full_cycle() -> None:
    c, run, now = _started(nodes=2, gpus=4, held=3, quota=4, grouped=False)
    lost = _lose(c, "n0")
    c.put(r.PODS, pod("new0", queue="lq", created=stamp(now)))
    d, carried = _check(c, run, now + 1)
    assert carried, "a node lost under its pods: carried on"
    assert {f"{NS}/run-0-0", f"{NS}/run-0-1"} <= set(d.world.unaccounted)
    # Its pods still hold their quota (flavor a, as a rebuild charges them); the new pod goes to n1.
    assert [(j.workload, j.pods[0].node) for j in d.jobs] == [(f"{NS}/new0", "n1")]
    for j in range(3):  # the pod garbage collector
        c.put(r.PODS, c.cache.get(r.PODS, f"{NS}/run-0-{j}"), "DELETED")
    d, carried = _check(c, run, now + 2)
    assert carried
    c.put(r.NODES, lost)  # back, empty: a node joining
    _, carried = _check(c, run, now + 3)
    assert carried


def test_a_node_back_under_pods_still_bound_to_it_takes_a_full_cycle() -> None:
    c, run, now = _started(nodes=2, gpus=4, held=2, quota=8, grouped=False)
    lost = _lose(c, "n0")
    _, carried = _check(c, run, now + 1)
    assert carried
    c.put(r.NODES, lost)
    d, carried = _check(c, run, now + 2)
    assert not carried and not d.world.unaccounted  # (a full cycle charged them on it again)


def _ready(c: Cluster, name: str, ready: bool) -> None:
    raw = c.cache.get(r.PODS, f"{NS}/{name}")
    status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    c.put(r.PODS, {**raw, "status": status}, "MODIFIED")


def test_a_pod_not_ready_on_a_node_lost_still_holds_admission_back() -> None:
    """waitForPodsReady's blockAdmission: the workload of a pod left on a node that is gone, admitted again, is judged
    again on its pod's readiness, as a rebuild judges it (found by a review: it came back ready)."""
    now = time.time()
    c = _cluster(nodes=2, gpus=2, held=0, quota=8, grouped=False)
    devices = intent_annotations("n0", (gpu_uuid("n0", 0),), now - 5, None)  # bound 5 s ago: not late yet
    c.put(r.PODS, pod("run-0-0", queue="lq", node_name="n0", created=stamp(now - 5), annotations=devices))
    run = runner(c, fast_settings(cycle_period=3600.0, kueue=BLOCKING))
    first_cycle(run, now)
    _ready(c, "run-0-0", True)
    _check(c, run, now + 1)
    _ready(c, "run-0-0", False)  # its node going away
    _check(c, run, now + 2)
    _lose(c, "n0")
    c.put(r.PODS, pod("new", queue="lq", created=stamp(now + 3)))
    d, carried = _check(c, run, now + 3)
    assert carried and f"{NS}/new" in outcome(d)[1]  # held back, as a rebuild holds it


def test_a_node_joining_wakes_what_waits_for_the_quota_of_another_flavor() -> None:
    """A flavor search passes over a flavor whose nodes cannot take the workload: one that then waits for the next
    flavor's quota may fit under the first once a node of its pool joins (found by a review: it stayed parked)."""
    c, run, now = _started(nodes=2, gpus=1, held=1, quota=1, grouped=False)
    lost = _lose(c, "n0")
    c.put(r.PODS, c.cache.get(r.PODS, f"{NS}/run-0-0"), "DELETED")
    _check(c, run, now + 1)
    c.put(r.PODS, pod("new", queue="lq", created=stamp(now + 2)))
    d, _ = _check(c, run, now + 2)
    assert "flavor b" in outcome(d)[1][f"{NS}/new"]  # flavor a has no node now; b's quota is spent
    c.put(r.NODES, lost)
    d, carried = _check(c, run, now + 3)
    assert carried and outcome(d)[0] == {f"{NS}/new"}


def test_a_gang_member_on_a_node_lost_takes_a_full_cycle() -> None:
    c, run, now = _started(nodes=2, gpus=4, held=2, quota=8, grouped=True)
    _lose(c, "n0")
    _, carried = _check(c, run, now + 1)
    assert not carried


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(nodes=2, gpus=2, held=2, quota=3, grouped=False, actions=["lose", "new", "new", "gc", "fin"])
@example(nodes=2, gpus=1, held=1, quota=1, grouped=False, actions=["lose", "gc", "new", "back"])  # (a review's)
@given(nodes=st.integers(1, 4), gpus=st.integers(1, 4), held=st.integers(0, 4), quota=st.integers(1, 8),
       grouped=st.booleans(),
       actions=st.lists(st.sampled_from(["lose", "gc", "gc1", "back", "new", "new2", "fin", "add", "leaving"]),
                        min_size=1, max_size=8))
def test_cycles_carried_on_past_nodes_lost_under_pods_decide_as_rebuilds(nodes: int, gpus: int, held: int,
                                                                         quota: int, grouped: bool,
                                                                         actions: list[str]) -> None:
    """Nodes lost under their pods ("lose"), the pods collected ("gc", or one: "gc1") or marked deleted first
    ("leaving"), a lost node back ("back"), pods arriving ("new", "new2": two GPUs), finishing ("fin"), nodes
    added ("add"): every cycle that carries on decides as a rebuild on the same snapshot."""
    c = _cluster(nodes, gpus, held, quota, grouped)
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    lost: dict[str, JsonDict] = {}
    alive = [f"n{i}" for i in range(nodes)]

    def on(names: Any) -> list[str]:
        return sorted(k for k, o in c.cache.snapshot().of(r.PODS).items()
                      if (o.get("spec") or {}).get("nodeName") in names)

    for k, action in enumerate(actions):
        at = now + 1 + k
        if action == "lose" and alive:
            name = alive.pop(0)
            lost[name] = _lose(c, name)
        elif action in ("gc", "gc1", "leaving"):
            keys = on(lost)[:1 if action == "gc1" else None]
            for key in keys:
                raw = c.cache.get(r.PODS, key)
                if action == "leaving":
                    raw = {**raw, "metadata": {**raw["metadata"], "deletionTimestamp": "2026-01-03T00:00:00Z"}}
                    c.put(r.PODS, raw, "MODIFIED")
                else:
                    c.put(r.PODS, raw, "DELETED")
        elif action == "back" and lost:
            name = sorted(lost)[0]
            c.put(r.NODES, lost.pop(name))
            alive.append(name)
        elif action in ("new", "new2"):
            c.put(r.PODS, pod(f"new{k}", gpus=2 if action == "new2" else 1, queue="lq", created=stamp(at)))
        elif action == "fin":
            keys = [key for key in on(alive) if key.startswith(f"{NS}/run-")]
            if keys:
                raw = c.cache.get(r.PODS, keys[0])
                c.put(r.PODS, {**raw, "status": {"phase": "Succeeded"}}, "MODIFIED")
        elif action == "add":
            name = f"x{k}"
            c.put(r.NODES, node(name, gpus=2, labels={"pool": "b"}))
            alive.append(name)
        _check(c, run, at)
