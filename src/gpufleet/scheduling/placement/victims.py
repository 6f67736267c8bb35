"""The one smallest-victim search every placer uses for preemption.

Greedy removal of the candidates, in the caller's preference order, until the pods fit; then fill-back: each removed
victim, last removed first, is put back when the pods still fit without removing it. The result is the victims
still needed, in candidate order; None when even removing every candidate is not enough. Everything happens under a
checkpoint of the cluster that is rolled back: the cluster is left unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpufleet.cluster.state import ClusterState, Placement


def smallest_victims(cluster: ClusterState, candidates: Sequence[str], fits: Callable[[], bool]) -> list[str] | None:
    """The victims among ``candidates`` (placed pod keys) whose removal lets the pods fit (``fits`` asks, on the
    cluster as it is at the time of the call, without changing it)."""
    outer = cluster.checkpoint()
    try:
        if fits():
            return []
        removed: list[Placement] = []
        for key in candidates:
            if key not in cluster.placements:
                continue
            removed.append(cluster.release(key))
            if fits():
                break
        else:
            return None
        needed: set[str] = set()
        for p in reversed(removed):
            cluster.allocate(p.pod, p.node, p.requests, p.grants)
            if not fits():
                cluster.release(p.pod)
                needed.add(p.pod)
        return [k for k in candidates if k in needed]
    finally:
        cluster.rollback(outer)
