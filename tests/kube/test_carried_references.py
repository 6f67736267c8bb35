"""Objects that other objects refer to (a Volcano Queue, a Kueue AdmissionCheck, a training runtime, a Deployment
above its ReplicaSet), added or deleted: a cycle that carries on decides what a rebuild decides, or rebuilds. A
review of the carried deletions (21d1425) found each of these carried on beside what it changed: work admitted
that a missing runtime or an admission check holds back, a Deployment's pods charged to a queue no longer theirs.

In process, as tests/kube/test_carried_cycles.py."""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live_env import NS, cluster_queue, local_queue, node, pod
from test_carried_cycles import Cluster, _finish_cycle, _finish_pod, _nonzero, first_cycle, outcome, runner
from workload_env import DEPLOYMENTS, REPLICA_SETS, _pod_from, _template, admission_check, deployment, deployment_pods

from gpufleet.k8s import resources as r
from gpufleet.live.cycle import CycleRunner
from gpufleet.live.queuestatus import QueueCounts

JsonDict = dict[str, Any]
KINDS = {(res.group, res.kind): res for res in r.WORKLOAD_RESOURCES}
VOLCANO_QUEUES = KINDS[("scheduling.volcano.sh", "Queue")]
RUNTIMES = KINDS[("trainer.kubeflow.org", "ClusterTrainingRuntime")]
TRAIN_JOBS = KINDS[("trainer.kubeflow.org", "TrainJob")]


def decided_as_rebuilt(run: CycleRunner, c: Cluster, now: float) -> bool:
    """The next cycle decides what a rebuild on the same snapshot decides, and is kept as run() keeps it (so that
    cycles carried on chain); whether it carried on."""
    snapshot = c.cache.snapshot()
    carried = run._carry_on(snapshot, now)
    fresh = runner(c, run.settings)
    fresh.assumed = run.assumed.copy()
    fresh.requeues = copy.deepcopy(run.requeues)
    rebuilt = fresh._decide_isolating(snapshot, now)
    if carried is not None:
        assert outcome(carried)[0] == outcome(rebuilt)[0]
        # What each workload deciding is, for those the rebuild admits or keeps waiting (the carried world drops
        # the workloads that finished, which a rebuild builds again from their pods and passes over).
        deciding = outcome(rebuilt)[0] | set(outcome(rebuilt)[1])
        assert {w.key: (w.kind, w.queue) for w in carried.world.workloads if w.key in deciding} == {
            w.key: (w.kind, w.queue) for w in rebuilt.world.workloads if w.key in deciding}
        assert carried.counts is not None
        assert _nonzero(carried.counts) == _nonzero(QueueCounts(rebuilt.plan.policy))
        carried.world.cluster.check_invariants()
    _finish_cycle(run, snapshot, carried, now)
    return carried is not None


def _land_assumed(run: CycleRunner, c: Cluster) -> None:
    """The Bindings the runner assumed land, and their pods run."""
    for key in sorted(run.assumed.keys()):
        obj = c.cache.get(r.PODS, key)
        intent = run.assumed.get(key, (obj or {}).get("metadata", {}).get("uid"), time.time())
        if obj is None or intent is None or (obj.get("spec") or {}).get("nodeName"):
            continue
        obj = json.loads(json.dumps(obj))
        obj["spec"]["nodeName"] = intent.node
        obj["status"] = {"phase": "Running"}
        c.put(r.PODS, obj, "MODIFIED")


def volcano_queue(name: str) -> JsonDict:
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name},
            "spec": {"weight": 1, "capability": {"cpu": "100", "memory": "100Gi", "nvidia.com/gpu": "8"}}}


def _full_node_and_a_waiting_pod(c: Cluster, **labels: Any) -> None:
    """One 4-GPU node held by ``run``, ``wait`` asking for all of it: ``run`` finishing lets ``wait`` in."""
    c.put(r.NODES, node("n0", gpus=4))
    c.put(r.PODS, pod("run", gpus=4, node_name="n0", **labels))
    c.put(r.PODS, pod("wait", gpus=4, **labels))


def _checked_queue(c: Cluster) -> None:
    cq = cluster_queue("cq", 10_000, cpu="100000")
    cq["spec"]["admissionChecks"] = ["ac"]
    c.put(r.CLUSTER_QUEUES, cq, "MODIFIED")


@pytest.mark.parametrize("change", ["deleted", "added"])
def test_an_admission_check_added_or_deleted(change: str) -> None:
    c = Cluster()
    _checked_queue(c)
    if change == "deleted":
        c.put(r.KUEUE_ADMISSION_CHECKS, admission_check("ac", "gpufleet.io/placement"))
    _full_node_and_a_waiting_pod(c, queue="lq")
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    if change == "deleted":
        c.put(r.KUEUE_ADMISSION_CHECKS, json.loads(json.dumps(c.cache.get(r.KUEUE_ADMISSION_CHECKS, "ac"))),
              "DELETED")
    else:
        c.put(r.KUEUE_ADMISSION_CHECKS, admission_check("ac", "gpufleet.io/placement"))
    _finish_pod(c, "run")
    assert not decided_as_rebuilt(run, c, now + 1)


def test_a_volcano_queue_deleted() -> None:
    c = Cluster()
    c.put(VOLCANO_QUEUES, volcano_queue("q1"))
    _full_node_and_a_waiting_pod(c, annotations={"scheduling.volcano.sh/queue-name": "q1"})
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    c.put(VOLCANO_QUEUES, json.loads(json.dumps(c.cache.get(VOLCANO_QUEUES, "q1"))), "DELETED")
    _finish_pod(c, "run")
    assert not decided_as_rebuilt(run, c, now + 1)


def test_a_training_runtime_deleted_under_a_train_job() -> None:
    template = _template(1)
    c = Cluster()
    c.put(RUNTIMES, {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
                     "metadata": {"name": "torch"},
                     "spec": {"mlPolicy": {"numNodes": 1}, "template": {"spec": {"replicatedJobs": [
                         {"name": "node", "template": {"spec": {"template": template}}}]}}}})
    c.put(TRAIN_JOBS, {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                       "metadata": {"name": "llm", "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": "lq"},
                                    "creationTimestamp": "2026-01-01T00:00:00Z"},
                       "spec": {"runtimeRef": {"name": "torch"}, "trainer": {"numNodes": 2}}})
    c.put(r.NODES, node("n0", gpus=2))
    c.put(r.PODS, pod("run", gpus=2, queue="lq", node_name="n0"))
    for i in range(2):
        c.put(r.PODS, _pod_from(template, f"llm-node-0-{i}-abcde", NS, {
            "jobset.sigs.k8s.io/jobset-name": "llm", "jobset.sigs.k8s.io/replicatedjob-name": "node",
            "jobset.sigs.k8s.io/job-index": "0", "batch.kubernetes.io/job-name": "llm-node-0",
            "batch.kubernetes.io/job-completion-index": str(i)}))
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    c.put(RUNTIMES, json.loads(json.dumps(c.cache.get(RUNTIMES, "torch"))), "DELETED")
    _finish_pod(c, "run")
    assert not decided_as_rebuilt(run, c, now + 1)


def _deployment_with_its_replica_set(c: Cluster) -> None:
    """A Deployment in queue ``lq`` (4 GPUs of quota) whose ReplicaSet made two 4-GPU pods: one fits the quota."""
    c.put(r.CLUSTER_QUEUES, cluster_queue("cq", 4, cpu="100000"), "MODIFIED")
    c.put(r.NODES, node("n0", gpus=8))
    web_and_its_replica_set(c, gpus=4)


def web_and_its_replica_set(c: Cluster, gpus: int) -> None:
    """The Deployment ``web`` (in LocalQueue ``lq``, two replicas of ``gpus`` GPUs), its ReplicaSet
    ``web-5d8f7c9b6`` (UID ``rs-web``) and the ReplicaSet's two pods."""
    dep = deployment("web", replicas=2, gpus=gpus)
    dep["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "lq"}
    c.put(DEPLOYMENTS, dep)
    rs = json.loads(json.dumps(dep))
    rs["kind"] = "ReplicaSet"
    rs["metadata"].update(name="web-5d8f7c9b6", uid="rs-web", labels={"app": "web", "pod-template-hash": "5d8f7c9b6"},
                          ownerReferences=[{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                            "uid": c.cache.get(DEPLOYMENTS, f"{NS}/web")["metadata"]["uid"],
                                            "controller": True}])
    rs["spec"] = {"replicas": 2, "selector": {"matchLabels": {"app": "web", "pod-template-hash": "5d8f7c9b6"}},
                  "template": json.loads(json.dumps(dep["spec"]["template"]))}
    rs["spec"]["template"]["metadata"]["labels"]["pod-template-hash"] = "5d8f7c9b6"
    c.put(REPLICA_SETS, rs)
    for p in deployment_pods(dep):
        p["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d8f7c9b6",
                                             "uid": "rs-web", "controller": True}]
        c.put(r.PODS, p)


def test_a_deployment_deleted_while_its_replica_set_remains() -> None:
    """Background deletion (the ReplicaSet and its pods go after the Deployment), or --cascade=orphan."""
    c = Cluster()
    _deployment_with_its_replica_set(c)
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    c.put(DEPLOYMENTS, json.loads(json.dumps(c.cache.get(DEPLOYMENTS, f"{NS}/web"))), "DELETED")
    assert not decided_as_rebuilt(run, c, now + 1)


def test_a_deployment_and_its_replica_set_scaled_are_carried_as_a_rebuild_reads_them() -> None:
    """An autoscaler's step: the Deployment's spec.replicas, then its ReplicaSet's (with the desired-replicas
    annotation the Deployment's controller writes), then the new pod. Each pod of theirs is a workload of its own,
    so a scale changes none of them; before, each step took a full cycle."""
    from test_carried_cycles import _carried_as_rebuilt

    c = Cluster()
    _deployment_with_its_replica_set(c)
    c.put(r.CLUSTER_QUEUES, cluster_queue("cq", 12, cpu="100000"), "MODIFIED")
    c.put(r.NODES, node("n1", gpus=4))
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    dep = json.loads(json.dumps(c.cache.get(DEPLOYMENTS, f"{NS}/web")))
    dep["spec"]["replicas"] = 3
    c.put(DEPLOYMENTS, dep, "MODIFIED")
    rs = json.loads(json.dumps(c.cache.get(REPLICA_SETS, f"{NS}/web-5d8f7c9b6")))
    rs["spec"]["replicas"] = 3
    rs["metadata"]["annotations"] = {"deployment.kubernetes.io/desired-replicas": "3"}
    c.put(REPLICA_SETS, rs, "MODIFIED")
    _carried_as_rebuilt(run, c, now + 1)
    [third] = [p for p in deployment_pods(deployment("web", replicas=3, gpus=4))[2:]]
    third["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d8f7c9b6",
                                             "uid": "rs-web", "controller": True}]
    c.put(r.PODS, third)
    d = _carried_as_rebuilt(run, c, now + 2)
    assert outcome(d)[0] == {f"{NS}/{third['metadata']['name']}"}  # the third pod, on the node left
    # Scaled down below its live pods: they are kept, counted, until they go.
    rs = json.loads(json.dumps(c.cache.get(REPLICA_SETS, f"{NS}/web-5d8f7c9b6")))
    rs["spec"]["replicas"] = 1
    c.put(REPLICA_SETS, rs, "MODIFIED")
    _carried_as_rebuilt(run, c, now + 3)
    # Anything else changed with the count (the queue label here) still takes a full cycle.
    dep = json.loads(json.dumps(c.cache.get(DEPLOYMENTS, f"{NS}/web")))
    dep["spec"]["replicas"] = 1
    dep["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "other"}
    c.put(DEPLOYMENTS, dep, "MODIFIED")
    assert run._carry_on(c.cache.snapshot(), now + 4) is None


def test_a_gang_kind_scaled_takes_a_full_cycle() -> None:
    """A StatefulSet's pods are one gang of its replicas: a scale changes what the gang is."""
    from workload_env import STATEFUL_SETS, stateful_set, stateful_set_pod

    c = Cluster()
    c.put(r.NODES, node("n0", gpus=8))
    owner = stateful_set("db", replicas=2, gpus=1, queue="lq")
    c.put(STATEFUL_SETS, owner)
    for i in range(2):
        c.put(r.PODS, stateful_set_pod(owner, i))
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    scaled = json.loads(json.dumps(c.cache.get(STATEFUL_SETS, f"{NS}/db")))
    scaled["spec"]["replicas"] = 3
    c.put(STATEFUL_SETS, scaled, "MODIFIED")
    assert run._carry_on(c.cache.snapshot(), now + 1) is None


@pytest.mark.parametrize("change", ["created", "deleted"])
def test_a_namespace_created_or_deleted_beside_volcano_queues_is_decided_as_rebuilt(change: str) -> None:
    """Volcano's (and KAI's) queues are read as a LocalQueue in every namespace: a namespace created or deleted
    changes the queues themselves, which a cycle that carries on does not rebuild (a review found a pod in a new
    namespace left waiting for "LocalQueue volcano:q1", and one in a deleted namespace admitted)."""
    c = Cluster()
    c.put(VOLCANO_QUEUES, volcano_queue("q1"))
    c.put(r.NODES, node("n0", gpus=4))
    note = {"scheduling.volcano.sh/queue-name": "q1"}
    if change == "deleted":
        c.put(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"}})
        c.put(r.PODS, pod("run", gpus=4, node_name="n0", ns="team-b", annotations=note))
        c.put(r.PODS, pod("wait", gpus=4, ns="team-b", annotations=note))
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    if change == "created":
        c.put(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"}})
        c.put(r.PODS, pod("vp", gpus=4, ns="team-b", annotations=note))
    else:
        c.put(r.NAMESPACES, json.loads(json.dumps(c.cache.get(r.NAMESPACES, "team-b"))), "DELETED")
        _finish_pod(c, "run", ns="team-b")
    assert not decided_as_rebuilt(run, c, now + 1)


def test_a_namespace_relabelled_beside_volcano_queues_is_carried() -> None:
    c = Cluster()
    c.put(VOLCANO_QUEUES, volcano_queue("q1"))
    _full_node_and_a_waiting_pod(c, annotations={"scheduling.volcano.sh/queue-name": "q1"})
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    ns = json.loads(json.dumps(c.cache.get(r.NAMESPACES, NS)))
    ns["metadata"]["labels"] = {"team": "a"}
    c.put(r.NAMESPACES, ns, "MODIFIED")
    _finish_pod(c, "run")
    assert decided_as_rebuilt(run, c, now + 1)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions=st.lists(st.one_of(
    st.tuples(st.just("relabel"), st.sampled_from([None, "a", "b"])),
    st.tuples(st.just("pod"), st.sampled_from(["a", "b", "c"])),  # lq-c: created by the "lq" action
    st.tuples(st.just("finish"), st.integers(0, 7)),
    st.tuples(st.just("lq"), st.sampled_from(["create", "delete", "repoint"])),
    st.tuples(st.just("other"), st.sampled_from(["create", "delete"]))), min_size=1, max_size=8))
def test_namespaces_relabelled_among_pods_arriving_and_ending_are_decided_as_rebuilt(
        actions: list[tuple[str, Any]]) -> None:
    """Two ClusterQueues selecting a team label, a LocalQueue of each in the one namespace whose label moves; pods
    arriving in either queue, or in a third LocalQueue created, pointed at the other ClusterQueue and deleted
    meanwhile, bound ones finishing, another namespace coming and going. Each cycle decides what a rebuild decides,
    carried on or not."""
    c = Cluster()
    c.put(r.NODES, node("n0", gpus=4))
    for team in ("a", "b"):
        cq = cluster_queue(f"cq-{team}", 3)
        cq["spec"]["namespaceSelector"] = {"matchLabels": {"team": team}}
        c.put(r.CLUSTER_QUEUES, cq)
        c.put(r.LOCAL_QUEUES, local_queue(f"lq-{team}", f"cq-{team}"))
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    made: list[str] = []
    for step_no, (kind, arg) in enumerate(actions, 1):
        if kind == "relabel":
            ns = json.loads(json.dumps(c.cache.get(r.NAMESPACES, NS)))
            ns["metadata"]["labels"] = {} if arg is None else {"team": arg}
            c.put(r.NAMESPACES, ns, "MODIFIED")
        elif kind == "pod":
            name = f"p{step_no}"
            c.put(r.PODS, pod(name, gpus=1, queue=f"lq-{arg}"))
            made.append(name)
        elif kind == "lq":
            had = c.cache.get(r.LOCAL_QUEUES, f"{NS}/lq-c")
            if arg == "create" and had is None:
                c.put(r.LOCAL_QUEUES, local_queue("lq-c", "cq-a"))
            elif arg == "delete" and had is not None:
                c.put(r.LOCAL_QUEUES, json.loads(json.dumps(had)), "DELETED")
            elif arg == "repoint" and had is not None:
                moved = json.loads(json.dumps(had))
                moved["spec"]["clusterQueue"] = "cq-b" if had["spec"]["clusterQueue"] == "cq-a" else "cq-a"
                c.put(r.LOCAL_QUEUES, moved, "MODIFIED")
        elif kind == "finish":
            bound = [n for n in made if (c.cache.get(r.PODS, f"{NS}/{n}") or {}).get("spec", {}).get("nodeName")
                     and (c.cache.get(r.PODS, f"{NS}/{n}") or {}).get("status", {}).get("phase") == "Running"]
            if bound:
                _finish_pod(c, bound[arg % len(bound)])
        elif arg == "create" and c.cache.get(r.NAMESPACES, "x") is None:
            c.put(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x",
                                                                                     "labels": {"team": "a"}}})
        elif arg == "delete" and c.cache.get(r.NAMESPACES, "x") is not None:
            c.put(r.NAMESPACES, json.loads(json.dumps(c.cache.get(r.NAMESPACES, "x"))), "DELETED")
        at = now + step_no
        decided_as_rebuilt(run, c, at)
        _land_assumed(run, c)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions=st.lists(st.one_of(
    st.tuples(st.just("job"), st.integers(1, 2)),  # a Job of ours and its pods
    st.tuples(st.just("finish"), st.integers(0, 9)),  # a running pod of ours succeeds
    st.tuples(st.just("mark"), st.integers(0, 9)),  # a Job marked for deletion (foreground)
    st.tuples(st.just("drop-pods"), st.integers(0, 9)),  # a Job's pods deleted
    st.tuples(st.just("drop-job"), st.integers(0, 9)),  # a Job deleted (its pods may remain)
    st.tuples(st.just("theirs"), st.sampled_from(["add", "scale", "delete"]))), min_size=1, max_size=10))
def test_jobs_deleted_and_another_schedulers_churn_are_decided_as_rebuilt(actions: list[tuple[str, Any]]) -> None:
    """Jobs of ours arriving, finishing, marked for deletion, their pods and themselves deleted in any order; another
    scheduler's Job added, scaled and deleted meanwhile. Each cycle decides what a rebuild decides, carried on or
    not."""
    from test_carried_cycles import JOBS
    from workload_env import job as job_object
    from workload_env import job_pods

    c = Cluster()
    c.put(r.NODES, node("n0", gpus=4))
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    jobs: list[str] = []

    def current(name: str) -> JsonDict | None:
        found = c.cache.get(JOBS, f"{NS}/{name}")
        return None if found is None else json.loads(json.dumps(found))

    for step_no, (kind, arg) in enumerate(actions, 1):
        if kind == "job":
            name = f"j{step_no}"
            owner = job_object(name, pods=arg, gpus=1, queue="lq")
            c.put(JOBS, owner)
            for p in job_pods(owner):
                c.put(r.PODS, p)
            jobs.append(name)
        elif kind == "theirs":
            theirs = job_object("web", pods=1)
            theirs["spec"]["template"]["spec"]["schedulerName"] = "default-scheduler"
            had = current("web")
            if arg == "add" and had is None:
                c.put(JOBS, theirs)
            elif arg == "scale" and had is not None:
                had["spec"]["parallelism"] += 1
                c.put(JOBS, had, "MODIFIED")
            elif arg == "delete" and had is not None:
                c.put(JOBS, had, "DELETED")
        elif jobs:
            name = jobs[arg % len(jobs)]
            pods = [c.cache.get(r.PODS, k) for k in sorted(c.cache.keys(r.PODS))]
            mine = [json.loads(json.dumps(p)) for p in pods if p is not None
                    and p["metadata"]["labels"].get("batch.kubernetes.io/job-name") == name]
            owner_now = current(name)
            if kind == "finish":
                for p in mine:
                    if p.get("spec", {}).get("nodeName") and p.get("status", {}).get("phase") == "Running":
                        p["status"] = {"phase": "Succeeded"}
                        c.put(r.PODS, p, "MODIFIED")
                        break
            elif kind == "mark" and owner_now is not None:
                owner_now["metadata"]["deletionTimestamp"] = "2026-01-02T00:00:00Z"
                owner_now["metadata"]["finalizers"] = ["foregroundDeletion"]
                c.put(JOBS, owner_now, "MODIFIED")
            elif kind == "drop-pods":
                for p in mine:
                    c.put(r.PODS, p, "DELETED")
            elif kind == "drop-job" and owner_now is not None:
                c.put(JOBS, owner_now, "DELETED")
        at = now + step_no
        decided_as_rebuilt(run, c, at)
        _land_assumed(run, c)


def test_a_local_queue_created_routes_the_workloads_naming_it_as_a_rebuild_does() -> None:
    """A team's LocalQueue created after its pods (or a ``default`` one, for the pods that name none): they were
    waiting for it, and go to its ClusterQueue in the cycle that carries on, as a rebuild routes them."""
    from test_carried_cycles import _carried_as_rebuilt

    c = Cluster()
    c.put(r.NODES, node("n0", gpus=4))
    c.put(r.PODS, pod("run", gpus=4, node_name="n0", queue="lq"))
    c.put(r.PODS, pod("early", gpus=1, queue="lq-new"))
    run = runner(c)
    now = time.time()
    d = first_cycle(run, now)
    assert outcome(d)[1][f"{NS}/early"] == "LocalQueue lq-new doesn't exist"
    c.put(r.LOCAL_QUEUES, local_queue("lq-new", "cq"))
    d = _carried_as_rebuilt(run, c, now + 1)
    assert "LocalQueue" not in outcome(d)[1][f"{NS}/early"]  # in its queue now, waiting for the node
    _finish_pod(c, "run")
    d = _carried_as_rebuilt(run, c, now + 2)
    assert f"{NS}/early" in outcome(d)[0]
    # A pod naming no queue, waiting without quota; then the namespace's ``default`` LocalQueue created.
    c.put(r.PODS, pod("plain", gpus=8))
    _carried_as_rebuilt(run, c, now + 3)
    c.put(r.LOCAL_QUEUES, local_queue("default", "cq"))
    _carried_as_rebuilt(run, c, now + 4)


def test_a_local_queue_created_or_deleted_under_an_admitted_workload_takes_a_full_cycle() -> None:
    """A workload admitted without quota (it names no queue) that a ``default`` LocalQueue would take: a rebuild
    charges it to that queue, which the kept policy cannot do in place. And a LocalQueue deleted under a workload
    admitted through it (a rebuild no longer charges it to the ClusterQueue); with none, a deletion is carried."""
    c = Cluster()
    c.put(r.NODES, node("n0", gpus=4))
    c.put(r.PODS, pod("free", gpus=1, node_name="n0"))
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    c.put(r.LOCAL_QUEUES, local_queue("default", "cq"))
    assert not decided_as_rebuilt(run, c, now + 1)
    c2 = Cluster()
    c2.put(r.NODES, node("n0", gpus=4))
    c2.put(r.PODS, pod("run", gpus=1, node_name="n0", queue="lq"))
    run2 = runner(c2)
    first_cycle(run2, now)
    c2.put(r.LOCAL_QUEUES, json.loads(json.dumps(c2.cache.get(r.LOCAL_QUEUES, f"{NS}/lq"))), "DELETED")
    assert run2._carry_on(c2.cache.snapshot(), now + 1) is None
    c3 = Cluster()
    run3 = runner(c3)
    first_cycle(run3, now)
    c3.put(r.LOCAL_QUEUES, json.loads(json.dumps(c3.cache.get(r.LOCAL_QUEUES, f"{NS}/lq"))), "DELETED")
    assert decided_as_rebuilt(run3, c3, now + 1)


def test_a_local_queue_deleted_or_pointed_elsewhere_routes_what_waits_as_a_rebuild_does() -> None:
    """A team offboarded: what waits in its LocalQueue waits for a queue that no longer exists, as in Kueue; the
    queue pointed at another ClusterQueue: what waits goes there; the namespace's ``default`` one deleted: what names
    no queue runs without quota, as a rebuild reads it."""
    from test_carried_cycles import _carried_as_rebuilt

    c = Cluster()
    c.put(r.CLUSTER_QUEUES, cluster_queue("cq", 0, cpu="100000"), "MODIFIED")
    c.put(r.CLUSTER_QUEUES, cluster_queue("cq2", 4, cpu="100000"))
    c.put(r.LOCAL_QUEUES, local_queue("default", "cq"))
    c.put(r.NODES, node("n0", gpus=4))
    c.put(r.PODS, pod("wait", gpus=1, queue="lq"))
    c.put(r.PODS, pod("plain", gpus=1))
    run = runner(c)
    now = time.time()
    d = first_cycle(run, now)
    assert not outcome(d)[0]  # no quota in cq
    moved = json.loads(json.dumps(c.cache.get(r.LOCAL_QUEUES, f"{NS}/lq")))
    moved["spec"]["clusterQueue"] = "cq2"
    c.put(r.LOCAL_QUEUES, moved, "MODIFIED")
    d = _carried_as_rebuilt(run, c, now + 1)
    assert outcome(d)[0] == {f"{NS}/wait"}
    c.put(r.LOCAL_QUEUES, json.loads(json.dumps(c.cache.get(r.LOCAL_QUEUES, f"{NS}/default"))), "DELETED")
    d = _carried_as_rebuilt(run, c, now + 2)
    assert outcome(d)[0] == {f"{NS}/plain"}  # no queue at all now: only the node gates it
    # A pod waiting in a LocalQueue of a ClusterQueue without quota, then the LocalQueue deleted.
    c.put(r.LOCAL_QUEUES, local_queue("lq-x", "cq"))
    c.put(r.PODS, pod("late", gpus=1, queue="lq-x"))
    d = _carried_as_rebuilt(run, c, now + 3)
    assert "LocalQueue" not in outcome(d)[1][f"{NS}/late"]
    c.put(r.LOCAL_QUEUES, json.loads(json.dumps(c.cache.get(r.LOCAL_QUEUES, f"{NS}/lq-x"))), "DELETED")
    d = _carried_as_rebuilt(run, c, now + 4)
    assert outcome(d)[1][f"{NS}/late"] == "LocalQueue lq-x doesn't exist"
    # Deleted under the workload admitted through it: a rebuild no longer charges that one to cq2.
    c.put(r.LOCAL_QUEUES, moved, "DELETED")
    assert run._carry_on(c.cache.snapshot(), now + 5) is None


def test_a_deployment_scaled_past_what_a_workload_may_hold_takes_a_full_cycle() -> None:
    """Scaled beyond the parse's bound (10,000 pods: a typo, an autoscaler's large maxReplicas), the Deployment is
    left out, which a rebuild says in an event and groups its pods without; a review found it carried on instead,
    its pods still charged to its queue."""
    c = Cluster()
    _deployment_with_its_replica_set(c)
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    dep = json.loads(json.dumps(c.cache.get(DEPLOYMENTS, f"{NS}/web")))
    dep["spec"]["replicas"] = 10_001
    c.put(DEPLOYMENTS, dep, "MODIFIED")
    assert not decided_as_rebuilt(run, c, now + 1)


def test_a_local_queue_created_without_a_cluster_queue_takes_a_full_cycle() -> None:
    """A full cycle sets it aside and says why (a Warning event, the rejected-objects metric); a review found it
    carried on, said nowhere until the resync."""
    c = Cluster()
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    broken = local_queue("lq-broken", "cq")
    del broken["spec"]["clusterQueue"]
    c.put(r.LOCAL_QUEUES, broken)
    assert run._carry_on(c.cache.snapshot(), now + 1) is None
