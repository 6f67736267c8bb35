"""Which ClusterQueue fair-sharing preemption takes from next (§1.13, Kueue's TargetClusterQueueOrdering).

:class:`TargetOrdering` is Kueue's walk, step by step: from the root, descend into the child with the highest
dominant resource share until a ClusterQueue with candidates is reached, rescanning a cohort's children at every
step. With a cohort of C queues and a head that takes T victims that is O(C·T) share comparisons per head, for
every head of the cohort.

:class:`SharedTargetOrdering` gives the same sequence for the heads of one nomination. A node's share depends on
its own usage only, so every node a head's search has not touched has the snapshot's share:
:class:`SnapshotShares` computes those once per nomination, with each cohort's children sorted by them; a head
keeps a heap of only the children its own removals (and its own admission) re-ranked, and takes the better of the
two tops. Validity only ever gets lost (a queue runs out of candidates, shares only fall while a head removes), so
a child is checked when it reaches the top and dropped for good if it fails, as the full rescan would have done.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Sequence

from gpufleet.scheduling.kueue.info import WorkloadInfo
from gpufleet.scheduling.quota import FR, QuotaNode, QuotaTree

ShareKey = tuple[int, float]
ZERO_SHARE: ShareKey = (0, 0.0)
# A child's rank among its siblings: the share, highest first, ties to the later child (Kueue's ">=" scan).
_Rank = tuple[int, float, int]


def root_of(node: QuotaNode) -> QuotaNode:
    while node.parent is not None:
        node = node.parent
    return node


def touch(touched: dict[int, QuotaNode], node: QuotaNode) -> None:
    """``node``'s usage changed, and so did its ancestors'."""
    n: QuotaNode | None = node
    while n is not None:
        touched[id(n)] = n
        n = n.parent


def _rank(share: ShareKey, pos: int) -> _Rank:
    return (-share[0], -share[1], -pos)


class TargetOrdering:
    """Kueue's TargetClusterQueueOrdering: from the root, descend into the child with the highest dominant
    resource share (a cohort wins ties) until a ClusterQueue with candidates is reached; queues and cohorts
    that no longer borrow are pruned (except on the preemptor's own path)."""

    def __init__(self, tree: QuotaTree, preemptor: QuotaNode, candidates: Sequence[WorkloadInfo]) -> None:
        self.tree = tree
        self.preemptor = preemptor
        self.by_cq: dict[str, list[WorkloadInfo]] = {}
        for c in candidates:
            assert c.cluster_queue is not None
            self.by_cq.setdefault(c.cluster_queue, []).append(c)
        self._path: list[QuotaNode] = []  # the preemptor and its ancestors
        node: QuotaNode | None = preemptor
        while node is not None:
            self._path.append(node)
            node = node.parent
        self._on_path = {id(n): i for i, n in enumerate(self._path)}
        self.ancestors: set[int] = {id(n) for n in self._path[1:]}
        self.pruned: set[int] = set()
        # Shares only change where usage changes, so they are remembered until a removal on their path.
        self._shares: dict[int, ShareKey] = {}
        self._alive: dict[int, list[QuotaNode]] = {}

    def changed(self, node: QuotaNode) -> None:
        """Usage of ``node`` (and so of its ancestors) changed: forget their shares."""
        n: QuotaNode | None = node
        while n is not None:
            self._shares.pop(id(n), None)
            n = n.parent

    def has(self, cq: QuotaNode) -> bool:
        return bool(self.by_cq.get(cq.name))

    def pop(self, cq: QuotaNode) -> WorkloadInfo:
        return self.by_cq[cq.name].pop(0)

    def drop(self, cq: QuotaNode) -> None:
        self.pruned.add(id(cq))

    def __iter__(self) -> Iterator[QuotaNode]:
        if self.preemptor.parent is None:
            while self.has(self.preemptor):
                yield self.preemptor
            return
        root = root_of(self.preemptor)
        while id(root) not in self.pruned:
            target = self._next(root)
            if target is not None:
                yield target

    def _key(self, node: QuotaNode, cached: bool = True) -> ShareKey:
        if not cached:
            return self.tree.fair_sharing_key(node)
        share = self._shares.get(id(node))
        if share is None:
            share = self._shares[id(node)] = self.tree.fair_sharing_key(node)
        return share

    def _next(self, cohort: QuotaNode) -> QuotaNode | None:
        best_cq: QuotaNode | None = None
        best_cq_key: ShareKey | None = None
        best_co: QuotaNode | None = None
        best_co_key: ShareKey | None = None
        alive: list[QuotaNode] = []  # pruning is for good: later visits only look at the survivors
        for child in self._alive.get(id(cohort), cohort.children):
            if id(child) in self.pruned:
                continue
            if child.is_cluster_queue and not self.has(child):
                self.pruned.add(id(child))  # checked before the share, which costs more
                continue
            key = self._key(child)
            if child.is_cluster_queue:
                if key == ZERO_SHARE and child is not self.preemptor:
                    self.pruned.add(id(child))
                    continue
                if best_cq_key is None or key >= best_cq_key:
                    best_cq, best_cq_key = child, key
            elif key == ZERO_SHARE and id(child) not in self.ancestors:
                self.pruned.add(id(child))
                continue
            elif best_co_key is None or key >= best_co_key:
                best_co, best_co_key = child, key
            alive.append(child)
        self._alive[id(cohort)] = alive
        if best_co is None and best_cq is None:
            self.pruned.add(id(cohort))
            return None
        if best_co is not None and (best_cq_key is None or (best_co_key is not None and best_co_key >= best_cq_key)):
            return self._next(best_co)
        return best_cq

    def _almost(self, target: QuotaNode) -> tuple[QuotaNode, QuotaNode]:
        """The preemptor's and the target's almost-least-common-ancestors (the children of their lowest common
        cohort on each side)."""
        t = target
        while t.parent is not None and id(t.parent) not in self._on_path:
            t = t.parent
        lca = t.parent
        assert lca is not None, "target and preemptor are in the same cohort tree"
        return self._path[self._on_path[id(lca)] - 1], t

    def shares(self, target: QuotaNode, cached: bool = True) -> tuple[ShareKey, ShareKey]:
        """Shares of the preemptor's and the target's almost-least-common-ancestors."""
        p_almost, t = self._almost(target)
        return self._key(p_almost, cached), self._key(t, cached)


class SnapshotShares:
    """Every node's share in a nomination's snapshot, and each cohort's children ranked by it (queues and cohorts
    apart). Filled only while the tree is in the snapshot's state: :meth:`prepare` a cohort tree before a search
    changes anything, and read the share of nodes the search has not touched."""

    def __init__(self, tree: QuotaTree) -> None:
        self.tree = tree
        self._shares: dict[int, ShareKey] = {}
        self._ranked: dict[int, tuple[list[tuple[_Rank, QuotaNode]], list[tuple[_Rank, QuotaNode]]]] = {}
        self._prepared: set[int] = set()
        # (node, workload) -> the node's share without that workload's usage, the rest as in the snapshot.
        self.without: dict[tuple[int, str], ShareKey] = {}
        self._over: dict[tuple[int, frozenset[FR]], list[QuotaNode]] = {}

    def over_quota(self, root: QuotaNode, frs: frozenset[FR]) -> list[QuotaNode]:
        """The ClusterQueues of ``root``'s tree above their quota in one of ``frs`` (the only ones fair-sharing
        preemption reclaims from), in id order as the quota tree lists them."""
        key = (id(root), frs)
        found = self._over.get(key)
        if found is None:
            found = self._over[key] = [n for n in self.tree.cluster_queues_over_quota(frs) if root_of(n) is root]
        return found

    def share(self, node: QuotaNode) -> ShareKey:
        found = self._shares.get(id(node))
        if found is None:
            found = self._shares[id(node)] = self.tree.fair_sharing_key(node)
        return found

    def prepare(self, root: QuotaNode) -> None:
        if id(root) in self._prepared:
            return
        self._prepared.add(id(root))
        stack = [root]
        while stack:
            cohort = stack.pop()
            queues: list[tuple[_Rank, QuotaNode]] = []
            cohorts: list[tuple[_Rank, QuotaNode]] = []
            for pos, child in enumerate(cohort.children):
                item = (_rank(self.share(child), pos), child)
                (queues if child.is_cluster_queue else cohorts).append(item)
                if not child.is_cluster_queue:
                    stack.append(child)
            queues.sort(key=lambda item: item[0])
            cohorts.sort(key=lambda item: item[0])
            self._ranked[id(cohort)] = (queues, cohorts)

    def ranked(self, cohort: QuotaNode) -> tuple[list[tuple[_Rank, QuotaNode]], list[tuple[_Rank, QuotaNode]]]:
        return self._ranked[id(cohort)]


class SharedTargetOrdering(TargetOrdering):
    """:class:`TargetOrdering`'s sequence from the nomination's ranked children and a heap of the ones this
    search re-ranked. ``touched``: the nodes whose usage the search has changed so far (shared with the caller,
    kept up to date by :meth:`changed`)."""

    def __init__(self, tree: QuotaTree, preemptor: QuotaNode, candidates: Sequence[WorkloadInfo],
                 snapshot: SnapshotShares, touched: dict[int, QuotaNode]) -> None:
        super().__init__(tree, preemptor, candidates)
        self.snapshot = snapshot
        self.touched = touched
        self._cursor: dict[tuple[int, bool], int] = {}  # (cohort, queues?) -> first unexamined ranked child
        self._fresh: dict[tuple[int, bool], list[tuple[_Rank, int, QuotaNode]]] = {}  # re-ranked children
        self._stale: dict[int, set[int]] = {}  # cohort -> touched children whose rank is not in the heap yet
        for n in touched.values():
            self._mark(n)

    def _mark(self, node: QuotaNode) -> None:
        if node.parent is not None:
            self._stale.setdefault(id(node.parent), set()).add(id(node))

    def changed(self, node: QuotaNode) -> None:
        n: QuotaNode | None = node
        while n is not None:
            self._shares.pop(id(n), None)
            self.touched[id(n)] = n
            self._mark(n)
            n = n.parent

    def _key(self, node: QuotaNode, cached: bool = True) -> ShareKey:
        if cached and id(node) not in self.touched:
            return self.snapshot.share(node)
        return super()._key(node, cached)

    def share_without(self, target: QuotaNode, cand: WorkloadInfo, compute: Callable[[], ShareKey]) -> ShareKey:
        """The target side's share without ``cand`` (``compute`` works it out on the tree): the same for every
        head whose search has not touched that side, so computed once per nomination for those."""
        t = self._almost(target)[1]
        if id(t) in self.touched:
            return compute()
        key = (id(t), cand.key)
        found = self.snapshot.without.get(key)
        if found is None:
            found = self.snapshot.without[key] = compute()
        return found

    def _valid(self, node: QuotaNode, share: ShareKey) -> bool:
        if node.is_cluster_queue:
            return self.has(node) and (share != ZERO_SHARE or node is self.preemptor)
        return share != ZERO_SHARE or id(node) in self.ancestors

    def _top_ranked(self, cohort: QuotaNode, queues: bool) -> tuple[_Rank, QuotaNode] | None:
        ranked = self.snapshot.ranked(cohort)[0 if queues else 1]
        slot = (id(cohort), queues)
        i = self._cursor.get(slot, 0)
        while i < len(ranked):
            node = ranked[i][1]
            nid = id(node)
            if nid in self.pruned or nid in self.touched:
                i += 1  # touched ones are ranked again in the heap
                continue
            if not self._valid(node, self.snapshot.share(node)):
                self.pruned.add(nid)
                i += 1
                continue
            break
        self._cursor[slot] = i
        return ranked[i] if i < len(ranked) else None

    def _top_fresh(self, cohort: QuotaNode, queues: bool) -> tuple[_Rank, QuotaNode] | None:
        heap = self._fresh.get((id(cohort), queues))
        while heap:
            rank, _, node = heap[0]
            nid = id(node)
            share = self._key(node)
            if nid in self.pruned or rank != _rank(share, -rank[2]):
                heapq.heappop(heap)  # pruned, or ranked again since
                continue
            if not self._valid(node, share):
                self.pruned.add(nid)
                heapq.heappop(heap)
                continue
            return rank, node
        return None

    def _rerank(self, cohort: QuotaNode) -> None:
        stale = self._stale.pop(id(cohort), None)
        if not stale:
            return
        for pos, child in enumerate(cohort.children):
            if id(child) in stale and id(child) not in self.pruned:
                heap = self._fresh.setdefault((id(cohort), child.is_cluster_queue), [])
                heapq.heappush(heap, (_rank(self._key(child), pos), id(child), child))

    def _best(self, cohort: QuotaNode, queues: bool) -> tuple[_Rank, QuotaNode] | None:
        a = self._top_ranked(cohort, queues)
        b = self._top_fresh(cohort, queues)
        if a is None:
            return b
        if b is None:
            return a
        return a if a[0] < b[0] else b

    def _next(self, cohort: QuotaNode) -> QuotaNode | None:
        self._rerank(cohort)
        best_cq = self._best(cohort, True)
        best_co = self._best(cohort, False)
        if best_co is None and best_cq is None:
            self.pruned.add(id(cohort))
            return None
        # Ranks hold the negated share first: a cohort wins a tie on the share, as in the full scan.
        if best_co is not None and (best_cq is None or best_co[0][:2] <= best_cq[0][:2]):
            return self._next(best_co[1])
        assert best_cq is not None
        return best_cq[1]
