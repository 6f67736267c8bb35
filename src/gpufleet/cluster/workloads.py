"""Workloads: the unit of admission, built from Pods, pod groups, the workload kinds and Kueue Workload objects.

* a Pod with no group label is a workload of one pod;
* Pods labelled ``kueue.x-k8s.io/pod-group-name`` (with ``kueue.x-k8s.io/pod-group-total-count``) form one
  workload named after the group; identical pods form one pod set (Kueue's role hash);
* the workload kinds (Job, JobSet, Deployment, PyTorchJob, RayCluster, LeaderWorkerSet, Volcano and KAI kinds...)
  form the workloads Kueue's integration for each forms, as :mod:`gpufleet.cluster.grouping` builds them
  (what each kind means is in :mod:`gpufleet.api.workloadkinds.table`); pods of the input that one of them owns
  are adopted by it, not counted twice;
* a ``kueue.x-k8s.io`` Workload is taken as written, its ``status.admission`` holding quota when present.

A workload Kueue would hold back (its ClusterQueue's admission checks are not Ready, MultiKueue dispatches it
elsewhere, it is suspended outside any queue) carries the reason in ``hold`` and stays pending with it.

The workload's priority follows Kueue: WorkloadPriorityClass (label ``kueue.x-k8s.io/priority-class``), then
the pod's PriorityClass, then the global-default PriorityClass, else 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gpufleet.api.manifests import Manifests
from gpufleet.api.objects import (
    KUEUE_PRIORITY_LABEL,
    Admission,
    ObjectMeta,
    Pod,
    PodTemplate,
    ResourceList,
)
from gpufleet.api.workloadkinds.common import pod_queue, queue_key
from gpufleet.cluster.dra_quota import ClaimCharge


@dataclass(slots=True)
class WorkloadPod:
    key: str  # namespace/name
    template: PodTemplate
    pod_set: str
    node_name: str | None = None  # already bound (from the manifest's spec.nodeName)
    phase: str = "Pending"


@dataclass(slots=True)
class PodSet:
    name: str
    count: int
    template: PodTemplate
    min_count: int | None = None
    # What its DRA claims add to each pod's quota, as Kueue's deviceClassMappings charge them
    # (gpufleet.cluster.dra_quota): quota only (placement counts the claimed devices its own way).
    claim_charges: tuple[ClaimCharge, ...] = ()

    @property
    def requests(self) -> ResourceList:
        return self.template.requests

    @property
    def quota_requests(self) -> ResourceList:
        """What one pod is charged against ClusterQueue quota: its requests and its claims' charges."""
        if not self.claim_charges:
            return self.template.requests
        out = dict(self.template.requests)
        for c in self.claim_charges:
            out[c.resource] = out.get(c.resource, 0) + c.count
        return out


@dataclass(slots=True)
class Workload:
    key: str  # namespace/name
    namespace: str
    name: str
    kind: str  # Pod, PodGroup, Workload, or the workload kind it comes from (Job, JobSet, Deployment...)
    queue: str | None  # LocalQueue name
    priority: int
    created: float
    pod_sets: list[PodSet]
    pods: list[WorkloadPod]
    priority_class: str | None = None
    admission: Admission | None = None
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    backoff_limit: int = 0
    expected_pods: int | None = None  # a pod group's declared total count
    active: bool = True  # a Kueue Workload with spec.active false is never admitted
    order: int = 0  # input order, the last tie-breaker
    uid: str | None = None  # a Kueue Workload's metadata.uid (Kueue's last tie-breaker among preemption candidates)
    gang: bool = True  # its pods are admitted and placed together (False: a per-pod workload of a serving kind)
    hold: str | None = None  # why Kueue would not admit it as it stands: it stays pending with this reason
    # Why its DRA claims are charged to no quota although Kueue manages it (Kueue's DRA integration is off)
    claim_quota_note: str | None = None
    origin: ObjectMeta | None = None  # the object it comes from (its file and line, its creation time)
    # When the Bindings of its pods found running were sent, as the scheduler recorded it on them: a policy built
    # afresh admits it then (Kueue orders preemption candidates by admission time), as the one that bound it did;
    # None: at its creation
    bound_at: float | None = None

    @property
    def size(self) -> int:
        return sum(ps.count for ps in self.pod_sets)

    @property
    def complete(self) -> bool:
        """A pod group is composed only once all its pods exist (Kueue without fast admission)."""
        return self.expected_pods is None or len(self.pods) >= self.expected_pods

    def total_requests(self) -> ResourceList:
        out: ResourceList = {}
        for ps in self.pod_sets:
            for r, v in ps.requests.items():
                out[r] = out.get(r, 0) + v * ps.count
        return out

    @property
    def gpu_equivalent(self) -> float:
        return sum(ps.template.gpu.gpu_equivalent * ps.count for ps in self.pod_sets)


class PriorityResolver:
    def __init__(self, manifests: Manifests) -> None:
        self.wpc = {w.meta.name: w.value for w in manifests.workload_priority_classes}
        self.pc = {p.meta.name: p.value for p in manifests.priority_classes}
        defaults = [p.value for p in manifests.priority_classes if p.global_default]
        self.default = min(defaults) if defaults else 0

    def resolve(self, labels: dict[str, str], template: PodTemplate) -> tuple[int, str | None]:
        wpc = labels.get(KUEUE_PRIORITY_LABEL)
        if wpc is not None and wpc in self.wpc:
            return self.wpc[wpc], wpc
        if template.priority_class_name and template.priority_class_name in self.pc:
            return self.pc[template.priority_class_name], template.priority_class_name
        if template.priority is not None:
            return template.priority, None
        return self.default, None

    def resolve_named(self, labels: dict[str, str], class_name: str | None,
                      template: PodTemplate) -> tuple[int, str | None]:
        """As :meth:`resolve`, with a PriorityClass the workload's kind names itself (Kubeflow's
        ``runPolicy.schedulingPolicy.priorityClass``, Volcano's ``priorityClassName``) before the pod's."""
        wpc = labels.get(KUEUE_PRIORITY_LABEL)
        if (wpc is None or wpc not in self.wpc) and class_name and class_name in self.pc:
            return self.pc[class_name], class_name
        return self.resolve(labels, template)


def queue_of(labels: dict[str, str], annotations: dict[str, str] | None = None,
             scheduler_name: str | None = None) -> str | None:
    """The LocalQueue a pod's (or an object's) labels and annotations name: Kueue's label, gpufleet's, KAI's or
    Volcano's (as the LocalQueue ``kai:<queue>`` or ``volcano:<queue>`` its KAI or Volcano Queue is read as); for
    a pod of ``scheduler_name`` volcano naming none, Volcano's queue ``default``."""
    name, system = pod_queue(labels, annotations or {}, scheduler_name)
    return queue_key(name, system)


def role_key(t: PodTemplate) -> tuple[object, ...]:
    """What makes two pods of a group the same role (Kueue's role hash): one pod set."""
    return (tuple(sorted(t.requests.items())), tuple(sorted(t.node_selector.items())), t.required_affinity,
            t.tolerations, t.gpu)


def pod_sets_by_role(members: Iterable[Pod]) -> tuple[list[PodSet], list[WorkloadPod]]:
    """A group's pods as Kueue forms its pod sets: one per role (:func:`role_key`), named role-0, role-1... in the
    order roles first appear, and each pod in its role's set."""
    sets: dict[tuple[object, ...], PodSet] = {}
    pods: list[WorkloadPod] = []
    for m in members:
        key = role_key(m.template)
        if key not in sets:
            sets[key] = PodSet(f"role-{len(sets)}", 0, m.template)
        sets[key].count += 1
        pods.append(WorkloadPod(m.key, m.template, sets[key].name, m.node_name, m.phase))
    return list(sets.values()), pods


DEFAULT_LOCAL_QUEUE = "default"  # Kueue's default LocalQueue: a workload without a queue label goes there


def index_by_key(workloads: Iterable[Workload]) -> dict[str, Workload]:
    return {w.key: w for w in workloads}
