"""Pieces every workload-kind parser shares: pod templates, counts within gpufleet's limits, queues, priority
classes and the checks that make an owner's plan one Kueue would accept."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpufleet.api import limits
from gpufleet.api.kinds import read_pod_template
from gpufleet.api.objects import GPUFLEET_QUEUE_LABEL, KUEUE_QUEUE_LABEL, PodTemplate
from gpufleet.api.reader import FieldReader
from gpufleet.api.workloadkinds.model import PodSetPlan, QueueSystem, WorkloadOwner, WorkloadPlan
from gpufleet.api.workloadkinds.table import (
    KAI_QUEUE_LABELS,
    VOLCANO_DEFAULT_QUEUE,
    VOLCANO_QUEUE_ANNOTATION,
    VOLCANO_QUEUE_LABEL,
    VOLCANO_SCHEDULER,
)

KUBERAY_SCHEDULER_LABEL = "ray.io/scheduler-name"  # KubeRay's batch scheduler of a RayCluster or RayJob
MAX_POD_SETS = 8  # Kueue's validation: a Workload holds 1 to 8 pod sets
INT32 = 2**31 - 1


def read_template(r: FieldReader, key: str = "template") -> PodTemplate | None:
    """A pod template (``metadata`` and ``spec``) under ``key``, validated as a Pod's."""
    return read_pod_template(r, key)


def count(r: FieldReader, key: str, default: int) -> int:
    """A replica count: a whole number from 0 to gpufleet's limit on pods per workload."""
    return r.integer(key, default, minimum=0, maximum=limits.PODS_PER_WORKLOAD) or 0


def queue_label(labels: Mapping[str, str],
                annotations: Mapping[str, str] | None = None) -> tuple[str | None, QueueSystem]:
    """The queue an object's labels (and annotations) name, and whose: Kueue's label first (gpufleet's own
    spelling too), then KAI's, then Volcano's (the label KubeRay reads, the annotation Volcano reads on pods and
    Kubeflow reads on its jobs)."""
    name = labels.get(KUEUE_QUEUE_LABEL) or labels.get(GPUFLEET_QUEUE_LABEL)
    if name:
        return name, "kueue"
    for label in KAI_QUEUE_LABELS:
        if labels.get(label):
            return labels[label], "kai"
    volcano = labels.get(VOLCANO_QUEUE_LABEL) or (annotations or {}).get(VOLCANO_QUEUE_ANNOTATION)
    if volcano:
        return volcano, "volcano"
    return None, "kueue"


def pod_queue(labels: Mapping[str, str], annotations: Mapping[str, str],
              scheduler_name: str | None) -> tuple[str | None, QueueSystem]:
    """The queue a pod (or a pod template) names, as :func:`queue_label` reads it; a pod Volcano schedules that
    names none is in Volcano's queue ``default``, where Volcano's PodGroup controller puts it."""
    name, system = queue_label(labels, annotations)
    if name is None and scheduler_name == VOLCANO_SCHEDULER:
        return VOLCANO_DEFAULT_QUEUE, "volcano"
    return name, system


def volcano_default_queue(owner: WorkloadOwner) -> None:
    """One rule for every kind, as for a pod (:func:`pod_queue`): an object that names no queue and whose pods
    Volcano schedules (a pod template with ``schedulerName: volcano``) is in the Volcano Queue its pod templates
    name (Volcano reads the queue on the pods; the first named wins), else in Volcano's queue ``default``, where
    Volcano puts the pod group made for them (Kubeflow's training operator and KubeRay leave its queue empty,
    Volcano's webhook defaults it). A Ray object labelled ``ray.io/scheduler-name: volcano`` is one whose pods
    Volcano schedules too."""
    if owner.queue is not None or not owner.workloads:
        return
    templates = [ps.template for ps in owner.workloads[0].pod_sets]
    volcano = [t for t in templates if t.scheduler_name == VOLCANO_SCHEDULER]
    if not volcano and owner.labels.get(KUBERAY_SCHEDULER_LABEL) == VOLCANO_SCHEDULER:
        volcano = templates  # KubeRay sets the pods' schedulerName itself
    if volcano:
        named = (t.annotations.get(VOLCANO_QUEUE_ANNOTATION) or t.labels.get(VOLCANO_QUEUE_LABEL) for t in volcano)
        owner.queue = queue_key(next((n for n in named if n), VOLCANO_DEFAULT_QUEUE), "volcano")


def queue_key(name: str | None, system: QueueSystem) -> str | None:
    """The LocalQueue name a workload's queue is looked up by: a Kueue LocalQueue as named, a Volcano or KAI
    Queue under its system's prefix (``volcano:default``), the LocalQueue :mod:`.queues` creates for it."""
    if name is None or system == "kueue":
        return name
    return f"{system}:{name}"


def first_priority_class(templates: Iterable[PodTemplate]) -> str | None:
    for t in templates:
        if t.priority_class_name:
            return t.priority_class_name
    return None


def check_plan(r: FieldReader, owner: WorkloadOwner, field: str) -> bool:
    """Whether every workload of the owner is one Kueue admits and gpufleet can hold: at most 8 pod sets, at most
    gpufleet's pods per workload, and all of them within its pods per input. Errors name ``field``."""
    ok = True
    for plan in owner.workloads:
        if len(plan.pod_sets) > MAX_POD_SETS:
            r.error(f"{len(plan.pod_sets)} pod sets in one workload; Kueue allows at most {MAX_POD_SETS}", field,
                    fix="merge roles with the same pod template, or split the object")
            ok = False
        if plan.total > limits.MAX_PODS_PER_WORKLOAD:
            r.error(f"{plan.total:,} pods in one workload is too many: {limits.PODS_PER_WORKLOAD.says()}", field,
                    fix="use fewer replicas")
            ok = False
    total = owner.total_pods
    if ok and total > limits.MAX_PODS:
        r.error(f"{total:,} pods is too many for one object: {limits.PODS.says()}", field, fix="use fewer replicas")
        ok = False
    return ok


def single(name: str, pod_sets: list[PodSetPlan]) -> list[WorkloadPlan]:
    return [WorkloadPlan(name, pod_sets)]


def apply_min_total(pod_sets: list[PodSetPlan], min_total: int | None) -> None:
    """Kueue's partial admission for a gang that may start with ``min_total`` pods: the pod sets without a minimum
    of their own give up pods from the last one backwards (Volcano's minAvailable, KAI's minMember)."""
    if min_total is None:
        return
    total = sum(ps.count for ps in pod_sets)
    spare = total - min_total
    if spare <= 0:
        return
    for ps in reversed(pod_sets):
        if spare <= 0:
            break
        if ps.min_count is not None:
            spare -= ps.count - ps.min_count
            continue
        give = min(spare, ps.count)
        ps.min_count = ps.count - give
        spare -= give
