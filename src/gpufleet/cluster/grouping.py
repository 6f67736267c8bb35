"""Pods of the workload kinds into workloads: the grouping every driver uses (``plan``, ``simulate``, the live
scheduler).

An owner (a Job, a JobSet, a Deployment...; :mod:`gpufleet.api.workloadkinds`) plans the pods its controller would
create. Pods that exist already (in a snapshot, or live) and name an owner of the input by the labels its
controller puts on them (:data:`~gpufleet.api.workloadkinds.table.RULES`, ``owner_labels``) are *adopted*: each
takes the place of one planned pod of its pod set (its index when its labels carry one), keeping its own name,
node and phase, so a running Job and its bound pods count once. What happens to the planned pods no real pod
took depends on the caller:

* ``create_missing=True`` (``plan``, ``simulate``: the input describes what will exist): they are pods with the
  names the controller would give them;
* ``create_missing=False`` (the live scheduler: only pods that exist can be bound): they are left out, and a gang
  waits for all of its pods (``Workload.expected_pods``), as Kueue waits for a pod group; except where Kueue admits
  the group with its first pod (``KindRule.fast_admission``: StatefulSet, LeaderWorkerSet), whose controllers
  create a pod only once the one before it is ready. The workload then asks quota for all its pods and holds the
  pods that exist; the ones that come later join it.

Per-pod kinds (Deployment, ReplicaSet) give one workload per pod; per-group kinds (LeaderWorkerSet) one per group;
pod-group kinds (Volcano's and KAI's PodGroup) one of the pods that reference them.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from gpufleet.api.errors import Problems
from gpufleet.api.limits import MAX_PODS, PODS
from gpufleet.api.objects import Pod, PodTemplate
from gpufleet.api.reader import parse_int_text
from gpufleet.api.workloadkinds.model import KindRule, OwnerLabels, WorkloadOwner, WorkloadPlan
from gpufleet.api.workloadkinds.table import RULES, VOLCANO_GROUP_ANNOTATIONS
from gpufleet.cluster.workloads import PodSet, PriorityResolver, Workload, WorkloadPod, pod_sets_by_role

_TERMINAL = ("Succeeded", "Failed")
# The order in which a pod's labels are tried: a JobSet's pods carry a Job's labels too, a Volcano Job's pods
# the annotation of the PodGroup Volcano made for it, a RayJob's pods a RayCluster's.
_PRECEDENCE = (("jobset.x-k8s.io", "JobSet"), ("trainer.kubeflow.org", "TrainJob"), ("batch", "Job"),
               ("ray.io", "RayJob"), ("ray.io", "RayCluster"), ("batch.volcano.sh", "Job"))
_ORDER = [RULES[k] for k in _PRECEDENCE] + [r for k, r in RULES.items() if k not in _PRECEDENCE]
_HEAD_GROUP = "headgroup"  # the ray.io/group label of a Ray head pod


@dataclass(slots=True)
class Claim:
    """A real pod adopted by an owner: which workload (group), pod set and index it names, when it says."""

    pod: Pod
    pod_set: str | None = None
    index: int | None = None
    group_index: int | None = None


@dataclass(slots=True)
class Adoption:
    claims: dict[int, list[Claim]] = field(default_factory=lambda: defaultdict(list))  # id(owner) -> claims
    unclaimed: list[Pod] = field(default_factory=list)
    missing_groups: dict[tuple[str, str, str], list[Pod]] = field(default_factory=lambda: defaultdict(list))


def _index(owners: Iterable[WorkloadOwner]) -> dict[tuple[str, str, str, str], WorkloadOwner]:
    return {(o.rule.group, o.kind, o.namespace, o.meta.name): o for o in owners}


def _value(pod: Pod, labels: OwnerLabels, key: str | None) -> str | None:
    if key is None:
        return None
    source = pod.meta.annotations if labels.annotation and key == labels.name else pod.meta.labels
    return source.get(key)


def _int(text: str | None) -> int | None:
    value = parse_int_text(text) if text is not None else None
    return value if value is not None and value >= 0 else None


AppsIndex = dict[tuple[str, str], list[WorkloadOwner]]  # (namespace, name) -> Deployments, ReplicaSets, StatefulSets


def _find(pod: Pod, index: dict[tuple[str, str, str, str], WorkloadOwner],
          by_workload: dict[tuple[str, str], WorkloadOwner], apps: AppsIndex,
          rules: list[KindRule]) -> tuple[WorkloadOwner, Claim] | None:
    ns = pod.meta.namespace or "default"
    for rule in rules:
        for labels in rule.owner_labels:
            if any(pod.meta.labels.get(k) != v for k, v in labels.extra):
                continue
            said = _names_of(rule, pod) if rule.grouping == "pod-group" else {_value(pod, labels, labels.name)}
            for name in sorted(n for n in said if n):
                owner = index.get((rule.group, rule.kind, ns, name)) or _stand_in(rule, ns, name, index,
                                                                                   by_workload)
                if owner is None:
                    continue
                claim = Claim(pod, _value(pod, labels, labels.pod_set), _int(_value(pod, labels, labels.index)),
                              _int(_value(pod, labels, labels.group_index)))
                return owner, claim
    return _find_apps(pod, apps) if apps else None


def _names_of(rule: KindRule, pod: Pod) -> set[str]:
    keys = VOLCANO_GROUP_ANNOTATIONS if rule.queue_system == "volcano" else (rule.owner_labels[0].name,)
    return {pod.meta.annotations[k] for k in keys if pod.meta.annotations.get(k)}


def _stand_in(rule: KindRule, ns: str, name: str, index: dict[tuple[str, str, str, str], WorkloadOwner],
              by_workload: dict[tuple[str, str], WorkloadOwner]) -> WorkloadOwner | None:
    """The owner a label names through an object the input lacks: a CronJob's Job, a TrainJob's JobSet."""
    if rule.key == ("batch", "Job"):
        owner = by_workload.get((ns, name))
        return owner if owner is not None and owner.kind == "CronJob" else None
    if rule.key == ("jobset.x-k8s.io", "JobSet"):
        return index.get(("trainer.kubeflow.org", "TrainJob", ns, name))
    return None


_ORDINAL = re.compile(r"-([0-9]{1,9})$")


def _find_apps(pod: Pod, apps: AppsIndex) -> tuple[WorkloadOwner, Claim] | None:
    """A pod of a Deployment, ReplicaSet or StatefulSet: named after it (its name a prefix of the pod's, up to a
    dash: looked up, never searched) and selected by its selector."""
    ns = pod.meta.namespace or "default"
    name = pod.meta.name
    cut = name.find("-")
    while cut > 0:
        for owner in apps.get((ns, name[:cut]), ()):
            if owner.selector is None or not owner.selector.matches(pod.meta.labels):
                continue
            if owner.kind == "StatefulSet":
                m = _ORDINAL.search(name)
                if m is None or m.start() != cut:
                    continue
                return owner, Claim(pod, index=int(m.group(1)))
            if owner.kind == "Deployment" and "pod-template-hash" not in pod.meta.labels:
                continue
            return owner, Claim(pod)
        cut = name.find("-", cut + 1)
    return None


def adopt(pods: Iterable[Pod], owners: list[WorkloadOwner]) -> Adoption:
    """Which pods belong to which owner of the input; the others stay plain pods (or Kueue pod groups)."""
    index = _index(owners)
    by_workload = {(o.namespace, w.name): o for o in owners for w in o.workloads}
    apps: AppsIndex = defaultdict(list)
    for o in owners:
        if o.rule.group == "apps":
            apps[(o.namespace, o.meta.name)].append(o)
    # Only the kinds the input has an object of (or a stand-in for: a CronJob's Job, a TrainJob's JobSet) are
    # looked for: a live cluster's plain pods would otherwise each try every rule.
    present = {o.rule.key for o in owners}
    stand_ins = {("batch", "Job"): ("batch", "CronJob"), ("jobset.x-k8s.io", "JobSet"): ("trainer.kubeflow.org",
                                                                                          "TrainJob")}
    rules = [rule for rule in _ORDER if rule.key in present or stand_ins.get(rule.key) in present]
    out = Adoption()
    for pod in pods:
        found = _find(pod, index, by_workload, apps, rules)
        if found is not None:
            owner, claim = found
            out.claims[id(owner)].append(claim)
            continue
        group = _missing_pod_group(pod)
        if group is not None:
            out.missing_groups[group].append(pod)
        else:
            out.unclaimed.append(pod)
    return out


def _missing_pod_group(pod: Pod) -> tuple[str, str, str] | None:
    """A pod that names a Volcano or KAI PodGroup the input does not have: (system, namespace, group)."""
    for rule in (RULES[("scheduling.volcano.sh", "PodGroup")], RULES[("scheduling.run.ai", "PodGroup")]):
        names = _names_of(rule, pod)
        if names and not pod.meta.labels.get("volcano.sh/job-name"):
            return (rule.queue_system, pod.meta.namespace or "default", sorted(names)[0])
    return None


@dataclass(slots=True)
class Builder:
    """Turns owners (with the pods they adopted) into workloads, within the input's pod budget."""

    prio: PriorityResolver
    problems: Problems
    create_missing: bool
    pods_used: int = 0
    out: list[Workload] = field(default_factory=list)

    def owner(self, owner: WorkloadOwner, claims: list[Claim]) -> None:
        rule = owner.rule
        if rule.grouping == "pod-group":
            self._pod_group(owner, [c.pod for c in claims])
            return
        planned = owner.total_pods if self.create_missing else len(claims)
        if self.pods_used + planned > MAX_PODS:
            src = owner.meta.source
            self.problems.error(f"{owner.kind} {owner.key}: its {planned:,} pods would bring the input's workloads "
                                f"above {PODS.says()}; it is left out", file=src.file if src else None,
                                line=src.line if src else None, kind=owner.kind, name=owner.key,
                                fix="plan or simulate fewer workloads per run")
            return
        self.pods_used += planned
        by_group: dict[int | None, list[Claim]] = defaultdict(list)
        for c in claims:
            by_group[c.group_index if rule.grouping == "per-group" else None].append(c)
        for plan in owner.workloads:
            mine = by_group.get(plan.group_index if rule.grouping == "per-group" else None, [])
            if rule.grouping == "per-group" and plan.group_index == 0:
                mine = mine + by_group.get(None, [])  # a pod that says no group joins the first
            self._plan(owner, plan, mine)

    def _plan(self, owner: WorkloadOwner, plan: WorkloadPlan, claims: list[Claim]) -> None:
        slots = _slots(plan, claims)
        ns = owner.namespace
        pods: list[WorkloadPod] = []
        for ps, taken in zip(plan.pod_sets, slots, strict=True):
            for i, pod in enumerate(taken):
                if pod is not None:
                    pods.append(WorkloadPod(pod.key, pod.template, ps.name, pod.node_name, pod.phase))
                elif self.create_missing and i < ps.count:
                    pods.append(WorkloadPod(f"{ns}/{ps.pod_name(i)}", ps.template, ps.name))
        pod_sets = [PodSet(ps.name, max(ps.count, len(taken)), ps.template, ps.min_count)
                    for ps, taken in zip(plan.pod_sets, slots, strict=True)]
        if owner.rule.grouping == "per-pod":
            for wp in pods:
                name = wp.key.partition("/")[2]
                self._add(owner, plan, name, [PodSet(wp.pod_set, 1, wp.template)], [wp], None)
            return
        # A gang with a live pod on a node was admitted already: one pod missing now (being recreated) takes
        # nothing from it, its quota stays charged in full.
        running = any(p.node_name and p.phase not in _TERMINAL for p in pods)
        waits = not self.create_missing and not owner.rule.fast_admission and not running
        expected = sum(ps.count for ps in pod_sets) if waits else None
        self._add(owner, plan, plan.name, pod_sets, pods, expected)

    def _add(self, owner: WorkloadOwner, plan: WorkloadPlan, name: str, pod_sets: list[PodSet],
             pods: list[WorkloadPod], expected: int | None) -> None:
        if not pods and not self.create_missing:
            return
        template = pod_sets[0].template if pod_sets else PodTemplate({}, {}, {}, {})
        priority, pclass = self.prio.resolve_named(owner.labels, owner.priority_class, template)
        created = plan.created if plan.created is not None else owner.meta.creation_timestamp
        origin = owner.meta if plan.created is None else replace(owner.meta, creation_timestamp=plan.created)
        hold = owner.hold
        if hold is None and owner.suspended and owner.queue is None:
            hold = (f"suspended ({owner.rule.suspend}: true) and in no queue: its controller creates no pods until "
                    "it is resumed")
        self.out.append(Workload(
            key=f"{owner.namespace}/{name}", namespace=owner.namespace, name=name, kind=owner.kind,
            queue=owner.queue, priority=priority, priority_class=pclass,
            created=created if created is not None else float(owner.meta.order), pod_sets=pod_sets, pods=pods,
            labels=owner.labels, annotations=owner.annotations, backoff_limit=owner.backoff_limit,
            expected_pods=expected, order=owner.meta.order, gang=owner.rule.gang, hold=hold, origin=origin))

    def _pod_group(self, owner: WorkloadOwner, members: list[Pod]) -> None:
        if not members:
            src = owner.meta.source
            self.problems.warning(f"{owner.kind} {owner.key} has no pods in the input: pods join it by the annotation "
                                  f"{owner.rule.owner_labels[0].name}: {owner.meta.name}; nothing is planned",
                                  file=src.file if src else None, line=src.line if src else None, kind=owner.kind,
                                  name=owner.key, fix="add its pods, or remove it")
            return
        self.pods_used += len(members)
        self.group_of_pods(owner.namespace, owner.meta.name, members, owner=owner)

    def group_of_pods(self, ns: str, name: str, members: list[Pod], *, owner: WorkloadOwner | None = None,
                      hold: str | None = None, queue: str | None = None) -> None:
        """One gang of the pods that reference a pod group, pod sets by role as Kueue forms them."""
        pod_sets, pods = pod_sets_by_role(members)
        if owner is not None and owner.min_member is not None:
            _min_total(pod_sets, owner.min_member)
        first = members[0]
        labels = owner.labels if owner is not None else first.meta.labels
        priority, pclass = self.prio.resolve_named(labels, owner.priority_class if owner else None, first.template)
        created = min((m.meta.creation_timestamp if m.meta.creation_timestamp is not None else float(m.meta.order))
                      for m in members)
        self.out.append(Workload(
            key=f"{ns}/{name}", namespace=ns, name=name, kind="PodGroup",
            queue=owner.queue if owner is not None else queue, priority=priority, priority_class=pclass,
            created=created, pod_sets=pod_sets, pods=pods, labels=labels,
            annotations=owner.annotations if owner is not None else first.meta.annotations,
            order=min(m.meta.order for m in members), gang=True,
            hold=hold or (owner.hold if owner is not None else None),
            origin=owner.meta if owner is not None else first.meta))


def _min_total(pod_sets: list[PodSet], min_total: int) -> None:
    spare = sum(ps.count for ps in pod_sets) - min_total
    for ps in reversed(pod_sets):
        if spare <= 0:
            break
        give = min(spare, ps.count)
        ps.min_count = ps.count - give
        spare -= give


def _slots(plan: WorkloadPlan, claims: list[Claim]) -> list[list[Pod | None]]:
    """The planned pods of each pod set, a claiming pod in the place its labels name (else the first free one);
    live pods before finished ones, which only fill places still free (their own, when they name one)."""
    slots: list[list[Pod | None]] = [[None] * ps.count for ps in plan.pod_sets]
    names = {ps.name: i for i, ps in enumerate(plan.pod_sets)}
    ordered = sorted(claims, key=lambda c: (c.pod.phase in _TERMINAL, c.pod.meta.order))
    overflow: list[tuple[int, Pod]] = []
    for c in ordered:
        at = _pod_set_of(plan, names, c)
        row = slots[at]
        if c.index is not None and c.index < len(row) and row[c.index] is None:
            row[c.index] = c.pod
            continue
        if c.pod.phase in _TERMINAL and c.index is not None:
            continue  # a finished pod whose place a live one holds (a retry): it holds nothing
        free = next((i for i, p in enumerate(row) if p is None), None)
        if free is not None:
            row[free] = c.pod
        elif c.pod.phase not in _TERMINAL:
            overflow.append((at, c.pod))  # more live pods than planned (a scale-up under way): kept, counted
    for at, pod in overflow:
        slots[at].append(pod)
    return slots


def _pod_set_of(plan: WorkloadPlan, names: dict[str, int], c: Claim) -> int:
    said = (c.pod_set or "").lower()
    if said == _HEAD_GROUP:
        said = "head"
    if said in names:
        return names[said]
    if c.index is not None and "leader" in names and c.index == 0:
        return names["leader"]
    if "worker" in names and "leader" in names:
        return names["worker"]
    return 0


def pod_group_hold(system: str, name: str) -> str:
    who = "Volcano" if system == "volcano" else "KAI"
    return f"its pods name {who} PodGroup {name}, which is not in the input; {who} waits for it"
