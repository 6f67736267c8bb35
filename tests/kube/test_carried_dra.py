"""Pods with DRA claims carried on from the last cycle (gpufleet.live.increment, gpufleet.live.claim_changes).

On a DRA cluster each pod of ours brings the claim the resourceclaim controller makes for it, the pod's status
naming that claim, the finalizer and the allocation our binder writes, then the Binding: every one of those changes
used to rebuild everything. Carried on, the cycle decides what a full rebuild decides on the same snapshot. A pod
whose claim is still to come waits out of its queue (held, as kube-scheduler's PreEnqueue keeps it out of its
queue), in a full cycle as in one that carries on, and is submitted again once its claim comes."""

from __future__ import annotations

import copy
import os
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from live_env import NS, pod
from test_carried_cycles import (
    JOBS,
    Cluster,
    _finish_cycle,
    _nonzero,
    first_cycle,
    land,
    outcome,
    runner,
    step,
)
from test_live_dra import _node as dra_node
from test_live_dra import _slice as dra_slice
from workload_env import job as job_object
from workload_env import job_pods

from gpufleet.k8s import resources as r
from gpufleet.live.claims import reserved, with_finalizer
from gpufleet.live.cycle import CycleRunner, _Decided
from gpufleet.live.queuestatus import QueueCounts
from gpufleet.scheduling.placement.dra import CLAIM_HOLD_PREFIX

JsonDict = dict[str, Any]
DRIVER = "gpu.nvidia.com"
CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER},
         "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]}}


def _spec(count: int) -> JsonDict:
    return {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": DRIVER, "count": count}}]}}


def dra_cluster(gpus: list[int]) -> Cluster:
    c = Cluster()
    c.put(r.DEVICE_CLASSES, copy.deepcopy(CLASS))
    for count in (1, 2):
        c.put(r.RESOURCE_CLAIM_TEMPLATES, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                                           "metadata": {"name": f"gpus-{count}", "namespace": NS},
                                           "spec": {"spec": _spec(count)}})
    for i, n in enumerate(gpus):
        c.put(r.NODES, dra_node(f"dra-{i}"))
        c.put(r.RESOURCE_SLICES, dra_slice(f"dra-{i}", n))
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


def allocated_to(pod_name: str, node: str, devices: list[str]) -> JsonDict:
    """A claim's status: allocated on ``devices`` of ``node`` and reserved for the pod."""
    return {"allocation": {"devices": {"results": [
        {"request": "gpus", "driver": DRIVER, "pool": node, "device": d} for d in devices]}},
        "reservedFor": [{"resource": "pods", "name": pod_name, "uid": f"uid-{NS}-{pod_name}"}]}


def running(c: Cluster, name: str, count: int, node: str, devices: list[str]) -> None:
    """A pod of ours running on ``node`` on ``devices``, through its claim allocated and reserved for it."""
    claim = made_claim(name, count)
    claim["status"] = allocated_to(name, node, devices)
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


def held_where(d: _Decided, leave_out: set[str]) -> dict[str, tuple[str, tuple[str, ...]]]:
    return {k: (p.node, tuple(sorted(p.device_ids))) for k, p in d.world.cluster.placements.items()
            if k not in leave_out}


def carried_as_rebuilt(run: CycleRunner, c: Cluster, now: float) -> _Decided:
    """The next cycle, which must carry on, deciding what a fresh runner (the assumptions copied) decides on the
    same snapshot; kept as run() keeps it."""
    snapshot = c.cache.snapshot()
    carried = run._carry_on(snapshot, now)
    assert carried is not None, "carried on"
    fresh = runner(c, run.settings)
    fresh.assumed = run.assumed.copy()
    rebuilt = fresh._decide_isolating(snapshot, now)
    assert outcome(carried)[0] == outcome(rebuilt)[0]
    assert set(outcome(carried)[1]) == set(outcome(rebuilt)[1])
    for key, why in outcome(carried)[1].items():  # (held while its claim is to come: said alike)
        if "waiting for the resourceclaim controller" in why:
            assert outcome(rebuilt)[1][key] == why
    assert carried.counts is not None
    assert _nonzero(carried.counts) == _nonzero(QueueCounts(carried.plan.policy))
    assert _nonzero(carried.counts) == _nonzero(QueueCounts(rebuilt.plan.policy))
    carried.world.cluster.check_invariants()
    # What holds nodes and devices, placeholders of claims included, as a rebuild charges it (the pods placed by
    # this very cycle aside: nodes that tie are broken at random by each).
    placed = {pa.pod for d in (carried, rebuilt) for a in d.plan.admitted for pa in a.pods}
    assert held_where(carried, placed) == held_where(rebuilt, placed)
    # The devices each sent pod's claims are written with are free ones, never another claim's or pod's.
    sent = [(res.pool, res.device) for job in carried.jobs for p in job.pods for w in p.claims for res in w.results]
    assert len(sent) == len(set(sent))
    allocated = {(res.pool, res.device) for claim in carried.world.dra.resource_claims if claim.allocation
                 for res in claim.allocation.devices}
    assert not allocated & set(sent)
    assert {a.workload for a in carried.plan.admitted} == {job.workload for job in carried.jobs}
    return _finish_cycle(run, snapshot, carried, now)


_ARRIVAL = st.tuples(st.just("arrive"), st.sampled_from([1, 2]), st.sampled_from(["together", "pod first",
                                                                                    "named later"]))
_END = st.tuples(st.just("end"), st.integers(0, 20), st.sampled_from(["deleted", "Succeeded"]))
_JOB = st.tuples(st.just("job"), st.integers(1, 2), st.sampled_from(["together", "one late"]))
_THEIRS = st.tuples(st.just("theirs"), st.just(1), st.just(""))


def free_device(c: Cluster, gpus: list[int]) -> tuple[str, str] | None:
    """A device no claim of the cache holds (every pod of ours landed and its claim written: the cluster's free)."""
    taken = {(res["pool"], res["device"]) for claim in c.cache.snapshot().of(r.RESOURCE_CLAIMS).values()
             for res in (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results", [])}
    return next(((f"dra-{i}", f"gpu-{j}") for i, n in enumerate(gpus) for j in range(n)
                 if (f"dra-{i}", f"gpu-{j}") not in taken), None)


def claiming_job(name: str, pods: int) -> JsonDict:
    owner = job_object(name, pods=pods, gpus=0, queue="lq")
    spec = owner["spec"]["template"]["spec"]
    spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "gpus-1"}]
    spec["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    return owner


@settings(max_examples=int(os.environ.get("GPUFLEET_CARRIED_EXAMPLES", "40")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(gpus=st.lists(st.integers(1, 4), min_size=1, max_size=3), busy=st.integers(0, 3),
       events=st.lists(st.one_of(_ARRIVAL, _END, _JOB, _THEIRS), min_size=1, max_size=8))
# A Job waiting for the only GPU, placed when a pod ends and its claim is released, then kube-scheduler's pod: the
# harness had left the Job's claim unwritten, and gave the other scheduler the same device (CI, 2026-12-08).
@example(gpus=[1], busy=1, events=[("job", 1, "together"), ("end", 0, "deleted"), ("theirs", 1, "")])
def test_pods_with_claims_arriving_and_ending_are_decided_carried_on_as_a_rebuild_decides_them(
        gpus: list[int], busy: int, events: list[tuple[str, int, str]]) -> None:
    c = dra_cluster(gpus)
    bound = [f"old-{i}" for i in range(min(busy, gpus[0]))]
    for i, name in enumerate(bound):
        running(c, name, 1, "dra-0", [f"gpu-{i}"])
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    arrived = ended = jobs = 0
    job_pods_made: set[str] = set()
    foreign: list[str] = []
    for kind, n, how in events:
        if kind == "end":
            if not bound:
                continue
            name = bound.pop(n % len(bound))
            ended += 1
            if how == "deleted" and name not in job_pods_made:  # (a Job's pod deleted while it runs: its repair)
                c.put(r.PODS, c.cache.get(r.PODS, f"{NS}/{name}"), "DELETED")
            else:
                obj = copy.deepcopy(c.cache.get(r.PODS, f"{NS}/{name}"))
                obj["status"]["phase"] = "Succeeded"
                c.put(r.PODS, obj, "MODIFIED")
            carried_as_rebuilt(run, c, now)
            release_claim(c, name)  # (its devices free now: a pod waiting for them is placed)
            d = carried_as_rebuilt(run, c, now)
            write_claims(c, d)  # (and bound, before anything else takes its devices: CI found it left unwritten)
            land_all(c, d)
            bound += [p.key.split("/")[1] for job in d.jobs for p in job.pods]
            c.put(r.RESOURCE_CLAIMS, c.cache.get(r.RESOURCE_CLAIMS, f"{NS}/{claim_name(name)}"), "DELETED")
        elif kind == "theirs":  # kube-scheduler's pod with a claim: made, allocated, then bound
            where = free_device(c, gpus)
            if where is None:
                continue
            name = f"theirs-{len(foreign)}"
            theirs(c, name)
            carried_as_rebuilt(run, c, now)
            allocate_theirs(c, name, *where)
            carried_as_rebuilt(run, c, now)
            bind_theirs(c, name, where[0])
            foreign.append(name)
            bound.append(name)
        elif kind == "job":  # a Job's pods, one GPU each (a pending Job ends only with its pods)
            owner = claiming_job(f"job-{arrived}", n)
            arrived += n
            jobs += n
            c.put(JOBS, owner)
            names = [p["metadata"]["name"] for p in job_pods(owner)]
            job_pods_made.update(names)
            for p in job_pods(owner):
                c.put(r.PODS, p)
            for k, name in enumerate(names):
                if how == "one late" and k == len(names) - 1:
                    d = carried_as_rebuilt(run, c, now)  # (held while one pod's claim is to come)
                    assert f"{NS}/{owner['metadata']['name']}" in d.plan.pending
                c.put(r.RESOURCE_CLAIMS, made_claim(name, 1))
                name_claim(c, name)
        else:
            name = f"new-{arrived}"
            arrived += 1
            c.put(r.PODS, dra_pod(name, n))
            if how == "pod first":  # the cycle sees the pod before its claim: held out of its queue
                d = carried_as_rebuilt(run, c, now)
                assert "waiting for the resourceclaim controller" in d.plan.pending[f"{NS}/{name}"] and not d.jobs
            c.put(r.RESOURCE_CLAIMS, made_claim(name, n))
            if how == "named later":  # its claim there, the pod's status not naming it yet
                d = carried_as_rebuilt(run, c, now)
                assert "waiting for the resourceclaim controller" in d.plan.pending[f"{NS}/{name}"]
            name_claim(c, name)
        d = carried_as_rebuilt(run, c, now)
        write_claims(c, d)  # our own writes coming back
        carried_as_rebuilt(run, c, now)
        land_all(c, d)
        bound += [p.key.split("/")[1] for job in d.jobs for p in job.pods]
        carried_as_rebuilt(run, c, now)
    # Every GPU a claim holds, held once, by a pod bound where the claim's devices are.
    claims = [claim for claim in c.cache.snapshot().of(r.RESOURCE_CLAIMS).values()
              if (claim.get("status") or {}).get("allocation")]
    held = [(res["pool"], res["device"]) for claim in claims
            for res in claim["status"]["allocation"]["devices"]["results"]]
    assert len(held) == len(set(held)) <= sum(gpus)
    assert sorted(claim_name(name) for name in bound) == sorted(claim["metadata"]["name"] for claim in claims)
    if not jobs and not foreign and all(n == 1 for kind, n, _ in events if kind == "arrive") and (
            arrived + min(busy, gpus[0]) <= sum(gpus)):
        assert len(held) == len(bound) == min(busy, gpus[0]) + arrived - ended  # room for all: every one runs


@pytest.mark.parametrize("strategy", ["BestEffortFIFO", "StrictFIFO"])
def test_a_pod_waiting_for_its_claim_is_held_out_of_its_queue_and_holds_back_no_other(strategy: str) -> None:
    # Created first, its claim still to come: kube-scheduler's PreEnqueue keeps such a pod out of its queue, so a
    # StrictFIFO queue's later pods are not held back behind it (a review found a carried cycle and a rebuild
    # disagreeing there); once its claim comes it is submitted again, carried on as a rebuild submits it.
    c = dra_cluster([2])
    queue = copy.deepcopy(c.cache.get(r.CLUSTER_QUEUES, "cq"))
    queue["spec"]["queueingStrategy"] = strategy
    c.put(r.CLUSTER_QUEUES, queue, "MODIFIED")
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    c.put(r.PODS, dra_pod("early", 1) | {"metadata": {**dra_pod("early", 1)["metadata"],
                                                      "creationTimestamp": "2025-12-31T00:00:00Z"}})
    d = carried_as_rebuilt(run, c, now)
    assert "waiting for the resourceclaim controller" in d.plan.pending[f"{NS}/early"]
    c.put(r.PODS, dra_pod("late", 1))
    c.put(r.RESOURCE_CLAIMS, made_claim("late", 1))
    name_claim(c, "late")
    d = carried_as_rebuilt(run, c, now)
    assert {a.workload for a in d.plan.admitted} == {f"{NS}/late"}
    c.put(r.RESOURCE_CLAIMS, made_claim("early", 1))
    d = carried_as_rebuilt(run, c, now)  # (not named by its pod yet: nothing changes for it)
    assert f"{NS}/early" in d.plan.pending
    name_claim(c, "early")
    d = carried_as_rebuilt(run, c, now)
    assert {a.workload for a in d.plan.admitted} == {f"{NS}/early"}


def test_a_claim_named_before_it_exists_resolves_the_pod_again_when_it_comes_carried_on() -> None:
    # The pod's status names its claim before the claim reaches the cache (the watches race): it waits for it,
    # then is resolved again when it comes.
    c = dra_cluster([2])
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    c.put(r.PODS, dra_pod("p", 1, named=True))
    d = carried_as_rebuilt(run, c, now)
    assert f"{NS}/p" in d.plan.pending
    c.put(r.RESOURCE_CLAIMS, made_claim("p", 1))
    d = carried_as_rebuilt(run, c, now)
    assert {a.workload for a in d.plan.admitted} == {f"{NS}/p"}


def test_a_workload_parked_for_its_claims_is_evaluated_afresh_by_a_full_cycle_once_they_resolve() -> None:
    # A full cycle parks again what the last one parked unless something was released; a workload whose claims
    # now resolve otherwise (its DeviceClass's selector corrected) must be evaluated anew, not left parked with
    # its old verdict until an unrelated release.
    c = dra_cluster([2])
    wrong = copy.deepcopy(CLASS)
    wrong["spec"]["selectors"] = [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]
    c.put(r.DEVICE_CLASSES, wrong, "MODIFIED")
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    c.put(r.PODS, dra_pod("p", 1))
    c.put(r.RESOURCE_CLAIMS, made_claim("p", 1))
    name_claim(c, "p")
    d = carried_as_rebuilt(run, c, now)
    assert f"{NS}/p" in d.plan.pending and f"{NS}/p" in run.parked.parked
    c.put(r.DEVICE_CLASSES, copy.deepcopy(CLASS), "MODIFIED")
    d, carried = step(run, now)
    assert not carried and {a.workload for a in d.plan.admitted} == {f"{NS}/p"}


def theirs(c: Cluster, name: str) -> None:
    """kube-scheduler's pod with a claim made for it (then :func:`allocate_theirs`, its PreBind, then
    :func:`bind_theirs`)."""
    obj = dra_pod(name, 1)
    obj["spec"]["schedulerName"] = "default-scheduler"
    obj["status"]["resourceClaimStatuses"] = [{"name": "gpus", "resourceClaimName": claim_name(name)}]
    c.put(r.PODS, obj)
    c.put(r.RESOURCE_CLAIMS, made_claim(name, 1))


def allocate_theirs(c: Cluster, name: str, node: str, device: str) -> None:
    claim = copy.deepcopy(c.cache.get(r.RESOURCE_CLAIMS, f"{NS}/{claim_name(name)}"))
    claim["status"] = allocated_to(name, node, [device])
    c.put(r.RESOURCE_CLAIMS, claim, "MODIFIED")


def bind_theirs(c: Cluster, name: str, node: str) -> None:
    obj = copy.deepcopy(c.cache.get(r.PODS, f"{NS}/{name}"))
    obj["spec"]["nodeName"] = node
    obj["status"]["phase"] = "Running"
    c.put(r.PODS, obj, "MODIFIED")


def test_another_schedulers_pod_with_a_claim_is_carried_on_from_its_allocation_to_its_release() -> None:
    # kube-scheduler beside gpufleet on one DRA cluster: its allocation holds the device from the moment it is
    # written (before its Binding), its pod holds it while it runs, its claim until released; carried on throughout,
    # as a rebuild counts it at each step.
    c = dra_cluster([2])
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    theirs(c, "web")
    carried_as_rebuilt(run, c, now)
    allocate_theirs(c, "web", "dra-0", "gpu-1")
    d = carried_as_rebuilt(run, c, now)
    assert f"{CLAIM_HOLD_PREFIX}{NS}/{claim_name('web')}" in d.world.cluster.placements
    bind_theirs(c, "web", "dra-0")
    d = carried_as_rebuilt(run, c, now)
    assert f"{CLAIM_HOLD_PREFIX}{NS}/{claim_name('web')}" not in d.world.cluster.placements
    assert d.world.cluster.placements[f"{NS}/web"].node == "dra-0"
    for name in ("a", "b"):  # two pods of ours for the one device left
        c.put(r.PODS, dra_pod(name, 1))
        c.put(r.RESOURCE_CLAIMS, made_claim(name, 1))
        name_claim(c, name)
    d = carried_as_rebuilt(run, c, now)
    [job] = d.jobs
    assert [res.device for res in job.pods[0].claims[0].results] == ["gpu-0"]
    write_claims(c, d)
    land_all(c, d)
    carried_as_rebuilt(run, c, now)
    c.put(r.PODS, c.cache.get(r.PODS, f"{NS}/web"), "DELETED")
    d = carried_as_rebuilt(run, c, now)
    assert not d.plan.admitted  # (its claim holds gpu-1 until released)
    release_claim(c, "web")
    d = carried_as_rebuilt(run, c, now)
    assert len(d.plan.admitted) == 1 and [res.device for res in d.jobs[0].pods[0].claims[0].results] == ["gpu-1"]


def test_an_allocation_by_another_scheduler_for_a_pod_of_ours_takes_a_full_cycle() -> None:
    c = dra_cluster([2])
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    c.put(r.PODS, dra_pod("mine", 1))
    c.put(r.RESOURCE_CLAIMS, made_claim("mine", 1))
    name_claim(c, "mine")
    d, _ = step(run, now)  # (placed by us, its claim not written yet)
    ours = d.jobs[0].pods[0].claims[0].results[0].device
    allocate_theirs(c, "mine", "dra-0", "gpu-1" if ours == "gpu-0" else "gpu-0")
    assert not step(run, now)[1]


def release_claim(c: Cluster, pod_name: str) -> None:
    """What gpufleet.live.claim_release (or the resourceclaim controller) writes once the pod is gone: unreserved and
    deallocated in one status write, then the finalizer removed, then the claim deleted (its owner gone)."""
    key = f"{NS}/{claim_name(pod_name)}"
    claim = copy.deepcopy(c.cache.get(r.RESOURCE_CLAIMS, key))
    claim["status"] = {}
    c.put(r.RESOURCE_CLAIMS, claim, "MODIFIED")
    claim = copy.deepcopy(claim)
    claim["metadata"]["finalizers"] = []
    c.put(r.RESOURCE_CLAIMS, claim, "MODIFIED")


@pytest.mark.parametrize("how", ["deleted", "Succeeded"])
def test_a_pod_with_claims_ending_keeps_its_devices_held_until_its_claim_is_released_carried_on(how: str) -> None:
    # A full cycle counts the devices of an allocated claim no pod holds as in use (kube-scheduler's allocator
    # does too), until the claim is released: a pod waiting for them gets them only then, carried on as rebuilt.
    c = dra_cluster([2])
    running(c, "old-0", 1, "dra-0", ["gpu-0"])
    running(c, "old-1", 1, "dra-0", ["gpu-1"])
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    c.put(r.PODS, dra_pod("next", 1))
    c.put(r.RESOURCE_CLAIMS, made_claim("next", 1))
    name_claim(c, "next")
    d = carried_as_rebuilt(run, c, now)
    assert f"{NS}/next" in d.plan.pending
    if how == "deleted":
        c.put(r.PODS, c.cache.get(r.PODS, f"{NS}/old-0"), "DELETED")
    else:
        obj = copy.deepcopy(c.cache.get(r.PODS, f"{NS}/old-0"))
        obj["status"]["phase"] = how
        c.put(r.PODS, obj, "MODIFIED")
    d = carried_as_rebuilt(run, c, now)
    assert not d.plan.admitted and f"{CLAIM_HOLD_PREFIX}{NS}/{claim_name('old-0')}" in d.world.cluster.placements
    release_claim(c, "old-0")
    d = carried_as_rebuilt(run, c, now)
    assert {a.workload for a in d.plan.admitted} == {f"{NS}/next"}
    [write] = d.jobs[0].pods[0].claims
    assert [res.device for res in write.results] == ["gpu-0"]
    c.put(r.RESOURCE_CLAIMS, c.cache.get(r.RESOURCE_CLAIMS, f"{NS}/{claim_name('old-0')}"), "DELETED")
    carried_as_rebuilt(run, c, now)


def test_a_claim_released_while_its_pod_still_runs_takes_a_full_cycle() -> None:
    c = dra_cluster([2])
    running(c, "old", 1, "dra-0", ["gpu-0"])
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    release_claim(c, "old")
    assert not step(run, now)[1]


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


def test_a_jobs_pods_one_of_whose_claims_comes_late_are_carried_on_as_a_rebuild_decides_them() -> None:
    # A Job's pods are one workload: held while one pod's claim is still to come, then taken back and submitted
    # again whole once it comes, carried on as a rebuild submits it.
    c = dra_cluster([4])
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    owner = job_object("train", pods=2, gpus=0, queue="lq")
    spec = owner["spec"]["template"]["spec"]
    spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "gpus-1"}]
    spec["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    c.put(JOBS, owner)
    first, second = (p["metadata"]["name"] for p in job_pods(owner))
    for p in job_pods(owner):
        c.put(r.PODS, p)
    c.put(r.RESOURCE_CLAIMS, made_claim(first, 1))
    name_claim(c, first)
    d = carried_as_rebuilt(run, c, now)
    assert "waiting for the resourceclaim controller" in d.plan.pending[f"{NS}/train"]
    c.put(r.RESOURCE_CLAIMS, made_claim(second, 1))
    name_claim(c, second)
    d = carried_as_rebuilt(run, c, now)
    assert {a.workload for a in d.plan.admitted} == {f"{NS}/train"} and len(d.jobs[0].pods) == 2
    write_claims(c, d)
    carried_as_rebuilt(run, c, now)
    land_all(c, d)
    carried_as_rebuilt(run, c, now)


def test_a_jobs_pods_with_claims_finishing_one_by_one_keep_their_devices_held_until_released_carried_on() -> None:
    # A training job's pods end one by one: the job stays admitted on the others, each finished pod's devices held
    # by its claim until the claim is released, then free for a pod that waits; the last one ends the job.
    c = dra_cluster([2])
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    owner = job_object("train", pods=2, gpus=0, queue="lq")
    spec = owner["spec"]["template"]["spec"]
    spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "gpus-1"}]
    spec["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    c.put(JOBS, owner)
    names = [p["metadata"]["name"] for p in job_pods(owner)]
    for p in job_pods(owner):
        c.put(r.PODS, p)
    for name in names:
        c.put(r.RESOURCE_CLAIMS, made_claim(name, 1))
        name_claim(c, name)
    d = carried_as_rebuilt(run, c, now)
    write_claims(c, d)
    land_all(c, d)
    carried_as_rebuilt(run, c, now)
    c.put(r.PODS, dra_pod("next", 1))
    c.put(r.RESOURCE_CLAIMS, made_claim("next", 1))
    name_claim(c, "next")
    assert f"{NS}/next" in carried_as_rebuilt(run, c, now).plan.pending
    for name in names:
        obj = copy.deepcopy(c.cache.get(r.PODS, f"{NS}/{name}"))
        obj["status"]["phase"] = "Succeeded"
        c.put(r.PODS, obj, "MODIFIED")
        d = carried_as_rebuilt(run, c, now)
        assert not d.plan.admitted  # (its devices held by its claim)
        release_claim(c, name)
        d = carried_as_rebuilt(run, c, now)
        if name == names[0]:
            assert {a.workload for a in d.plan.admitted} == {f"{NS}/next"}
            write_claims(c, d)
            land_all(c, d)
            carried_as_rebuilt(run, c, now)


def test_a_claim_made_again_under_its_name_and_seen_as_one_change_takes_a_full_cycle() -> None:
    # A relist after a watch broke shows a claim deleted and created again as one MODIFIED: its spec (and uid) are
    # new, and the pods naming it must be resolved against it (a review found the change taken as a no-op, a pod
    # left waiting for 2 GPUs its claim no longer asked).
    c = dra_cluster([2])
    running(c, "old", 1, "dra-0", ["gpu-0"])
    x = made_claim("x", 2)
    x["metadata"]["name"] = "x"
    x["metadata"].pop("ownerReferences")
    c.put(r.RESOURCE_CLAIMS, x)
    p = dra_pod("p", 1)
    p["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": "x"}]
    c.put(r.PODS, p)
    run = runner(c)
    now = time.time()
    assert f"{NS}/p" in first_cycle(run, now).plan.pending
    again = made_claim("x", 1)
    again["metadata"] = {"name": "x", "namespace": NS, "uid": "uid-x-again"}
    c.put(r.RESOURCE_CLAIMS, again, "MODIFIED")
    d, carried = step(run, now)
    assert not carried and {a.workload for a in d.plan.admitted} == {f"{NS}/p"}


def test_a_running_jobs_next_pod_waiting_for_its_claim_leaves_the_job_admitted_and_is_placed_once_it_comes() -> None:
    # A Job whose completions exceed its parallelism makes a pod as each one ends; with claims from a template, the
    # next pod comes before its claim. The Job stays admitted on its running pod (a hold is for workloads not
    # running yet); the pod waits to be placed, then is placed beside it once its claim is there.
    c = dra_cluster([4])
    pods = running_job(c, "train", 2, completions=3)
    run = runner(c)
    now = time.time()
    assert f"{NS}/train" not in first_cycle(run, now).plan.pending
    first = pods[0]["metadata"]["name"]
    done = copy.deepcopy(c.cache.get(r.PODS, f"{NS}/{first}"))
    done["status"]["phase"] = "Succeeded"
    c.put(r.PODS, done, "MODIFIED")
    release_claim(c, first)
    carried_as_rebuilt(run, c, now)
    following = copy.deepcopy(pods[0])
    following["metadata"] = {k: v for k, v in following["metadata"].items() if k not in ("uid", "resourceVersion")}
    following["metadata"]["name"] = "train-p2x"
    following["spec"].pop("nodeName")
    following["status"] = {"phase": "Pending"}
    c.put(r.PODS, following)
    d = carried_as_rebuilt(run, c, now)
    assert f"{NS}/train" not in d.plan.pending and not d.jobs  # admitted still; its next pod waits for its claim
    c.put(r.RESOURCE_CLAIMS, made_claim("train-p2x", 1))
    name_claim(c, "train-p2x")
    d, _ = step(run, now)
    assert [(j.workload, [p.key for p in j.pods]) for j in d.jobs] == [(f"{NS}/train", [f"{NS}/train-p2x"])]
    [write] = d.jobs[0].pods[0].claims
    assert [res.device for res in write.results] in (["gpu-0"], ["gpu-2"], ["gpu-3"])


def running_job(c: Cluster, name: str, pods: int, completions: int | None = None) -> list[JsonDict]:
    """A Job of ``pods`` pods running on dra-0, each on gpu-<i> through its claim; its pods, as made."""
    owner = claiming_job(name, pods)
    if completions is not None:
        owner["spec"]["completions"] = completions
    c.put(JOBS, owner)
    made = job_pods(owner)
    for i, p in enumerate(made):
        member = p["metadata"]["name"]
        p["spec"]["nodeName"] = "dra-0"
        p["status"] = {"phase": "Running", "resourceClaimStatuses": [{"name": "gpus",
                                                                     "resourceClaimName": claim_name(member)}]}
        c.put(r.PODS, p)
        claim = made_claim(member, 1)
        claim["status"] = allocated_to(member, "dra-0", [f"gpu-{i}"])
        c.put(r.RESOURCE_CLAIMS, claim)
    return made


def test_a_jobs_member_gone_while_the_job_is_evicted_leaves_the_others_on_their_claims_devices() -> None:
    # A Job's pods all being deleted (a preemption's victims), one gone: the Job is made again from the member left,
    # which a rebuild charges on its claim's device; the gone one's claim holds its device until released. A review
    # found the member left charged on no device, and a new 2-GPU pod given its GPU.
    c = dra_cluster([3])
    names = [p["metadata"]["name"] for p in running_job(c, "train", 2)]
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    for member in names:
        obj = copy.deepcopy(c.cache.get(r.PODS, f"{NS}/{member}"))
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        c.put(r.PODS, obj, "MODIFIED")
    carried_as_rebuilt(run, c, now)
    c.put(r.PODS, c.cache.get(r.PODS, f"{NS}/{names[0]}"), "DELETED")
    c.put(r.PODS, dra_pod("next", 2))
    c.put(r.RESOURCE_CLAIMS, made_claim("next", 2))
    name_claim(c, "next")
    d = carried_as_rebuilt(run, c, now)
    assert f"{NS}/next" in d.plan.pending
    assert d.world.cluster.placements[f"{NS}/{names[1]}"].device_ids  # (on its claim's GPU)


def test_another_schedulers_pod_seen_bound_and_finished_at_once_leaves_its_claim_holding_the_device() -> None:
    # A relist shows kube-scheduler's pod bound and Succeeded in one change: it holds nothing, its claim (still
    # allocated) holds the device; a review found the placeholder released and the device given to a pod of ours.
    c = dra_cluster([1])
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    theirs(c, "web")
    allocate_theirs(c, "web", "dra-0", "gpu-0")
    carried_as_rebuilt(run, c, now)
    obj = copy.deepcopy(c.cache.get(r.PODS, f"{NS}/web"))
    obj["spec"]["nodeName"] = "dra-0"
    obj["status"]["phase"] = "Succeeded"
    c.put(r.PODS, obj, "MODIFIED")
    c.put(r.PODS, dra_pod("mine", 1))
    c.put(r.RESOURCE_CLAIMS, made_claim("mine", 1))
    name_claim(c, "mine")
    d = carried_as_rebuilt(run, c, now)
    assert f"{NS}/mine" in d.plan.pending
    assert f"{CLAIM_HOLD_PREFIX}{NS}/{claim_name('web')}" in d.world.cluster.placements
