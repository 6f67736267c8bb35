"""Which devices of the chosen node a pod gets, as DeviceGrants (ClusterState turns them into device IDs).

* whole GPUs: the free set maximising the summed NVLink pair score (100 × links per pair), as NVIDIA's
  go-gpuallocator BestEffortPolicy does; ties go to the lowest indices. ``lowest`` (kube-default) skips the
  topology and takes the lowest free indices, as a plain device plugin without GetPreferredAllocation;
* time-slice replicas: the device plugin's ``distributed`` policy: each replica from the GPU holding the
  fewest (counting those picked this round), ties to the lowest index;
* MIG: free instances of the resource, lowest GPU then slot first;
* fractions: the GPU is chosen by the profile (the paper's scorer, tightest fit, loosest fit or lowest).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations
from typing import Literal

from gpufleet.cluster.devices import DeviceGrant, GpuSlot
from gpufleet.cluster.free_devices import (
    demand_resource,
    device_kind,
    fraction_options,
    free_mig_grants,
    free_whole,
    replica_gpus,
)
from gpufleet.cluster.state import NodeState
from gpufleet.scheduling.placement.dra import group_free
from gpufleet.scheduling.placement.filters import allowed_gpus, replica_room
from gpufleet.scheduling.placement.need import PodNeed
from gpufleet.scheduling.placement.nodeview import NodeView, gpu_free_milli

WholePolicy = Literal["nvlink", "lowest"]
FractionPolicy = Literal["scorer", "best_fit", "worst_fit", "lowest"]
NVLINK_PAIR_SCORE = 100
_EXHAUSTIVE_LIMIT = 5000  # combinations searched exhaustively; larger boards fall back to a greedy build


class NoDevice(RuntimeError):
    """The node passed the filters but has no devices for the pod (a filter/assignment mismatch: a bug)."""


def pair_score(nvlinks: dict[tuple[int, int], int], a: int, b: int) -> int:
    links = nvlinks.get((a, b) if a < b else (b, a), 0)
    return NVLINK_PAIR_SCORE * links


def set_score(nvlinks: dict[tuple[int, int], int], gpus: tuple[int, ...]) -> int:
    return sum(pair_score(nvlinks, a, b) for a, b in combinations(gpus, 2))


def _comb(n: int, k: int) -> int:
    out = 1
    for i in range(k):
        out = out * (n - i) // (i + 1)
    return out


def best_nvlink_set(free: list[int], count: int, nvlinks: dict[tuple[int, int], int]) -> tuple[int, ...]:
    """The ``count`` GPUs of ``free`` (ascending) with the largest summed pair score; lowest indices on ties."""
    if count > len(free):
        raise NoDevice(f"{count} GPUs asked, {len(free)} free")
    if count == len(free) or count <= 1 or not nvlinks:
        return tuple(free[:count])
    if _comb(len(free), count) <= _EXHAUSTIVE_LIMIT:
        best: tuple[int, ...] = ()
        best_score = -1
        for combo in combinations(free, count):  # lexicographic order: the first maximum has lowest indices
            s = set_score(nvlinks, combo)
            if s > best_score:
                best, best_score = combo, s
        return best
    # Greedy: the best pair, then each time the GPU adding the most links.
    pair = max(combinations(free, 2), key=lambda p: (pair_score(nvlinks, *p), -p[0], -p[1]))
    chosen = list(pair)
    while len(chosen) < count:
        rest = [g for g in free if g not in chosen]
        nxt = max(rest, key=lambda g: (sum(pair_score(nvlinks, g, c) for c in chosen), -g))
        chosen.append(nxt)
    return tuple(sorted(chosen))


def _whole(need: PodNeed, node: NodeState, resource: str, policy: WholePolicy) -> list[DeviceGrant]:
    ok = allowed_gpus(need, node)
    free = [i for i in free_whole(node, resource) if ok(i)]
    if need.dra_groups:
        free = [g.gpu for g, _ in group_free(need, node) or () if ok(g.gpu)]
    count = need.gpu.count
    if len(free) < count:
        raise NoDevice(f"{node.name}: {count} whole GPUs asked, {len(free)} free")
    chosen = best_nvlink_set(free, count, node.nvlinks) if policy == "nvlink" else tuple(free[:count])
    return [DeviceGrant("whole", i) for i in chosen]


def _replicas(need: PodNeed, node: NodeState, resource: str, memory_aware: bool) -> list[DeviceGrant]:
    """The device plugin's ``distributed`` choice; ``memory_aware``: first the GPU with the most memory left by
    what its holders are known to use, among those the pod's known memory fits (SharedGpuMemory)."""
    ok = allowed_gpus(need, node)
    gpus = [g for g in replica_gpus(node, resource) if ok(g.index)]
    held = {g.index: g.replicas - len(g.free_replicas()) for g in gpus}
    free = {g.index: g.free_replicas() for g in gpus}
    room = {g.index: replica_room(need, g) for g in gpus} if memory_aware else {}
    picked: dict[int, int] = {}
    grants = []
    for _ in range(need.gpu.count):
        options = [g.index for g in gpus if free[g.index] and (not memory_aware or room[g.index] is not None)]
        if not options:
            raise NoDevice(f"{node.name}: no free replica of {resource}")
        best = min(options, key=lambda i: (-(room.get(i) or 0) if memory_aware else 0,
                                           held[i] + picked.get(i, 0), picked.get(i, 0), i))
        slot = free[best].pop(0)
        picked[best] = picked.get(best, 0) + 1
        grants.append(DeviceGrant("replica", best, slot, memory_mib=max(need.memory_hint, 0)))
    return grants


def _mig(need: PodNeed, node: NodeState, resource: str) -> list[DeviceGrant]:
    ok = allowed_gpus(need, node)
    grants = [g for g in free_mig_grants(node, resource, need.gpu.memory_mib) if ok(g.gpu)]
    if need.dra_groups:
        grants = [g for g, _ in group_free(need, node) or () if g.kind != "whole" and ok(g.gpu)]
    if len(grants) < need.gpu.count:
        raise NoDevice(f"{node.name}: {need.gpu.count} instances of {resource} asked, {len(grants)} free")
    return grants[: need.gpu.count]


def _fraction(need: PodNeed, view: NodeView, policy: FractionPolicy,
              scorer_choice: Callable[[PodNeed, NodeView], int] | None) -> list[DeviceGrant]:
    node = view.node
    ok = allowed_gpus(need, node)
    options: list[tuple[GpuSlot, int, int]] = [o for o in fraction_options(node, need.gpu) if ok(o[0].index)]
    if not options:
        raise NoDevice(f"{node.name}: no GPU with room for the fraction")
    if policy == "scorer" and scorer_choice is not None:
        gpu = view.whole[scorer_choice(need, view)]
        # The paper's scorers see thousandths only; if memory rules their GPU out, fall back to best fit.
        for g, share, memory in options:
            if g is gpu:
                return [DeviceGrant("fraction", g.index, milli=share, memory_mib=memory)]
        policy = "best_fit"
    if policy == "best_fit":
        g, share, memory = min(options, key=lambda o: (gpu_free_milli(o[0]) - o[1], o[0].index))
    elif policy == "worst_fit":
        g, share, memory = min(options, key=lambda o: (-(gpu_free_milli(o[0]) - o[1]), o[0].index))
    else:
        g, share, memory = options[0]
    return [DeviceGrant("fraction", g.index, milli=share, memory_mib=memory)]


def assign_devices(need: PodNeed, view: NodeView, whole: WholePolicy, fractions: FractionPolicy,
                   scorer_choice: Callable[[PodNeed, NodeView], int] | None = None, *,
                   memory_aware: bool = False) -> list[DeviceGrant]:
    g = need.gpu
    if g.kind == "none":
        return []
    if g.kind == "fraction":
        return _fraction(need, view, fractions, scorer_choice)
    node = view.node
    resource = demand_resource(g) or ""
    kind = device_kind(node, resource)
    if kind == "whole":
        return _whole(need, node, resource, whole)
    if kind == "replicas":
        return _replicas(need, node, resource, memory_aware)
    if kind == "mig":
        return _mig(need, node, resource)
    raise NoDevice(f"{node.name} offers no {resource}")
