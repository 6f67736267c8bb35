"""What the node agent saw running pods use of their GPUs, told to the policy's memory book.

The node agent writes ``gpufleet.io/gpu-memory-used`` on a pod that holds a GPU device alone
(:mod:`gpufleet.node.memory_report`); the parse reads it into ``Pod.gpu_memory_used_mib``. A full cycle tells a
fresh policy every such pod holding a node; a cycle that carries on tells the kept policy the pods whose
observation changed since (``Carried.observed``). The policy's rule is the core's, the simulator's too
(:class:`gpufleet.scheduling.memory.MemoryBook`): the observation replaces the pod's expected memory on the
time-sliced GPUs it holds, and feeds its workload class's figures, which become the hint of the class's pods that
declare no memory.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.live.world import World
from gpufleet.scheduling.kueue import KueuePolicy


def tell(world: World, policy: KueuePolicy, now: float, only: Iterable[str] | None = None) -> int:
    """Tell ``policy`` the observations of ``world``'s pods holding a node (``only``: of those pods); how many."""
    told = 0
    entries = world.pods.values() if only is None else [world.pods.get(k) for k in only]
    for entry in entries:
        if entry is None or entry.pod is None or entry.pod.gpu_memory_used_mib is None or entry.node is None \
                or entry.terminal:
            continue
        key, mib = entry.key, entry.pod.gpu_memory_used_mib
        # No more than the largest GPU it holds: the annotation is a pod's, and a value past any device is no
        # reading (a pod holding no GPU has none to tell).
        placement = world.cluster.placements.get(key)
        node = world.cluster.nodes.get(placement.node) if placement is not None else None
        sizes = [node.gpus[g.gpu].memory_mib for g in placement.grants if g.gpu < len(node.gpus)] \
            if placement is not None and node is not None else []
        if not sizes:
            continue
        mib = min(mib, max(sizes))
        workload = world.workload_of.get(key)
        if workload is not None:
            policy.observe_memory(workload, key, mib, now)
        elif policy.cluster is not None:
            # Another scheduler's pod sharing a GPU: what it uses is room its co-tenants do not have; it belongs
            # to no workload class of ours.
            policy.cluster.observe_memory(key, mib)
        told += 1
    return told
