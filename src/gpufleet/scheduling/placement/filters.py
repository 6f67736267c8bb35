"""Filter plugins: each says why a node cannot take a pod (a kube-scheduler-style reason) or None.

A filter is *static* when its answer depends only on what a node is (labels, taints, allocatable, GPU model
and shape), not on what runs there; the equivalence-class index evaluates static filters once per group of
identical nodes and dynamic ones once per class of identical node states. Order matters: :meth:`explain
<gpufleet.scheduling.placement.placer.GpuPlacer.explain>` counts each node under its first failing filter.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from gpufleet.api.objects import GPU_FRACTIONS_LABEL, PODS, Taint
from gpufleet.cluster.devices import GpuSlot
from gpufleet.cluster.free_devices import (
    demand_resource,
    device_kind,
    fraction_copies,
    fraction_options,
    fractions_closed,
    free_device_count,
    free_mig_grants,
    free_replica_count,
    free_whole,
    replica_gpus,
)
from gpufleet.cluster.state import NodeState
from gpufleet.gpu.catalog import DEFAULT_CATALOG
from gpufleet.gpu.constants import DEFAULT_MAX_PODS, FRACTION_RESOURCE, MILLI
from gpufleet.scheduling.placement.dra import DraDevices
from gpufleet.scheduling.placement.need import PodNeed, compile_need
from gpufleet.scheduling.placement.nodeview import fraction_share, whole_gpus
from gpufleet.scheduling.types import PodRequest


class Filter(Protocol):
    name: str
    static: bool

    def check(self, need: PodNeed, node: NodeState) -> str | None:
        """None when the node passes, else the reason it fails."""
        ...


class NodeReady:
    """Not-ready and cordoned nodes take no new pods."""

    name = "NodeReady"
    static = True

    def check(self, need: PodNeed, node: NodeState) -> str | None:
        if not node.ready:
            return "node(s) were not ready"
        if node.unschedulable:
            return "node(s) were unschedulable"
        return None


class NodeAffinity:
    """nodeSelector (every pair) and required node affinity (terms ORed, requirements ANDed)."""

    name = "NodeAffinity"
    static = True

    def check(self, need: PodNeed, node: NodeState) -> str | None:
        labels = node.labels
        if any(labels.get(k) != v for k, v in need.selector):
            return "node(s) didn't match Pod's node affinity/selector"
        if need.affinity and not any(term.matches(labels) for term in need.affinity):
            return "node(s) didn't match Pod's node affinity/selector"
        return None


class FlavorNodeLabels:
    """The admitted ResourceFlavor's nodeLabels must all be on the node."""

    name = "FlavorNodeLabels"
    static = True

    def check(self, need: PodNeed, node: NodeState) -> str | None:
        labels = node.labels
        if any(labels.get(k) != v for k, v in need.node_labels):
            return "node(s) didn't match the flavor's node labels"
        return None


def _taint_text(t: Taint) -> str:
    return f"{{{t.key}: {t.value}}}"


class TaintToleration:
    """NoSchedule and NoExecute taints must be tolerated (PreferNoSchedule only steers kube's scoring)."""

    name = "TaintToleration"
    static = True

    def check(self, need: PodNeed, node: NodeState) -> str | None:
        for taint in node.taints:
            if taint.effect == "PreferNoSchedule":
                continue
            if not any(tol.tolerates(taint) for tol in need.tolerations):
                return f"node(s) had untolerated taint {_taint_text(taint)}"
        return None


def _same_model(a: str, b: str) -> bool:
    if a == b:
        return True
    fa, fb = DEFAULT_CATALOG.find(a), DEFAULT_CATALOG.find(b)
    return fa is not None and fb is not None and fa.key == fb.key


class GpuModel:
    """A GPU pod that names allowed models (gpufleet.io/gpu-model) only goes to nodes of those models."""

    name = "GpuModel"
    static = True

    def check(self, need: PodNeed, node: NodeState) -> str | None:
        g = need.gpu
        if g.kind == "none" or not g.models:
            return None
        model = node.gpu_model
        if model is None or not any(_same_model(model, m) for m in g.models):
            return "node(s) didn't have an allowed GPU model"
        return None


class FractionsAllowed:
    """A node labelled ``gpufleet.io/gpu-fractions: "false"`` takes no fractional pod (whole GPUs, MIG instances
    and replicas as before): its GPUs stay whole for the pods that need them (free_devices.fractions_closed)."""

    name = "GpuFractionsAllowed"
    static = True

    def check(self, need: PodNeed, node: NodeState) -> str | None:
        if need.gpu.kind != "fraction" or not fractions_closed(node.labels):
            return None
        return f"node(s) closed to fractional GPUs ({GPU_FRACTIONS_LABEL}=false)"


class TimeSliceLimit:
    """failRequestsGreaterThanOne: a time-sliced node refuses a request of more than one replica."""

    name = "TimeSliceLimit"
    static = True

    def check(self, need: PodNeed, node: NodeState) -> str | None:
        g = need.gpu
        if g.count <= 1 or g.kind not in ("gpu", "shared") or not node.fail_requests_greater_than_one:
            return None
        resource = demand_resource(g)
        if resource is not None and device_kind(node, resource) == "replicas":
            return "node(s) refuse requests of more than one time-slice replica"
        return None


class GpuMemory:
    """The pod's declared GPU memory never exceeds its device's: the GPU (whole, replicas, fraction) or the
    MIG instance."""

    name = "GpuMemory"
    static = True

    def check(self, need: PodNeed, node: NodeState) -> str | None:
        g = need.gpu
        want = g.memory_mib
        if not want or g.kind == "none":
            return None
        if g.kind == "fraction":
            ok = any(fraction_share(need, gpu.memory_mib)[0] <= MILLI for gpu in whole_gpus(node))
        else:
            resource = demand_resource(g)
            ok = any(s.resource == resource and s.memory_mib >= want for gpu in node.gpus
                     for s in (*gpu.mig, *gpu.partitions))
            if g.kind != "mig":
                ok = ok or any(gpu.memory_mib >= want and gpu.resource == resource and gpu.mode != "mig"
                               for gpu in node.gpus)
        return None if ok else f"node(s) had GPUs with less memory than the pod's {want} MiB"


class Resources:
    """CPU, memory, pods and count resources (nvidia.com/gpu, .shared, mig-*) within free allocatable."""

    name = "NodeResourcesFit"
    static = False

    def check(self, need: PodNeed, node: NodeState) -> str | None:
        alloc = node.allocatable
        used = node.used
        if used.get(PODS, 0) + 1 > alloc.get(PODS, DEFAULT_MAX_PODS):
            return "Too many pods"
        for resource, amount in need.requests:
            if used.get(resource, 0) + amount > alloc.get(resource, 0):
                return _insufficient(need, node)
        return None


def _insufficient(need: PodNeed, node: NodeState) -> str:
    """Every resource the node has too little of, GPUs first (issue 29): "Insufficient nvidia.com/gpu, cpu and
    ephemeral-storage"; one alone reads as kube-scheduler's "Insufficient cpu"."""
    alloc, used = node.allocatable, node.used
    short = [r for r, amount in need.requests if used.get(r, 0) + amount > alloc.get(r, 0)]
    short.sort(key=lambda r: not (r.startswith("nvidia.com/") or r == FRACTION_RESOURCE))  # stable within each
    return "Insufficient " + (short[0] if len(short) == 1 else ", ".join(short[:-1]) + " and " + short[-1])


class WholeGpus:
    """Whole-GPU pods need that many free, healthy GPUs (a GPU holding fractions is not free)."""

    name = "WholeGpus"
    static = False

    def check(self, need: PodNeed, node: NodeState) -> str | None:
        g = need.gpu
        resource = demand_resource(g) if g.kind in ("gpu", "shared") else None
        if resource is None:
            return None
        kind = device_kind(node, resource)
        if kind is None:
            # No GPU of the node offers it. A device-plugin pod is refused by its allocatable first; a pod whose
            # GPUs come through DRA claims asks no allocatable, so this is where such a node is refused.
            return f"Insufficient {resource}"
        if kind != "whole":
            return None
        return None if len(free_whole(node, resource)) >= g.count else f"Insufficient {resource}"


class TimeSliceReplicas:
    """Time-sliced GPUs: enough free replicas (on healthy GPUs)."""

    name = "TimeSliceReplicas"
    static = False

    def check(self, need: PodNeed, node: NodeState) -> str | None:
        g = need.gpu
        resource = demand_resource(g) if g.kind in ("gpu", "shared") else None
        if resource is None or device_kind(node, resource) != "replicas":
            return None
        return None if free_replica_count(node, resource) >= g.count else f"Insufficient {resource}"


class MigInstances:
    """MIG pods (and nvidia.com/gpu pods on a single-strategy MIG node) need free instances of the profile
    with enough memory."""

    name = "MigInstances"
    static = False

    def check(self, need: PodNeed, node: NodeState) -> str | None:
        g = need.gpu
        resource = demand_resource(g) if g.kind in ("mig", "gpu", "shared") else None
        if resource is None or (g.kind != "mig" and device_kind(node, resource) != "mig"):
            return None
        if len(free_mig_grants(node, resource, g.memory_mib)) >= g.count:
            return None
        what = f"MIG instance {g.mig_profile}" if g.mig_profile else f"MIG instance for {resource}"
        return f"node(s) had no free {what}"


class Fraction:
    """A fractional pod fits on ONE whole-mode GPU: its thousandths and its memory (free_devices.fraction_room)."""

    name = "GpuFraction"
    static = False

    def check(self, need: PodNeed, node: NodeState) -> str | None:
        if need.gpu.kind != "fraction" or fraction_options(node, need.gpu):
            return None
        return "node(s) had no GPU with room for the pod's GPU fraction"


def gpu_key(node: str, index: int) -> str:
    """How a policy names one physical GPU of a node (PodRequest.avoid_gpus)."""
    return f"{node}/{index}"


def _every_gpu(index: int) -> bool:
    return True


def allowed_gpus(need: PodNeed, node: NodeState) -> Callable[[int], bool]:
    """Whether the pod may take devices on GPU ``index`` of ``node``: not one where it was OOM-killed before."""
    if not need.avoid_gpus:
        return _every_gpu
    return lambda index: gpu_key(node.name, index) not in need.avoid_gpus


def replica_room(need: PodNeed, gpu: GpuSlot) -> int | None:
    """GPU memory (MiB) a time-sliced GPU would have left with the pod on it, by what is known of its holders and
    of the pod; None when it has no free replica or the known memory would not fit."""
    if gpu.mode != "replicas" or not gpu.healthy or None not in gpu.replica_holders:
        return None
    left = gpu.memory_mib - gpu.shared_memory_mib - need.memory_hint
    return None if gpu.memory_mib > 0 and need.memory_hint > 0 and left < 0 else left


def replicas_with_room(need: PodNeed, node: NodeState, resource: str, ok: Callable[[int], bool]) -> int:
    """Free replicas of ``resource`` on the node's GPUs ``ok`` allows, where the pod's known memory fits."""
    return sum(len(g.free_replicas()) for g in replica_gpus(node, resource)
               if ok(g.index) and replica_room(need, g) is not None)


class AvoidGpus:
    """A pod an OOM killed on a shared GPU is not placed there again: the node needs enough free devices of the
    pod's kind on GPUs it does not avoid (time-slice replicas with room for its known memory). Evaluated node by
    node (the pod's need is per-node when it avoids GPUs), so it may read what is free and which node it is;
    the dynamic filters, answered once per class of identical node states, must not."""

    name = "AvoidGpus"
    static = True

    def check(self, need: PodNeed, node: NodeState) -> str | None:
        if not need.avoid_gpus or need.gpu.kind == "none":
            return None
        ok = allowed_gpus(need, node)
        g = need.gpu
        # The devices placement.devices would choose among, on the GPUs the pod may take.
        if g.kind == "fraction":
            ok_enough = any(ok(gpu.index) for gpu, _, _ in fraction_options(node, g))
        else:
            resource = demand_resource(g)
            kind = "mig" if g.kind == "mig" else device_kind(node, resource) if resource else None
            if resource is None or kind is None:
                return None  # the other filters say why the node offers nothing
            if kind == "whole":
                free = sum(1 for i in free_whole(node, resource) if ok(i))
            elif kind == "replicas":
                free = replicas_with_room(need, node, resource, ok)
            else:
                free = sum(1 for grant in free_mig_grants(node, resource, g.memory_mib) if ok(grant.gpu))
            ok_enough = free >= g.count
        return None if ok_enough else "node(s) had free devices only on GPUs where the pod was OOM-killed before"


class SharedGpuMemory:
    """Time-sliced GPUs isolate no memory: a replica goes only where what its co-tenants are known to use plus
    what the pod is expected to use fits the GPU (PodRequest.memory_hint; nothing known, nothing refused)."""

    name = "SharedGpuMemory"
    static = False

    def check(self, need: PodNeed, node: NodeState) -> str | None:
        g = need.gpu
        if need.memory_hint <= 0 or g.kind not in ("gpu", "shared"):
            return None
        resource = demand_resource(g)
        if resource is None or device_kind(node, resource) != "replicas":
            return None
        if replicas_with_room(need, node, resource, _every_gpu) >= g.count:
            return None
        return f"node(s) had no time-sliced GPU with {need.memory_hint} MiB free beside what its co-tenants use"


def memory_aware_filters() -> tuple[Filter, ...]:
    """Every filter, plus the two that keep pods off shared GPUs that cannot hold their memory (the gpufleet
    profile's)."""
    base = default_filters()
    static = tuple(f for f in base if f.static)
    dynamic = tuple(f for f in base if not f.static)
    return (*static, AvoidGpus(), *dynamic, SharedGpuMemory())


def default_filters() -> tuple[Filter, ...]:
    """Every filter, static ones first, in the order explain() attributes failures."""
    return (NodeReady(), NodeAffinity(), FlavorNodeLabels(), TaintToleration(), GpuModel(), FractionsAllowed(),
            TimeSliceLimit(), GpuMemory(), DraDevices(), Resources(), WholeGpus(), TimeSliceReplicas(), MigInstances(),
            Fraction())


DEFAULT_FILTERS = default_filters()


def unfit_reason(need: PodNeed, node: NodeState, filters: Sequence[Filter] = DEFAULT_FILTERS) -> str | None:
    """Why ``node`` cannot take the pod now (the first filter it fails), None when it can.

    The one node-fit check: the placement engine runs these filters (per equivalence class of nodes), and the
    first-fit placer and the simulator's stranded-capacity metric ask this function."""
    for f in filters:
        reason = f.check(need, node)
        if reason is not None:
            return reason
    return None


def pod_unfit_reason(pod: PodRequest, node: NodeState) -> str | None:
    """:func:`unfit_reason` for a pod request (compiled once, nothing cached)."""
    return unfit_reason(compile_need(pod), node)


def fit_count(need: PodNeed, node: NodeState) -> int:
    """How many more copies of the pod the node could take now (dynamic part only; static filters apart).

    Topology-aware placement sums it over a domain to compare free capacity, as Kueue TAS does.
    """
    alloc = node.allocatable
    used = node.used
    n = alloc.get(PODS, DEFAULT_MAX_PODS) - used.get(PODS, 0)
    for resource, amount in need.requests:
        n = min(n, (alloc.get(resource, 0) - used.get(resource, 0)) // amount)
    if n <= 0:
        return 0
    g = need.gpu
    if g.kind == "fraction":
        return min(n, sum(fraction_copies(gpu, g.milli, g.memory_mib) for gpu in node.gpus))
    wanted = demand_resource(g)
    if g.kind == "none" or wanted is None or g.count <= 0:
        return n
    kind = device_kind(node, wanted)
    if kind is None:
        return 0
    if kind == "replicas" and g.count > 1 and node.fail_requests_greater_than_one:
        return 0
    return min(n, free_device_count(node, g) // g.count)
