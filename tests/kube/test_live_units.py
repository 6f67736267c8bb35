"""The live scheduler's pure parts: device grants of running pods, parse memoisation, assumptions, queue status."""

from __future__ import annotations

import json
import time
from typing import Any

from live_env import cluster_queue, flavor, local_queue, node, pod

from gpufleet.api.objects import GpuDemand, SchedulerConfig
from gpufleet.cluster.state import ClusterState, first_free_grants
from gpufleet.k8s import resources as r
from gpufleet.k8s.annotations import Intent, intent_annotations, read_intent
from gpufleet.k8s.informer import CacheSnapshot
from gpufleet.k8s.parsing import ParseCache
from gpufleet.live import planner
from gpufleet.live.assumed import AssumedPods
from gpufleet.live.cycle import pending_reason
from gpufleet.live.grants import grants_from_ids, visible_devices
from gpufleet.live.queuestatus import queue_statuses
from gpufleet.live.world import assemble, finish

JsonDict = dict[str, Any]


def _node_state(name: str, sharing: JsonDict, gpus: list[JsonDict], allocatable: dict[str, str]) -> Any:
    raw = node(name, gpus=0)
    raw["metadata"]["annotations"]["gpufleet.io/gpus"] = json.dumps(
        {"model": "A100-SXM4-80GB", "memoryMiB": 81920, "sharing": sharing, "gpus": gpus, "nvlinks": []})
    raw["status"]["allocatable"] = raw["status"]["capacity"] = {"cpu": "8", "memory": "64Gi", "pods": "110",
                                                                **allocatable}
    parsed = ParseCache().one(r.NODES, name, raw)
    assert parsed.obj is not None, parsed.message
    return ClusterState.from_nodes([parsed.obj]).nodes[name]  # type: ignore[list-item]


def test_grants_read_back_mig_replica_and_fraction_devices() -> None:
    mig = _node_state("m", {"migStrategy": "mixed"}, [{"index": 0, "uuid": "GPU-m", "mig": [
        {"profile": "3g.40gb", "start": 0, "uuid": "MIG-0"}, {"profile": "3g.40gb", "start": 4, "uuid": "MIG-4"}]}],
        {"nvidia.com/mig-3g.40gb": "2"})
    demand = GpuDemand(kind="mig", count=1, resource="nvidia.com/mig-3g.40gb", mig_profile="3g.40gb")
    [grant] = grants_from_ids(mig, demand, ["MIG-4"]) or []
    assert (grant.kind, grant.gpu, grant.slot) == ("mig", 0, 1)
    assert grants_from_ids(mig, demand, ["MIG-9"]) is None  # unknown there: the caller falls back
    assert [(g.kind, g.slot) for g in first_free_grants(mig, GpuDemand(kind="mig", count=2, mig_profile="3g.40gb"))
            or []] == [("mig", 0), ("mig", 1)]

    sliced = _node_state("t", {"migStrategy": "none", "timeSlicing": {"nvidia.com/gpu": 4}},
                         [{"index": 0, "uuid": "GPU-t"}], {"nvidia.com/gpu": "4"})
    [replica] = grants_from_ids(sliced, GpuDemand(kind="gpu", count=1), ["GPU-t::2"]) or []
    assert (replica.kind, replica.slot) == ("replica", 2)
    assert len(first_free_grants(sliced, GpuDemand(kind="gpu", count=3)) or []) == 3

    whole = _node_state("w", {"migStrategy": "none"}, [{"index": 0, "uuid": "GPU-w0"}, {"index": 1, "uuid": "GPU-w1"}],
                        {"nvidia.com/gpu": "2"})
    half = GpuDemand(kind="fraction", count=1, milli=500)
    [share] = grants_from_ids(whole, half, ["GPU-w1"]) or []
    assert (share.kind, share.gpu, share.milli, share.memory_mib) == ("fraction", 1, 500, 40960)
    assert visible_devices(whole, [share]) == "GPU-w1"
    assert first_free_grants(whole, GpuDemand(kind="gpu", count=3)) is None  # not there: capacity only


def test_intent_annotations_round_trip() -> None:
    notes = intent_annotations("n1", ("GPU-a", "GPU-b"), 1767225600.5, None)
    written = {k: v for k, v in notes.items() if v is not None}
    assert read_intent(written) == Intent("n1", ("GPU-a", "GPU-b"), 1767225600.5)
    assert read_intent({**written, "gpufleet.io/devices": "not json"}) is None


def test_assumptions_expire_and_do_not_survive_a_new_uid() -> None:
    assumed = AssumedPods(ttl=10.0)
    assumed.assume("ml/p", "uid-1", Intent("n", (), None), now=100.0)
    assert assumed.get("ml/p", "uid-1", now=105.0) is not None
    assert assumed.get("ml/p", "uid-2", now=105.0) is None  # a recreated pod is another pod
    assumed.assume("ml/p", "uid-1", Intent("n", (), None), now=100.0)
    assert assumed.get("ml/p", "uid-1", now=111.0) is None and len(assumed) == 0


def _snapshot(objects: dict[str, list[JsonDict]]) -> CacheSnapshot:
    out: dict[str, dict[str, JsonDict]] = {}
    for i, (key, items) in enumerate(objects.items()):
        res = next(t for t in r.SCHEDULER_RESOURCES if t.key == key)
        bucket = out.setdefault(key, {})
        for j, o in enumerate(items):
            o = json.loads(json.dumps(o))
            o["metadata"]["resourceVersion"] = f"{i}{j}"
            bucket[res.object_key(o)] = o
    return CacheSnapshot(1, out)


def test_pods_are_parsed_once_per_resource_version() -> None:
    snap = _snapshot({"nodes": [node("n0")], "pods": [pod(f"p{i}") for i in range(5)]})
    parse = ParseCache()
    for _ in range(3):
        world = assemble(snap, scheduler_name="gpufleet", kueue=SchedulerConfig(), parse=parse,
                         assumed=AssumedPods(), now=time.time())
    assert parse.parses == 6 + 0  # 1 node + 5 pods, then memoised (no queue objects)
    finish(world)
    assert sorted(world.pods_of) == [f"ml/p{i}" for i in range(5)]


def test_a_cluster_queue_naming_a_missing_flavor_is_reported_inactive() -> None:
    snap = _snapshot({"nodes": [node("n0")], "resourceflavors.gpufleet.io": [flavor("gpu")],
                      "clusterqueues.gpufleet.io": [cluster_queue("ok", 4), cluster_queue("broken", 4,
                                                                                         flavor_name="nope")],
                      "localqueues.gpufleet.io": [local_queue("team", "broken")],
                      "pods": [pod("p", queue="team")]})
    world = assemble(snap, scheduler_name="gpufleet", kueue=SchedulerConfig(), parse=ParseCache(),
                     assumed=AssumedPods(), now=time.time())
    finish(world)
    policy = planner.make_policy(world, "gpufleet", set())
    plan = planner.run(policy, world.now)
    assert not plan.admitted
    problems = {e.name or "": e.message for e in world.queues.problems.errors if e.kind == "ClusterQueue"}
    statuses = {(res.kind, res.object_key(obj)): st for res, obj, st in queue_statuses(snap, policy, problems,
                                                                                        world.now)}
    broken = statuses[("ClusterQueue", "broken")]["conditions"][0]
    assert (broken["status"], broken["reason"]) == ("False", "FlavorNotFound") and "nope" in broken["message"]
    assert statuses[("ClusterQueue", "ok")]["conditions"][0]["status"] == "True"
    lq = statuses[("LocalQueue", "ml/team")]
    assert lq["pendingWorkloads"] == 1 and lq["conditions"][0]["reason"] == "ClusterQueueDoesNotExist"
    info = policy.info("ml/p")
    assert pending_reason(info) == "Unqueued"
