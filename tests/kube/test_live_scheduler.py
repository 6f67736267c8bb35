"""The live scheduler against kmock + ApiSim over real HTTP: binding, gangs, preemption, recovery."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from kube_apisim import ApiSim
from live_env import (
    NS,
    annotation_patches,
    bindings,
    bound_node,
    cluster_queue,
    events,
    evictions,
    flavor,
    gpu_uuid,
    local_queue,
    node,
    pod,
    priority_class,
    scheduled_condition,
    wait_until,
)

from gpufleet.k8s import resources as r
from gpufleet.live.scheduler import Scheduler

ROOT = Path(__file__).resolve().parents[2]


def test_pending_gpu_pod_is_bound_to_the_right_node_and_devices_annotation_first(
    apisim: ApiSim, live_scheduler: Callable[..., Scheduler]
) -> None:
    apisim.create(r.NODES, node("small", gpus=1))
    apisim.create(r.NODES, node("big", gpus=4))
    # Another scheduler's pod holds one GPU of "big" (no gpufleet annotation: counted first-fit).
    apisim.create(r.PODS, pod("other", gpus=1, scheduler="default-scheduler", node_name="big"))
    apisim.create(r.PODS, pod("train", gpus=2))
    apisim.create(r.PODS, pod("not-ours", gpus=1, scheduler="default-scheduler"))
    sched = live_scheduler()
    wait_until(lambda: bound_node(apisim, "train") is not None, what="train bound")

    assert bound_node(apisim, "train") == "big"  # "small" has one GPU only
    obj = apisim.get(r.PODS, NS, "train")
    assert obj is not None
    devices = json.loads(obj["metadata"]["annotations"]["gpufleet.io/devices"])
    assert len(devices) == 2 and len(set(devices)) == 2
    assert set(devices) <= {gpu_uuid("big", i) for i in range(4)} - {gpu_uuid("big", 0)}
    assert obj["metadata"]["annotations"]["gpufleet.io/node"] == "big"
    # The device assignment travels in the Binding itself: one write, no patch of the pod.
    [binding] = bindings(apisim, "train")
    assert binding.data["metadata"]["annotations"] == {
        k: v for k, v in obj["metadata"]["annotations"].items() if k.startswith("gpufleet.io/")}
    assert not annotation_patches(apisim)
    wait_until(lambda: any(e["regarding"]["name"] == "train" for e in events(apisim, "Scheduled")))
    [event] = [e for e in events(apisim, "Scheduled") if e["regarding"]["name"] == "train"]
    assert event["note"] == f"Successfully assigned {NS}/train to big"
    assert event["reportingController"] == "gpufleet" and event["type"] == "Normal"
    assert bound_node(apisim, "not-ours") is None and not bindings(apisim, "not-ours")
    assert sched.metrics.pods_scheduled._value.get() == 1


def _crd_status_validator(kind: str) -> jsonschema.Draft7Validator:
    plural = {"ClusterQueue": "clusterqueues", "LocalQueue": "localqueues"}[kind]
    crd = yaml.safe_load((ROOT / "deploy" / "crds" / f"gpufleet.io_{plural}.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    return jsonschema.Draft7Validator(schema)


def test_gang_binds_nothing_until_it_fits_then_all_16_in_one_cycle(
    apisim: ApiSim, live_scheduler: Callable[..., Scheduler]
) -> None:
    for i in range(4):
        apisim.create(r.NODES, node(f"n{i}", gpus=4))
    apisim.create(r.PODS, pod("blocker", gpus=4, scheduler="default-scheduler", node_name="n3"))
    apisim.create(r.RESOURCE_FLAVORS, flavor())
    apisim.create(r.CLUSTER_QUEUES, cluster_queue("gpus", gpus=32))
    apisim.create(r.LOCAL_QUEUES, local_queue("team", "gpus"))
    names = [f"worker-{i:02d}" for i in range(16)]
    for name in names:
        apisim.create(r.PODS, pod(name, gpus=1, queue="team", group="allreduce", group_size=16))
    sched = live_scheduler()

    wait_until(lambda: len(sched.reports) >= 3, what="three cycles")
    wait_until(lambda: all(scheduled_condition(apisim.get(r.PODS, NS, n)) for n in names), what="conditions")
    assert not bindings(apisim) and not annotation_patches(apisim)  # 12 free GPUs: nothing at all
    condition = scheduled_condition(apisim.get(r.PODS, NS, "worker-00"))
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    assert "16 pods of the gang" in condition["message"]
    def failed_events() -> list[dict[str, object]]:
        return [e for e in events(apisim, "FailedScheduling") if e["regarding"]["name"] == "worker-00"]

    wait_until(lambda: len(failed_events()) >= 1, what="FailedScheduling event")  # posted after the condition
    failed = failed_events()
    assert len(failed) == 1 and failed[0]["type"] == "Warning"  # one event, not one per cycle
    wait_until(lambda: 'reason="InsufficientNodes"' in sched.metrics.exposition().decode())

    apisim.delete(r.PODS, NS, "blocker")
    wait_until(lambda: all(bound_node(apisim, n) for n in names), what="gang bound")
    wait_until(lambda: any(c.bound for c in sched.reports), what="the binding cycle's report")
    [cycle] = [c for c in sched.reports if c.bound]
    assert sorted(cycle.bound) == sorted(f"{NS}/{n}" for n in names)  # one cycle bound them all
    assert not annotation_patches(apisim)  # every intent travelled in its pod's Binding
    binds = bindings(apisim)
    assert len(binds) == 16
    # The first Binding also records the whole gang's plan, so a crash after it can be completed; no other does.
    plan = json.loads(binds[0].data["metadata"]["annotations"]["gpufleet.io/gang-plan"])
    assert sorted(plan["pods"]) == names
    assert not any("gpufleet.io/gang-plan" in b.data["metadata"]["annotations"] for b in binds[1:])
    for name, placed in plan["pods"].items():
        assert placed["node"] == bound_node(apisim, name)
    used = [json.loads(apisim.get(r.PODS, NS, n)["metadata"]["annotations"]["gpufleet.io/devices"])[0]
            for n in names]
    assert len(set(used)) == 16  # every GPU of the cluster, each once

    def cq_status() -> dict[str, Any]:
        obj = apisim.get(r.CLUSTER_QUEUES, None, "gpus")
        return (obj or {}).get("status") or {}

    wait_until(lambda: cq_status().get("admittedWorkloads") == 1, what="ClusterQueue status")
    status = cq_status()
    assert status["pendingWorkloads"] == 0
    [usage] = status["flavorsUsage"]
    gpu = next(res for res in usage["resources"] if res["name"] == "nvidia.com/gpu")
    assert (usage["name"], gpu["total"], gpu["borrowed"]) == ("gpu", "16", "0")
    [active] = status["conditions"]
    assert (active["type"], active["status"], active["reason"]) == ("Active", "True", "Ready")
    assert not list(_crd_status_validator("ClusterQueue").iter_errors(status))
    lq = (apisim.get(r.LOCAL_QUEUES, NS, "team") or {}).get("status") or {}
    assert lq["admittedWorkloads"] == 1 and lq["pendingWorkloads"] == 0
    assert not list(_crd_status_validator("LocalQueue").iter_errors(lq))


def _priority_setup(apisim: ApiSim) -> None:
    apisim.create(r.NODES, node("n0", gpus=2))
    for name, value in (("low", 1), ("mid", 2), ("high", 10)):
        apisim.create(r.PRIORITY_CLASSES, priority_class(name, value))
    apisim.create(r.RESOURCE_FLAVORS, flavor())
    apisim.create(r.CLUSTER_QUEUES, cluster_queue("gpus", gpus=2, preemption={"withinClusterQueue": "LowerPriority"}))
    apisim.create(r.LOCAL_QUEUES, local_queue("team", "gpus"))
    apisim.create(r.PODS, pod("low", queue="team", priority_class="low"))
    apisim.create(r.PODS, pod("mid", queue="team", priority_class="mid"))


def _devices(apisim: ApiSim, name: str) -> list[str]:
    obj = apisim.get(r.PODS, NS, name)
    assert obj is not None
    return list(json.loads(obj["metadata"]["annotations"]["gpufleet.io/devices"]))


def test_preemption_evicts_the_lowest_priority_victim(apisim: ApiSim,
                                                      live_scheduler: Callable[..., Scheduler]) -> None:
    _priority_setup(apisim)
    sched = live_scheduler()
    wait_until(lambda: bound_node(apisim, "low") == "n0" and bound_node(apisim, "mid") == "n0")
    freed = _devices(apisim, "low")
    apisim.create(r.PODS, pod("urgent", queue="team", priority_class="high"))
    wait_until(lambda: bound_node(apisim, "urgent") == "n0", what="preemptor bound")
    assert apisim.get(r.PODS, NS, "low") is None and bound_node(apisim, "mid") == "n0"
    assert _devices(apisim, "urgent") == freed  # it took exactly the victim's GPU
    assert [q.data.get("deleteOptions", {}).get("dryRun") for q in evictions(apisim, "low")] == [["All"], None]
    assert not evictions(apisim, "mid")
    [event] = events(apisim, "Preempted")
    assert event["regarding"]["name"] == "low" and f"{NS}/urgent" in event["note"]
    assert sched.metrics.preemptions.labels("InClusterQueue")._value.get() == 1


def test_a_disruption_budget_refusal_makes_the_next_cycle_choose_another_victim(
    apisim: ApiSim, live_scheduler: Callable[..., Scheduler]
) -> None:
    _priority_setup(apisim)
    sched = live_scheduler()
    wait_until(lambda: bound_node(apisim, "low") == "n0" and bound_node(apisim, "mid") == "n0")
    apisim.protect(NS, "low")  # a PodDisruptionBudget covers "low"
    freed = _devices(apisim, "mid")
    apisim.create(r.PODS, pod("urgent", queue="team", priority_class="high"))
    wait_until(lambda: bound_node(apisim, "urgent") == "n0", what="preemptor bound")
    assert bound_node(apisim, "low") == "n0"  # protected: still running
    assert apisim.get(r.PODS, NS, "mid") is None
    assert _devices(apisim, "urgent") == freed
    # "low" was only ever tried in dry run, which the budget refused; nothing of it was deleted.
    assert {str(q.data["deleteOptions"].get("dryRun")) for q in evictions(apisim, "low")} == {"['All']"}
    assert [q.data.get("deleteOptions", {}).get("dryRun") for q in evictions(apisim, "mid")] == [["All"], None]
    refused = [c for c in sched.reports if c.refused]
    evicted = [c for c in sched.reports if c.evicted]
    assert refused[0].refused == [f"{NS}/low"] and evicted[0].evicted == [f"{NS}/mid"]
    assert refused[0].number < evicted[0].number
    assert sched.metrics.eviction_refusals._value.get() == 1


def _bystander_setup(apisim: ApiSim) -> None:
    """A second node and a queue of its own, for a pod that has nothing to do with a preemption on n0."""
    apisim.create(r.NODES, node("n1", gpus=1))
    apisim.create(r.CLUSTER_QUEUES, cluster_queue("others", gpus=1))
    apisim.create(r.LOCAL_QUEUES, local_queue("elsewhere", "others"))


def test_a_new_pod_is_bound_while_a_preemptions_evictions_await_their_answers(
    apisim: ApiSim, live_scheduler: Callable[..., Scheduler]
) -> None:
    """The cycle that chose a preemption's victims keeps its state before the evictions are answered: a pod that
    arrives meanwhile is bound without waiting for the API server's answers (before, the cycle thread waited for
    them, and every pod with it)."""
    _priority_setup(apisim)
    sched = live_scheduler()
    wait_until(lambda: bound_node(apisim, "low") == "n0" and bound_node(apisim, "mid") == "n0")
    _bystander_setup(apisim)  # (after: "low" and "mid" on n0)
    apisim.hold_evictions()
    apisim.create(r.PODS, pod("urgent", queue="team", priority_class="high"))
    wait_until(lambda: apisim.waiting_evictions() >= 1, what="the victim's eviction sent, unanswered")
    apisim.create(r.PODS, pod("bystander", queue="elsewhere"))
    wait_until(lambda: bound_node(apisim, "bystander") == "n1", what="a new pod bound meanwhile")
    assert apisim.waiting_evictions() >= 1 and bound_node(apisim, "low") == "n0"  # still unanswered
    apisim.release_evictions()
    wait_until(lambda: bound_node(apisim, "urgent") == "n0", what="preemptor bound once its victim is gone")
    assert apisim.get(r.PODS, NS, "low") is None and bound_node(apisim, "mid") == "n0"
    # One dry run and one eviction: the scheduler waited for the answer it was sent (a cycle thread that waited
    # for it instead gave up at the client's timeout, to bind the bystander, and asked again).
    assert [q.data.get("deleteOptions", {}).get("dryRun") for q in evictions(apisim, "low")] == [["All"], None]
    wait_until(lambda: any(c.evicted == [f"{NS}/low"] for c in sched.reports), what="the eviction counted")
    assert sched.metrics.evicted.labels("gpus", "Preempted")._value.get() == 1


def test_an_eviction_refused_after_its_cycle_kept_its_state_makes_the_next_cycle_choose_again(
    apisim: ApiSim, live_scheduler: Callable[..., Scheduler]
) -> None:
    _priority_setup(apisim)
    sched = live_scheduler()
    wait_until(lambda: bound_node(apisim, "low") == "n0" and bound_node(apisim, "mid") == "n0")
    _bystander_setup(apisim)  # (after: "low" and "mid" on n0)
    apisim.protect(NS, "low")
    apisim.hold_evictions()
    apisim.create(r.PODS, pod("urgent", queue="team", priority_class="high"))
    wait_until(lambda: apisim.waiting_evictions() >= 1, what="the victim's eviction sent, unanswered")
    apisim.create(r.PODS, pod("bystander", queue="elsewhere"))
    wait_until(lambda: bound_node(apisim, "bystander") == "n1", what="a new pod bound meanwhile")
    apisim.release_evictions()  # the budget refuses "low": the next cycle is a full one, "low" shielded
    wait_until(lambda: bound_node(apisim, "urgent") == "n0", what="preemptor bound in another victim's place")
    assert bound_node(apisim, "low") == "n0" and apisim.get(r.PODS, NS, "mid") is None
    refused = [c for c in sched.reports if c.refused]
    assert refused and refused[0].refused == [f"{NS}/low"]
    assert [q.data.get("deleteOptions", {}).get("dryRun") for q in evictions(apisim, "low")] == [["All"]]
