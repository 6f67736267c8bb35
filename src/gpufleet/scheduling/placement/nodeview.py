"""NodeState seen the way the FGD paper's scorers see a node, plus the GPU arithmetic placement shares.

:class:`NodeView` implements :class:`~gpufleet.scheduling.gpuscore.GpuNodeView` over a live
:class:`~gpufleet.cluster.state.NodeState`: the per-GPU free thousandths of its whole-mode GPUs (the only
GPUs fractions and the paper's scorers know), its free CPU, its model, and the GpuClustering tags of the
GPU pods on it. :class:`TagIndex` keeps those tags per node, derived from the cluster's placements.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.api.objects import CPU
from gpufleet.cluster.devices import GpuSlot, fraction_need
from gpufleet.cluster.free_devices import device_kind
from gpufleet.cluster.state import ClusterState, NodeState, Placement
from gpufleet.gpu.constants import MILLI
from gpufleet.gpu.mig import geometry_for
from gpufleet.scheduling.gpuscore import GpuPodDemand
from gpufleet.scheduling.placement.need import PodNeed


def whole_gpus(node: NodeState) -> list[GpuSlot]:
    return [g for g in node.gpus if g.mode == "whole"]


def gpu_free_milli(g: GpuSlot) -> int:
    """GpuSlot.free_milli, 0 for an unhealthy GPU (the device plugin withdraws it); fast paths first."""
    if not g.healthy:
        return 0
    if g.mode == "whole":
        if g.holder is not None:
            return 0
        if not g.fractions and not g.partitions:
            return MILLI
    return g.free_milli


def fraction_share(need: PodNeed, gpu_memory_mib: int) -> tuple[int, int]:
    """(thousandths, MiB) the fractional pod takes on a GPU of that memory; >1000 when it cannot fit."""
    return fraction_need(need.gpu.milli, need.gpu.memory_mib, gpu_memory_mib)


def gpu_demand(need: PodNeed, node: NodeState) -> GpuPodDemand:
    """The pod as the paper's scorers see it on this node.

    Whole GPUs and fractions are what those scorers model; a replica or MIG pod holds no whole-mode GPU,
    so they see it as a CPU-only pod (its GPU part is decided by the device filters, not by them).
    """
    g = need.gpu
    if g.kind == "fraction":
        whole = whole_gpus(node)
        share, _ = fraction_share(need, whole[0].memory_mib if whole else 0)
        return GpuPodDemand(need.cpu, min(share, MILLI), 1)
    if g.kind in ("gpu", "shared") and g.resource is not None and device_kind(node, g.resource) == "whole":
        return GpuPodDemand(need.cpu, MILLI, g.count)
    return GpuPodDemand(need.cpu, 0, 0)


def gpu_milli_taken(need: PodNeed, node: NodeState) -> int:
    """Thousandths of the node's GPUs the pod would hold there (for the allocation-ratio scorers)."""
    g = need.gpu
    if g.kind == "none":
        return 0
    if g.kind == "fraction":
        whole = whole_gpus(node)
        return min(fraction_share(need, whole[0].memory_mib if whole else 0)[0], MILLI)
    resource = g.resource or ""
    for gpu in node.gpus:
        if gpu.mode == "whole" and gpu.resource == resource:
            return MILLI * g.count
        if gpu.mode == "replicas" and gpu.resource == resource:
            return MILLI * g.count // gpu.replicas
        if gpu.mode == "mig":
            total = sum(s.compute_slices for s in gpu.mig) or 1
            for s in gpu.mig:
                if s.resource == resource:
                    return MILLI * s.compute_slices * g.count // total
        for part in gpu.partitions:  # dynamic MIG: its compute slices over the model's
            if part.resource == resource:
                geometry = geometry_for(gpu.model)
                return MILLI * part.compute_slices * g.count // (geometry.compute_slices if geometry else 7)
    return 0


def placement_tag(p: Placement) -> str | None:
    """GpuClustering tag of a placed pod, from what it holds: "share-gpu", "<k>-gpu" or None (no GPU)."""
    if not p.grants:
        return None
    whole = sum(1 for g in p.grants if g.kind == "whole")
    if whole == len(p.grants):
        return f"{whole}-gpu"
    return "share-gpu"  # fractions, time-slice replicas and MIG instances all share a physical GPU


class TagIndex:
    """Per node, the GpuClustering tags of its GPU pods; refreshed from placements when a node changes."""

    def __init__(self, cluster: ClusterState) -> None:
        self.cluster = cluster
        self._tags: dict[str, frozenset[str]] = {}

    def refresh(self, node: NodeState) -> frozenset[str]:
        placements = self.cluster.placements
        tags = frozenset(t for pod in node.pods if (t := placement_tag(placements[pod])) is not None)
        self._tags[node.name] = tags
        return tags

    def on_change(self, node: NodeState) -> None:
        """ClusterState listener, for placers without an index (the index refreshes tags itself)."""
        self.refresh(node)

    def get(self, node: NodeState) -> frozenset[str]:
        tags = self._tags.get(node.name)
        return tags if tags is not None else self.refresh(node)


class NodeView:
    """GpuNodeView over a live NodeState; build one per evaluation (it reads the node when asked)."""

    __slots__ = ("_free", "_tags", "node", "whole")

    def __init__(self, node: NodeState, tags: TagIndex | None = None) -> None:
        self.node = node
        self.whole = whole_gpus(node)
        self._free: list[int] | None = None
        self._tags = tags

    @property
    def model(self) -> str:
        return self.node.gpu_model or ""

    @property
    def cpu_free_milli(self) -> int:
        return self.node.free(CPU)

    @property
    def gpu_free_milli(self) -> Sequence[int]:
        if self._free is None:
            self._free = [gpu_free_milli(g) for g in self.whole]
        return self._free

    @property
    def gpu_tags(self) -> frozenset[str]:
        return self._tags.get(self.node) if self._tags is not None else frozenset()
