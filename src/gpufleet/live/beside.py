"""Beside Kueue: Kueue's own controller admits (quota, fair sharing, preemption), gpufleet places.

Kueue reserves quota for a Workload (``status.admission``: the ClusterQueue and, per pod set, the flavor of
each resource), runs its AdmissionChecks, and once every check is Ready admits it: it removes its pods'
scheduling gate or unsuspends its Job, with the flavors' node labels injected. Our pods
(``spec.schedulerName`` gpufleet) of an admitted Workload are then placed here, on the nodes the flavors
allow (their node labels and tolerations are applied from ``status.admission`` again, so a pod that lacks them
cannot land elsewhere), on real devices: whole GPUs, MIG instances, replicas, fractions, with the gang and
topology rules of the placement engine.

**The AdmissionCheck** ``gpufleet.io/placement``: an AdmissionCheck object whose ``spec.controllerName`` is
ours is marked ``Active``; for every Workload whose quota is reserved and whose state for such a check is
``Pending``, each cycle asks whether *every* pod of it fits on the cluster now, next to what is running and what
other Workloads already hold. The answer becomes the check's state:

* fits: ``Ready``. From then on the Workload's pods are counted as placed in every cycle (a reservation), so
  that capacity promised to it is not promised again while its Job is being started;
* does not fit now, but would on the empty cluster: ``Pending``, with the reason (Kueue keeps the quota
  reserved and the Workload waits for capacity, not for quota);
* would not fit even on the empty cluster (every node as if idle, cordoned and not-ready ones included):
  ``Rejected``, with the reason (Kueue deactivates it: it would never run).

Without the check, gpufleet places what Kueue admitted as soon as its pods appear; a gang admitted by quota alone
may then wait, unplaceable, holding its quota: the check is what prevents that.

Pods gpufleet places here and that belong to no Workload: pods Kueue does not manage (no queue label, no
Workload annotation) are placed as the standalone scheduler places them, without quota; pods that Kueue manages
but has not admitted wait.

Not done here, said plainly: quota, preemption and waitForPodsReady (Kueue's); ``Retry`` (a Pending check
never turns into Retry by itself); ``podSetUpdates`` (none are proposed); topology-aware scheduling's
``topologyAssignment`` (the placement engine chooses the nodes itself, within the flavor).
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpufleet.api.errors import Problems
from gpufleet.api.manifests import Manifests, build
from gpufleet.api.objects import KUEUE_QUEUE_LABEL, KueueWorkload, Node, PodTemplate, ResourceFlavor
from gpufleet.cluster.build import build_workloads
from gpufleet.cluster.state import ClusterState
from gpufleet.cluster.workloads import PodSet, Workload, WorkloadPod
from gpufleet.k8s import resources as r
from gpufleet.k8s.informer import CacheSnapshot
from gpufleet.k8s.parsing import document
from gpufleet.live import planner
from gpufleet.live.world import PodEntry, World
from gpufleet.scheduling.kueue import KueuePolicy, engine_placer_factory

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]

WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"  # on the pods of a Job Kueue started: its Workload's name
PODSET_LABEL = "kueue.x-k8s.io/podset"  # on those pods: their pod set
ROLE_HASH_ANNOTATION = "kueue.x-k8s.io/role-hash"  # on plain pods of a group: their pod set
MANAGED_LABEL = "kueue.x-k8s.io/managed"  # plain pods Kueue manages
PENDING, READY, RETRY, REJECTED = "Pending", "Ready", "Retry", "Rejected"
_SYNTHETIC = "@"  # in the key of a pod that does not exist yet: never a pod name, so never bound


def _stamp(now: float) -> str:
    return dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _conditions(obj: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for c in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type"):
            out[str(c["type"])] = str(c.get("status"))
    return out


def _checks(obj: Mapping[str, Any]) -> dict[str, JsonDict]:
    out: dict[str, JsonDict] = {}
    for c in (obj.get("status") or {}).get("admissionChecks") or []:
        if isinstance(c, Mapping) and c.get("name"):
            out[str(c["name"])] = dict(c)
    return out


def _owner_uids(obj: Mapping[str, Any], *, controller_only: bool = False) -> set[str]:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return {str(o["uid"]) for o in refs if isinstance(o, Mapping) and o.get("uid")
            and (not controller_only or o.get("controller"))}


@dataclass(slots=True)
class KueueEntry:
    """One Kueue Workload this cycle looks at."""

    key: str
    raw: JsonDict
    workload: KueueWorkload
    check: str | None  # the name of our AdmissionCheck on it, when it has one
    state: str | None  # that check's state
    committed: bool  # admitted, or our check Ready: its pods hold their places
    pods: list[PodEntry] = field(default_factory=list)  # our live pods of it


@dataclass(slots=True)
class Verdict:
    entry: KueueEntry
    state: str
    message: str


@dataclass(slots=True)
class BesidePlan:
    plan: planner.Plan
    verdicts: list[Verdict]
    checks: list[JsonDict]  # our AdmissionCheck objects


class WorkloadParses:
    """Kueue Workloads parsed by the manifest parser, memoised by resourceVersion."""

    def __init__(self) -> None:
        self._memo: dict[str, tuple[str, KueueWorkload | None]] = {}

    def get(self, key: str, obj: Mapping[str, Any]) -> KueueWorkload | None:
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        hit = self._memo.get(key)
        if hit is not None and rv and hit[0] == rv:
            return hit[1]
        parsed = build([document(obj)], Problems())
        wl = parsed.workloads[0] if parsed.workloads else None
        if wl is None:
            log.warning("Kueue Workload %s does not parse: %s", key,
                        "; ".join(str(e) for e in parsed.problems.errors) or "unknown reason")
        self._memo[key] = (rv, wl)
        return wl

    def forget_except(self, live: Mapping[str, Any]) -> None:
        for key in [k for k in self._memo if k not in live]:
            del self._memo[key]


def our_checks(snapshot: CacheSnapshot, controller: str) -> list[JsonDict]:
    return [obj for _, obj in sorted(snapshot.of(r.KUEUE_ADMISSION_CHECKS).items())
            if (obj.get("spec") or {}).get("controllerName") == controller]


def entries(snapshot: CacheSnapshot, world: World, controller: str, parses: WorkloadParses) -> list[KueueEntry]:
    """The Kueue Workloads whose quota is reserved and that are not finished, evicted or deactivated, with our
    live pods matched to them (module doc)."""
    names = {str((c.get("metadata") or {}).get("name")) for c in our_checks(snapshot, controller)}
    raw = snapshot.of(r.KUEUE_WORKLOADS)
    parses.forget_except(raw)
    out: list[KueueEntry] = []
    for key, obj in sorted(raw.items()):
        conds = _conditions(obj)
        if conds.get("Finished") == "True" or conds.get("Evicted") == "True":
            continue
        if (obj.get("spec") or {}).get("active") is False or not (obj.get("status") or {}).get("admission"):
            continue
        wl = parses.get(key, obj)
        if wl is None or wl.admission is None:
            continue
        checks = _checks(obj)
        check = next((n for n in checks if n in names), None)
        state = str(checks[check].get("state")) if check is not None else None
        committed = conds.get("Admitted") == "True" or state == READY
        if not committed and state != PENDING:
            continue  # Kueue has not admitted it, and it waits on no check of ours
        out.append(KueueEntry(key, obj, wl, check, state, committed))
    _match_pods(out, world)
    return out


def _match_pods(found: list[KueueEntry], world: World) -> None:
    by_name = {e.key: e for e in found}
    by_owner: dict[str, KueueEntry] = {}
    for e in found:
        for uid in _owner_uids(e.raw):
            by_owner[uid] = e
    for pod in world.pods.values():
        if not pod.ours or pod.pod is None or pod.terminal:
            continue
        meta = pod.raw.get("metadata") or {}
        named = (meta.get("annotations") or {}).get(WORKLOAD_ANNOTATION)
        entry = by_name.get(f"{pod.namespace}/{named}") if named else None
        if entry is None and pod.uid is not None:
            entry = by_owner.get(pod.uid)  # a plain pod (or a pod group's member) the Workload is owned by
        if entry is None:
            entry = next((by_owner[u] for u in _owner_uids(pod.raw, controller_only=True) if u in by_owner), None)
        if entry is not None and entry.key.split("/", 1)[0] == pod.namespace:
            entry.pods.append(pod)


def kueue_managed(pod: PodEntry) -> bool:
    """Whether Kueue manages this pod (it then runs only once Kueue admitted its Workload)."""
    meta = pod.raw.get("metadata") or {}
    labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    return bool(labels.get(KUEUE_QUEUE_LABEL) or labels.get(MANAGED_LABEL) == "true" or labels.get(PODSET_LABEL)
                or notes.get(WORKLOAD_ANNOTATION))


def _with_flavors(template: PodTemplate, flavors: list[ResourceFlavor]) -> PodTemplate:
    """``template`` as Kueue starts it: the flavors' node labels in its node selector, their tolerations added."""
    selector = dict(template.node_selector)
    tolerations = list(template.tolerations)
    for f in flavors:
        selector.update(f.node_labels)
        tolerations += [t for t in f.tolerations if t not in tolerations]
    return replace(template, node_selector=selector, tolerations=tuple(tolerations))


def _pod_set_of(pod: PodEntry, wl: KueueWorkload) -> str:
    meta = pod.raw.get("metadata") or {}
    names = [ps.name for ps in wl.pod_sets]
    labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    for value in (labels.get(PODSET_LABEL), notes.get(ROLE_HASH_ANNOTATION)):
        if value in names:
            return str(value)
    if pod.pod is not None:
        for ps in wl.pod_sets:
            if ps.template.requests == pod.pod.template.requests:
                return ps.name
    return names[0]


def as_workload(entry: KueueEntry, flavors: Mapping[str, ResourceFlavor], *, bindable: bool) -> Workload | None:
    """What of ``entry`` is still to be placed, as a workload without quota (Kueue holds it): its live unbound
    pods when ``bindable`` (and ungated), and placeholders for the pods not created yet. None when all are bound."""
    wl = entry.workload
    assert wl.admission is not None
    assigned = {a.name: a for a in wl.admission.pod_set_assignments}
    pods_by_set: dict[str, list[PodEntry]] = {}
    for p in entry.pods:
        pods_by_set.setdefault(_pod_set_of(p, wl), []).append(p)
    ns, name = entry.key.split("/", 1)
    pod_sets: list[PodSet] = []
    pods: list[WorkloadPod] = []
    for ps in wl.pod_sets:
        a = assigned.get(ps.name)
        chosen = [flavors[f] for f in sorted(set(a.flavors.values())) if f in flavors] if a else []
        count = (a.count if a is not None and a.count else ps.count)
        live = pods_by_set.get(ps.name, [])
        placed = [p for p in live if p.node is not None]
        waiting = [p for p in live if p.node is None and not p.deleting and not p.gated and bindable]
        missing = max(0, count - len(placed) - len(waiting))
        members = [WorkloadPod(p.key, _with_flavors(p.pod.template, chosen), ps.name) for p in waiting
                   if p.pod is not None]
        template = _with_flavors(ps.template, chosen)
        members += [WorkloadPod(f"{ns}/{name}{_SYNTHETIC}{ps.name}-{i}", template, ps.name) for i in range(missing)]
        if members:
            pod_sets.append(PodSet(ps.name, len(members), template))
            pods += members
    if not pods:
        return None
    reserved = wl.admission.quota_reserved_at
    created = reserved if reserved is not None else (wl.meta.creation_timestamp or float(wl.meta.order))
    return Workload(key=entry.key, namespace=ns, name=name, kind="Workload", queue=None,
                    priority=wl.priority or 0, priority_class=wl.priority_class_name, created=created,
                    pod_sets=pod_sets, pods=pods, labels=dict(wl.meta.labels), uid=wl.meta.uid)


def _unmanaged(world: World) -> list[Workload]:
    """Our pods that Kueue does not manage, as the standalone scheduler reads them (no queue: no quota)."""
    chosen = [e.pod for e in world.pods.values() if e.ours and e.pod is not None and not e.gated
              and not (e.deleting and e.node is None) and not (e.node is None and e.problem)
              and not kueue_managed(e)]
    if not chosen:
        return []
    q = world.queues
    return build_workloads(Manifests(pods=[p for p in chosen if p is not None],
                                     priority_classes=q.priority_classes), Problems())


def _policy(world: World, cluster: ClusterState, profile: str) -> KueuePolicy:
    q = world.queues
    # No ClusterQueue: every workload is admitted by the nodes alone; Kueue already accounted its quota.
    return KueuePolicy(Manifests(flavors=list(q.flavors), priority_classes=list(q.priority_classes),
                                 namespaces=list(q.namespaces), topologies=list(q.topologies)),
                       cluster, placer_factory=engine_placer_factory(profile))


def _idle(nodes: list[Node]) -> ClusterState:
    return ClusterState.from_nodes([replace(n, unschedulable=False, ready=True) for n in nodes])


def plan(world: World, snapshot: CacheSnapshot, *, controller: str, profile: str, parses: WorkloadParses,
         max_cycles: int, budget_s: float) -> BesidePlan:
    """Place what Kueue admitted (and what it does not manage), then judge the workloads our check holds."""
    found = entries(snapshot, world, controller, parses)
    flavors = {f.name: f for f in world.queues.flavors}
    policy = _policy(world, world.cluster, profile)
    now = world.now
    committed = [w for e in found if e.committed if (w := as_workload(e, flavors, bindable=True)) is not None]
    for w in committed + _unmanaged(world):
        policy.submit(w, now)
    for e in found:
        for p in e.pods:
            world.workload_of[p.key] = e.key
            world.pods_of.setdefault(e.key, []).append(p.key)
    world.workloads = committed
    result = planner.run(policy, now, max_cycles=max_cycles, budget_s=budget_s)
    candidates = [(e, w) for e in found if not e.committed and e.state == PENDING
                  if (w := as_workload(e, flavors, bindable=False)) is not None]
    for _, w in candidates:
        policy.submit(w, now)
    second = planner.run(policy, now, max_cycles=max_cycles, budget_s=budget_s)
    result.admitted += second.admitted
    result.cycles += second.cycles
    result.pending = second.pending
    admitted = {a.workload for a in second.admitted}
    verdicts: list[Verdict] = []
    idle: KueuePolicy | None = None
    for e, w in candidates:
        if w.key in admitted:
            verdicts.append(Verdict(e, READY, f"gpufleet can place all {w.size} pod(s) of the workload now"))
            continue
        why = second.pending.get(w.key) or "its pods do not fit on the nodes now"
        idle = idle or _policy(world, _idle(world.nodes), profile)
        idle.submit(w, now)
        fits_empty = any(a.workload == w.key for a in idle.cycle(now).admitted)
        idle.finish(w.key, now)
        if fits_empty:
            verdicts.append(Verdict(e, PENDING, f"waiting for capacity: {why}"))
        else:
            verdicts.append(Verdict(e, REJECTED, f"the workload cannot be placed even on the empty cluster: {why}"))
    # Placeholders and pods of workloads still under our check hold nothing beyond this cycle: never bound.
    result.admitted = [a for a in result.admitted if a.workload not in {w.key for _, w in candidates}]
    return BesidePlan(result, verdicts, our_checks(snapshot, controller))


# --- status writes ---------------------------------------------------------------------------------------------


def check_status(verdict: Verdict, now: float) -> JsonDict | None:
    """The Workload's status with our check's new state, or None when nothing changes."""
    entry = verdict.entry
    assert entry.check is not None
    status = copy.deepcopy(entry.raw.get("status") or {})
    changed = False
    for item in status.get("admissionChecks") or []:
        if isinstance(item, dict) and item.get("name") == entry.check:
            if item.get("state") != verdict.state:
                item["state"] = verdict.state
                item["lastTransitionTime"] = _stamp(now)
                changed = True
            if item.get("message") != verdict.message:
                item["message"] = verdict.message
                changed = True
    return status if changed else None


def active_status(check: Mapping[str, Any], now: float) -> JsonDict | None:
    """Our AdmissionCheck's status with ``Active=True``, or None when it already says so."""
    status = copy.deepcopy(check.get("status") or {})
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    active = next((c for c in conditions if c.get("type") == "Active"), None)
    if active is not None and active.get("status") == "True":
        return None
    want = {"type": "Active", "status": "True", "reason": "Active",
            "message": "gpufleet answers this check: Ready once every pod of the workload fits on real devices",
            "lastTransitionTime": _stamp(now)}
    if (check.get("metadata") or {}).get("generation") is not None:
        want["observedGeneration"] = check["metadata"]["generation"]
    status["conditions"] = [c for c in conditions if c.get("type") != "Active"] + [want]
    return status


def status_writes(result: BesidePlan, now: float) -> list[tuple[r.ResourceType, JsonDict, JsonDict]]:
    out: list[tuple[r.ResourceType, JsonDict, JsonDict]] = []
    for check in result.checks:
        status = active_status(check, now)
        if status is not None:
            out.append((r.KUEUE_ADMISSION_CHECKS, check, status))
    for verdict in result.verdicts:
        status = check_status(verdict, now)
        if status is not None:
            out.append((r.KUEUE_WORKLOADS, verdict.entry.raw, status))
    return out
