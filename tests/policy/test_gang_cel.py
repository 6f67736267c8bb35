"""gang-without-all-or-nothing: lint (the parsers' plan of each kind) and the exported policy's CEL
(policy/multipod.py, evaluated with cel-python) give the same answer on generated objects of every kind the policy
judges: counts present or absent, zero, one or more, queue labels empty or not, pod groups, GPU templates of every
kind. Only objects gpufleet's parsers read are compared (an object they refuse is not judged by lint)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gpufleet.api.workloadkinds.kubeflow import REPLICA_SPECS
from gpufleet.policy.lintfiles import lint_paths
from gpufleet.policy.multipod import MULTI_POD, QUEUE_LABELS
from gpufleet.policy.rules import BY_ID, POD_GROUP_KEYS
from gpufleet.policy.vap import policies
from tests.policy.celeval import CompiledPolicy

RULE = "gang-without-all-or-nothing"
Doc = dict[str, Any]
DATA = Path(__file__).resolve().parents[1] / "data" / "lint"


@pytest.fixture(scope="module")
def warn_policy() -> CompiledPolicy:
    [doc] = [d for d in policies()
             if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"].endswith("-warn")]
    return CompiledPolicy(doc)


def lint_says(obj: Doc) -> bool | None:
    """Whether lint finds the rule on the object; None when the parsers refuse it."""
    run = lint_paths(["-"], stdin=io.StringIO(yaml.safe_dump(obj)))
    if not run.ok:
        return None
    return any(f.rule == RULE for f in run.findings)


def cel_says(policy: CompiledPolicy, obj: Doc) -> bool:
    return any(d.rule == RULE for d in policy.evaluate(obj))


# ---- generated objects ---------------------------------------------------------------------------------------------

_counts = st.none() | st.integers(min_value=0, max_value=3)
_gpu_asks = st.sampled_from(["none", "gpu", "gpu-zero", "mig", "shared", "fraction", "memory", "init-gpu"])


@st.composite
def templates(draw: st.DrawFn) -> Doc:
    ask = draw(_gpu_asks)
    limits: Doc = {"cpu": "1", "memory": "1Gi"}
    annotations: Doc = {}
    init: list[Doc] = []
    if ask == "gpu":
        limits["nvidia.com/gpu"] = draw(st.sampled_from([1, "2"]))
    elif ask == "gpu-zero":
        limits["nvidia.com/gpu"] = 0
    elif ask == "mig":
        limits["nvidia.com/mig-1g.10gb"] = 1
    elif ask == "shared":
        limits["nvidia.com/gpu.shared"] = 1
    elif ask == "fraction":
        annotations["gpufleet.io/gpu-fraction"] = "0.5"
    elif ask == "memory":
        annotations["gpufleet.io/gpu-memory"] = "8Gi"
    elif ask == "init-gpu":
        init.append({"name": "warm", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": 1}}})
    labels: Doc = {}
    if draw(st.booleans()) and draw(st.integers(0, 3)) == 0:
        (labels if draw(st.booleans()) else annotations)[draw(st.sampled_from(POD_GROUP_KEYS))] = "group"
    spec: Doc = {"restartPolicy": "Never",
                 "containers": [{"name": "main", "image": "busybox", "resources": {"limits": limits}}]}
    if init:
        spec["initContainers"] = init
    scheduler = draw(st.sampled_from([None] * 6 + ["default-scheduler", "kai-scheduler", "volcano"]))
    if scheduler:
        spec["schedulerName"] = scheduler
    metadata = {k: v for k, v in (("labels", labels), ("annotations", annotations)) if v}
    return {"metadata": metadata, "spec": spec} if metadata else {"spec": spec}


@st.composite
def queue_labels(draw: st.DrawFn) -> Doc:
    if draw(st.integers(0, 2)):
        return {}
    return {draw(st.sampled_from(QUEUE_LABELS)): draw(st.sampled_from(["", "training"]))}


def _put(d: Doc, key: str, value: Any) -> None:
    if value is not None:
        d[key] = value


@st.composite
def job_spec(draw: st.DrawFn) -> Doc:
    spec: Doc = {"template": draw(templates())}
    _put(spec, "parallelism", draw(_counts))
    _put(spec, "completions", draw(_counts))
    return spec


def _object(api_version: str, kind: str, labels: Doc, spec: Doc, meta: Doc | None = None) -> Doc:
    metadata: Doc = {"name": "x", "namespace": "dev", **(meta or {})}
    if labels:
        metadata["labels"] = labels
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": spec}


@st.composite
def jobs(draw: st.DrawFn) -> Doc:
    return _object("batch/v1", "Job", draw(queue_labels()), draw(job_spec()))


@st.composite
def cron_jobs(draw: st.DrawFn) -> Doc:
    job_template: Doc = {"spec": draw(job_spec())}
    labels = draw(queue_labels())
    if labels:
        job_template["metadata"] = {"labels": labels}
    spec: Doc = {"schedule": "0 2 * * *", "jobTemplate": job_template}
    _put(spec, "suspend", draw(st.none() | st.booleans()))
    # A queue label on the CronJob itself is not copied to its Jobs: no queue.
    return _object("batch/v1", "CronJob", draw(queue_labels()), spec)


@st.composite
def job_sets(draw: st.DrawFn) -> Doc:
    n = draw(st.integers(1, 3))
    rjs = []
    for i in range(n):
        rj: Doc = {"name": f"rj{i}", "template": {"spec": draw(job_spec())}}
        _put(rj, "replicas", draw(_counts))
        rjs.append(rj)
    return _object("jobset.x-k8s.io/v1alpha2", "JobSet", draw(queue_labels()), {"replicatedJobs": rjs})


@st.composite
def training_jobs(draw: st.DrawFn) -> Doc:
    kind = draw(st.sampled_from(sorted(REPLICA_SPECS)))
    field, types = REPLICA_SPECS[kind]
    chosen = draw(st.lists(st.sampled_from(types), min_size=1, max_size=len(types), unique=True))
    specs: Doc = {}
    for t in chosen:
        rs: Doc = {"template": draw(templates())}
        _put(rs, "replicas", draw(_counts))
        specs[t] = rs
    version = "kubeflow.org/v2beta1" if kind == "MPIJob" else "kubeflow.org/v1"
    return _object(version, kind, draw(queue_labels()), {field: specs})


@st.composite
def ray_cluster_spec(draw: st.DrawFn) -> Doc:
    groups: list[Doc] = []
    for i in range(draw(st.integers(0, 2))):
        g: Doc = {"groupName": f"g{i}", "template": draw(templates())}
        _put(g, "replicas", draw(_counts))
        _put(g, "minReplicas", draw(_counts))
        _put(g, "numOfHosts", draw(st.none() | st.integers(1, 2)))
        _put(g, "suspend", draw(st.none() | st.booleans()))
        groups.append(g)
    spec: Doc = {"headGroupSpec": {"template": draw(templates())}}
    if len(groups) > 0 or draw(st.booleans()):  # an empty list of worker groups, or none
        spec["workerGroupSpecs"] = groups
    return spec


@st.composite
def ray_clusters(draw: st.DrawFn) -> Doc:
    return _object("ray.io/v1", "RayCluster", draw(queue_labels()), draw(ray_cluster_spec()))


@st.composite
def ray_jobs(draw: st.DrawFn) -> Doc:
    spec: Doc = {"entrypoint": "python main.py"}
    if draw(st.integers(0, 4)) == 0:
        spec["clusterSelector"] = {"ray.io/cluster": "shared"}
    else:
        spec["rayClusterSpec"] = draw(ray_cluster_spec())
    _put(spec, "submissionMode", draw(st.none() | st.sampled_from(["K8sJobMode", "HTTPMode", "InteractiveMode"])))
    if draw(st.booleans()):
        spec["submitterPodTemplate"] = draw(templates())
    return _object("ray.io/v1", "RayJob", draw(queue_labels()), spec)


@st.composite
def leader_worker_sets(draw: st.DrawFn) -> Doc:
    lwt: Doc = {"workerTemplate": draw(templates())}
    _put(lwt, "size", draw(st.none() | st.integers(1, 3)))
    if draw(st.booleans()):
        lwt["leaderTemplate"] = draw(templates())
    spec: Doc = {"leaderWorkerTemplate": lwt}
    _put(spec, "replicas", draw(_counts))
    return _object("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", draw(queue_labels()), spec)


@st.composite
def pod_group_on_object(draw: st.DrawFn, objects: st.SearchStrategy[Doc]) -> Doc:
    obj = draw(objects)
    if draw(st.integers(0, 5)) == 0:
        where = draw(st.sampled_from(["labels", "annotations"]))
        obj["metadata"].setdefault(where, {})[draw(st.sampled_from(POD_GROUP_KEYS))] = "group"
    return obj


GENERATORS = {
    "Job": jobs(), "CronJob": cron_jobs(), "JobSet": job_sets(), "training job": training_jobs(),
    "RayCluster": ray_clusters(), "RayJob": ray_jobs(), "LeaderWorkerSet": leader_worker_sets(),
}


def test_the_generators_cover_every_kind_the_policy_judges() -> None:
    kinds = {kind for _, kind in MULTI_POD}
    assert kinds == {"Job", "CronJob", "JobSet", *REPLICA_SPECS, "RayCluster", "RayJob", "LeaderWorkerSet"}
    assert BY_ID[RULE].cel.covers("kubeflow.org", "MPIJob")
    assert not BY_ID[RULE].cel.covers("trainer.kubeflow.org", "TrainJob")


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_lint_and_the_policy_agree(name: str, warn_policy: CompiledPolicy) -> None:
    seen: dict[bool, int] = {True: 0, False: 0}

    @settings(max_examples=60, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(obj=pod_group_on_object(GENERATORS[name]))
    def check(obj: Doc) -> None:
        said = lint_says(obj)
        assume(said is not None)
        assert cel_says(warn_policy, obj) == said, yaml.safe_dump(obj)
        seen[bool(said)] += 1

    check()
    # Both answers were exercised (derandomize: the same examples on every run, so this is not left to chance).
    assert seen[True] >= 2 and seen[False] >= 2, seen


def test_a_trainjob_is_judged_by_lint_with_its_runtime_and_left_to_it_by_the_policy(
        warn_policy: CompiledPolicy, tmp_path: Path) -> None:
    runtime = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
               "metadata": {"name": "torch"},
               "spec": {"mlPolicy": {"numNodes": 1}, "template": {"spec": {"replicatedJobs": [{
                   "name": "node", "template": {"spec": {"template": {"spec": {"containers": [
                       {"name": "node", "image": "pytorch/pytorch"}]}}}}}]}}}}
    train = _object("trainer.kubeflow.org/v1alpha1", "TrainJob", {}, {
        "runtimeRef": {"name": "torch"},
        "trainer": {"numNodes": 4, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 8, "cpu": "32",
                                                                    "memory": "256Gi"}}}})
    path = tmp_path / "trainjob.yaml"
    path.write_text(yaml.safe_dump_all([runtime, train]))
    run = lint_paths([str(path)])
    assert run.ok and [f.object.kind for f in run.findings if f.rule == RULE] == ["TrainJob"]
    # The policy matches TrainJobs (for the container rules) but the gang rule leaves them out.
    assert not cel_says(warn_policy, train)


@pytest.mark.parametrize("obj", [
    _object("ray.io/v1", "RayJob", {}, {"submissionMode": "HTTPMode"}),
    {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "x", "namespace": "dev"}},
    _object("jobset.x-k8s.io/v1alpha2", "JobSet", {}, {"replicatedJobs": [{"name": "a", "replicas": 3,
                                                                            "template": {}}]}),
    _object("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", {}, {"replicas": 2}),
    _object("batch/v1", "CronJob", {}, {"schedule": "0 2 * * *"}),
    {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "x", "namespace": "dev"}},
], ids=lambda o: o["kind"])
def test_a_section_the_parser_requires_missing_is_no_gang_and_no_cel_error(obj: Doc, warn_policy: CompiledPolicy) \
        -> None:
    # An error in a validation would refuse the object (failurePolicy: Fail); lint refuses to read it and judges
    # nothing, so the policy says nothing either.
    assert lint_says(obj) is None
    assert not cel_says(warn_policy, obj)  # CompiledPolicy.evaluate raises on a CEL error
