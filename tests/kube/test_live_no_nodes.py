"""No node is not "admitted" (issue 15, item 5): the live scheduler against kmock + ApiSim over real HTTP.

With no Node at all, pods must stay pending the way kube-scheduler leaves them, ``PodScheduled=False`` with
reason ``Unschedulable`` and a ``FailedScheduling`` event, because that is what a cluster autoscaler scales up
on (from zero nodes too); the queues must not report them admitted. Admission by quota alone happens only
when the ``quotaOnly`` setting asks for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kube_apisim import ApiSim
from live_env import (
    NS,
    annotation_patches,
    bindings,
    bound_node,
    cluster_queue,
    events,
    fast_settings,
    flavor,
    local_queue,
    node,
    pod,
    scheduled_condition,
    wait_until,
)

from gpufleet.k8s import resources as r
from gpufleet.live.scheduler import Scheduler
from gpufleet.live.settings import SchedulerSettings, settings_from_text

PODS = ("train-a", "train-b")


def _queues(apisim: ApiSim) -> None:
    apisim.create(r.RESOURCE_FLAVORS, flavor())
    apisim.create(r.CLUSTER_QUEUES, cluster_queue("gpus", gpus=8))
    apisim.create(r.LOCAL_QUEUES, local_queue("team", "gpus"))


def _cq_status(apisim: ApiSim) -> dict[str, Any]:
    return dict(((apisim.get(r.CLUSTER_QUEUES, None, "gpus") or {}).get("status")) or {})


def _gpu_total(status: dict[str, Any]) -> str:
    [usage] = status["flavorsUsage"]
    return str(next(res for res in usage["resources"] if res["name"] == "nvidia.com/gpu")["total"])


def _failed_scheduling(apisim: ApiSim, name: str) -> list[dict[str, Any]]:
    return [e for e in events(apisim, "FailedScheduling") if e["regarding"]["name"] == name]


def test_without_nodes_pods_stay_pending_unschedulable_and_queues_admit_nothing(
    apisim: ApiSim, live_scheduler: Callable[..., Scheduler]
) -> None:
    _queues(apisim)
    for name in PODS:
        apisim.create(r.PODS, pod(name, gpus=2, queue="team"))
    apisim.create(r.PODS, pod("loose", gpus=1))  # no queue: only nodes gate it
    sched = live_scheduler()

    everyone = (*PODS, "loose")
    wait_until(lambda: all(scheduled_condition(apisim.get(r.PODS, NS, n)) for n in everyone), what="conditions")
    for name in everyone:
        condition = scheduled_condition(apisim.get(r.PODS, NS, name))
        assert condition is not None
        assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
        assert "0/0 nodes are available" in condition["message"]
    wait_until(lambda: all(_failed_scheduling(apisim, n) for n in everyone), what="FailedScheduling events")
    for name in everyone:
        [event] = _failed_scheduling(apisim, name)
        assert event["type"] == "Warning" and "0/0 nodes are available" in event["note"]
    assert not bindings(apisim) and not annotation_patches(apisim)

    # The queue reports both workloads pending, none admitted, no quota used.
    wait_until(lambda: _cq_status(apisim).get("pendingWorkloads") == 2, what="ClusterQueue status")
    status = _cq_status(apisim)
    assert status["admittedWorkloads"] == 0 and status["reservingWorkloads"] == 0
    assert _gpu_total(status) == "0"
    lq = (apisim.get(r.LOCAL_QUEUES, NS, "team") or {}).get("status") or {}
    assert lq["pendingWorkloads"] == 2 and lq["admittedWorkloads"] == 0
    wait_until(lambda: 'reason="InsufficientNodes"' in sched.metrics.exposition().decode(), what="pending gauge")
    assert all(not c.admitted for c in sched.reports)

    # The autoscaler brings a node: everything is placed on it.
    apisim.create(r.NODES, node("scaled-up", gpus=8))
    wait_until(lambda: all(bound_node(apisim, n) == "scaled-up" for n in everyone), what="pods bound")
    wait_until(lambda: _cq_status(apisim).get("admittedWorkloads") == 2, what="ClusterQueue status after binding")
    assert _gpu_total(_cq_status(apisim)) == "4"


def test_quota_only_admits_by_quota_alone_when_asked(apisim: ApiSim,
                                                     live_scheduler: Callable[..., Scheduler]) -> None:
    _queues(apisim)
    for name in PODS:
        apisim.create(r.PODS, pod(name, gpus=2, queue="team"))
    sched = live_scheduler(settings=fast_settings(quota_only=True))

    wait_until(lambda: _cq_status(apisim).get("admittedWorkloads") == 2, what="ClusterQueue status")
    status = _cq_status(apisim)
    assert status["pendingWorkloads"] == 0 and _gpu_total(status) == "4"
    # The cycle's report is kept after its writes. Nothing is bound, so each cycle admits the same two again.
    wait_until(lambda: {w for c in list(sched.reports) for w in c.admitted} == {f"{NS}/{n}" for n in PODS},
               what="the admitting cycle's report")
    # Admitted, not placed: no binding, no device annotation, no unschedulable condition or event.
    assert not bindings(apisim) and not annotation_patches(apisim)
    assert all(bound_node(apisim, n) is None for n in PODS)
    assert not events(apisim, "FailedScheduling")
    assert all(scheduled_condition(apisim.get(r.PODS, NS, n)) is None for n in PODS)


def test_quota_only_is_off_unless_the_configuration_sets_it() -> None:
    assert SchedulerSettings().quota_only is False
    settings, problems = settings_from_text("quotaOnly: true\n", "c.yaml")
    assert not problems.errors and settings.quota_only is True
    _, problems = settings_from_text("quotaOnly: sometimes\n", "c.yaml")
    [error] = problems.errors
    assert error.field == "quotaOnly" and error.file == "c.yaml" and error.line == 1
