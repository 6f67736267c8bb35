"""The live side of the workload kinds, without HTTP: which objects a cycle reads, how their parses are memoised,
what a bad one costs, how Volcano's queues and jobs are read together, and what wakes the loop."""

from __future__ import annotations

import copy
import json
import time
from typing import Any

from live_env import cluster_queue, flavor, local_queue, node, pod
from workload_env import DEPLOYMENTS, JOBS, JOBSETS, deployment, job, jobset, jobset_pods

from gpufleet.api.objects import SchedulerConfig
from gpufleet.k8s import resources as r
from gpufleet.k8s.informer import CacheSnapshot, ObjectCache
from gpufleet.k8s.parsing import ParseCache
from gpufleet.live import planner
from gpufleet.live.assumed import AssumedPods
from gpufleet.live.wakeup import Wakeup
from gpufleet.live.workloadsource import WORKLOAD_KEYS
from gpufleet.live.world import World, assemble, finish

JsonDict = dict[str, Any]
TYPES = {res.key: res for res in (*r.SCHEDULER_RESOURCES, *r.WORKLOAD_RESOURCES)}


def snapshot(objects: dict[str, list[JsonDict]], version: int = 1) -> CacheSnapshot:
    """Objects by resource key; each gets a resourceVersion unless it has one."""
    out: dict[str, dict[str, JsonDict]] = {}
    for i, (key, items) in enumerate(objects.items()):
        bucket = out.setdefault(key, {})
        for j, o in enumerate(items):
            o = json.loads(json.dumps(o))
            o["metadata"].setdefault("resourceVersion", f"{i}{j}")
            bucket[TYPES[key].object_key(o)] = o
    return CacheSnapshot(version, out)


def world_of(snap: CacheSnapshot, parse: ParseCache) -> World:
    return assemble(snap, scheduler_name="gpufleet", kueue=SchedulerConfig(), parse=parse, assumed=AssumedPods(),
                    now=time.time())


def bumped(obj: JsonDict, rv: str, **status: Any) -> JsonDict:
    out = copy.deepcopy(obj)
    out["metadata"]["resourceVersion"] = rv
    out["status"] = status
    return out


QUEUES = {"resourceflavors.gpufleet.io": [flavor()], "clusterqueues.gpufleet.io": [cluster_queue("team", gpus=8)],
          "localqueues.gpufleet.io": [local_queue("team", "team")]}


def test_workload_objects_of_ours_are_read_alone_once_per_version_with_the_queues() -> None:
    a, b = jobset("a", queue="team"), jobset("b", queue="team")
    theirs = deployment("web")  # its pods are another scheduler's: never parsed
    theirs["spec"]["template"]["spec"]["schedulerName"] = "default-scheduler"
    objects = {**QUEUES, JOBSETS.key: [a, b], DEPLOYMENTS.key: [theirs]}
    parse = ParseCache()
    first = world_of(snapshot(objects), parse)
    assert sorted(o.key for o in first.queues.controllers.owners) == ["ml/a", "ml/b"]
    assert parse.parses == 3 + 2  # the queue kinds, then each JobSet alone
    again = world_of(snapshot(objects), parse)
    assert again.queues is first.queues and parse.parses == 5  # nothing changed: nothing parsed

    # A's controller writes its status: A alone is read again (each queue object's parse is memoised by its
    # resourceVersion too), and the queues count as unchanged for the parked-workload memory.
    objects[JOBSETS.key] = [bumped(a, "77", replicatedJobsStatus=[{"name": "workers", "active": 2}]), b]
    after_status = world_of(snapshot(objects), parse)
    assert parse.parses == 5 + 1
    assert after_status.queue_generation == first.queue_generation
    objects["clusterqueues.gpufleet.io"] = [bumped(cluster_queue("team", gpus=4), "78")]
    assert world_of(snapshot(objects), parse).queue_generation != first.queue_generation
    assert parse.parses == 6 + 1  # the ClusterQueue changed, and it alone



def test_an_invalid_jobset_is_left_out_told_and_its_pods_wait_while_the_valid_one_is_grouped() -> None:
    bad, good = jobset("bad", jobs=1), jobset("good", jobs=1)
    bad["spec"]["replicatedJobs"][0]["replicas"] = "two"
    bad_pods = jobset_pods({**bad, "spec": {"replicatedJobs": [{**bad["spec"]["replicatedJobs"][0], "replicas": 1}]}})
    snap = snapshot({"nodes": [node("n0", gpus=8)], "pods": [*bad_pods, *jobset_pods(good)],
                     JOBSETS.key: [bad, good]})
    world = world_of(snap, ParseCache())
    [(res, key, _, why)] = [i for i in world.invalid if i[0].kind == "JobSet"]
    assert (res.key, key) == (JOBSETS.key, "ml/bad")
    assert why.startswith("JobSet left out: spec.replicatedJobs[0].replicas:")
    assert all((world.pods[f"ml/{p['metadata']['name']}"].problem or "").startswith("its JobSet ml/bad is invalid")
               for p in bad_pods)
    finish(world)
    assert [(w.key, w.kind, len(w.pods), w.gang) for w in world.workloads] == [("ml/good", "JobSet", 2, True)]


def test_a_trainjob_whose_runtime_is_missing_is_rejected_by_kind_and_name() -> None:
    trainer = next(res for res in r.WORKLOAD_RESOURCES if res.kind == "TrainJob")
    train_job = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                 "metadata": {"name": "llm", "namespace": "ml", "uid": "tj"},
                 "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}}}
    world = world_of(snapshot({trainer.key: [train_job]}), ParseCache())
    [(res, key, _, why)] = world.invalid
    assert (res.kind, key) == ("TrainJob", "ml/llm") and "torch-distributed" in why


def test_volcano_queues_and_jobs_are_read_together_and_admitted_as_one_gang() -> None:
    queue_res, job_res = WORKLOAD_KEYS["queues.scheduling.volcano.sh"], WORKLOAD_KEYS["jobs.batch.volcano.sh"]
    queue = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "research"},
             "spec": {"capability": {"cpu": "16", "nvidia.com/gpu": "4"}}}
    template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x", "resources": {
        "requests": {"cpu": "1"}, "limits": {"cpu": "1", "nvidia.com/gpu": "1"}}}]}}
    vjob = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "sweep", "namespace": "ml", "uid": "vj"},
            "spec": {"minAvailable": 3, "schedulerName": "gpufleet", "queue": "research",
                     "tasks": [{"name": "worker", "replicas": 3, "template": template}]}}
    pods = []
    for i in range(3):
        p = pod(f"sweep-worker-{i}", gpus=1)
        p["metadata"]["labels"] = {"volcano.sh/job-name": "sweep", "volcano.sh/task-spec": "worker"}
        pods.append(p)
    snap = snapshot({"nodes": [node("n0", gpus=8)], "namespaces": [{"apiVersion": "v1", "kind": "Namespace",
                                                                   "metadata": {"name": "ml"}}],
                     "pods": pods, queue_res.key: [queue], job_res.key: [vjob]})
    world = world_of(snap, ParseCache())
    assert not world.invalid, world.invalid
    assert "volcano:research" in {cq.name for cq in world.queues.cluster_queues}
    assert ("ml", "volcano:research") in {(lq.meta.namespace, lq.meta.name) for lq in world.queues.local_queues}
    finish(world)
    [w] = world.workloads
    assert (w.key, w.kind, w.queue, len(w.pods), w.gang) == ("ml/sweep", "Job", "volcano:research", 3, True)
    plan = planner.run(planner.make_policy(world, "gpufleet", set()), world.now)
    [admitted] = plan.admitted
    assert admitted.cluster_queue == "volcano:research" and len(admitted.pods) == 3


def test_a_workload_objects_status_alone_does_not_wake_the_loop_its_spec_does() -> None:
    cache = ObjectCache()
    wakeup = Wakeup(cache, AssumedPods(30.0), clock=lambda: 1000.0)
    owner = job("train")
    owner["metadata"]["resourceVersion"] = "1"
    cache.apply(JOBS, "ADDED", owner)
    assert wakeup.version == 1
    cache.apply(JOBS, "MODIFIED", bumped(owner, "2", active=2, ready=1))
    assert (wakeup.version, wakeup.skipped) == (1, 1)  # its controller counting its pods
    respec = bumped(owner, "3", active=2)
    respec["spec"]["parallelism"] = 4
    cache.apply(JOBS, "MODIFIED", respec)
    assert wakeup.version == 2


def test_a_status_write_to_a_queue_is_no_change_to_the_queues() -> None:
    # The scheduler writes ClusterQueue status every few cycles: that must neither re-parse the queue kinds nor start
    # a new queue generation (which made the live planner forget every parked workload at each write).
    objects = {**QUEUES}
    parse = ParseCache()
    first = world_of(snapshot(objects), parse)
    parses = parse.parses
    written = bumped(cluster_queue("team", gpus=8), "91")
    written["status"] = {"pendingWorkloads": 3, "conditions": [{"type": "Active", "status": "True"}]}
    written["metadata"]["managedFields"] = [{"manager": "gpufleet-scheduler", "operation": "Update"}]
    objects["clusterqueues.gpufleet.io"] = [written]
    after = world_of(snapshot(objects), parse)
    assert after.queue_generation == first.queue_generation and after.queues is first.queues
    assert parse.parses == parses
    # A change of its spec, or of its annotations, is a change.
    annotated = bumped(cluster_queue("team", gpus=8), "92")
    annotated["metadata"].setdefault("annotations", {})["gpufleet.io/reserve-after"] = "2h"
    objects["clusterqueues.gpufleet.io"] = [annotated]
    again = world_of(snapshot(objects), parse)
    assert again.queue_generation != first.queue_generation and parse.parses > parses
    objects["clusterqueues.gpufleet.io"] = [bumped(cluster_queue("team", gpus=4), "93")]
    assert world_of(snapshot(objects), parse).queue_generation not in (first.queue_generation,
                                                                        again.queue_generation)
