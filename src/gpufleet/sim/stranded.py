"""Fragmentation as the simulator reports it: idle GPU capacity that no pending pod can use.

A sample looks at every node with idle GPU capacity and asks whether at least one pending GPU pod would
fit there on its own (ready, taints tolerated, selectors and allowed models matched, every requested
resource free, and for a fractional pod a GPU with room for its share and memory). The idle capacity of
the nodes where none fits is stranded. While no GPU pod is pending nothing is stranded: idle capacity that
nobody asks for is spare, not fragmented.

This is a feasibility test for a metric, node by node and pod by pod; it neither scores nor allocates, and
it ignores what a Kueue flavor would add to a pod (its node labels), so it can call capacity usable that a
queue's flavor would keep a pod away from.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.api.kinds import FRACTION_RESOURCE
from gpufleet.api.objects import PodTemplate
from gpufleet.cluster.devices import fraction_need
from gpufleet.cluster.state import ClusterState, NodeState

MAX_SPECS = 64  # distinct pending pod shapes looked at per sample


def _tolerated(node: NodeState, t: PodTemplate) -> bool:
    for taint in node.taints:
        if taint.effect == "PreferNoSchedule":
            continue
        if not any(tol.tolerates(taint) for tol in t.tolerations):
            return False
    return True


def fits_alone(node: NodeState, t: PodTemplate) -> bool:
    """Whether pod template ``t`` would fit on ``node`` as it is now."""
    if not node.ready or node.unschedulable or not _tolerated(node, t):
        return False
    labels = node.labels
    if any(labels.get(k) != v for k, v in t.node_selector.items()):
        return False
    if t.required_affinity and not any(term.matches(labels) for term in t.required_affinity):
        return False
    if t.gpu.models and node.gpu_model not in t.gpu.models:
        return False
    for resource, amount in t.requests.items():
        if resource != FRACTION_RESOURCE and amount > 0 and node.free(resource) < amount:
            return False
    if t.gpu.kind == "fraction":
        for gpu in node.gpus:
            if gpu.mode != "whole" or gpu.holder is not None or not gpu.healthy:
                continue
            share, memory = fraction_need(t.gpu.milli, t.gpu.memory_mib, gpu.memory_mib)
            if gpu.used_milli + share <= 1000 and gpu.used_memory_mib + memory <= gpu.memory_mib:
                return True
        return False
    return True


def idle_gpus(node: NodeState) -> float:
    return sum(g.free_milli for g in node.gpus if g.healthy) / 1000


def stranded_gpus(cluster: ClusterState, pending: Iterable[PodTemplate]) -> tuple[float, float]:
    """(idle GPUs on nodes where no pending GPU pod fits, all idle GPUs)."""
    specs: list[PodTemplate] = []
    seen: set[int] = set()
    for t in pending:
        if t.gpu.wants_gpu and id(t) not in seen:
            seen.add(id(t))
            specs.append(t)
            if len(specs) >= MAX_SPECS:
                break
    stranded = 0.0
    idle = 0.0
    for node in cluster.nodes.values():
        free = idle_gpus(node)
        if free <= 0:
            continue
        idle += free
        if specs and not any(fits_alone(node, t) for t in specs):
            stranded += free
    return stranded, idle
