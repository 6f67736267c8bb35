"""Pods with DRA claims carried on from the last cycle (gpufleet.live.increment, gpufleet.live.claim_changes).

On a DRA cluster each pod of ours brings the claim the resourceclaim controller makes for it, the pod's status
naming that claim, the finalizer and the allocation our binder writes, then the Binding: every one of those changes
used to rebuild everything. Carried on, the cycle decides what a full rebuild decides on the same snapshot, and a
pod whose claim is still to come waits off the books until it comes (kube-scheduler's PreEnqueue), never longer
than a gang's members wait for the rest."""

from __future__ import annotations

import copy
import time
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live_env import NS, pod
from test_carried_cycles import (
    Cluster,
    _finish_cycle,
    _nonzero,
    first_cycle,
    land,
    outcome,
    runner,
    step,
)

from gpufleet.k8s import resources as r
from gpufleet.live.claims import reserved, with_finalizer
from gpufleet.live.cycle import CycleRunner, _Decided
from gpufleet.live.increment import UNJOINED_WAIT
from gpufleet.live.queuestatus import QueueCounts

JsonDict = dict[str, Any]
DRIVER = "gpu.nvidia.com"
CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER},
         "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]}}


def _spec(count: int) -> JsonDict:
    return {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": DRIVER, "count": count}}]}}


def _dra_node(name: str) -> JsonDict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"},
                       "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def _slice(node: str, gpus: int) -> JsonDict:
    devices = [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}, "uuid": {"string": f"GPU-{node}-{i}"},
                                                  "productName": {"string": "NVIDIA H100 80GB HBM3"}},
                "capacity": {"memory": {"value": "81559Mi"}}} for i in range(gpus)]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-{DRIVER}"},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1,
                                                                  "resourceSliceCount": 1}, "devices": devices}}


def dra_cluster(gpus: list[int]) -> Cluster:
    c = Cluster()
    c.put(r.DEVICE_CLASSES, copy.deepcopy(CLASS))
    for count in (1, 2):
        c.put(r.RESOURCE_CLAIM_TEMPLATES, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                                           "metadata": {"name": f"gpus-{count}", "namespace": NS},
                                           "spec": {"spec": _spec(count)}})
    for i, n in enumerate(gpus):
        c.put(r.NODES, _dra_node(f"dra-{i}"))
        c.put(r.RESOURCE_SLICES, _slice(f"dra-{i}", n))
    return c


def claim_name(pod_name: str) -> str:
    return f"{pod_name}-gpus-abcde"  # (the controller's five letters)


def dra_pod(name: str, count: int, *, node: str | None = None, named: bool = False) -> JsonDict:
    """A pod of ours asking ``count`` GPUs through a claim made from a template; ``named``: its status names the
    claim the controller made."""
    obj = pod(name, gpus=0, queue="lq", node_name=node)
    obj["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": f"gpus-{count}"}]
    obj["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    if named:
        obj["status"]["resourceClaimStatuses"] = [{"name": "gpus", "resourceClaimName": claim_name(name)}]
    return obj


def made_claim(pod_name: str, count: int) -> JsonDict:
    """The claim the resourceclaim controller makes from the pod's template."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": claim_name(pod_name), "namespace": NS,
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod_name,
                                              "uid": f"uid-{NS}-{pod_name}", "controller": True}]},
            "spec": _spec(count)}


def name_claim(c: Cluster, pod_name: str) -> None:
    """The controller writes the claim it made in the pod's status."""
    obj = copy.deepcopy(c.cache.get(r.PODS, f"{NS}/{pod_name}"))
    obj["status"]["resourceClaimStatuses"] = [{"name": "gpus", "resourceClaimName": claim_name(pod_name)}]
    c.put(r.PODS, obj, "MODIFIED")


def running(c: Cluster, name: str, count: int, node: str, devices: list[str]) -> None:
    """A pod of ours running on ``node`` on ``devices``, through its claim allocated and reserved for it."""
    claim = made_claim(name, count)
    claim["status"] = {"allocation": {"devices": {"results": [
        {"request": "gpus", "driver": DRIVER, "pool": node, "device": d} for d in devices]}},
        "reservedFor": [{"resource": "pods", "name": name, "uid": f"uid-{NS}-{name}"}]}
    c.put(r.RESOURCE_CLAIMS, claim)
    c.put(r.PODS, dra_pod(name, count, node=node, named=True))


def write_claims(c: Cluster, d: _Decided) -> None:
    """What our binder writes on the claims of the pods the cycle sent, before their Bindings: the finalizer, then
    the allocation with the pod in reservedFor (gpufleet.live.claims)."""
    for job in d.jobs:
        for p in job.pods:
            for w in p.claims:
                key = f"{w.namespace}/{w.name}"
                c.put(r.RESOURCE_CLAIMS, with_finalizer(c.cache.get(r.RESOURCE_CLAIMS, key)), "MODIFIED")
                body = reserved(c.cache.get(r.RESOURCE_CLAIMS, key), w.results, p.node, p.key.split("/")[1],
                                p.uid or "")
                c.put(r.RESOURCE_CLAIMS, body, "MODIFIED")


def land_all(c: Cluster, d: _Decided) -> None:
    for job in d.jobs:
        for p in job.pods:
            land(c, p.key.split("/")[1], p.node)


def carried_as_rebuilt(run: CycleRunner, c: Cluster, now: float) -> _Decided:
    """The next cycle, which must carry on, deciding what a fresh runner (the assumptions copied) decides on the
    same snapshot, but for the pods held off the books for their claims; kept as run() keeps it."""
    snapshot = c.cache.snapshot()
    carried = run._carry_on(snapshot, now)
    assert carried is not None, "carried on"
    fresh = runner(c, run.settings)
    fresh.assumed = run.assumed.copy()
    rebuilt = fresh._decide_isolating(snapshot, now)
    waiting = set(carried.world.unjoined)
    assert outcome(carried)[0] == outcome(rebuilt)[0]
    assert set(outcome(carried)[1]) == set(outcome(rebuilt)[1]) - waiting
    for key in waiting:  # (a rebuild says why it waits)
        assert "waiting for the resourceclaim controller" in outcome(rebuilt)[1][key]
    assert carried.counts is not None
    assert _nonzero(carried.counts) == _nonzero(QueueCounts(carried.plan.policy))
    carried.world.cluster.check_invariants()
    # The devices each sent pod's claims are written with are free ones, never another claim's or pod's.
    sent = [(res.pool, res.device) for job in carried.jobs for p in job.pods for w in p.claims for res in w.results]
    assert len(sent) == len(set(sent))
    allocated = {(res.pool, res.device) for claim in carried.world.dra.resource_claims if claim.allocation
                 for res in claim.allocation.devices}
    assert not allocated & set(sent)
    assert {a.workload for a in carried.plan.admitted} == {job.workload for job in carried.jobs}
    return _finish_cycle(run, snapshot, carried, now)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gpus=st.lists(st.integers(1, 4), min_size=1, max_size=3),
       busy=st.integers(0, 3),
       arrivals=st.lists(st.tuples(st.sampled_from([1, 2]), st.sampled_from(["together", "pod first",
                                                                               "named later"])),
                         min_size=1, max_size=5))
def test_pods_with_claims_arriving_are_decided_carried_on_as_a_rebuild_decides_them(
        gpus: list[int], busy: int, arrivals: list[tuple[int, str]]) -> None:
    c = dra_cluster(gpus)
    for i in range(min(busy, gpus[0])):
        running(c, f"old-{i}", 1, "dra-0", [f"gpu-{i}"])
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    for i, (count, how) in enumerate(arrivals):
        name = f"new-{i}"
        c.put(r.PODS, dra_pod(name, count))
        if how == "pod first":  # the cycle sees the pod before its claim: it waits off the books
            d = carried_as_rebuilt(run, c, now)
            assert f"{NS}/{name}" in d.world.unjoined and not d.jobs
        c.put(r.RESOURCE_CLAIMS, made_claim(name, count))
        if how == "named later":  # its claim there, the pod's status not naming it yet
            d = carried_as_rebuilt(run, c, now)
            assert f"{NS}/{name}" in d.world.unjoined
        name_claim(c, name)
        d = carried_as_rebuilt(run, c, now)
        assert f"{NS}/{name}" not in d.world.unjoined
        write_claims(c, d)  # our own writes coming back
        carried_as_rebuilt(run, c, now)
        land_all(c, d)
        carried_as_rebuilt(run, c, now)
    # Every GPU a claim holds, held once; as many pods running as the GPUs allowed, in order of arrival.
    claims = [claim for claim in c.cache.snapshot().of(r.RESOURCE_CLAIMS).values()
              if (claim.get("status") or {}).get("allocation")]
    held = [(res["pool"], res["device"]) for claim in claims
            for res in claim["status"]["allocation"]["devices"]["results"]]
    assert len(held) == len(set(held)) <= sum(gpus)
    old = min(busy, gpus[0])
    if all(count == 1 for count, _ in arrivals) and len(arrivals) <= sum(gpus) - old:
        assert len(held) == old + len(arrivals)  # room for all: every one runs


def test_a_pod_whose_claim_never_comes_waits_off_the_books_then_a_full_cycle_says_why() -> None:
    c = dra_cluster([2])
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    c.put(r.PODS, dra_pod("early", 1))
    d, carried = step(run, now)
    assert carried and f"{NS}/early" in d.world.unjoined and not d.plan.pending
    d, carried = step(run, now + UNJOINED_WAIT + 0.1)
    assert not carried
    assert "waiting for the resourceclaim controller" in d.plan.pending[f"{NS}/early"]
    # Its claim made then: the kept world resolved the pod without it, a full cycle reads them together.
    c.put(r.RESOURCE_CLAIMS, made_claim("early", 1))
    name_claim(c, "early")
    d, carried = step(run, now + UNJOINED_WAIT + 0.2)
    assert not carried and {a.workload for a in d.plan.admitted} == {f"{NS}/early"}


def test_claims_allocated_by_another_scheduler_or_pods_with_claims_ending_take_a_full_cycle() -> None:
    c = dra_cluster([4])
    running(c, "old", 1, "dra-0", ["gpu-0"])
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    # kube-scheduler allocating a claim for a pod of its own: its devices are held, read by a full cycle.
    other = made_claim("theirs", 1)
    c.put(r.RESOURCE_CLAIMS, other)
    d, carried = step(run, now)
    assert carried  # (created unallocated: nobody's yet)
    other = copy.deepcopy(c.cache.get(r.RESOURCE_CLAIMS, f"{NS}/{claim_name('theirs')}"))
    other["status"] = {"allocation": {"devices": {"results": [
        {"request": "gpus", "driver": DRIVER, "pool": "dra-0", "device": "gpu-3"}]}},
        "reservedFor": [{"resource": "pods", "name": "theirs", "uid": "uid-theirs"}]}
    c.put(r.RESOURCE_CLAIMS, other, "MODIFIED")
    d, carried = step(run, now)
    assert not carried
    # Our running pod finishing: its claim's devices stay held until the claim is released, a full cycle's read.
    obj = copy.deepcopy(c.cache.get(r.PODS, f"{NS}/old"))
    obj["status"]["phase"] = "Succeeded"
    c.put(r.PODS, obj, "MODIFIED")
    d, carried = step(run, now)
    assert not carried


def test_an_allocation_on_other_devices_than_the_kept_placement_takes_a_full_cycle() -> None:
    c = dra_cluster([2])
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    c.put(r.PODS, dra_pod("p", 1))
    c.put(r.RESOURCE_CLAIMS, made_claim("p", 1))
    name_claim(c, "p")
    d = carried_as_rebuilt(run, c, now)
    [job] = d.jobs
    [write] = job.pods[0].claims
    [result] = write.results
    other = "gpu-1" if result.device == "gpu-0" else "gpu-0"
    key = f"{NS}/{claim_name('p')}"
    body = reserved(c.cache.get(r.RESOURCE_CLAIMS, key), [type(result)(**{**_fields(result), "device": other})],
                    "dra-0", "p", job.pods[0].uid or "")
    c.put(r.RESOURCE_CLAIMS, body, "MODIFIED")
    d, carried = step(run, now)
    assert not carried


def _fields(obj: Any) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in obj.__slots__}
