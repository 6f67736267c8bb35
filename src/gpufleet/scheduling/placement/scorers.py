"""Score plugins: a node that passed every filter gets an integer score, higher is better.

The allocation scorers follow kube-scheduler's NodeResourcesFit strategies and BalancedAllocation (integer
0..100 arithmetic, resources a node lacks skipped, an extended resource counted only when the pod asks for
it). GPUs count in thousandths of all the node's GPUs, so whole GPUs, fractions, replicas and MIG instances
weigh by the share they hold. The paper's scorers (random, dotprod, gpuclustering, gpupacking, bestfit, fgd)
are the functions of :mod:`gpufleet.scheduling.gpuscore`, called through :class:`GpuScore`.

A scorer may also be a *tier*: a key compared before the weighted sum (cheapest GPU model first). Prices
order models only where both are known: a model without a price (or one :class:`CheapestModel` reserves)
gets the tier ``UNRANKED``, which the search compares with no other tier: it competes with the best priced
tier on the rest of the key (:func:`gpufleet.scheduling.placement.index.better`).
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Protocol

from gpufleet.api.objects import CPU, MEMORY
from gpufleet.cluster.free_devices import demand_resource, device_kind
from gpufleet.gpu.catalog import Catalog
from gpufleet.gpu.constants import MILLI
from gpufleet.scheduling import gpuscore
from gpufleet.scheduling.placement.filters import replica_room
from gpufleet.scheduling.placement.need import PodNeed
from gpufleet.scheduling.placement.nodeview import NodeView, gpu_demand, gpu_milli_taken

MAX_SCORE = 100
# The tier of a GPU model without a known price. Counting it as free (0) would send every pod to the models
# nobody priced first (the openb trace's undisclosed G2/G3 are 76% of its GPUs), a cost rule without a cost.
UNRANKED = 1 << 62
GPU_MILLI = "gpu"  # the pseudo-resource of the allocation scorers: thousandths of the node's GPUs


class ScorePlugin(Protocol):
    name: str
    normalizes: bool  # min-max normalised over the candidates; such a scorer must be a profile's only one

    def score(self, need: PodNeed, view: NodeView) -> int:
        ...


def _requested_and_capacity(need: PodNeed, view: NodeView, resource: str) -> tuple[int, int]:
    node = view.node
    if resource == GPU_MILLI:
        if not node.gpus or need.gpu.kind == "none":
            return 0, 0  # kube skips an extended resource the pod does not ask for
        used = sum(g.used_milli for g in node.gpus)
        return used + gpu_milli_taken(need, node), MILLI * len(node.gpus)
    alloc = node.allocatable.get(resource, 0)
    asked = need.cpu if resource == CPU else need.memory if resource == MEMORY else dict(need.requests).get(
        resource, 0)
    return node.used.get(resource, 0) + asked, alloc


class _Allocation:
    normalizes = False

    def __init__(self, resources: tuple[str, ...]) -> None:
        self.resources = resources

    def _per_resource(self, requested: int, capacity: int) -> int:
        raise NotImplementedError

    def score(self, need: PodNeed, view: NodeView) -> int:
        total = 0
        weights = 0
        for resource in self.resources:
            requested, capacity = _requested_and_capacity(need, view, resource)
            if capacity <= 0:
                continue
            total += self._per_resource(requested, capacity)
            weights += 1
        return total // weights if weights else 0


class MostAllocated(_Allocation):
    """Bin packing: the fuller the node would be with the pod, the better."""

    name = "MostAllocated"

    def _per_resource(self, requested: int, capacity: int) -> int:
        return min(requested, capacity) * MAX_SCORE // capacity


class LeastAllocated(_Allocation):
    """Spreading: the emptier the node would be with the pod, the better."""

    name = "LeastAllocated"

    def _per_resource(self, requested: int, capacity: int) -> int:
        return 0 if requested > capacity else (capacity - requested) * MAX_SCORE // capacity


class BalancedAllocation:
    """kube's BalancedAllocation: prefer nodes whose resources would be used in equal proportion."""

    name = "BalancedAllocation"
    normalizes = False

    def __init__(self, resources: tuple[str, ...] = (CPU, MEMORY)) -> None:
        self.resources = resources

    def score(self, need: PodNeed, view: NodeView) -> int:
        fractions = []
        for resource in self.resources:
            requested, capacity = _requested_and_capacity(need, view, resource)
            if capacity > 0:
                fractions.append(min(requested / capacity, 1.0))
        std = 0.0
        if len(fractions) == 2:
            std = abs((fractions[0] - fractions[1]) / 2)
        elif len(fractions) > 2:
            mean = sum(fractions) / len(fractions)
            std = math.sqrt(sum((f - mean) ** 2 for f in fractions) / len(fractions))
        return int((1 - std) * MAX_SCORE)


def _price_milli(catalog: Catalog, model: str | None) -> int | None:
    price = catalog.known_price(model) if model else None
    return round(price * 1000) if price is not None else None


class CheapestModel:
    """Tier: a GPU pod goes to the cheapest GPU model that can take it (CHF/GPU-hour, catalog prices).

    ``reserved``: models whose room the expected demand of workloads that may run *only* on few models
    claims (FGD+'s model pressure above 1). Their idle GPUs are not free for everyone: a reserved model is
    UNRANKED, so an unrestricted pod goes there only when the scorers behind the tier prefer it. Without
    that, a cheap model that restricted pods need (the T4 on openb's gpuspec traces) is filled first by
    pods that could run anywhere, and the restricted pods arriving later find no room at all.
    """

    name = "CheapestModel"
    normalizes = False

    def __init__(self, catalog: Catalog, reserved: Collection[str] = ()) -> None:
        self.catalog = catalog
        self.reserved = frozenset(reserved)

    def score(self, need: PodNeed, view: NodeView) -> int:
        if need.gpu.kind == "none":
            return 0
        model = view.node.gpu_model
        if model in self.reserved:
            return UNRANKED
        price = _price_milli(self.catalog, model)
        return UNRANKED if price is None else -price


class DemandCost:
    """Tier: the cheapest place for the pod's GPU demand, priced per unit it holds there (a fraction or a
    MIG instance costs its share of the GPU's price, a replica its share of the time-sliced GPU)."""

    name = "DemandCost"
    normalizes = False

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog

    def score(self, need: PodNeed, view: NodeView) -> int:
        if need.gpu.kind == "none":
            return 0
        price = _price_milli(self.catalog, view.node.gpu_model)
        return UNRANKED if price is None else -(price * gpu_milli_taken(need, view.node) // MILLI)


class GpuScore:
    """One of the FGD paper's scorers (gpuscore), which also chooses the GPU of a fractional pod."""

    normalizes: bool

    def __init__(self, scorer: gpuscore.Scorer) -> None:
        self.scorer = scorer
        self.name = scorer.name
        # BestFit's raw scores are min-max normalised over the candidates; its argmax is the raw argmax
        # (only the raw maximum maps to 100), so ranking by raw score picks the same nodes.
        self.normalizes = isinstance(scorer, gpuscore.BestFitScorer)

    def score(self, need: PodNeed, view: NodeView) -> int:
        return self.scorer.score(view, gpu_demand(need, view.node))[0]

    def choose_gpu(self, need: PodNeed, view: NodeView) -> int:
        """Index into ``view.whole`` of the GPU the scorer picks for a fractional pod."""
        _, gpus = self.scorer.score(view, gpu_demand(need, view.node))
        return gpus[0]


class ReplicaSpread:
    """Time-sliced pods spread over empty GPUs before stacking, by memory: the node whose best GPU keeps the
    most memory free with the pod on it (by what its co-tenants and the pod are known to use), then the most
    free replicas there. Time-slicing isolates no memory, so stacking a pod on the fullest GPU (what packing
    scorers do) is what OOM-kills it; replicas cost the same quota wherever they are. 0 for other pods.

    Compared before the weighted sum (:attr:`Profile.memory_aware`), so packing never overrules it. Where the pod
    would hold an exclusive device instead (a time-sliced node and a whole-GPU one both serving ``nvidia.com/gpu``),
    the node scores above every replica node: spreading must never move a pod off an exclusive GPU onto a shared
    one; among exclusive nodes it then ties, and the sum decides as before."""

    name = "ReplicaSpread"
    normalizes = False

    def score(self, need: PodNeed, view: NodeView) -> int:
        g = need.gpu
        if g.kind not in ("gpu", "shared"):
            return 0
        node = view.node
        resource = demand_resource(g)
        if resource is None:
            return 0
        if device_kind(node, resource) != "replicas":
            return _EXCLUSIVE
        best = 0
        for gpu in node.gpus:  # all of them: a score is kept per class of identical node states, not per node
            if gpu.resource != resource:
                continue
            room = replica_room(need, gpu)
            if room is not None:
                best = max(best, max(room, 0) * _REPLICA_SLOTS + len(gpu.free_replicas()))
        return best


_REPLICA_SLOTS = 1024  # more replicas than any GPU is cut into, so memory decides first
_EXCLUSIVE = 1 << 60  # above any replica node's score (GPU memory in MiB times _REPLICA_SLOTS)
