"""The scheduler's fleet metrics (gpufleet.live.fleet_metrics) computed from a cycle's World and Plan.

Examples pin each metric on a small cluster whose figures are worked out by hand; hypothesis checks the
invariants that tie them together on random clusters (held + idle + unhealthy-free capacity = capacity,
fragmented <= idle, per-queue holdings sum to the fleet's, cost = holdings x catalog price).
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live_env import cluster_queue, flavor, local_queue, node, pod, stamp

from gpufleet.api.objects import SchedulerConfig
from gpufleet.gpu.catalog import DEFAULT_CATALOG
from gpufleet.k8s import resources as r
from gpufleet.k8s.annotations import intent_annotations
from gpufleet.k8s.informer import CacheSnapshot
from gpufleet.k8s.parsing import ParseCache
from gpufleet.live import planner
from gpufleet.live.assumed import AssumedPods
from gpufleet.live.evictor import Victim
from gpufleet.live.fleet_metrics import FleetMetrics
from gpufleet.live.world import World, assemble, finish
from gpufleet.scheduler_metrics import SchedulerMetrics

JsonDict = dict[str, Any]
POOL = "gpufleet.io/node-pool"


def snapshot(objects: dict[str, list[JsonDict]]) -> CacheSnapshot:
    out: dict[str, dict[str, JsonDict]] = {}
    for i, (key, items) in enumerate(objects.items()):
        res = next(t for t in r.SCHEDULER_RESOURCES if t.key == key)
        bucket = out.setdefault(key, {})
        for j, o in enumerate(items):
            o = json.loads(json.dumps(o))
            o["metadata"]["resourceVersion"] = f"{i}.{j}"
            bucket[res.object_key(o)] = o
    return CacheSnapshot(1, out)


def cycle(objects: dict[str, list[JsonDict]], now: float | None = None) -> tuple[World, planner.Plan]:
    world = assemble(snapshot(objects), scheduler_name="gpufleet", kueue=SchedulerConfig(), parse=ParseCache(),
                     assumed=AssumedPods(), now=time.time() if now is None else now)
    finish(world)
    plan = planner.run(planner.make_policy(world, "gpufleet", set()), world.now)
    return world, plan


def observed(objects: dict[str, list[JsonDict]], now: float | None = None) -> tuple[SchedulerMetrics, planner.Plan]:
    world, plan = cycle(objects, now)
    metrics = SchedulerMetrics()
    FleetMetrics(metrics).observe(world, plan)
    return metrics, plan


def value(m: SchedulerMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def series(m: SchedulerMetrics, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(s.labels.items())): s.value for fam in m.registry.collect() for s in fam.samples
            if s.name == name}


def quota_cq(name: str, gpus: int, *, cohort: str | None = None, borrowing: int | None = None,
             lending: int | None = None) -> JsonDict:
    cq = cluster_queue(name, gpus, cohort=cohort)
    gpu = cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]
    if borrowing is not None:
        gpu["borrowingLimit"] = borrowing
    if lending is not None:
        gpu["lendingLimit"] = lending
    return cq


def queues(*cqs: JsonDict) -> dict[str, list[JsonDict]]:
    return {"resourceflavors.gpufleet.io": [flavor("gpu")], "clusterqueues.gpufleet.io": list(cqs),
            "localqueues.gpufleet.io": [local_queue(cq["metadata"]["name"], cq["metadata"]["name"]) for cq in cqs]}


def test_gpus_held_idle_and_cost_per_pool_model_and_queue() -> None:
    a100 = DEFAULT_CATALOG.get("A100-SXM4-80GB").price_per_hour
    h100 = DEFAULT_CATALOG.get("H100-SXM5-80GB").price_per_hour
    objects = {
        "nodes": [node("a0", gpus=4, labels={POOL: "train"}), node("a1", gpus=4, labels={POOL: "train"}),
                  node("h0", gpus=8, model="H100-SXM5-80GB", labels={POOL: "infer"})],
        **queues(quota_cq("research", 8), quota_cq("prod", 8)),
        "pods": [pod("r0", gpus=3, queue="research", node_name="a0"), pod("r1", gpus=2, queue="research",
                                                                             node_name="h0"),
                 pod("p0", gpus=4, queue="prod", node_name="a1"),
                 pod("other", gpus=1, scheduler="default-scheduler", node_name="h0")],
    }
    m, _ = observed(objects)
    assert value(m, "gpufleet_gpus_capacity", node_pool="train", model="A100-SXM4-80GB") == 8
    assert value(m, "gpufleet_gpus_held", node_pool="train", model="A100-SXM4-80GB") == 7
    assert value(m, "gpufleet_gpus_idle", node_pool="train", model="A100-SXM4-80GB") == 1
    assert value(m, "gpufleet_gpus_held", node_pool="infer", model="H100-SXM5-80GB") == 3
    assert value(m, "gpufleet_gpus_idle", node_pool="infer", model="H100-SXM5-80GB") == 5
    assert value(m, "gpufleet_gpus_unhealthy", node_pool="infer", model="H100-SXM5-80GB") == 0
    held = series(m, "gpufleet_cluster_queue_gpus_held")
    assert held == {
        (("cluster_queue", "research"), ("model", "A100-SXM4-80GB"), ("node_pool", "train")): 3.0,
        (("cluster_queue", "research"), ("model", "H100-SXM5-80GB"), ("node_pool", "infer")): 2.0,
        (("cluster_queue", "prod"), ("model", "A100-SXM4-80GB"), ("node_pool", "train")): 4.0,
        (("cluster_queue", ""), ("model", "H100-SXM5-80GB"), ("node_pool", "infer")): 1.0,  # another scheduler's
    }
    cost = series(m, "gpufleet_cluster_queue_cost_per_hour")
    assert math.isclose(sum(v for k, v in cost.items() if ("cluster_queue", "research") in k), 3 * a100 + 2 * h100)
    assert math.isclose(value(m, "gpufleet_cluster_queue_cost_per_hour", cluster_queue="prod", node_pool="train",
                              model="A100-SXM4-80GB") or 0, 4 * a100)
    assert value(m, "gpufleet_gpu_price_per_hour", model="H100-SXM5-80GB") == h100
    assert value(m, "gpufleet_admitted_active_workloads", cluster_queue="research") == 2
    assert value(m, "gpufleet_admitted_active_workloads", cluster_queue="prod") == 1


def test_queue_usage_quota_and_limits_in_the_resources_units() -> None:
    objects = {"nodes": [node("a0", gpus=8)],
               **queues(quota_cq("research", 4, cohort="lab"), quota_cq("prod", 4, cohort="lab", borrowing=2,
                                                                         lending=1)),
               "pods": [pod("r0", gpus=3, queue="research", node_name="a0", cpu="1500m")]}
    m, _ = observed(objects)
    key = {"cohort": "lab", "cluster_queue": "research", "flavor": "gpu"}
    assert value(m, "gpufleet_cluster_queue_resource_usage", **key, resource="nvidia.com/gpu") == 3
    assert value(m, "gpufleet_cluster_queue_resource_usage", **key, resource="cpu") == 1.5  # cores, not millicores
    assert value(m, "gpufleet_cluster_queue_resource_usage", **key, resource="memory") == 2**30
    assert value(m, "gpufleet_cluster_queue_nominal_quota", **key, resource="nvidia.com/gpu") == 4
    assert value(m, "gpufleet_cluster_queue_borrowing_limit", **key, resource="nvidia.com/gpu") == math.inf
    assert value(m, "gpufleet_cluster_queue_lending_limit", **key, resource="nvidia.com/gpu") == math.inf
    prod = {**key, "cluster_queue": "prod", "resource": "nvidia.com/gpu"}
    assert value(m, "gpufleet_cluster_queue_resource_usage", **prod) == 0
    assert value(m, "gpufleet_cluster_queue_borrowing_limit", **prod) == 2
    assert value(m, "gpufleet_cluster_queue_lending_limit", **prod) == 1
    assert value(m, "gpufleet_cluster_queue_status", cluster_queue="prod", status="active") == 1
    assert value(m, "gpufleet_cluster_queue_status", cluster_queue="prod", status="pending") == 0


def test_a_stopped_or_broken_cluster_queue_is_pending() -> None:
    stopped = quota_cq("frozen", 4)
    stopped["spec"]["stopPolicy"] = "Hold"
    broken = cluster_queue("broken", 4, flavor_name="missing")
    m, _ = observed({"nodes": [node("a0")], **queues(stopped), "clusterqueues.gpufleet.io": [stopped, broken]})
    assert value(m, "gpufleet_cluster_queue_status", cluster_queue="frozen", status="pending") == 1
    assert value(m, "gpufleet_cluster_queue_status", cluster_queue="broken", status="pending") == 1
    assert value(m, "gpufleet_cluster_queue_status", cluster_queue="broken", status="active") == 0


def test_fragmentation_counts_idle_gpus_no_pending_pod_fits() -> None:
    # a0 has 1 idle GPU, a1 has 3; a pod asking 2 fits only on a1 (quota keeps it pending: prod is full).
    base = {"nodes": [node("a0", gpus=4, labels={POOL: "train"}), node("a1", gpus=4, labels={POOL: "train"})],
            **queues(quota_cq("prod", 4))}
    held = [pod("p0", gpus=3, queue="prod", node_name="a0"), pod("p1", gpus=1, queue="prod", node_name="a1")]
    labels = {"node_pool": "train", "model": "A100-SXM4-80GB"}
    m, plan = observed({**base, "pods": [*held, pod("wants2", gpus=2, queue="prod")]})
    assert "ml/wants2" in plan.pending
    assert value(m, "gpufleet_fragmented_gpus", **labels) == 1  # a0's last GPU: too small for it
    m, _ = observed({**base, "pods": [*held, pod("wants4", gpus=4, queue="prod")]})
    assert value(m, "gpufleet_fragmented_gpus", **labels) == 4  # fits nowhere: every idle GPU is stranded
    m, _ = observed({**base, "pods": held})
    assert value(m, "gpufleet_fragmented_gpus", **labels) == 0  # nobody waits: idle is spare, not fragmented


def test_pending_gauge_carries_kueue_status_and_gang_waits() -> None:
    now = 1_800_000_000.0
    objects = {"nodes": [node("a0", gpus=2)], **queues(quota_cq("prod", 2)),
               "pods": [pod("big", gpus=4, queue="prod", created=stamp(now - 60)),
                        *(pod(f"g{i}", gpus=1, queue="prod", group="trio", group_size=3, created=stamp(now - 600))
                          for i in range(2))]}
    m, plan = observed(objects, now)
    # "trio" declares 3 pods and has 2: Kueue would not queue it; the gang gauge shows how long it has waited.
    assert value(m, "gpufleet_gang_pending_seconds", cluster_queue="prod", namespace="ml", workload="trio") == 600
    assert series(m, "gpufleet_gang_pending_seconds").keys() == {
        (("cluster_queue", "prod"), ("namespace", "ml"), ("workload", "trio"))}  # "big" is a single pod
    assert set(plan.pending) == {"ml/big", "ml/trio"}


def test_set_pending_derives_kueue_status_from_the_reason() -> None:
    m = SchedulerMetrics()
    m.set_pending({("prod", "Queued"): 2, ("prod", "InsufficientQuota"): 1, ("", "Invalid"): 1})
    assert value(m, "gpufleet_pending_workloads", cluster_queue="prod", status="active", reason="Queued") == 2
    assert value(m, "gpufleet_pending_workloads", cluster_queue="prod", status="inadmissible",
                 reason="InsufficientQuota") == 1
    m.set_pending({("prod", "Queued"): 1})
    assert len(series(m, "gpufleet_pending_workloads")) == 1  # the others are gone, not left at their last value


def test_admissions_are_counted_when_the_cache_shows_them_bound() -> None:
    now = 1_800_000_000.0
    base = {"nodes": [node("a0", gpus=4)], **queues(quota_cq("prod", 4))}

    def bound(name: str, created: float, at: float | None, **kw: Any) -> JsonDict:
        notes = {k: v for k, v in intent_annotations("a0", (), at, None).items() if v is not None} if at else {}
        return pod(name, gpus=1, queue="prod", created=stamp(created), node_name="a0", annotations=notes, **kw)

    m = SchedulerMetrics()
    fleet = FleetMetrics(m)
    old = bound("old", now - 9000, now - 8000)
    world, plan = cycle({**base, "pods": [old, pod("a", gpus=1, queue="prod", created=stamp(now - 30))]}, now)
    fleet.observe(world, plan)  # the first cycle: "old" was admitted before anybody counted
    assert value(m, "gpufleet_admitted_workloads_total", cluster_queue="prod") is None
    gang = [bound(f"g{i}", now - 5, now + 2, group="pair", group_size=2) for i in range(2)]
    world, plan = cycle({**base, "pods": [old, bound("a", now - 30, now + 1), *gang]}, now + 3)
    fleet.observe(world, plan)
    assert value(m, "gpufleet_admitted_workloads_total", cluster_queue="prod") == 2  # a and the pair
    assert value(m, "gpufleet_admission_wait_time_seconds_count", cluster_queue="prod") == 2
    assert value(m, "gpufleet_admission_wait_time_seconds_sum", cluster_queue="prod") == 31 + 7
    assert value(m, "gpufleet_admission_wait_time_seconds_bucket", cluster_queue="prod", le="10.0") == 1
    assert value(m, "gpufleet_gang_wait_seconds_count", cluster_queue="prod") == 1
    fleet.observe(world, plan)  # nothing new: nothing counted twice
    assert value(m, "gpufleet_admitted_workloads_total", cluster_queue="prod") == 2
    # A cycle that carried on from the last names the workloads whose pods' bindings changed: only those are
    # looked at, and what was counted stays counted.
    fleet.observe(world, plan, changed={"ml/a"})
    assert value(m, "gpufleet_admitted_workloads_total", cluster_queue="prod") == 2


def test_a_carried_cycle_counts_the_admissions_of_the_workloads_it_names() -> None:
    now = 1_800_000_000.0
    base = {"nodes": [node("a0", gpus=4)], **queues(quota_cq("prod", 4))}
    landed = pod("b", gpus=1, queue="prod", created=stamp(now - 20), node_name="a0",
                 annotations={k: v for k, v in intent_annotations("a0", (), now - 2, None).items() if v is not None})
    m = SchedulerMetrics()
    fleet = FleetMetrics(m)
    world, plan = cycle({**base, "pods": [pod("b", gpus=1, queue="prod", created=stamp(now - 20))]}, now - 5)
    fleet.observe(world, plan)
    world, plan = cycle({**base, "pods": [landed]}, now)
    fleet.observe(world, plan, changed=set())  # told nothing changed: nothing looked at, nothing counted
    assert value(m, "gpufleet_admitted_workloads_total", cluster_queue="prod") is None
    fleet.observe(world, plan, changed={"ml/b"})
    assert value(m, "gpufleet_admitted_workloads_total", cluster_queue="prod") == 1
    assert value(m, "gpufleet_admission_wait_time_seconds_sum", cluster_queue="prod") == 18


def test_evictions_count_only_when_carried_out() -> None:
    now = 1_800_000_000.0
    objects = {"nodes": [node("a0", gpus=4)], **queues(quota_cq("prod", 4)),
               "pods": [pod(n, gpus=1, queue="prod", node_name="a0") for n in ("a", "b", "c")]}
    _, plan = cycle(objects, now)
    m = SchedulerMetrics()
    victims = [Victim("ml/a", "ml/c", "InClusterQueue", ()), Victim("ml/b", "", "PodsReadyTimeout", ()),
               Victim("ml/c", "ml/a", "InClusterQueue", ())]
    FleetMetrics(m).carried_out(plan, victims, evicted={"ml/a", "ml/b"})
    assert value(m, "gpufleet_evicted_workloads_total", cluster_queue="prod", reason="Preempted") == 1
    assert value(m, "gpufleet_evicted_workloads_total", cluster_queue="prod", reason="PodsReadyTimeout") == 1
    assert value(m, "gpufleet_preempted_workloads_total", preempting_cluster_queue="prod",
                 reason="InClusterQueue") == 1  # ml/c's eviction was not carried out


# --- invariants -------------------------------------------------------------------------------------------

_MODELS = ("A100-SXM4-80GB", "H100-SXM5-80GB", "L4")


@st.composite
def clusters(draw: st.DrawFn) -> dict[str, list[JsonDict]]:
    nodes, pods = [], []
    for i in range(draw(st.integers(1, 5))):
        gpus = draw(st.integers(1, 8))
        raw = node(f"n{i}", gpus=gpus, model=draw(st.sampled_from(_MODELS)),
                   labels={POOL: draw(st.sampled_from(["a", "b"]))})
        if draw(st.booleans()):  # one GPU marked Unhealthy in the inventory
            inventory = json.loads(raw["metadata"]["annotations"]["gpufleet.io/gpus"])
            inventory["gpus"][draw(st.integers(0, gpus - 1))]["health"] = "Unhealthy"
            raw["metadata"]["annotations"]["gpufleet.io/gpus"] = json.dumps(inventory)
        nodes.append(raw)
        for j in range(draw(st.integers(0, 3))):
            pods.append(pod(f"b{i}-{j}", gpus=draw(st.integers(1, 3)), queue=draw(st.sampled_from(["q1", "q2"])),
                            node_name=f"n{i}"))
    for k in range(draw(st.integers(0, 4))):
        pods.append(pod(f"w{k}", gpus=draw(st.integers(1, 8)), queue=draw(st.sampled_from(["q1", "q2"]))))
    return {"nodes": nodes, **queues(quota_cq("q1", draw(st.integers(0, 16))), quota_cq("q2", 4)), "pods": pods}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_fleet_gauges_add_up(objects: dict[str, list[JsonDict]]) -> None:
    world, plan = cycle(objects)
    m = SchedulerMetrics()
    FleetMetrics(m).observe(world, plan)
    capacity = series(m, "gpufleet_gpus_capacity")
    held, idle = series(m, "gpufleet_gpus_held"), series(m, "gpufleet_gpus_idle")
    fragmented = series(m, "gpufleet_fragmented_gpus")
    unhealthy = series(m, "gpufleet_gpus_unhealthy")
    assert capacity.keys() == held.keys() == idle.keys() == fragmented.keys() == unhealthy.keys()
    for key, cap in capacity.items():
        assert held[key] + idle[key] <= cap + 1e-9
        assert idle[key] <= cap - unhealthy[key] + 1e-9
        assert -1e-9 <= fragmented[key] <= idle[key] + 1e-9
    healthy_free = sum(g.free_milli for n in world.cluster.nodes.values() for g in n.gpus if g.healthy) / 1000
    assert math.isclose(sum(idle.values()), healthy_free, abs_tol=1e-9)
    assert math.isclose(sum(held.values()), sum(g.used_milli for n in world.cluster.nodes.values()
                                                for g in n.gpus) / 1000, abs_tol=1e-9)
    by_queue = series(m, "gpufleet_cluster_queue_gpus_held")
    assert math.isclose(sum(by_queue.values()), sum(held.values()), abs_tol=1e-9)
    cost = series(m, "gpufleet_cluster_queue_cost_per_hour")
    for key, gpus in by_queue.items():
        model = dict(key)["model"]
        price = DEFAULT_CATALOG.price(model) if model else 0.0
        assert math.isclose(cost[key], gpus * price, abs_tol=1e-9)
    if not plan.pending:
        assert sum(fragmented.values()) == 0


def test_a_failure_computing_metrics_is_logged_and_counted_not_raised(caplog: Any) -> None:
    world, plan = cycle({"nodes": [node("a0")], "pods": [pod("p")]})
    m = SchedulerMetrics()
    fleet = FleetMetrics(m)
    world.cluster = None  # type: ignore[assignment]  # a bug's stand-in: the computation raises
    fleet.observe(world, plan)
    assert value(m, "gpufleet_metrics_failures_total") == 1
    assert "computing the fleet metrics failed" in caplog.text


def test_gauges_are_recomputed_at_most_once_per_refresh_period() -> None:
    now = [100.0]
    objects = {"nodes": [node("a0", gpus=4)], **queues(quota_cq("prod", 4)), "pods": []}
    m = SchedulerMetrics()
    fleet = FleetMetrics(m, refresh=2.0, clock=lambda: now[0])
    fleet.observe(*cycle(objects))
    held = {**objects, "pods": [pod("p", gpus=3, queue="prod", node_name="a0")]}
    fleet.observe(*cycle(held))
    assert value(m, "gpufleet_gpus_held", node_pool="", model="A100-SXM4-80GB") == 0  # within the period
    now[0] += 2.0
    fleet.observe(*cycle(held))
    assert value(m, "gpufleet_gpus_held", node_pool="", model="A100-SXM4-80GB") == 3
