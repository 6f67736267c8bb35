"""Building the workloads of an input (``build_workloads``): single pods, pod groups, the workload kinds'
workloads (:mod:`gpufleet.cluster.grouping`), Kueue Workload objects, then the holds and DRA claims on them.

The workload types are in :mod:`gpufleet.cluster.workloads`; this module puts them together, so neither that module
nor the grouping of pods by their owners imports the other's caller.
"""

from __future__ import annotations

from collections import defaultdict

from gpufleet.api.errors import Problems
from gpufleet.api.limits import MAX_PODS, MAX_PODS_PER_WORKLOAD, PODS
from gpufleet.api.manifests import Manifests
from gpufleet.api.objects import KUEUE_QUEUE_LABEL, POD_GROUP_COUNT_ANNOTATION, POD_GROUP_LABEL, ObjectMeta
from gpufleet.api.reader import parse_int_text
from gpufleet.api.workloadkinds.kueuefeatures import hold_reason
from gpufleet.cluster import grouping
from gpufleet.cluster.dra_claims import DraCatalog, resolve_workload_claims
from gpufleet.cluster.dra_quota import claim_quota
from gpufleet.cluster.kueue_objects import fold_kueue_workloads
from gpufleet.cluster.workloads import (
    DEFAULT_LOCAL_QUEUE,
    PodSet,
    PriorityResolver,
    Workload,
    WorkloadPod,
    pod_sets_by_role,
    queue_of,
)


def _created(meta: ObjectMeta) -> float:
    """creationTimestamp, or the document position when absent (so input order is queue order)."""
    return meta.creation_timestamp if meta.creation_timestamp is not None else float(meta.order)


def build_workloads(manifests: Manifests, problems: Problems | None = None, *,
                    create_missing: bool = True, dra_catalog: DraCatalog | None = None) -> list[Workload]:
    """Every workload of the manifests, in input order.

    ``create_missing``: the pods an owner of the input (a Job, a JobSet...) plans and no pod of the input stands
    for are created with the names their controller would give them (``plan``, ``simulate``); False leaves them
    out and makes a gang wait for them (the live scheduler, which binds only pods that exist; see
    :mod:`gpufleet.cluster.grouping`)."""
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
    out[:] = fold_kueue_workloads(out)  # a Kueue Workload object and the Job (pods...) it stands for: counted once
    _hold_for_admission_checks(out, manifests, problems)
    # DRA: each pod's claims become its GPU demand and allowed devices (live: only claims that exist)
    resolve_workload_claims(out, manifests, live=not create_missing, catalog=dra_catalog)
    claim_quota(out, manifests)  # ... and their devices are charged to quota as Kueue's deviceClassMappings say
    _unique_keys(out, problems)
    out.sort(key=lambda w: w.order)
    return _within_pod_limit(out, problems)




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
