"""Load a set of manifests into one validated bundle of typed objects.

:func:`load_manifests` reads files, folders and stdin, parses every known kind, expands NodePools into
Nodes, and checks what no single object can check alone: duplicate names, ClusterQueues naming flavors that
do not exist, cohort cycles, LocalQueues naming missing ClusterQueues, pods asking for MIG profiles that no
node of their chosen model has. All problems are collected; objects with errors are left out, every valid
object is kept; unknown kinds are warned about and left out.

The workload kinds (Job, JobSet, Deployment, PyTorchJob, RayCluster... and the Volcano and KAI kinds) are read by
:mod:`gpufleet.api.workloadkinds`, which also checks versions, unknown fields and ``generateName`` for every kind.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from gpufleet.api import rawfiles
from gpufleet.api.dra_nodes import attach_dra_gpus
from gpufleet.api.dra_objects import DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice
from gpufleet.api.dra_parse import PARSERS as DRA_PARSERS
from gpufleet.api.dra_refs import check_claim_references
from gpufleet.api.errors import Problems
from gpufleet.api.kinds import PARSERS
from gpufleet.api.limits import COHORT_DEPTH, MAX_COHORT_DEPTH, MAX_NODES, NODES
from gpufleet.api.nodepool import expand_node_pool
from gpufleet.api.nvidia_config import PARSERS as NVIDIA_PARSERS
from gpufleet.api.nvidia_config import ClusterPolicy, NvidiaConfigMap, configure_nodes
from gpufleet.api.objects import (
    PRODUCT_LABEL,
    ClusterQueue,
    Cohort,
    KueueWorkload,
    LocalQueue,
    Namespace,
    Node,
    NodePool,
    Pod,
    PriorityClass,
    ResourceFlavor,
    SchedulerConfig,
    Topology,
    WorkloadPriorityClass,
)
from gpufleet.api.queue_refs import check_queue_names
from gpufleet.api.reader import FieldReader
from gpufleet.api.source import Document, load_paths, load_text
from gpufleet.api.workloadkinds import intake
from gpufleet.api.workloadkinds.model import ControllerObjects
from gpufleet.api.workloadkinds.queues import size_kai_pool
from gpufleet.gpu.catalog import DEFAULT_CATALOG
from gpufleet.gpu.mig import geometry_for


@dataclass(slots=True)
class Manifests:
    nodes: list[Node] = field(default_factory=list)
    node_pools: list[NodePool] = field(default_factory=list)
    pods: list[Pod] = field(default_factory=list)
    namespaces: list[Namespace] = field(default_factory=list)
    priority_classes: list[PriorityClass] = field(default_factory=list)
    flavors: list[ResourceFlavor] = field(default_factory=list)
    cluster_queues: list[ClusterQueue] = field(default_factory=list)
    local_queues: list[LocalQueue] = field(default_factory=list)
    cohorts: list[Cohort] = field(default_factory=list)
    workload_priority_classes: list[WorkloadPriorityClass] = field(default_factory=list)
    workloads: list[KueueWorkload] = field(default_factory=list)
    topologies: list[Topology] = field(default_factory=list)
    # NVIDIA's configuration (device plugin and mig-parted ConfigMaps, the GPU Operator's ClusterPolicy): what
    # GPU nodes without gpufleet's inventory offer (gpufleet.api.nvidia_config)
    config_maps: list[NvidiaConfigMap] = field(default_factory=list)
    cluster_policies: list[ClusterPolicy] = field(default_factory=list)
    # DRA (resource.k8s.io): the slices give nodes their GPUs (gpufleet.api.dra_nodes); classes, claims and
    # templates are read and kept for the allocation to come (issue 28)
    resource_slices: list[ResourceSlice] = field(default_factory=list)
    device_classes: list[DeviceClass] = field(default_factory=list)
    resource_claims: list[ResourceClaim] = field(default_factory=list)
    resource_claim_templates: list[ResourceClaimTemplate] = field(default_factory=list)
    config: SchedulerConfig | None = None
    problems: Problems = field(default_factory=Problems)
    documents: int = 0
    simulation_inputs: int = 0  # documents only the simulator reads (WorkloadGenerator)
    # Objects of the workload kinds (Jobs, JobSets, Deployments...), their queues and runtimes
    controllers: ControllerObjects = field(default_factory=ControllerObjects)

    def counts(self) -> dict[str, int]:
        """Objects of the input by kind (not the Kueue objects gpufleet adds for Volcano's and KAI's queues)."""
        own = {k: len(v) - self.controllers.translated.get(k, 0) for k, v in (
            ("Node", self.nodes), ("NodePool", self.node_pools), ("Pod", self.pods),
            ("Namespace", self.namespaces), ("PriorityClass", self.priority_classes),
            ("ResourceFlavor", self.flavors), ("ClusterQueue", self.cluster_queues),
            ("LocalQueue", self.local_queues), ("Cohort", self.cohorts),
            ("WorkloadPriorityClass", self.workload_priority_classes), ("Workload", self.workloads),
            ("Topology", self.topologies), ("ConfigMap", self.config_maps),
            ("ClusterPolicy", self.cluster_policies), ("DeviceClass", self.device_classes),
            ("ResourceSlice", self.resource_slices), ("ResourceClaim", self.resource_claims),
            ("ResourceClaimTemplate", self.resource_claim_templates))}
        return {k: n for k, n in own.items() if n > 0} | self.controllers.counts()


_TARGET: dict[str, str] = {
    "Node": "nodes", "NodePool": "node_pools", "Pod": "pods", "Namespace": "namespaces",
    "PriorityClass": "priority_classes", "ResourceFlavor": "flavors", "ClusterQueue": "cluster_queues",
    "LocalQueue": "local_queues", "Cohort": "cohorts", "WorkloadPriorityClass": "workload_priority_classes",
    "Workload": "workloads", "Topology": "topologies", "ConfigMap": "config_maps", "ClusterPolicy": "cluster_policies",
    "ResourceSlice": "resource_slices", "DeviceClass": "device_classes", "ResourceClaim": "resource_claims",
    "ResourceClaimTemplate": "resource_claim_templates",
}


# Kinds that describe a simulated workload rather than cluster objects: the simulator consumes them.
SIMULATION_KINDS = frozenset({("gpufleet.io", "WorkloadGenerator")})


def _group_of(api_version: str) -> str:
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def _parse_document(doc: Document, out: Manifests, position: int = 0, *, field_warnings: bool = True) -> None:
    problems = out.problems
    data = doc.data
    kind = data.get("kind") if isinstance(data, dict) else None
    api_version = data.get("apiVersion") if isinstance(data, dict) else None
    r = FieldReader(doc, problems, kind=str(kind) if kind else None, name=None)
    if not kind or not api_version:
        known = rawfiles.recognise(doc, problems)  # NVIDIA's raw config files, gpufleet's own JSON documents
        if known is not None:
            if known.config_map is not None:
                out.config_maps.append(known.config_map)
            return
        r.error("a manifest needs apiVersion and kind", "kind" if not kind else "apiVersion",
                fix="start the document with apiVersion: ... and kind: ...")
        return
    group = _group_of(str(api_version))
    if (group, str(kind)) in SIMULATION_KINDS:
        out.simulation_inputs += 1  # read and checked by `gpufleet simulate`, not by the scheduler
        return
    if not intake.check_version(r, str(api_version), str(kind)):
        return
    intake.fill_generated_name(doc, r, out.controllers)
    intake.fields(r, str(api_version), str(kind), warn=field_warnings)
    before = problems.error_count
    if intake.handles(group, str(kind)):
        made = intake.parse(r, str(api_version), str(kind))
        if made is not None and problems.error_count == before:
            intake.keep(made, out.controllers, position)
        return
    parser = PARSERS.get((group, str(kind))) or NVIDIA_PARSERS.get((group, str(kind))) \
        or DRA_PARSERS.get((group, str(kind)))
    if parser is None:
        intake.unread_kind(r, str(api_version), str(kind), set(PARSERS) | set(NVIDIA_PARSERS) | set(DRA_PARSERS))
        return
    obj = parser(r)
    if obj is None or problems.error_count > before:
        return  # an object with errors is not kept; its errors say why
    intake.audit(r, str(api_version), str(kind), out.controllers)
    if hasattr(obj, "meta"):
        obj.meta.order = position
    if isinstance(obj, SchedulerConfig):
        if out.config is not None:
            r.error("more than one Kueue Configuration", "kind", fix="keep a single Configuration document")
            return
        out.config = obj
        return
    getattr(out, _TARGET[str(kind)]).append(obj)


def _check_duplicates(out: Manifests) -> None:
    for attr in _TARGET.values():
        objects = getattr(out, attr)
        if len(objects) < 2:
            continue  # (most lists, in a live object's parse all but one: nothing to compare)
        seen: dict[tuple[str, str], Any] = {}
        for obj in list(objects):
            meta = obj.meta
            key = (type(obj).__name__, meta.key)
            if key in seen:
                first = seen[key].meta.source
                out.problems.error(
                    f"duplicate name: {meta.key} is already defined at {first}",
                    file=meta.source.file if meta.source else None, line=meta.source.line if meta.source else None,
                    kind=type(obj).__name__, name=meta.key, field="metadata.name",
                    fix="rename one of them or remove the duplicate")
                getattr(out, attr).remove(obj)
            else:
                seen[key] = obj


def _error_at(out: Manifests, obj: Any, message: str, field_: str, fix: str) -> None:
    src = obj.meta.source
    out.problems.error(message, file=src.file if src else None, line=src.line if src else None,
                       kind=getattr(obj, "kind", type(obj).__name__), name=obj.meta.key, field=field_, fix=fix)


def _check_references(out: Manifests, *, queue_names: bool = True) -> None:
    flavors = {f.name for f in out.flavors}
    bad_cqs = []
    for cq in out.cluster_queues:
        missing = sorted({f.name for g in cq.resource_groups for f in g.flavors} - flavors)
        if missing:
            _error_at(out, cq, f"ClusterQueue {cq.name} names flavor(s) {', '.join(missing)} that do not exist",
                      "spec.resourceGroups", f"define a ResourceFlavor named {missing[0]} or fix the name")
            bad_cqs.append(cq)
    for cq in bad_cqs:
        out.cluster_queues.remove(cq)
    cqs = {cq.name for cq in out.cluster_queues}
    for lq in out.local_queues:
        if lq.cluster_queue not in cqs:
            src = lq.meta.source
            out.problems.warning(
                f"LocalQueue {lq.key} points to ClusterQueue {lq.cluster_queue}, which is not defined (or invalid); "
                "its workloads stay pending", file=src.file if src else None, line=src.line if src else None,
                kind="LocalQueue", name=lq.key, field="spec.clusterQueue",
                fix=f"define ClusterQueue {lq.cluster_queue} or fix the name")
    if queue_names:
        check_queue_names(out)
    _check_cohort_cycles(out)
    _check_mig_requests(out)


def _check_cohort_cycles(out: Manifests) -> None:
    """Cycles and excessive depth in the cohort tree, found in one linear pass (each cohort's chain is walked
    once; later walks stop at a cohort already settled)."""
    parent = {c.name: c.parent for c in out.cohorts}
    by_name = {c.name: c for c in out.cohorts}
    depth: dict[str, int] = {}  # settled cohorts: levels from the root (1 for a root); -1 inside a cycle
    bad: set[str] = set()
    for start in parent:
        path: list[str] = []
        on_path: set[str] = set()
        node: str | None = start
        while node is not None and node in parent and node not in depth and node not in on_path:
            path.append(node)
            on_path.add(node)
            node = parent[node]
        if node is not None and node in on_path:  # the walk closed a loop
            cycle = path[path.index(node):]
            _error_at(out, by_name[node], "cycle of cohorts: " + " -> ".join([*cycle, node]), "spec.parentName",
                      "break the cycle: one cohort of it must have no parentName or a parent outside it")
            for name in cycle:
                depth[name] = -1
            bad.update(cycle)
            path = path[:path.index(node)]
        above = depth.get(node, 0) if node is not None and node in parent else 0
        for name in reversed(path):
            above = -1 if above < 0 else above + 1
            depth[name] = above
            up = parent[name]
            if above > MAX_COHORT_DEPTH and up is not None and depth.get(up) == MAX_COHORT_DEPTH:
                _error_at(out, by_name[name], f"the cohort tree is more than {COHORT_DEPTH.value} levels deep here: "
                          f"{COHORT_DEPTH.says()}", "spec.parentName",
                          "flatten the cohort tree; this cohort and those below it are left out")
            if above > MAX_COHORT_DEPTH:
                bad.add(name)  # below a cycle (-1) stays: the quota tree disables it, as Kueue does
    out.cohorts = [c for c in out.cohorts if c.name not in bad]


def _check_mig_requests(out: Manifests) -> None:
    """A pod pinned to a GPU model (nodeSelector on the product label) must ask for a profile that model has."""
    templates = [(p, p.template) for p in out.pods] + [
        (o, ps.template) for o in out.controllers.owners for w in o.workloads[:1] for ps in w.pod_sets]
    for obj, t in templates:
        if t.gpu.kind != "mig" or t.gpu.mig_profile is None:
            continue
        product = t.node_selector.get(PRODUCT_LABEL)
        if product is None:
            continue
        model = DEFAULT_CATALOG.find(product)
        if model is None:
            continue
        geometry = geometry_for(model.key)
        if geometry is None or not geometry.has_profile(t.gpu.mig_profile):
            valid = ", ".join(p.name for p in geometry.profiles) if geometry else "none (no MIG support)"
            _error_at(out, obj, f"{model.key} has no MIG profile {t.gpu.mig_profile}", "spec.containers.resources",
                      f"use one of its profiles: {valid}")


def _expand_pools(out: Manifests) -> None:
    room = MAX_NODES - len(out.nodes)
    for pool in out.node_pools:
        src = pool.meta.source
        if pool.count > room:
            _error_at(out, pool, f"its {pool.count:,} nodes would bring the input above {NODES.says()}", "spec.count",
                      "give fewer nodes per run; this pool is not expanded")
            continue
        room -= pool.count
        for i, data in enumerate(expand_node_pool(pool)):
            doc = Document(data=data, file=src.file if src else "<nodepool>", line=src.line if src else 0, index=i)
            r = FieldReader(doc, out.problems, kind="Node", name=None)
            node = PARSERS[("", "Node")](r)
            if node is not None:
                out.nodes.append(node)


class ManifestBuilder:
    """Parses documents one at a time (:meth:`add`), then checks what needs them all (:meth:`finish`).

    Fed straight from the file loader, a raw document is dropped as soon as its typed object exists: a big
    input never holds all its raw documents at once (docs/limits.md)."""

    def __init__(self, problems: Problems | None = None, *, field_warnings: bool = True) -> None:
        """``field_warnings=False``: no walk of each document for the fields its kind does not have, whose only
        outcome is warnings (the live scheduler's parse keeps errors alone)."""
        self.out = Manifests(problems=problems if problems is not None else Problems())
        self.field_warnings = field_warnings

    def add(self, doc: Document) -> None:
        _parse_document(doc, self.out, self.out.documents, field_warnings=self.field_warnings)
        self.out.documents += 1

    def finish(self, *, queue_names: bool = True) -> Manifests:
        """The bundle, cross-checked. ``queue_names=False`` skips the warnings about workloads naming a missing
        LocalQueue (gpufleet.api.queue_refs): the live scheduler, which rebuilds every cycle a workload changes,
        shows no warnings and tells that pending reason itself."""
        out = self.out
        intake.finish(out)
        _check_duplicates(out)
        _check_references(out, queue_names=queue_names)
        _expand_pools(out)
        _check_duplicates(out)
        configure_nodes(out.nodes, out.config_maps, out.cluster_policies, out.problems)
        attach_dra_gpus(out.nodes, out.resource_slices, out.problems)  # after the pools: their Nodes exist now
        check_claim_references(out)
        size_kai_pool(out)
        return out


def build(documents: Iterable[Document], problems: Problems | None = None, *,
          field_warnings: bool = True) -> Manifests:
    builder = ManifestBuilder(problems, field_warnings=field_warnings)
    for doc in documents:
        builder.add(doc)
    return builder.finish()


def load_manifests(paths: Sequence[str], *, stdin: TextIO | None = None) -> Manifests:
    builder = ManifestBuilder()
    load_paths(paths, builder.out.problems, stdin=stdin, sink=builder.add)
    return builder.finish()


def load_manifest_text(text: str, file: str = "<text>") -> Manifests:
    problems = Problems()
    return build(load_text(text, file, problems), problems)
