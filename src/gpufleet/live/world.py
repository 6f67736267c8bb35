"""One cycle's input, rebuilt from an informer-cache snapshot: what the core reads, nothing kept from before.

* the queue kinds (PriorityClasses, Namespaces, ResourceFlavors, ClusterQueues, LocalQueues, Cohorts,
  WorkloadPriorityClasses) as a :class:`~gpufleet.api.manifests.Manifests` bundle, with the objects of the
  workload kinds the scheduler watches (:mod:`~gpufleet.live.workloadsource`: Jobs, JobSets, Deployments...,
  those whose pod templates name this scheduler) and the Volcano and KAI queues, runtimes and AdmissionChecks
  they refer to;
* the :class:`~gpufleet.cluster.state.ClusterState` of every Node, with every pod that holds capacity
  already allocated: pods bound in the cache, and pods we bound whose Binding the cache does not show yet
  (:mod:`~gpufleet.live.assumed`). Devices come from our ``gpufleet.io/devices`` annotation when the pod
  carries one for its node, else first-fit (pods of other schedulers);
* our pods (``spec.schedulerName`` is ours): unbound ones are what the core schedules; bound ones are
  submitted too, so their quota is charged and they can be preempted. They are grouped into workloads as
  ``plan`` groups them (:func:`~gpufleet.cluster.build.build_workloads` without creating missing pods): by
  the owner their labels name (a JobSet's pods one gang, a Deployment's pods one workload each, a StatefulSet's
  pods one gang admitted with its first pod), else by Kueue pod group, else one workload per pod.

Rebuilding from scratch every cycle is what makes a restart or a leader change safe: the cycle after a
restart is just a cycle.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpufleet.admission.webhook import is_mutated
from gpufleet.api.dra_need import DeviceKey
from gpufleet.api.dra_nodes import attach_dra_gpus
from gpufleet.api.dra_objects import ResourceClaim
from gpufleet.api.errors import ManifestError, Problems
from gpufleet.api.gpushare import pod_is_fractional
from gpufleet.api.manifests import Manifests
from gpufleet.api.objects import POD_GROUP_COUNT_ANNOTATION, POD_GROUP_LABEL, Node, Pod, SchedulerConfig
from gpufleet.api.reader import parse_int_text
from gpufleet.api.workloadkinds.table import RULES
from gpufleet.cluster.build import build_workloads
from gpufleet.cluster.devices import DeviceGrant, InvariantError
from gpufleet.cluster.dra_claims import DraCatalog, claim_names, held_claims, published_devices, unheld_allocations
from gpufleet.cluster.state import ClusterState, first_free_grants
from gpufleet.cluster.workloads import Workload
from gpufleet.k8s import resources as r
from gpufleet.k8s.annotations import NODE_ANNOTATION, Intent, read_devices, read_intent
from gpufleet.k8s.informer import CacheSnapshot
from gpufleet.k8s.parsing import ParseCache, QueueParse, WorkloadObject
from gpufleet.live.assumed import AssumedPods
from gpufleet.live.grants import grants_from_ids
from gpufleet.live.workloadsource import WORKLOAD_KEYS
from gpufleet.scheduling.placement.dra import (
    device_nodes,
    grant_resources,
    grants_of_keys,
    hold_claims,
    keys_by_device_id,
)

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]

QUEUE_KINDS = (r.PRIORITY_CLASSES, r.NAMESPACES, r.RESOURCE_FLAVORS, r.CLUSTER_QUEUES, r.LOCAL_QUEUES, r.COHORTS,
               r.WORKLOAD_PRIORITY_CLASSES)
TERMINAL_PHASES = ("Succeeded", "Failed")


@dataclass(slots=True)
class PodEntry:
    key: str
    raw: JsonDict
    pod: Pod | None  # None when the pod does not parse (see problem)
    ours: bool
    uid: str | None
    node: str | None  # the node it is bound to (cache), assumed on, or being completed on (gang repair)
    devices: tuple[str, ...] | None  # what to account on ``node``; None: choose first-fit
    intent: Intent | None  # our annotation: for an unbound pod, an earlier cycle's plan
    terminal: bool
    deleting: bool
    gated: bool
    assumed: bool = False
    completing: bool = False  # an unbound gang member this cycle binds to finish its gang
    problem: str | None = None  # why gpufleet will not schedule it now
    waiting: str | None = None  # why a pod of an admitted workload, come after its admission, waits for room
    # unbound, but its DRA claims are allocated and reserved for it (a Binding lost after the claims were
    # written): it holds those devices, and this cycle binds it where they are
    claim_bound: bool = False

    @property
    def bound(self) -> bool:
        return bool((self.raw.get("spec") or {}).get("nodeName"))

    @property
    def holds_capacity(self) -> bool:
        return self.node is not None and not self.terminal

    @property
    def group(self) -> str | None:
        labels = (self.raw.get("metadata") or {}).get("labels") or {}
        value = labels.get(POD_GROUP_LABEL)
        return str(value) if value else None

    @property
    def namespace(self) -> str:
        return self.key.split("/", 1)[0]


@dataclass(slots=True)
class World:
    now: float
    queues: Manifests  # queue kinds and priority classes, with their problems
    config: SchedulerConfig
    nodes: list[Node]
    cluster: ClusterState
    pods: dict[str, PodEntry]
    workloads: list[Workload] = field(default_factory=list)
    workload_of: dict[str, str] = field(default_factory=dict)  # pod key -> workload key
    pods_of: dict[str, list[str]] = field(default_factory=dict)  # workload key -> pod keys
    unaccounted: list[str] = field(default_factory=list)  # bound pods whose capacity could not be charged
    # Objects left out because they do not parse: (resource, key, object, why), for events and the metric.
    invalid: list[tuple[r.ResourceType, str, JsonDict, str]] = field(default_factory=list)
    # Changes when the queue kinds' objects change (not the workload kinds'), see gpufleet.k8s.parsing.
    queue_generation: int = 0
    # The DRA objects (ResourceSlices, DeviceClasses, ResourceClaims, ResourceClaimTemplates) when the cluster
    # serves them: the nodes' DRA GPUs come from the slices, the pods' claims are resolved against the rest.
    dra: Manifests = field(default_factory=Manifests)
    # The catalog the pods' claims are resolved against (world_catalog), kept with the world: the devices' matches
    # are worked out once for every cycle that carries on from it. Where each claim is in ``dra.resource_claims``
    # (gpufleet.live.claim_changes keeps both up to date).
    dra_catalog: DraCatalog | None = None
    claim_at: dict[str, int] | None = None
    claim_bound: list[str] = field(default_factory=list)  # pods bound where their claims are (PodEntry.claim_bound)
    # Pods of ours a carried cycle saw arrive whose gang is still short of members (gpufleet.live.increment): not
    # in ``pods`` nor submitted until the rest arrive, or a full cycle builds the gang as it is. Since when.
    unjoined: dict[str, PodEntry] = field(default_factory=dict)
    unjoined_at: dict[str, float] = field(default_factory=dict)  # pod key -> when a carried cycle first held it
    # Admitted workloads with pods created after their admission still to place (gpufleet.live.gangs.join): a
    # cycle that carries on tries them again, as a full cycle tries every workload.
    late: set[str] = field(default_factory=set)
    # Workloads of a kind whose controller owns its pods (a Job's) that a carried cycle ended: a full cycle groups
    # their finished pods with the owner's next ones, which a carried cycle leaves to it.
    ended: set[str] = field(default_factory=set)

    @property
    def unjoined_since(self) -> float | None:
        """When the longest-waiting of the held members was first held back, if any waits."""
        return min(self.unjoined_at.values(), default=None)

    def manifests(self) -> Manifests:
        """The bundle the policy reads (queues and the Kueue Configuration); never the cached one itself."""
        q = self.queues
        return Manifests(namespaces=list(q.namespaces), priority_classes=list(q.priority_classes),
                         flavors=list(q.flavors), cluster_queues=list(q.cluster_queues),
                         local_queues=list(q.local_queues), cohorts=list(q.cohorts),
                         workload_priority_classes=list(q.workload_priority_classes), topologies=list(q.topologies),
                         config=self.config, problems=q.problems)

    def gangs(self) -> dict[str, list[PodEntry]]:
        """Our live pods by gang (its workload key): once :func:`finish` has grouped them, the workloads whose
        pods are placed together (pod groups, the gang kinds' workloads); before (beside Kueue, where Kueue's
        Workloads group them), by Kueue pod group label."""
        out: dict[str, list[PodEntry]] = defaultdict(list)
        if self.workloads:
            for w in self.workloads:
                if not w.gang or len(w.pods) < 2:
                    continue
                for p in w.pods:
                    e = self.pods.get(p.key)
                    if e is not None and e.pod is not None and not e.terminal:
                        out[w.key].append(e)
            return {k: v for k, v in out.items() if len(v) > 1}
        for e in self.pods.values():
            if e.ours and e.group and e.pod is not None and not e.terminal:
                out[f"{e.namespace}/{e.group}"].append(e)
        return out

    def pending(self) -> list[PodEntry]:
        """Our pods that still need a node."""
        return [e for e in self.pods.values() if e.ours and e.node is None and not e.terminal and not e.deleting]


def owners_of(world: World, workload: str) -> frozenset[str]:
    """The UIDs of the owners of a workload's pods (a Job's), as the world shows them."""
    out: set[str] = set()
    for key in world.pods_of.get(workload, ()):
        entry = world.pods.get(key)
        if entry is not None and entry.pod is not None:
            out.update(entry.pod.meta.owners)
    return frozenset(out)


def pod_entry(key: str, raw: JsonDict, parse: ParseCache, scheduler_name: str, assumed: AssumedPods,
           now: float, require_mutation: bool) -> PodEntry:
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict):
        annotations = {}
    uid = meta.get("uid")
    bound_node = spec.get("nodeName") or None
    ours = spec.get("schedulerName") == scheduler_name
    pod: Pod | None = None
    parsed = None
    if ours or bound_node is not None:
        # Another scheduler's pending pod is none of our business; its bound pods matter only for what they
        # hold, so one that does not parse is read again for its resources alone.
        parsed = parse.one(r.PODS, key, raw)
        pod = parsed.obj if isinstance(parsed.obj, Pod) else None
        if pod is None and not ours:
            pod = parse.holdings(key, raw)
    entry = PodEntry(
        key=key, raw=raw, pod=pod, ours=ours, uid=uid,
        node=bound_node, devices=None, intent=read_intent(annotations),
        terminal=status.get("phase") in TERMINAL_PHASES, deleting=bool(meta.get("deletionTimestamp")),
        gated=bool(spec.get("schedulingGates")),
    )
    if bound_node is not None:
        assumed.confirm(key)
        if annotations.get(NODE_ANNOTATION) == bound_node:
            entry.devices = read_devices(annotations)
    else:
        intent = assumed.get(key, uid, now)
        if intent is not None:
            entry.node, entry.devices, entry.assumed = intent.node, intent.devices, True
    if entry.ours and entry.node is None:
        if pod is None:
            entry.problem = f"the pod is invalid: {parsed.message if parsed else 'unreadable'}"
        elif require_mutation and pod_is_fractional(raw) and not is_mutated(raw):
            entry.problem = ("fractional GPU pod was not mutated by the gpufleet admission webhook "
                             "(NVIDIA_VISIBLE_DEVICES from gpufleet.io/visible-devices is missing); "
                             "recreate it with the webhook installed")
    return entry


def account(cluster: ClusterState, entry: PodEntry, claimed: frozenset[DeviceKey] | None = None) -> bool:
    """Charge ``entry``'s capacity and devices on its node: the devices its DRA claims' allocations name
    (``claimed``), else the recorded devices when they are valid there, else first-fit devices, else capacity
    alone. False when not even that fits (or no such node)."""
    assert entry.node is not None
    node = cluster.nodes.get(entry.node)
    if node is None or entry.pod is None:
        return False
    t = entry.pod.template
    tries: list[tuple[list[DeviceGrant] | None, dict[str, int]]] = []
    if not claimed and entry.devices and t.resource_claims:
        # Assumed (or recorded) before the cache shows its claims allocated: the devices it was sent to, by the
        # IDs the intent names, else they would look free until the claims' status arrives.
        by_id = keys_by_device_id(node)
        keys = [by_id.get(i) for i in entry.devices]
        claimed = frozenset(k for k in keys if k is not None) if all(keys) else None
    if claimed:
        # Its claimed devices, charged as the resources a DRA node counts them under (as placement charges them).
        grants = grants_of_keys(node, claimed)
        tries.append((grants, {**t.requests, **grant_resources(node, grants or [])}))
    if entry.devices is not None:
        tries.append((grants_from_ids(node, t.gpu, entry.devices), t.requests))
    tries += [(first_free_grants(node, t.gpu), t.requests), ([], t.requests)]
    for grants, requests in tries:
        if grants is None:
            continue
        try:
            cluster.allocate(entry.key, node.name, requests, grants)
            return True
        except InvariantError:
            continue
    return False


def read_world_objects(snapshot: CacheSnapshot, *, parse: ParseCache, scheduler_name: str,
                       queue_kinds: Sequence[r.ResourceType]) -> QueueParse:
    """The queue kinds and this scheduler's workload-kind objects of ``snapshot``, parsed together (memoised by
    :class:`ParseCache`; the memo of objects gone is dropped): what a full cycle reads, and what a carried one
    reads again when an owner was created (gpufleet.live.increment.read_owners)."""
    seen: list[tuple[str, str]] = []
    mine: list[WorkloadObject] = []
    for res_key, res in WORKLOAD_KEYS.items():
        for key, obj in snapshot.objects.get(res_key, {}).items():
            seen.append((res_key, key))
            if parse.ours(res, key, obj, scheduler_name):
                mine.append((res, key, obj))
    parse.forget_workload_objects_except(seen)
    return parse.world_objects((o for res in queue_kinds for o in snapshot.of(res).values()), mine)


def assemble(snapshot: CacheSnapshot, *, scheduler_name: str, kueue: SchedulerConfig, parse: ParseCache,
             assumed: AssumedPods, now: float, require_mutation: bool = True,
             queue_kinds: Sequence[r.ResourceType] = QUEUE_KINDS) -> World:
    """Parse the snapshot and charge every pod that holds capacity; workloads come later (:func:`finish`).
    ``queue_kinds``: the queue kinds and priority classes to read (gpufleet.io's or Kueue's, see
    :mod:`gpufleet.live.queuesource`)."""
    both = read_world_objects(snapshot, parse=parse, scheduler_name=scheduler_name, queue_kinds=queue_kinds)
    queues = both.manifests
    nodes: list[Node] = []
    raw_nodes = snapshot.of(r.NODES)
    invalid: list[tuple[r.ResourceType, str, JsonDict, str]] = []
    for key in sorted(raw_nodes):
        parsed = parse.one(r.NODES, key, raw_nodes[key])
        if isinstance(parsed.obj, Node):
            nodes.append(parsed.obj)
        else:
            invalid.append((r.NODES, key, raw_nodes[key], f"the node is left out: {parsed.message}"))
    parse.forget_except(r.NODES, raw_nodes)
    dra = _dra_objects(snapshot, parse, invalid)
    if dra.resource_slices:
        # attach_dra_gpus writes on the nodes: copies, so the parse cache keeps the nodes as parsed.
        nodes = [replace(n) for n in nodes]
        attach_dra_gpus(nodes, dra.resource_slices, Problems())
    cluster = ClusterState.from_nodes(nodes)

    raw_pods = snapshot.of(r.PODS)
    pods = {key: pod_entry(key, raw_pods[key], parse, scheduler_name, assumed, now, require_mutation)
            for key in sorted(raw_pods)}
    parse.forget_except(r.PODS, raw_pods)
    for gone in assumed.keys() - raw_pods.keys():
        assumed.forget(gone)  # deleted before the cache ever showed it bound
    world = World(now, queues, kueue, nodes, cluster, pods, queue_generation=both.generation, dra=dra)
    invalid += [(r.PODS, e.key, e.raw, e.problem) for e in pods.values()
                if e.ours and e.pod is None and e.problem is not None]
    world.invalid = invalid + _invalid_queue_objects(snapshot, queues, queue_kinds) + [
        (res, key, dict(obj), why) for res, key, obj, why in both.rejected]
    hold_pods_of(world, [(res, key, f"is invalid, so its pods wait: {why}") for res, key, _, why in both.rejected])
    # Recorded devices first: they are facts (or our own earlier choices); first-fit only fills around them.
    holders = [e for e in pods.values() if e.holds_capacity]
    claimed = held_by_claims(world, holders)
    # Pods whose claims name their devices first, then recorded devices: facts before first-fit guesses.
    for e in sorted(holders, key=lambda e: (e.key not in claimed, e.devices is None, e.key)):
        if not account(cluster, e, claimed.get(e.key)):
            world.unaccounted.append(e.key)
            log.warning("pod %s on %s: its resources could not be charged there", e.key, e.node)
    if dra.resource_claims:
        _hold_allocated_claims(world, holders)
    return world


def _hold_allocated_claims(world: World, holders: Iterable[PodEntry]) -> None:
    """As kube-scheduler's allocator, count every allocated device as in use: a pending pod of ours whose claims
    are all allocated and reserved for it is bound where they are (it holds them; the cycle sends its Binding),
    and the devices of allocated claims no pod holds go to placeholders (gpufleet.scheduling.placement.dra)."""
    claims = world_catalog(world).claims
    held = {k for e in holders if e.pod is not None and not e.terminal
            for k in claim_names(e.namespace, e.pod.template.resource_claims)}
    where: dict[DeviceKey, str] | None = None
    for e in world.pods.values():
        if not (e.ours and e.node is None and e.pod is not None and e.pod.template.resource_claims
                and not e.deleting and not e.gated and not e.terminal and e.problem is None):
            continue
        names = claim_names(e.namespace, e.pod.template.resource_claims)
        found = [claims.get(k) for k in names]
        if len(names) != len(e.pod.template.resource_claims) or not all(
                c is not None and c.allocation is not None and _reserved_for(c, e) for c in found):
            continue
        keys = frozenset((d.driver, d.pool, d.device) for c in found if c is not None and c.allocation is not None
                         for d in c.allocation.devices)
        if where is None:
            where = device_nodes(world.cluster)
        nodes = {where.get(k) for k in keys}
        if len(nodes) != 1 or None in nodes:
            continue
        e.node = nodes.pop()
        ids = {v: k for k, v in keys_by_device_id(world.cluster.nodes[e.node or ""]).items()}
        e.devices = tuple(ids[k] for k in sorted(keys))
        if account(world.cluster, e, keys):
            e.claim_bound = True
            world.claim_bound.append(e.key)
            held.update(names)
        else:
            e.node, e.devices = None, None
    hold_claims(world.cluster, unheld_allocations(world.dra.resource_claims, held), where)


def _reserved_for(claim: ResourceClaim, e: PodEntry) -> bool:
    name = e.key.split("/", 1)[1]
    return any(r.name == name and (r.uid is None or e.uid is None or r.uid == e.uid) for r in claim.reserved_for)


def _invalid_queue_objects(snapshot: CacheSnapshot, queues: Manifests,
                           queue_kinds: Sequence[r.ResourceType] = QUEUE_KINDS) -> list[
        tuple[r.ResourceType, str, JsonDict, str]]:
    """The queue-kind objects their parse left out, each with its errors joined."""
    by_kind = {res.kind: res for res in queue_kinds}
    messages: dict[tuple[str, str], list[str]] = defaultdict(list)
    for e in queues.problems.errors:
        if e.kind in by_kind and e.name:
            messages[(e.kind, e.name)].append(f"{e.field}: {e.message}" if e.field else e.message)
    out = []
    for (kind, name), texts in sorted(messages.items()):
        res = by_kind[kind]
        obj = snapshot.of(res).get(name)
        if obj is not None:
            out.append((res, name, obj, f"{res.kind} left out: " + "; ".join(texts)))
    return out


def hold_pods_of(world: World, owners: Iterable[tuple[r.ResourceType, str, str]]) -> None:
    """Our unbound pods whose labels (or annotations) name one of ``owners`` (resource, key, what is wrong with
    it: an object of a workload kind that does not parse, or that a failed cycle set aside) wait, saying so: read
    as pods of their own they would be placed one by one, never as the gang their owner makes them. (The apps
    kinds name their pods by name and selector, not labels; without their owner those pods are workloads of
    their own, as a Deployment's are anyway.)"""
    named: dict[tuple[str, str, str], str] = {}  # (namespace, label or annotation, value) -> why
    for res, key, why in owners:
        rule = RULES.get((res.group, res.kind))
        if rule is None:
            continue
        ns, _, name = key.rpartition("/")
        for labels in rule.owner_labels:
            named[(ns, labels.name, name)] = f"its {rule.label} {key} {why}"
    if not named:
        return
    for e in world.pods.values():
        if not e.ours or e.node is not None or e.pod is None or e.problem is not None:
            continue
        meta = e.pod.meta
        e.problem = next((named[(e.namespace, k, v)] for source in (meta.labels, meta.annotations)
                          for k, v in source.items() if (e.namespace, k, v) in named), None)


def _dra_objects(snapshot: CacheSnapshot, parse: ParseCache,
                 invalid: list[tuple[r.ResourceType, str, JsonDict, str]]) -> Manifests:
    """The DRA objects of the snapshot, each parsed on its own (memoised); an invalid one is left out, said."""
    out = Manifests()
    lists: dict[str, list[Any]] = {"ResourceSlice": out.resource_slices, "DeviceClass": out.device_classes,
                                   "ResourceClaim": out.resource_claims,
                                   "ResourceClaimTemplate": out.resource_claim_templates}
    for res in r.DRA_RESOURCES:
        raw = snapshot.of(res)
        for key in sorted(raw):
            parsed = parse.one(res, key, raw[key])
            if parsed.obj is None:
                invalid.append((res, key, raw[key], f"the {res.kind} is left out: {parsed.message}"))
            else:
                lists[res.kind].append(parsed.obj)
        parse.forget_except(res, raw)
    return out


def held_by_claims(world: World, holders: Iterable[PodEntry]) -> dict[str, frozenset[DeviceKey]]:
    """The DRA devices each bound pod holds through its claims' allocations (pods without claims left out)."""
    if not world.dra.resource_claims:
        return {}
    # (the world's catalog: its devices published once for this lookup and the pods' claims resolved after)
    return {e.key: devices for e in holders if (devices := claimed_devices(world, e)) is not None}


def stamp_bound_at(world: World, workloads: Iterable[Workload]) -> None:
    """Give each workload the time its first Binding was sent, from the pods' records of it (``Intent.at``): a
    policy built afresh admits it then, as the cycle that bound it did (a review found a rebuild ordering
    preemption candidates by creation, the kept policy by admission)."""
    pods = world.pods
    for w in workloads:
        sent = [e.intent.at for p in w.pods if (e := pods.get(p.key)) is not None and e.node is not None
                and e.intent is not None and e.intent.at]
        w.bound_at = min(sent) if sent else None


def world_catalog(world: World) -> DraCatalog:
    """The world's DRA catalog (its classes, templates, claims and the devices of its slices), made once."""
    if world.dra_catalog is None:
        dra = world.dra
        world.dra_catalog = DraCatalog(classes={c.name: c for c in dra.device_classes},
                                       templates={t.key: t for t in dra.resource_claim_templates},
                                       claims={c.key: c for c in dra.resource_claims},
                                       devices=published_devices(world.nodes, dra.resource_slices))
    return world.dra_catalog


def world_workloads(world: World, pods: list[Pod], problems: Problems) -> list[Workload]:
    """``pods`` grouped into workloads with the world's queue objects, its workload kinds' objects, its DRA objects
    (the pods' claims resolved against its catalog) and the scheduler's configuration. A cycle that carries on
    groups the pods created since with the same, as a full cycle groups them all."""
    q = world.queues
    dra = world.dra
    manifests = Manifests(pods=pods, priority_classes=q.priority_classes,
                          workload_priority_classes=q.workload_priority_classes, local_queues=q.local_queues,
                          controllers=q.controllers, nodes=world.nodes, resource_slices=dra.resource_slices,
                          device_classes=dra.device_classes, resource_claims=dra.resource_claims,
                          resource_claim_templates=dra.resource_claim_templates, config=world.config)
    claiming = any(p.template.resource_claims for p in pods)
    return build_workloads(manifests, problems, create_missing=False,
                           dra_catalog=world_catalog(world) if claiming else None)


def claimed_devices(world: World, entry: PodEntry) -> frozenset[DeviceKey] | None:
    """The devices a bound pod's DRA claims' allocations name (a rebuild charges it on those); None for a pod
    without claims, or one whose claims are not all allocated."""
    if entry.pod is None or not entry.pod.template.resource_claims:
        return None
    need = held_claims(entry.namespace, entry.pod.template.resource_claims, world_catalog(world))
    return need.choices[0].groups[0] if need.choices else None


def finish(world: World) -> None:
    """Build our workloads (single pods, pod groups, the workloads of the kinds watched) from our schedulable and
    bound pods."""
    chosen: list[Pod] = []
    for e in world.pods.values():
        if not e.ours or e.pod is None or e.gated or (e.deleting and e.node is None):
            continue
        if e.node is None and e.problem is not None:
            continue
        pod = e.pod
        if e.node is not None and pod.node_name != e.node:
            pod = replace(pod, node_name=e.node)  # assumed or being completed: the core sees it bound
        chosen.append(pod)
    problems = Problems()
    workloads = world_workloads(world, chosen, problems)
    world.workloads = workloads
    stamp_bound_at(world, workloads)
    for w in workloads:
        keys = [p.key for p in w.pods]
        world.pods_of[w.key] = keys
        for k in keys:
            world.workload_of[k] = w.key
    by_group = _group_errors(problems.errors)
    for p in chosen:
        e = world.pods[p.key]
        if p.key not in world.workload_of and e.node is None:
            e.problem = by_group.get((e.namespace, e.group or ""), "the pod could not be made into a workload")


def _group_errors(errors: list[ManifestError]) -> Mapping[tuple[str, str], str]:
    out: dict[tuple[str, str], str] = {}
    for err in errors:
        text = err.message
        if text.startswith("pod group ") and ":" in text:
            ns_group = text[len("pod group "):text.index(":")]
            ns, _, group = ns_group.partition("/")
            out[(ns, group)] = f"{text}; fix: {err.fix}" if err.fix else text
    return out


def expected_size(members: list[PodEntry]) -> int:
    """A pod group's declared total (kueue.x-k8s.io/pod-group-total-count), else its member count."""
    for e in members:
        raw = ((e.raw.get("metadata") or {}).get("annotations") or {}).get(POD_GROUP_COUNT_ANNOTATION)
        declared = parse_int_text(str(raw)) if raw is not None else None
        if declared is not None and declared > 0:
            return declared
    return len(members)
