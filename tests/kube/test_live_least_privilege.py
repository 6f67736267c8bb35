"""Least privilege on a live cluster (kmock + ApiSim over real HTTP): the scheduler writes no pod, only
Bindings that carry the placement annotations, and a gang cut short by a crash is completed by the next
scheduler from the plan its first bound member carries."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import kmock
from kube_apisim import ApiSim, failure
from live_env import NS, PODS_RES, annotation_patches, bindings, bound_node, node, pod, pod_requests, wait_until

from gpufleet.admission.webhook import ENV_NAME, FIELD_PATH
from gpufleet.k8s import resources as r
from gpufleet.k8s.annotations import GANG_PLAN_ANNOTATION, PLACEMENT_ANNOTATIONS
from gpufleet.live.scheduler import Scheduler

JsonDict = dict[str, Any]
MUTATED_ENV = [{"name": ENV_NAME, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": FIELD_PATH}}}]


def first_bound_version(apisim: ApiSim, name: str) -> JsonDict:
    """The pod as the watch first showed it with a node: what the kubelet sees when it starts the pod."""
    history = apisim.harness.call(lambda: list(apisim.history[r.PODS.key]))
    return next(obj for _, _, obj in history
                if obj["metadata"]["name"] == name and (obj.get("spec") or {}).get("nodeName"))


def test_the_scheduler_writes_no_pod_and_each_pod_is_annotated_as_it_is_bound(
    apisim: ApiSim, live_scheduler: Callable[..., Scheduler]
) -> None:
    apisim.create(r.NODES, node("n0", gpus=2))
    apisim.create(r.PODS, pod("whole", gpus=1))
    apisim.create(r.PODS, pod("half", gpus=0, annotations={"gpufleet.io/gpu-fraction": "0.5"}, env=MUTATED_ENV))
    apisim.create(r.PODS, pod("cpu-only", gpus=0))
    sched = live_scheduler()
    wait_until(lambda: all(bound_node(apisim, n) == "n0" for n in ("whole", "half", "cpu-only")))
    wait_until(lambda: len(sched.reports) >= 3)

    # Bindings, status conditions and nothing else: no PATCH or PUT of a pod itself.
    writes = [q for q in pod_requests(apisim) if str(q.method.value) != "GET"]
    assert not annotation_patches(apisim)
    assert {(str(q.method.value), q.subresource) for q in writes} <= {("POST", "binding"), ("PATCH", "status")}
    # The version the kubelet first sees bound already carries the placement: the fractional pod's
    # NVIDIA_VISIBLE_DEVICES (resolved from the annotation when the container is created) is in time.
    for name in ("whole", "half"):
        notes = first_bound_version(apisim, name)["metadata"]["annotations"]
        assert notes["gpufleet.io/node"] == "n0", name
        assert json.loads(notes["gpufleet.io/devices"]), name
    half = first_bound_version(apisim, "half")["metadata"]["annotations"]
    assert half["gpufleet.io/visible-devices"] == json.loads(half["gpufleet.io/devices"])[0]
    assert "gpufleet.io/visible-devices" not in apisim.get(r.PODS, NS, "whole")["metadata"]["annotations"]
    written = {k for k in half if k.startswith("gpufleet.io/")} - {"gpufleet.io/gpu-fraction"}
    assert written <= set(PLACEMENT_ANNOTATIONS)  # what the admission policy guards covers what is written


def test_a_gang_cut_short_by_a_crash_is_completed_by_the_next_scheduler_where_it_was_planned(
    apisim: ApiSim, live_scheduler: Callable[..., Scheduler]
) -> None:
    # Four 1-GPU nodes, a gang of four 1-GPU pods: any member could go anywhere, so only the recorded plan
    # makes the second scheduler put each one where the first chose.
    for i in range(4):
        apisim.create(r.NODES, node(f"n{i}", gpus=1))
    names = [f"w{i}" for i in range(4)]
    # The first Binding lands; every later one fails until the "crash" (the API server stops answering us).
    state = {"binds": 0, "blocking": True}

    def bind_or_refuse(request: kmock.Request) -> Any:
        state["binds"] += 1
        if state["blocking"] and state["binds"] > 1:
            raise failure(503, "ServiceUnavailable", "the API server is going away")
        return apisim._bind(r.PODS, request.namespace, request.name or "", request.data)

    apisim.harness.call(lambda: apisim.kmock["post", PODS_RES, lambda q: q.subresource == "binding"]
                        << bind_or_refuse)
    for name in names:
        apisim.create(r.PODS, pod(name, group="ring", group_size=4))
    first = live_scheduler("first")
    wait_until(lambda: sum(1 for n in names if bound_node(apisim, n)) == 1 and first.reports
               and any(c.bind_failed for c in first.reports), what="a partial gang")
    first.stop()  # the crash: three members unbound, no intent on any of them
    [anchor] = [n for n in names if bound_node(apisim, n)]
    notes = apisim.get(r.PODS, NS, anchor)["metadata"]["annotations"]
    plan = json.loads(notes[GANG_PLAN_ANNOTATION])["pods"]
    for name in names:
        if name != anchor:
            assert not any(k in (apisim.get(r.PODS, NS, name)["metadata"].get("annotations") or {})
                           for k in PLACEMENT_ANNOTATIONS), name

    state["blocking"] = False
    second = live_scheduler("second")
    wait_until(lambda: all(bound_node(apisim, n) for n in names), what="the gang completed")
    wait_until(lambda: any(c.completed_gangs for c in second.reports))
    for name in names:
        assert bound_node(apisim, name) == plan[name]["node"], name
        devices = json.loads(apisim.get(r.PODS, NS, name)["metadata"]["annotations"]["gpufleet.io/devices"])
        assert devices == plan[name]["devices"], name
    assert len(bindings(apisim, anchor)) == 1  # never bound twice
