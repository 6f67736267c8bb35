"""The three node-fit checks as they were before one check replaced them (issue 15, item 6), kept verbatim
(as of commit ae313d1) as the reference the property tests compare the one check with: they must agree wherever
the former code was right. Not used by gpufleet itself."""

from __future__ import annotations

from gpufleet.api.kinds import FRACTION_RESOURCE
from gpufleet.api.objects import GPU, GpuDemand, PodTemplate
from gpufleet.cluster.devices import DeviceGrant, fraction_need
from gpufleet.cluster.state import SHARED_GPU, NodeState
from gpufleet.scheduling.types import PodRequest


def first_free_grants(node: NodeState, demand: GpuDemand) -> list[DeviceGrant] | None:
    """cluster.state.first_free_grants: MIG instances matched by profile only; ``nvidia.com/gpu`` only as whole
    GPUs or replicas (never as single-strategy MIG instances)."""
    if demand.kind == "none":
        return []
    healthy = [g for g in node.gpus if g.healthy]
    if demand.kind == "fraction":
        for g in healthy:
            if g.mode != "whole" or g.holder is not None:
                continue
            milli, memory = fraction_need(demand.milli, demand.memory_mib, g.memory_mib)
            if g.used_milli + milli <= 1000 and g.used_memory_mib + memory <= g.memory_mib:
                return [DeviceGrant("fraction", g.index, milli=milli, memory_mib=memory)]
        return None
    grants: list[DeviceGrant] = []
    if demand.kind == "mig":
        for g in healthy:
            for k, mig in enumerate(g.mig):
                if len(grants) < demand.count and mig.holder is None and mig.placement.profile == demand.mig_profile:
                    grants.append(DeviceGrant("mig", g.index, k))
        return grants if len(grants) == demand.count else None
    resource = GPU if demand.kind == "gpu" else SHARED_GPU
    for g in healthy:
        if g.resource != resource:
            continue
        if g.mode == "whole" and g.is_free and len(grants) < demand.count:
            grants.append(DeviceGrant("whole", g.index))
        elif g.mode == "replicas":
            for slot in g.free_replicas():
                if len(grants) < demand.count:
                    grants.append(DeviceGrant("replica", g.index, slot))
    return grants if len(grants) == demand.count else None


def _tolerated(node: NodeState, t: PodTemplate) -> bool:
    for taint in node.taints:
        if taint.effect == "PreferNoSchedule":
            continue
        if not any(tol.tolerates(taint) for tol in t.tolerations):
            return False
    return True


def stranded_fits_alone(node: NodeState, t: PodTemplate) -> bool:
    """placement/stranded.fits_alone: allocatable counts only (no device check), no pod-count limit, models by exact
    name."""
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


def first_fit_why_not(pod: PodRequest, node: NodeState) -> str | None:
    """kueue/firstfit.FirstFitPlacer._why_not: models by exact name, devices through the former first-fit search,
    no GPU memory or time-slice request-size check."""
    t = pod.template
    labels = node.labels
    if not node.ready or node.unschedulable:
        return "node(s) were unschedulable or not ready"
    if any(labels.get(k) != v for k, v in pod.node_labels) or any(
            labels.get(k) != v for k, v in t.node_selector.items()):
        return "node(s) didn't match Pod's node affinity/selector"
    if t.required_affinity and not any(term.matches(labels) for term in t.required_affinity):
        return "node(s) didn't match Pod's node affinity/selector"
    tolerations = (*t.tolerations, *pod.extra_tolerations)
    for taint in node.taints:
        if taint.effect != "PreferNoSchedule" and not any(x.tolerates(taint) for x in tolerations):
            return "node(s) had untolerated taint"
    for r, v in t.requests.items():
        if r != FRACTION_RESOURCE and v > 0 and node.free(r) < v:
            return f"Insufficient {r}"
    if node.used.get("pods", 0) + 1 > node.allocatable.get("pods", 110):
        return "Too many pods"
    demand = t.gpu
    if demand.kind != "none" and demand.models and node.gpu_model not in demand.models:
        return "node(s) had no free GPU device for the request"
    if first_free_grants(node, demand) is None:
        return "node(s) had no free GPU device for the request"
    return None
