"""The live scheduler on DRA (issue 28): it watches ResourceSlices, DeviceClasses, ResourceClaims and their
templates when the API server serves them, places a pod's claims on the devices they select, allocates and
reserves each claim before the Binding as kube-scheduler does, counts what running pods' claims hold, and keeps a
pod whose claim the controller has not created yet waiting."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

import yaml
from kube_apisim import ApiSim
from live_env import NS, bindings, bound_node, scheduled_condition, wait_until
from tests.dra.dynamic_mig import CLASSES, dynamic_mig_slices

from gpufleet.api.objects import SchedulerConfig
from gpufleet.k8s import resources as r
from gpufleet.k8s.annotations import Intent
from gpufleet.k8s.informer import CacheSnapshot
from gpufleet.k8s.parsing import ParseCache
from gpufleet.live.assumed import AssumedPods
from gpufleet.live.scheduler import Scheduler
from gpufleet.live.world import assemble

JsonDict = dict[str, Any]
CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
         "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com' && "
                                                       "device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]}}
CLAIM_SPEC = {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                                                     "count": 2}}]}}


def _node(name: str) -> JsonDict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"},
                       "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def _slice(node: str, gpus: int) -> JsonDict:
    devices = [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}, "uuid": {"string": f"GPU-{node}-{i}"},
                                                  "productName": {"string": "NVIDIA H100 80GB HBM3"}},
                "capacity": {"memory": {"value": "81559Mi"}}} for i in range(gpus)]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-gpu.nvidia.com-0"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices}}


def _claim(name: str, allocated: list[str] | None = None, node: str = "dra-0", pod: str = "") -> JsonDict:
    claim: JsonDict = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                       "metadata": {"name": name, "namespace": NS}, "spec": CLAIM_SPEC}
    if allocated is not None:
        claim["status"] = {
            "allocation": {"devices": {"results": [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": node,
                                                    "device": d} for d in allocated]}},
            "reservedFor": [{"resource": "pods", "name": pod, "uid": f"uid-{pod}"}]}
    return claim


def _pod(name: str, claim: str | None, *, node: str | None = None) -> JsonDict:
    spec: JsonDict = {"schedulerName": "gpufleet",
                      "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}],
                      "containers": [{"name": "main", "image": "busybox",
                                      "resources": {"requests": {"cpu": "1"}, "claims": [{"name": "gpus"}]}}]}
    status: JsonDict = {"phase": "Running" if node else "Pending"}
    if node:
        spec["nodeName"] = node
    if claim:
        status["resourceClaimStatuses"] = [{"name": "gpus", "resourceClaimName": claim}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
            "spec": spec, "status": status}


def _cluster(apisim: ApiSim, gpus: int = 4) -> None:
    apisim.serve(*r.DRA_RESOURCES)
    apisim.create(r.NODES, _node("dra-0"))
    apisim.create(r.DEVICE_CLASSES, CLASS)
    apisim.create(r.RESOURCE_SLICES, _slice("dra-0", gpus))
    apisim.create(r.RESOURCE_CLAIM_TEMPLATES, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                                               "metadata": {"name": "two-gpus", "namespace": NS},
                                               "spec": {"spec": CLAIM_SPEC}})


def _allocated(apisim: ApiSim, name: str) -> list[str]:
    claim = apisim.get(r.RESOURCE_CLAIMS, NS, name) or {}
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    return sorted(res["device"] for res in results)


def test_a_claiming_pod_is_allocated_reserved_and_bound(apisim: ApiSim,
                                                        live_scheduler: Callable[..., Scheduler]) -> None:
    _cluster(apisim)
    apisim.create(r.RESOURCE_CLAIMS, _claim("train-gpus-abcde"))
    apisim.create(r.PODS, _pod("train", "train-gpus-abcde"))
    live_scheduler()
    wait_until(lambda: bound_node(apisim, "train") == "dra-0", what="the claiming pod bound")
    devices = _allocated(apisim, "train-gpus-abcde")
    assert len(devices) == 2 and all(d.startswith("gpu-") for d in devices)
    claim = apisim.get(r.RESOURCE_CLAIMS, NS, "train-gpus-abcde") or {}
    assert [c["name"] for c in claim["status"]["reservedFor"]] == ["train"]
    assert "resource.kubernetes.io/delete-protection" in claim["metadata"].get("finalizers", [])


def test_a_running_pods_claimed_devices_are_not_handed_out_again(apisim: ApiSim,
                                                                 live_scheduler: Callable[..., Scheduler]) -> None:
    _cluster(apisim, gpus=4)
    apisim.create(r.RESOURCE_CLAIMS, _claim("old-gpus-aaaaa", ["gpu-0", "gpu-1"], pod="old"))
    apisim.create(r.PODS, _pod("old", "old-gpus-aaaaa", node="dra-0"))
    apisim.create(r.RESOURCE_CLAIMS, _claim("new-gpus-bbbbb"))
    apisim.create(r.PODS, _pod("new", "new-gpus-bbbbb"))
    live_scheduler()
    wait_until(lambda: bound_node(apisim, "new") == "dra-0", what="the new pod bound")
    assert _allocated(apisim, "new-gpus-bbbbb") == ["gpu-2", "gpu-3"]


def test_a_pod_waits_for_its_claim_to_be_created(apisim: ApiSim, live_scheduler: Callable[..., Scheduler]) -> None:
    _cluster(apisim)
    apisim.create(r.PODS, _pod("early", None))
    live_scheduler()
    wait_until(lambda: scheduled_condition(apisim.get(r.PODS, NS, "early")) is not None, what="a condition")
    condition = scheduled_condition(apisim.get(r.PODS, NS, "early"))
    assert condition is not None and "waiting for the resourceclaim controller" in condition["message"]
    assert not bindings(apisim, "early")


def test_a_claim_already_reserved_for_the_pod_keeps_its_devices(apisim: ApiSim,
                                                                live_scheduler: Callable[..., Scheduler]) -> None:
    # A Binding that did not land after the claim was written: the next cycle binds the pod on those very devices.
    _cluster(apisim, gpus=4)
    created = apisim.create(r.PODS, _pod("late", "late-gpus-ccccc"))
    claim = _claim("late-gpus-ccccc", ["gpu-2", "gpu-3"], pod="late")
    claim["status"]["reservedFor"][0]["uid"] = created["metadata"]["uid"]  # the API server's uid of the pod
    apisim.create(r.RESOURCE_CLAIMS, claim)
    live_scheduler()
    wait_until(lambda: bound_node(apisim, "late") == "dra-0", what="the pod bound")
    assert _allocated(apisim, "late-gpus-ccccc") == ["gpu-2", "gpu-3"]
    [binding] = bindings(apisim, "late")
    assert binding.data["metadata"]["annotations"]["gpufleet.io/devices"] == '["GPU-dra-0-2", "GPU-dra-0-3"]'


def test_two_equal_pods_racing_never_get_one_device(apisim: ApiSim,
                                                    live_scheduler: Callable[..., Scheduler]) -> None:
    _cluster(apisim, gpus=2)  # room for one pod's two GPUs
    for name in ("first", "second"):
        apisim.create(r.RESOURCE_CLAIMS, _claim(f"{name}-gpus-ddddd"))
        apisim.create(r.PODS, _pod(name, f"{name}-gpus-ddddd"))
    live_scheduler()
    wait_until(lambda: any(bound_node(apisim, n) for n in ("first", "second")), what="one pod bound")
    wait_until(lambda: all(scheduled_condition(apisim.get(r.PODS, NS, n)) is not None or bound_node(apisim, n)
                           for n in ("first", "second")), what="the other pod evaluated")
    bound = [n for n in ("first", "second") if bound_node(apisim, n)]
    assert len(bound) == 1
    waiting = "second" if bound == ["first"] else "first"
    assert _allocated(apisim, f"{bound[0]}-gpus-ddddd") == ["gpu-0", "gpu-1"]
    assert _allocated(apisim, f"{waiting}-gpus-ddddd") == [] and not bindings(apisim, waiting)


def _world_snapshot(objects: dict[r.ResourceType, list[JsonDict]]) -> CacheSnapshot:
    out: dict[str, dict[str, JsonDict]] = {}
    for i, (res, items) in enumerate(objects.items()):
        for j, o in enumerate(items):
            o = copy.deepcopy(o)
            o["metadata"]["resourceVersion"] = f"{i}{j}"
            out.setdefault(res.key, {})[res.object_key(o)] = o
    return CacheSnapshot(1, out)


def test_a_pod_sent_to_its_devices_holds_them_before_its_claim_shows_allocated() -> None:
    # The window a cycle can fall in: the pod is assumed at its devices (Binding in flight) but the cache still
    # shows its claim unallocated. Its devices must not look free to the next pod.
    snap = _world_snapshot({r.NODES: [_node("dra-0")], r.DEVICE_CLASSES: [CLASS],
                            r.RESOURCE_SLICES: [_slice("dra-0", 2)],
                            r.RESOURCE_CLAIMS: [_claim("first-gpus-ddddd"), _claim("second-gpus-ddddd")],
                            r.PODS: [_pod("first", "first-gpus-ddddd"), _pod("second", "second-gpus-ddddd")]})
    assumed = AssumedPods()
    now = time.time()
    assumed.assume(f"{NS}/first", "uid-first", Intent("dra-0", ("GPU-dra-0-0", "GPU-dra-0-1"), now), now)
    world = assemble(snap, scheduler_name="gpufleet", kueue=SchedulerConfig(), parse=ParseCache(),
                     assumed=assumed, now=now)
    node = world.cluster.nodes["dra-0"]
    assert [g.is_free for g in node.gpus] == [False, False]
    assert world.unaccounted == []


def test_a_mig_claim_is_carved_from_a_dynamic_mig_gpu(apisim: ApiSim,
                                                      live_scheduler: Callable[..., Scheduler]) -> None:
    # NVIDIA's dynamic MIG: the claim is allocated the abstract MIG device the driver then creates; the whole GPU's
    # claim waits, since carving and the whole GPU exclude each other.
    apisim.serve(*r.DRA_RESOURCES)
    apisim.create(r.NODES, _node("dyn-0"))
    for doc in yaml.safe_load_all(dynamic_mig_slices("dyn-0") + CLASSES):
        apisim.create(r.RESOURCE_SLICES if doc["kind"] == "ResourceSlice" else r.DEVICE_CLASSES, doc)
    three = {"devices": {"requests": [{"name": "mig", "exactly": {
        "deviceClassName": "mig.nvidia.com",
        "selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '3g.40gb'"}}]}}]}}
    apisim.create(r.RESOURCE_CLAIMS, {**_claim("small-gpus-aaaaa"), "spec": three})
    small = _pod("small", "small-gpus-aaaaa")
    small["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    apisim.create(r.PODS, small)
    whole = {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}
    apisim.create(r.RESOURCE_CLAIMS, {**_claim("big-gpus-bbbbb"), "spec": whole})
    big = _pod("big", "big-gpus-bbbbb")
    big["metadata"]["creationTimestamp"] = "2026-01-01T00:01:00Z"
    apisim.create(r.PODS, big)
    live_scheduler()
    wait_until(lambda: bound_node(apisim, "small") == "dyn-0", what="the MIG pod bound")
    wait_until(lambda: scheduled_condition(apisim.get(r.PODS, NS, "big")) is not None, what="the whole-GPU pod seen")
    assert _allocated(apisim, "small-gpus-aaaaa") == ["gpu-0-mig-3g40gb-9-0"]
    assert _allocated(apisim, "big-gpus-bbbbb") == [] and not bindings(apisim, "big")


def test_the_world_holds_claims_no_pod_holds_and_binds_a_pod_where_its_claims_are() -> None:
    orphan = _claim("gone-gpus-aaaaa", ["gpu-0"], pod="gone")  # its pod was deleted; not deallocated yet
    mine = _claim("late-gpus-bbbbb", ["gpu-2", "gpu-3"], pod="late")  # allocated; the Binding was lost
    snap = _world_snapshot({r.NODES: [_node("dra-0")], r.DEVICE_CLASSES: [CLASS],
                            r.RESOURCE_SLICES: [_slice("dra-0", 4)], r.RESOURCE_CLAIMS: [orphan, mine],
                            r.PODS: [_pod("late", "late-gpus-bbbbb")]})
    world = assemble(snap, scheduler_name="gpufleet", kueue=SchedulerConfig(), parse=ParseCache(),
                     assumed=AssumedPods(), now=time.time())
    node = world.cluster.nodes["dra-0"]
    assert [g.is_free for g in node.gpus] == [False, True, False, False]
    assert world.claim_bound == [f"{NS}/late"] and world.pods[f"{NS}/late"].node == "dra-0"
    assert "claim:" + f"{NS}/gone-gpus-aaaaa" in world.cluster.placements


def test_a_deleted_pods_claim_is_released_and_its_devices_go_to_the_next_pod(
        apisim: ApiSim, live_scheduler: Callable[..., Scheduler]) -> None:
    _cluster(apisim, gpus=2)
    apisim.create(r.RESOURCE_CLAIMS, _claim("first-gpus-aaaaa"))
    apisim.create(r.PODS, _pod("first", "first-gpus-aaaaa"))
    live_scheduler()
    wait_until(lambda: bound_node(apisim, "first") == "dra-0", what="the first pod bound")
    apisim.create(r.RESOURCE_CLAIMS, _claim("second-gpus-bbbbb"))
    apisim.create(r.PODS, _pod("second", "second-gpus-bbbbb"))
    wait_until(lambda: scheduled_condition(apisim.get(r.PODS, NS, "second")) is not None, what="the second waits")
    apisim.delete(r.PODS, NS, "first")  # the user deletes it; no resourceclaim controller runs here
    wait_until(lambda: _allocated(apisim, "first-gpus-aaaaa") == [], what="the deleted pod's claim released")
    claim = apisim.get(r.RESOURCE_CLAIMS, NS, "first-gpus-aaaaa") or {}
    assert not (claim.get("status") or {}).get("reservedFor")
    wait_until(lambda: bound_node(apisim, "second") == "dra-0", what="the second pod bound on the freed devices")
    assert _allocated(apisim, "second-gpus-bbbbb") == ["gpu-0", "gpu-1"]


def test_a_pod_bound_where_its_claims_are_is_sent_once_even_when_the_next_cycle_carries_on() -> None:
    from gpufleet.k8s.client import KubeClient
    from gpufleet.k8s.informer import ObjectCache
    from gpufleet.live import planner
    from gpufleet.live.cycle import CycleRunner
    from gpufleet.live.settings import SchedulerSettings
    from gpufleet.scheduler_metrics import SchedulerMetrics

    mine = _claim("late-gpus-bbbbb", ["gpu-2", "gpu-3"], pod="late")  # allocated; the Binding was lost
    snap = _world_snapshot({r.NODES: [_node("dra-0")], r.DEVICE_CLASSES: [CLASS],
                            r.RESOURCE_SLICES: [_slice("dra-0", 4)], r.RESOURCE_CLAIMS: [mine],
                            r.PODS: [_pod("late", "late-gpus-bbbbb")]})
    client = KubeClient(host="http://127.0.0.1:9")  # never called: deciding writes nothing
    runner = CycleRunner(client, ObjectCache(), SchedulerSettings(), identity="t", metrics=SchedulerMetrics(),
                         may_write=lambda: False)
    try:
        d = runner._decide(snap, time.time(), AssumedPods(), planner.ParkedMemory())
        assert [(p.key, p.node) for job in d.jobs for p in job.pods] == [(f"{NS}/late", "dra-0")]
        # a cycle that carries on from this world (a new pod of no claim arrived) plans from the same world
        assert [p.key for job in runner._jobs(d.world, d.plan, []) for p in job.pods] == []
    finally:
        runner.close()
        client.close()
