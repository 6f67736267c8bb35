"""The live scheduler groups its pods by their owners' workload kinds (issue 14 item 1), against kmock + ApiSim over
real HTTP; the tests play the controllers (they create the pods, one after another where the controller would).

* a JobSet's pods are one gang: bound all together once they all exist, never some of them;
* a Deployment's pods are one workload each: bound one by one, as far as they fit;
* a StatefulSet is admitted with its first pod, with quota for all; its later pods join it, as a Job's do, and
  wait for room rather than have the running ones evicted; a restarting JobSet's new pods are one gang again;
* a workload Kueue would hold (admission checks, suspended outside any queue) stays pending with the reason;
* a cluster that does not serve a kind (or forbids listing it) still schedules;
* an object of a workload kind that does not parse, or that makes the core fail, costs only itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import kmock
import pytest
from kube_apisim import ApiSim, status
from live_env import (
    NS,
    bindings,
    bound_node,
    cluster_queue,
    events,
    evictions,
    fast_settings,
    flavor,
    local_queue,
    node,
    pod,
    scheduled_condition,
    wait_until,
)
from workload_env import (
    DEPLOYMENTS,
    JOBS,
    JOBSETS,
    REPLICA_SETS,
    STATEFUL_SETS,
    admission_check,
    deployment,
    deployment_pods,
    job,
    job_pods,
    jobset,
    jobset_pods,
    stateful_set,
    stateful_set_pod,
)

from gpufleet.cluster import grouping
from gpufleet.k8s import resources as r
from gpufleet.live.scheduler import Scheduler
from gpufleet.live.settings import BindingSettings


def _message(apisim: ApiSim, name: str, ns: str = NS) -> str:
    return str((scheduled_condition(apisim.get(r.PODS, ns, name)) or {}).get("message") or "")


def _names(pods: list[dict[str, object]]) -> list[str]:
    return [str(p["metadata"]["name"]) for p in pods]  # type: ignore[index]


def _rejected(sched: Scheduler, kind: str, reason: str) -> float:
    value = sched.metrics.registry.get_sample_value("gpufleet_rejected_objects", {"kind": kind, "reason": reason})
    return value or 0.0


# --- gangs and per-pod workloads --------------------------------------------------------------------------------


def test_a_jobsets_pods_are_bound_all_together_once_its_controller_has_created_them_all(
    apisim: ApiSim, live_scheduler: Callable[..., Scheduler]
) -> None:
    apisim.serve(JOBSETS, JOBS)
    for name in ("n0", "n1"):
        apisim.create(r.NODES, node(name, gpus=4))
    owner = jobset("train", jobs=2, pods_per_job=2, gpus=2)  # 4 pods of 2 GPUs: both nodes
    apisim.create(JOBSETS, owner)
    pods = jobset_pods(owner)
    for p in pods[:3]:
        apisim.create(r.PODS, p)
    sched = live_scheduler()
    assert JOBSETS.key in {res.key for res in sched.resources}
    # Three of four exist: the gang waits for the fourth (its pods say so), and nothing is bound meanwhile.
    wait_until(lambda: "has 3 of its 4 pods" in _message(apisim, _names(pods)[0]), what="the gang waits for its pod")
    assert "JobSet ml/train" in _message(apisim, _names(pods)[0])
    assert not bindings(apisim)
    apisim.create(r.PODS, pods[3])
    wait_until(lambda: all(bound_node(apisim, n) for n in _names(pods)), what="the whole JobSet bound")
    assert {bound_node(apisim, n) for n in _names(pods)} == {"n0", "n1"}
    [admitting] = [c for c in sched.reports if f"{NS}/train" in c.admitted]
    wait_until(lambda: len(admitting.bound) == 4, what="its Bindings ended")
    assert sorted(admitting.bound) == sorted(f"{NS}/{n}" for n in _names(pods))  # one cycle, one workload
    assert all(len(bindings(apisim, n)) == 1 for n in _names(pods))


def test_a_jobset_that_does_not_fit_whole_binds_none_of_its_pods(
    apisim: ApiSim, live_scheduler: Callable[..., Scheduler]
) -> None:
    apisim.serve(JOBSETS)
    apisim.create(r.NODES, node("n0", gpus=4))
    apisim.create(r.NODES, node("n1", gpus=2))  # 6 GPUs: room for three of its four pods, not for all
    owner = jobset("train", jobs=2, pods_per_job=2, gpus=2)
    apisim.create(JOBSETS, owner)
    pods = jobset_pods(owner)
    for p in pods:
        apisim.create(r.PODS, p)
    live_scheduler()
    wait_until(lambda: "cannot all be placed" in _message(apisim, _names(pods)[0]), what="the gang told why it waits")
    assert not bindings(apisim)  # never some of them
    apisim.create(r.NODES, node("n2", gpus=4))
    wait_until(lambda: all(bound_node(apisim, n) for n in _names(pods)), what="bound once it fits whole")


def test_a_deployments_pods_are_scheduled_one_by_one(apisim: ApiSim,
                                                      live_scheduler: Callable[..., Scheduler]) -> None:
    apisim.serve(DEPLOYMENTS, REPLICA_SETS)
    apisim.create(r.NODES, node("n0", gpus=2))
    owner = deployment("web", replicas=3, gpus=1)
    apisim.create(DEPLOYMENTS, owner)
    pods = deployment_pods(owner)
    for p in pods:
        apisim.create(r.PODS, p)
    sched = live_scheduler()
    # Two GPUs for three pods: as a gang none would run; one workload per pod, two run and the third waits.
    wait_until(lambda: sum(1 for n in _names(pods) if bound_node(apisim, n)) == 2, what="two pods bound")
    [waiting] = [n for n in _names(pods) if not bound_node(apisim, n)]
    wait_until(lambda: "nodes are available" in _message(apisim, waiting), what="the third told why it waits")
    admitted = {w for c in sched.reports for w in c.admitted}
    assert admitted == {f"{NS}/{n}" for n in _names(pods) if n != waiting}  # a Deployment pod's workload: itself


def test_a_stateful_set_is_admitted_with_its_first_pod_and_its_later_pods_join_it(
    apisim: ApiSim, live_scheduler: Callable[..., Scheduler]
) -> None:
    apisim.serve(STATEFUL_SETS)
    for name in ("n0", "n1"):
        apisim.create(r.NODES, node(name, gpus=2))
    apisim.create(r.RESOURCE_FLAVORS, flavor())
    apisim.create(r.CLUSTER_QUEUES, cluster_queue("team", gpus=3))
    apisim.create(r.LOCAL_QUEUES, local_queue("team", "team"))
    owner = stateful_set("db", replicas=3, gpus=1, queue="team")
    apisim.create(STATEFUL_SETS, owner)
    apisim.create(r.PODS, stateful_set_pod(owner, 0))
    sched = live_scheduler()
    wait_until(lambda: bound_node(apisim, "db-0") is not None, what="admitted with its first pod")
    # Its quota is for all three pods: another pod of the queue waits for quota, though the nodes have room.
    apisim.create(r.PODS, pod("other", gpus=1, queue="team", created="2026-01-02T00:00:00Z"))
    wait_until(lambda: "quota" in _message(apisim, "other"), what="the other pod waits for quota")
    # The controller creates each next pod once the one before runs (OrderedReady).
    for ordinal in (1, 2):
        apisim.create(r.PODS, stateful_set_pod(owner, ordinal))
        wait_until(lambda o=ordinal: bound_node(apisim, f"db-{o}") is not None, what=f"db-{ordinal} joined")
    assert all(len(bindings(apisim, f"db-{i}")) == 1 for i in range(3))
    joined = [c for c in sched.reports if f"{NS}/db" in c.completed_gangs]
    assert len(joined) == 2  # db-1 and db-2, each placed next to the admitted workload's pods
    assert bound_node(apisim, "other") is None and not bindings(apisim, "other")
    assert not events(apisim, "Preempted")


def test_a_jobs_later_pod_joins_it_and_waits_for_room_without_evicting_the_running_ones(
    apisim: ApiSim, live_scheduler: Callable[..., Scheduler]
) -> None:
    apisim.serve(JOBS)
    apisim.create(r.NODES, node("n0", gpus=2))
    owner = job("work", pods=2, gpus=1)
    owner["spec"]["completions"] = 3  # more completions than parallelism: a third pod comes after the first two
    apisim.create(JOBS, owner)
    first, second = job_pods(owner)
    for p in (first, second):
        apisim.create(r.PODS, p)
    settings = fast_settings(binding=BindingSettings(workers=4, retries=3, retry_backoff=0.01, gang_repair_timeout=0.5,
                                                     assume_timeout=10.0))
    sched = live_scheduler(settings=settings)
    wait_until(lambda: all(bound_node(apisim, n) for n in _names([first, second])), what="the Job bound")
    third = job_pods(owner)[0]
    third["metadata"]["name"] = "work-p2x"
    apisim.create(r.PODS, third)
    # No room: the third waits, saying so, and the running pods are not evicted, however long it waits.
    wait_until(lambda: "waits for room" in _message(apisim, "work-p2x"), what="the later pod told why it waits")
    told = time.time()
    wait_until(lambda: any(c.started > told + 1.0 for c in sched.reports), what="cycles past gangRepairTimeout")
    assert not evictions(apisim) and all(bound_node(apisim, n) for n in _names([first, second]))
    apisim.modify(r.PODS, NS, _names([first])[0], {"status": {"phase": "Succeeded"}})
    wait_until(lambda: bound_node(apisim, "work-p2x") == "n0", what="the later pod joined the Job")
    assert any(f"{NS}/work" in c.completed_gangs for c in sched.reports)


def test_a_restarting_jobsets_new_pods_wait_for_the_old_ones_and_are_bound_together(
    apisim: ApiSim, live_scheduler: Callable[..., Scheduler]
) -> None:
    apisim.serve(JOBSETS)
    apisim.create(r.NODES, node("n0", gpus=4))
    owner = jobset("train", jobs=1, pods_per_job=2, gpus=1)
    apisim.create(JOBSETS, owner)
    old = jobset_pods(owner)
    for p in old:
        apisim.create(r.PODS, p)
    sched = live_scheduler()
    wait_until(lambda: all(bound_node(apisim, n) for n in _names(old)), what="the first run bound")
    # Its controller restarts it: the old pods are being deleted, the new ones come one after the other.
    for n in _names(old):
        apisim.modify(r.PODS, NS, n, {"metadata": {"deletionTimestamp": "2026-01-01T01:00:00Z"}})
    new = []
    for p in jobset_pods(owner):
        p["metadata"]["name"] += "r"
        new.append(p)
    apisim.create(r.PODS, new[0])
    wait_until(lambda: "being deleted" in _message(apisim, _names(new)[0]), what="the new pod waits for the old")
    apisim.create(r.PODS, new[1])
    wait_until(lambda: "being deleted" in _message(apisim, _names(new)[1]), what="both new pods wait")
    assert not any(bound_node(apisim, n) for n in _names(new))
    for n in _names(old):
        apisim.delete(r.PODS, NS, n)
    wait_until(lambda: all(bound_node(apisim, n) for n in _names(new)), what="the new run bound")
    # One gang, bound by one cycle (a cycle's Bindings fill its report as they end).
    wait_until(lambda: any(sorted(c.bound) == sorted(f"{NS}/{n}" for n in _names(new)) for c in sched.reports),
               what="both new pods bound by one cycle")


# --- held workloads ---------------------------------------------------------------------------------------------


def test_a_held_workload_stays_pending_with_its_reason_on_its_pods(
    apisim: ApiSim, live_scheduler: Callable[..., Scheduler]
) -> None:
    apisim.serve(JOBSETS, r.KUEUE_ADMISSION_CHECKS)
    apisim.create(r.NODES, node("n0", gpus=8))
    apisim.create(r.RESOURCE_FLAVORS, flavor())
    checked = cluster_queue("team", gpus=8)
    checked["spec"]["admissionChecks"] = ["prov"]
    apisim.create(r.CLUSTER_QUEUES, checked)
    apisim.create(r.LOCAL_QUEUES, local_queue("team", "team"))
    apisim.create(r.KUEUE_ADMISSION_CHECKS, admission_check("prov", "kueue.x-k8s.io/provisioning-request"))
    held = jobset("checked", jobs=1, pods_per_job=2, gpus=1, queue="team")
    paused = jobset("paused", jobs=1, pods_per_job=2, gpus=1, suspend=True)
    for owner in (held, paused):
        apisim.create(JOBSETS, owner)
        for p in jobset_pods(owner):
            apisim.create(r.PODS, p)
    sched = live_scheduler()
    first_held, first_paused = _names(jobset_pods(held))[0], _names(jobset_pods(paused))[0]
    wait_until(lambda: "waiting for admission check(s) prov" in _message(apisim, first_held),
               what="the admission check's hold on the pods")
    wait_until(lambda: "suspended (spec.suspend: true) and in no queue" in _message(apisim, first_paused),
               what="the suspension on the pods")
    wait_until(lambda: 'reason="Held"' in sched.metrics.exposition().decode(), what="held in the pending gauge")
    assert not bindings(apisim)


# --- what the cluster serves ------------------------------------------------------------------------------------


def test_a_cluster_that_does_not_serve_jobset_or_forbids_listing_it_still_schedules(
    apisim: ApiSim, live_scheduler: Callable[..., Scheduler], caplog: pytest.LogCaptureFixture
) -> None:
    apisim.serve(JOBS, r.KUEUE_ADMISSION_CHECKS)  # Jobs and Kueue's AdmissionChecks: no JobSet CRD at all
    apisim.create(r.NODES, node("n0", gpus=4))
    owner = job("train", pods=2, gpus=1)
    apisim.create(JOBS, owner)
    forbidden = apisim.kmock["get", kmock.resource(r.KUEUE_GROUP, r.KUEUE_VERSION, "admissionchecks")]
    apisim.harness.call(lambda: forbidden << 403 << status(403, "Forbidden", "admissionchecks.kueue.x-k8s.io is "
                                                           "forbidden: User cannot list resource"))
    pods = job_pods(owner)
    apisim.create(r.PODS, pods[0])
    sched = live_scheduler()
    watched = {res.key for res in sched.resources}
    assert JOBS.key in watched and JOBSETS.key not in watched and r.KUEUE_ADMISSION_CHECKS.key not in watched
    assert "not listable by this scheduler" in caplog.text
    wait_until(lambda: "has 1 of its 2 pods" in _message(apisim, _names(pods)[0]), what="the Job's gang waits")
    apisim.create(r.PODS, pods[1])
    wait_until(lambda: all(bound_node(apisim, n) for n in _names(pods)), what="the Job bound as one gang")
    assert sched.failures == 0


# --- one object costs only itself -------------------------------------------------------------------------------


def test_a_jobset_that_does_not_parse_is_counted_told_and_stops_nothing_else(
    apisim: ApiSim, live_scheduler: Callable[..., Scheduler]
) -> None:
    apisim.serve(JOBSETS)
    apisim.create(r.NODES, node("n0", gpus=8))
    bad = jobset("bad", jobs=1, pods_per_job=2, gpus=1)
    bad["spec"]["replicatedJobs"][0]["replicas"] = "two"
    good = jobset("good", jobs=1, pods_per_job=2, gpus=1)
    for owner in (bad, good):
        apisim.create(JOBSETS, owner)
    bad_pods = [p for p in jobset_pods({**bad, "spec": {"replicatedJobs": [
        {**bad["spec"]["replicatedJobs"][0], "replicas": 1}]}})]
    for p in [*bad_pods, *jobset_pods(good)]:
        apisim.create(r.PODS, p)
    sched = live_scheduler()
    wait_until(lambda: all(bound_node(apisim, n) for n in _names(jobset_pods(good))), what="the valid JobSet bound")
    wait_until(lambda: _rejected(sched, "JobSet", "Invalid") == 1, what="the invalid JobSet counted")
    wait_until(lambda: any(e["regarding"]["name"] == "bad" and e["type"] == "Warning"
                           for e in events(apisim, "Rejected")), what="a Warning event on the JobSet")
    # Its pods are not placed one by one as if they had no owner: they wait, saying why.
    wait_until(lambda: "its JobSet ml/bad is invalid" in _message(apisim, _names(bad_pods)[0]),
               what="its pods told why they wait")
    assert not any(bound_node(apisim, n) for n in _names(bad_pods))
    assert sched.failures == 0


def test_a_jobset_that_makes_the_core_fail_is_set_aside_alone(
    apisim: ApiSim, live_scheduler: Callable[..., Scheduler], monkeypatch: pytest.MonkeyPatch
) -> None:
    real_owner = grouping.Builder.owner

    def buggy_owner(self: grouping.Builder, owner: object, claims: list[grouping.Claim]) -> None:
        if getattr(getattr(owner, "meta", None), "name", None) == "poison":
            raise ZeroDivisionError("a bug reached through this JobSet")
        real_owner(self, owner, claims)  # type: ignore[arg-type]

    monkeypatch.setattr(grouping.Builder, "owner", buggy_owner)
    apisim.serve(JOBSETS)
    apisim.create(r.NODES, node("n0", gpus=8))
    poison, good = jobset("poison", jobs=1, pods_per_job=2, gpus=1), jobset("good", jobs=1, pods_per_job=2, gpus=1)
    for owner in (poison, good):
        apisim.create(JOBSETS, owner)
        for p in jobset_pods(owner):
            apisim.create(r.PODS, p)
    sched = live_scheduler()
    wait_until(lambda: all(bound_node(apisim, n) for n in _names(jobset_pods(good))), what="the good JobSet bound")
    wait_until(lambda: _rejected(sched, "JobSet", "CycleFailure") == 1, what="the culprit counted as a JobSet")
    [held] = sched.runner.quarantine.held
    assert (held.kind, held.key, held.resource) == ("JobSet", f"{NS}/poison", JOBSETS.key)
    wait_until(lambda: any(e["regarding"]["name"] == "poison" for e in events(apisim, "Rejected")),
               what="the JobSet told")
    # Its pods wait: without their owner they would otherwise be placed one by one.
    first = _names(jobset_pods(poison))[0]
    wait_until(lambda: "its JobSet ml/poison is set aside" in _message(apisim, first), what="its pods told")
    assert not any(bound_node(apisim, n) for n in _names(jobset_pods(poison)))
    assert sched.healthz().ok
