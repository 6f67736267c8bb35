"""The CEL form of ``gang-without-all-or-nothing`` (:mod:`.rules`): for each gang kind whose pods the object alone
describes, whether its largest unit of admission holds more than one pod and whether it names a queue, written as
the kind's parser (``api/workloadkinds``) plans it.

The Python rule reads the parsers' plan (``Subject.largest_workload``, ``WorkloadOwner.queue``); this module
repeats, kind by kind, only the arithmetic of that plan (parallelism capped by completions, replicas times pods
per Job, replicas summed over replica types, worker groups, the RayJob's submitter, a LeaderWorkerSet's group size)
and where the queue label sits. tests/policy/test_gang_cel.py holds the two to the same answers on generated
objects of every kind here.

TrainJob is not here: its pods are described by its runtime (a TrainingRuntime or ClusterTrainingRuntime, another
object), which a ValidatingAdmissionPolicy cannot read.
"""

from __future__ import annotations

from collections.abc import Callable

from gpufleet.api.objects import GPUFLEET_QUEUE_LABEL, KUEUE_QUEUE_LABEL
from gpufleet.api.workloadkinds.kubeflow import REPLICA_SPECS
from gpufleet.api.workloadkinds.ray import SUBMISSION_MODES
from gpufleet.api.workloadkinds.table import KAI_QUEUE_LABELS
from gpufleet.policy.cel import kind_test

Kind = tuple[str, str]

# Labels that give a workload a queue (gpufleet.api.workloadkinds.common.queue_label): Kueue's, gpufleet's spelling
# of it, KAI's. A label with an empty value names no queue.
QUEUE_LABELS = (KUEUE_QUEUE_LABEL, GPUFLEET_QUEUE_LABEL, *KAI_QUEUE_LABELS)
DEFAULT_SUBMISSION_MODE = SUBMISSION_MODES[0]


def _or(expr: str, field: str, default: str) -> str:
    """``expr.field``, or ``default`` when the field is absent."""
    return f"(has({expr}.{field}) ? {expr}.{field} : {default})"


def _is_true(expr: str, field: str) -> str:
    return f"(has({expr}.{field}) && {expr}.{field} == true)"


def job_pods(spec: str) -> str:
    """Pods a Job runs at once, as Kueue counts them: parallelism (default 1), capped by completions."""
    p = _or(spec, "parallelism", "1")
    return f"(has({spec}.completions) && {spec}.completions < {p} ? {spec}.completions : {p})"


def _more_than_one(items: str, pods: Callable[[str], str], var: str) -> str:
    """The pods of ``items`` (a list, or a map's keys) summed exceed one: one item with two or more, or two items
    with one or more (CEL has no sum)."""
    return f"({items}.exists({var}, {pods(var)} > 1) || {items}.filter({var}, {pods(var)} > 0).size() > 1)"


def _present(*path: str) -> str:
    """Every step of ``path`` under ``object`` is there. A section the parser requires and the object lacks makes
    it refused (lint and the webhook then judge nothing): the policy answers no gang, never a CEL error (which
    its failurePolicy would turn into a refusal)."""
    return " && ".join(f"has(object.{'.'.join(path[:i + 1])})" for i in range(len(path)))


def _job(spec: str) -> str:
    return f"{job_pods(spec)} > 1"


def _cron_job() -> str:
    return (f"{_present('spec', 'jobTemplate', 'spec')} && !{_is_true('object.spec', 'suspend')} && "
            f"{_job('object.spec.jobTemplate.spec')}")


def _job_set() -> str:
    def pods(rj: str) -> str:
        return (f"(has({rj}.template) && has({rj}.template.spec) ? "
                f"{_or(rj, 'replicas', '1')} * {job_pods(f'{rj}.template.spec')} : 0)")

    return f"{_present('spec', 'replicatedJobs')} && " + _more_than_one("object.spec.replicatedJobs", pods, "rj")


def _training_job(field: str) -> str:
    specs = f"object.spec.{field}"
    return f"{_present('spec', field)} && " + _more_than_one(specs, lambda k: _or(f"{specs}[{k}]", "replicas", "1"),
                                                              "k")


def _ray_workers(cluster: str) -> str:
    """A RayCluster spec with a worker pod beside its head: a worker group not suspended with a replica."""
    replicas = _or("g", "replicas", _or("g", "minReplicas", "1"))
    return (f"(has({cluster}.workerGroupSpecs) && {cluster}.workerGroupSpecs.exists(g, "
            f"!{_is_true('g', 'suspend')} && {replicas} > 0))")


def _ray_job() -> str:
    # On an existing cluster (clusterSelector) it makes no pods; in K8sJobMode its submitter is a second pod.
    mode = _or("object.spec", "submissionMode", f"'{DEFAULT_SUBMISSION_MODE}'")
    return (f"has(object.spec) && !has(object.spec.clusterSelector) && ({mode} == '{DEFAULT_SUBMISSION_MODE}' || "
            f"(has(object.spec.rayClusterSpec) && {_ray_workers('object.spec.rayClusterSpec')}))")


def _leader_worker_set() -> str:
    return (f"{_present('spec', 'leaderWorkerTemplate')} && {_or('object.spec', 'replicas', '1')} > 0 && "
            f"{_or('object.spec.leaderWorkerTemplate', 'size', '1')} > 1")


def _labels(*path: str) -> tuple[str, str]:
    """The labels at ``path`` under ``object``, with the test that every step of it is there."""
    guards = " && ".join(f"has(object.{'.'.join(path[:i + 1])})" for i in range(1, len(path)))
    return guards, f"object.{'.'.join(path)}"


OBJECT_LABELS = _labels("metadata", "labels")

# (more than one pod, the labels that name its queue) per kind.
MULTI_POD: dict[Kind, tuple[str, tuple[str, str]]] = {
    ("batch", "Job"): (f"has(object.spec) && {_job('object.spec')}", OBJECT_LABELS),
    # A CronJob's Jobs take the labels of its job template, not its own.
    ("batch", "CronJob"): (_cron_job(), _labels("spec", "jobTemplate", "metadata", "labels")),
    ("jobset.x-k8s.io", "JobSet"): (_job_set(), OBJECT_LABELS),
    **{("kubeflow.org", kind): (_training_job(field), OBJECT_LABELS) for kind, (field, _) in REPLICA_SPECS.items()},
    # The head is one pod: a worker makes two.
    ("ray.io", "RayCluster"): (f"has(object.spec) && {_ray_workers('object.spec')}", OBJECT_LABELS),
    ("ray.io", "RayJob"): (_ray_job(), OBJECT_LABELS),
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): (_leader_worker_set(), OBJECT_LABELS),
}


def names_no_queue(labels: tuple[str, str]) -> str:
    guards, at = labels
    keys = "[" + ", ".join(f"'{k}'" for k in QUEUE_LABELS) + "]"
    return f"!({guards} && {keys}.exists(k, k in {at} && {at}[k] != ''))"


def ungrouped_gang() -> str:
    """CEL, true when the object (of a kind of :data:`MULTI_POD`) holds more than one pod in a unit of admission and
    names no queue; the GPU and pod-group tests are the rule's (they read the templates)."""
    expr = "false"
    for (group, kind), (multi, labels) in reversed(sorted(MULTI_POD.items())):
        expr = f"({kind_test(group, kind)}) ? ({names_no_queue(labels)} && {multi}) :\n  {expr}"
    return f"({expr})"
