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

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpufleet.api.errors import Problems
from gpufleet.api.limits import MAX_PODS, MAX_PODS_PER_WORKLOAD, PODS
from gpufleet.api.manifests import Manifests
from gpufleet.api.objects import (
    KUEUE_PRIORITY_LABEL,
    KUEUE_QUEUE_LABEL,
    POD_GROUP_COUNT_ANNOTATION,
    POD_GROUP_LABEL,
    Admission,
    ObjectMeta,
    Pod,
    PodTemplate,
    ResourceList,
)
from gpufleet.api.reader import parse_int_text
from gpufleet.api.workloadkinds.common import pod_queue, queue_key
from gpufleet.api.workloadkinds.kueuefeatures import hold_reason
from gpufleet.cluster.dra_claims import resolve_workload_claims
from gpufleet.cluster.dra_quota import ClaimCharge, claim_quota


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
    # (gpufleet.cluster.dra_quota): quota only, never asked of a node's allocatable.
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


def _created(meta: ObjectMeta) -> float:
    """creationTimestamp, or the document position when absent (so input order is queue order)."""
    return meta.creation_timestamp if meta.creation_timestamp is not None else float(meta.order)


def build_workloads(manifests: Manifests, problems: Problems | None = None, *,
                    create_missing: bool = True) -> list[Workload]:
    """Every workload of the manifests, in input order.

    ``create_missing``: the pods an owner of the input (a Job, a JobSet...) plans and no pod of the input stands
    for are created with the names their controller would give them (``plan``, ``simulate``); False leaves them
    out and makes a gang wait for them (the live scheduler, which binds only pods that exist; see
    :mod:`gpufleet.cluster.grouping`)."""
    from gpufleet.cluster import grouping

    problems = problems if problems is not None else manifests.problems
    prio = PriorityResolver(manifests)
    owners = manifests.controllers.owners
    adoption = grouping.adopt(manifests.pods, owners)
    builder = grouping.Builder(prio, problems, create_missing, pods_used=len(manifests.pods))
    out = builder.out
    loose = adoption.unclaimed
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, pod in enumerate(loose):
        group = pod.meta.labels.get(POD_GROUP_LABEL)
        if group is not None:
            groups[(pod.meta.namespace or "default", group)].append(i)
            continue
        t = pod.template
        priority, pclass = prio.resolve(pod.meta.labels, t)
        out.append(Workload(
            key=pod.key, namespace=pod.meta.namespace or "default", name=pod.meta.name, kind="Pod",
            queue=queue_of(pod.meta.labels, pod.meta.annotations, t.scheduler_name), priority=priority,
            priority_class=pclass,
            created=_created(pod.meta), pod_sets=[PodSet("main", 1, t)],
            pods=[WorkloadPod(pod.key, t, "main", pod.node_name, pod.phase)],
            labels=pod.meta.labels, annotations=pod.meta.annotations, order=pod.meta.order, gang=False,
            origin=pod.meta))
    for (ns, group), indices in groups.items():
        members = [loose[i] for i in indices]
        first = members[0]
        counts = {m.meta.annotations.get(POD_GROUP_COUNT_ANNOTATION) for m in members}
        total: int | None = None
        declared = parse_int_text(str(next(iter(counts)))) if len(counts) == 1 and None not in counts else None
        if declared is None or not 0 < declared <= MAX_PODS_PER_WORKLOAD:
            src = first.meta.source
            problems.error(
                f"pod group {ns}/{group}: every member needs the same {POD_GROUP_COUNT_ANNOTATION} annotation",
                file=src.file if src else None, line=src.line if src else None, kind="Pod", name=first.key,
                field=f"metadata.annotations.{POD_GROUP_COUNT_ANNOTATION}",
                fix=f'set {POD_GROUP_COUNT_ANNOTATION}: "{len(members)}" on every pod of the group')
            continue
        total = declared
        queues = {queue_of(m.meta.labels, m.meta.annotations, m.template.scheduler_name) for m in members}
        if len(queues) > 1:
            src = first.meta.source
            problems.error(f"pod group {ns}/{group}: members name different queues ({', '.join(map(str, queues))})",
                           file=src.file if src else None, line=src.line if src else None, kind="Pod",
                           name=first.key, field=f"metadata.labels.{KUEUE_QUEUE_LABEL}",
                           fix="give every pod of the group the same queue label")
            continue
        pod_sets, pods = pod_sets_by_role(members)
        priority, pclass = prio.resolve(first.meta.labels, first.template)
        created = min(_created(m.meta) for m in members)
        order = min(m.meta.order for m in members)
        out.append(Workload(
            key=f"{ns}/{group}", namespace=ns, name=group, kind="PodGroup", queue=queues.pop(),
            priority=priority, priority_class=pclass, created=created, pod_sets=pod_sets, pods=pods,
            labels=first.meta.labels, annotations=first.meta.annotations, expected_pods=total, order=order,
            origin=first.meta))
    for (system, ns, name), members in adoption.missing_groups.items():
        first = members[0]
        builder.group_of_pods(ns, name, members, hold=grouping.pod_group_hold(system, name),
                              queue=queue_of(first.meta.labels, first.meta.annotations, first.template.scheduler_name))
    for owner in owners:
        builder.owner(owner, adoption.claims.get(id(owner), []))
    for wl in manifests.workloads:
        ns = wl.meta.namespace or "default"
        pod_sets = [PodSet(ps.name, ps.count, ps.template, ps.min_count) for ps in wl.pod_sets]
        pods = [WorkloadPod(f"{ns}/{wl.meta.name}-{ps.name}-{i}", ps.template, ps.name)
                for ps in pod_sets for i in range(ps.count)]
        if wl.priority is not None:
            priority, pclass = wl.priority, wl.priority_class_name
        elif wl.priority_class_name in prio.wpc:
            priority, pclass = prio.wpc[wl.priority_class_name or ""], wl.priority_class_name
        elif wl.priority_class_name in prio.pc:
            priority, pclass = prio.pc[wl.priority_class_name or ""], wl.priority_class_name
        else:
            priority, pclass = prio.resolve(wl.meta.labels, pod_sets[0].template) if pod_sets else (0, None)
        out.append(Workload(
            key=wl.meta.key, namespace=ns, name=wl.meta.name, kind="Workload", queue=wl.queue_name,
            priority=priority, priority_class=pclass, created=_created(wl.meta), pod_sets=pod_sets,
            pods=pods, admission=wl.admission, labels=wl.meta.labels, annotations=wl.meta.annotations,
            active=wl.active, order=wl.meta.order, uid=wl.meta.uid, gang=sum(ps.count for ps in pod_sets) > 1,
            origin=wl.meta))
    from gpufleet.cluster.kueue_objects import fold_kueue_workloads

    out[:] = fold_kueue_workloads(out)  # a Kueue Workload object and the Job (pods...) it stands for: counted once
    _hold_for_admission_checks(out, manifests, problems)
    resolve_workload_claims(out, manifests)  # DRA: each pod's claims become its GPU demand and allowed devices
    claim_quota(out, manifests)  # ... and their devices are charged to quota as Kueue's deviceClassMappings say
    _unique_keys(out, problems)
    out.sort(key=lambda w: w.order)
    return _within_pod_limit(out, problems)


DEFAULT_LOCAL_QUEUE = "default"  # Kueue's default LocalQueue: a workload without a queue label goes there


def _hold_for_admission_checks(workloads: list[Workload], manifests: Manifests, problems: Problems) -> None:
    """Hold back the workloads whose ClusterQueue has admission checks that are not Ready for them."""
    checks = manifests.controllers
    if not checks.cluster_queue_checks:
        return
    lqs = {(lq.meta.namespace or "default", lq.meta.name): lq.cluster_queue for lq in manifests.local_queues}
    for w in workloads:
        if w.hold is not None:
            continue
        name = w.queue if w.queue is not None else (
            DEFAULT_LOCAL_QUEUE if (w.namespace, DEFAULT_LOCAL_QUEUE) in lqs else None)
        cq = lqs.get((w.namespace, name)) if name is not None else None
        if cq is None:
            continue
        reason = hold_reason(cq, w.key if w.kind == "Workload" else None, checks)
        if reason is None:
            continue
        if w.admission is None:
            w.hold = reason
        else:
            src = w.origin.source if w.origin else None
            problems.warning(f"its quota is reserved in ClusterQueue {w.admission.cluster_queue}, but it is "
                             f"{reason}: its pods start once the checks are Ready",
                             file=src.file if src else None, line=src.line if src else None, kind=w.kind,
                             name=w.key, fix="nothing to do; gpufleet counts its quota as reserved")


def _unique_keys(workloads: list[Workload], problems: Problems) -> None:
    """Two workloads of one name (a Job and a JobSet both named ``train``) get told apart by their kind."""
    seen: set[str] = set()
    for w in workloads:
        if w.key in seen:
            old = w.key
            w.name = f"{w.kind.lower()}-{w.name}"
            w.key = f"{w.namespace}/{w.name}"
            src = w.origin.source if w.origin else None
            problems.warning(f"another workload is named {old}: this {w.kind}'s workload is called {w.key}",
                             file=src.file if src else None, line=src.line if src else None, kind=w.kind,
                             name=old, fix="give the objects different names")
        seen.add(w.key)


def _within_pod_limit(workloads: list[Workload], problems: Problems) -> list[Workload]:
    """The workloads, in order, while their pods stay within gpufleet's limit per input; the rest are refused
    with an error each (their objects were valid, but together they are more than a run may hold)."""
    kept: list[Workload] = []
    total = 0
    for w in workloads:
        total += len(w.pods)
        if total > MAX_PODS:
            problems.error(f"{w.kind} {w.key}: the input's workloads hold more than {MAX_PODS:,} pods together: "
                           f"{PODS.says()}; this workload is left out", kind=w.kind, name=w.key,
                           fix="plan or simulate fewer workloads per run")
            continue
        kept.append(w)
    return kept


def index_by_key(workloads: Iterable[Workload]) -> dict[str, Workload]:
    return {w.key: w for w in workloads}
