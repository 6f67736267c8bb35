"""Cycles that carry on from the last one: new pods are added to the last cycle's world and policy instead of
rebuilding both from the whole cache (issue 27's first step towards an incremental scheduler).

A full cycle (:mod:`gpufleet.live.world`, :mod:`gpufleet.live.planner`) costs what the cluster is: every node and
pod parsed (memoised), charged and grouped, every workload submitted to a fresh policy. At 5,000 nodes that is
seconds, paid again for each new pod. Most changes a busy cluster sees between two cycles decide nothing new about
what is already there: a pod of ours created, our own Bindings landing, the conditions we wrote coming back, a
queue's status. For those, the last cycle's world and policy are still exact, and the new pods only have to be
added: parsed, grouped, submitted, then the policy runs as it would have.

What a carried-on cycle accepts (:func:`carried_pods`), every other change making the next cycle a full one:

* pods of ours created unbound that make new workloads whole: a pod of its own (a plain pod, a Deployment's
  pod...), or every pod of a pod group, a Job, a JobSet... arrived since the last cycle, its declared count (the
  group's size, the owner's plan) reached. The members of a gang still short of some wait off the books for
  the rest (``World.unjoined``), at most :data:`UNJOINED_WAIT` seconds, after which a full cycle builds the gang
  as it is. Pods that join an admitted workload of a kind whose controller owns its pods (a Job's next or
  replacement pod, a StatefulSet's next ordinal) are added to it and placed next to its pods before the round
  (``gangs.join``, the core's rule), or wait there, tried again at each cycle; a late member of a pod group (a
  gang left incomplete) or of a workload still pending takes a full cycle;
* a pod of ours bound to the node the policy placed it on (our own Binding landing);
* a change to a pod's status alone, short of finishing (conditions, readiness, Pending -> Running), or to the
  node agent's observation of its GPU memory (``gpufleet.io/gpu-memory-used``, told to the kept policy:
  :mod:`gpufleet.live.observed_memory`); a container's termination saying the GPU ran out of memory is told to
  the kept policy before anything is released (:mod:`gpufleet.live.gpu_oom`);
* our single-pod workload ending; a bound member of a workload of several pods finishing (``Succeeded``,
  ``Failed``): its node freed, the workload's quota kept, the workload finished with its last member; a finished
  pod of a workload that ended being deleted;
* an unbound pod of another scheduler created, changed or deleted (never our business); one bound (by
  kube-scheduler) or created on its node (a DaemonSet's): charged on that node as a full cycle charges it;
* a queue kind's or a workload kind's status alone (no decision reads them);
* a node whose parse is unchanged (a status heartbeat); a node changed beside its devices and capacity (cordoned
  or uncordoned, tainted, relabelled, turning ready or not, a GPU's health in its inventory): taken in place by
  the kept cluster state, whose
  placement index re-reads it; a node added (a cluster scaling up): added to the kept cluster state and policy,
  whose placer is made again over it; then the workloads parked for want of nodes woken (:func:`apply_nodes`);
  but for clusters whose nodes' DRA devices or Topologies are read from their objects, and while a preemption's
  room on nodes is held. A node removed leaves the kept state (:func:`remove_nodes`): drained (as a cluster
  scaling down drains it), or lost under pods that are each a workload of their own (they stay bound to it, charged
  nowhere, as a rebuild leaves them, until the pod garbage collector deletes them; a node of that name joining again
  takes a full cycle); one under a member of a workload of several pods, or whose devices or capacity changed,
  takes a full cycle;
* a workload kind's object created (a Job, a JobSet...): one of another scheduler's is passed over, as a full
  cycle passes it over; one of ours is read into the kept world's workload objects (:func:`read_owners`), so its
  pods, arriving with it or later, are grouped as a full cycle groups them. Another scheduler's changed or
  deleted is passed over too; ours marked for deletion, ours deleted once nothing the world knows refers to it, and
  ours of a per-pod kind only scaled (:func:`only_scaled`) are read again; ours changed otherwise (a Deployment's
  rollout) are read again too, and carried when the workloads of their pods group the same
  (:mod:`gpufleet.live.owner_changes`, judged by the cycle); any other change to one of ours (one that becomes or
  stops being ours, a CronJob's) takes a full cycle, as does any change to a kind other objects refer to
  (Volcano's and KAI's Queues, AdmissionChecks, training runtimes) or an object left out by the parse;
* a Namespace created, relabelled or deleted, a LocalQueue created, changed or deleted, a ClusterQueue created, and
  ClusterQueues and Cohorts changed in what a kept policy takes in place (``KueuePolicy.queues_changed``: quotas,
  holds, preemption policies...) (:func:`read_queue_changes`): the queue objects read again and the kept policy
  told (a Cohort object created or deleted for a cohort ClusterQueues make, with no parent, too); any other queue
  kind's change (a ClusterQueue deleted, a Cohort object that changes the trees, a queue's cohort, flavors
  or strategy, a flavor) takes a full cycle.

On a DRA cluster: a pod of ours with claims created unbound, the claim the resourceclaim controller makes for it,
its status naming that claim (a pending workload whose claims resolve otherwise is taken back and submitted again:
:func:`_claims_came`; one whose claims are not all there yet is held, as kube-scheduler's PreEnqueue keeps it out
of its queue), our own finalizer and allocation coming back, its Binding landing, a pod ending (judged as any
pod's ending is, :func:`_ended`), its claims' devices held until the claims are released
(:func:`hold_left_claims`), and the claims released and deleted then are carried
(:mod:`gpufleet.live.claim_changes`), as are another scheduler's claims allocated (held by placeholders) and its
pods bound on them (:func:`charge_claimed`); any other claim change and any change to a ResourceSlice,
DeviceClass or ResourceClaimTemplate take a full cycle.

After a preemption whose every eviction was accepted the next cycle carries on: the victims are on their way out
in the kept policy (they hold their quota and nodes until their pods are gone, read as any pod's ending; a full
cycle reads the same off the pods being deleted: ``planner.terminating``). A victim of several pods (a pod group, a
Job, a JobSet) is made again from the members left as each goes, and from a Job's replacement pods as they come
(:func:`_leaving`, :func:`_replacing`), as a rebuild groups it; a waitForPodsReady timeout's victims likewise, once
kept on their way out. Never when the last cycle evicted for another reason (a repair), was refused an eviction, a
Binding was given up since (its capacity is free again), objects are set aside, a timer of the last cycle that
only a rebuild acts on has fallen due (a partial gang's repair), or the change log lost changes: those take a full
cycle, as does the periodic resync. A waitForPodsReady deadline falling due and a requeue backoff ending are the
kept policy's own timers (the deadline told from the pods, whose conditions every status change brings up to date:
gpufleet.live.gangs.tell_readiness), which its round acts on as the simulator's does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpufleet.api.dra_need import DeviceKey
from gpufleet.api.errors import Problems
from gpufleet.api.manifests import Manifests
from gpufleet.api.objects import GPU_MEMORY_USED_ANNOTATION, Node, Pod
from gpufleet.api.workloadkinds.table import RULES
from gpufleet.cluster import grouping
from gpufleet.cluster.dra_claims import claim_names
from gpufleet.cluster.state import NodeState, node_state_from
from gpufleet.cluster.workloads import Workload
from gpufleet.k8s import resources as r
from gpufleet.k8s.informer import CacheChange, CacheSnapshot, ObjectCache
from gpufleet.k8s.parsing import ParseCache, WorkloadObject
from gpufleet.live import observed_memory, owner_changes, planner
from gpufleet.live.assumed import AssumedPods
from gpufleet.live.claim_changes import ClaimChanges, claim_statuses
from gpufleet.live.gpu_oom import ended, gpu_ooms
from gpufleet.live.queuestatus import QueueCounts
from gpufleet.live.wakeup import unread_status_only, without_status
from gpufleet.live.workloadsource import WORKLOAD_KEYS
from gpufleet.live.world import (
    TERMINAL_PHASES,
    PodEntry,
    World,
    account,
    claimed_devices,
    pod_entry,
    read_world_objects,
    stamp_bound_at,
    world_catalog,
    world_workloads,
)
from gpufleet.scheduling.kueue import KueuePolicy
from gpufleet.scheduling.kueue.info import ADMITTED, WorkloadInfo
from gpufleet.scheduling.kueue.late_members import joins_late
from gpufleet.scheduling.placement.dra import CLAIM_HOLD_PREFIX, hold_claims, keys_by_device_id

JsonDict = dict[str, Any]

# How long the members of a gang that arrived in part wait for the rest before a full cycle builds the gang as it
# is (and says it waits for pods): a Job's or a JobSet's controller creates them within milliseconds of each other.
UNJOINED_WAIT = 2.0
CHANGE_LOG_LIMIT = 100_000  # changes kept between two cycles; past it, the next cycle is a full one


class ChangeLog:
    """The cache's changes in the order it applied them, for the next cycle to read those after its last
    snapshot (:meth:`between`). Bounded: past :data:`CHANGE_LOG_LIMIT` it forgets them and says so."""

    def __init__(self, cache: ObjectCache, limit: int = CHANGE_LOG_LIMIT) -> None:
        self._lock = threading.Lock()
        self._limit = limit
        self._changes: list[CacheChange] = []
        self._lost = 0  # the latest cache version whose change was not kept
        self._unlisten = cache.add_listener(self._changed)

    def _changed(self, change: CacheChange) -> None:
        with self._lock:
            if len(self._changes) >= self._limit:
                self._changes.clear()
                self._lost = change.version
                return
            self._changes.append(change)

    def between(self, since: int, upto: int) -> list[CacheChange] | None:
        """The changes after cache version ``since`` up to ``upto``, in order, or None when some of them were not
        kept; those up to ``upto`` are dropped either way."""
        with self._lock:
            complete = self._lost <= since
            out = [c for c in self._changes if since < c.version <= upto]
            self._changes = [c for c in self._changes if c.version > upto]
            return out if complete else None

    def clear(self) -> None:
        """Forget the changes kept so far (a follower's: it runs no cycle), so that the next cycle is a full one."""
        with self._lock:
            if self._changes:
                self._lost = self._changes[-1].version
                self._changes.clear()

    def close(self) -> None:
        self._unlisten()


@dataclass(slots=True)
class Kept:
    """The last cycle's world and policy, as that cycle left them (its admissions applied), and what it saw."""

    world: World
    policy: KueuePolicy
    version: int  # the cache version of the snapshot they were built from (or last carried on to)
    due: list[float] = field(default_factory=list)  # timers that take a rebuild when they fall due (wall clock)
    counts: QueueCounts | None = None  # the policy's pending and admitted workloads per queue, kept up to date
    # Set when a change to a workload-kind object of ours refused to carry on: what the parked memory saw says
    # nothing of it (ParkedMemory.owners_changed)
    owners_refused: bool = False

    def timer_due(self, now: float) -> bool:
        """Whether a timer that takes a rebuild has fallen due."""
        return any(t <= now for t in self.due)


@dataclass(slots=True)
class Carried:
    """What the changes since the kept cycle bring: the pods of ours created since, the pods whose Bindings landed
    (their waitForPodsReady clock starts), our single-pod workloads that ended (deleted, finished or being deleted
    before they held a node) and the other schedulers' pods that stopped holding capacity."""

    new: list[PodEntry] = field(default_factory=list)
    owners: list[WorkloadObject] = field(default_factory=list)  # workload-kind objects of ours created since
    landed: list[str] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)  # workload keys
    freed: list[str] = field(default_factory=list)  # pod keys
    # (workload, pod): a member of a workload of several pods that finished while others run on
    left: list[tuple[str, str]] = field(default_factory=list)
    # Workloads as a full cycle now groups them (a finished member dropped from its place): key -> workload
    regrouped: dict[str, Workload] = field(default_factory=dict)
    # Bound pods of ours whose status changed (readiness): their workloads' waitForPodsReady is judged again
    restated: list[str] = field(default_factory=list)
    # Nodes changed in what placement reads beside their devices (labels, taints, cordon, readiness), or joining,
    # by name; and nodes removed that held no pod
    nodes: dict[str, Node] = field(default_factory=dict)
    gone: set[str] = field(default_factory=set)
    # Pods holding a node whose observed GPU memory (the node agent's annotation) changed: told to the policy
    observed: list[str] = field(default_factory=list)
    # Pods of ours whose containers' statuses show a new GPU out-of-memory (gpufleet.live.gpu_oom)
    oom: list[str] = field(default_factory=list)
    # Pods of ours being deleted while they hold their node (their workload may be on its way out)
    terminating: list[str] = field(default_factory=list)
    # Pod groups on their way out whose first member is gone: key -> the workload a rebuild groups from the members
    # left, admitted again in the group's place (release)
    regroup: dict[str, Workload] = field(default_factory=dict)
    # Workload-kind objects of ours deleted that nothing in the world refers to any more (a finished Job deleted
    # after its pods), or scaled where each pod is a workload of its own: the world's owners are read again
    owners_gone: bool = False
    # Namespaces created, relabelled (their labels) or deleted (None) since: the ClusterQueues' namespace selectors
    # judge them anew (KueuePolicy.namespaces_changed)
    namespaces: dict[str, dict[str, str] | None] = field(default_factory=dict)
    # LocalQueues created, changed or deleted since, by namespace/name: the workloads naming them routed again
    # (KueuePolicy.local_queues_changed)
    local_queues: set[str] = field(default_factory=set)
    # A ClusterQueue created, or a ClusterQueue or Cohort changed beside its status: carried where a kept policy can
    # take it (KueuePolicy.queues_changed)
    queue_specs: bool = False
    # Workload-kind objects of ours changed otherwise (a Deployment's rollout): carried if the workloads their pods
    # make read the same (gpufleet.live.owner_changes)
    changed: list[tuple[r.ResourceType, JsonDict]] = field(default_factory=list)
    # Pods with DRA claims that stopped holding their nodes: (pod, its node, its claims), whose claims' devices stay
    # held while the claims are allocated (hold_left_claims)
    claims_left: list[tuple[str, str | None, tuple[str, ...]]] = field(default_factory=list)
    # Pending workloads whose pods' DRA claims now resolve otherwise: taken back, their pods submitted again
    withdrawn: list[str] = field(default_factory=list)
    # Another scheduler's pods with DRA claims bound since, charged once the claims are read (charge_claimed)
    claimed_elsewhere: dict[str, PodEntry] = field(default_factory=dict)


def carried_pods(kept: Kept, changes: list[CacheChange], *, scheduler_name: str, parse: ParseCache,
                 assumed: AssumedPods, require_mutation: bool) -> Carried | None:
    """The pods of ours created since ``kept``, with ``kept.world`` brought up to date for the other changes (our
    Bindings landed, statuses); None when a change needs a full cycle (see the module doc)."""
    world = kept.world
    nodes: dict[str, Node] | None = None  # by name, made at the first node change
    new: dict[str, PodEntry] = dict(world.unjoined)  # the members waiting for the rest of their gang, first
    out = Carried()
    claims = ClaimChanges(world, kept.policy, parse)
    for c in changes:
        if c.resource == r.PODS.key:
            if not _pod_change(world, c, new, out, scheduler_name=scheduler_name, parse=parse, assumed=assumed,
                               require_mutation=require_mutation):
                return None
        elif c.resource == r.NODES.key:
            nodes = nodes if nodes is not None else {n.name: n for n in world.nodes}
            if c.type == "DELETED" or c.new is None:
                if not _removable(world, kept.policy, c.key):
                    return None  # under a gang's member, a Binding on its way: a full cycle sorts them out
                out.nodes.pop(c.key, None)
                out.gone.add(c.key)
                continue
            out.gone.discard(c.key)  # (deleted and created again in one batch: a node joining)
            if _orphaned(world, c.key):
                return None  # a node back under pods bound to it: a full cycle charges them there
            if _same_node(nodes.get(c.key), parse, c.key, c.new):
                out.nodes.pop(c.key, None)  # (back as it was since an earlier change of this batch)
                continue
            changed = _changed_node(world, kept.policy, parse, c.key, c.new)
            if changed is None:
                return None
            out.nodes[c.key] = changed
        elif unread_status_only(c):
            continue
        elif c.resource == r.RESOURCE_CLAIMS.key:
            if not claims.take(c):
                return None
        elif c.resource in _LOCAL_QUEUE_KEYS:
            out.local_queues.add(c.key)  # created, changed or deleted: routed again (KueuePolicy.local_queues_changed)
        elif c.resource in _QUOTA_KEYS and (c.resource in _COHORT_KEYS or (c.type != "DELETED" and c.new is not None)):
            # (a ClusterQueue added, one changed or a Cohort object added, changed or deleted where a kept policy
            # can take it: queues_changed; a ClusterQueue deleted takes a full cycle)
            out.queue_specs = True
        elif c.resource == r.NAMESPACES.key:
            labels = ((c.new or {}).get("metadata") or {}).get("labels") if c.type != "DELETED" else None
            out.namespaces[c.key] = None if c.type == "DELETED" or c.new is None else {
                str(k): str(v) for k, v in (labels.items() if isinstance(labels, dict) else ())}
        elif (res := WORKLOAD_KEYS.get(c.resource)) is not None:
            if (res.group, res.kind) not in RULES:
                # A kind other objects refer to (a Volcano or KAI Queue, an AdmissionCheck, a training runtime): a
                # full cycle reads it into the queues and the policy it builds. (A review found one added or gone
                # carried on beside what it changed.)
                return None
            if c.type == "ADDED" and c.new is not None:
                if parse.ours(res, c.key, c.new, scheduler_name):
                    out.owners.append((res, c.key, c.new))
                continue
            if not any(o is not None and parse.ours(res, c.key, o, scheduler_name) for o in (c.old, c.new)):
                continue  # another scheduler's object, before and after: no cycle reads it
            if c.type == "MODIFIED" and c.old is not None and c.new is not None and deletion_marked(c.old, c.new):
                continue  # its deletion under way (foreground): each of its pods' deletions is a change of its own
            if c.type == "MODIFIED" and c.old is not None and c.new is not None and only_scaled(res, c.old, c.new):
                out.owners_gone = True  # (the world's owners read again: their plans' counts)
                continue
            if c.type == "DELETED" and c.old is not None and not _referred_to(world, new, res, c.old):
                out.owners_gone = True
                continue
            if c.type == "MODIFIED" and c.old is not None and c.new is not None and (
                    res.group, res.kind) not in owner_changes.NOT_CARRIED and owner_changes.same_object(
                    c.old, c.new) and all(
                    parse.ours(res, c.key, o, scheduler_name) for o in (c.old, c.new)):
                out.owners_gone = True  # (read again; carried if its workloads read the same: cycle.py)
                out.changed.append((res, c.new))
                continue
            kept.owners_refused = True
            return None
        else:
            return None
    claims.apply()
    out.freed.extend(claims.freed)  # (the placeholders of claims released: their devices free)
    if (out.claimed_elsewhere or claims.held) and not charge_claimed(world, out.claimed_elsewhere, claims.held):
        return None
    for key in claims.awaited:  # (pods that waited for a claim created now: resolved again)
        entry = world.pods.get(key)
        if entry is not None and not _claims_came(world, key, entry.raw, new, out, scheduler_name=scheduler_name,
                                                  parse=parse, assumed=assumed, require_mutation=require_mutation):
            return None
    out.new = list(new.values())
    return out


_DELETION_META = ("deletionTimestamp", "deletionGracePeriodSeconds", "finalizers")


def deletion_marked(old: JsonDict, new: JsonDict) -> bool:
    """A workload-kind object whose change is its deletion starting (or its finalizers going), nothing else."""
    return without_status(old, _DELETION_META) == without_status(new, _DELETION_META)


_LOCAL_QUEUE_KEYS = frozenset({r.LOCAL_QUEUES.key, r.KUEUE_LOCAL_QUEUES.key})  # gpufleet's, or Kueue's own
_COHORT_KEYS = frozenset({r.COHORTS.key, r.KUEUE_COHORTS.key})
_QUOTA_KEYS = frozenset({r.CLUSTER_QUEUES.key, r.KUEUE_CLUSTER_QUEUES.key, *_COHORT_KEYS})

# What a Deployment's controller writes on its ReplicaSets as it scales them, beside spec.replicas.
_SCALE_ANNOTATIONS = ("deployment.kubernetes.io/desired-replicas", "deployment.kubernetes.io/max-replicas")


def only_scaled(res: r.ResourceType, old: JsonDict, new: JsonDict) -> bool:
    """An object of a kind whose pods are workloads of their own (a Deployment's, a ReplicaSet's) scaled, nothing
    else changed: each live pod stays the workload it was (a pod's own template is what it asks, its owner's labels
    its queue and priority), and pods beyond the new count are kept, counted, until they go, as a rebuild reads
    them (``grouping._slots``). An autoscaler's every step, on the Deployment and on its ReplicaSet."""
    rule = RULES.get((res.group, res.kind))
    if rule is None or rule.grouping != "per-pod":
        return False

    def unscaled(obj: JsonDict) -> JsonDict:
        out = without_status(obj)
        spec = out.get("spec")
        if isinstance(spec, dict):
            out["spec"] = {k: v for k, v in spec.items() if k != "replicas"}
        meta = dict(out["metadata"])
        annotations = meta.pop("annotations", None)
        if isinstance(annotations, dict):
            annotations = {k: v for k, v in annotations.items() if k not in _SCALE_ANNOTATIONS}
        if annotations:
            meta["annotations"] = annotations
        out["metadata"] = meta
        return out

    return unscaled(old) == unscaled(new)


def _referred_to(world: World, new: dict[str, PodEntry], res: r.ResourceType, obj: JsonDict) -> bool:
    """Whether a pod the world knows (or one created since) belongs to ``obj`` (by its owner references, the labels
    its controller gives it, or its workload's name), or a workload-kind object of ours it owns: such a pod, or
    such an object's pods, are grouped otherwise once ``obj`` is gone."""
    uid = (obj.get("metadata") or {}).get("uid")
    if uid and any(uid in o.meta.owners for o in world.queues.controllers.owners):
        return True  # an object of ours that it owns (a Deployment's ReplicaSet): grouped otherwise without it
    entries = (*world.pods.values(), *world.unjoined.values(), *new.values())
    return next(owner_changes.referrers(world, entries, (res.group, res.kind), obj), None) is not None


def _pod_change(world: World, c: CacheChange, new: dict[str, PodEntry], out: Carried, *, scheduler_name: str,
                parse: ParseCache, assumed: AssumedPods, require_mutation: bool) -> bool:
    """Apply one pod change to ``world`` (or to ``new``, the pods created since); False when it needs a full
    cycle."""
    obj = c.new if c.new is not None else c.old
    assert obj is not None
    spec = obj.get("spec") or {}
    if spec.get("schedulerName") != scheduler_name and not spec.get("nodeName") and not (
            c.old is not None and (c.old.get("spec") or {}).get("nodeName")):
        return True  # another scheduler's pod that holds no node: none of our business, as in a full cycle
    # A pod with DRA claims: one of ours created unbound, its status naming the claims made for it, its Binding
    # landing and its status changing beside its claims are carried (its claims resolved against the kept world's,
    # gpufleet.live.claim_changes); one ending, or bound by another scheduler, frees or holds devices through its
    # claims' allocations, which only a full cycle reads together.
    claimed = bool(spec.get("resourceClaims"))
    if c.type == "ADDED":
        if c.key in world.pods or c.key in new:
            return False
        if spec.get("nodeName"):  # created on its node (a DaemonSet's pod, a static pod's mirror)
            if claimed:
                return _claimed_elsewhere(world, c.key, obj, out, parse=parse, scheduler_name=scheduler_name,
                                          assumed=assumed, require_mutation=require_mutation)
            return _bound_elsewhere(world, c.key, obj, parse=parse, scheduler_name=scheduler_name,
                                    assumed=assumed, require_mutation=require_mutation)
        created = pod_entry(c.key, obj, parse, scheduler_name, assumed, world.now, require_mutation)
        if created.deleting or created.gated or created.terminal:
            return False
        new[c.key] = created
        return True
    if c.type == "DELETED":
        if c.key in new or (claimed and not _claims_end(world, c.key, True, out)):
            return False
        return _ended(world, c.key, None, out)
    if c.old is None or c.new is None:
        return False
    if c.key in new:
        if without_status(c.old) != without_status(c.new) or _phase(c.old) != _phase(c.new):
            return False
        if claimed and claim_statuses(c.old) != claim_statuses(c.new):
            # The resourceclaim controller naming the claims it made for it: read again (the names are its claims').
            made = _still_waiting(world, c.key, c.new, parse, scheduler_name, assumed, require_mutation)
            if made is None:
                return False
            new[c.key] = made
            return True
        new[c.key].raw = c.new
        return True
    entry = world.pods.get(c.key)
    old_node = (c.old.get("spec") or {}).get("nodeName")
    new_node = (c.new.get("spec") or {}).get("nodeName")
    if entry is None or not entry.ours:
        if claimed and old_node is None and new_node is not None:
            # Bound by its allocator (kube-scheduler) where its claims' allocations are: charged on those devices
            # once the claims are read (after this batch's claim changes), as a full cycle charges them.
            world.pods.pop(c.key, None)
            return _claimed_elsewhere(world, c.key, c.new, out, parse=parse, scheduler_name=scheduler_name,
                                      assumed=assumed, require_mutation=require_mutation)
        if claimed and (old_node != new_node or entry is None):
            return False
        if old_node is None and new_node is not None:
            # Another scheduler bound its pod (kube-scheduler's): charged where it went, as a full cycle would.
            world.pods.pop(c.key, None)
            return _bound_elsewhere(world, c.key, c.new, parse=parse, scheduler_name=scheduler_name,
                                    assumed=assumed, require_mutation=require_mutation)
        if entry is None:
            return False
    if old_node is None and new_node is not None:
        # Our own Binding landing where the policy placed the pod: the policy counted it there already.
        placement = world.cluster.placements.get(c.key)
        if placement is None or placement.node != new_node or not entry.ours:
            return False
        assumed.confirm(c.key)
        entry.raw, entry.node, entry.assumed, entry.completing = c.new, new_node, False, False
        out.landed.append(c.key)
        return True
    if old_node != new_node:
        return False
    if _unobserved(c.old) != _unobserved(c.new):
        return False
    if claimed and claim_statuses(c.old) != claim_statuses(c.new):
        # (the claims made for it named: resolved again)
        return _claims_came(world, c.key, c.new, new, out, scheduler_name=scheduler_name, parse=parse,
                            assumed=assumed, require_mutation=require_mutation)
    if claimed and (_phase(c.new) in TERMINAL_PHASES or (c.new.get("metadata") or {}).get("deletionTimestamp")) and (
            not _claims_end(world, c.key, _phase(c.new) in TERMINAL_PHASES, out)):
        return False
    if _memory_used(c.old) != _memory_used(c.new):
        # The node agent's observation of what it uses of its GPUs: the parse reads it; the policy is told. One
        # removed or unreadable takes a full cycle (the kept policy cannot unlearn it; a rebuild never learns it).
        parsed = parse.one(r.PODS, c.key, c.new).obj
        if entry.pod is None or not isinstance(parsed, Pod) or parsed.gpu_memory_used_mib is None:
            return False
        entry.pod = parsed
        out.observed.append(c.key)
    if entry.ours and ended(c.new) - ended(c.old) and gpu_ooms(c.new) - gpu_ooms(c.old):
        out.oom.append(c.key)  # (told before anything is released: where it ran out)
    if _phase(c.new) in TERMINAL_PHASES or (c.new.get("metadata") or {}).get("deletionTimestamp"):
        if _phase(c.old) in TERMINAL_PHASES:
            entry.raw = c.new
            return True
        return _ended(world, c.key, c.new, out)
    if _phase(c.old) in TERMINAL_PHASES:
        return False  # a finished pod running again: not something to carry
    # Its status alone (conditions, readiness, Pending -> Running): a full cycle charges a pod that holds a node the
    # same whatever its phase short of finished; the recorder compares its conditions before writing again. A
    # full cycle would judge its workload's waitForPodsReady on it: so does the cycle that carries it.
    entry.raw = c.new
    if entry.ours and entry.node is not None:
        out.restated.append(c.key)
    return True


def _claims_end(world: World, key: str, stops: bool, out: Carried) -> bool:
    """A pod with DRA claims ending (``stops``: it holds its node no more) or being deleted, judged as any pod's
    ending is (:func:`_ended`: a member of a workload of several pods as its gang's rules say); its claims, still
    allocated until they are released, are noted (``Carried.claims_left``) for their devices to stay held
    (:func:`hold_left_claims`). False (a full cycle) for a pod the world does not know."""
    entry = world.pods.get(key)
    if entry is None or entry.pod is None:
        return False
    if stops and (entry.holds_capacity or key in world.cluster.placements):
        out.claims_left.append((key, entry.node, tuple(claim_names(entry.namespace,
                                                                   entry.pod.template.resource_claims))))
    return True


def hold_left_claims(world: World, left: list[tuple[str, str | None, tuple[str, ...]]]) -> bool:
    """After the releases: the devices of the claims the pods that ended still have allocated are held by
    placeholders, as a full cycle holds an allocated claim no pod holds (``hold_claims``) until it is released
    (:class:`gpufleet.live.claim_changes.ClaimChanges` frees them then). False (a full cycle) when such a claim is
    reserved for another pod too (a claim pods share: a full cycle charges it to the one left)."""
    if not left:
        return True
    claims = world_catalog(world).claims
    for pod, node, names in left:
        held = [claim for name in names if (claim := claims.get(name)) is not None and claim.allocation is not None]
        namespace = pod.partition("/")[0]
        if any(f"{namespace}/{consumer.name}" != pod for claim in held for consumer in claim.reserved_for):
            return False
        hold_claims(world.cluster, held, _devices_on(world, node))
    return True


def _claimed_elsewhere(world: World, key: str, raw: JsonDict, out: Carried, *, parse: ParseCache,
                       scheduler_name: str, assumed: AssumedPods, require_mutation: bool) -> bool:
    """Another scheduler's pod with DRA claims now on a node: noted (``Carried.claimed_elsewhere``), to be charged on
    its claims' devices once this batch's claim changes are read (:func:`charge_claimed`). False for a pod of ours."""
    entry = pod_entry(key, raw, parse, scheduler_name, assumed, world.now, require_mutation)
    if entry.ours or entry.pod is None or not entry.pod.template.resource_claims:
        return False
    out.claimed_elsewhere[key] = entry
    return True


def charge_claimed(world: World, entries: Mapping[str, PodEntry], held: list[str]) -> bool:
    """After a batch's claim changes: another scheduler's pods bound since (``entries``) charged on the devices their
    claims' allocations name, each claim's placeholder given up to its pod; then the claims allocated since for
    another scheduler's pods still to bind (``held``) held by placeholders, as a full cycle holds an allocated claim
    no pod holds (``hold_claims``). False (a full cycle) when a pod's claims are not all allocated, or its devices
    are not free."""
    catalog = world_catalog(world)
    named: set[str] = set()
    for key, entry in entries.items():
        world.pods[key] = entry
        if not entry.holds_capacity:
            continue  # (bound and finished in one change, a relist's: its claims' placeholders hold on)
        assert entry.pod is not None
        claimed = claimed_devices(world, entry)
        if claimed is None:
            return False
        for name in claim_names(entry.namespace, entry.pod.template.resource_claims):
            named.add(name)
            if CLAIM_HOLD_PREFIX + name in world.cluster.placements:
                world.cluster.release(CLAIM_HOLD_PREFIX + name)
        if not account(world.cluster, entry, claimed):
            return False
    claims = [claim for name in held if name not in named and (claim := catalog.claims.get(name)) is not None
              and claim.allocation is not None]
    for claim in claims:
        assert claim.allocation is not None
        if not hold_claims(world.cluster, [claim], _devices_on(world, claim.allocation.node_name)):
            return False  # (its devices not all free, or not on one node: a full cycle judges)
    return True


def _devices_on(world: World, node: str | None) -> dict[DeviceKey, str] | None:
    """The node of each DRA device of ``node`` (``hold_claims``' lookup, for one node instead of every node);
    None when the node is not known: ``hold_claims`` looks at every node then."""
    ns = world.cluster.nodes.get(node) if node is not None else None
    return {k: ns.name for k in keys_by_device_id(ns).values()} if ns is not None else None


def _bound_elsewhere(world: World, key: str, raw: JsonDict, *, parse: ParseCache, scheduler_name: str,
                     assumed: AssumedPods, require_mutation: bool) -> bool:
    """Another scheduler's pod now on a node: charged there as a full cycle charges it (its recorded devices,
    else first-fit, else its capacity alone); False (a full cycle) for a pod of ours, or one that does not fit
    there (a full cycle reports it unaccounted)."""
    entry = pod_entry(key, raw, parse, scheduler_name, assumed, world.now, require_mutation)
    if entry.ours:
        return False
    if entry.holds_capacity and not account(world.cluster, entry):
        return False
    world.pods[key] = entry
    return True


def _ended(world: World, key: str, raw: JsonDict | None, out: Carried) -> bool:
    """A pod deleted (``raw`` None), finished or being deleted (``raw`` its new state): the single-pod workload of
    ours it made ends, a member of one of several pods finishes (:func:`_member_finished`), a finished pod of a
    workload that ended is deleted, or the capacity another scheduler's pod held is free; the world is brought up
    to date as a full cycle would build it; a member of a workload of several pods being deleted, or gone while the
    others on nodes are being deleted too, as :func:`_leaving` says. False (a full cycle) for a member deleted while
    another runs on (a gang's member going is for the gang's repair to judge) or one the world does not know."""
    entry = world.pods.get(key)
    if entry is None:
        return False
    workload = world.workload_of.get(key) if entry.ours else None
    if entry.ours and workload is None:
        if raw is None and entry.terminal:
            # A finished pod of a workload that ended (a Job's pods cleaned up after it): a full cycle without it
            # has nothing left of that workload to decide either.
            del world.pods[key]
            return True
        return False
    if entry.ours and workload is not None and world.pods_of.get(workload) != [key]:
        if (leaving := _leaving(world, entry, raw, workload, out)) is not None:
            return leaving
        return _member_finished(world, entry, raw, workload, out)
    held = entry.holds_capacity
    if raw is None:
        del world.pods[key]
    else:
        entry.raw = raw
        entry.terminal = _phase(raw) in TERMINAL_PHASES
        entry.deleting = bool((raw.get("metadata") or {}).get("deletionTimestamp"))
        if held and not entry.terminal:
            if entry.ours:
                out.restated.append(key)  # (its readiness, for blockAdmission: a pod being deleted is not ready)
                if entry.deleting:
                    out.terminating.append(key)  # (its workload on its way out: planner.terminating)
            return True  # being deleted, still running: it holds its node until it is gone, as a full cycle says
    if workload is not None:
        out.ended.append(workload)
    elif held:
        out.freed.append(key)
    return True


def _finishes(raw: JsonDict) -> bool:
    return _phase(raw) in TERMINAL_PHASES


def _leaving(world: World, entry: PodEntry, raw: JsonDict | None, workload: str, out: Carried) -> bool | None:
    """A member of a workload of several pods being deleted, or gone while every other member on a node is being
    deleted too: a preemption's victim (a pod group, a Job, a JobSet), work whose owner deleted it, a JobSet
    restarting. Being deleted, it holds its node and its workload's quota as before, whatever the others do, when
    a rebuild groups the workload as it was (``out.terminating`` marks the workload on its way out once all its
    members on nodes are being deleted, as a rebuild reads it: ``planner.terminating``). Gone, the workload is what a
    rebuild groups from the members left (``out.regroup``: its admission made again from them, as a rebuild admits
    what holds nodes, and on its way out), a Job's replacement pods among them (the Job controller makes them as
    soon as the old ones are being deleted). Only pod groups and the kinds whose controllers own their pods
    (``joins_late``: a Job, a JobSet...). None: not such a change (:func:`_member_finished` judges it)."""
    known: Workload | None = None
    if not entry.group:
        known = _known(world, workload)
        if known is None or not joins_late(known):
            return None
    if raw is not None:
        if _finishes(raw) or not (raw.get("metadata") or {}).get("deletionTimestamp") or not entry.holds_capacity:
            return None
        # Being deleted, on its node: a rebuild charges it there and keeps it in its workload, as before.
        was = entry.raw, entry.deleting
        entry.raw, entry.deleting = raw, True
        if known is not None and ((as_now := regrouped(world, workload)) is None
                                  or as_now.pod_sets != known.pod_sets):
            entry.raw, entry.deleting = was  # (a rebuild groups it otherwise: it judges it)
            return None
        out.restated.append(entry.key)
        out.terminating.append(entry.key)
        return True
    if not entry.deleting:
        return None
    others: list[PodEntry] = []
    for k in world.pods_of.get(workload, []):
        o = world.pods.get(k)
        if k == entry.key or (o is None and workload in out.regroup):
            continue  # (another member gone earlier in this batch)
        if o is None or (o.holds_capacity and not o.deleting):
            return None  # a member running on: a gang's repair, or the workload a rebuild groups, is a full cycle's
        if o.node is None and not o.terminal and entry.group:
            return None  # a pod group's member waiting for a node: the gang's repair is a full cycle's
        others.append(o)  # (a Job's replacement pod waits for its workload's old pods to be gone: gangs.join)
    left = [p for o in others if (p := _current(o)) is not None]
    from_left = _grouped(world, left) if left else []
    if from_left is None or len(from_left) > 1 or (from_left and from_left[0].key != workload):
        return None
    if entry.holds_capacity:
        out.freed.append(entry.key)
    del world.pods[entry.key]
    if from_left:
        out.regroup[workload] = from_left[0]
    else:  # (its last member gone: the workload ends, as a single pod's workload does)
        out.regroup.pop(workload, None)
        out.ended.append(workload)
    return True


def _member_finished(world: World, entry: PodEntry, raw: JsonDict | None, workload: str, out: Carried) -> bool:
    """A bound member of a workload of several pods finished (``Succeeded`` or ``Failed``): a full cycle keeps the
    workload admitted on its other pods, its quota whole (the finished pod is still one of its pods), the finished
    one holding no node: the core's ``leave``. The last one finishing finishes the workload, as a full cycle finds
    it with no pod left running, and a finished member of a workload none of whose pods runs being deleted ends it
    (finishing it again changes nothing). Deleted, or being deleted, while it or another member runs: False, a
    full cycle (the workload a full cycle builds without that pod asks less quota)."""
    others = [world.pods.get(k) for k in world.pods_of.get(workload, []) if k != entry.key]
    if raw is None and entry.terminal and all(o is not None and o.terminal for o in others):
        del world.pods[entry.key]
        out.ended.append(workload)
        return True
    if raw is None or _phase(raw) not in TERMINAL_PHASES or entry.node is None or any(o is None for o in others):
        return False  # (a member the world lost: only a full cycle rebuilds that workload)
    if all(o is not None and o.terminal for o in others):
        _finished(entry, raw)
        out.ended.append(workload)
        return True
    if not any(o is not None and o.node is not None and not o.terminal for o in others):
        return False  # no member left on a node, only late ones waiting: a full cycle queues the workload anew
    # Others run on: the workload a full cycle groups from its pods as they now stand must ask what it asked (a
    # pod set's count grows with live pods beyond its plan, which a finished one may have been one of).
    known = _known(world, workload)
    was = entry.raw, entry.terminal, entry.deleting
    held = entry.holds_capacity
    _finished(entry, raw)
    as_now = regrouped(world, workload)
    if known is None or as_now is None or as_now.pod_sets != known.pod_sets:
        entry.raw, entry.terminal, entry.deleting = was
        return False
    out.regrouped[workload] = as_now
    if held:
        out.left.append((workload, entry.key))
    # (the members left may all be leaving now: the workload is then on its way out, as a rebuild reads it)
    out.terminating.extend(o.key for o in others if o is not None and o.holds_capacity)
    return True


def _finished(entry: PodEntry, raw: JsonDict) -> None:
    entry.raw = raw
    entry.terminal = True
    entry.deleting = bool((raw.get("metadata") or {}).get("deletionTimestamp"))


def _known(world: World, key: str) -> Workload | None:
    return next((w for w in world.workloads if w.key == key), None)


def _current(entry: PodEntry) -> Pod | None:
    """The entry's pod as its last state says (a carried status change updates ``raw`` only): its phase and node."""
    pod = entry.pod
    if pod is None:
        return None
    phase = (entry.raw.get("status") or {}).get("phase") or pod.phase
    if pod.phase != phase or pod.node_name != entry.node:
        pod = replace(pod, phase=phase, node_name=entry.node)
    return pod


def regrouped(world: World, key: str, extra: Sequence[Pod] = ()) -> Workload | None:
    """The workload ``key`` as a full cycle groups it from its pods as they now stand, and ``extra`` (pods created
    since); None when they make no workload of that key alone."""
    pods = [p for k in world.pods_of.get(key, []) if (e := world.pods.get(k)) is not None
            and (p := _current(e)) is not None]
    built = _grouped(world, [*pods, *extra])
    return built[0] if built is not None and len(built) == 1 and built[0].key == key else None


def _grouped(world: World, pods: list[Pod]) -> list[Workload] | None:
    """``pods`` grouped into workloads as a full cycle groups them (the kept world's workload objects); None when
    the grouping reports a problem (a full cycle says it)."""
    problems = Problems()
    built = world_workloads(world, pods, problems) if pods else []
    stamp_bound_at(world, built)
    return None if problems.errors else built


def _adopt(world: World, policy: KueuePolicy, workload: Workload) -> None:
    """Put ``workload`` (regrouped) in the place of the kept world's workload of its key, and in the policy's."""
    at = next(i for i, w in enumerate(world.workloads) if w.key == workload.key)
    for k in world.pods_of.get(workload.key, []):
        world.workload_of.pop(k, None)  # (a finished pod a full cycle leaves out of it belongs to no workload)
    world.workloads[at] = workload
    keys = [p.key for p in workload.pods]
    world.pods_of[workload.key] = keys
    for k in keys:
        world.workload_of[k] = workload.key
    info = policy.info(workload.key)
    if info is not None:
        info.workload = replace(info.workload, pods=list(workload.pods))


_DELETION = ("deletionTimestamp", "deletionGracePeriodSeconds")


def _memory_used(obj: JsonDict) -> Any:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(GPU_MEMORY_USED_ANNOTATION)


def _unobserved(obj: JsonDict) -> JsonDict:
    """``obj`` as a carried cycle compares it: without its status, its deletion and the node agent's observation
    of its GPU memory."""
    view = without_status(obj, _DELETION)
    notes = view["metadata"].get("annotations")
    if isinstance(notes, dict) and GPU_MEMORY_USED_ANNOTATION in notes:
        view["metadata"] = {**view["metadata"],
                            "annotations": {k: v for k, v in notes.items() if k != GPU_MEMORY_USED_ANNOTATION}}
    return view


def _phase(obj: JsonDict) -> Any:
    return (obj.get("status") or {}).get("phase")


def _device_shape(ns: NodeState) -> tuple[Any, ...]:
    """What of a node's state its devices and capacity make: everything a change carried in place must leave
    alone (its GPUs, MIG instances, NVLinks, allocatable), but the GPUs' health (:func:`apply_nodes` sets it)."""
    return (tuple(sorted(ns.allocatable.items())), ns.gpu_model, ns.fail_requests_greater_than_one,
            tuple(sorted(ns.nvlinks.items())),
            tuple((g.index, g.device_id, g.model, g.memory_mib, g.mode, g.resource, g.replicas,
                   g.dra_driver, g.dra_pool, g.dra_device, len(g.partitions),
                   tuple((m.placement, m.device_id, m.resource, m.memory_mib, m.compute_slices) for m in g.mig))
                  for g in ns.gpus))


def _changed_node(world: World, policy: KueuePolicy, parse: ParseCache, key: str, raw: JsonDict) -> Node | None:
    """The node as it now parses, when what changed is only what placement reads beside its devices (labels,
    taints, cordon, readiness, pool, a GPU's health), so the kept cluster state can take it in place
    (:func:`apply_nodes`); None: a full cycle (it does not parse, its devices or capacity changed, the nodes' DRA
    devices or a topology are read from the nodes' labels, or a preemption's room on nodes is held for a
    workload)."""
    old = world.cluster.nodes.get(key)
    parsed = parse.one(r.NODES, key, raw)
    node = parsed.obj
    if (not isinstance(node, Node) or world.dra.resource_slices or world.queues.topologies
            or policy.state.nominations):
        return None
    if old is None:
        # A node joining (KueuePolicy.add_nodes), into the policy's cluster state; a policy that places nothing
        # (quotaOnly) has none, and the world's would not follow.
        return node if policy.cluster is world.cluster else None
    fresh = node_state_from(node, world.cluster.catalog)
    return node if _device_shape(fresh) == _device_shape(old) else None


def _removable(world: World, policy: KueuePolicy, name: str) -> bool:
    """Whether a node deleted can leave the kept cluster state: one it knows, where nothing else forbids carrying
    nodes, on which the pods that hold capacity are each a workload of its own (drained first, as a cluster scaling
    down drains it, there are none; a node lost, a spot instance reclaimed, leaves its pods bound to it until the
    pod garbage collector deletes them: :func:`remove_nodes`). A pod of a workload of several pods (a gang's repair
    judges it) or one whose Binding is on its way there takes a full cycle."""
    if not (name in world.cluster.nodes and policy.cluster is world.cluster and not world.dra.resource_slices
            and not world.queues.topologies and not policy.state.nominations):
        return False
    for e in world.pods.values():
        if e.node != name or not e.holds_capacity:
            continue
        if e.assumed or e.completing or e.key not in world.cluster.placements:
            return False
        if e.ours and world.pods_of.get(world.workload_of.get(e.key, ""), []) != [e.key]:
            return False
    return True


def _orphaned(world: World, name: str) -> bool:
    """Whether pods of the world hold capacity on ``name`` though no node of that name is known (one removed under
    them, charged nowhere: ``World.unaccounted``): a node of that name joining takes a full cycle, which charges
    them there."""
    return name not in world.cluster.nodes and any(
        (e := world.pods.get(k)) is not None and e.node == name and e.holds_capacity for k in world.unaccounted)


def remove_nodes(kept: Kept, gone: set[str], now: float, readmitted: list[str]) -> bool:
    """Nodes deleted: out of the world and of the kept policy (``KueuePolicy.remove_nodes``). After the cycle's
    releases, which take the pods that ended meanwhile off them. The pods still on them are left where a full cycle
    leaves them: bound to a node that is not there, charged nowhere (``World.unaccounted``), their workloads
    admitted again as a rebuild admits them (quota by the flavor a node they are not on implies), until the pod
    garbage collector deletes them (their keys added to ``readmitted``: their readiness is judged again, as a
    rebuild judges it). False (a full cycle) when such a pod is no longer a workload of its own."""
    if not gone:
        return True
    world, policy = kept.world, kept.policy
    stranded = [e for e in world.pods.values() if e.node in gone and e.holds_capacity]
    ours: list[str] = []
    for e in stranded:
        workload = world.workload_of.get(e.key) if e.ours else None
        if e.ours and (workload is None or world.pods_of.get(workload) != [e.key]):
            return False
        if workload is not None:
            ours.append(workload)
    for key in ours:
        _given_back(kept, key, now)  # (before its node leaves the cluster state: its pod's placement with it)
    for e in stranded:
        if e.key in world.cluster.placements:
            world.cluster.release(e.key)
        world.unaccounted.append(e.key)
    world.nodes = [n for n in world.nodes if n.name not in gone]
    policy.remove_nodes(sorted(gone))
    for key in ours:
        w = _known(world, key)
        assert w is not None
        _admitted_again(kept, key, w, now)
        readmitted.append(key)
    return True


def apply_nodes(world: World, policy: KueuePolicy, nodes: dict[str, Node], now: float) -> None:
    """Nodes changed beside their devices, taken in place: the world's node, and the cluster state's labels, taints,
    cordon, readiness and pool (``ClusterState.touch``: the placement index and the fleet tally re-read it); nodes
    joining, added to the world and to the policy (``KueuePolicy.add_nodes``, which makes its placer again); then
    the parked workloads woken (``SchedulerState.unpark_nodes_changed``: those parked for nodes, and those parked
    for the quota of flavors after one whose nodes could not take them), as capacity coming back wakes them (a node
    uncordoned, a taint
    gone, a label a selector wants, a node added). Pods stay where they are, as a full cycle keeps them."""
    if not nodes:
        return
    cluster = world.cluster
    added = [node for name, node in sorted(nodes.items()) if name not in cluster.nodes]
    for name, node in nodes.items():
        ns = cluster.nodes.get(name)
        if ns is None:
            continue
        fresh = node_state_from(node, cluster.catalog)
        ns.labels, ns.taints, ns.unschedulable, ns.ready, ns.pool = (fresh.labels, fresh.taints, fresh.unschedulable,
                                                                    fresh.ready, fresh.pool)
        for gpu, now_gpu in zip(ns.gpus, fresh.gpus, strict=True):
            gpu.healthy = now_gpu.healthy  # (a pod on a GPU turned unhealthy keeps it, as a rebuild charges it there)
        cluster.touch(name)
    world.nodes = [nodes.get(n.name, n) for n in world.nodes]
    if added:
        world.nodes = sorted(world.nodes + added, key=lambda n: n.name)
    if added:
        policy.add_nodes([node_state_from(n, cluster.catalog) for n in added], now)  # (it wakes the parked too)
    else:
        policy.state.unpark_nodes_changed(now)


def _same_node(known: Node | None, parse: ParseCache, key: str, raw: JsonDict) -> bool:
    if known is None:
        return False
    parsed = parse.one(r.NODES, key, raw)
    return isinstance(parsed.obj, Node) and parsed.obj == known


def read_queue_changes(kept: Kept, snapshot: CacheSnapshot, carried: Carried, now: float, *, parse: ParseCache,
                       scheduler_name: str, queue_kinds: Sequence[r.ResourceType],
                       requeue: Callable[[list[str]], object]) -> bool:
    """Namespaces created, relabelled or deleted, LocalQueues created, changed or deleted, and ClusterQueues or
    Cohorts changed, since the kept cycle, and no other queue kind changed (:func:`carried_pods` says so): the
    world's queue objects read again as a full cycle reads them (their generation with them), and the kept policy
    told (``KueuePolicy.namespaces_changed``, ``local_queues_changed``, ``queues_changed``; the workloads routed
    again are given back what Kueue kept of their requeues: ``requeue``). False (a full cycle) when the queues
    changed otherwise (a ClusterQueue or Cohort added, deleted or changed beside its quotas; Volcano's and KAI's
    queues, a LocalQueue in every namespace), the read finds an error the kept one did not (a LocalQueue with no
    ClusterQueue: a full cycle sets it aside and says so), or a workload admitted names a LocalQueue created,
    pointed elsewhere or deleted."""
    world, policy = kept.world, kept.policy
    both = read_world_objects(snapshot, parse=parse, scheduler_name=scheduler_name, queue_kinds=queue_kinds)
    if both.rejected or len(both.manifests.problems.errors) > len(world.queues.problems.errors):
        return False
    old_lqs, old_rest = _queues_shape(world.queues)
    new_lqs, new_rest = _queues_shape(both.manifests)
    touched = {(ns, name) for ns, _, name in (key.partition("/") for key in carried.local_queues)}
    # (ClusterQueues and Cohort objects added or gone: queues_changed says whether it takes them)
    if ((new_rest != old_rest and not carried.queue_specs)
            or {q for q in new_lqs if q[:2] not in touched} != {q for q in old_lqs if q[:2] not in touched}):
        return False
    old_touched = [q for q in old_lqs if q[:2] in touched]
    new_touched = [q for q in new_lqs if q[:2] in touched]
    was_cq = {(ns, name): cq for ns, name, cq in old_touched}
    now_cq = {(ns, name): cq for ns, name, cq in new_touched}
    if len(was_cq) != len(old_touched) or len(now_cq) != len(new_touched):
        return False  # (two LocalQueues of one name, Kueue's kind beside gpufleet's: a full cycle says which counts)
    changed: dict[tuple[str, str], str | None] = {k: now_cq.get(k) for k in touched if now_cq.get(k) != was_cq.get(k)}
    checked = both.manifests.controllers.cluster_queue_checks
    if checked and any(cq in checked for cq in (*changed.values(), *(was_cq.get(k) for k in changed))):
        return False  # (its workloads' holds are read at grouping, against the LocalQueue's ClusterQueue's checks)
    moved: list[WorkloadInfo] = []
    if carried.queue_specs:
        if both.manifests.controllers.cluster_queue_checks != world.queues.controllers.cluster_queue_checks:
            return False  # (a ClusterQueue's admission checks hold workloads back: a rebuild reads them; a review)
        # (with the scheduler's configuration, which the queue objects' read leaves out: waitForPodsReady's default)
        routed = policy.queues_changed(replace(both.manifests, config=world.config), now)
        if routed is None:
            return False
        moved += routed
    if changed:
        routed = policy.local_queues_changed(changed, now)
        if routed is None:
            return False
        moved += routed
    # A workload moved twice in one batch (to a ClusterQueue created, then by its LocalQueue pointed elsewhere): its
    # record as it was before the first move is the one to count out (a review found it counted twice).
    moved = list({before.key: before for before in reversed(moved)}.values())
    if moved:
        requeue([before.key for before in moved])
        if kept.counts is not None:
            for before in moved:
                kept.counts.add(before, -1)
                if (after := policy.info(before.key)) is not None:
                    kept.counts.add(after, 1)  # (as the requeue memory left it: pending, or deactivated)
    world.queues = both.manifests
    world.queue_generation = both.generation
    if carried.namespaces:
        policy.namespaces_changed(carried.namespaces)
    return True


def _queues_shape(m: Manifests) -> tuple[list[tuple[str, str, str]], tuple[list[str], list[str]]]:
    """The LocalQueues of a parse, and its ClusterQueues' and cohorts' names."""
    return (sorted((lq.meta.namespace or "", lq.meta.name, lq.cluster_queue) for lq in m.local_queues),
            (sorted(cq.name for cq in m.cluster_queues), sorted(c.name for c in m.cohorts)))


def read_owners(world: World, snapshot: CacheSnapshot, owners: list[WorkloadObject], *, parse: ParseCache,
                scheduler_name: str, queue_kinds: Sequence[r.ResourceType]) -> bool:
    """Read the workload-kind objects of ``snapshot`` into ``world`` as a full cycle reads them (the same memoised
    parse, :meth:`ParseCache.world_objects`), for the ``owners`` created since; False (a full cycle) when the queue
    kinds' parse is not the kept one's (a queue changed meanwhile) or one of ``owners`` does not parse (the full
    cycle tells why, in an event)."""
    both = read_world_objects(snapshot, parse=parse, scheduler_name=scheduler_name, queue_kinds=queue_kinds)
    # Any object left out now is new to the kept world, which holds none (a cycle with one is never kept): one
    # created since, or scaled past what a workload may hold (a review found the latter carried on, owner lost).
    if both.generation != world.queue_generation or both.rejected:
        return False
    # Pods the world knows that a new owner takes (its pods seen before it: a Job's pods can come through their
    # watch first, a Volcano PodGroup named before it exists): a full cycle groups them into its workload.
    by_kind = {(res.group, res.kind, key) for res, key, _ in owners}
    new_owners = [o for o in both.manifests.controllers.owners
                  if (o.rule.group, o.kind, f"{o.namespace}/{o.meta.name}") in by_kind]
    namespaces = {o.namespace for o in new_owners}
    known = [e.pod for e in (*world.pods.values(), *world.unjoined.values())
             if e.ours and e.pod is not None and e.namespace in namespaces] if namespaces else []
    if known and len(grouping.adopt(known, new_owners).unclaimed) < len(known):
        return False
    world.queues = both.manifests
    return True


def extend(kept: Kept, entries: list[PodEntry], now: float, readmitted: list[str]) -> list[Workload] | None:
    """Add the new pods' whole workloads to the kept world and submit them to its policy (returned); the members
    of a gang still short of some wait in ``world.unjoined`` for the next cycle (:data:`UNJOINED_WAIT`). Pods
    that join a workload the world knows are added to it (an admitted Job's next pod), or make it again with them
    (a Job's replacement pods while its old ones are being deleted: their keys added to ``readmitted``). None
    (nothing changed) when a pod belongs with pods the world knows otherwise: a full cycle groups them."""
    world = kept.world
    if not _claims_carried(world, entries):
        return None
    chosen = [e.pod for e in entries if e.pod is not None and e.problem is None]
    built = _grouped(world, chosen)
    if built is None:
        return None
    workloads = built
    grouped = [p.key for w in workloads for p in w.pods]
    if len(grouped) != len(chosen) or set(grouped) != {p.key for p in chosen}:
        return None  # a pod in no workload or in two, or one made up: only a full cycle builds those
    if any(w.key in world.ended for w in workloads):
        # The next pods of an owner whose workload ended here: a full cycle groups them with its finished pods, which
        # take the places the new ones leave free (and are placed with them for that cycle).
        return None
    joining: list[Workload] = []  # the workloads the world knows, with their pods created since
    remade: list[Workload] = []  # the same, on their way out: made again with them (a Job's replacement pods)
    for w in workloads:
        if any(p.key in world.workload_of for p in w.pods):
            return None
        if w.key in world.pods_of:
            pods = [p for p in chosen if p.key in {m.key for m in w.pods}]
            if (merged := _joinable(kept, w, pods)) is not None:
                joining.append(merged)
            elif (merged := _replacing(kept, w, pods)) is not None:
                remade.append(merged)
            else:
                return None  # a late member of a pod group (a gang left incomplete), or of a pending workload...
    late = {w.key for w in (*joining, *remade)}
    # A gang short of members (a controller still creating them) waits for the rest a little, off the books.
    waiting = {p.key for w in workloads if not w.complete and w.key not in late for p in w.pods}
    world.unjoined = {e.key: e for e in entries if e.key in waiting}
    world.unjoined_at = {key: world.unjoined_at.get(key, now) for key in world.unjoined}
    workloads = [w for w in workloads if w.complete and w.key not in late]
    world.now = now
    for e in entries:
        if e.key not in waiting:
            world.pods[e.key] = e
    for w in workloads:
        keys = [p.key for p in w.pods]
        world.workloads.append(w)
        world.pods_of[w.key] = keys
        for key in keys:
            world.workload_of[key] = w.key
        kept.policy.submit(w, now)
    for merged in joining:
        # As a full cycle groups it, with the pods created since; the policy places them next to the others
        # (gpufleet.live.gangs.join, which the cycle calls for World.late before its round).
        _adopt(world, kept.policy, merged)
        world.late.add(merged.key)
    for merged in remade:
        # Admitted again as a rebuild admits it, from what its old pods hold, on its way out; its new pods wait in
        # World.late until the old ones are gone (gangs.join says why).
        _readmitted(kept, merged.key, merged, now)
        world.late.add(merged.key)
        readmitted.append(merged.key)
    return workloads


def _claims_carried(world: World, entries: list[PodEntry]) -> bool:
    """Whether the new pods' DRA claims are for a cycle that carries on: False (a full cycle) when one names a claim
    that is allocated or reserved already (a full cycle binds where an allocation is), or one another pod names (a
    full cycle refuses claims several pods share). A pod whose claims are not all there yet is submitted held
    (``DraNeed.awaiting``), as a full cycle submits it, and submitted again once they are
    (:func:`_claims_came`)."""
    claimed = [e for e in entries if e.pod is not None and e.problem is None and e.pod.template.resource_claims]
    if not claimed:
        return True
    claims = world_catalog(world).claims
    named: dict[str, int] = {}
    by_name = any(ref.resource_claim_name is not None for e in claimed if e.pod is not None
                  for ref in e.pod.template.resource_claims)
    for e in (*world.pods.values(), *entries) if by_name else ():  # (claims made from templates are the pod's own)
        if e.pod is not None and e.pod.template.resource_claims:
            for ref in e.pod.template.resource_claims:
                if ref.resource_claim_name is not None:
                    key = f"{e.namespace}/{ref.resource_claim_name}"
                    named[key] = named.get(key, 0) + 1
    for e in claimed:
        assert e.pod is not None
        refs = e.pod.template.resource_claims
        if any(claim is not None and (claim.allocation is not None or claim.reserved_for)
               for claim in (claims.get(name) for name in claim_names(e.namespace, refs))) or any(
                named.get(f"{e.namespace}/{ref.resource_claim_name}", 0) > 1 for ref in refs
                if ref.resource_claim_name is not None):
            return False
    return True


def _claims_came(world: World, key: str, raw: JsonDict, new: dict[str, PodEntry], out: Carried, *,
                 scheduler_name: str, parse: ParseCache, assumed: AssumedPods, require_mutation: bool) -> bool:
    """A pending pod of ours whose DRA claims now resolve otherwise (its status names the claim made for it, or a
    claim it names was created): its workload, pending, is withdrawn (``Carried.withdrawn``) and its pods submitted
    again as new (this one read again), grouped as a full cycle groups them now. False (a full cycle) when a pod of
    that workload is placed or bound."""
    entry = world.pods.get(key)
    workload = world.workload_of.get(key)
    if entry is None or not entry.ours or workload is None or key in new:
        return False
    members = world.pods_of.get(workload, [])
    entries = [world.pods.get(k) for k in members]
    if not all(e is not None and e.ours and e.node is None and e.key not in world.cluster.placements
               and not e.terminal for e in entries):
        return False
    made = _still_waiting(world, key, raw, parse, scheduler_name, assumed, require_mutation)
    if made is None or made.problem is not None:
        return False
    for e in entries:
        assert e is not None
        del world.pods[e.key]
        new[e.key] = made if e.key == key else e
    out.withdrawn.append(workload)
    return True


def _still_waiting(world: World, key: str, raw: JsonDict, parse: ParseCache, scheduler_name: str,
                   assumed: AssumedPods, require_mutation: bool) -> PodEntry | None:
    """The pod read again (its claims named anew), if it still waits for a node: not being deleted, gated, finished
    or placed."""
    made = pod_entry(key, raw, parse, scheduler_name, assumed, world.now, require_mutation)
    return None if made.deleting or made.gated or made.terminal or made.node is not None else made


def _joinable(kept: Kept, new: Workload, pods: list[Pod]) -> Workload | None:
    """The kept world's workload that pods created since (``new``, their ``pods``) join, grouped with them as a full
    cycle groups it: an admitted workload of a kind whose controller owns its pods (``late_members.JOINING_KINDS``)
    that asks what it asked; None otherwise (a full cycle judges them: a pod set that grows with the new pods asks
    more quota, which the admission does not hold)."""
    world = kept.world
    known = _known(world, new.key)
    info = kept.policy.info(new.key)
    if known is None or info is None or info.state is not ADMITTED or not joins_late(known):
        return None
    merged = regrouped(world, new.key, pods)
    if merged is None or merged.pod_sets != known.pod_sets or not {p.key for p in new.pods} <= {
            p.key for p in merged.pods}:
        return None
    return merged


def _replacing(kept: Kept, new: Workload, pods: list[Pod]) -> Workload | None:
    """The kept world's workload that pods created since (``new``, their ``pods``) replace members of, grouped with
    them as a full cycle groups it: one of a kind whose controller owns its pods (``joins_late``) whose every pod on
    a node is being deleted (a preemption's victim, a JobSet restarting); None otherwise."""
    world = kept.world
    known = _known(world, new.key)
    if known is None or not joins_late(known):
        return None
    holding = [e for k in world.pods_of.get(new.key, ()) if (e := world.pods.get(k)) is not None
               and e.holds_capacity]
    if not holding or not all(e.deleting for e in holding):
        return None
    merged = regrouped(world, new.key, pods)
    if merged is None or not {p.key for p in new.pods} <= {p.key for p in merged.pods}:
        return None
    return merged


def release(kept: Kept, carried: Carried, now: float) -> None:
    """What ended since the kept cycle, given back as the simulator gives it back: our workloads finished
    (``Policy.finish``: their quota and nodes released, parked workloads woken), our gangs' finished members' nodes
    (``KueuePolicy.leave``), other schedulers' pods' capacity freed on the nodes (workloads waiting for nodes
    woken)."""
    world, policy = kept.world, kept.policy
    for regrouped in carried.regrouped.values():
        _adopt(world, policy, regrouped)
    for workload, pod in carried.left:
        policy.leave(workload, pod, now)  # its node capacity free (parked workloads woken), its quota kept
    for key in carried.freed:
        if key in world.cluster.placements:
            world.cluster.release(key)
    if carried.freed:
        policy.state.unpark_placement(now)
    for key, left in carried.regroup.items():
        _readmitted(kept, key, left, now)
    if not carried.ended and not carried.withdrawn:
        return
    ended = {*carried.ended, *carried.withdrawn}
    for key in ended:
        info = policy.info(key)
        if info is not None and kept.counts is not None:
            kept.counts.add(info, -1)  # as it stood: pending or admitted; finished, it is counted nowhere
        policy.finish(key, now)
        if info is not None and joins_late(info.workload) and key not in carried.withdrawn:
            world.ended.add(key)
        for pod in world.pods_of.pop(key, []):
            world.workload_of.pop(pod, None)
    world.workloads = [w for w in world.workloads if w.key not in ended]


def _readmitted(kept: Kept, key: str, workload: Workload, now: float) -> None:
    """A workload on its way out whose members changed (a pod group or a Job that lost a member, a Job's replacement
    pods), made again from its pods as a rebuild makes it: its admission given back and made again from what they
    hold (``KueuePolicy.submit`` admits what holds nodes), still on its way out."""
    _given_back(kept, key, now)
    _admitted_again(kept, key, workload, now)


def _given_back(kept: Kept, key: str, now: float) -> None:
    """The first half of :func:`_readmitted`: the workload's admission given back (its quota, its pods' placements),
    and its count with it."""
    before = kept.policy.info(key)
    if before is not None and kept.counts is not None:
        kept.counts.add(before, -1)
    kept.policy.finish(key, now)


def _admitted_again(kept: Kept, key: str, workload: Workload, now: float) -> None:
    """The second half of :func:`_readmitted`: ``workload`` (its pods as they now stand) in the world and submitted,
    on its way out when its pods on nodes are all being deleted (``planner.terminating``, as a rebuild reads it),
    told what the node agent saw its pods use (the finish forgot it), and counted."""
    world, policy = kept.world, kept.policy
    keys = [p.key for p in workload.pods]
    for k in world.pods_of.get(key, []):
        world.workload_of.pop(k, None)
    for k in keys:
        entry = world.pods[k]
        if entry.holds_capacity and k not in world.cluster.placements:
            # (a member left on a node that is gone stays charged nowhere; one with DRA claims on its claims'
            # devices, as a rebuild charges it: a review found it charged on none, its GPU handed out again)
            account(world.cluster, entry, claimed_devices(world, entry))
        world.workload_of[k] = key
    world.pods_of[key] = keys
    world.workloads = [workload if w.key == key else w for w in world.workloads]
    policy.submit(workload, now)
    planner.terminating(world, policy, keys)
    observed_memory.tell(world, policy, now, keys)
    after = policy.info(key)
    if after is not None and kept.counts is not None:
        kept.counts.add(after, 1)
