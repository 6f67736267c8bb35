"""Classical preemption targets for every head of a cohort, sharing the work between them (§1.12, issue 15 #7).

Kueue's search (:meth:`Preemptor._classical_targets <gpufleet.scheduling.kueue.preemption.Preemptor>`, kept as the
reference) runs once per head: it lists and sorts every candidate of the over-quota queues of the cohort, removes
them greedily until the head fits, then adds back every one whose removal turned out unnecessary. With H heads
and C candidates in a cohort that is O(H·C) quota-tree updates per cycle, and a head that needs a queue of its
own to shrink first walks every other candidate before it gets there.

All heads of a cycle are nominated against one snapshot, so most of that work is the same for every head of the
cohort. :class:`CohortSearch` lives for one nomination and shares it:

* **One candidate list per cohort tree and contested flavor-resources**, merged from each ClusterQueue's
  admitted workloads, which :class:`~gpufleet.scheduling.kueue.admitted.AdmittedQueue` keeps in candidate order
  as they come and go (no sort per head).
* **One greedy run per list and priority cut.** A candidate of another queue stays valid while its queue (and
  each cohort up to the tree's root) is still above its quota, which depends only on the candidates removed
  before it, never on the head. Which candidates a head may take is a prefix of the list in priority order
  (reclaimWithinCohort: LowerPriority, borrowWithinCohort's threshold), so the valid removals and their
  cumulative usage are computed once per cut and shared.
* **Per head, binary searches.** Without lending limits in the tree a removal frees its usage at the root, so
  whether the head fits after the first k removals is a monotone function of k read from prefix sums: the
  greedy stop is found by bisection, and the add-back pass takes whole blocks at a time (a block of candidates
  can all be added back exactly when their sum still fits), paying a bisection per candidate it keeps.
  The head's own queue (withinClusterQueue) is walked candidate by candidate, as Kueue does.

The result is the reference search's, target for target and reason for reason; a property test compares them on
random cohorts. Heads this model does not cover return None and the caller runs the reference search: a queue
without cohort, a queue below the root of a deeper tree, lending limits in the tree, an unknown resource.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gpufleet.scheduling.kueue.admitted import AdmittedQueue
from gpufleet.scheduling.kueue.config import CQSpec
from gpufleet.scheduling.kueue.info import WorkloadInfo
from gpufleet.scheduling.kueue.preemption_order import (
    IN_CLUSTER_QUEUE,
    Standing,
    Target,
    priority_allows,
    reclaim_variant,
)
from gpufleet.scheduling.quota import FR, QuotaNode, QuotaTree

_NO_CUT = math.inf


@dataclass(slots=True)
class _Part:
    """Candidates of a cohort list that are all evicted or all not, in standing order."""

    infos: list[WorkloadInfo] = field(default_factory=list)
    priorities: list[int] = field(default_factory=list)
    queues: list[int] = field(default_factory=list)  # ClusterQueue node id of each candidate


@dataclass(slots=True)
class _CohortList:
    """Every candidate of a cohort tree's over-quota queues that uses one of ``frs``, in Kueue's order."""

    frs: frozenset[FR]
    evicted: _Part
    rest: _Part
    # ClusterQueue id -> the queue and the cohorts above it, up to the root (exclusive): the nodes that must still
    # be over quota for one of its candidates to be taken.
    paths: dict[int, tuple[QuotaNode, ...]]
    # ClusterQueue id -> priorities of its candidates in the list (sorted), to count a head's own.
    priorities_of: dict[int, list[int]]

    def count_below(self, cut: float) -> int:
        return bisect_left(self.evicted.priorities, cut) + bisect_left(self.rest.priorities, cut)

    def count_of(self, queue: int, cut: float) -> int:
        found = self.priorities_of.get(queue)
        return 0 if found is None else bisect_left(found, cut)


@dataclass(slots=True)
class _Run:
    """The greedy removals of a cohort list cut at a priority, as if no head were involved: the candidates that
    are still valid when reached, evicted ones first, with cumulative usage per flavor-resource."""

    infos: list[WorkloadInfo]
    queues: list[int]
    n_evicted: int  # the first n_evicted entries come from the evicted part
    _prefix: dict[FR, list[int]] = field(default_factory=dict)
    _positions: dict[int, list[int]] | None = None

    def prefix(self, fr: FR) -> list[int]:
        found = self._prefix.get(fr)
        if found is None:
            acc = 0
            found = [0]
            for info in self.infos:
                acc += info.usage.get(fr, 0)
                found.append(acc)
            self._prefix[fr] = found
        return found

    def positions(self, queue: int) -> list[int]:
        if self._positions is None:
            by_queue: dict[int, list[int]] = {}
            for pos, q in enumerate(self.queues):
                by_queue.setdefault(q, []).append(pos)
            self._positions = by_queue
        return self._positions.get(queue, [])


@dataclass(slots=True)
class _Quota:
    """What decides whether the head fits for one flavor-resource of its request."""

    fr: FR
    want: int
    nominal: int
    declared: bool
    root_quota: int
    local: int
    cap: int | None
    prefix: list[int]  # others' cumulative usage in the run, from 0 ([0] without a run)
    own_prefix: list[int]  # the head's own queue's entries of the run, cumulative


class CohortSearch:
    """Shared candidate lists and greedy runs for the heads of one nomination (one quota snapshot)."""

    def __init__(self, tree: QuotaTree, admitted: Mapping[str, AdmittedQueue]) -> None:
        self.tree = tree
        self.admitted = admitted
        self._lists: dict[tuple[int, frozenset[FR]], _CohortList] = {}
        self._runs: dict[tuple[int, frozenset[FR], float], _Run] = {}
        self._lending: dict[tuple[int, FR], set[int]] = {}

    # ---- shared per cohort -------------------------------------------------------------------------------
    def _lenders(self, root: QuotaNode, fr: FR) -> set[int]:
        """Nodes of the root's tree with a local (never lent) quota for ``fr``."""
        key = (root.id, fr)
        found = self._lending.get(key)
        if found is None:
            found = set()
            stack = list(root.children)
            while stack:
                n = stack.pop()
                if n.local_quota(fr) > 0:
                    found.add(n.id)
                stack.extend(n.children)
            self._lending[key] = found
        return found

    def _cohort_list(self, root: QuotaNode, frs: frozenset[FR]) -> _CohortList:
        key = (root.id, frs)
        found = self._lists.get(key)
        if found is not None:
            return found
        tree = self.tree
        paths: dict[int, tuple[QuotaNode, ...]] = {}
        stack: list[tuple[QuotaNode, tuple[QuotaNode, ...]]] = [(root, ())]
        while stack:  # Kueue collects only through nodes above their quota in a contested flavor-resource
            current, above = stack.pop()
            for child in tree.children_over_quota(current, frs):
                path = (child, *above)
                if child.is_cluster_queue:
                    paths[child.id] = path
                else:
                    stack.append((child, path))
        evicted: list[tuple[Standing, WorkloadInfo, int]] = []
        rest: list[tuple[Standing, WorkloadInfo, int]] = []
        priorities_of: dict[int, list[int]] = {}
        for qid, path in paths.items():
            queue = self.admitted[path[0].name]
            prios = []
            for s, info in zip(queue.standings(), queue.ordered(), strict=True):
                if info.uses_any(frs):
                    (evicted if info.evicting else rest).append((s, info, qid))
                    prios.append(s[0])
            priorities_of[qid] = prios
        parts = []
        for items in (evicted, rest):
            items.sort(key=lambda item: item[0])  # sorted runs per queue: the sort merges them
            parts.append(_Part([i for _, i, _ in items], [s[0] for s, _, _ in items], [q for _, _, q in items]))
        found = self._lists[key] = _CohortList(frs, parts[0], parts[1], paths, priorities_of)
        return found

    def _run(self, cohort: _CohortList, cut: float) -> _Run:
        key = (id(cohort), cohort.frs, cut)
        found = self._runs.get(key)
        if found is not None:
            return found
        frs = sorted(cohort.frs)
        tree = self.tree
        usage: dict[int, list[int]] = {}
        quota: dict[int, list[int]] = {}
        for path in cohort.paths.values():
            for n in path:
                if n.id not in usage:
                    usage[n.id] = [tree.usage(n, fr) for fr in frs]
                    quota[n.id] = [n.subtree_quota(fr) for fr in frs]
        infos: list[WorkloadInfo] = []
        queues: list[int] = []
        n_evicted = 0
        for part in (cohort.evicted, cohort.rest):
            for i in range(bisect_left(part.priorities, cut)):
                path = cohort.paths[part.queues[i]]
                # Valid while its queue and every cohort up to the root are still above quota (Kueue's check).
                if not all(any(u > q for u, q in zip(usage[n.id], quota[n.id], strict=True)) for n in path):
                    continue
                info = part.infos[i]
                amounts = [info.usage.get(fr, 0) for fr in frs]
                for n in path:  # without lending limits a removal lowers every node up the path by its usage
                    used = usage[n.id]
                    for f, a in enumerate(amounts):
                        used[f] -= a
                infos.append(info)
                queues.append(part.queues[i])
            if part is cohort.evicted:
                n_evicted = len(infos)
        found = self._runs[key] = _Run(infos, queues, n_evicted)
        return found

    # ---- one head ----------------------------------------------------------------------------------------
    def classical_targets(self, info: WorkloadInfo, cq: CQSpec, node: QuotaNode, frs: frozenset[FR],
                          usage: Mapping[FR, int]) -> list[Target] | None:
        """The reference search's targets for this head, or None when the head is outside this model."""
        root = node.parent
        if root is None or root.parent is not None or node.disabled:
            return None
        tree = self.tree
        p = info.priority
        policy = cq.preemption
        same_evicted: list[WorkloadInfo] = []
        same_rest: list[WorkloadInfo] = []
        within = policy.within_cluster_queue
        if within != "Never":
            for cand in self.admitted[cq.name].ordered():
                if cand.priority > p:
                    break  # ordered by priority first: no later one is allowed (LowerPriority, LowerOrNewer...)
                if cand.uses_any(frs) and priority_allows(within, info, cand):
                    (same_evicted if cand.evicting else same_rest).append(cand)
        reclaim = policy.reclaim_within_cohort
        cohort: _CohortList | None = None
        cut = _NO_CUT
        advantage = False
        if reclaim != "Never":
            if reclaim not in ("LowerPriority", "Any"):
                return None
            cut = p if reclaim == "LowerPriority" else _NO_CUT
            cohort = self._cohort_list(root, frs)
            if cohort.count_below(cut) - cohort.count_of(node.id, cut) <= 0:
                cohort = None
            else:  # Kueue's hierarchical advantage: the request fits in the queue's own unused quota
                advantage = True
                for fr, v in usage.items():
                    if v > max(0, node.subtree_quota(fr) - tree.usage(node, fr)):
                        advantage = False
                        break
        own = bool(same_evicted or same_rest)
        if cohort is None and not own:
            return []  # nothing to take: every attempt finds nothing
        forbidden = policy.borrow_within_cohort.policy == "Never"
        under_nominal = all(tree.usage(node, fr) < cq.nominal(fr) for fr in frs)
        if cohort is None or (forbidden and not under_nominal):
            attempts: tuple[bool, ...] = (True,)
        elif forbidden and not advantage:
            attempts = (False, True)
        else:
            attempts = (True, False)
        linear: bool | None = None
        for borrowing in attempts:
            run: _Run | None = None
            if cohort is not None:
                run_cut = cut if advantage or not borrowing else self._borrowing_cut(cq, p, cut)
                if run_cut is not None:
                    run = self._run(cohort, run_cut)
                    if not run.infos:
                        run = None
            if run is None and not own:
                continue  # nothing this attempt may take
            if run is not None:
                if linear is None:
                    linear = self._linear(root, node, (*usage, *frs))
                if not linear:
                    return None  # a lending limit makes a removal free less than its usage at the root
            found = _Head(self, info, cq, node, root, usage, borrowing, run, advantage).search(same_evicted,
                                                                                               same_rest)
            if found:
                return found
        return []

    def _linear(self, root: QuotaNode, node: QuotaNode, frs: tuple[FR, ...]) -> bool:
        """No lending limit in the tree but perhaps the head's own queue's, for these flavor-resources: removing a
        candidate of another queue then lowers the root's usage by exactly the candidate's usage."""
        for fr in frs:
            lenders = self._lenders(root, fr)
            if lenders and (len(lenders) > 1 or node.id not in lenders):
                return False
        return True

    @staticmethod
    def _borrowing_cut(cq: CQSpec, p: int, cut: float) -> float | None:
        """While borrowing, only RECLAIM_WHILE_BORROWING candidates are valid: borrowWithinCohort LowerPriority,
        a lower priority than the head's, at most the threshold. None: no candidate of another queue is."""
        bwc = cq.preemption.borrow_within_cohort
        if bwc.policy != "LowerPriority":
            return None
        limit = min(cut, p)
        if bwc.max_priority_threshold is not None:
            limit = min(limit, bwc.max_priority_threshold + 1)
        return limit


def _first_true(lo: int, hi: int, pred: Callable[[int], bool]) -> int:
    """The smallest x in [lo, hi] with pred(x), pred being monotone (false, then true) and true at hi: an
    exponential search from lo, then bisection, so that an answer near lo costs few evaluations."""
    step = 1
    below = lo - 1  # largest x known false (lo - 1: none yet)
    x = lo
    while x < hi and not pred(x):
        below = x
        x = min(hi, x + step)
        step *= 2
    lo, hi = below + 1, x
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


class _Head:
    """One attempt of one head: the greedy removals, then the add-back pass, on the shared run."""

    def __init__(self, search: CohortSearch, info: WorkloadInfo, cq: CQSpec, node: QuotaNode, root: QuotaNode,
                 usage: Mapping[FR, int], borrowing: bool, run: _Run | None, advantage: bool) -> None:
        tree = search.tree
        self.info = info
        self.cq = cq
        self.borrowing = borrowing
        self.run = run
        self.advantage = advantage
        own = run.positions(node.id) if run is not None else []
        self.own = own  # the head's own queue's entries of the run: never taken as another queue's
        self.quotas: list[_Quota] = []
        for fr, v in usage.items():
            q = node.quotas.get(fr)
            local = node.local_quota(fr)
            cap = None
            if q is not None and q.borrowing_limit is not None:
                cap = node.subtree_quota(fr) - local + q.borrowing_limit
            prefix = run.prefix(fr) if run is not None else [0]
            own_prefix = [0]
            for pos in own:
                own_prefix.append(own_prefix[-1] + (prefix[pos + 1] - prefix[pos]))
            self.quotas.append(_Quota(fr, v, node.nominal(fr), q is not None, root.subtree_quota(fr), local, cap,
                                      prefix, own_prefix))
        # Usage of the root and of the head's queue with only the head's own removals applied; what other queues'
        # removals free is read from the run's prefix sums.
        self.root_usage = [tree.usage(root, q.fr) for q in self.quotas]
        self.own_usage = [tree.usage(node, q.fr) for q in self.quotas]

    # ---- quota arithmetic ----------------------------------------------------------------------------------
    def _freed(self, k: int) -> list[int]:
        """What other queues' candidates at run positions below k free, per flavor-resource of the request."""
        c = bisect_left(self.own, k)
        return [q.prefix[k] - q.own_prefix[c] for q in self.quotas]

    def _fits(self, freed: list[int]) -> bool:
        """QuotaTree.fits of the request, the root's usage lowered by ``freed`` (Preemptor.fits's rules)."""
        for f, q in enumerate(self.quotas):
            pu = self.own_usage[f]
            if not self.borrowing and pu + q.want > q.nominal:
                return False
            if not q.declared:
                a = 0
            else:
                a = q.root_quota - (self.root_usage[f] - freed[f])
                if q.cap is not None:
                    limit = q.cap - (pu - q.local if pu > q.local else 0)
                    if limit < a:
                        a = limit
                if q.local > pu:
                    a += q.local - pu
            if q.want > (a if a > 0 else 0):
                return False
        return True

    def _remove_own(self, cand: WorkloadInfo) -> None:
        """QuotaTree.remove_usage for a candidate of the head's own queue: its local quota keeps what it can."""
        used = cand.usage
        for f, q in enumerate(self.quotas):
            v = used.get(q.fr, 0)
            if not v:
                continue
            u = self.own_usage[f]
            self.own_usage[f] = u - v
            stored = u - q.local
            if stored > 0:
                self.root_usage[f] -= v if v < stored else stored

    def _add_own(self, cand: WorkloadInfo) -> None:
        """QuotaTree.add_usage: the queue's unused local quota absorbs first, the rest reaches the root."""
        used = cand.usage
        for f, q in enumerate(self.quotas):
            v = used.get(q.fr, 0)
            if not v:
                continue
            u = self.own_usage[f]
            self.own_usage[f] = u + v
            free = q.local - u
            if free < 0:
                free = 0
            if v > free:
                self.root_usage[f] += v - free

    # ---- the search ----------------------------------------------------------------------------------------
    def _first_eligible(self, start: int, end: int) -> int | None:
        c = bisect_left(self.own, start)
        pos = start
        while pos < end and c < len(self.own) and self.own[c] == pos:
            pos += 1
            c += 1
        return pos if pos < end else None

    def search(self, same_evicted: list[WorkloadInfo], same_rest: list[WorkloadInfo]) -> list[Target]:
        run = self.run
        n_run = len(run.infos) if run is not None else 0
        n_evicted = run.n_evicted if run is not None else 0
        # The greedy order: others' evicted, own evicted, others' not evicted, own not evicted.
        segments: list[tuple[int, int] | list[WorkloadInfo]] = [(0, n_evicted), same_evicted, (n_evicted, n_run),
                                                                same_rest]
        taken: list[tuple[int, int] | list[WorkloadInfo]] = []
        k = 0  # run positions below k are removed
        fitted = False
        for seg in segments:
            if isinstance(seg, tuple):
                start, end = seg
                first = self._first_eligible(start, end)
                if first is None:
                    continue
                if not self._fits(self._freed(end)):
                    taken.append((start, end))
                    k = end
                    continue
                # The first k in [first + 1, end] after which the head fits; it fits at end.
                k = _first_true(first + 1, end, lambda j: self._fits(self._freed(j)))
                taken.append((start, k))
                fitted = True
                break
            removed: list[WorkloadInfo] = []
            for cand in seg:
                self._remove_own(cand)
                removed.append(cand)
                if self._fits(self._freed(k)):
                    fitted = True
                    break
            if removed:
                taken.append(removed)
            if fitted:
                break
        if not fitted:
            return []
        return self._fill_back(taken, k)

    def _fill_back(self, taken: list[tuple[int, int] | list[WorkloadInfo]], k: int) -> list[Target]:
        """Kueue's add-back in reverse removal order, the last removal excluded; returns what stays removed."""
        freed = self._freed(k)
        kept: list[list[WorkloadInfo] | list[int]] = []
        for idx in range(len(taken) - 1, -1, -1):
            seg = taken[idx]
            last = idx == len(taken) - 1
            if isinstance(seg, tuple):
                start, end = seg
                top = end - 1
                if last:
                    top = self._last_eligible_below(end) - 1  # the removal that made it fit stays
                kept.append(self._fill_back_others(start, top, freed))
            else:
                stay: list[WorkloadInfo] = []
                items = seg[:-1] if last else seg
                for cand in reversed(items):
                    self._add_own(cand)
                    if self._fits(freed):
                        continue
                    self._remove_own(cand)
                    stay.append(cand)
                stay.reverse()
                kept.append(stay)
        kept.reverse()
        out: list[Target] = []
        for idx, seg in enumerate(taken):
            if isinstance(seg, tuple):
                positions = kept[idx]
                assert self.run is not None
                for pos in positions:
                    assert isinstance(pos, int)
                    out.append(self._other_target(self.run.infos[pos]))
                if idx == len(taken) - 1:
                    out.append(self._other_target(self.run.infos[self._last_eligible_below(seg[1])]))
            else:
                out.extend(Target(c, IN_CLUSTER_QUEUE) for c in kept[idx] if isinstance(c, WorkloadInfo))
                if idx == len(taken) - 1:
                    out.append(Target(seg[-1], IN_CLUSTER_QUEUE))
        return out

    def _last_eligible_below(self, end: int) -> int:
        pos = end - 1
        c = bisect_left(self.own, end) - 1
        while c >= 0 and self.own[c] == pos:
            pos -= 1
            c -= 1
        return pos

    def _fill_back_others(self, start: int, top: int, freed: list[int]) -> list[int]:
        """Add back other queues' candidates at positions top..start, newest removal first. A block of them is
        added back at once when the head still fits with all of it back: exactly when adding them one by one
        would have kept every one back. ``freed`` is updated in place; returns the positions that stay removed,
        ascending."""
        stay: list[int] = []
        i = top
        while i >= start:
            upper = self._freed(i + 1)

            def fits_with_back(j: int, upper: list[int] = upper) -> bool:
                lower = self._freed(j)
                return self._fits([fr - (u - lo) for fr, u, lo in zip(freed, upper, lower, strict=True)])

            # The smallest j such that positions j..i can all come back; j = i + 1 (none) always can. What stays
            # removed is usually among the first candidates, so the search starts from there.
            lo = _first_true(start, i + 1, fits_with_back)
            lower = self._freed(lo)
            for f in range(len(freed)):
                freed[f] -= upper[f] - lower[f]
            if lo == start:
                break
            stay.append(lo - 1)  # adding it back would not fit: it stays removed
            i = lo - 2
        stay.reverse()
        return stay

    def _other_target(self, cand: WorkloadInfo) -> Target:
        variant = reclaim_variant(self.cq.preemption, self.info.priority, cand.priority, self.advantage)
        return Target(cand, variant.reason)
