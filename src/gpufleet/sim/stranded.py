"""Stranded capacity as the simulator and the live scheduler report it: idle GPU capacity that a pending pod could
use, were it free, but that no pending pod fits now.

A sample looks at every node with idle GPU capacity and asks whether at least one pending GPU pod would
fit there on its own, with the placement filters' one node-fit check (ready, taints tolerated, selectors and
allowed models matched, every requested resource free, the pod-count limit, and free devices for the pod's
GPU demand). The idle capacity of a node where none fits is stranded when at least one pending pod could use
the node were it empty (:func:`could_use`); a node no pending pod could ever use (a dedicated pool, a model or a
device kind nobody waiting asks for) is spare, not stranded. While no GPU pod is pending nothing is stranded:
idle capacity that nobody asks for is spare, not fragmented.

This is a feasibility test for a metric, node by node and pod by pod; it neither scores nor allocates, and
it ignores what a Kueue flavor would add to a pod (its node labels), so it can call capacity usable that a
queue's flavor would keep a pod away from.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.api.objects import PodTemplate
from gpufleet.cluster.devices import fraction_need
from gpufleet.cluster.free_devices import demand_resource, device_kind
from gpufleet.cluster.state import ClusterState, NodeState
from gpufleet.gpu.constants import MILLI
from gpufleet.scheduling.placement.filters import DEFAULT_FILTERS, unfit_reason
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


_STATIC = tuple(f for f in DEFAULT_FILTERS if f.static)


def could_use(need: PodNeed, node: NodeState) -> bool:
    """Whether the pod would fit on ``node`` were nothing held there: every static filter passes (ready,
    selectors, taints, model, device memory), the node's allocatable covers its requests, and the node offers
    enough devices of the kind it asks for, counted free or not (healthy ones)."""
    if unfit_reason(need, node, _STATIC) is not None:
        return False
    if any(node.allocatable.get(r, 0) < amount for r, amount in need.requests):
        return False
    g = need.gpu
    if g.kind == "none":
        return True
    if g.kind == "fraction":
        return any(gpu.mode == "whole" and gpu.healthy and fraction_need(g.milli, g.memory_mib, gpu.memory_mib)[0]
                   <= MILLI for gpu in node.gpus)
    resource = demand_resource(g)
    if resource is None:
        return False
    kind = "mig" if g.kind == "mig" else device_kind(node, resource)
    if kind == "whole":
        total = sum(1 for gpu in node.gpus if gpu.mode == "whole" and gpu.resource == resource and gpu.healthy)
    elif kind == "replicas":
        total = sum(gpu.replicas for gpu in node.gpus if gpu.mode == "replicas" and gpu.resource == resource
                    and gpu.healthy)
    elif kind == "mig":
        want = g.memory_mib or 0
        total = sum(1 for gpu in node.gpus if gpu.mode == "mig" and gpu.healthy for m in gpu.mig
                    if m.resource == resource and m.memory_mib >= want)
    else:
        return False
    return total >= g.count


def stranded_by_node(cluster: ClusterState, pending: Iterable[PodTemplate]) -> dict[str, tuple[float, float]]:
    """Per node with idle GPU capacity: (its idle GPUs that some pending GPU pod could use were they free but no
    pending GPU pod fits now, its idle GPUs)."""
    needs = _pending_needs(pending)
    out: dict[str, tuple[float, float]] = {}
    for node in cluster.nodes.values():
        free = idle_gpus(node)
        if free <= 0:
            continue
        stranded = 0.0
        if needs and not any(unfit_reason(need, node) is None for need in needs) and any(
                could_use(need, node) for need in needs):
            stranded = free
        out[node.name] = (stranded, free)
    return out


def stranded_gpus(cluster: ClusterState, pending: Iterable[PodTemplate]) -> tuple[float, float]:
    """(idle GPUs stranded: on nodes some pending GPU pod could use but none fits now, all idle GPUs)."""
    stranded = 0.0
    idle = 0.0
    for node_stranded, node_idle in stranded_by_node(cluster, pending).values():
        stranded += node_stranded
        idle += node_idle
    return stranded, idle
