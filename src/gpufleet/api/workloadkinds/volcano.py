"""Volcano's batch.volcano.sh Job and scheduling.volcano.sh PodGroup and Queue.

A Volcano Job is one gang: pods ``<job>-<task>-<index>`` for every task, of which ``spec.minAvailable`` (default:
all) must run together; a task's own ``minAvailable`` bounds that task. A PodGroup names no pods: the Pods annotated
``scheduling.k8s.io/group-name: <group>`` are its members, ``spec.minMember`` of them needed to start. Both are
admitted against a Volcano Queue (``spec.queue``, default ``default``), read as a ClusterQueue by :mod:`.queues`.
"""

from __future__ import annotations

from gpufleet.api.kinds import canonical_amount, is_native, parse_meta
from gpufleet.api.limits import MAX_PODS_PER_WORKLOAD
from gpufleet.api.objects import ResourceList
from gpufleet.api.reader import FieldReader
from gpufleet.api.workloadkinds.common import apply_min_total, check_plan, count, queue_key, read_template
from gpufleet.api.workloadkinds.model import ForeignQueue, PodName, PodSetPlan, WorkloadOwner, WorkloadPlan
from gpufleet.api.workloadkinds.table import RULES, VOLCANO_DEFAULT_QUEUE

DEFAULT_QUEUE = VOLCANO_DEFAULT_QUEUE


def parse_volcano_job(r: FieldReader) -> WorkloadOwner | None:
    meta = parse_meta(r, namespaced=True)
    spec = r.obj("spec", required=True)
    if meta is None or spec is None:
        return None
    pod_sets: list[PodSetPlan] = []
    seen: set[str] = set()
    for task in spec.items("tasks", required=True):
        name = task.text("name", required=True)
        template = read_template(task)
        if name is None or template is None:
            continue
        if name in seen:
            task.error(f"task {name} is defined twice", "name", fix="give every task its own name")
            continue
        seen.add(name)
        replicas = count(task, "replicas", 0)
        task_min = task.integer("minAvailable", minimum=0, maximum=MAX_PODS_PER_WORKLOAD)
        pod_sets.append(PodSetPlan(name, replicas, template, _task_pod_name(meta.name, name),
                                   min(task_min, replicas) if task_min is not None and task_min < replicas else None))
    if not pod_sets:
        return None
    total = sum(ps.count for ps in pod_sets)
    min_available = spec.integer("minAvailable", minimum=0, maximum=MAX_PODS_PER_WORKLOAD)
    if min_available is not None and min_available > total:
        spec.error(f"minAvailable {min_available} is more than the job's {total} pods; it could never start",
                   "minAvailable", fix=f"set minAvailable to at most {total}")
        return None
    apply_min_total(pod_sets, min_available)
    queue = spec.text("queue") or DEFAULT_QUEUE
    owner = WorkloadOwner(meta=meta, rule=RULES[("batch.volcano.sh", "Job")],
                          workloads=[WorkloadPlan(meta.name, pod_sets)], queue=queue_key(queue, "volcano"),
                          priority_class=spec.text("priorityClassName"),
                          backoff_limit=spec.integer("maxRetry", 3, minimum=0, maximum=2**31 - 1) or 0,
                          labels=dict(meta.labels), annotations=dict(meta.annotations))
    return owner if check_plan(r, owner, "spec.tasks") else None


def _task_pod_name(job: str, task: str) -> PodName:
    return lambda i: f"{job}-{task}-{i}"


def parse_pod_group(r: FieldReader) -> WorkloadOwner | None:
    """A Volcano or a KAI PodGroup (the group of its apiVersion says which)."""
    group = str(r.raw("apiVersion")).partition("/")[0]
    meta = parse_meta(r, namespaced=True)
    spec = r.obj("spec")
    if meta is None:
        return None
    rule = RULES[(group, "PodGroup")]
    min_member = (spec.integer("minMember", 1, minimum=0, maximum=MAX_PODS_PER_WORKLOAD) or 0) if spec else 1
    queue = spec.text("queue") if spec else None
    if rule.queue_system == "volcano":
        queue = queue or DEFAULT_QUEUE
    return WorkloadOwner(meta=meta, rule=rule, queue=queue_key(queue, rule.queue_system),
                         priority_class=spec.text("priorityClassName") if spec else None, labels=dict(meta.labels),
                         annotations=dict(meta.annotations), min_member=min_member)


def resource_list(r: FieldReader | None, key: str) -> ResourceList:
    """A resource list in canonical units; whole counts for extended resources (a fraction is an error)."""
    out: ResourceList = {}
    section = r.obj(key) if r is not None else None
    if section is None:
        return out
    for name in section.value:
        resource = str(name)
        q = section.quantity(resource)
        if q is None:
            continue
        if not is_native(resource) and q.denominator != 1:
            section.error(f"{resource} must be a whole number", resource, fix="give a whole count")
            continue
        out[resource] = canonical_amount(resource, q)
    return out


def parse_volcano_queue(r: FieldReader) -> ForeignQueue | None:
    meta = parse_meta(r, namespaced=False)
    if meta is None:
        return None
    spec = r.obj("spec")
    capability = resource_list(spec, "capability")
    deserved = resource_list(spec, "deserved")
    nominal = dict(deserved) if deserved else dict(capability)
    return ForeignQueue(meta, "volcano", nominal, capability, spec.text("parent") if spec else None)
