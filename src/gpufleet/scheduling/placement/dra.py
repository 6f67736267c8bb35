"""DRA devices in placement: a pod whose claims allow only some devices (PodRequest.dra_groups) gets devices from
one group of them, and a node without enough such devices free is filtered out.

A DRA device is the GPU or MIG instance of the cluster state its ResourceSlice publishes (GpuSlot.dra_* and
MigSlot.dra_device): whatever way a pod gets a device, the same slot is held, so a claimed GPU and a device-plugin
or fractional pod never collide.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import TypeVar

from gpufleet.api.dra_need import DeviceKey
from gpufleet.api.dra_objects import ResourceClaim
from gpufleet.cluster.devices import DeviceGrant, GpuSlot, InvariantError, MigSlot
from gpufleet.cluster.free_devices import demand_resource, free_mig_grants, free_whole
from gpufleet.cluster.state import ClusterState, NodeState
from gpufleet.scheduling.placement.need import PodNeed
from gpufleet.scheduling.types import PodRequest

T = TypeVar("T")


def slot_key(gpu: GpuSlot, mig: MigSlot | None = None) -> DeviceKey | None:
    """The DRA identity (driver, pool, device) of a whole GPU or of one of its MIG instances (None: not DRA)."""
    if gpu.dra_driver is None or gpu.dra_pool is None:
        return None
    name = gpu.dra_device if mig is None else mig.dra_device
    return None if name is None else (gpu.dra_driver, gpu.dra_pool, name)


def free_keyed(need: PodNeed, node: NodeState) -> list[tuple[DeviceGrant, DeviceKey]]:
    """The node's free devices of the pod's demand that DRA publishes, each with its DRA key, in the order
    placement would choose them (dynamic MIG partitions: those that can be carved together)."""
    g = need.gpu
    resource = demand_resource(g)
    if resource is None:
        return []
    gpus = {gpu.index: gpu for gpu in node.gpus}
    out: list[tuple[DeviceGrant, DeviceKey]] = []
    if g.kind == "mig":
        for grant in free_mig_grants(node, resource, g.memory_mib):
            gpu = gpus[grant.gpu]
            key = slot_key(gpu, gpu.partitions[grant.slot] if grant.kind == "partition" else gpu.mig[grant.slot])
            if key is not None:
                out.append((grant, key))
    elif g.kind == "gpu":
        for i in free_whole(node, resource):
            key = slot_key(gpus[i])
            if key is not None:
                out.append((DeviceGrant("whole", i), key))
    return out


def group_free(need: PodNeed, node: NodeState) -> list[tuple[DeviceGrant, DeviceKey]] | None:
    """The node's free devices of the first of the pod's groups that has enough of them, in placement's order
    (None: no group has)."""
    free = free_keyed(need, node)
    spread = need.dra_distinct
    for group in need.dra_groups:
        mine = [entry for entry in free if entry[1] in group]
        if spread is not None:
            # distinctAttribute: the first free device of each value (as many as there are values: the most
            # devices that can differ in it)
            seen: set[object] = set()
            mine = [e for e in mine if (v := spread.values.get(e[1])) is not None and v not in seen
                    and not seen.add(v)]  # type: ignore[func-returns-value]
        if len(mine) >= need.gpu.count:
            return mine
    return None


def keys_by_device_id(node: NodeState) -> dict[str, DeviceKey]:
    """The DRA identity of each device of the node DRA publishes, by its device ID (whole GPUs, MIG devices,
    dynamic MIG partitions)."""
    out: dict[str, DeviceKey] = {}
    for gpu in node.gpus:
        if (key := slot_key(gpu)) is not None:
            out[gpu.device_id] = key
        for mig in (*gpu.mig, *gpu.partitions):
            if (key := slot_key(gpu, mig)) is not None:
                out[mig.device_id] = key
    return out


def grant_resources(node: NodeState, grants: Sequence[DeviceGrant]) -> dict[str, int]:
    """The resources a DRA node counts ``grants`` under (what placement charges a claimed pod there)."""
    out: dict[str, int] = {}
    for g in grants:
        gpu = node.gpus[g.gpu]
        resource = (gpu.mig[g.slot].resource if g.kind == "mig" else gpu.partitions[g.slot].resource
                    if g.kind == "partition" else gpu.resource)
        out[resource] = out.get(resource, 0) + 1
    return out


def grants_of_keys(node: NodeState, keys: frozenset[DeviceKey]) -> list[DeviceGrant] | None:
    """The grants of the node's devices named by their DRA identity; None when one of them is not on the node."""
    grants: list[DeviceGrant] = []
    for gpu in node.gpus:
        if slot_key(gpu) in keys:
            grants.append(DeviceGrant("whole", gpu.index))
        for k, mig in enumerate(gpu.mig):
            if slot_key(gpu, mig) in keys:
                grants.append(DeviceGrant("mig", gpu.index, k))
        for k, part in enumerate(gpu.partitions):
            if slot_key(gpu, part) in keys:
                grants.append(DeviceGrant("partition", gpu.index, k))
    return grants if len(grants) == len(keys) else None


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
        out.append(replace(p, template=template, dra_groups=choice.groups, dra_distinct=choice.distinct))
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
    return [grant for grant, _ in free[: need.gpu.count]]


CLAIM_HOLD_PREFIX = "claim:"  # what holds the devices of an allocated claim no pod holds (cluster placements)


def device_nodes(cluster: ClusterState) -> dict[DeviceKey, str]:
    """The node of every device DRA publishes in the cluster, by its DRA identity."""
    return {key: ns.name for ns in cluster.nodes.values() for key in keys_by_device_id(ns).values()}


def hold_claims(cluster: ClusterState, claims: Iterable[ResourceClaim],
                where: dict[DeviceKey, str] | None = None) -> list[str]:
    """Charge the devices of allocated claims no pod holds to placeholders (``claim:<namespace>/<name>``), so
    that no pod is placed on them, nor carves a dynamic MIG device their counters need; the placeholders' keys.
    A claim whose devices are not all on one node of the cluster, or already held, is left out (a stale view).
    ``where``: :func:`device_nodes` of the cluster, when the caller has it already."""
    pending = [c for c in claims if c.allocation is not None]
    if not pending:
        return []
    if where is None:
        where = device_nodes(cluster)
    out: list[str] = []
    for claim in pending:
        assert claim.allocation is not None
        keys = frozenset((d.driver, d.pool, d.device) for d in claim.allocation.devices)
        nodes = {where.get(k) for k in keys}
        if len(nodes) != 1 or None in nodes:
            continue
        ns = cluster.nodes[nodes.pop() or ""]
        grants = grants_of_keys(ns, keys)
        if grants is None:
            continue
        try:
            cluster.allocate(CLAIM_HOLD_PREFIX + claim.key, ns.name, grant_resources(ns, grants), grants)
        except InvariantError:
            continue
        out.append(CLAIM_HOLD_PREFIX + claim.key)
    return out
