"""Which claim and request each device a pod was placed on belongs to: the allocation results of its claims."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gpufleet.api.dra_need import ClaimResult, DeviceKey, DraChoice, DraNeed
from gpufleet.cluster.state import ClusterState
from gpufleet.scheduling.placement.dra import keys_by_device_id


def device_keys(cluster: ClusterState, node: str, device_ids: Iterable[str]) -> list[DeviceKey]:
    """The DRA identities of the devices (cluster device IDs) a pod holds on ``node``, in their order; devices DRA
    does not publish are left out."""
    state = cluster.nodes.get(node)
    if state is None:
        return []
    by_id = keys_by_device_id(state)
    return [by_id[d] for d in device_ids if d in by_id]


PlacedKind = tuple[str, str | None]  # ("whole", None) or ("mig", profile)


def placed_kind(cluster: ClusterState, node: str, device_ids: Iterable[str]) -> PlacedKind | None:
    """What the pod's devices on ``node`` are: whole GPUs, or MIG instances of one profile (None: neither, or a
    mix)."""
    state = cluster.nodes.get(node)
    if state is None:
        return None
    kinds: set[PlacedKind] = set()
    wanted = set(device_ids)
    for gpu in state.gpus:
        if gpu.device_id in wanted:
            kinds.add(("whole", None))
        kinds.update(("mig", m.placement.profile) for m in (*gpu.mig, *gpu.partitions) if m.device_id in wanted)
    return next(iter(kinds)) if len(kinds) == 1 else None


def _matches_kind(choice: DraChoice, kind: PlacedKind | None) -> bool:
    demand = choice.demand
    if kind is None:
        return True
    if demand.kind == "gpu":
        return kind == ("whole", None)
    return demand.kind == "mig" and kind == ("mig", demand.mig_profile)


def _chosen(need: DraNeed, keys: Sequence[DeviceKey], kind: PlacedKind | None) -> DraChoice | None:
    held = set(keys)
    for choice in need.choices:
        if sum(r.count for r in choice.requests) == len(keys) and _matches_kind(choice, kind) and (
                not choice.groups or any(held <= g for g in choice.groups)):
            return choice
    return None


def claim_results(need: DraNeed, keys: Sequence[DeviceKey], kind: PlacedKind | None = None) -> list[ClaimResult]:
    """The devices handed to the requests of the choice they meet (of their kind: ``kind``, from
    :func:`placed_kind`), in request order; empty when they meet none (the pod was not placed through its
    claims)."""
    choice = _chosen(need, keys, kind)
    if choice is None:
        return []
    out: list[ClaimResult] = []
    remaining = iter(keys)
    for r in choice.requests:
        for _ in range(r.count):
            driver, pool, device = next(remaining)
            out.append(ClaimResult(r.claim, r.request, driver, pool, device))
    return out


def pod_needs(pods: Iterable[tuple[str, DraNeed | None]]) -> dict[str, DraNeed]:
    """The resolved claims of the pods that have some, by pod key."""
    return {key: need for key, need in pods if need is not None}


def assignment_claims(needs: dict[str, DraNeed], cluster: ClusterState | None, pod: str, node: str | None,
                      devices: Sequence[str]) -> list[ClaimResult]:
    """The allocation results of a pod placed on ``node`` with ``devices`` (empty without claims)."""
    need = needs.get(pod)
    if need is None or cluster is None or node is None:
        return []
    return claim_results(need, device_keys(cluster, node, devices), placed_kind(cluster, node, devices))
