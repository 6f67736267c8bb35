"""In which order a cycle processes its nominated heads (§1.8 step 4, §1.13).

Classical: lower borrowing level first, then higher priority, then earlier queue-order timestamp.
Fair sharing: a tournament from each cohort root; at every cohort the child (a ClusterQueue's head, or the
winner of a child cohort) whose dominant resource share would be lowest after admitting its head wins, ties
going to higher priority then earlier timestamp. Shares are recomputed at every pick because each admission
changes them.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from itertools import pairwise
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
    info = e.info
    return (e.borrowing, -info.priority, info.queue_ts, info.order, info.key)


def classical(entries: Sequence[Orderable]) -> list[Orderable]:
    return sorted(entries, key=classical_key)


_Share = tuple[int, float]


class _Tournament:
    """Kueue's fair-sharing tournament with memory between picks.

    The share an entry shows at a cohort is that of its path node just below the cohort, with the entry's
    usage added. Processing an entry only changes the usage of its own ClusterQueue and that queue's
    ancestors, so after a pick only entries whose path meets the winner's path are recomputed. Each cohort
    keeps a heap of the entries of its ClusterQueue children (stale items are skipped lazily); child cohorts
    send up their own winners.

    What a pick costs does not grow with the size of the cohort: the entries to recompute are kept per cohort
    tree as they go stale (not found by scanning the tree's entries), and each cohort's child cohorts are listed
    once (not found among all its children at every pick).
    """

    def __init__(self, entries: Sequence[Orderable], tree: QuotaTree) -> None:
        self.tree = tree
        self.remaining: dict[str, Orderable] = {e.info.key: e for e in entries}
        self.paths: dict[str, list[QuotaNode]] = {}  # entry -> its ClusterQueue and ancestors, up to the root
        self.under: dict[int, list[Orderable]] = {}  # path node (root excluded) -> entries below it
        # Cohort tree (its root) -> its remaining entries whose shares must be recomputed before its next pick.
        self.stale: dict[int, dict[str, Orderable]] = {}
        for e in entries:
            node: QuotaNode | None = tree.cluster_queue(e.cq_name)
            path = []
            while node is not None:
                path.append(node)
                node = node.parent
            self.paths[e.info.key] = path
            for n in path[:-1]:
                self.under.setdefault(id(n), []).append(e)
            self.stale.setdefault(id(path[-1]), {})[e.info.key] = e
        self.shares: dict[tuple[str, str], _Share] = {}
        self.version: dict[str, int] = {}
        self.heaps: dict[int, list[tuple[_Share, int, float, int, str, int, Orderable]]] = {}
        self._child_cohorts: dict[int, list[QuotaNode]] = {}

    def _refresh(self, e: Orderable) -> None:
        key = e.info.key
        path = self.paths[key]
        tree = self.tree
        if len(path) == 2:
            # Below the root only the entry's own ClusterQueue, whose share with the entry's usage added is the
            # same read as an extra: no checkpoint to open and roll back.
            self.shares[(path[1].name, key)] = tree.fair_sharing_key(path[0], e.usage)
        else:
            mark = tree.checkpoint()
            try:
                tree.add_usage(e.cq_name, e.usage)
                for below, cohort in pairwise(path):
                    self.shares[(cohort.name, key)] = tree.fair_sharing_key(below)
            finally:
                tree.rollback(mark)
        v = self.version[key] = self.version.get(key, 0) + 1
        parent = path[1]
        heapq.heappush(self.heaps.setdefault(id(parent), []), (
            self.shares[(parent.name, key)], -e.info.priority, e.info.queue_ts, e.info.order, key, v, e))

    def _top(self, cohort: QuotaNode) -> Orderable | None:
        heap = self.heaps.get(id(cohort))
        while heap:
            item = heap[0]
            if item[4] in self.remaining and self.version.get(item[4]) == item[5]:
                return item[6]
            heapq.heappop(heap)
        return None

    def _key(self, cohort: QuotaNode, e: Orderable) -> tuple[_Share, int, float]:
        return self.shares[(cohort.name, e.info.key)], -e.info.priority, e.info.queue_ts

    def _cohorts_below(self, cohort: QuotaNode) -> list[QuotaNode]:
        """The cohort's child cohorts in child order; the tree's shape does not change during a cycle."""
        found = self._child_cohorts.get(id(cohort))
        if found is None:
            found = self._child_cohorts[id(cohort)] = [c for c in cohort.children if not c.is_cluster_queue]
        return found

    def _winner(self, cohort: QuotaNode) -> Orderable | None:
        best: Orderable | None = None
        best_key: tuple[_Share, int, float] | None = None
        for child in self._cohorts_below(cohort):
            w = self._winner(child)
            if w is not None:
                k = self._key(cohort, w)
                if best_key is None or k < best_key:
                    best, best_key = w, k
        top = self._top(cohort)
        if top is not None and (best_key is None or self._key(cohort, top) < best_key):
            best = top
        return best

    def pick(self, root: QuotaNode) -> Orderable:
        """The next entry of ``root``'s cohort tree (it has one left)."""
        stale = self.stale.get(id(root))
        if stale:
            for e in stale.values():
                self._refresh(e)
            stale.clear()
        winner = self._winner(root)
        assert winner is not None
        key = winner.info.key
        del self.remaining[key]
        if stale is not None:
            for n in self.paths[key][:-1]:
                for e in self.under.get(id(n), ()):
                    if e.info.key in self.remaining:
                        stale[e.info.key] = e
        return winner


def fair_sharing(entries: Sequence[Orderable], tree: QuotaTree) -> Iterator[Orderable]:
    """Yield entries in fair-sharing order; the tree may change between yields (admissions)."""
    t = _Tournament(entries, tree)
    # Kueue starts each pick from an arbitrary queue; the classical order makes it deterministic here.
    order = sorted(entries, key=classical_key)
    pos = 0
    while t.remaining:
        while order[pos].info.key not in t.remaining:
            pos += 1
        first = order[pos]
        path = t.paths[first.info.key]
        if len(path) == 1:
            del t.remaining[first.info.key]
            yield first
            continue
        yield t.pick(path[-1])
