"""In which order a cycle processes its nominated heads (§1.8 step 4, §1.13).

Classical: lower borrowing level first, then higher priority, then earlier queue-order timestamp.
Fair sharing: a tournament from each cohort root; at every cohort the child (a ClusterQueue's head, or the
winner of a child cohort) whose dominant resource share would be lowest after admitting its head wins, ties
going to higher priority then earlier timestamp. Shares are recomputed at every pick because each admission
changes them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

from gpufleet.scheduling.kueue.info import WorkloadInfo
from gpufleet.scheduling.quota import FR, QuotaNode, QuotaTree


class Orderable(Protocol):
    @property
    def info(self) -> WorkloadInfo: ...

    @property
    def cq_name(self) -> str: ...

    @property
    def borrowing(self) -> int: ...

    @property
    def usage(self) -> dict[FR, int]: ...


def classical_key(e: Orderable) -> tuple[int, int, float, int, str]:
    return (e.borrowing, -e.info.priority, e.info.queue_ts, e.info.order, e.info.key)


def classical(entries: Sequence[Orderable]) -> list[Orderable]:
    return sorted(entries, key=classical_key)


def _root(node: QuotaNode) -> QuotaNode:
    while node.parent is not None:
        node = node.parent
    return node


def fair_sharing(entries: Sequence[Orderable], tree: QuotaTree) -> Iterator[Orderable]:
    """Yield entries in fair-sharing order; the tree may change between yields (admissions)."""
    remaining: dict[str, Orderable] = {e.cq_name: e for e in entries}
    while remaining:
        # Kueue starts from an arbitrary queue; the classical order makes it deterministic here.
        first = min(remaining.values(), key=classical_key)
        node = tree.cluster_queue(first.cq_name)
        if node.parent is None:
            del remaining[first.cq_name]
            yield first
            continue
        root = _root(node)
        shares = _shares(root, remaining, tree)
        winner = _tournament(root, remaining, shares)
        assert winner is not None
        del remaining[winner.cq_name]
        yield winner


def _subtree_cqs(node: QuotaNode) -> Iterator[QuotaNode]:
    for child in node.children:
        if child.is_cluster_queue:
            yield child
        else:
            yield from _subtree_cqs(child)


def _shares(root: QuotaNode, remaining: dict[str, Orderable], tree: QuotaTree
            ) -> dict[tuple[str, str], tuple[int, float]]:
    """For each entry and each cohort on its path, the share of that cohort's child on the path, with the
    entry's usage added."""
    out: dict[tuple[str, str], tuple[int, float]] = {}
    for cq in _subtree_cqs(root):
        e = remaining.get(cq.name)
        if e is None:
            continue
        mark = tree.checkpoint()
        try:
            tree.add_usage(cq.name, e.usage)
            share = tree.fair_sharing_key(cq)
            node: QuotaNode | None = cq.parent
            while node is not None:
                out[(node.name, e.info.key)] = share
                share = tree.fair_sharing_key(node)
                node = node.parent
        finally:
            tree.rollback(mark)
    return out


def _tournament(cohort: QuotaNode, remaining: dict[str, Orderable],
                shares: dict[tuple[str, str], tuple[int, float]]) -> Orderable | None:
    candidates: list[Orderable] = []
    for child in cohort.children:
        if not child.is_cluster_queue:
            winner = _tournament(child, remaining, shares)
            if winner is not None:
                candidates.append(winner)
    for child in cohort.children:
        if child.is_cluster_queue and child.name in remaining:
            candidates.append(remaining[child.name])
    if not candidates:
        return None

    def key(e: Orderable) -> tuple[tuple[int, float], int, float]:
        return shares[(cohort.name, e.info.key)], -e.info.priority, e.info.queue_ts

    best = candidates[0]
    for c in candidates[1:]:
        if key(c) < key(best):
            best = c
    return best
