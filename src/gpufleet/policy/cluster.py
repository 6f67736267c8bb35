"""The cluster the rules judge against: its nodes (each as an empty node, for "could this pod ever run here") and
its queue objects. Built from the manifests of ``--cluster`` and of the linted files, or from the scheduler's
informer cache (the webhook).

Where a pod could ever run is the placement filters' answer on empty nodes (:func:`places`): the one fit check of
``scheduling/placement/filters.py``, not a second one.

The quota resources Kueue charges DRA claims to (its Configuration's ``deviceClassMappings``) are offered by the
nodes that publish devices of the mapped DeviceClasses (:attr:`ClusterView.claim_resources`): no node has them in
its allocatable, yet a ClusterQueue's quota of one is backed there. A pod asking an extended resource that a
DeviceClass backs (``extendedResourceName``, KEP-5004) may run where a device plugin offers it or on the class's DRA
devices, as kube-scheduler places it: both ways are tried."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

from gpufleet.api.dra_objects import DeviceClass, ResourceSlice
from gpufleet.api.manifests import Manifests
from gpufleet.api.objects import ClusterQueue, LocalQueue, Node, PodTemplate, ResourceFlavor
from gpufleet.api.workloadkinds.model import TrainingRuntime
from gpufleet.cluster.dra_claims import DraCatalog, extended_need, extended_resources, published_devices
from gpufleet.cluster.state import NodeState, node_state_from
from gpufleet.scheduling.placement.dra import with_choice
from gpufleet.scheduling.placement.filters import DEFAULT_FILTERS
from gpufleet.scheduling.placement.need import PodNeed, compile_need
from gpufleet.scheduling.types import PodRequest


@dataclass(frozen=True, slots=True)
class Verdict:
    """One empty node's answer for a pod: None when it fits, else the reason and how far down the filters it
    got (the larger, the closer)."""

    node: NodeState
    reason: str | None
    depth: int


def _empty(node: Node) -> NodeState:
    # "Ever": a node that is cordoned or not ready now may take pods again, so it counts as ready.
    return replace(node_state_from(node), ready=True, unschedulable=False)


@dataclass
class ClusterView:
    nodes: list[Node] = field(default_factory=list)
    flavors: dict[str, ResourceFlavor] = field(default_factory=dict)
    cluster_queues: dict[str, ClusterQueue] = field(default_factory=dict)
    local_queues: list[LocalQueue] = field(default_factory=list)
    # Kubeflow's (Cluster)TrainingRuntimes: a TrainJob's pods are its runtime's, so the webhook parses an admitted
    # TrainJob beside them (lint reads them from its input).
    runtimes: list[TrainingRuntime] = field(default_factory=list)
    # Whether the input describes the nodes / the queues at all: without them the rules that need them say nothing
    # (an absent LocalQueue in a cluster we were not shown is not missing).
    knows_nodes: bool = False
    knows_queues: bool = False
    # Resource -> the nodes that publish a device it is charged for: the resources of Kueue's deviceClassMappings
    # (while its DRA integration is on), each offered where a device of one of its DeviceClasses is published.
    claim_resources: dict[str, frozenset[str]] = field(default_factory=dict)
    device_classes: list[DeviceClass] = field(default_factory=list)
    resource_slices: list[ResourceSlice] = field(default_factory=list)

    @classmethod
    def from_manifests(cls, *bundles: Manifests, described: bool = False) -> ClusterView:
        """The cluster the bundles describe; ``described``: the caller says the queues given are all there are
        (``--cluster`` was given), so a ClusterQueue missing from them is missing."""
        view = cls()
        for m in bundles:
            view.nodes.extend(m.nodes)
            view.flavors.update({f.name: f for f in m.flavors})
            view.cluster_queues.update({q.name: q for q in m.cluster_queues})
            # LocalQueues gpufleet adds for Volcano's and KAI's queues are named "<system>:<queue>", a name no
            # Kubernetes object can have: they are not the namespace's own.
            view.local_queues.extend(q for q in m.local_queues if ":" not in q.meta.name)
            view.runtimes.extend(m.controllers.runtimes)
            view.device_classes.extend(m.device_classes)
            view.resource_slices.extend(m.resource_slices)
            for resource, nodes in _claim_resources(m).items():
                view.claim_resources[resource] = view.claim_resources.get(resource, frozenset()) | nodes
        view.knows_nodes = bool(view.nodes)
        view.knows_queues = described or bool(view.cluster_queues)
        return view

    def knows(self, needs: str | None) -> bool:
        if needs == "nodes":
            return self.knows_nodes
        if needs == "queues":
            return self.knows_queues
        return True

    @cached_property
    def states(self) -> list[NodeState]:
        return [_empty(n) for n in self.nodes]

    @cached_property
    def queue_namespaces(self) -> dict[str, list[str]]:
        """Namespace -> the names of its LocalQueues."""
        out: dict[str, list[str]] = {}
        for q in self.local_queues:
            out.setdefault(q.meta.namespace or "default", []).append(q.meta.name)
        return out

    def local_queue(self, namespace: str, name: str) -> LocalQueue | None:
        for q in self.local_queues:
            if (q.meta.namespace or "default") == namespace and q.meta.name == name:
                return q
        return None

    def flavors_for(self, template: PodTemplate, namespace: str, queue: str | None) -> list[ResourceFlavor] | None:
        """The ResourceFlavors the queue's ClusterQueue could admit the template's GPU request under (None when the
        queue or its ClusterQueue is unknown, or covers no GPU resource: then flavors constrain nothing here)."""
        if queue is None:
            return None
        lq = self.local_queue(namespace, queue)
        cq = self.cluster_queues.get(lq.cluster_queue) if lq is not None else None
        if cq is None:
            return None
        wanted = {r for r in template.requests if r.startswith("nvidia.com/") or r.startswith("gpufleet.io/")}
        names = [f.name for g in cq.resource_groups if wanted & set(g.covered_resources) for f in g.flavors]
        found = [self.flavors[n] for n in names if n in self.flavors]
        return found or None

    @cached_property
    def _extended(self) -> tuple[dict[str, DeviceClass], DraCatalog]:
        """The extended resources DeviceClasses back, and the catalog of the published devices."""
        if not self.resource_slices:
            return {}, DraCatalog()
        return (extended_resources(self.device_classes),
                DraCatalog(classes={c.name: c for c in self.device_classes},
                           devices=published_devices(self.nodes, self.resource_slices)))

    def _ways(self, requests: list[PodRequest]) -> list[PodRequest]:
        """``requests`` (one per flavor), and for a pod asking an extended resource a DeviceClass backs, each also
        as placed on the class's DRA devices."""
        template = requests[0].template
        extended, catalog = self._extended
        if not extended or template.dra is not None or template.resource_claims:
            return requests
        need = extended_need("lint", "lint", template, extended, catalog)
        if need is None:
            return requests
        claimed = [replace(r, template=replace(r.template, dra=need)) for r in requests]
        out: list[PodRequest] = []
        index = 0
        while (variant := with_choice(claimed, index)) is not None:
            out += variant
            index += 1
        return out

    def verdicts(self, template: PodTemplate, flavors: Sequence[ResourceFlavor] | None = None) -> list[Verdict]:
        """Every node's answer for one pod of ``template`` on an empty cluster; with ``flavors``, the pod may run
        under any one of them (its nodeLabels and tolerations added), as Kueue's flavor assignment allows."""
        out = []
        options: Iterable[ResourceFlavor | None] = flavors or [None]
        needs = [compile_need(r) for r in self._ways([_request(template, f) for f in options])]
        for node in self.states:
            best: Verdict | None = None
            for need in needs:
                depth, reason = _first_failure(need, node)
                if best is None or depth > best.depth:
                    best = Verdict(node, reason, depth)
            assert best is not None
            out.append(best)
        return out

    def fitting(self, template: PodTemplate, flavors: Sequence[ResourceFlavor] | None = None) -> list[NodeState]:
        return [v.node for v in self.verdicts(template, flavors) if v.reason is None]


def _claim_resources(m: Manifests) -> dict[str, frozenset[str]]:
    """The resources ``m``'s Kueue Configuration charges DRA claims to, each with the nodes publishing devices of
    its DeviceClasses (a class's devices: those its selectors match, as claims see them); none while Kueue's DRA
    integration is off or nothing is mapped (then no claim is charged to them)."""
    config = m.config
    if config is None or not config.dra_integration or not config.device_class_mappings:
        return {}
    classes = {c.name: c for c in m.device_classes}
    catalog = DraCatalog(classes=classes, devices=published_devices(m.nodes, m.resource_slices))
    out: dict[str, frozenset[str]] = {}
    for mapping in config.device_class_mappings:
        nodes: set[str] = set()
        for name in mapping.device_class_names:
            device_class = classes.get(name)
            if device_class is not None:
                found, _ = catalog.matching(device_class.selectors)
                nodes.update(d.node for d in found)
        out[mapping.name] = frozenset(nodes)
    return out


def _request(template: PodTemplate, flavor: ResourceFlavor | None) -> PodRequest:
    if flavor is None:
        return PodRequest("lint", template)
    return PodRequest("lint", template, node_labels=tuple(sorted(flavor.node_labels.items())),
                      flavor_taints=flavor.node_taints, extra_tolerations=flavor.tolerations)


def _first_failure(need: PodNeed, node: NodeState) -> tuple[int, str | None]:
    """:func:`~gpufleet.scheduling.placement.filters.unfit_reason` with the failing filter's position kept (the
    same filters in the same order): (len(filters), None) when the node fits."""
    for i, f in enumerate(DEFAULT_FILTERS):
        reason = f.check(need, node)
        if reason is not None:
            return i, reason
    return len(DEFAULT_FILTERS), None
