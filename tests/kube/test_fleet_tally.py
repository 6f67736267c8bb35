"""The fleet's GPU gauges kept node by node (gpufleet.live.fleet_tally) are the gauges worked out afresh.

Cycles carry on from a first full one (as in test_carried_cycles: pods arrive, running ones end, Bindings land);
after each, one FleetMetrics that has followed every cycle and one that sees only this cycle's world must show
the same GPU gauges, to the last bit, and the first must have looked again only at the nodes that changed."""

from __future__ import annotations

import itertools
import json
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live_env import NS, pod
from test_carried_cycles import build, first_cycle, land, runner, step

from gpufleet.k8s import resources as r
from gpufleet.live.fleet_metrics import FleetMetrics
from gpufleet.live.fleet_tally import FleetTally
from gpufleet.scheduler_metrics import SchedulerMetrics

GAUGES = ("gpufleet_gpus_capacity", "gpufleet_gpus_held", "gpufleet_gpus_idle", "gpufleet_gpus_unhealthy",
          "gpufleet_fragmented_gpus", "gpufleet_gpu_price_per_hour", "gpufleet_cluster_queue_gpus_held",
          "gpufleet_cluster_queue_cost_per_hour")


def gauges(m: SchedulerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for fam in m.registry.collect()
            for s in fam.samples if s.name in GAUGES}


def fleet() -> tuple[SchedulerMetrics, FleetMetrics]:
    m = SchedulerMetrics()
    return m, FleetMetrics(m, refresh=0.0, clock=lambda: 0.0)  # every observation works the gauges out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gpus_per_node=st.lists(st.integers(1, 8), min_size=1, max_size=5),
       held=st.lists(st.integers(0, 8), min_size=5, max_size=5),
       backlog=st.integers(0, 3),
       rounds=st.lists(st.tuples(st.lists(st.integers(1, 4), max_size=6),
                                 st.lists(st.sampled_from(["deleted", "Succeeded", "terminating"]), max_size=3)),
                       min_size=1, max_size=3))
def test_gauges_kept_node_by_node_are_the_gauges_worked_out_afresh(
        gpus_per_node: list[int], held: list[int], backlog: int, rounds: list[tuple[list[int], list[str]]]) -> None:
    c = build(gpus_per_node, held[:len(gpus_per_node)], backlog)
    kept = runner(c)
    now = time.time()
    d = first_cycle(kept, now)
    m, followed = fleet()
    followed.observe(d.world, d.plan)
    assert followed.tally.looked_at == len(gpus_per_node)  # a new cluster state: every node
    made = itertools.count()
    for i, (arrivals, ends) in enumerate(rounds, start=1):
        for job in d.jobs:  # the last cycle's Bindings land
            for p in job.pods:
                land(c, p.key.split("/", 1)[1], p.node)
        running = sorted(k for k, o in c.cache.snapshot().of(r.PODS).items()
                         if (o.get("spec") or {}).get("nodeName") and not (o.get("metadata") or {}).get(
                             "deletionTimestamp") and (o.get("status") or {}).get("phase") not in ("Succeeded",))
        for key, how in zip(running, ends, strict=False):
            obj = json.loads(json.dumps(c.cache.get(r.PODS, key)))
            if how == "deleted":
                c.put(r.PODS, obj, "DELETED")
                continue
            if how == "terminating":
                obj["metadata"]["deletionTimestamp"] = "2026-01-03T00:00:00Z"
            else:
                obj["status"]["phase"] = how
            c.put(r.PODS, obj, "MODIFIED")
        for gpus in arrivals:
            c.put(r.PODS, pod(f"new-{next(made)}", gpus=gpus, queue="lq", created="2026-01-02T00:00:00Z"))
        generations = {name: n.generation for name, n in d.world.cluster.nodes.items()}
        d, carried = step(kept, now + i)
        followed.observe(d.world, d.plan, counts=d.counts, changed=d.changed)
        if carried:  # the same cluster state: only the nodes placed on or released since
            assert followed.tally.looked_at == sum(1 for name, n in d.world.cluster.nodes.items()
                                                   if n.generation != generations[name])
        else:
            assert followed.tally.looked_at == len(gpus_per_node)
        fresh, alone = fleet()
        alone.observe(d.world, d.plan)
        assert gauges(m) == gauges(fresh)


def test_a_new_cluster_state_is_tallied_afresh_and_the_old_one_is_not_listened_to() -> None:
    c = build([4, 4], [1, 2], backlog=0)
    run = runner(c)
    d = first_cycle(run, time.time())
    tally = FleetTally()
    tally.update(d.world.cluster, d.plan.policy, [], lambda pod: "")
    old = d.world.cluster
    assert len(old.listeners) == len(set(old.listeners))
    assert tally.gpus()[("", "A100-SXM4-80GB")][:2] == (8, 3000)
    again = runner(c)
    d2 = again._decide_isolating(c.cache.snapshot(), time.time())
    tally.update(d2.world.cluster, d2.plan.policy, [], lambda pod: "")
    assert tally.looked_at == 2
    assert all(getattr(listener, "__self__", None) is not tally for listener in old.listeners)
    assert tally.gpus()[("", "A100-SXM4-80GB")][:2] == (8, 3000)


def test_idle_gpus_stop_being_stranded_when_the_pod_that_could_not_use_them_goes() -> None:
    c = build([4, 4], [3, 3], backlog=0)
    c.put(r.PODS, pod("pair", gpus=2, queue="lq", created="2026-01-02T00:00:00Z"))  # fits neither node
    run = runner(c)
    now = time.time()
    d = first_cycle(run, now)
    m, followed = fleet()
    followed.observe(d.world, d.plan)
    fragmented = ("gpufleet_fragmented_gpus", (("model", "A100-SXM4-80GB"), ("node_pool", "")))
    assert gauges(m)[fragmented] == 2.0  # one idle GPU on each node, and the pending pair fits on neither
    c.put(r.PODS, c.cache.get(r.PODS, f"{NS}/pair") or {}, "DELETED")
    d, carried = step(run, now + 1)
    assert carried
    followed.observe(d.world, d.plan, counts=d.counts, changed=d.changed)
    assert followed.tally.looked_at == 0  # no node changed; the pending shapes did
    assert gauges(m)[fragmented] == 0.0
    fresh, alone = fleet()
    alone.observe(d.world, d.plan)
    assert gauges(m) == gauges(fresh)


def test_a_pod_name_leaving_one_node_for_another_keeps_its_holding_whatever_the_order() -> None:
    # Between two refreshes ns/x ends on one node and a pod of the same name is placed on another: the kept tally
    # must hold it once, on the new node, whichever changed node it looks at first.
    from gpufleet.cluster.devices import DeviceGrant, GpuSlot
    from gpufleet.cluster.state import ClusterState, NodeState

    def nodes(names: list[str]) -> ClusterState:
        return ClusterState([NodeState(name=n, labels={}, taints=(), allocatable={"nvidia.com/gpu": 1, "pods": 10},
                                       used={}, gpus=[GpuSlot(0, f"GPU-{n}", "A100-SXM4-80GB", 81920, "whole",
                                                              "nvidia.com/gpu")], gpu_model="A100-SXM4-80GB")
                             for n in names])

    class _Policy:  # what placed the pods: the tally keeps a weak reference to it
        pass

    for names in (["w-0", "w-1"], ["w-1", "w-0"], ["a", "b"], ["b", "a"]):
        cluster = nodes(names)
        policy = _Policy()
        tally = FleetTally()
        cluster.allocate("ns/x", names[0], {"nvidia.com/gpu": 1}, [DeviceGrant("whole", 0)])
        tally.update(cluster, policy, [], lambda pod: "q")
        cluster.release("ns/x")
        cluster.allocate("ns/x", names[1], {"nvidia.com/gpu": 1}, [DeviceGrant("whole", 0)])
        tally.update(cluster, policy, [], lambda pod: "q")
        assert tally.looked_at == 2
        [(labels, (share, _))] = tally.holders().items()
        assert labels[0] == "q" and share == 1.0
