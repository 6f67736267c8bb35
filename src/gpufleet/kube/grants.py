"""Device grants of pods that already run: read back from our annotation, or chosen first-fit.

A bound pod holds devices whether or not gpufleet placed it. For pods we bound, ``gpufleet.io/devices``
names them exactly (what the core chose). For pods another scheduler bound (kube-scheduler plus the NVIDIA
device plugin), nobody outside the kubelet knows which GPU they got, so the count is what matters: the
first free devices of the right kind are charged, which keeps every count on the node exact.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.api.objects import GpuDemand
from gpufleet.cluster.devices import DeviceGrant, fraction_need
from gpufleet.cluster.state import NodeState

_UUID_PREFIXES = ("GPU-", "MIG-")


def grants_from_ids(node: NodeState, demand: GpuDemand, ids: Sequence[str]) -> list[DeviceGrant] | None:
    """The grants naming exactly ``ids`` on ``node`` for a pod with ``demand``; None if an ID is unknown
    there or does not suit the demand (the caller then falls back to
    :func:`gpufleet.cluster.state.first_free_grants`)."""
    if demand.kind == "none":
        return [] if not ids else None
    out: list[DeviceGrant] = []
    for device_id in ids:
        grant = _grant_for(node, demand, device_id)
        if grant is None:
            return None
        out.append(grant)
    return out


def _grant_for(node: NodeState, demand: GpuDemand, device_id: str) -> DeviceGrant | None:
    for gpu in node.gpus:
        if demand.kind == "fraction":
            if gpu.mode == "whole" and gpu.device_id == device_id:
                milli, memory = fraction_need(demand.milli, demand.memory_mib, gpu.memory_mib)
                return DeviceGrant("fraction", gpu.index, milli=milli, memory_mib=memory)
            continue
        if gpu.mode == "whole" and gpu.device_id == device_id:
            return DeviceGrant("whole", gpu.index)
        if gpu.mode == "replicas":
            for slot in range(gpu.replicas):
                if gpu.replica_id(slot) == device_id:
                    return DeviceGrant("replica", gpu.index, slot)
        if gpu.mode == "mig":
            for slot, mig in enumerate(gpu.mig):
                if mig.device_id == device_id:
                    return DeviceGrant("mig", gpu.index, slot)
    return None


def visible_devices(node: NodeState, grants: Sequence[DeviceGrant]) -> str | None:
    """What NVIDIA_VISIBLE_DEVICES must say for a fractional pod: the GPU's UUID when the node publishes its
    inventory, else the GPU's index (NVML's enumeration order, which a node without inventory is assumed to
    follow)."""
    indices = [g.gpu for g in grants if g.kind == "fraction"]
    if not indices:
        return None
    gpu = node.gpus[indices[0]]
    return gpu.device_id if gpu.device_id.startswith(_UUID_PREFIXES) else str(gpu.index)
