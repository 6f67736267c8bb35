"""The devices a bound pod holds, as recorded on it, turned into grants on its node.

gpufleet records every pod it binds: ``gpufleet.io/node`` and ``gpufleet.io/devices`` (a JSON list of device IDs:
GPU UUIDs, ``UUID::i`` replicas, MIG UUIDs), written with the Binding (gpufleet.k8s.annotations). Whoever
rebuilds a cluster's state from its pods (the live scheduler every cycle, ``gpufleet plan`` on a snapshot)
charges such a pod exactly those devices, so a running pod is never moved in the model; a pod without a
record for its node (another scheduler's) gets the first free devices of the right kind, which keeps every
count exact.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from gpufleet.api.limits import MAX_ANNOTATION_BYTES
from gpufleet.api.objects import DEVICES_ANNOTATION, NODE_ANNOTATION, GpuDemand
from gpufleet.cluster.devices import DeviceGrant, fraction_need
from gpufleet.cluster.state import NodeState


def read_device_ids(annotations: Mapping[str, str]) -> tuple[str, ...] | None:
    """The device IDs of ``gpufleet.io/devices`` (a JSON list of strings); None when absent or malformed."""
    raw = annotations.get(DEVICES_ANNOTATION)
    if not isinstance(raw, str) or len(raw) > MAX_ANNOTATION_BYTES:
        return None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: a user-written "[[[[..." thousands deep
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    return tuple(value)


def recorded_grants(node: NodeState, demand: GpuDemand, annotations: Mapping[str, str]) -> list[DeviceGrant] | None:
    """The grants a pod bound to ``node`` records for itself there; None without a valid record for this node."""
    if annotations.get(NODE_ANNOTATION) != node.name:
        return None
    ids = read_device_ids(annotations)
    return grants_from_ids(node, demand, ids) if ids is not None else None


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
        for slot, part in enumerate(gpu.partitions):  # a MIG device carved from a dynamic MIG GPU
            if part.device_id == device_id:
                return DeviceGrant("partition", gpu.index, slot)
    return None
