"""A workload-kind object of ours changed in place (its spec or metadata, not only scaled nor being deleted), taken
by a cycle that carries on when the workloads its pods make read the same after the change as before.

A Deployment's rollout is the common case: ``kubectl rollout restart`` writes an annotation into its pod template,
its controller then bumps ``deployment.kubernetes.io/revision`` on it, and a new ReplicaSet brings the new pods.
Each pod of a Deployment is a workload of its own whose requests are the pod's own template, so the running pods ask
what they asked; a rebuild reads the Deployment's annotations and labels into them (a Helm upgrade's chart label),
nothing that decides. Before this, each such change took a full cycle: seconds at 5,000 nodes for every rollout of
every inference service the scheduler serves.

The rule is the grouping's own, not a list of fields: the workloads that come from the object (or from an object of
ours above or below it: a ReplicaSet's Deployment, a Deployment's ReplicaSets) are grouped from their pods with the
workload objects as they were and as they are now (:func:`grouping.adopt`, :func:`build_workloads`, as a full cycle
groups them); the change is carried when both groupings agree on everything but the annotations and the labels
nothing reads (which the kept workloads then take, as a rebuild gives them). Which pods an object claims does not
depend on its spec: a pod names its owner (the labels or annotations its controller gives it) or is named after it
and matched by a selector that the API keeps immutable. Which of them make workloads can: a LeaderWorkerSet's group
beyond its replicas is in none, so a change to an object that claims a live pod of ours in no workload takes a full
cycle (:func:`set_aside`), as does one whose UID changed (deleted and made again under its name, seen as one change
by a relist: :func:`same_object`) and a CronJob's, whose Jobs are found through the names its spec gives them
(:data:`NOT_CARRIED`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from gpufleet.api.mig_resized import RESIZED_ANNOTATION
from gpufleet.api.workloadkinds.table import RULES
from gpufleet.cluster.kueue_objects import JOB_UID_LABEL
from gpufleet.cluster.workloads import Workload
from gpufleet.k8s import resources as r
from gpufleet.live.world import PodEntry, World
from gpufleet.scheduling.kueue import KueuePolicy
from gpufleet.scheduling.memory import CLASS_LABEL, SIM_CLASS_LABEL

JsonDict = dict[str, Any]

# Kinds whose spec decides which pods they claim (a CronJob's Jobs, looked up by the names its plan gives them).
NOT_CARRIED = frozenset({("batch", "CronJob")})


def referrers(world: World, entries: Iterable[PodEntry], kind: tuple[str, str], obj: Mapping[str, Any]
              ) -> Iterator[PodEntry]:
    """The entries whose pod belongs to ``obj`` of ``kind`` (API group, kind): by its owner references, the labels
    (or annotations) its controller gives it, or its workload's name."""
    meta = obj.get("metadata") or {}
    uid, name, namespace = meta.get("uid"), meta.get("name"), meta.get("namespace") or ""
    rule = RULES.get(kind)
    labels = [ol.name for ol in rule.owner_labels] if rule is not None else []
    for e in entries:
        if e.pod is None or e.namespace != namespace:
            continue
        pod_meta = e.pod.meta
        if (uid and uid in pod_meta.owners) or any(
                pod_meta.labels.get(k) == name or pod_meta.annotations.get(k) == name for k in labels) or (
                world.workload_of.get(e.key) == f"{namespace}/{name}"):
            yield e


def same_object(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """The same object before and after the change (one UID): a relist after the watch expired shows an object
    deleted and made again under its name as one change, whose workloads come from the old one."""
    uid = (old.get("metadata") or {}).get("uid")
    return isinstance(uid, str) and bool(uid) and uid == (new.get("metadata") or {}).get("uid")


def set_aside(world: World, changed: Iterable[tuple[r.ResourceType, JsonDict]]) -> bool:
    """Whether a live pod of ours that a changed object claims is in no workload (a LeaderWorkerSet's group past
    its replicas, whose pod its controller made before the count reached it): the change may make it one, which
    only a rebuild's grouping finds."""
    loose = [e for e in world.pods.values() if e.ours and not e.terminal and e.key not in world.workload_of]
    return bool(loose) and any(next(referrers(world, loose, (res.group, res.kind), obj), None) is not None
                               for res, obj in changed)


def affected(world: World, changed: Iterable[tuple[r.ResourceType, JsonDict]]) -> set[str] | None:
    """The keys of the kept world's workloads that come from the ``changed`` objects, from an object of ours above
    them (a ReplicaSet's Deployment, whose workloads its pods are) or below them (a Deployment's ReplicaSets): a
    pod an object claims is in a workload that comes from it or from the object of ours at the top of its chain.
    None when one of them has no UID to follow (a full cycle)."""
    owners = {o.meta.uid: o for o in world.queues.controllers.owners if o.meta.uid}
    below: dict[str, list[str]] = {}  # owner UID -> the UIDs of the objects of ours it owns
    for owned, o in owners.items():
        for above in o.meta.owners:
            below.setdefault(above, []).append(owned)
    uids: set[str] = set()
    for _, obj in changed:
        meta = obj.get("metadata") or {}
        uid = meta.get("uid")
        if not isinstance(uid, str) or not uid:
            return None
        down = [uid]
        while down:  # (a Deployment's ReplicaSets)
            one = down.pop()
            if one not in uids:
                uids.add(one)
                down.extend(below.get(one, ()))
        refs = meta.get("ownerReferences")
        up = [str(ref.get("uid")) for ref in refs if isinstance(ref, dict)] if isinstance(refs, list) else []
        while up:
            above = up.pop()
            if above in uids or (parent := owners.get(above)) is None:
                continue
            uids.add(above)
            up.extend(parent.meta.owners)
    return {w.key for w in world.workloads if w.origin is not None and w.origin.uid in uids}


# The labels of a workload that something reads once it is made (its queue and priority are read into fields): its
# class for the GPU memory it is known to use, the UID Kueue's Workload names its job by.
_LABELS_READ = (CLASS_LABEL, SIM_CLASS_LABEL, JOB_UID_LABEL)


def _reading(w: Workload) -> Workload:
    """What of a workload decides: all but its annotations and labels (a rebuild gives it its owner's: a Helm
    upgrade's chart label, a rollout's restart annotation, which only say things; its queue and priority are read
    into fields, and the labels read later are kept here), its input order and its admission."""
    origin = None if w.origin is None else replace(w.origin, annotations={}, labels={}, order=0)
    kept = {k: w.labels[k] for k in _LABELS_READ if k in w.labels}
    return replace(w, annotations={}, labels=kept, order=0, admission=None, origin=origin)


def read_same(world: World, policy: KueuePolicy, before: Mapping[str, Workload | None],
              after: Mapping[str, Workload | None]) -> bool:
    """Whether each workload groups the same ``after`` the change as ``before`` it, in all that decides (the MIG
    resize annotation included, which the policy reads); if so the kept world's and policy's workloads take the
    labels and annotations the change gave them, as a rebuild gives them."""
    for key, was in before.items():
        now = after.get(key)
        if was is None or now is None or _reading(was) != _reading(now) or (
                was.annotations.get(RESIZED_ANNOTATION) != now.annotations.get(RESIZED_ANNOTATION)):
            return False
    told = [w for key, was in before.items() if (w := after[key]) is not None and was is not None
            and (w.annotations, w.labels, w.origin) != (was.annotations, was.labels, was.origin)]
    at = {w.key: i for i, w in enumerate(world.workloads)} if told else {}
    for now in told:
        key = now.key
        if key in at:
            i = at[key]
            world.workloads[i] = replace(world.workloads[i], annotations=now.annotations, labels=now.labels,
                                         origin=now.origin)
        info = policy.info(key)
        if info is not None:
            info.workload = replace(info.workload, annotations=now.annotations, labels=now.labels, origin=now.origin)
    return True
