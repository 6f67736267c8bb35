"""DRA devices in placement: a pod whose claims allow only some devices (PodRequest.dra_groups) gets devices from
one group of them, and a node without enough such devices free is filtered out.

A DRA device is the GPU or MIG instance of the cluster state its ResourceSlice publishes (GpuSlot.dra_* and
MigSlot.dra_device): whatever way a pod gets a device, the same slot is held, so a claimed GPU and a device-plugin
or fractional pod never collide.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TypeVar

from gpufleet.api.dra_need import DeviceKey
from gpufleet.cluster.devices import DeviceGrant, GpuSlot, MigSlot
from gpufleet.cluster.free_devices import demand_resource, free_mig, free_whole
from gpufleet.cluster.state import NodeState
from gpufleet.scheduling.placement.need import PodNeed
from gpufleet.scheduling.types import PodRequest

T = TypeVar("T")


def slot_key(gpu: GpuSlot, mig: MigSlot | None = None) -> DeviceKey | None:
    """The DRA identity (driver, pool, device) of a whole GPU or of one of its MIG instances (None: not DRA)."""
    if gpu.dra_driver is None or gpu.dra_pool is None:
        return None
    name = gpu.dra_device if mig is None else mig.dra_device
    return None if name is None else (gpu.dra_driver, gpu.dra_pool, name)


def free_keyed(need: PodNeed, node: NodeState) -> list[tuple[int, int | None, DeviceKey]]:
    """The node's free devices of the pod's demand that DRA publishes: (GPU index, MIG instance index or None,
    DRA key), in the order placement would choose them."""
    g = need.gpu
    resource = demand_resource(g)
    if resource is None:
        return []
    gpus = {gpu.index: gpu for gpu in node.gpus}
    out: list[tuple[int, int | None, DeviceKey]] = []
    if g.kind == "mig":
        for i, k in free_mig(node, resource, g.memory_mib):
            key = slot_key(gpus[i], gpus[i].mig[k])
            if key is not None:
                out.append((i, k, key))
    elif g.kind == "gpu":
        for i in free_whole(node, resource):
            key = slot_key(gpus[i])
            if key is not None:
                out.append((i, None, key))
    return out


def group_free(need: PodNeed, node: NodeState) -> list[tuple[int, int | None, DeviceKey]] | None:
    """The node's free devices of the first of the pod's groups that has enough of them, in placement's order
    (None: no group has)."""
    free = free_keyed(need, node)
    for group in need.dra_groups:
        mine = [entry for entry in free if entry[2] in group]
        if len(mine) >= need.gpu.count:
            return mine
    return None


class DraDevices:
    """A pod with DRA claims fits a node only with enough free devices its claims select, from one group (a
    ``matchAttribute`` constraint's). Evaluated node by node (such a pod's need is per node), so it may read
    what is free."""

    name = "DraDevices"
    static = True

    def check(self, need: PodNeed, node: NodeState) -> str | None:
        if need.gpu.kind == "none":
            return None
        if node.gpus and need.gpu.kind != "fraction":
            # A node offers its GPUs one way: DRA (claims) or the device plugin (resources), never both.
            through_dra = any(g.dra_driver is not None for g in node.gpus)
            if through_dra and not need.dra:
                return "node(s) offer GPUs through DRA claims only"
            if need.dra and not through_dra:
                return "node(s) offer GPUs through the device plugin only"
        if not need.dra_groups or group_free(need, node) is not None:
            return None
        return "node(s) had too few free devices that the pod's DRA claims select"


# ---- the pod's choices (firstAvailable), tried in the user's order ---------------------------------------------

def dra_problem(pods: Sequence[PodRequest]) -> str | None:
    """Why a pod's claims cannot be placed at all (the first pod's reason), None when every pod's can."""
    for p in pods:
        need = p.template.dra
        if need is not None and need.problem is not None:
            return f"pod {p.key}: {need.problem}"
    return None


def with_choice(pods: Sequence[PodRequest], index: int) -> list[PodRequest] | None:
    """The pods with choice ``index`` of their claims applied (GPU demand and allowed devices); a pod with fewer
    choices keeps its last; None when no pod has that many (every choice was tried)."""
    out: list[PodRequest] = []
    used = False
    for p in pods:
        need = p.template.dra
        if need is None or not need.choices:
            out.append(p)
            continue
        used = used or index < len(need.choices)
        choice = need.choices[min(index, len(need.choices) - 1)]
        template = replace(p.template, gpu=choice.demand, dra=None if choice.plugin else need)
        if choice.drop_requests:
            template.requests = {k: v for k, v in template.requests.items() if k not in choice.drop_requests}
        out.append(replace(p, template=template, dra_groups=choice.groups))
    return out if used or index == 0 else None


def over_choices(pods: Sequence[PodRequest], attempt: Callable[[list[PodRequest]], T | None]) -> T | None:
    """``attempt`` on the pods with their first choice, then the next, until one gives a result: an earlier
    ``firstAvailable`` entry that fits anywhere wins over a later one, whatever the scorers prefer."""
    if dra_problem(pods) is not None:
        return None
    index = 0
    while (variant := with_choice(pods, index)) is not None:
        got = attempt(variant)
        if got is not None:
            return got
        index += 1
    return None


def first_dra_grants(need: PodNeed, node: NodeState) -> list[DeviceGrant] | None:
    """The node's first free devices the pod's claims allow, from its first group with enough (None: none)."""
    free = group_free(need, node)
    if free is None:
        return None
    return [DeviceGrant("whole", i) if k is None else DeviceGrant("mig", i, k) for i, k, _ in free[: need.gpu.count]]
