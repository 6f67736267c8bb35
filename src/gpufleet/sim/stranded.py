"""Fragmentation as the simulator reports it: idle GPU capacity that no pending pod can use.

A sample looks at every node with idle GPU capacity and asks whether at least one pending GPU pod would
fit there on its own, with the placement filters' one node-fit check (ready, taints tolerated, selectors and
allowed models matched, every requested resource free, the pod-count limit, and free devices for the pod's
GPU demand). The idle capacity of the nodes where none fits is stranded. While no GPU pod is pending nothing
is stranded: idle capacity that nobody asks for is spare, not fragmented.

This is a feasibility test for a metric, node by node and pod by pod; it neither scores nor allocates, and
it ignores what a Kueue flavor would add to a pod (its node labels), so it can call capacity usable that a
queue's flavor would keep a pod away from.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.api.objects import PodTemplate
from gpufleet.cluster.state import ClusterState, NodeState
from gpufleet.gpu.constants import MILLI
from gpufleet.scheduling.placement.filters import unfit_reason
from gpufleet.scheduling.placement.need import PodNeed, compile_need
from gpufleet.scheduling.types import PodRequest

MAX_SPECS = 64  # distinct pending pod shapes looked at per sample


def _need(t: PodTemplate) -> PodNeed:
    return compile_need(PodRequest("", t))


def fits_alone(node: NodeState, t: PodTemplate) -> bool:
    """Whether pod template ``t`` would fit on ``node`` as it is now."""
    return unfit_reason(_need(t), node) is None


def idle_gpus(node: NodeState) -> float:
    return sum(g.free_milli for g in node.gpus if g.healthy) / MILLI


def _pending_needs(pending: Iterable[PodTemplate]) -> list[PodNeed]:
    """The distinct pending GPU pod shapes (at most :data:`MAX_SPECS`), compiled for the fit check."""
    specs: list[PodTemplate] = []
    seen: set[int] = set()
    for t in pending:
        if t.gpu.wants_gpu and id(t) not in seen:
            seen.add(id(t))
            specs.append(t)
            if len(specs) >= MAX_SPECS:
                break
    return [_need(t) for t in specs]


def stranded_by_node(cluster: ClusterState, pending: Iterable[PodTemplate]) -> dict[str, tuple[float, float]]:
    """Per node with idle GPU capacity: (its idle GPUs no pending GPU pod fits, its idle GPUs)."""
    needs = _pending_needs(pending)
    out: dict[str, tuple[float, float]] = {}
    for node in cluster.nodes.values():
        free = idle_gpus(node)
        if free <= 0:
            continue
        stranded = free if needs and not any(unfit_reason(need, node) is None for need in needs) else 0.0
        out[node.name] = (stranded, free)
    return out


def stranded_gpus(cluster: ClusterState, pending: Iterable[PodTemplate]) -> tuple[float, float]:
    """(idle GPUs on nodes where no pending GPU pod fits, all idle GPUs)."""
    stranded = 0.0
    idle = 0.0
    for node_stranded, node_idle in stranded_by_node(cluster, pending).values():
        stranded += node_stranded
        idle += node_idle
    return stranded, idle
