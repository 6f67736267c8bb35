"""Live API objects → gpufleet's typed objects, through exactly the parsers manifests go through.

Each raw dict from the informer cache is wrapped in a :class:`~gpufleet.api.source.Document` and handed to
:func:`gpufleet.api.manifests.build`, so a Pod read from the API and the same Pod read from a YAML file
become the same object, with the same validation and the same error messages.

Parsing every pod each cycle would cost more than scheduling, so results are memoised by resourceVersion:
a cycle reparses only what changed since the last one. Nodes and Pods are parsed one object at a time
(nothing about them depends on other objects); the queue kinds are parsed together, because build checks
references between them (a ClusterQueue naming a missing ResourceFlavor is dropped with an error), and are
few. The workload kinds (Jobs, JobSets, Deployments... and the Volcano and KAI queues, training runtimes and
AdmissionChecks they refer to) go into that same build, whose last steps need them with the queues (Volcano's
and KAI's queues become ClusterQueues covering what their workloads request; a TrainJob is completed from its
runtime); each is read on its own first, memoised by resourceVersion like a pod, so that a Job whose status
changes costs one object's parse, not all of them.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpufleet.api.dra_objects import DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice
from gpufleet.api.errors import ManifestError, Problems
from gpufleet.api.manifests import ManifestBuilder, Manifests, build
from gpufleet.api.objects import Node, Pod
from gpufleet.api.source import Document
from gpufleet.api.workloadkinds import intake
from gpufleet.api.workloadkinds.model import ControllerObjects
from gpufleet.api.workloadkinds.templates import raw_templates, template_paths
from gpufleet.k8s.resources import ResourceType

SOURCE = "<api>"
log = logging.getLogger(__name__)
# The memo key of a foreign pod's resources-only parse (kept apart from its full parse).
_HOLDINGS = ResourceType("", "v1", "pods (resources only)", "Pod", namespaced=True)
_HOLDINGS_OF = "pods"  # ResourceType("", "v1", "pods", ...).key: forgetting pods forgets their slim parses too

JsonDict = dict[str, Any]
DraObject = ResourceSlice | DeviceClass | ResourceClaim | ResourceClaimTemplate


_LIVE_ORDER = 0  # the input order of every object read live (document's default): see ParseCache.world_objects


def document(obj: Mapping[str, Any], index: int = _LIVE_ORDER) -> Document:
    return Document(data=obj, file=SOURCE, line=0, index=index)


def _rv(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


# What the API server changes in an object without its meaning changing for gpufleet: a queue kind's status (the
# scheduler writes ClusterQueue and LocalQueue status itself every few cycles) and bookkeeping metadata.
_VOLATILE_METADATA = ("resourceVersion", "managedFields", "generation")


def _content(obj: Mapping[str, Any]) -> str:
    """A digest of a queue kind object as its parse reads it: everything but its status and volatile metadata. The
    queue kinds' parsers read no status (only Nodes', Pods' and Kueue Workloads' do, and those are not queue
    kinds)."""
    meta = obj.get("metadata")
    kept = {k: v for k, v in obj.items() if k not in ("status", "metadata")}
    if isinstance(meta, Mapping):
        kept["metadata"] = {k: v for k, v in meta.items() if k not in _VOLATILE_METADATA}
    text = json.dumps(kept, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


@dataclass(frozen=True, slots=True)
class Parsed:
    """One object's parse: the typed object (None when invalid) and its problems."""

    obj: Node | Pod | DraObject | None
    errors: tuple[ManifestError, ...]

    @property
    def message(self) -> str:
        return _joined(self.errors)


def _joined(errors: Iterable[ManifestError]) -> str:
    return "; ".join(f"{e.field}: {e.message}" if e.field else e.message for e in errors)


# A workload-kind object as the cache holds it: its type, its key and the object.
WorkloadObject = tuple[ResourceType, str, Mapping[str, Any]]
# One left out: its type, key, object and why (the world's ``invalid`` entries).
Rejected = tuple[ResourceType, str, Mapping[str, Any], str]

# The Manifests lists a queue kind's object goes in, memoised one by one (ParseCache._add_queue_object).
_QUEUE_TARGETS = ("namespaces", "priority_classes", "flavors", "cluster_queues", "local_queues", "cohorts",
                  "workload_priority_classes", "topologies")

# Queue generations, unique across parse caches: equal generations mean the same queue objects.
_GENERATIONS = itertools.count(1)

# Read with the queue kinds every time, never memoised alone: completing it from its runtime changes it.
_LINKED = ("trainer.kubeflow.org", "TrainJob")


@dataclass(frozen=True, slots=True)
class _Alone:
    """One workload-kind object read on its own: what it parses into (None when it does not) and its problems."""

    made: Any
    problems: tuple[ManifestError, ...]


@dataclass(frozen=True, slots=True)
class QueueParse:
    """The queue kinds and the workload kinds of one cycle, parsed together (:meth:`ParseCache.world_objects`)."""

    manifests: Manifests
    rejected: tuple[Rejected, ...] = ()  # workload-kind objects left out, with why
    # Changes whenever the queue kinds' objects change, not when only workload objects do (a Job's status):
    # what the parked-workload memory of gpufleet.live.planner watches.
    generation: int = 0
    _stamp: tuple[object, ...] = field(default=(), repr=False)


class ParseCache:
    """Memoised parses of Nodes and Pods (by resourceVersion) and of the queue kinds (as one set)."""

    def __init__(self) -> None:
        self._single: dict[tuple[str, str], tuple[str, Parsed]] = {}
        self._queues: QueueParse | None = None
        self._alone: dict[tuple[str, str], tuple[str, _Alone]] = {}  # workload-kind objects read on their own
        self._ours: dict[tuple[str, str], tuple[str, bool]] = {}
        self._queue_stamp: tuple[tuple[str, str, str], ...] | None = None
        self._contents: dict[tuple[str, str], tuple[str, str]] = {}  # queue object -> (resourceVersion, _content)
        # queue object -> (resourceVersion, the Manifests list it goes in ("": parsed straight in each time), its typed
        # object, its problems, the admission checks it names)
        self._queue_docs: dict[tuple[str, str, str], tuple[str, str, Any, tuple[ManifestError, ...],
                                                            dict[str, tuple[str, ...]]]] = {}
        # queue object -> (its typed object, its place in the input, the object placed there): the same object
        # handed out again while neither changes, so that a reader may tell what changed by identity (the kept
        # policy reads again only the ClusterQueues that are not the very objects it read: queues_changed)
        self._queue_placed: dict[tuple[str, str, str], tuple[Any, int, Any]] = {}
        self._generation = 0
        self.parses = 0  # objects parsed (not served from the memo), for the benchmark and tests

    def one(self, resource: ResourceType, key: str, obj: Mapping[str, Any]) -> Parsed:
        rv = _rv(obj)
        hit = self._single.get((resource.key, key))
        if hit is not None and rv and hit[0] == rv:
            return hit[1]
        self.parses += 1
        try:
            # Its errors are all a Parsed keeps: the unknown-field walk, which only warns, is left out.
            manifests = build([document(obj)], field_warnings=False)
        except Exception as exc:  # a parser bug must cost this object only, never the cycle
            log.exception("parsing %s %s failed", resource.kind, key)
            parsed = Parsed(None, (ManifestError(f"gpufleet could not read it ({type(exc).__name__}); this is a "
                                                 "bug, please report it with the object", kind=resource.kind,
                                                 name=key),))
        else:
            typed: Node | Pod | DraObject | None = None
            if resource.kind == "Node" and manifests.nodes:
                typed = manifests.nodes[0]
            elif resource.kind == "Pod" and manifests.pods:
                typed = manifests.pods[0]
            else:
                # The DRA kinds, each parsed on its own like a node (their links to each other and to pods are
                # followed when workloads are built: gpufleet.cluster.dra_claims).
                by_kind: dict[str, Sequence[DraObject]] = {
                    "ResourceSlice": manifests.resource_slices, "DeviceClass": manifests.device_classes,
                    "ResourceClaim": manifests.resource_claims,
                    "ResourceClaimTemplate": manifests.resource_claim_templates}
                found = by_kind.get(resource.kind, ())
                typed = found[0] if found else None
            parsed = Parsed(typed, tuple(manifests.problems.errors))
        self._single[(resource.key, key)] = (rv, parsed)
        return parsed

    def holdings(self, key: str, obj: Mapping[str, Any]) -> Pod | None:
        """Another scheduler's bound pod that does not parse, read for what it holds on its node: its name and
        its containers' resources, nothing else (its annotations, affinity and the like are not ours to judge).
        None when not even that parses: its node's capacity is then not charged for it."""
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
        spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
        assert isinstance(meta, Mapping) and isinstance(spec, Mapping)

        def containers(field: str) -> list[Any]:
            items = spec.get(field)
            return [{"name": c.get("name"), "resources": c.get("resources")} for c in items
                    if isinstance(c, Mapping)] if isinstance(items, list) else []

        slim = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {k: meta.get(k) for k in ("name", "namespace", "uid", "resourceVersion")},
                "spec": {"containers": containers("containers"), "initContainers": containers("initContainers"),
                         "nodeName": spec.get("nodeName")}}
        parsed = self.one(_HOLDINGS, key, slim)
        return parsed.obj if isinstance(parsed.obj, Pod) else None

    def forget_except(self, resource: ResourceType, live: Iterable[str]) -> None:
        """Drop memoised parses of objects that no longer exist."""
        keep = set(live)
        kinds = {resource.key, _HOLDINGS.key} if resource.key == _HOLDINGS_OF else {resource.key}
        for memo_key in [k for k in self._single if k[0] in kinds and k[1] not in keep]:
            del self._single[memo_key]

    def queues(self, objects: Iterable[Mapping[str, Any]]) -> Manifests:
        """PriorityClasses, Namespaces and the Kueue kinds, parsed and cross-checked together."""
        return self.world_objects(objects).manifests

    def world_objects(self, objects: Iterable[Mapping[str, Any]],
                      workloads: Sequence[WorkloadObject] = ()) -> QueueParse:
        """The queue kinds (``objects``) and the workload kinds (``workloads``) in one build: each workload
        object is read on its own (memoised by resourceVersion; one that does not parse is left out and
        returned as rejected), then all are added to the queue kinds' build, whose last steps need them all."""
        docs = sorted(objects, key=lambda o: (str(o.get("kind")), str((o.get("metadata") or {}).get("namespace")),
                                              str((o.get("metadata") or {}).get("name"))))
        # By content, not resourceVersion: a status write (ours, to the queues) is no change to the queues, so it
        # neither re-parses them nor starts a new generation, which would make the live planner forget every
        # parked workload (issue 27).
        queue_stamp = tuple((str(o.get("kind")), _key(o), self._content_of(o)) for o in docs)
        if len(self._contents) > len(queue_stamp):
            live_queue_objects = {(kind, key) for kind, key, _ in queue_stamp}
            for gone in [k for k in self._contents if k not in live_queue_objects]:
                del self._contents[gone]
        owned = sorted(workloads, key=lambda w: (w[0].key, w[1]))
        stamp = (queue_stamp, tuple((res.key, key, _rv(obj)) for res, key, obj in owned))
        known = all(s[2] for s in stamp[1])
        if self._queues is not None and self._queues._stamp == stamp and known:
            return self._queues
        if queue_stamp != self._queue_stamp or not known:
            self._queue_stamp = queue_stamp
            self._generation = next(_GENERATIONS)
        builder = ManifestBuilder(Problems(), field_warnings=False)  # (warnings: read by no one live)
        out = builder.out
        for i, o in enumerate(docs):
            self._add_queue_object(builder, o, i)
        live_docs = {_doc_key(o) for o in docs}
        for stale in [k for k in self._queue_docs if k not in live_docs]:
            del self._queue_docs[stale]
        for stale in [k for k in self._queue_placed if k not in live_docs]:
            del self._queue_placed[stale]
        rejected: list[Rejected] = []
        linked: dict[tuple[str, str], tuple[ResourceType, Mapping[str, Any]]] = {}
        # A workload object's input order (its workloads' last tie-break in a queue before their keys) is not its
        # place in this read: every queue object created, or an owner sorting before it, would move it, while the
        # workloads a kept world grouped keep theirs (a review found two Jobs of one creation second queued in
        # another order than a rebuild's). Live, every owner is 0, as every pod is: ties go to the key.
        for res, key, obj in owned:
            if (res.group, res.kind) == _LINKED:
                linked[(res.kind, key)] = (res, obj)
                self.parses += 1
                builder.add(document(obj, _LIVE_ORDER))
                continue
            alone = self._read_alone(res, key, obj)
            out.problems.extend(alone.problems)
            if alone.made is None:
                errors = [e for e in alone.problems if e.severity == "error"]
                rejected.append((res, key, obj, f"{res.kind} left out: {_joined(errors)}"))
            else:
                intake.keep(alone.made, out.controllers, _LIVE_ORDER)
            out.documents += 1
        manifests = builder.finish(queue_names=False)  # its warnings are read by no one live
        # What only the whole input shows (a TrainJob whose runtime is missing): told by kind and name, as the
        # queue kinds' problems are.
        later: dict[tuple[str, str], list[ManifestError]] = {}
        for e in manifests.problems.errors:
            if e.kind is not None and e.name is not None and (e.kind, e.name) in linked:
                later.setdefault((e.kind, e.name), []).append(e)
        for (kind, key), errors in sorted(later.items()):
            res, obj = linked[(kind, key)]
            rejected.append((res, key, obj, f"{kind} left out: {_joined(errors)}"))
        live = {(res.key, key) for res, key, _ in owned}
        for gone in [k for k in self._alone if k not in live]:
            del self._alone[gone]
        self._queues = QueueParse(manifests, tuple(rejected), self._generation, stamp)
        return self._queues

    def _add_queue_object(self, builder: ManifestBuilder, obj: Mapping[str, Any], position: int) -> None:
        """Add one queue-kind object to ``builder``, its parse memoised by resourceVersion: a Namespace created
        among thousands re-parses that one, not all of them (the cross-checks of ``finish`` still see all). What a
        parse records beside the object (the admission checks a ClusterQueue names) is memoised with it; an object
        that does not parse into exactly one typed object is remembered as such and parsed straight into the
        builder each time."""
        rv, memo_key = _rv(obj), _doc_key(obj)
        hit = self._queue_docs.get(memo_key)
        if hit is None or not rv or hit[0] != rv:
            self.parses += 1
            scratch = ManifestBuilder(Problems(), field_warnings=False)
            scratch.add(document(obj, position))
            made = [(attr, o) for attr in _QUEUE_TARGETS for o in getattr(scratch.out, attr)]
            checks = scratch.out.controllers.cluster_queue_checks
            alone = len(made) == 1 and scratch.out.config is None and replace(
                scratch.out.controllers, cluster_queue_checks={}) == ControllerObjects()
            hit = (rv, made[0][0], made[0][1], tuple(scratch.out.problems.all), dict(checks)) if alone else (
                rv, "", None, (), {})
            if rv:
                self._queue_docs[memo_key] = hit
        if not hit[1]:  # (the first time it was parsed twice: its scratch parse said it cannot be memoised)
            builder.add(document(obj, position))
            return
        _, attr, made_once, problems, checks = hit
        typed: Any = made_once
        placed = self._queue_placed.get(memo_key)
        if placed is None or placed[0] is not made_once or placed[1] != position:
            placed = self._queue_placed[memo_key] = (made_once, position,
                                                     replace(typed, meta=replace(typed.meta, order=position)))
        getattr(builder.out, attr).append(placed[2])
        builder.out.problems.extend(problems)
        if checks:
            builder.out.controllers.cluster_queue_checks.update(checks)
        builder.out.documents += 1

    def _content_of(self, obj: Mapping[str, Any]) -> str:
        """:func:`_content`, worked out once per object and resourceVersion."""
        rv, memo_key = _rv(obj), (str(obj.get("kind")), _key(obj))
        hit = self._contents.get(memo_key)
        if hit is not None and rv and hit[0] == rv:
            return hit[1]
        content = _content(obj)
        if rv:
            self._contents[memo_key] = (rv, content)
        return content

    def _read_alone(self, res: ResourceType, key: str, obj: Mapping[str, Any]) -> _Alone:
        rv = _rv(obj)
        hit = self._alone.get((res.key, key))
        if hit is not None and rv and hit[0] == rv:
            return hit[1]
        self.parses += 1
        builder = ManifestBuilder(Problems(), field_warnings=False)  # (warnings: read by no one live)
        try:
            builder.add(document(obj))
        except Exception as exc:  # a parser bug must cost this object only, never the cycle
            log.exception("parsing %s %s failed", res.kind, key)
            alone = _Alone(None, (ManifestError(f"gpufleet could not read it ({type(exc).__name__}); this is a bug, "
                                                "please report it with the object", kind=res.kind, name=key),))
        else:
            c = builder.out.controllers
            made = [*c.owners, *c.queues, *c.admission_checks, *c.runtimes]
            problems = tuple(builder.out.problems.all)
            ok = made and not builder.out.problems.error_count
            if not ok and not builder.out.problems.error_count:
                problems += (ManifestError(f"{obj.get('apiVersion')} {res.kind} was not read as a {res.kind}",
                                           kind=res.kind, name=key),)
            alone = _Alone(made[0] if ok else None, problems)
        self._alone[(res.key, key)] = (rv, alone)
        return alone

    def ours(self, res: ResourceType, key: str, obj: Mapping[str, Any], scheduler_name: str) -> bool:
        """Whether a workload-kind object concerns this scheduler (its pod templates name it, or it has none):
        memoised by resourceVersion, as every Deployment and ReplicaSet of the cluster is asked each cycle."""
        rv = _rv(obj)
        hit = self._ours.get((res.key, key))
        if hit is not None and rv and hit[0] == rv:
            return hit[1]
        answer = concerns(res, obj, scheduler_name)
        self._ours[(res.key, key)] = (rv, answer)
        return answer

    def forget_workload_objects_except(self, live: Iterable[tuple[str, str]]) -> None:
        """Drop what is remembered of workload-kind objects (resource key, object key) that no longer exist."""
        keep = set(live)
        for gone in [k for k in self._ours if k not in keep]:
            del self._ours[gone]


def _doc_key(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    """A queue object's memo key: its apiVersion too (gpufleet's and Kueue's ClusterQueue may share a name)."""
    return str(obj.get("apiVersion")), str(obj.get("kind")), _key(obj)


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name')}"


def has_templates(res: ResourceType) -> bool:
    """Whether objects of ``res`` carry pod templates of their own (a JobSet does; a PodGroup, a TrainJob and the
    kinds workloads refer to do not)."""
    return bool(template_paths(res.group, res.kind))


def concerns(res: ResourceType, obj: Mapping[str, Any], scheduler_name: str) -> bool:
    """:func:`names_scheduler`, and True for an object too malformed to tell: it is read, so that its parse says
    what is wrong."""
    try:
        return names_scheduler(res, obj, scheduler_name)
    except Exception:
        return True


def names_scheduler(res: ResourceType, obj: Mapping[str, Any], scheduler_name: str) -> bool:
    """Whether one of the object's pod templates gives its pods ``scheduler_name``; True for a kind without pod
    templates (its pods, or the workloads naming it, are judged by themselves)."""
    if not has_templates(res):
        return True
    spec = obj.get("spec")
    if isinstance(spec, Mapping) and spec.get("schedulerName") == scheduler_name:
        return True  # a Volcano Job names the scheduler of all its pods at the top
    return any(t.spec.get("schedulerName") == scheduler_name for t in raw_templates(res.group, res.kind, obj))
