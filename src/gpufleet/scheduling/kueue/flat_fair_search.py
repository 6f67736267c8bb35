"""Fair-sharing preemption (§1.13) in a flat cohort — a root cohort whose children are all ClusterQueues — for the
heads of one nomination: Kueue's target walk, stepping over in bulk the queues where it would change nothing.

It gives exactly the targets of the step-by-step walk (``Preemptor._fs_first_strategy`` and
``_fs_second_strategy`` over :class:`~gpufleet.scheduling.kueue.target_ordering.TargetOrdering`);
``tests/kueue/test_flat_fair_search.py`` compares the two on random flat cohorts.

**How a flat cohort is walked.** From the root Kueue's walk descends into the child with the highest share; in a
flat cohort that child is the target, so the walk visits ClusterQueues by their current share, highest first, ties
to the later child. A queue the head has not changed keeps the snapshot's share, so those come in the snapshot's
ranked order (:class:`~gpufleet.scheduling.kueue.target_ordering.SnapshotShares`); the few the head changed (its
own, those it took from) come from a heap. The preemptor's share P is its own queue's (with the head's usage), so
only the head's takes from its own queue change it.

**What is skipped.** In the first strategy a visit to an unchanged queue T changes nothing but the retry list when
no candidate passes. LessThanOrEqualToFinalShare takes c when P <= share(T without c); taking usage away never
raises a share, so none passes when the highest share(T without c) over T's candidates is below P (that maximum
depends on the head's candidate class — what the reclaim policy reads of the head — and is worked out once per
nomination). LessThanInitialShare takes when P < share(T). The retry list only feeds the second strategy
(LessThanInitialShare with P2, the preemptor's share once the first strategy is over), which also visits queues
by share — in a flat cohort a take re-ranks only the queue taken from, which it then drops — so once it meets a
queue with share <= P2 every later one is dropped without a take: it stops there. P2 is at least P_floor, the
preemptor's share were all its own candidates taken. So an unchanged queue whose visit is futile in the first
strategy and whose share is <= P_floor is passed without listing its candidates; the walk jumps to the next
queue that is not such (:class:`~gpufleet.scheduling.kueue.first_at_least.FirstAtLeast`), never past the best
changed queue (whose visit may move P).

**What a walk reads of the asking queue.** A walk records in its :class:`SearchReads` the queues at whose places
it stops and, while the preemptor has own candidates, the positions of the queues its own node is ranked against
at an equal share (the nearest places where the walk may stop, on either side, and the changed queues in the
heap): the nomination memo hands its answer only to queues alike that these leave unchanged
(:mod:`~gpufleet.scheduling.kueue.search_reads`).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from math import inf

from gpufleet.api.objects import FairSharingStrategy, PreemptionPolicy
from gpufleet.scheduling.kueue.admitted import AdmittedQueue
from gpufleet.scheduling.kueue.first_at_least import FirstAtLeast
from gpufleet.scheduling.kueue.info import WorkloadInfo
from gpufleet.scheduling.kueue.preemption_order import (
    IN_CLUSTER_QUEUE,
    IN_COHORT_FAIR_SHARING,
    Target,
    priority_allows,
)
from gpufleet.scheduling.kueue.search_reads import SearchReads
from gpufleet.scheduling.kueue.target_ordering import ZERO_SHARE, ShareKey, SnapshotShares
from gpufleet.scheduling.quota import FR, QuotaNode, QuotaTree

# Below every share: the value of a queue the walk never visits (no candidates, or a zero share).
_NEVER: ShareKey = (-1, -1.0)
# A child's place in the walk: the share, highest first, ties to the later child (as target_ordering ranks them).
_Rank = tuple[int, float, int]
_LTE: FairSharingStrategy = "LessThanOrEqualToFinalShare"


def _rank(share: ShareKey, pos: int) -> _Rank:
    return (-share[0], -share[1], -pos)


def _ordered(queue: AdmittedQueue, frs: frozenset[FR], policy: str, head: WorkloadInfo) -> list[WorkloadInfo]:
    """A queue's candidates for ``head`` under ``policy``, in the order the search takes them (evicted first)."""
    if policy == "Never":
        return []
    ordered = queue.ordered()
    # The queue lists its workloads by priority first: a policy bounded by the head's priority reads a prefix.
    if policy == "LowerPriority":
        ordered = ordered[:bisect_left(queue.standings(), (head.priority,))]
    elif policy == "LowerOrNewerEqualPriority":
        ordered = ordered[:bisect_left(queue.standings(), (head.priority + 1,))]
    kept = [c for c in ordered if c.uses_any(frs) and priority_allows(policy, head, c)]
    for c in kept:
        if c.evicting:
            return [c for c in kept if c.evicting] + [c for c in kept if not c.evicting]
    return kept


def _class_key(policy: str, head: WorkloadInfo) -> tuple[object, ...]:
    """What :func:`priority_allows` reads of the head under ``policy``: heads alike in it have the same
    candidates in every other queue."""
    if policy == "LowerPriority":
        return (policy, head.priority)
    if policy == "LowerOrNewerEqualPriority":
        return (policy, head.priority, head.queue_ts)
    return (policy,)


@dataclass(slots=True)
class _Cohort:
    """A flat cohort's ClusterQueues in the snapshot's walk order."""

    nodes: list[QuotaNode]
    ranks: list[_Rank]
    index: dict[int, int]  # queue id -> its place in ``nodes``
    pos: dict[int, int]  # queue id -> its place among the root's children

    def below(self, share: ShareKey) -> int:
        """The first place whose share is <= ``share`` (every earlier queue's share is higher)."""
        return bisect_left(self.ranks, (-share[0], -share[1], -len(self.nodes)))


@dataclass(slots=True)
class _Class:
    """The candidates of one candidate class in one flat cohort, by place in the walk order, and for each place
    the highest share its queue would show without one of them (``_NEVER`` where the walk never stops)."""

    cands: list[list[WorkloadInfo]]
    best: FirstAtLeast[ShareKey]
    next_valid: list[int]  # place -> the first place at or after it where the walk stops (len when none)
    last_valid: list[int]  # place -> the last place before it where the walk stops (-1 when none)
    any_cands: set[int]  # ids of the queues with candidates (the search has candidates at all)


class FlatFairSearch:
    """One nomination's fair-sharing searches in flat cohorts. Built while the quota tree holds the snapshot; what
    it works out (the walk order, candidate classes, shares without a candidate) holds for every head."""

    def __init__(self, tree: QuotaTree, admitted: Mapping[str, AdmittedQueue], snapshot: SnapshotShares,
                 strategies: Sequence[FairSharingStrategy]) -> None:
        self.tree = tree
        self.admitted = admitted
        self.snapshot = snapshot
        self.first_rule = strategies[0]
        self.two_strategies = len(strategies) > 1
        self._flat: dict[int, bool] = {}
        self._cohorts: dict[int, _Cohort] = {}
        self._classes: dict[tuple[int, frozenset[FR], tuple[object, ...]], _Class] = {}
        self._without: dict[tuple[int, tuple[tuple[FR, int], ...]], ShareKey] = {}

    def is_flat(self, root: QuotaNode) -> bool:
        found = self._flat.get(id(root))
        if found is None:
            found = self._flat[id(root)] = all(c.is_cluster_queue for c in root.children)
        return found

    def head(self, info: WorkloadInfo, node: QuotaNode, root: QuotaNode, frs: frozenset[FR], usage: Mapping[FR, int],
             policy: PreemptionPolicy, reads: SearchReads | None = None) -> HeadWalk | None:
        """The walk of one head whose queue ``node`` is a child of the flat ``root`` (prepared in the snapshot);
        None when it finds no target for sure (no candidate at all, or none it could reach). Call before the search
        changes the tree. ``reads`` gets what the search reads of the cohort beyond values
        (:mod:`~gpufleet.scheduling.kueue.search_reads`), here and as the walk runs."""
        own: list[WorkloadInfo] = []
        if policy.within_cluster_queue != "Never":
            own = _ordered(self.admitted[node.name], frs, policy.within_cluster_queue, info)
        cohort = self._cohort(root)
        cls = self._class(cohort, root, frs, policy.reclaim_within_cohort, info)
        if not own and not cls.any_cands:
            return None  # no candidate anywhere: the same for every queue alike
        walk = HeadWalk(self, cohort, cls, node, usage, own, 0, reads)
        p = walk.share(node)  # P as the walk starts (the tree does not change before it runs)
        if self.two_strategies:
            floor = p
            if own:
                # P2 is at least the preemptor's share with every own candidate taken (shares grow with usage).
                extra = dict(usage)
                for c in own:
                    for fr, v in c.usage.items():
                        extra[fr] = extra.get(fr, 0) - v
                floor = self.tree.fair_sharing_key(node, extra)
            walk.floor_place = cohort.below(floor)
        if not own:
            # Without own candidates P stays as it is: when no queue is worth a visit at that share, both
            # strategies find nothing, as the walk would; that reads no queue's place.
            first = walk.next_place(0, p)
            if first >= len(cohort.nodes):
                return None
            if len(cls.any_cands) <= (id(node) in cls.any_cands):
                # Only its own queue has candidates (so ``first`` is its own place, which its walk passes over): a
                # queue alike would visit this one there.
                walk.stopped_at(first)
                return None
        return walk

    def without(self, node: QuotaNode, cand: WorkloadInfo) -> ShareKey:
        """The share of a queue still in the snapshot's state without ``cand``'s usage."""
        key = (id(node), tuple(cand.usage.items()))
        found = self._without.get(key)
        if found is None:
            found = self._without[key] = self.tree.fair_sharing_key(node, {fr: -v for fr, v in cand.usage.items()})
        return found

    def _cohort(self, root: QuotaNode) -> _Cohort:
        found = self._cohorts.get(id(root))
        if found is None:
            ranked = self.snapshot.ranked(root)[0]
            nodes = [n for _, n in ranked]
            found = self._cohorts[id(root)] = _Cohort(nodes, [r for r, _ in ranked],
                                                      {id(n): i for i, n in enumerate(nodes)},
                                                      {id(n): -r[2] for r, n in ranked})
        return found

    def _class(self, cohort: _Cohort, root: QuotaNode, frs: frozenset[FR], policy: str,
               head: WorkloadInfo) -> _Class:
        key = (id(root), frs, _class_key(policy, head))
        found = self._classes.get(key)
        if found is not None:
            return found
        # Only queues above their quota in a contested flavor-resource give candidates (as _fs_candidates).
        over = {id(n) for n in self.snapshot.over_quota(root, frs)} if policy != "Never" else set()
        cands: list[list[WorkloadInfo]] = []
        best: list[ShareKey] = []
        any_cands: set[int] = set()
        for node in cohort.nodes:
            found_cands = _ordered(self.admitted[node.name], frs, policy, head) if id(node) in over else []
            cands.append(found_cands)
            if found_cands:
                any_cands.add(id(node))
            if found_cands and self.snapshot.share(node) != ZERO_SHARE:
                best.append(max(self.without(node, c) for c in found_cands))
            else:
                best.append(_NEVER)
        n = len(best)
        next_valid = [n] * (n + 1)
        for i in range(n - 1, -1, -1):
            next_valid[i] = i if best[i] != _NEVER else next_valid[i + 1]
        last_valid = [-1] * (n + 1)
        for i in range(1, n + 1):
            last_valid[i] = i - 1 if best[i - 1] != _NEVER else last_valid[i - 1]
        found = self._classes[key] = _Class(cands, FirstAtLeast(best, _NEVER), next_valid, last_valid, any_cands)
        return found


class HeadWalk:
    """One head's search: both strategies. Its takes change the tree (the caller rolls it back); the head's usage
    is never added to it: the preemptor's share reads it as an extra (other queues' shares do not read the
    preemptor's queue in a flat cohort, and fit checks want it out). Targets are appended in the order they are
    taken."""

    def __init__(self, search: FlatFairSearch, cohort: _Cohort, cls: _Class, node: QuotaNode,
                 usage: Mapping[FR, int], own: list[WorkloadInfo], floor_place: int,
                 reads: SearchReads | None = None) -> None:
        self.tree = search.tree
        self.search = search
        self.cohort = cohort
        self.cls = cls
        self.node = node
        self.usage = usage
        self.own = own
        self.own_next = 0
        # Places before it have a share above P_floor: the second strategy may take there (0 without one).
        self.floor_place = floor_place
        self.changed: set[int] = {id(node)}  # queues whose usage this search changed (their shares are its own)
        self.current: dict[int, ShareKey] = {}  # their shares, until they change again
        self.next_cand: dict[int, int] = {}  # queue id -> its first candidate not yet looked at
        self.fresh: list[tuple[_Rank, int, QuotaNode]] = []  # changed queues by rank (stale items skipped)
        self.retry: list[WorkloadInfo] = []
        self.reads = reads

    def stopped_at(self, place: int) -> None:
        """The walk stops at ``place`` (visits its queue, or passes over it as one of its own changed queues)."""
        if self.reads is not None:
            self.reads.queues.add(self.cohort.nodes[place].name)

    def run(self, targets: list[Target], fits: Callable[[], bool]) -> bool:
        """Whether the head fits after taking ``targets`` (before the fill-back)."""
        self._push(self.node)
        if self._first(targets, fits):
            return True
        return self.search.two_strategies and self._second(targets, fits)

    # ---- shares and ranks ----------------------------------------------------------------------------------
    def share(self, node: QuotaNode) -> ShareKey:
        """A queue's share as the walk reads it: the preemptor's with the head's usage."""
        if id(node) not in self.changed:
            return self.search.snapshot.share(node)
        found = self.current.get(id(node))
        if found is None:
            found = self.current[id(node)] = self.tree.fair_sharing_key(
                node, self.usage if node is self.node else None)
        return found

    def _push(self, node: QuotaNode) -> None:
        heapq.heappush(self.fresh, (_rank(self.share(node), self.cohort.pos[id(node)]), id(node), node))

    def _has(self, node: QuotaNode) -> bool:
        if node is self.node:
            return self.own_next < len(self.own)
        return self.next_cand.get(id(node), 0) < len(self.cls.cands[self.cohort.index[id(node)]])

    def _fresh_top(self) -> tuple[_Rank, QuotaNode] | None:
        fresh = self.fresh
        while fresh:
            rank, _, node = fresh[0]
            share = self.share(node)
            if rank != _rank(share, self.cohort.pos[id(node)]) or not self._has(node) or (
                    share == ZERO_SHARE and node is not self.node):
                heapq.heappop(fresh)  # ranked again since, or out of the walk for good
                continue
            return rank, node
        return None

    def next_place(self, i: int, p: ShareKey) -> int:
        """The first place at or after ``i`` where an unchanged queue's visit may matter, P being ``p``."""
        cls = self.cls
        valid = cls.next_valid[i]
        n = len(self.cohort.nodes)
        if valid >= n:
            return n
        if self.search.first_rule == _LTE:
            first = cls.best.first(valid, p)
        else:
            first = valid if valid < self.cohort.below(p) else n
        return min(first, valid if valid < self.floor_place else n)

    # ---- the strategies --------------------------------------------------------------------------------------
    def _take(self, node: QuotaNode, cand: WorkloadInfo, reason: str, targets: list[Target]) -> None:
        self.tree.remove_usage(node.name, cand.usage)
        self.changed.add(id(node))
        self.current.pop(id(node), None)
        targets.append(Target(cand, reason))
        self._push(node)

    def _first(self, targets: list[Target], fits: Callable[[], bool]) -> bool:
        cohort = self.cohort
        nodes = cohort.nodes
        n = len(nodes)
        i = 0
        while True:
            top = self._fresh_top()
            limit = bisect_left(cohort.ranks, top[0]) if top is not None else n
            p = self.share(self.node)
            if self.reads is not None and self.own_next < len(self.own):
                self._ranked(top, i, p)
            j = self.next_place(i, p)
            while j < limit and id(nodes[j]) in self.changed:  # walked from the heap instead
                self.stopped_at(j)
                j = self.next_place(j + 1, p)
            if j < limit:
                self.stopped_at(j)
                i = j + 1
                node = nodes[j]
            elif top is not None:
                i = max(i, limit)  # everything before it would be passed without effect
                node = top[1]
            else:
                return False
            if node is self.node:
                cand = self.own[self.own_next]
                self.own_next += 1
                self._take(node, cand, IN_CLUSTER_QUEUE, targets)
                if fits():
                    return True
            elif self._visit(node, targets, fits):
                return True

    def _ranked(self, top: tuple[_Rank, QuotaNode] | None, start: int, p: ShareKey) -> None:
        """Record what the own node (with own candidates left, share ``p``) is ranked against by its position: the
        other changed queues of equal share in the heap, and when it is the heap's top the places of equal share
        from ``start`` on where the walk may stop (those before it are visited first, or passed over for good once
        it is taken; where the walk never stops, at any share, it makes no difference)."""
        reads = self.reads
        assert reads is not None
        cohort = self.cohort
        own = cohort.pos[id(self.node)]
        for _, _, node in self.fresh:
            if node is not self.node and self.share(node) == p:
                reads.ranked_against(cohort.pos[id(node)], own)
        if top is None or top[1] is not self.node:
            return
        ranks = cohort.ranks
        first = bisect_left(ranks, (-p[0], -p[1], -inf), start)
        end = bisect_left(ranks, (-p[0], -p[1], 1), first)
        mid = bisect_left(ranks, (-p[0], -p[1], -own), first, end)  # the first of them after the own node
        before = self.cls.last_valid[mid]
        if before >= first:
            reads.ranked_against(-ranks[before][2], own)
        after = self.cls.next_valid[mid]
        if after < end and -ranks[after][2] == own:
            after = self.cls.next_valid[after + 1]  # its own place in the snapshot: passed over
        if after < end:
            reads.ranked_against(-ranks[after][2], own)

    def _visit(self, node: QuotaNode, targets: list[Target], fits: Callable[[], bool]) -> bool:
        p = self.share(self.node)
        old = self.share(node)
        cands = self.cls.cands[self.cohort.index[id(node)]]
        k = self.next_cand.get(id(node), 0)
        lte = self.search.first_rule == _LTE
        changed = id(node) in self.changed
        while k < len(cands):
            cand = cands[k]
            k += 1
            if lte:
                new = (self.tree.fair_sharing_key(node, {fr: -v for fr, v in cand.usage.items()}) if changed
                       else self.search.without(node, cand))
                ok = p <= new
            else:
                ok = p < old
            if not ok:
                self.retry.append(cand)
                continue
            self.next_cand[id(node)] = k
            self._take(node, cand, IN_COHORT_FAIR_SHARING, targets)
            return fits()
        self.next_cand[id(node)] = k
        return False

    def _second(self, targets: list[Target], fits: Callable[[], bool]) -> bool:
        """LessThanInitialShare, one try per queue with its first retried candidate, by share: takes re-rank only
        the queue taken from, so the order is fixed at the start, and it stops at the first share <= P2."""
        first: dict[int, tuple[QuotaNode, WorkloadInfo]] = {}
        for cand in self.retry:
            assert cand.cluster_queue is not None
            node = self.tree.cluster_queue(cand.cluster_queue)
            first.setdefault(id(node), (node, cand))
        if not first:
            return False
        p = self.share(self.node)
        pos = self.cohort.pos
        for node, cand in sorted(first.values(), key=lambda item: _rank(self.share(item[0]), pos[id(item[0])])):
            share = self.share(node)
            if share == ZERO_SHARE:
                continue
            if not p < share:
                return False
            self._take(node, cand, IN_COHORT_FAIR_SHARING, targets)
            if fits():
                return True
        return False
