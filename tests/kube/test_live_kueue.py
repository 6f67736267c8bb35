"""Kueue's own objects, live (issue 14 item 5), against kmock + ApiSim over real HTTP.

* ``queues.source``: auto reads Kueue's kueue.x-k8s.io/v1beta1 queues where they exist, else gpufleet.io's;
  kueue and gpufleet force one; kueue on a cluster without Kueue refuses to start.
* Beside Kueue: the test plays Kueue's controller (it writes the Workloads' admission and conditions, and
  creates the admitted Job's pods); gpufleet binds only admitted pods, on the flavor's nodes, and answers its
  AdmissionCheck (Ready, Pending, Rejected) as placement feasibility says.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import kmock
import pytest
from kube_apisim import ApiSim, status
from live_env import (
    NS,
    bindings,
    bound_node,
    cluster_queue,
    fast_settings,
    flavor,
    local_queue,
    node,
    pod,
    wait_until,
)

from gpufleet.k8s import resources as r
from gpufleet.k8s.errors import ConfigError
from gpufleet.live.scheduler import Scheduler
from gpufleet.live.settings import BesideKueueSettings, QueueSettings

JsonDict = dict[str, Any]
KUEUE = "kueue.x-k8s.io/v1beta1"
KUEUE_TYPES = (*r.KUEUE_QUEUE_RESOURCES, r.KUEUE_WORKLOADS, r.KUEUE_ADMISSION_CHECKS)
CHECK = "gpu-placement"


def kueue(obj: JsonDict) -> JsonDict:
    """The same queue object under Kueue's own API group."""
    return {**obj, "apiVersion": KUEUE}


def kueue_settings(source: str = "auto", beside: bool = False) -> Any:
    return fast_settings(queues=QueueSettings(source),  # type: ignore[arg-type]
                         beside_kueue=BesideKueueSettings(enabled=beside))


def queue_status(apisim: ApiSim, res: r.ResourceType, name: str) -> JsonDict:
    obj = apisim.get(res, None, name)
    return dict((obj or {}).get("status") or {})


# --- queues.source -----------------------------------------------------------------------------------------------


def test_auto_reads_kueue_queues_when_kueue_is_installed(apisim: ApiSim,
                                                          live_scheduler: Callable[..., Scheduler]) -> None:
    apisim.serve(*KUEUE_TYPES)
    apisim.create(r.NODES, node("n0", gpus=4))
    apisim.create(r.KUEUE_RESOURCE_FLAVORS, kueue(flavor()))
    apisim.create(r.KUEUE_CLUSTER_QUEUES, kueue(cluster_queue("team", gpus=2)))
    apisim.create(r.KUEUE_LOCAL_QUEUES, kueue(local_queue("team", "team")))
    apisim.create(r.PODS, pod("fits", gpus=2, queue="team"))
    apisim.create(r.PODS, pod("over-quota", gpus=1, queue="team", created="2026-01-01T00:00:01Z"))
    sched = live_scheduler(settings=kueue_settings("auto"))
    assert r.KUEUE_CLUSTER_QUEUES in sched.resources and r.CLUSTER_QUEUES in sched.resources
    wait_until(lambda: bound_node(apisim, "fits") == "n0", what="fits bound against Kueue's quota")
    # Kueue's ClusterQueue holds 2 GPUs: the second pod waits for quota, not for nodes.
    wait_until(lambda: queue_status(apisim, r.KUEUE_CLUSTER_QUEUES, "team").get("pendingWorkloads") == 1,
               what="Kueue ClusterQueue status written")
    assert bound_node(apisim, "over-quota") is None
    status = queue_status(apisim, r.KUEUE_CLUSTER_QUEUES, "team")
    gpu = next(x for f in status["flavorsUsage"] for x in f["resources"] if x["name"] == "nvidia.com/gpu")
    assert gpu["total"] == "2"


def test_auto_keeps_gpufleet_queues_when_kueue_has_none(apisim: ApiSim,
                                                        live_scheduler: Callable[..., Scheduler]) -> None:
    apisim.serve(*KUEUE_TYPES)  # Kueue's CRDs are installed, but no Kueue ClusterQueue exists
    apisim.create(r.NODES, node("n0", gpus=4))
    apisim.create(r.RESOURCE_FLAVORS, flavor())
    apisim.create(r.CLUSTER_QUEUES, cluster_queue("team", gpus=4))
    apisim.create(r.LOCAL_QUEUES, local_queue("team", "team"))
    apisim.create(r.PODS, pod("p", gpus=1, queue="team"))
    live_scheduler(settings=kueue_settings("auto"))
    wait_until(lambda: bound_node(apisim, "p") == "n0", what="bound against gpufleet.io's quota")
    wait_until(lambda: queue_status(apisim, r.CLUSTER_QUEUES, "team").get("admittedWorkloads") == 1)


def test_auto_without_permission_to_list_kueue_reads_gpufleet_queues(
        apisim: ApiSim, live_scheduler: Callable[..., Scheduler], caplog: pytest.LogCaptureFixture) -> None:
    apisim.serve(*KUEUE_TYPES)  # Kueue is installed, but deploy/kueue/ (RBAC) is not applied
    forbidden = apisim.kmock["get", kmock.resource(r.KUEUE_GROUP, r.KUEUE_VERSION, "clusterqueues")]
    apisim.harness.call(lambda: forbidden << 403 << status(403, "Forbidden", "clusterqueues.kueue.x-k8s.io is "
                                                           "forbidden: User cannot list resource"))
    apisim.create(r.KUEUE_CLUSTER_QUEUES, kueue(cluster_queue("team", gpus=4)))
    sched = live_scheduler(settings=kueue_settings("auto"), run=False)
    assert r.KUEUE_CLUSTER_QUEUES not in sched.resources and r.CLUSTER_QUEUES in sched.resources
    assert "may not list them (RBAC)" in caplog.text


def test_source_gpufleet_ignores_kueue_queues(apisim: ApiSim, live_scheduler: Callable[..., Scheduler]) -> None:
    apisim.serve(*KUEUE_TYPES)
    apisim.create(r.NODES, node("n0", gpus=4))
    apisim.create(r.KUEUE_RESOURCE_FLAVORS, kueue(flavor()))
    apisim.create(r.KUEUE_CLUSTER_QUEUES, kueue(cluster_queue("team", gpus=4)))
    apisim.create(r.KUEUE_LOCAL_QUEUES, kueue(local_queue("team", "team")))
    apisim.create(r.PODS, pod("p", gpus=1, queue="team"))
    sched = live_scheduler(settings=kueue_settings("gpufleet"))
    # Kueue's queue kinds are not watched (its AdmissionChecks are: gpufleet.io's ClusterQueues may name them).
    assert not any(res.group == r.KUEUE_GROUP and res.kind != "AdmissionCheck" for res in sched.resources)
    wait_until(lambda: len(sched.reports) >= 3, what="a few cycles")
    assert bound_node(apisim, "p") is None  # its LocalQueue exists only under Kueue's group
    assert queue_status(apisim, r.KUEUE_CLUSTER_QUEUES, "team") == {}


def test_source_kueue_without_kueue_refuses_to_start(apisim: ApiSim,
                                                     live_scheduler: Callable[..., Scheduler]) -> None:
    with pytest.raises(ConfigError, match=r"kueue\.x-k8s\.io/v1beta1"):
        live_scheduler(settings=kueue_settings("kueue"), run=False)
    with pytest.raises(ConfigError, match="besideKueue"):
        live_scheduler(settings=kueue_settings("auto", beside=True), run=False)


# --- beside Kueue ------------------------------------------------------------------------------------------------


def kueue_workload(name: str, pods: int, gpus: int, *, flavor_name: str = "a", admitted: bool = False,
                   check: str | None = None, uid_owner: str | None = None, priority: int = 0) -> JsonDict:
    """A Workload as Kueue's controller writes it once it reserved quota (status.admission), with our check's
    state when the ClusterQueue names an AdmissionCheck."""
    conditions: list[JsonDict] = [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                                   "message": "Quota reserved in ClusterQueue team",
                                   "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    if admitted:
        conditions.append({"type": "Admitted", "status": "True", "reason": "Admitted", "message": "",
                           "lastTransitionTime": "2026-01-01T00:00:00Z"})
    status: JsonDict = {"admission": {"clusterQueue": "team", "podSetAssignments": [
        {"name": "main", "count": pods, "flavors": {"cpu": flavor_name, "memory": flavor_name,
                                                    "nvidia.com/gpu": flavor_name}}]},
        "conditions": conditions}
    if check is not None:
        status["admissionChecks"] = [{"name": check, "state": "Pending", "message": "",
                                      "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    requests = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(gpus)}
    container = {"name": "main", "image": "busybox",
                 "resources": {"requests": requests, "limits": {"nvidia.com/gpu": str(gpus)}}}
    meta: JsonDict = {"name": name, "namespace": NS}
    if uid_owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid_owner,
                                    "controller": True}]
    return {"apiVersion": KUEUE, "kind": "Workload", "metadata": meta,
            "spec": {"queueName": "team", "priority": priority, "podSets": [
                {"name": "main", "count": pods, "template": {"spec": {"containers": [container]}}}]},
            "status": status}


def admitted_pod(name: str, workload: str, gpus: int) -> JsonDict:
    """A pod of a Job Kueue started: it carries its Workload's name (and, as Kueue injects it, no selector here:
    gpufleet applies the flavor's node labels from status.admission)."""
    out = pod(name, gpus=gpus)
    out["metadata"]["annotations"]["kueue.x-k8s.io/workload"] = workload
    out["metadata"]["labels"]["kueue.x-k8s.io/podset"] = "main"
    return out


def beside_cluster(apisim: ApiSim) -> None:
    apisim.serve(*KUEUE_TYPES)
    for name, pool in (("a0", "a"), ("a1", "a"), ("b0", "b")):
        apisim.create(r.NODES, node(name, gpus=4, labels={"pool": pool}))
    for name in ("a", "b"):
        apisim.create(r.KUEUE_RESOURCE_FLAVORS, {"apiVersion": KUEUE, "kind": "ResourceFlavor",
                                                 "metadata": {"name": name}, "spec": {"nodeLabels": {"pool": name}}})
    apisim.create(r.KUEUE_CLUSTER_QUEUES, kueue(cluster_queue("team", gpus=100, flavor_name="a")))
    apisim.create(r.KUEUE_LOCAL_QUEUES, kueue(local_queue("team", "team")))


def check_state(apisim: ApiSim, workload: str) -> tuple[str | None, str]:
    obj = apisim.get(r.KUEUE_WORKLOADS, NS, workload) or {}
    for c in (obj.get("status") or {}).get("admissionChecks") or []:
        if c.get("name") == CHECK:
            return c.get("state"), str(c.get("message") or "")
    return None, ""


def test_beside_kueue_binds_only_admitted_pods_on_the_flavors_nodes(
        apisim: ApiSim, live_scheduler: Callable[..., Scheduler]) -> None:
    beside_cluster(apisim)
    apisim.create(r.KUEUE_WORKLOADS, kueue_workload("job-train", 2, 4, admitted=True))
    apisim.create(r.PODS, admitted_pod("train-0", "job-train", 4))
    apisim.create(r.PODS, admitted_pod("train-1", "job-train", 4))
    # Kueue manages this pod (queue label) but has admitted no Workload for it: it waits.
    apisim.create(r.PODS, pod("queued", gpus=1, queue="team"))
    # A pod whose Workload Kueue has not admitted (no status.admission) waits too.
    not_admitted = kueue_workload("job-later", 1, 1)
    del not_admitted["status"]
    apisim.create(r.KUEUE_WORKLOADS, not_admitted)
    apisim.create(r.PODS, admitted_pod("later-0", "job-later", 1))
    # A pod Kueue does not manage at all is placed as the standalone scheduler places it.
    apisim.create(r.PODS, pod("plain", gpus=1))
    sched = live_scheduler(settings=kueue_settings("kueue", beside=True))
    wait_until(lambda: bound_node(apisim, "train-0") is not None and bound_node(apisim, "train-1") is not None
               and bound_node(apisim, "plain") is not None, what="admitted and unmanaged pods bound")
    # Flavor a's nodes carry pool=a: 4 GPUs each, one pod each.
    assert {bound_node(apisim, "train-0"), bound_node(apisim, "train-1")} == {"a0", "a1"}
    assert bound_node(apisim, "plain") == "b0"  # the a nodes are full
    wait_until(lambda: len(sched.reports) >= 3, what="more cycles")
    assert bound_node(apisim, "queued") is None and not bindings(apisim, "queued")
    assert bound_node(apisim, "later-0") is None and not bindings(apisim, "later-0")
    # Beside Kueue, Kueue writes the queues' statuses: gpufleet does not.
    assert queue_status(apisim, r.KUEUE_CLUSTER_QUEUES, "team") == {}


def test_admission_check_follows_placement_feasibility(apisim: ApiSim,
                                                       live_scheduler: Callable[..., Scheduler]) -> None:
    beside_cluster(apisim)
    apisim.create(r.KUEUE_ADMISSION_CHECKS, {"apiVersion": KUEUE, "kind": "AdmissionCheck",
                                             "metadata": {"name": CHECK},
                                             "spec": {"controllerName": "gpufleet.io/placement"}})
    apisim.create(r.KUEUE_ADMISSION_CHECKS, {"apiVersion": KUEUE, "kind": "AdmissionCheck",
                                             "metadata": {"name": "someone-elses"},
                                             "spec": {"controllerName": "example.com/other"}})
    # Both a-nodes, all their GPUs: fits, Ready. Then it holds them.
    apisim.create(r.KUEUE_WORKLOADS, kueue_workload("big", 2, 4, check=CHECK, priority=10))
    # One more 4-GPU pod on flavor a: no room while "big" holds both nodes: Pending, waiting for capacity.
    apisim.create(r.KUEUE_WORKLOADS, kueue_workload("next", 1, 4, check=CHECK))
    # 8 GPUs in one pod: no node of flavor a has them (b0 has 4 but is another flavor): Rejected.
    apisim.create(r.KUEUE_WORKLOADS, kueue_workload("huge", 1, 8, check=CHECK))
    live_scheduler(settings=kueue_settings("kueue", beside=True))

    wait_until(lambda: check_state(apisim, "big")[0] == "Ready", what="big Ready")
    wait_until(lambda: check_state(apisim, "next")[0] == "Pending" and check_state(apisim, "next")[1],
               what="next Pending with a reason")
    wait_until(lambda: check_state(apisim, "huge")[0] == "Rejected", what="huge Rejected")
    assert "waiting for capacity" in check_state(apisim, "next")[1]
    assert "empty cluster" in check_state(apisim, "huge")[1]
    active = apisim.get(r.KUEUE_ADMISSION_CHECKS, None, CHECK) or {}
    assert [(c["type"], c["status"]) for c in active["status"]["conditions"]] == [("Active", "True")]
    assert "status" not in (apisim.get(r.KUEUE_ADMISSION_CHECKS, None, "someone-elses") or {})

    # Kueue admits "big" and its Job creates the pods: gpufleet binds them where it reserved room.
    apisim.modify(r.KUEUE_WORKLOADS, NS, "big", {"status": {"conditions": [
        {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "",
         "lastTransitionTime": "2026-01-01T00:00:00Z"},
        {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "",
         "lastTransitionTime": "2026-01-01T00:00:01Z"}]}})
    apisim.create(r.PODS, admitted_pod("big-0", "big", 4))
    apisim.create(r.PODS, admitted_pod("big-1", "big", 4))
    wait_until(lambda: {bound_node(apisim, "big-0"), bound_node(apisim, "big-1")} == {"a0", "a1"},
               what="big's pods bound on the a nodes")
    assert check_state(apisim, "next")[0] == "Pending"

    # "big" finishes: its pods go, Kueue marks it Finished; "next" now fits and turns Ready.
    apisim.modify(r.KUEUE_WORKLOADS, NS, "big", {"status": {"conditions": [
        {"type": "Finished", "status": "True", "reason": "Succeeded", "message": "",
         "lastTransitionTime": "2026-01-01T00:01:00Z"}]}})
    apisim.delete(r.PODS, NS, "big-0")
    apisim.delete(r.PODS, NS, "big-1")
    wait_until(lambda: check_state(apisim, "next")[0] == "Ready", what="next Ready once capacity is free")
    assert check_state(apisim, "huge")[0] == "Rejected"


def test_settings_refuse_beside_kueue_with_gpufleet_queues() -> None:
    from gpufleet.live.settings import settings_from_text

    _, problems = settings_from_text("besideKueue: {enabled: true}\nqueues: {source: gpufleet}\n", "s.yaml")
    assert [e.field for e in problems.errors] == ["queues.source"]
    settings, problems = settings_from_text("besideKueue: {enabled: true, admissionCheckController: x.io/y}\n"
                                            "queues: {source: auto}\n", "s.yaml")
    assert not problems.errors
    assert settings.beside_kueue == BesideKueueSettings(True, "x.io/y")
    _, problems = settings_from_text("queues: {source: kueu}\n", "s.yaml")
    assert "is not one of auto, kueue, gpufleet" in problems.errors[0].message
    assert dataclasses.asdict(settings.queues) == {"source": "auto"}
