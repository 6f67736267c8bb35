"""Workload-kind objects of ours changed in place (a Deployment's rollout, an annotation on a Job), carried on when
the workloads of their pods read the same after the change: each cycle decides what a rebuild decides, and the
kept workloads read what a rebuild's read (gpufleet.live.owner_changes).

In process, as tests/kube/test_carried_cycles.py."""

from __future__ import annotations

import copy
import json
import time
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live_env import NS, cluster_queue, local_queue, node
from test_carried_cycles import JOBS, Cluster, _finish_cycle, _nonzero, first_cycle, outcome, runner
from test_carried_references import _deployment_with_its_replica_set, _land_assumed
from workload_env import DEPLOYMENTS, REPLICA_SETS, deployment_pods, job, job_pods

from gpufleet.k8s import resources as r
from gpufleet.live.cycle import CycleRunner, _Decided
from gpufleet.live.queuestatus import QueueCounts

JsonDict = dict[str, Any]
RS = f"{NS}/web-5d8f7c9b6"


def _reading(d: _Decided, keys: set[str]) -> dict[str, Any]:
    """What the world and the policy hold of each workload in ``keys``."""
    out: dict[str, Any] = {}
    for w in d.world.workloads:
        if w.key in keys:
            info = d.plan.policy.info(w.key)
            out[w.key] = (w.kind, w.queue, w.priority, w.labels, w.annotations, w.pod_sets,
                          None if info is None else (info.workload.annotations, info.workload.labels))
    return out


def read_as_rebuilt(run: CycleRunner, c: Cluster, now: float) -> bool:
    """The next cycle decides what a rebuild on the same snapshot decides and its workloads read the same; kept
    as run() keeps it, so that carried cycles chain; whether it carried on."""
    snapshot = c.cache.snapshot()
    carried = run._carry_on(snapshot, now)
    fresh = runner(c, run.settings)
    fresh.assumed = run.assumed.copy()
    fresh.requeues = copy.deepcopy(run.requeues)
    fresh.seen_ready = set(run.seen_ready)
    rebuilt = fresh._decide_isolating(snapshot, now)
    if carried is not None:
        assert outcome(carried)[0] == outcome(rebuilt)[0]
        assert set(outcome(carried)[1]) == set(outcome(rebuilt)[1])
        deciding = outcome(rebuilt)[0] | set(outcome(rebuilt)[1]) | {
            k for k, info in rebuilt.plan.policy.state.infos.items() if info.admission is not None}
        assert _reading(carried, deciding) == _reading(rebuilt, deciding)
        assert carried.counts is not None
        assert _nonzero(carried.counts) == _nonzero(QueueCounts(rebuilt.plan.policy))
        carried.world.cluster.check_invariants()
    _finish_cycle(run, snapshot, carried, now)
    return carried is not None


def _get(c: Cluster, res: r.ResourceType, key: str) -> JsonDict:
    found = c.cache.get(res, key)
    assert found is not None
    return json.loads(json.dumps(found))


def _second_queue(c: Cluster, gpus: int = 8) -> None:
    """ClusterQueue ``cq2`` (``gpus`` GPUs of quota) and its LocalQueue ``lq2``, beside the cluster's ``lq``."""
    c.put(r.CLUSTER_QUEUES, cluster_queue("cq2", gpus, cpu="100000"))
    c.put(r.LOCAL_QUEUES, local_queue("lq2", "cq2"))


def _with_pods(c: Cluster, owner: JsonDict) -> None:
    """A Job and the pods its controller makes."""
    c.put(JOBS, owner)
    for p in job_pods(owner):
        c.put(r.PODS, p)


def _restart(c: Cluster, stamp: str) -> None:
    """``kubectl rollout restart``: an annotation in the pod template, the generation bumped."""
    dep = _get(c, DEPLOYMENTS, f"{NS}/web")
    dep["spec"]["template"]["metadata"].setdefault("annotations", {})["kubectl.kubernetes.io/restartedAt"] = stamp
    dep["metadata"]["generation"] = dep["metadata"].get("generation", 1) + 1
    c.put(DEPLOYMENTS, dep, "MODIFIED")


def _revision(c: Cluster, res: r.ResourceType, key: str, revision: int) -> None:
    """The Deployment's controller records the revision on the Deployment and its ReplicaSet."""
    obj = _get(c, res, key)
    obj["metadata"].setdefault("annotations", {})["deployment.kubernetes.io/revision"] = str(revision)
    c.put(res, obj, "MODIFIED")


def test_a_deployments_rollout_is_carried_as_a_rebuild_reads_it() -> None:
    """The template's restart annotation, the revision on the Deployment and on its ReplicaSet, the new ReplicaSet
    and its pod: each was a full cycle (seconds at 5,000 nodes); each pod's workload asks what it asked, and reads
    the Deployment's annotations as a rebuild reads them."""
    c = Cluster()
    _deployment_with_its_replica_set(c)
    run = runner(c)
    now = time.time()
    first = first_cycle(run, now)
    assert len(outcome(first)[0]) == 1  # one of the two 4-GPU pods fits the queue's 4 GPUs
    _restart(c, "2026-12-07T10:00:00Z")
    assert read_as_rebuilt(run, c, now + 1)
    _revision(c, DEPLOYMENTS, f"{NS}/web", 2)
    _revision(c, REPLICA_SETS, RS, 1)
    assert read_as_rebuilt(run, c, now + 2)
    kept = run.kept
    assert kept is not None
    annotations = {w.key: w.annotations for w in kept.world.workloads if w.kind == "Deployment"}
    assert annotations and all(a == {"kubectl.kubernetes.io/restartedAt": "2026-12-07T10:00:00Z",
                                     "deployment.kubernetes.io/revision": "2"} for a in annotations.values())
    # The new ReplicaSet and its first pod.
    rs = _get(c, REPLICA_SETS, RS)
    rs["metadata"].update(name="web-7f6b9d8c5", uid="rs-web-2", resourceVersion=None)
    rs["metadata"]["labels"]["pod-template-hash"] = "7f6b9d8c5"
    rs["spec"]["replicas"] = 1
    c.put(REPLICA_SETS, rs)
    [new_pod] = deployment_pods(_get(c, DEPLOYMENTS, f"{NS}/web"), template_hash="7f6b9d8c5")[:1]
    new_pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                               "name": "web-7f6b9d8c5", "uid": "rs-web-2", "controller": True}]
    c.put(r.PODS, new_pod)
    assert read_as_rebuilt(run, c, now + 3)


def test_what_decides_still_takes_a_full_cycle() -> None:
    """A Deployment moved to another queue: its pods' workloads are charged elsewhere."""
    c = Cluster()
    _deployment_with_its_replica_set(c)
    _second_queue(c)
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    dep = _get(c, DEPLOYMENTS, f"{NS}/web")
    dep["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "lq2"}
    c.put(DEPLOYMENTS, dep, "MODIFIED")
    assert not read_as_rebuilt(run, c, now + 1)


def test_a_jobs_annotation_is_carried_and_its_template_changed_is_not() -> None:
    """An annotation on a Job (a team's note, a tool's bookkeeping) is carried, read into its workload; its
    template's requests changed while its pods wait (an edit of a suspended Job) change what it asks."""
    c = Cluster()
    c.put(r.NODES, node("n0", gpus=4))
    owner = job("train", pods=2, gpus=3, queue="lq")  # 6 GPUs on a 4-GPU node: it waits
    _with_pods(c, owner)
    run = runner(c)
    now = time.time()
    first = first_cycle(run, now)
    assert f"{NS}/train" in outcome(first)[1]
    noted = _get(c, JOBS, f"{NS}/train")
    noted["metadata"]["annotations"] = {"team.example.com/ticket": "ML-42"}
    c.put(JOBS, noted, "MODIFIED")
    assert read_as_rebuilt(run, c, now + 1)
    smaller = _get(c, JOBS, f"{NS}/train")
    for where in ("requests", "limits"):
        smaller["spec"]["template"]["spec"]["containers"][0]["resources"][where]["nvidia.com/gpu"] = "2"
    c.put(JOBS, smaller, "MODIFIED")
    assert not read_as_rebuilt(run, c, now + 2)


def test_a_cron_jobs_change_takes_a_full_cycle() -> None:
    """A CronJob's spec names the Jobs it finds its pods through."""
    cron = {"apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": "nightly", "namespace": NS, "uid": "cron-nightly", "creationTimestamp":
                         "2026-01-01T00:00:00Z", "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
            "spec": {"schedule": "0 2 * * *", "jobTemplate": {"spec": job("x", pods=1)["spec"]}}}
    c = Cluster()
    c.put(r.NODES, node("n0", gpus=4))
    res = next(x for x in r.WORKLOAD_RESOURCES if (x.group, x.kind) == ("batch", "CronJob"))
    c.put(res, cron)
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    changed = _get(c, res, f"{NS}/nightly")
    changed["spec"]["schedule"] = "0 3 * * *"
    c.put(res, changed, "MODIFIED")
    assert run._carry_on(c.cache.snapshot(), now + 1) is None


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions=st.lists(st.sampled_from([
    "restart",  # kubectl rollout restart
    "revision",  # the Deployment's controller's bookkeeping
    "rs-revision",
    "relabel",  # the Deployment moved between two queues
    "note",  # an annotation on the Job
    "job-priority",  # the Job's WorkloadPriorityClass label changed
    "finish",  # a running pod of ours succeeds
    "job-pods",  # the Job's pods deleted
]), min_size=1, max_size=10))
def test_rollouts_and_annotations_among_pods_ending_are_read_as_rebuilt(actions: list[str]) -> None:
    c = Cluster()
    _deployment_with_its_replica_set(c)
    c.put(r.CLUSTER_QUEUES, cluster_queue("cq", 12, cpu="100000"), "MODIFIED")
    _second_queue(c)
    c.put(r.KUEUE_WORKLOAD_PRIORITY_CLASSES, {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "WorkloadPriorityClass",
                                        "metadata": {"name": "high"}, "value": 1000})
    c.put(r.NODES, node("n1", gpus=4))
    owner = job("train", pods=2, gpus=2, queue="lq")
    _with_pods(c, owner)
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    _land_assumed(run, c)
    for step_no, action in enumerate(actions, 1):
        if action == "restart":
            _restart(c, f"2026-12-07T10:00:{step_no:02d}Z")
        elif action == "revision":
            _revision(c, DEPLOYMENTS, f"{NS}/web", step_no)
        elif action == "rs-revision":
            _revision(c, REPLICA_SETS, RS, step_no)
        elif action == "relabel":
            dep = _get(c, DEPLOYMENTS, f"{NS}/web")
            was = dep["metadata"]["labels"].get("kueue.x-k8s.io/queue-name")
            dep["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "lq2" if was == "lq" else "lq"
            c.put(DEPLOYMENTS, dep, "MODIFIED")
        elif (found := c.cache.get(JOBS, f"{NS}/train")) is not None and action in ("note", "job-priority"):
            obj = json.loads(json.dumps(found))
            if action == "note":
                obj["metadata"]["annotations"] = {"team.example.com/ticket": f"ML-{step_no}"}
            else:
                labels = obj["metadata"]["labels"]
                labels["kueue.x-k8s.io/priority-class"] = "" if labels.get("kueue.x-k8s.io/priority-class") else "high"
            c.put(JOBS, obj, "MODIFIED")
        elif action in ("finish", "job-pods"):
            for key in sorted(c.cache.keys(r.PODS)):
                obj = json.loads(json.dumps(c.cache.get(r.PODS, key)))
                is_job = obj["metadata"]["labels"].get("batch.kubernetes.io/job-name") == "train"
                if action == "job-pods" and is_job:
                    c.put(r.PODS, obj, "DELETED")
                elif action == "finish" and obj["spec"].get("nodeName") and (obj.get("status") or {}).get(
                        "phase") == "Running":
                    obj["status"] = {"phase": "Succeeded"}
                    c.put(r.PODS, obj, "MODIFIED")
                    break
        read_as_rebuilt(run, c, now + step_no)
        _land_assumed(run, c)


def test_an_object_made_again_under_its_name_takes_a_full_cycle() -> None:
    """A relist after the watch expired shows a Job deleted and made again (a new UID) as one change: its workloads
    come from the old one, so a review found the change carried, the kept workload left with the old queue."""
    c = Cluster()
    c.put(r.NODES, node("n0", gpus=4))
    _second_queue(c)
    owner = job("train", pods=2, gpus=3, queue="lq")
    _with_pods(c, owner)
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    again = _get(c, JOBS, f"{NS}/train")
    again["metadata"].update(uid="job-train-2", resourceVersion="999")
    again["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "lq2"
    c.cache.replace(JOBS, [again])
    assert not read_as_rebuilt(run, c, now + 1)


def test_a_leader_worker_sets_scale_over_a_pod_in_no_workload_takes_a_full_cycle() -> None:
    """A LeaderWorkerSet's group beyond its replicas (its pod seen before the scale) is in no workload; the scale
    makes it one, which only a rebuild's grouping finds (a review found it left out)."""
    from workload_env import WORKLOAD_TYPES, _meta, _pod_from, _template

    lws_res = WORKLOAD_TYPES["leaderworkersets.leaderworkerset.x-k8s.io"]

    def group_pod(owner: JsonDict, g: int) -> JsonDict:
        return _pod_from(owner["spec"]["leaderWorkerTemplate"]["workerTemplate"], f"srv-{g}", NS, {
            "leaderworkerset.sigs.k8s.io/name": "srv", "leaderworkerset.sigs.k8s.io/group-index": str(g),
            "leaderworkerset.sigs.k8s.io/worker-index": "0"})

    c = Cluster()
    c.put(r.NODES, node("n0", gpus=4))
    owner = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
             "metadata": _meta("srv", NS, "lq", "lws-srv"),
             "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 1, "workerTemplate": _template(1)}}}
    c.put(lws_res, owner)
    c.put(r.PODS, group_pod(owner, 0))
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    c.put(r.PODS, group_pod(owner, 1))
    read_as_rebuilt(run, c, now + 1)
    bigger = _get(c, lws_res, f"{NS}/srv")
    bigger["spec"]["replicas"] = 2
    c.put(lws_res, bigger, "MODIFIED")
    assert not read_as_rebuilt(run, c, now + 2)
    c.put(r.NODES, node("n0", gpus=4), "MODIFIED")  # (any change: the next cycle)
    assert f"{NS}/srv-1" in {w.key for w in run.kept.world.workloads} if run.kept is not None else True


def test_a_helm_upgrades_labels_are_carried_as_a_rebuild_reads_them() -> None:
    """The chart's labels on the Deployment and in its template (and the image): nothing that decides."""
    c = Cluster()
    _deployment_with_its_replica_set(c)
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    dep = _get(c, DEPLOYMENTS, f"{NS}/web")
    dep["metadata"]["labels"]["helm.sh/chart"] = "web-1.2.4"
    dep["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/version"] = "1.2.4"
    dep["spec"]["template"]["spec"]["containers"][0]["image"] = "busybox:1.2.4"
    c.put(DEPLOYMENTS, dep, "MODIFIED")
    assert read_as_rebuilt(run, c, now + 1)
    kept = run.kept
    assert kept is not None
    assert all(w.labels.get("helm.sh/chart") == "web-1.2.4" for w in kept.world.workloads if w.kind == "Deployment")
    # The workload class, which the GPU memory it is known to use is read by, still takes a full cycle.
    dep = _get(c, DEPLOYMENTS, f"{NS}/web")
    dep["metadata"]["labels"]["gpufleet.io/workload-class"] = "inference"
    c.put(DEPLOYMENTS, dep, "MODIFIED")
    assert not read_as_rebuilt(run, c, now + 2)


def test_quota_freed_by_a_deployment_moved_elsewhere_is_used_at_once() -> None:
    """A running Deployment's pods moved to another queue free quota in theirs: the full cycle that follows admits
    what waited for it (a review found the parked memory keeping it parked until something else ended)."""
    from workload_env import deployment

    c = Cluster()
    c.put(r.CLUSTER_QUEUES, cluster_queue("cq", 10, cpu="100000"), "MODIFIED")
    _second_queue(c, 6)
    for i in range(3):
        c.put(r.NODES, node(f"n{i}", gpus=4))
    train, big = job("train", pods=2, gpus=1, queue="lq"), job("big", pods=2, gpus=4, queue="lq")
    train["metadata"]["creationTimestamp"] = "2026-01-01T00:00:01Z"  # (the last in its queue)
    for owner in (train, big):
        _with_pods(c, owner)
    dep = deployment("web", replicas=2, gpus=1)
    dep["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "lq"}
    c.put(DEPLOYMENTS, dep)
    for p in deployment_pods(dep):
        c.put(r.PODS, p)
    run = runner(c)
    now = time.time()
    first = first_cycle(run, now)
    assert f"{NS}/train" in outcome(first)[1]  # 8 + 2 of cq's 10 GPUs held
    _land_assumed(run, c)
    moved = _get(c, DEPLOYMENTS, f"{NS}/web")
    moved["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "lq2"
    c.put(DEPLOYMENTS, moved, "MODIFIED")
    snapshot = c.cache.snapshot()
    assert run._carry_on(snapshot, now + 1) is None
    d = _finish_cycle(run, snapshot, None, now + 1)
    assert f"{NS}/train" in outcome(d)[0]
