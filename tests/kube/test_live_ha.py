"""High availability of the live scheduler: one leader binds, shutdown hands over, restarts bind nothing twice."""

from __future__ import annotations

import json
from collections.abc import Callable

import kmock
from kube_apisim import ApiSim, status
from live_env import NS, bindings, bound_node, node, pod, stamp, wait_until

from gpufleet.k8s import resources as r
from gpufleet.live.scheduler import Scheduler

LEASES = kmock.resource("coordination.k8s.io", "v1", "leases")


def _agent(request: kmock.Request) -> str:
    return str(request.headers.get("User-Agent"))


def test_only_the_leader_binds_and_a_graceful_stop_hands_over(
    apisim: ApiSim, live_scheduler: Callable[..., Scheduler]
) -> None:
    apisim.create(r.NODES, node("n0", gpus=8))
    a = live_scheduler("a", leader_elect=True)
    b = live_scheduler("b", leader_elect=True)
    wait_until(lambda: a.is_leader() or b.is_leader(), what="a leader")
    leader, follower = (a, b) if a.is_leader() else (b, a)
    for i in range(3):
        apisim.create(r.PODS, pod(f"p{i}"))
    wait_until(lambda: all(bound_node(apisim, f"p{i}") for i in range(3)))
    assert {_agent(q) for q in bindings(apisim)} == {f"gpufleet-test/{leader.identity}"}
    assert not follower.reports  # the follower never ran a cycle
    assert follower.informers.synced  # ... but its caches are warm
    ready = follower.readyz()
    assert ready.ok and "follower" in ready.text and leader.identity in ready.text
    assert "leader" in leader.readyz().text

    leader.stop()  # SIGTERM path: finish the cycle, release the Lease
    released = [q for q in apisim.writes(r.LEASES, "PUT") if q.data["spec"]["holderIdentity"] == ""]
    assert [_agent(q) for q in released] == [f"gpufleet-test/{leader.identity}"]
    wait_until(lambda: follower.is_leader(), timeout=5.0, what="takeover")
    apisim.create(r.PODS, pod("after-takeover"))
    wait_until(lambda: bound_node(apisim, "after-takeover") == "n0")
    [late] = bindings(apisim, "after-takeover")
    assert _agent(late) == f"gpufleet-test/{follower.identity}"
    assert len(bindings(apisim)) == 4  # nobody bound anything twice


def test_losing_the_lease_stops_the_process_with_an_error(
    apisim: ApiSim, live_scheduler: Callable[..., Scheduler]
) -> None:
    apisim.create(r.NODES, node("n0", gpus=1))
    sched = live_scheduler("a", leader_elect=True)
    wait_until(sched.is_leader, what="leading")
    wait_until(lambda: bool(sched.reports), what="a cycle")
    renewals = apisim.kmock["put", LEASES]
    apisim.harness.call(lambda: renewals << 500 << status(500, "InternalError", "etcd down"))
    assert sched.wait(timeout=5.0)
    assert sched.exit_code == 1 and not sched.healthz().ok
    apisim.create(r.PODS, pod("late"))
    assert not bindings(apisim, "late")


def test_a_restart_rebuilds_from_the_api_and_binds_nothing_twice(
    apisim: ApiSim, live_scheduler: Callable[..., Scheduler]
) -> None:
    for i in range(2):
        apisim.create(r.NODES, node(f"n{i}", gpus=4))
    apisim.create(r.PODS, pod("single", gpus=2))
    for i in range(2):
        apisim.create(r.PODS, pod(f"g{i}", group="pair", group_size=2))
    first = live_scheduler("first")
    wait_until(lambda: all(bound_node(apisim, n) for n in ("single", "g0", "g1")))
    first.stop()
    taken = {n: json.loads(apisim.get(r.PODS, NS, n)["metadata"]["annotations"]["gpufleet.io/devices"])
             for n in ("single", "g0", "g1")}

    # A scheduler that crashed between writing an intent and posting the Binding left this behind.
    stale = {"gpufleet.io/node": "n1", "gpufleet.io/devices": json.dumps(["GPU-n1-3"]),
             "gpufleet.io/assigned-at": stamp()}
    apisim.create(r.PODS, pod("half-done", annotations=stale))
    second = live_scheduler("second")
    wait_until(lambda: bound_node(apisim, "half-done") is not None)
    apisim.create(r.PODS, pod("new"))
    wait_until(lambda: bound_node(apisim, "new") is not None)
    wait_until(lambda: len(second.reports) >= 3)

    for name in ("single", "g0", "g1", "half-done", "new"):
        assert len(bindings(apisim, name)) == 1, name
    assert all(_agent(q) == "gpufleet-test/first" for q in bindings(apisim) if q.name in taken)
    # The restarted scheduler charged the running pods' recorded devices: nobody was given a taken GPU.
    held = [d for devices in taken.values() for d in devices]
    for name in ("half-done", "new"):
        got = json.loads(apisim.get(r.PODS, NS, name)["metadata"]["annotations"]["gpufleet.io/devices"])
        assert not set(got) & set(held), name
    assert 'code="409"' not in second.metrics.exposition().decode()
