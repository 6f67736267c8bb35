"""Topology-aware gang placement (Kueue TAS semantics) over a Topology's levels, broadest first.

* required level L: every pod inside ONE domain of L, never outside. Among the domains that can hold the
  gang, best fit: the least free capacity that still fits (as Kueue TAS and KAI bin-pack domains), ties by
  domain name. Inside it the gang is kept as compact as the lower levels allow (``preferred`` below).
* preferred level L: the smallest domain that holds the gang whole, searched from the narrowest level up to
  L, best fit at each level; if none, the fewest domains of L (largest free capacity first); what is left
  goes wherever it fits in scope.

Capacity of a domain = how many copies of each of the gang's pod shapes its nodes can take (per node:
``filters.fit_count`` after the static filters), the quantity Kueue TAS sums bottom-up. It is necessary for
a fit; placement then really allocates under a checkpoint and rolls back if a mixed gang still fails.
A cheapest-tier profile orders domains by the cheapest model they offer first, so the tier rule holds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Sequence
from typing import Any, Protocol

from gpufleet.cluster.state import ClusterState, NodeState, Placement
from gpufleet.scheduling.placement.need import PodNeed
from gpufleet.scheduling.placement.scorers import UNRANKED

Path = tuple[str, ...]


class GangOps(Protocol):
    cluster: ClusterState

    def place_all(self, needs: Sequence[PodNeed], allowed: Collection[str] | None) -> list[Placement] | None:
        """Allocate every pod within ``allowed`` (no checkpoint of its own) or return None."""
        ...

    def place_one(self, need: PodNeed, allowed: Collection[str] | None) -> Placement | None:
        ...

    def capacity(self, need: PodNeed, node: NodeState) -> int:
        """Copies of the pod the node can take now (0 when a static filter fails)."""
        ...

    def tier(self, need: PodNeed, node: NodeState) -> int:
        """The profile's tier key for the pod on the node (0 without a tier); higher is better."""
        ...


def domains(nodes: Sequence[NodeState], levels: Sequence[str], depth: int) -> dict[Path, list[NodeState]]:
    """Nodes grouped by their label path down to ``levels[depth]``; nodes lacking a label are left out."""
    out: dict[Path, list[NodeState]] = {}
    wanted = levels[: depth + 1]
    for n in nodes:
        labels = n.labels
        if all(level in labels for level in wanted):
            out.setdefault(tuple(labels[level] for level in wanted), []).append(n)
    return out


def _names(nodes: Sequence[NodeState]) -> frozenset[str]:
    return frozenset(n.name for n in nodes)


def _fitting(ops: GangOps, needs: Sequence[PodNeed], groups: dict[Path, list[NodeState]]
             ) -> list[tuple[Any, ...]]:
    """Domains that can hold the whole gang, best fit first: (−tier, capacity, path, nodes)."""
    count = Counter(n.shape_key for n in needs)
    rep = {n.shape_key: n for n in needs}
    out = []
    for path, nodes in groups.items():
        caps: dict[Any, int] = {}
        best_tier: int | None = None
        for shape, need in rep.items():
            total = 0
            for node in nodes:
                c = ops.capacity(need, node)
                if c:
                    total += c
                    t = ops.tier(need, node)
                    best_tier = t if best_tier is None or t > best_tier else best_tier
            caps[shape] = total
        if all(caps[s] >= k for s, k in count.items()):
            out.append((best_tier or 0, sum(caps.values()), path, nodes))
    # A domain whose only models have no price ranks with the cheapest priced domain (scorers.UNRANKED).
    ranked = [d[0] for d in out if d[0] != UNRANKED]
    top = max(ranked, default=0)
    ordered = [(-(top if t == UNRANKED else t), cap, path, nodes) for t, cap, path, nodes in out]
    ordered.sort(key=lambda d: d[:3])
    return ordered


def _capacity(ops: GangOps, needs: Sequence[PodNeed], nodes: Sequence[NodeState]) -> int:
    rep = {n.shape_key: n for n in needs}
    return sum(ops.capacity(need, node) for need in rep.values() for node in nodes)


def place_required(ops: GangOps, needs: Sequence[PodNeed], levels: Sequence[str], depth: int,
                   scope: Sequence[NodeState]) -> list[Placement] | None:
    def attempt(nodes: Sequence[NodeState]) -> list[Placement] | None:
        if depth + 1 < len(levels):
            return place_preferred(ops, needs, levels, depth + 1, nodes, spill=_names(nodes))
        return ops.place_all(needs, _names(nodes))

    return _first_domain(ops, needs, domains(scope, levels, depth), attempt)


def place_preferred(ops: GangOps, needs: Sequence[PodNeed], levels: Sequence[str], depth: int,
                    scope: Sequence[NodeState], spill: Collection[str] | None) -> list[Placement] | None:
    """``spill``: where pods that fit in no chosen domain may go (None: anywhere in the cluster)."""
    for d in range(len(levels) - 1, depth - 1, -1):  # narrowest level first: the smallest domain
        def attempt(nodes: Sequence[NodeState], d: int = d) -> list[Placement] | None:
            if d + 1 < len(levels):
                # Narrower levels could not hold it whole: use as few of their domains as possible.
                return _fewest(ops, needs, levels, d + 1, nodes, _names(nodes))
            return ops.place_all(needs, _names(nodes))

        placed = _first_domain(ops, needs, domains(scope, levels, d), attempt)
        if placed is not None:
            return placed
    return _fewest(ops, needs, levels, depth, scope, spill)


def _first_domain(ops: GangOps, needs: Sequence[PodNeed], groups: dict[Path, list[NodeState]],
                  attempt: Callable[[Sequence[NodeState]], list[Placement] | None]) -> list[Placement] | None:
    """``attempt`` on each domain that can hold the gang, best fit first, each under a checkpoint; the first
    placement that succeeds is kept, the others rolled back."""
    cluster = ops.cluster
    for _, _, _, nodes in _fitting(ops, needs, groups):
        mark = cluster.checkpoint()
        placed = attempt(nodes)
        if placed is not None:
            cluster.commit(mark)
            return placed
        cluster.rollback(mark)
    return None


def _fewest(ops: GangOps, needs: Sequence[PodNeed], levels: Sequence[str], depth: int,
            scope: Sequence[NodeState], spill: Collection[str] | None) -> list[Placement] | None:
    """Fill the domains with the most free capacity first, then put what is left anywhere in ``spill``."""
    groups = domains(scope, levels, depth)
    order = sorted(groups.items(), key=lambda kv: (-_capacity(ops, needs, kv[1]), kv[0]))
    placed: dict[int, Placement] = {}
    remaining = list(range(len(needs)))
    for _, nodes in order:
        if not remaining:
            break
        allowed = _names(nodes)
        still = []
        for i in remaining:
            p = ops.place_one(needs[i], allowed)
            if p is None:
                still.append(i)
            else:
                placed[i] = p
        remaining = still
    for i in remaining:
        p = ops.place_one(needs[i], spill)
        if p is None:
            return None
        placed[i] = p
    return [placed[i] for i in range(len(needs))]
