"""Which free devices of a node can hold a pod's GPU demand now: the one answer every caller shares.

The placement filters count these devices, the placement engine chooses among them, and the first-fit search
(:func:`first_free_grants`: the live driver's accounting of pods placed by others, the reference placer, the
simulator's test double) takes the first ones, so a node that passes the filters always has the devices a
placer then grants.

* ``nvidia.com/gpu`` and ``nvidia.com/gpu.shared`` are offered the way the node's device plugin offers that
  resource (:func:`device_kind`): whole GPUs (free, healthy, advertised under it), time-slice replicas, or MIG
  instances (the single strategy advertises them as ``nvidia.com/gpu``);
* a MIG resource (``nvidia.com/mig-3g.40gb``) takes free instances advertised under that name, with at least
  the memory the pod declares, and on a dynamic MIG GPU (DRA's partitionable devices) the MIG devices of that
  profile that can be carved together within its counters (:func:`free_partitions`);
* a fraction takes room on one whole-mode GPU (not one DRA publishes, which only claims hand out): its thousandths
  and its memory (:func:`fraction_room`), on a node open to fractions (:func:`fractions_closed`: the node label
  ``gpufleet.io/gpu-fractions: "false"`` closes it).
  The label is a rule for new placements, checked by the fit check (the placement filters); the device answers
  here ignore it, so fractional pods already running on a node closed since are still accounted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

from gpufleet.api.objects import GPU_FRACTIONS_LABEL, GpuDemand
from gpufleet.cluster.devices import DeviceGrant, GpuSlot, fraction_need
from gpufleet.gpu.constants import GPU, MILLI, SHARED_GPU

if TYPE_CHECKING:
    from gpufleet.cluster.state import NodeState

DeviceKind = Literal["whole", "replicas", "mig"]


def fractions_closed(labels: Mapping[str, str]) -> bool:
    """A node with these labels refuses new fractional pods: its label ``gpufleet.io/gpu-fractions`` is exactly
    ``"false"``. Absent, ``"true"`` or any other value (which ``gpufleet validate`` warns about) leaves it open."""
    return labels.get(GPU_FRACTIONS_LABEL) == "false"


def demand_resource(demand: GpuDemand) -> str | None:
    """The resource a device demand is advertised under (defaulted from its kind and profile when unset)."""
    if demand.resource is not None or demand.kind in ("none", "fraction"):
        return demand.resource
    if demand.kind == "mig":
        return f"nvidia.com/mig-{demand.mig_profile}" if demand.mig_profile else None
    return GPU if demand.kind == "gpu" else SHARED_GPU


def device_kind(node: NodeState, resource: str) -> DeviceKind | None:
    """How the node offers ``resource``: "whole", "replicas" or "mig" devices (None: not at all)."""
    for g in node.gpus:
        if g.mode == "mig":
            if any(s.resource == resource for s in g.mig):
                return "mig"
        elif g.resource == resource:
            return g.mode
        elif any(p.resource == resource for p in g.partitions):
            return "mig"
    return None


def free_whole(node: NodeState, resource: str) -> list[int]:
    """Indices of the free, healthy whole-mode GPUs advertised under ``resource`` (a GPU holding fractions is
    not free)."""
    return [g.index for g in node.gpus if g.mode == "whole" and g.resource == resource and g.healthy and g.is_free]


def replica_gpus(node: NodeState, resource: str) -> list[GpuSlot]:
    """The healthy time-sliced GPUs advertised under ``resource`` (each with its free replicas)."""
    return [g for g in node.gpus if g.mode == "replicas" and g.resource == resource and g.healthy]


def free_replica_count(node: NodeState, resource: str) -> int:
    return sum(len(g.free_replicas()) for g in replica_gpus(node, resource))


def free_mig(node: NodeState, resource: str, memory_mib: int | None) -> list[tuple[int, int]]:
    """(GPU index, instance index) of the free MIG instances advertised under ``resource`` with at least
    ``memory_mib``, lowest GPU then instance first."""
    want = memory_mib or 0
    return [(g.index, k) for g in node.gpus if g.mode == "mig" and g.healthy
            for k, s in enumerate(g.mig) if s.holder is None and s.resource == resource and s.memory_mib >= want]


def free_partitions(node: NodeState, resource: str, memory_mib: int | None) -> list[tuple[int, int]]:
    """(GPU index, partition index) of the dynamic MIG devices advertised under ``resource`` with at least
    ``memory_mib`` that can be carved *together*, carved GPUs first: on each GPU, in placement order, each taken
    while the counters still allow it beside those before it (partitions of one profile overlap; one pass in start
    order finds as many as fit, since a profile's placements are aligned to its size)."""
    want = memory_mib or 0
    out: list[tuple[int, int]] = []
    # GPUs already carved first: a whole GPU is kept whole while another can still be carved
    for g in sorted(node.gpus, key=lambda g: (not g.carved, g.index)):
        if not g.partitions or g.holder is not None or not g.healthy:
            continue
        used = g.counters_used()
        for k, p in enumerate(g.partitions):
            if p.holder is None and p.resource == resource and p.memory_mib >= want and g.counters_allow(p.consumes,
                                                                                                          used):
                out.append((g.index, k))
                for name, amount in p.consumes.items():
                    used[name] = used.get(name, 0) + amount
    return out


def free_mig_grants(node: NodeState, resource: str, memory_mib: int | None) -> list[DeviceGrant]:
    """The grants of :func:`free_mig` then of :func:`free_partitions`: every MIG device of ``resource`` that can be
    had together now, in the order placement takes them."""
    return [DeviceGrant("mig", i, k) for i, k in free_mig(node, resource, memory_mib)] + [
        DeviceGrant("partition", i, k) for i, k in free_partitions(node, resource, memory_mib)]


def fraction_room(gpu: GpuSlot, milli: int, memory_mib: int | None) -> tuple[int, int] | None:
    """The (thousandths, MiB) ``gpu`` would grant a fractional pod now (:func:`fraction_need`), or None: not a
    whole-mode GPU, held whole, unhealthy, or without room for the share or for the memory."""
    # A GPU published through DRA is handed out by claims alone: a fraction is the device plugin's way of sharing
    # (KAI's and HAMi's shares ride on nvidia.com/gpu), which a DRA node does not run.
    if gpu.mode != "whole" or gpu.holder is not None or not gpu.healthy or gpu.dra_driver is not None:
        return None
    share, memory = fraction_need(milli, memory_mib, gpu.memory_mib)
    if gpu.used_milli + share > MILLI or gpu.used_memory_mib + memory > gpu.memory_mib:
        return None
    return share, memory


def fraction_copies(gpu: GpuSlot, milli: int, memory_mib: int | None) -> int:
    """How many such fractional pods ``gpu`` could still take."""
    room = fraction_room(gpu, milli, memory_mib)
    if room is None:
        return 0
    share, memory = room
    by_milli = (MILLI - gpu.used_milli) // share if share else MILLI
    by_memory = (gpu.memory_mib - gpu.used_memory_mib) // memory if memory else by_milli
    return min(by_milli, by_memory)


def fraction_options(node: NodeState, demand: GpuDemand) -> list[tuple[GpuSlot, int, int]]:
    """(GPU, thousandths, MiB) for every GPU of the node that can take the fraction now, in GPU order."""
    out = []
    for g in node.gpus:
        room = fraction_room(g, demand.milli, demand.memory_mib)
        if room is not None:
            out.append((g, *room))
    return out


def free_device_count(node: NodeState, demand: GpuDemand) -> int:
    """How many devices of the kind ``demand`` asks for are free on the node (for a fraction: GPUs with room)."""
    if demand.kind == "none":
        return 0
    if demand.kind == "fraction":
        return len(fraction_options(node, demand))
    resource = demand_resource(demand)
    if resource is None:
        return 0
    kind = "mig" if demand.kind == "mig" else device_kind(node, resource)
    if kind == "whole":
        return len(free_whole(node, resource))
    if kind == "replicas":
        return free_replica_count(node, resource)
    if kind == "mig":
        return len(free_mig_grants(node, resource, demand.memory_mib))
    return 0


def first_free_grants(node: NodeState, demand: GpuDemand) -> list[DeviceGrant] | None:
    """The first free devices of ``node``, in GPU order, that can hold ``demand``: [] for a pod without GPUs,
    None when they are not there. No scoring: callers that need a choice use the placement engine; this serves
    the accounting of pods placed by others and simple reference placers."""
    if demand.kind == "none":
        return []
    if demand.kind == "fraction":
        options = fraction_options(node, demand)
        if not options:
            return None
        g, share, memory = options[0]
        return [DeviceGrant("fraction", g.index, milli=share, memory_mib=memory)]
    resource = demand_resource(demand)
    if resource is None:
        return None
    kind = "mig" if demand.kind == "mig" else device_kind(node, resource)
    grants: list[DeviceGrant]
    if kind == "whole":
        grants = [DeviceGrant("whole", i) for i in free_whole(node, resource)]
    elif kind == "replicas":
        grants = [DeviceGrant("replica", g.index, slot) for g in replica_gpus(node, resource)
                  for slot in g.free_replicas()]
    elif kind == "mig":
        grants = free_mig_grants(node, resource, demand.memory_mib)
    else:
        return None
    return grants[: demand.count] if len(grants) >= demand.count else None
