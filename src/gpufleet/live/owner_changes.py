"""A workload-kind object of ours changed in place (its spec or metadata, not only scaled nor being deleted), taken
by a cycle that carries on when the workloads its pods make read the same after the change as before.

A Deployment's rollout is the common case: ``kubectl rollout restart`` writes an annotation into its pod template,
its controller then bumps ``deployment.kubernetes.io/revision`` on it, and a new ReplicaSet brings the new pods.
Each pod of a Deployment is a workload of its own whose requests are the pod's own template, so the running pods
ask what they asked; a rebuild reads the Deployment's annotations into them (``Workload.annotations``), nothing
that decides. Before this, each such change took a full cycle: seconds at 5,000 nodes for every rollout of every
inference service the scheduler serves.

The rule is the grouping's own, not a list of fields: the workloads that come from the object (or from an object of
ours above or below it: a ReplicaSet's Deployment, a Deployment's ReplicaSets) are grouped from their pods with the
workload objects as they were and as they are now (:func:`grouping.adopt`, :func:`build_workloads`, as a full cycle
groups them); the change is carried when both groupings agree on everything but the annotations (which the kept
workloads then take, as a rebuild gives them). Which pods an object claims does not depend on its spec: a pod names
its owner (owner references, its controller's labels) or is named after it and matched by a selector that the API
keeps immutable. The exception is a CronJob, whose Jobs are found through the names its spec gives them: its changes
still take a full cycle (:data:`NOT_CARRIED`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from gpufleet.api.mig_resized import RESIZED_ANNOTATION
from gpufleet.api.workloadkinds.table import RULES
from gpufleet.cluster.workloads import Workload
from gpufleet.k8s import resources as r
from gpufleet.live.world import PodEntry, World
from gpufleet.scheduling.kueue import KueuePolicy

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


def owned_uids(world: World, uid: str) -> set[str]:
    """``uid`` and the UIDs of the workload-kind objects of ours it owns, down the chain (a Deployment's
    ReplicaSets)."""
    out, todo = {uid}, [uid]
    owners = world.queues.controllers.owners
    while todo:
        above = todo.pop()
        for o in owners:
            if above in o.meta.owners and o.meta.uid and o.meta.uid not in out:
                out.add(o.meta.uid)
                todo.append(o.meta.uid)
    return out


def affected(world: World, changed: Iterable[tuple[r.ResourceType, JsonDict]]) -> set[str] | None:
    """The keys of the kept world's workloads that come from the ``changed`` objects, from an object of ours above
    them (a ReplicaSet's Deployment, whose workloads its pods are) or below them (a Deployment's ReplicaSets): a
    pod an object claims is in a workload that comes from it or from the object of ours at the top of its chain.
    None when one of them has no UID to follow (a full cycle)."""
    owners = {o.meta.uid: o for o in world.queues.controllers.owners if o.meta.uid}
    uids: set[str] = set()
    for _, obj in changed:
        meta = obj.get("metadata") or {}
        uid = meta.get("uid")
        if not isinstance(uid, str) or not uid:
            return None
        uids |= owned_uids(world, uid)
        refs = meta.get("ownerReferences")
        up = [str(ref.get("uid")) for ref in refs if isinstance(ref, dict)] if isinstance(refs, list) else []
        while up:
            above = up.pop()
            if above in uids or (o := owners.get(above)) is None:
                continue
            uids.add(above)
            up.extend(o.meta.owners)
    return {w.key for w in world.workloads if w.origin is not None and w.origin.uid in uids}


def _reading(w: Workload) -> Workload:
    """What of a workload decides: all but its annotations (a rebuild gives it its owner's, which only say things),
    its input order and its admission."""
    origin = None if w.origin is None else replace(w.origin, annotations={}, order=0)
    return replace(w, annotations={}, order=0, admission=None, origin=origin)


def read_same(world: World, policy: KueuePolicy, before: Mapping[str, Workload | None],
              after: Mapping[str, Workload | None]) -> bool:
    """Whether each workload groups the same ``after`` the change as ``before`` it, in all that decides (the MIG
    resize annotation included, which the policy reads); if so the kept world's and policy's workloads take the
    annotations the change gave them, as a rebuild gives them."""
    for key, was in before.items():
        now = after.get(key)
        if was is None or now is None or _reading(was) != _reading(now) or (
                was.annotations.get(RESIZED_ANNOTATION) != now.annotations.get(RESIZED_ANNOTATION)):
            return False
    told = [w for key, was in before.items() if (w := after[key]) is not None and was is not None
            and (w.annotations, w.origin) != (was.annotations, was.origin)]
    at = {w.key: i for i, w in enumerate(world.workloads)} if told else {}
    for now in told:
        key = now.key
        if key in at:
            i = at[key]
            world.workloads[i] = replace(world.workloads[i], annotations=now.annotations, origin=now.origin)
        info = policy.info(key)
        if info is not None:
            info.workload = replace(info.workload, annotations=now.annotations, origin=now.origin)
    return True
