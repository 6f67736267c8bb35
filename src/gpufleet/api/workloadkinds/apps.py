"""apps/v1 Deployment, ReplicaSet and StatefulSet: serving kinds.

Under Kueue a Deployment's or a ReplicaSet's pods are plain pods, each a workload of its own (Kueue's deployment
integration copies the queue label onto the pod template, its pod integration does the rest). A StatefulSet's pods
are one pod group (Kueue's statefulset integration), admitted together.
"""

from __future__ import annotations

from gpufleet.api.kinds import parse_label_selector, parse_meta
from gpufleet.api.objects import LabelSelector, ObjectMeta, PodTemplate
from gpufleet.api.reader import FieldReader
from gpufleet.api.workloadkinds import names
from gpufleet.api.workloadkinds.common import check_plan, count, queue_key, queue_label, read_template
from gpufleet.api.workloadkinds.model import PodName, PodSetPlan, WorkloadOwner, WorkloadPlan
from gpufleet.api.workloadkinds.table import RULES


def _read(r: FieldReader) -> tuple[ObjectMeta, FieldReader, PodTemplate, LabelSelector, int] | None:
    meta = parse_meta(r, namespaced=True)
    spec = r.obj("spec", required=True)
    if meta is None or spec is None:
        return None
    replicas = count(spec, "replicas", 1)
    selector = parse_label_selector(spec.obj("selector", required=True))
    template = read_template(spec)
    if template is None or selector is None:
        return None
    if not selector.match_labels and not selector.match_expressions:
        spec.error("the selector is empty", "selector", fix="select the pod template's labels with matchLabels")
        return None
    if not selector.matches(template.labels):
        spec.error("the selector does not match the pod template's labels", "selector",
                   fix="make spec.selector.matchLabels a subset of spec.template.metadata.labels")
        return None
    return meta, spec, template, selector, replicas


def _owner(r: FieldReader, kind: str, meta: ObjectMeta, template: PodTemplate, selector: LabelSelector,
           replicas: int, pod_name: PodName) -> WorkloadOwner | None:
    # Kueue reads the queue on the object (and copies it to the pods); one on the pod template works too.
    queue, system = queue_label(meta.labels)
    if queue is None:  # Volcano reads its queue annotation on the pods (its default queue: volcano_default_queue)
        queue, system = queue_label(template.labels, template.annotations)
    owner = WorkloadOwner(meta=meta, rule=RULES[("apps", kind)],
                          workloads=[WorkloadPlan(meta.name, [PodSetPlan("main", replicas, template, pod_name)])],
                          queue=queue_key(queue, system), labels={**template.labels, **meta.labels},
                          annotations={**template.annotations, **meta.annotations}, selector=selector)
    return owner if check_plan(r, owner, "spec.replicas") else None


def parse_deployment(r: FieldReader) -> WorkloadOwner | None:
    read = _read(r)
    if read is None:
        return None
    meta, spec, template, selector, replicas = read
    ns = meta.namespace or "default"
    replica_set = f"{meta.name}-{names.template_hash(spec.raw('template'))}"
    return _owner(r, "Deployment", meta, template, selector, replicas,
                  lambda i: names.generated(f"{replica_set}-", ns, replica_set, index=i))


def parse_replica_set(r: FieldReader) -> WorkloadOwner | None:
    read = _read(r)
    if read is None:
        return None
    meta, _, template, selector, replicas = read
    ns = meta.namespace or "default"
    return _owner(r, "ReplicaSet", meta, template, selector, replicas,
                  lambda i: names.generated(f"{meta.name}-", ns, meta.name, index=i))


def parse_stateful_set(r: FieldReader) -> WorkloadOwner | None:
    read = _read(r)
    if read is None:
        return None
    meta, spec, template, selector, replicas = read
    ordinals = spec.obj("ordinals")
    start = (ordinals.integer("start", 0, minimum=0, maximum=2**31 - 1) or 0) if ordinals else 0
    return _owner(r, "StatefulSet", meta, template, selector, replicas, lambda i: f"{meta.name}-{start + i}")
