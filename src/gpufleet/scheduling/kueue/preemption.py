"""Preemption target search (§1.12 classical, §1.13 fair sharing) against the cycle's quota snapshot.

The searches here are the straightforward ones, Kueue's algorithm step by step: they simulate evictions on the
live :class:`QuotaTree` inside a checkpoint and leave it as they found it. Candidates are admitted workloads
that use a flavor-resource needing preemption; the search removes them greedily in candidate order until the
preemptor fits, then adds back (newest first, the last one excluded) every one whose removal turned out
unnecessary, leaving a minimal set.

During a cycle's nomination (:meth:`Preemptor.nomination`) the work is shared between the heads, with the same
targets: the classical search of a head in a cohort is answered by
:class:`~gpufleet.scheduling.kueue.cohort_search.CohortSearch`; the fair-sharing search reads the snapshot's shares
once for all heads (:class:`~gpufleet.scheduling.kueue.target_ordering.SharedTargetOrdering`), and in a flat cohort
passes the target queues where it would change nothing in bulk
(:mod:`~gpufleet.scheduling.kueue.flat_fair_search`). ``Preemptor.shared = False`` keeps the straightforward
searches everywhere (the baseline of ``bench/kueue_cycles.py`` and the reference of the property tests).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from gpufleet.api.objects import FairSharingStrategy
from gpufleet.scheduling.kueue.admitted import AdmittedQueue
from gpufleet.scheduling.kueue.cohort_search import CohortSearch
from gpufleet.scheduling.kueue.config import CQSpec
from gpufleet.scheduling.kueue.flat_fair_search import FlatFairSearch
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
    reclaim_variant,
)
from gpufleet.scheduling.kueue.search_reads import SearchReads
from gpufleet.scheduling.kueue.target_ordering import (
    SharedTargetOrdering,
    ShareKey,
    SnapshotShares,
    TargetOrdering,
    root_of,
    touch,
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
    # Nodes whose usage this search has changed from the snapshot's (fair sharing: their shares are its own).
    touched: dict[int, QuotaNode] = field(default_factory=dict)


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
        # Fair sharing: every node's share in the nomination's snapshot, computed once for all heads, and the
        # searches in flat cohorts that build on it.
        self._snapshot_shares: SnapshotShares | None = None
        self._flat: FlatFairSearch | None = None

    @contextmanager
    def nomination(self) -> Iterator[None]:
        """A cycle's nomination: every search inside sees one quota snapshot and the same admitted workloads
        (searches leave the tree as they found it), so work is shared between them. Nothing may admit, release
        or evict inside."""
        self._cohorts = CohortSearch(self.tree, self.admitted) if self.shared else None
        self._snapshot_shares = SnapshotShares(self.tree) if self.shared else None
        self._flat = (FlatFairSearch(self.tree, self.admitted, self._snapshot_shares, self.strategies)
                      if self._snapshot_shares is not None and self.fair_sharing else None)
        try:
            yield
        finally:
            self._cohorts = None
            self._snapshot_shares = None
            self._flat = None

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

    def targets(self, info: WorkloadInfo, frs: set[FR], usage: dict[FR, int],
                reads: SearchReads | None = None) -> list[Target]:
        """The workloads to evict so that ``usage`` fits in the workload's ClusterQueue; [] when none do.
        ``reads`` gets what the search read beyond values (:mod:`~gpufleet.scheduling.kueue.search_reads`): only
        the fair-sharing walk of a flat cohort tells; every other search marks it opaque."""
        assert info.cluster_queue is not None
        cq = self.cqs[info.cluster_queue]
        node = self.tree.cluster_queue(cq.name)
        contested = frozenset(frs)
        if self._cohorts is not None and not self.fair_sharing:
            found = self._cohorts.classical_targets(info, cq, node, contested, usage)
            if found is not None:
                if reads is not None:
                    reads.opaque = True
                return found
        ctx = _Ctx(info, cq, node, contested, usage)
        if self.fair_sharing:
            return self._fair_targets(ctx, reads)
        if reads is not None:
            reads.opaque = True
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
        return reclaim_variant(p, ctx.info.priority, cand.priority, advantage)

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
            root = root_of(ctx.node)
            # Nothing to reclaim from a queue within its nominal quota: only borrowing ones are looked at.
            for node in self.tree.cluster_queues_over_quota(ctx.frs):
                if node is ctx.node or root_of(node) is not root:
                    continue
                out.extend(c for c in self.admitted.get(node.name, {}).values()
                           if c.uses_any(ctx.frs) and priority_allows(p.reclaim_within_cohort, ctx.info, c))
        return out

    def _fs_candidates_in_queue_order(self, ctx: _Ctx, snapshot: SnapshotShares) -> list[WorkloadInfo]:
        """:meth:`_fs_candidates` in Kueue's candidate order within each queue, which is all the fair-sharing
        search reads of the order (it takes candidates queue by queue): read from the queues' ordered lists, the
        queues above quota listed once per nomination."""
        p = ctx.cq.preemption
        out: list[WorkloadInfo] = []

        def take(queue: AdmittedQueue, policy: str) -> None:
            kept = [c for c in queue.ordered() if c.uses_any(ctx.frs) and priority_allows(policy, ctx.info, c)]
            out.extend(c for c in kept if c.evicting)
            out.extend(c for c in kept if not c.evicting)

        if p.within_cluster_queue != "Never":
            take(self.admitted[ctx.cq.name], p.within_cluster_queue)
        if ctx.node.parent is not None and p.reclaim_within_cohort != "Never":
            for node in snapshot.over_quota(root_of(ctx.node), ctx.frs):
                if node is not ctx.node:
                    take(self.admitted[node.name], p.reclaim_within_cohort)
        return out

    def _fair_targets(self, ctx: _Ctx, reads: SearchReads | None = None) -> list[Target]:
        if self._snapshot_shares is not None and ctx.node.parent is not None:
            root = root_of(ctx.node)
            self._snapshot_shares.prepare(root)  # while the tree is still the snapshot
            if self._flat is not None and self._flat.is_flat(root):
                return self._flat_fair_targets(ctx, root, self._flat, reads)
            candidates = self._fs_candidates_in_queue_order(ctx, self._snapshot_shares)
        else:
            candidates = self._fs_candidates(ctx)
            candidates.sort(key=lambda c: candidate_order(c, ctx.cq.name))
        if reads is not None:
            reads.opaque = True  # the shared walk of target_ordering ranks the asker's own queue by position
        if not candidates:
            return []
        tree = self.tree
        mark = tree.checkpoint()
        try:
            # The preemptor's usage stays simulated while shares are compared, and is taken out again for
            # every fit check.
            tree.add_usage(ctx.cq.name, ctx.usage)
            touch(ctx.touched, ctx.node)
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

    def _flat_fair_targets(self, ctx: _Ctx, root: QuotaNode, flat: FlatFairSearch,
                           reads: SearchReads | None = None) -> list[Target]:
        """:meth:`_fair_targets` in a flat cohort. The preemptor's usage is never put in the tree: in a flat cohort
        only its own queue's share reads it (the walk adds it there as an extra), and every fit check takes it out
        again."""
        walk = flat.head(ctx.info, ctx.node, root, ctx.frs, ctx.usage, ctx.cq.preemption, reads)
        if walk is None:
            return []
        tree = self.tree
        mark = tree.checkpoint()
        try:
            targets: list[Target] = []
            if not walk.run(targets, lambda: self.fits(ctx.cq.name, ctx.usage, True)):
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
              ordering: TargetOrdering) -> bool:
        self._remove(cand)
        assert cand.cluster_queue is not None
        ordering.changed(self.tree.cluster_queue(cand.cluster_queue))
        targets.append(Target(cand, reason))
        return self._fs_fits(ctx)

    def _fs_first_strategy(self, ctx: _Ctx, candidates: list[WorkloadInfo], targets: list[Target],
                           retry: list[WorkloadInfo]) -> bool:
        ordering = self._ordering(ctx, candidates)
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
        ordering = self._ordering(ctx, retry)
        for target_cq in ordering:
            preemptor_new, target_old = ordering.shares(target_cq)
            cand = ordering.pop(target_cq)
            # LessThanInitialShare does not depend on the candidate: one try per queue.
            if preemptor_new < target_old and self._take(ctx, cand, IN_COHORT_FAIR_SHARING, targets, ordering):
                return True
            ordering.drop(target_cq)
        return False

    def _ordering(self, ctx: _Ctx, candidates: list[WorkloadInfo]) -> TargetOrdering:
        if self._snapshot_shares is None:
            return TargetOrdering(self.tree, ctx.node, candidates)
        return SharedTargetOrdering(self.tree, ctx.node, candidates, self._snapshot_shares, ctx.touched)

    def _share_without(self, ordering: TargetOrdering, target_cq: QuotaNode, cand: WorkloadInfo) -> ShareKey:
        def compute() -> ShareKey:
            mark = self.tree.checkpoint()
            try:
                self._remove(cand)
                return ordering.shares(target_cq, cached=False)[1]
            finally:
                self.tree.rollback(mark)

        if isinstance(ordering, SharedTargetOrdering):
            return ordering.share_without(target_cq, cand, compute)
        return compute()
