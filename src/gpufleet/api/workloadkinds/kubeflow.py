"""Kubeflow's training jobs: kubeflow.org PyTorchJob, TFJob, XGBoostJob, PaddleJob and MPIJob, and
trainer.kubeflow.org TrainJob with the (Cluster)TrainingRuntime it runs on.

A training job is one workload with a pod set per replica type, in the order Kueue's integration lists them
(PyTorchJob: Master, Worker; TFJob: Chief, Master, PS, Worker, Evaluator; MPIJob: Launcher, Worker), each pod set
named after its type in lower case. A TrainJob is the JobSet its runtime describes, its trainer job resized to
``spec.trainer.numNodes`` nodes and given ``spec.trainer.resourcesPerNode``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from gpufleet.api.errors import Problems
from gpufleet.api.kinds import parse_meta
from gpufleet.api.limits import MAX_PODS_PER_WORKLOAD
from gpufleet.api.reader import FieldReader
from gpufleet.api.source import Document
from gpufleet.api.workloadkinds import names
from gpufleet.api.workloadkinds.batch import parse_job_set
from gpufleet.api.workloadkinds.common import (
    INT32,
    check_plan,
    count,
    first_priority_class,
    queue_key,
    queue_label,
    read_template,
)
from gpufleet.api.workloadkinds.model import (
    ControllerObjects,
    PodName,
    PodSetPlan,
    TrainingRuntime,
    WorkloadOwner,
    WorkloadPlan,
)
from gpufleet.api.workloadkinds.table import RULES
from gpufleet.api.workloadkinds.tas import check_owner

# kind -> (the field holding its replica specs, its replica types in Kueue's pod-set order)
REPLICA_SPECS: dict[str, tuple[str, tuple[str, ...]]] = {
    "PyTorchJob": ("pytorchReplicaSpecs", ("Master", "Worker")),
    "TFJob": ("tfReplicaSpecs", ("Chief", "Master", "PS", "Worker", "Evaluator")),
    "XGBoostJob": ("xgbReplicaSpecs", ("Master", "Worker")),
    "PaddleJob": ("paddleReplicaSpecs", ("Master", "Worker")),
    "MPIJob": ("mpiReplicaSpecs", ("Launcher", "Worker")),
}


def _pod_name(namespace: str, job: str, replica_type: str, version: str, kind: str) -> PodName:
    role = replica_type.lower()
    if kind == "MPIJob" and replica_type == "Launcher":
        if version == "v1":
            return lambda i: f"{job}-launcher"
        # mpi-operator v2 runs the launcher as a Job named <job>-launcher
        return lambda i: names.generated(f"{job}-launcher-", namespace, f"{job}-launcher", index=i)
    return lambda i: f"{job}-{role}-{i}"


def parse_training_job(r: FieldReader) -> WorkloadOwner | None:
    """Any of PyTorchJob, TFJob, XGBoostJob, PaddleJob and MPIJob (the kind says which)."""
    kind = str(r.raw("kind"))
    version = str(r.raw("apiVersion")).partition("/")[2]
    field, types = REPLICA_SPECS[kind]
    meta = parse_meta(r, namespaced=True)
    spec = r.obj("spec", required=True)
    if meta is None or spec is None:
        return None
    ns = meta.namespace or "default"
    specs = spec.obj(field, required=True)
    if specs is None:
        return None
    unknown = [str(k) for k in specs.value if str(k) not in types]
    for k in unknown:
        specs.error(f"{kind} has no replica type {k}", k, fix=f"use {', '.join(types)} (written exactly so)")
    if unknown:
        return None
    pod_sets: list[PodSetPlan] = []
    for replica_type in types:
        rs = specs.obj(replica_type)
        if rs is None:
            continue
        template = read_template(rs)
        if template is None:
            continue
        replicas = count(rs, "replicas", 1)
        pod_sets.append(PodSetPlan(replica_type.lower(), replicas, template,
                                   _pod_name(ns, meta.name, replica_type, version, kind)))
    if not pod_sets:
        return None
    run_policy = spec.obj("runPolicy")
    scheduling = run_policy.obj("schedulingPolicy") if run_policy else None
    priority = (scheduling.text("priorityClass") if scheduling else None) or first_priority_class(
        ps.template for ps in pod_sets)
    queue, system = queue_label(meta.labels, meta.annotations)
    if queue is None and scheduling is not None and scheduling.text("queue"):
        # the training operator's gang scheduling through Volcano names the Volcano Queue here
        queue, system = scheduling.text("queue"), "volcano"
    owner = WorkloadOwner(
        meta=meta, rule=RULES[("kubeflow.org", kind)], workloads=[WorkloadPlan(meta.name, pod_sets)],
        queue=queue_key(queue, system), priority_class=priority,
        suspended=run_policy.flag("suspend") if run_policy else False,
        backoff_limit=(run_policy.integer("backoffLimit", 0, minimum=0, maximum=INT32) or 0) if run_policy else 0,
        labels=dict(meta.labels), annotations=dict(meta.annotations))
    return owner if check_plan(r, owner, f"spec.{field}") else None


# ---- Kubeflow Trainer ----------------------------------------------------------------------------------------

TRAINER_JOB = "node"  # the replicated job a runtime's trainer runs as (Kubeflow Trainer's "trainer node")
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"


def parse_training_runtime(r: FieldReader) -> TrainingRuntime | None:
    kind = str(r.raw("kind"))
    meta = parse_meta(r, namespaced=kind == "TrainingRuntime")
    spec = r.obj("spec", required=True)
    if meta is None or spec is None:
        return None
    template = spec.obj("template", required=True)
    if template is None or template.obj("spec", required=True) is None:
        return None
    ml = spec.obj("mlPolicy")
    num_nodes = ml.integer("numNodes", minimum=1, maximum=MAX_PODS_PER_WORKLOAD) if ml else None
    data = r.value if isinstance(r.value, dict) else dict(r.value)
    return TrainingRuntime(meta, kind, data, num_nodes)


Linker = Callable[[ControllerObjects, Problems], None]


def parse_train_job(r: FieldReader) -> tuple[WorkloadOwner, Linker] | None:
    """A TrainJob, and the step that completes it once every runtime of the input is known."""
    meta = parse_meta(r, namespaced=True)
    spec = r.obj("spec", required=True)
    if meta is None or spec is None:
        return None
    ref = spec.obj("runtimeRef", required=True)
    trainer = spec.obj("trainer")
    if ref is None:
        return None
    runtime_name = ref.text("name", required=True)
    runtime_kind = ref.enum("kind", ("ClusterTrainingRuntime", "TrainingRuntime"), "ClusterTrainingRuntime")
    num_nodes = trainer.integer("numNodes", minimum=1, maximum=MAX_PODS_PER_WORKLOAD) if trainer else None
    resources = trainer.raw("resourcesPerNode") if trainer else None
    if trainer is not None and resources is not None and not isinstance(resources, Mapping):
        trainer.error("expected a mapping (requests and limits)", "resourcesPerNode")
        return None
    for unread in ("podTemplateOverrides", "podSpecOverrides"):
        if spec.has(unread):
            spec.warning(f"{unread} is not applied by gpufleet: the pods are planned as the runtime describes them",
                         unread, fix="put what the pods need in the runtime, or accept the difference")
    if runtime_name is None:
        return None
    queue, system = queue_label(meta.labels, meta.annotations)
    owner = WorkloadOwner(meta=meta, rule=RULES[("trainer.kubeflow.org", "TrainJob")],
                          queue=queue_key(queue, system), suspended=spec.flag("suspend"),
                          labels=dict(meta.labels), annotations=dict(meta.annotations))
    doc = r.doc

    def link(objects: ControllerObjects, problems: Problems) -> None:
        _link_train_job(owner, doc, objects, problems, runtime_kind, runtime_name, num_nodes, resources)

    return owner, link


def _link_train_job(owner: WorkloadOwner, doc: Document, objects: ControllerObjects, problems: Problems,
                    runtime_kind: str, runtime_name: str, num_nodes: int | None, resources: Any) -> None:
    """Fill the TrainJob's workload from its runtime; an error (and no workload) when the runtime is missing."""
    ns = owner.namespace
    runtime = next((rt for rt in objects.runtimes if rt.kind == runtime_kind and rt.meta.name == runtime_name
                    and (runtime_kind == "ClusterTrainingRuntime" or rt.meta.namespace == ns)), None)
    r = FieldReader(doc, problems, kind="TrainJob", name=owner.key)
    if runtime is None:
        where = "" if runtime_kind == "ClusterTrainingRuntime" else f" in namespace {ns}"
        r.error(f"its runtime {runtime_kind} {runtime_name}{where} is not in the input, so its pods are unknown",
                "spec", "runtimeRef", fix=f"add the runtime: kubectl get {runtime_kind.lower()} {runtime_name} "
                "-o yaml")
        owner.hold = f"{runtime_kind} {runtime_name} is not in the input"
        return
    jobset_spec = copy.deepcopy(_mapping(_mapping(runtime.data, "spec"), "template").get("spec") or {})
    nodes = num_nodes if num_nodes is not None else runtime.num_nodes
    found = False
    jobs = jobset_spec.get("replicatedJobs") if isinstance(jobset_spec, dict) else None
    for rj in jobs if isinstance(jobs, list) else []:
        if not isinstance(rj, dict) or not _is_trainer(rj):
            continue
        found = True
        job_spec = _mapping(_mapping(rj, "template"), "spec")
        if nodes is not None:
            job_spec["parallelism"] = nodes
            job_spec["completions"] = nodes
        containers = _mapping(_mapping(job_spec, "template"), "spec").get("containers")
        containers = containers if isinstance(containers, list) else []
        if resources is not None:
            chosen = next((c for c in containers if isinstance(c, dict) and c.get("name") == TRAINER_JOB),
                          containers[0] if containers else None)
            if isinstance(chosen, dict):
                chosen["resources"] = copy.deepcopy(resources)
    if not found and (nodes is not None or resources is not None):
        r.warning(f"runtime {runtime_name} has no trainer job ({TRAINER_JOB!r}, or labelled {ANCESTOR_LABEL}: "
                  "trainer): numNodes and resourcesPerNode are not applied", "spec", "trainer",
                  fix="use a runtime with a trainer job")
    data = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": owner.meta.name, "namespace": ns, "labels": dict(owner.meta.labels)},
            "spec": jobset_spec}
    # Problems in the merged JobSet are the runtime's (or the TrainJob's overrides): said at the TrainJob.
    merged = Document(data=data, file=doc.file, line=doc.line, index=doc.index)
    merged_r = FieldReader(merged, problems, kind=f"TrainJob (runtime {runtime_name})", name=owner.key)
    jobset = parse_job_set(merged_r)
    if jobset is None:
        owner.hold = f"its runtime {runtime_kind} {runtime_name} does not describe valid pods"
        return
    check_owner(merged_r, jobset)  # the runtime's slice annotations, said at the TrainJob
    owner.workloads = [WorkloadPlan(owner.meta.name, jobset.workloads[0].pod_sets)]
    owner.priority_class = owner.priority_class or first_priority_class(
        ps.template for ps in owner.workloads[0].pod_sets)


def _mapping(parent: dict[str, Any], key: str) -> dict[str, Any]:
    """``parent[key]`` as a mapping, made one when absent (and replaced when it is not one: the JobSet parser then
    reports what it finds missing)."""
    value = parent.get(key)
    if not isinstance(value, dict):
        value = {}
        parent[key] = value
    return value


def _is_trainer(rj: dict[str, Any]) -> bool:
    if rj.get("name") == TRAINER_JOB:
        return True
    template = rj.get("template")
    metadata = template.get("metadata") if isinstance(template, dict) else None
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    return isinstance(labels, dict) and labels.get(ANCESTOR_LABEL) == "trainer"
