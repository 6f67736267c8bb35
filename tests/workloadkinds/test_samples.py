"""Every workload kind, from a sample in the shape of its project's own docs (tests/data/workloads/): the pods its
controller would create (count and names), the workloads Kueue's integration forms (gang or per pod), the queue,
and what a plan does with them on a cluster with room and on one without."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpufleet.api.manifests import Manifests, load_manifests
from gpufleet.cli.plan import run_cycles
from gpufleet.cluster.build import build_workloads
from gpufleet.cluster.workloads import Workload

DATA = Path(__file__).parent.parent / "data" / "workloads"
QUEUES = str(DATA / "cluster-queues.yaml")
ROOM = str(DATA / "nodes-room.yaml")
SMALL = str(DATA / "nodes-small.yaml")
SFX = "[bcdfghjklmnpqrstvwxz2456789]{5}"  # gpufleet's stand-in for the 5 random characters of a generateName


def load(*files: str) -> Manifests:
    m = load_manifests([QUEUES, *(str(DATA / f) for f in files)])
    assert not m.problems.errors, [str(e) for e in m.problems.errors]
    return m


def workloads(*files: str) -> list[Workload]:
    return build_workloads(load(*files))


def names(w: Workload) -> list[str]:
    return [p.key.partition("/")[2] for p in w.pods]


@dataclass(frozen=True)
class Expect:
    sample: str
    kind: str
    workloads: dict[str, int]  # workload name (pattern) -> pods
    pod_sets: dict[str, int]  # of the first workload: name -> count
    pods: tuple[str, ...]  # patterns of the first workload's pod names, in order
    gang: bool = True
    queue: str | None = "user-queue"


EXPECT = [
    Expect("deployment.yaml", "Deployment", {rf"sample-deployment-[a-z0-9]{{1,10}}-{SFX}": 1} , {"main": 1},
           (rf"sample-deployment-[bcdfghjklmnpqrstvwxz2456789]{{1,10}}-{SFX}",), gang=False),
    Expect("replicaset.yaml", "ReplicaSet", {rf"frontend-{SFX}": 1}, {"main": 1}, (rf"frontend-{SFX}",), gang=False),
    Expect("statefulset.yaml", "StatefulSet", {"nginx-statefulset": 3}, {"main": 3},
           ("nginx-statefulset-0", "nginx-statefulset-1", "nginx-statefulset-2")),
    Expect("jobset.yaml", "JobSet", {"simple": 5}, {"leader": 1, "workers": 4},
           (rf"simple-leader-0-0-{SFX}", rf"simple-workers-0-0-{SFX}", rf"simple-workers-0-1-{SFX}",
            rf"simple-workers-1-0-{SFX}", rf"simple-workers-1-1-{SFX}")),
    Expect("pytorchjob.yaml", "PyTorchJob", {"pytorch-simple": 4}, {"master": 1, "worker": 3},
           ("pytorch-simple-master-0", "pytorch-simple-worker-0", "pytorch-simple-worker-1",
            "pytorch-simple-worker-2")),
    Expect("tfjob.yaml", "TFJob", {"dist-mnist": 4}, {"ps": 2, "worker": 2},
           ("dist-mnist-ps-0", "dist-mnist-ps-1", "dist-mnist-worker-0", "dist-mnist-worker-1")),
    Expect("xgboostjob.yaml", "XGBoostJob", {"xgboost-dist-iris-test-train": 3}, {"master": 1, "worker": 2},
           ("xgboost-dist-iris-test-train-master-0", "xgboost-dist-iris-test-train-worker-0",
            "xgboost-dist-iris-test-train-worker-1")),
    Expect("paddlejob.yaml", "PaddleJob", {"paddle-simple-gpu": 2}, {"worker": 2},
           ("paddle-simple-gpu-worker-0", "paddle-simple-gpu-worker-1")),
    Expect("mpijob.yaml", "MPIJob", {"pi": 3}, {"launcher": 1, "worker": 2},
           (rf"pi-launcher-{SFX}", "pi-worker-0", "pi-worker-1")),
    Expect("trainjob.yaml", "TrainJob", {"pytorch-mnist": 4}, {"node": 4},
           tuple(rf"pytorch-mnist-node-0-{i}-{SFX}" for i in range(4))),
    Expect("raycluster.yaml", "RayCluster", {"raycluster-kuberay": 3}, {"head": 1, "workergroup": 2},
           (rf"raycluster-kuberay-head-{SFX}", rf"raycluster-kuberay-workergroup-worker-{SFX}",
            rf"raycluster-kuberay-workergroup-worker-{SFX}")),
    Expect("rayjob.yaml", "RayJob", {"rayjob-sample": 3}, {"head": 1, "small-group": 1, "submitter": 1},
           (rf"rayjob-sample-{SFX}-head-{SFX}", rf"rayjob-sample-{SFX}-small-group-worker-{SFX}",
            rf"rayjob-sample-{SFX}")),
    Expect("leaderworkerset.yaml", "LeaderWorkerSet",
           {"leaderworkerset-sample-0": 4, "leaderworkerset-sample-1": 4, "leaderworkerset-sample-2": 4},
           {"leader": 1, "worker": 3},
           ("leaderworkerset-sample-0", "leaderworkerset-sample-0-1", "leaderworkerset-sample-0-2",
            "leaderworkerset-sample-0-3")),
    Expect("cronjob.yaml", "CronJob", {"hello-28928165": 1}, {"main": 1}, (rf"hello-28928165-{SFX}",)),
    Expect("volcano.yaml", "Job", {"job-1": 6, "pg-test": 2}, {"nginx": 6},
           tuple(f"job-1-nginx-{i}" for i in range(6)), queue="volcano:test"),
    Expect("kai.yaml", "PodGroup", {"distributed-training": 2, "gpu-pod": 1}, {"role-0": 2},
           ("trainer-0", "trainer-1"), queue="kai:test"),
]


@pytest.mark.parametrize("e", EXPECT, ids=[e.sample for e in EXPECT])
def test_each_kind_expands_into_the_pods_and_workloads_of_its_controller(e: Expect) -> None:
    got = workloads(e.sample)
    per_name = {w.name: len(w.pods) for w in got}
    for pattern, pods in e.workloads.items():
        matching = [n for n in per_name if re.fullmatch(pattern, n)]
        assert matching, f"no workload named {pattern} in {sorted(per_name)}"
        assert all(per_name[n] == pods for n in matching), per_name
    first = got[0]
    assert first.kind == e.kind
    assert {ps.name: ps.count for ps in first.pod_sets} == e.pod_sets
    assert len(names(first)) == len(e.pods)
    for name, pattern in zip(names(first), e.pods, strict=True):
        assert re.fullmatch(pattern, name), (name, pattern)
    assert first.gang is e.gang
    assert first.queue == e.queue
    # the same input gives the same names, and no two pods share one
    again = workloads(e.sample)
    assert [names(w) for w in again] == [names(w) for w in got]
    every = [p.key for w in got for p in w.pods]
    assert len(every) == len(set(every))


def test_serving_kinds_are_one_workload_per_pod_and_every_replica_is_there() -> None:
    deployment = workloads("deployment.yaml")
    assert len(deployment) == 3 and all(len(w.pods) == 1 and not w.gang for w in deployment)
    hashes = {w.name.rsplit("-", 2)[1] for w in deployment}
    assert len(hashes) == 1  # one ReplicaSet, named after the template
    assert len(workloads("replicaset.yaml")) == 2


def test_job_modes_suspend_and_partial_admission() -> None:
    sample, indexed, parked = workloads("job.yaml")
    # suspended with a queue: Kueue resumes it on admission, an ordinary pending workload
    assert sample.hold is None and len(sample.pods) == 3 and sample.queue == "user-queue"
    assert all(re.fullmatch(rf"sample-job-{SFX}", n) for n in names(sample))
    # Indexed: min(parallelism 2, completions 5) pods, indexes 0 and 1
    assert [n.rsplit("-", 1)[0] for n in names(indexed)] == ["indexed-job-0", "indexed-job-1"]
    # suspended in no queue: nothing creates its pods, said as its pending reason
    assert parked.queue is None and parked.hold is not None and "suspended" in parked.hold


def test_cron_job_is_its_next_job() -> None:
    (w,) = workloads("cronjob.yaml")
    # created 2025-01-01T00:00Z, every 5 minutes: the next Job is scheduled at 00:05, minute 28,928,165
    assert w.name == "hello-28928165" and w.created == 28_928_165 * 60
    assert w.kind == "CronJob" and w.queue == "user-queue"


def test_volcano_gang_may_start_with_min_available_and_queues_become_cluster_queues() -> None:
    m = load("volcano.yaml")
    job, group = build_workloads(m)
    assert job.pod_sets[0].min_count == 4  # minAvailable 4 of 6
    assert group.kind == "PodGroup" and group.queue == "volcano:default" and group.pod_sets[0].min_count is None
    cqs = {cq.name: cq for cq in m.cluster_queues}
    assert {"volcano:test", "volcano:default"} <= set(cqs)
    quotas = cqs["volcano:test"].resource_groups[0].flavors[0].resources
    assert quotas["cpu"].nominal == 16_000 and quotas["nvidia.com/gpu"].nominal == 8
    assert "volcano:test" in {lq.cluster_queue for lq in m.local_queues if lq.meta.namespace == "team-a"}
    assert m.counts()["ClusterQueue"] == 1  # the input's own; the translated ones are not counted as input


def test_kai_queue_tree_and_queue_label() -> None:
    m = load("kai.yaml")
    got = {w.name: w for w in build_workloads(m)}
    assert got["distributed-training"].queue == "kai:test" and got["distributed-training"].gang
    assert got["gpu-pod"].queue == "kai:test" and not got["gpu-pod"].gang
    (cq,) = [cq for cq in m.cluster_queues if cq.name == "kai:test"]
    gpu = cq.resource_groups[0].flavors[0].resources["nvidia.com/gpu"]
    assert (gpu.nominal, gpu.borrowing_limit) == (4, 4) and cq.cohort == "kai:default"
    # the parent queue (only leaves take work), under the cluster's Cohort, which KAI's top-level queues divide
    assert {c.name: c.parent for c in m.cohorts} == {"kai:default": "kai:(root)", "kai:(root)": None}


ALL = [e.sample for e in EXPECT] + ["job.yaml"]


def test_planned_on_a_cluster_with_room_everything_runs_but_what_nothing_would_run() -> None:
    m = load_manifests([QUEUES, ROOM, *(str(DATA / f) for f in ALL)])
    assert not m.problems.errors, [str(e) for e in m.problems.errors]
    result = run_cycles(m, 1, until_stable=True)
    admitted = {a.workload: a for c in result.cycles for a in c.decisions.admitted}
    pending = {p.workload: p.reason for p in result.cycles[-1].pending}
    assert set(pending) == {"team-a/parked"}, pending
    assert "suspended" in pending["team-a/parked"]
    pytorch = admitted["team-a/pytorch-simple"]
    assert sorted(p.pod for p in pytorch.pods)[0] == "team-a/pytorch-simple-master-0"
    assert all(p.node for p in pytorch.pods)  # every pod of the gang placed
    assert len(admitted["team-a/simple"].pods) == 5


def test_planned_on_a_cluster_without_room_gangs_wait_whole() -> None:
    m = load_manifests([QUEUES, SMALL, *(str(DATA / f) for f in ("pytorchjob.yaml", "statefulset.yaml",
                                                                 "deployment.yaml"))])
    result = run_cycles(m, 1, until_stable=True)
    admitted = {a.workload: a for c in result.cycles for a in c.decisions.admitted}
    pending = {p.workload for p in result.cycles[-1].pending}
    # 4 pods of one GPU each cannot fit a node of one GPU: the gang waits whole, none of its pods placed
    assert "team-a/pytorch-simple" in pending and "team-a/pytorch-simple" not in admitted
    # the StatefulSet's 3 small pods fit together; the Deployment's pods go one by one
    assert len(admitted["team-a/nginx-statefulset"].pods) == 3
    assert sum(1 for k in admitted if k.startswith("team-a/sample-deployment-")) == 3
