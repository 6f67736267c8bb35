"""leaderworkerset.x-k8s.io LeaderWorkerSet: ``replicas`` groups of ``size`` pods, one leader and its workers.

Kueue admits each group as a workload of its own (a gang): pod sets ``leader`` (1 pod) and ``worker``
(``size - 1``) when a leader template is given, else one pod set ``main`` of ``size`` pods built from the worker
template. The leader of group g is ``<name>-<g>`` (a pod of the leader StatefulSet), its workers
``<name>-<g>-<w>`` (pods of the group's worker StatefulSet, w from 1).
"""

from __future__ import annotations

from gpufleet.api.kinds import parse_meta
from gpufleet.api.limits import MAX_PODS_PER_WORKLOAD
from gpufleet.api.reader import FieldReader
from gpufleet.api.workloadkinds.common import check_plan, count, queue_key, queue_label, read_template
from gpufleet.api.workloadkinds.model import PodName, PodSetPlan, WorkloadOwner, WorkloadPlan
from gpufleet.api.workloadkinds.table import RULES


def _member(lws: str, group: int, first: int) -> PodName:
    """The i-th pod of a pod set whose first pod is the group's member ``first`` (0: the leader)."""
    def name(i: int) -> str:
        member = first + i
        return f"{lws}-{group}" if member == 0 else f"{lws}-{group}-{member}"
    return name


def parse_leader_worker_set(r: FieldReader) -> WorkloadOwner | None:
    meta = parse_meta(r, namespaced=True)
    spec = r.obj("spec", required=True)
    if meta is None or spec is None:
        return None
    replicas = count(spec, "replicas", 1)
    lwt = spec.obj("leaderWorkerTemplate", required=True)
    if lwt is None:
        return None
    size = lwt.integer("size", 1, minimum=1, maximum=MAX_PODS_PER_WORKLOAD) or 1
    worker = read_template(lwt, "workerTemplate")
    leader = read_template(lwt, "leaderTemplate") if lwt.has("leaderTemplate") else None
    if worker is None or (lwt.has("leaderTemplate") and leader is None):
        return None
    name = meta.name
    plans: list[WorkloadPlan] = []
    for g in range(replicas):
        if leader is not None:
            pod_sets = [PodSetPlan("leader", 1, leader, _member(name, g, 0)),
                        PodSetPlan("worker", size - 1, worker, _member(name, g, 1))]
        else:
            pod_sets = [PodSetPlan("main", size, worker, _member(name, g, 0))]
        plans.append(WorkloadPlan(f"{name}-{g}", pod_sets, group_index=g))
    queue, system = queue_label(meta.labels)
    owner = WorkloadOwner(meta=meta, rule=RULES[("leaderworkerset.x-k8s.io", "LeaderWorkerSet")], workloads=plans,
                          queue=queue_key(queue, system),
                          priority_class=(leader or worker).priority_class_name, labels=dict(meta.labels),
                          annotations=dict(meta.annotations))
    return owner if check_plan(r, owner, "spec.leaderWorkerTemplate.size") else None
