"""Preemption target search (§1.12 classical, §1.13 fair sharing) against the cycle's quota snapshot.

The searches here are the straightforward ones, Kueue's algorithm step by step: they simulate evictions on the
live :class:`QuotaTree` inside a checkpoint and leave it as they found it. Candidates are admitted workloads
that use a flavor-resource needing preemption; the search removes them greedily in candidate order until the
preemptor fits, then adds back (newest first, the last one excluded) every one whose removal turned out
unnecessary, leaving a minimal set.

During a cycle's nomination (:meth:`Preemptor.nomination`) the classical search of a head in a cohort is answered
by :class:`~gpufleet.scheduling.kueue.cohort_search.CohortSearch`, which shares the work between the heads of the
cohort and gives the same targets; ``Preemptor.shared = False`` keeps the straightforward search everywhere (the
baseline of ``bench/kueue_cycles.py`` and the reference of the property tests).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from gpufleet.api.objects import FairSharingStrategy
from gpufleet.scheduling.kueue.admitted import AdmittedQueue
from gpufleet.scheduling.kueue.cohort_search import CohortSearch
from gpufleet.scheduling.kueue.config import CQSpec
from gpufleet.scheduling.kueue.info import WorkloadInfo
from gpufleet.scheduling.kueue.preemption_order import (
    IN_CLUSTER_QUEUE,
    IN_COHORT_FAIR_SHARING,
    IN_COHORT_RECLAIM_WHILE_BORROWING,
    IN_COHORT_RECLAMATION,
    Target,
    Variant,
    candidate_order,
    priority_allows,
)
from gpufleet.scheduling.quota import FR, QuotaNode, QuotaTree

__all__ = [
    "IN_CLUSTER_QUEUE",
    "IN_COHORT_FAIR_SHARING",
    "IN_COHORT_RECLAIM_WHILE_BORROWING",
    "IN_COHORT_RECLAMATION",
    "Preemptor",
    "Target",
    "candidate_order",
    "priority_allows",
]

ShareKey = tuple[int, float]
ZERO_SHARE: ShareKey = (0, 0.0)


@dataclass(frozen=True, slots=True)
class _Candidate:
    info: WorkloadInfo
    lca: QuotaNode | None  # the subtree root under which it was found; validity is checked up to it
    variant: Variant


@dataclass(slots=True)
class _Ctx:
    info: WorkloadInfo
    cq: CQSpec
    node: QuotaNode
    frs: frozenset[FR]
    usage: dict[FR, int]


class Preemptor:
    """Finds preemption targets; ``admitted`` maps each ClusterQueue to its admitted workloads.

    ``shared``: answer classical searches made inside :meth:`nomination` with the cohort-shared search (the
    default); False keeps the straightforward search everywhere.
    """

    def __init__(self, tree: QuotaTree, cqs: Mapping[str, CQSpec], admitted: Mapping[str, AdmittedQueue],
                 fair_sharing: bool, strategies: Sequence[FairSharingStrategy]) -> None:
        self.tree = tree
        self.cqs = cqs
        self.admitted = admitted
        self.fair_sharing = fair_sharing
        self.strategies: tuple[FairSharingStrategy, ...] = tuple(strategies) or (
            "LessThanOrEqualToFinalShare", "LessThanInitialShare")
        self.shared = True
        self._cohorts: CohortSearch | None = None

    @contextmanager
    def nomination(self) -> Iterator[None]:
        """A cycle's nomination: every search inside sees one quota snapshot and the same admitted workloads
        (searches leave the tree as they found it), so work is shared between them. Nothing may admit, release
        or evict inside."""
        self._cohorts = CohortSearch(self.tree, self.admitted) if self.shared else None
        try:
            yield
        finally:
            self._cohorts = None

    # ---- shared helpers --------------------------------------------------------------------------------------
    def _within_nominal(self, node: QuotaNode, frs: frozenset[FR]) -> bool:
        return not self.tree.over_quota(node, frs)

    def fits(self, cq: str, usage: Mapping[FR, int], allow_borrowing: bool) -> bool:
        tree = self.tree
        for fr, v in usage.items():
            if not allow_borrowing and tree.is_borrowing(cq, fr, v):
                return False
            if v > tree.available(cq, fr):
                return False
        return True

    def _remove(self, info: WorkloadInfo) -> None:
        assert info.cluster_queue is not None
        self.tree.remove_usage(info.cluster_queue, info.usage)

    def _add(self, info: WorkloadInfo) -> None:
        assert info.cluster_queue is not None
        self.tree.add_usage(info.cluster_queue, info.usage)

    def _fill_back(self, targets: list[Target], cq: str, usage: Mapping[FR, int],
                   allow_borrowing: bool) -> list[Target]:
        # The last target is kept: without it the preemptor did not fit.
        for i in range(len(targets) - 2, -1, -1):
            self._add(targets[i].info)
            if self.fits(cq, usage, allow_borrowing):
                del targets[i]
            else:
                self._remove(targets[i].info)
        return targets

    def targets(self, info: WorkloadInfo, frs: set[FR], usage: dict[FR, int]) -> list[Target]:
        """The workloads to evict so that ``usage`` fits in the workload's ClusterQueue; [] when none do."""
        assert info.cluster_queue is not None
        cq = self.cqs[info.cluster_queue]
        node = self.tree.cluster_queue(cq.name)
        contested = frozenset(frs)
        if self._cohorts is not None and not self.fair_sharing:
            found = self._cohorts.classical_targets(info, cq, node, contested, usage)
            if found is not None:
                return found
        ctx = _Ctx(info, cq, node, contested, usage)
        if self.fair_sharing:
            return self._fair_targets(ctx)
        return self._classical_targets(ctx)

    # ---- classical -------------------------------------------------------------------------------------------
    def _classify(self, ctx: _Ctx, cand: WorkloadInfo, advantage: bool) -> Variant | None:
        if not cand.uses_any(ctx.frs):
            return None
        p = ctx.cq.preemption
        same = cand.cluster_queue == ctx.cq.name
        if not priority_allows(p.within_cluster_queue if same else p.reclaim_within_cohort, ctx.info, cand):
            return None
        if same:
            return Variant.WITHIN_CQ
        if advantage:
            return Variant.HIERARCHICAL_RECLAIM
        bwc = p.borrow_within_cohort
        if bwc.policy == "Never" or cand.priority >= ctx.info.priority:
            return Variant.RECLAIM_WITHOUT_BORROWING
        if bwc.max_priority_threshold is not None and cand.priority > bwc.max_priority_threshold:
            return Variant.RECLAIM_WITHOUT_BORROWING
        return Variant.RECLAIM_WHILE_BORROWING

    def _from_cq(self, ctx: _Ctx, cq: str, lca: QuotaNode | None, advantage: bool) -> list[_Candidate]:
        out = []
        p = ctx.cq.preemption
        policy = p.within_cluster_queue if cq == ctx.cq.name else p.reclaim_within_cohort
        for cand in self.admitted.get(cq, {}).values():
            if policy == "LowerPriority" and cand.priority >= ctx.info.priority:
                continue  # the common case, decided before anything costlier
            variant = self._classify(ctx, cand, advantage)
            if variant is not None:
                out.append(_Candidate(cand, lca, variant))
        return out

    def _fit_in_quota(self, node: QuotaNode, requests: Mapping[FR, int]) -> tuple[bool, dict[FR, int]]:
        """Whether ``requests`` fit in the node's guaranteed quota, and what does not."""
        fits = True
        remaining: dict[FR, int] = {}
        for fr, v in requests.items():
            free = max(0, node.subtree_quota(fr) - self.tree.usage(node, fr))
            if v > free:
                fits = False
            remaining[fr] = max(0, v - free)
        return fits, remaining

    def _collect_subtree(self, ctx: _Ctx, current: QuotaNode, root: QuotaNode, skip: QuotaNode | None,
                         advantage: bool, out: list[_Candidate]) -> None:
        # Only subtrees above their quota in the contested flavor-resources hold reclaimable capacity.
        over = self.tree.children_over_quota(current, ctx.frs)
        for child in over:
            if not child.is_cluster_queue and child is not skip:
                self._collect_subtree(ctx, child, root, skip, advantage, out)
        for child in over:
            if child.is_cluster_queue and child is not ctx.node:
                out.extend(self._from_cq(ctx, child.name, root, advantage))

    def _hierarchical(self, ctx: _Ctx) -> tuple[list[_Candidate], list[_Candidate]]:
        hierarchy: list[_Candidate] = []
        by_priority: list[_Candidate] = []
        if ctx.node.parent is None or ctx.cq.preemption.reclaim_within_cohort == "Never":
            return hierarchy, by_priority
        advantage, remaining = self._fit_in_quota(ctx.node, ctx.usage)
        previous: QuotaNode | None = None
        current: QuotaNode | None = ctx.node.parent
        while current is not None:
            self._collect_subtree(ctx, current, current, previous, advantage,
                                  hierarchy if advantage else by_priority)
            fits, remaining = self._fit_in_quota(current, remaining)
            advantage = advantage or fits
            previous, current = current, current.parent
        return hierarchy, by_priority

    def _valid(self, ctx: _Ctx, c: _Candidate, borrowing: bool) -> bool:
        if c.info.cluster_queue == ctx.cq.name:
            return True
        if borrowing and c.variant is Variant.RECLAIM_WITHOUT_BORROWING:
            return False
        assert c.info.cluster_queue is not None
        node: QuotaNode | None = self.tree.cluster_queue(c.info.cluster_queue)
        # The candidate's queue, and each cohort up to where it was found, must still be over quota.
        while node is not None and node is not c.lca:
            if self._within_nominal(node, ctx.frs):
                return False
            node = node.parent
        return True

    def _under_nominal(self, ctx: _Ctx) -> bool:
        return all(self.tree.usage(ctx.node, fr) < ctx.cq.nominal(fr) for fr in ctx.frs)

    def _classical_targets(self, ctx: _Ctx) -> list[Target]:
        same: list[_Candidate] = []
        if ctx.cq.preemption.within_cluster_queue != "Never":
            same = self._from_cq(ctx, ctx.cq.name, None, False)
        hierarchy, by_priority = self._hierarchical(ctx)
        ordered: list[list[_Candidate]] = []
        for group in (hierarchy, by_priority, same):
            group.sort(key=lambda c: candidate_order(c.info, ctx.cq.name))
            ordered.append(group)
        candidates = [c for g in ordered for c in g if c.info.evicting] + [
            c for g in ordered for c in g if not c.info.evicting]
        forbidden = ctx.cq.preemption.borrow_within_cohort.policy == "Never"
        if (not hierarchy and not by_priority) or (forbidden and not self._under_nominal(ctx)):
            attempts: tuple[bool, ...] = (True,)
        elif forbidden and not hierarchy:
            attempts = (False, True)
        else:
            attempts = (True, False)
        for borrowing in attempts:
            found = self._minimal(ctx, candidates, borrowing)
            if found:
                return found
        return []

    def _minimal(self, ctx: _Ctx, candidates: list[_Candidate], borrowing: bool) -> list[Target]:
        tree = self.tree
        mark = tree.checkpoint()
        try:
            targets: list[Target] = []
            for c in candidates:
                if not self._valid(ctx, c, borrowing):
                    continue
                self._remove(c.info)
                targets.append(Target(c.info, c.variant.reason))
                if self.fits(ctx.cq.name, ctx.usage, borrowing):
                    return self._fill_back(targets, ctx.cq.name, ctx.usage, borrowing)
            return []
        finally:
            tree.rollback(mark)

    # ---- fair sharing ----------------------------------------------------------------------------------------
    def _fs_candidates(self, ctx: _Ctx) -> list[WorkloadInfo]:
        p = ctx.cq.preemption
        out: list[WorkloadInfo] = []
        if p.within_cluster_queue != "Never":
            out.extend(c for c in self.admitted.get(ctx.cq.name, {}).values()
                       if c.uses_any(ctx.frs) and priority_allows(p.within_cluster_queue, ctx.info, c))
        if ctx.node.parent is not None and p.reclaim_within_cohort != "Never":
            root = _root(ctx.node)
            # Nothing to reclaim from a queue within its nominal quota: only borrowing ones are looked at.
            for node in self.tree.cluster_queues_over_quota(ctx.frs):
                if node is ctx.node or _root(node) is not root:
                    continue
                out.extend(c for c in self.admitted.get(node.name, {}).values()
                           if c.uses_any(ctx.frs) and priority_allows(p.reclaim_within_cohort, ctx.info, c))
        return out

    def _fair_targets(self, ctx: _Ctx) -> list[Target]:
        candidates = self._fs_candidates(ctx)
        if not candidates:
            return []
        candidates.sort(key=lambda c: candidate_order(c, ctx.cq.name))
        tree = self.tree
        mark = tree.checkpoint()
        try:
            # The preemptor's usage stays simulated while shares are compared, and is taken out again for
            # every fit check.
            tree.add_usage(ctx.cq.name, ctx.usage)
            targets: list[Target] = []
            retry: list[WorkloadInfo] = []
            fits = self._fs_first_strategy(ctx, candidates, targets, retry)
            if not fits and len(self.strategies) > 1:
                fits = self._fs_second_strategy(ctx, retry, targets)
            tree.remove_usage(ctx.cq.name, ctx.usage)
            if not fits:
                return []
            return self._fill_back(targets, ctx.cq.name, ctx.usage, True)
        finally:
            tree.rollback(mark)

    def _fs_fits(self, ctx: _Ctx) -> bool:
        self.tree.remove_usage(ctx.cq.name, ctx.usage)
        try:
            return self.fits(ctx.cq.name, ctx.usage, True)
        finally:
            self.tree.add_usage(ctx.cq.name, ctx.usage)

    def _take(self, ctx: _Ctx, cand: WorkloadInfo, reason: str, targets: list[Target],
              ordering: _TargetOrdering) -> bool:
        self._remove(cand)
        assert cand.cluster_queue is not None
        ordering.changed(self.tree.cluster_queue(cand.cluster_queue))
        targets.append(Target(cand, reason))
        return self._fs_fits(ctx)

    def _fs_first_strategy(self, ctx: _Ctx, candidates: list[WorkloadInfo], targets: list[Target],
                           retry: list[WorkloadInfo]) -> bool:
        ordering = _TargetOrdering(self.tree, ctx.node, candidates)
        first = self.strategies[0]
        for target_cq in ordering:
            if target_cq is ctx.node:
                if self._take(ctx, ordering.pop(target_cq), IN_CLUSTER_QUEUE, targets, ordering):
                    return True
                continue
            preemptor_new, target_old = ordering.shares(target_cq)
            while ordering.has(target_cq):
                cand = ordering.pop(target_cq)
                target_new = self._share_without(ordering, target_cq, cand)
                ok = preemptor_new <= target_new if first == "LessThanOrEqualToFinalShare" else (
                    preemptor_new < target_old)
                if not ok:
                    retry.append(cand)
                    continue
                if self._take(ctx, cand, IN_COHORT_FAIR_SHARING, targets, ordering):
                    return True
                break  # shares changed: pick the target queue again
        return False

    def _fs_second_strategy(self, ctx: _Ctx, retry: list[WorkloadInfo], targets: list[Target]) -> bool:
        ordering = _TargetOrdering(self.tree, ctx.node, retry)
        for target_cq in ordering:
            preemptor_new, target_old = ordering.shares(target_cq)
            cand = ordering.pop(target_cq)
            # LessThanInitialShare does not depend on the candidate: one try per queue.
            if preemptor_new < target_old and self._take(ctx, cand, IN_COHORT_FAIR_SHARING, targets, ordering):
                return True
            ordering.drop(target_cq)
        return False

    def _share_without(self, ordering: _TargetOrdering, target_cq: QuotaNode, cand: WorkloadInfo) -> ShareKey:
        mark = self.tree.checkpoint()
        try:
            self._remove(cand)
            return ordering.shares(target_cq, cached=False)[1]
        finally:
            self.tree.rollback(mark)


def _root(node: QuotaNode) -> QuotaNode:
    while node.parent is not None:
        node = node.parent
    return node


class _TargetOrdering:
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
        self.ancestors: set[int] = set()
        node = preemptor.parent
        while node is not None:
            self.ancestors.add(id(node))
            node = node.parent
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
        root = _root(self.preemptor)
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

    def shares(self, target: QuotaNode, cached: bool = True) -> tuple[ShareKey, ShareKey]:
        """Shares of the preemptor's and the target's almost-least-common-ancestors (the children of their
        lowest common cohort on each side)."""
        path: list[QuotaNode] = []
        node: QuotaNode | None = self.preemptor
        while node is not None:
            path.append(node)
            node = node.parent
        on_path = {id(n): i for i, n in enumerate(path)}
        t: QuotaNode = target
        while t.parent is not None and id(t.parent) not in on_path:
            t = t.parent
        lca = t.parent
        assert lca is not None, "target and preemptor are in the same cohort tree"
        p_almost = path[on_path[id(lca)] - 1]
        return self._key(p_almost, cached), self._key(t, cached)
