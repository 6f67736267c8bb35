"""Nominations remembered between heads and between cycles (issue 15 item 7).

A head's nomination (its flavor assignment, its preemption targets and the message that explains it) is a
function of the quota snapshot of its cohort tree, of its ClusterQueue, and of the head's own requests. Kueue
itself only re-tries an inadmissible workload once something in its cohort has changed (its queue manager's
``QueueInadmissibleWorkloads``), but every new head is nominated, and a cycle nominates one head per queue: at
5,000 ClusterQueues that is 5,000 flavor assignments and preemption searches per cycle, most of them for the same
few workload shapes against the same queues. :class:`NominationMemo` answers a head from an earlier nomination
made with the same inputs:

* **the cohort tree unchanged**: its generation (:meth:`QuotaTree.generation`) counts every lasting usage change
  in the tree (admissions, releases) and every eviction begun there (:meth:`QuotaTree.note_change`); a tree's
  remembered nominations are dropped when it moves on;
* **the same ClusterQueue, or one like it**: a queue is described by its spec without its name (cohort, resource
  groups, quotas, preemption and fungibility) and its usage of every flavor-resource, provided nothing else of it
  can be read (:func:`reads_only_own_candidates` below): fair sharing is off (the target walk breaks ties by a
  queue's position among its siblings), and either the queue is above its quota nowhere, or none of its heads'
  searches reads another queue's candidates (under fair sharing, a nomination that ran no preemption search at all
  is also remembered by spec and usage: nothing else of the queue was read). Its own workloads a head could
  preempt (withinClusterQueue: those of lower priority, or of lower or equal priority under
  LowerOrNewerEqualPriority) are then described by value, in the queue's candidate order
  (:meth:`AdmittedQueue.value_ids`: priority, whether being evicted, usage; and for equal-priority ones under
  LowerOrNewerEqualPriority whether the head is older), at most
  :data:`MAX_OWN_BY_VALUE` of them; its other workloads count only through its usage. Targets among them are
  remembered by position in that order and mapped to the asking queue's own workloads. Otherwise the queue's name
  is part of the key (but see fair sharing below);
* **the same head**: the requests of each pod set (count, minimum count, per-pod quota amounts), what flavor
  selection reads of its pod template (node selector, required affinity, tolerations, topology request), its
  priority, queue timestamp where a policy reads it, and where its last flavor search stopped.

**Under fair sharing** the walk's answer may read which queue asked (a queue's position among its siblings breaks
ties of share). A nomination that ran no preemption search is keyed by spec and usage (above). One whose searches
were all answered by the walk of a flat cohort (:mod:`~gpufleet.scheduling.kueue.search_reads`) read of the asking
queue its spec, usage and own candidates (by value, as above), its position only where its own node was ranked
against queues of equal share, and of the others the places its walks stopped at: it is keyed as without fair
sharing and handed to any queue alike that is not among those places' queues and whose position lies within the
bounds the walk recorded (the asking queue's own place among the stops means it is kept under its name). For two
queues alike so, each one's walk stops at the same places in the same order and reads the same there; where the
walk did not stop, what it passes over is decided by values alike for both (the candidates' shares, the
preemptor's share). ``tests/kueue/test_alike_fair_nominations.py`` compares with nominating every head afresh.

**When a queue above its quota is described by value.** Its workloads are candidates of the other queues'
searches, so two such queues never read the same cohort candidate list (each leaves out its own and sees the
other's). A head's nomination reads that list only through the classical preemption search (§1.12), and the
search takes no candidate of another queue when

* reclaimWithinCohort is Never, or the queue has no cohort (Kueue collects no cohort candidates at all); or
* borrowWithinCohort is Never, the queue's parent is its tree's root, and the queue's usage is at or above its
  nominal quota in every flavor-resource it declares. Then for every search of its heads (each contests at least
  one flavor-resource, with a positive request): the queue is not under nominal in the contested ones, so Kueue
  makes a single attempt, allowing borrowing (``classicalPreemptionStrategy`` in Kueue's
  ``pkg/scheduler/preemption/classical_strategy.go``: ``borrowWithinCohortForbidden &&
  !queueUnderNominalInResourcesNeedingPreemption``); the request does not fit in the queue's unused nominal quota
  (there is none), so it has no hierarchical advantage over the cohort's candidates, and with the parent being the
  root there is no higher level where it could gain one; every candidate of another queue is therefore
  ReclaimWithoutBorrowing, which an attempt that allows borrowing skips (``candidateIsValid`` in
  ``classical/candidate_generator.go``). Only the queue's own candidates can be taken.

In both cases the nomination is a function of the tree's state (its generation), the queue's spec and usage, its
own candidates by value and the head: queues alike in these share it. Our searches read the same
(``Preemptor._classical_targets``: ``forbidden and not self._under_nominal(ctx)`` gives one attempt with borrowing,
``_valid`` skips RECLAIM_WITHOUT_BORROWING then; ``CohortSearch.classical_targets``: no run without
borrowWithinCohort when borrowing). Below the root (a nested cohort) a queue above its quota keeps its name.

``Cycle`` asks the memo only when ``SchedulerState.memo`` is set (the default); a property test compares cycles with
and without it on random setups (``tests/kueue/test_nomination_memo.py``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Collection, Hashable, Mapping
from dataclasses import dataclass

from gpufleet.scheduling.kueue.admitted import AdmittedQueue
from gpufleet.scheduling.kueue.config import CQSpec
from gpufleet.scheduling.kueue.flavors import Assignment
from gpufleet.scheduling.kueue.info import WorkloadInfo
from gpufleet.scheduling.kueue.interner import Interner
from gpufleet.scheduling.kueue.preemption_order import Target
from gpufleet.scheduling.kueue.search_reads import SearchReads
from gpufleet.scheduling.quota import QuotaTree

# Own workloads described by value at most this many (a key holds one small integer per workload); a queue with
# more is keyed by its name.
MAX_OWN_BY_VALUE = 256
# Nominations remembered per cohort tree and generation at most; past it the tree's table starts afresh.
MAX_PER_TREE = 4096
# Head shapes interned per memo at most; past it the table starts afresh (ids are never reused).
MAX_SHAPES = 65536

_NEVER = "Never"
_NEWER = "LowerOrNewerEqualPriority"
# Marks the key of a nomination that ran no preemption search, under fair sharing (NominationMemo.lookup).
_SEARCHLESS = "searchless"
# ... of one whose searches read no queue's identity, shared by value (NominationMemo._fair_lookup).
_ALIKE = "alike"


@dataclass(frozen=True, slots=True)
class Nomination:
    """A head's nomination as the cycle uses it. ``own`` holds, for each target, its position among the asking
    queue's candidates described by value (-1: the target itself, a workload of another queue or of a queue
    keyed by name)."""

    assignment: Assignment
    targets: tuple[Target, ...]
    own: tuple[int, ...]
    message: str
    made_for: str  # the ClusterQueue whose head it was made for
    maps_own: bool  # a target is one of the asking queue's own workloads (any ``own`` position >= 0)
    # Fair sharing, shared by value: what its searches read beyond values, which says to which queues alike it
    # may be handed (:meth:`SearchReads.admits`); None for any other.
    reads: SearchReads | None = None

    def mapped_to(self, own: list[WorkloadInfo]) -> Nomination:
        """This nomination as it reads for a queue whose workloads described by value are ``own``: its own targets
        are those workloads, at the positions remembered."""
        targets = tuple(t if i < 0 else Target(own[i], t.reason) for t, i in zip(self.targets, self.own, strict=True))
        return Nomination(self.assignment, targets, self.own, self.message, self.made_for, self.maps_own, self.reads)


def _spec_key(cq: CQSpec) -> Hashable:
    """What nomination reads of a ClusterQueue's spec, without its name."""
    quotas = tuple(sorted((fr, (q.nominal, q.borrowing_limit, q.lending_limit)) for fr, q in cq.quotas.items()))
    return (cq.cohort, tuple(cq.groups), quotas, cq.preemption, cq.fungibility, cq.fair_weight)


def head_key(info: WorkloadInfo) -> Hashable:
    """What nomination reads of a head's pod sets (fixed for the life of its WorkloadInfo)."""
    parts = []
    for ps in info.podsets:
        t = ps.template
        parts.append((ps.name, ps.count, ps.min_count, tuple(ps.per_pod.items()),
                      tuple(t.node_selector.items()), t.required_affinity, t.tolerations, ps.topology))
    return tuple(parts)


@dataclass(frozen=True, slots=True)
class _Queue:
    """What a lookup reads of a ClusterQueue that never changes: its spec's id, its preemption policies and its
    place in the tree."""

    spec: int
    # 0: withinClusterQueue Never (no own candidates); 1: those of lower priority than the head; 2: of lower or
    # equal priority (LowerOrNewerEqualPriority, which also compares queue timestamps at equal priority).
    within: int
    newer: bool  # a policy compares queue timestamps: the head's is part of the key
    # Its heads' searches never read another queue's candidates (reclaimWithinCohort Never, or no cohort).
    isolated: bool
    # ... nor do they while the queue is at or above every nominal quota in ``floors`` (borrowWithinCohort Never,
    # parent is the tree's root): (position in QuotaTree.local_state's usage, nominal quota).
    sealed_when_full: bool
    floors: tuple[tuple[int, int], ...]
    admitted: AdmittedQueue
    pos: int  # its position among its parent's children (fair sharing ranks queues of equal share by it); -1: none


def reads_only_own_candidates(queue: _Queue, usage: tuple[int, ...]) -> bool:
    """Whether no preemption search of this queue's heads reads another queue's candidates, the queue's usage of
    every flavor-resource (in :meth:`QuotaTree.local_state`'s order) being ``usage`` (module docstring)."""
    if queue.isolated:
        return True
    if not queue.sealed_when_full:
        return False
    return all(usage[i] >= nominal for i, nominal in queue.floors)


class NominationMemo:
    """Remembered nominations per cohort tree, valid while the tree's generation stays the same."""

    def __init__(self, tree: QuotaTree, cqs: Mapping[str, CQSpec], admitted: Mapping[str, AdmittedQueue],
                 fair_sharing: bool, shapes: Interner[Hashable] | None = None) -> None:
        """``shapes``: an earlier memo's interner, for one made again under the same workloads (they keep the shape
        ids it gave them: a fresh interner would give another workload the same id)."""
        self.tree = tree
        self.admitted = admitted
        self.fair_sharing = fair_sharing
        interned: dict[Hashable, int] = {}
        self._spec_ids = interned
        self._spec: dict[str, int] = {name: interned.setdefault(_spec_key(cq), len(interned))
                                      for name, cq in cqs.items()}
        # What a lookup reads of each queue's spec and place in the tree, worked out with the rest of what is kept
        # per queue (building the policy takes time in the number of queues anyway), not in the cycle that first
        # nominates one of its heads.
        self._columns = {fr: i for i, fr in enumerate(tree.flavor_resources())}
        parents = {id(p): p for name in cqs if (p := tree.cluster_queue(name).parent) is not None}
        # A queue's place among its siblings, found once per parent, not by searching its children for each queue.
        self._positions = {id(child): i for parent in parents.values() for i, child in enumerate(parent.children)}
        self._queues: dict[str, _Queue] = {name: self._queue(cq) for name, cq in cqs.items()}
        self.shapes: Interner[Hashable] = shapes if shapes is not None else Interner(MAX_SHAPES)
        self._tables: dict[int, tuple[tuple[int, int, int], dict[Hashable, Nomination]]] = {}
        # Lookups, and those that found no nomination to recall (a nomination was made for them); hits with targets
        # among the asking queue's own workloads made for another queue; lookups of queues above their quota
        # described by value, and how many of them were answered.
        self.lookups = 0
        self.misses = 0
        self.mapped = 0
        self.above_quota = 0
        self.above_quota_hits = 0
        # Fair sharing: lookups answered by a searching nomination shared by value (NominationMemo._fair_lookup).
        self.alike_hits = 0

    def specs_changed(self, cqs: Mapping[str, CQSpec], names: Collection[str]) -> bool:
        """The specs of ``names`` changed in what a running policy takes in place (quotas, preemption policies...),
        the tree's shape and flavor-resources the same: what is kept of those queues worked out again and every
        remembered nomination dropped, as a memo made again would have them. False, changing nothing, when the
        tree's flavor-resources or its queues are not those the memo knows: it must be made again."""
        if list(self._columns) != self.tree.flavor_resources() or any(name not in self._queues for name in cqs) \
                or len(cqs) != len(self._queues):
            return False
        interned = self._spec_ids
        for name in names:
            self._spec[name] = interned.setdefault(_spec_key(cqs[name]), len(interned))
            self._queues[name] = self._queue(cqs[name])  # (after its spec id: _queue reads it)
        self._tables.clear()
        return True

    @property
    def hits(self) -> int:
        """Lookups answered with a remembered nomination."""
        return self.lookups - self.misses

    def _queue(self, cq: CQSpec) -> _Queue:
        node = self.tree.cluster_queue(cq.name)
        parent = node.parent
        policy = cq.preemption
        columns = self._columns
        floors = []
        sealed = policy.borrow_within_cohort.policy == _NEVER and parent is not None and parent.parent is None
        for fr, q in cq.quotas.items():
            i = columns.get(fr)
            if i is None:
                sealed = False  # not a column of the tree's usage (never, once finalized): not checked, not sealed
                break
            floors.append((i, q.nominal))
        within = policy.within_cluster_queue
        return _Queue(
            self._spec[cq.name], 0 if within == _NEVER else 2 if within == _NEWER else 1,
            within == _NEWER or policy.reclaim_within_cohort == _NEWER,
            policy.reclaim_within_cohort == _NEVER or parent is None, sealed, tuple(floors), self.admitted[cq.name],
            -1 if parent is None else self._positions[id(node)])

    def _shape(self, info: WorkloadInfo) -> int:
        found = info.shape = self.shapes.id_of(head_key(info))
        return found

    def _own(self, q: _Queue, info: WorkloadInfo) -> tuple[Hashable, AdmittedQueue | None, int] | None:
        """The queue's own candidates for this head by value: a description for the key (() when none), the queue
        and how many of its first workloads in standing order it describes; None when there are more than
        :data:`MAX_OWN_BY_VALUE` (the queue is keyed by its name)."""
        if not q.within:
            return (), None, 0
        # Its admitted workloads the policy lets this head evict on priority grounds, at most those of lower
        # priority (LowerPriority) or of lower or equal priority (LowerOrNewerEqualPriority); the list is in
        # standing order, lowest priority first.
        queue = q.admitted
        standings = queue.standings()
        if not standings:
            return (), queue, 0
        p = info.priority
        n = bisect_left(standings, (p + 1,) if q.within == 2 else (p,))
        if n > MAX_OWN_BY_VALUE:
            return None
        if not n:
            return (), queue, 0
        own: Hashable = tuple(queue.value_ids()[:n])
        if q.within == 2:
            # Equal priority: LowerOrNewerEqualPriority takes those queued after the head.
            head_ts = info.queue_ts
            own = (own, tuple([head_ts < c.queue_ts for c in queue.ordered()[bisect_left(standings, (p,)):n]]))
        return own, queue, n

    def lookup(self, info: WorkloadInfo, cq: CQSpec) -> Nomination | Lookup:
        """The nomination remembered for this head, its targets being the asking queue's where they are its own;
        else where the one made for it is to be remembered (:meth:`Lookup.remember`)."""
        name = cq.name
        generation, usage, over = self.tree.local_state(name)
        entry = self._tables.get(generation[0])
        if entry is None or entry[0] != generation:
            # The tree moved on: what was remembered for it can no longer be asked for.
            entry = self._tables[generation[0]] = (generation, {})
        table = entry[1]
        if len(table) >= MAX_PER_TREE:
            table.clear()
        q = self._queues[name]
        p = info.priority
        last = info.last_tried
        shape = info.shape
        if shape is None:
            shape = self._shape(info)
        stopped: Hashable = None  # where its last flavor search stopped, hashable (one pod set: no comprehension)
        if last is not None:
            stopped = (tuple(last[0].items()),) if len(last) == 1 else tuple([tuple(d.items()) for d in last])
        ts = info.queue_ts if q.newer else None
        self.lookups += 1
        if self.fair_sharing:
            return self._fair_lookup(table, name, q, info, usage, over, (shape, p, ts, stopped))
        queue: AdmittedQueue | None = None
        n = 0
        who: Hashable
        own = None if over and not reads_only_own_candidates(q, usage) else self._own(q, info)
        if own is None:
            who = name
            by_value = False
        else:
            desc, queue, n = own
            who = (q.spec, desc) if n else q.spec
            by_value = True
        key = (who, usage, shape, p, ts, stopped)
        found = table.get(key)
        if over and by_value:
            self.above_quota += 1
            self.above_quota_hits += found is not None
        if found is None:
            self.misses += 1
            return Lookup(table, key, by_value, over, queue, n)
        if found.maps_own:
            self.mapped += found.made_for != name
            assert queue is not None
            return found.mapped_to(queue.ordered()[:n])  # the own workloads a Lookup describes (Lookup.own)
        return found

    def _fair_lookup(self, table: dict[Hashable, Nomination], name: str, q: _Queue, info: WorkloadInfo,
                     usage: tuple[int, ...], over: bool, head: tuple[Hashable, ...]) -> Nomination | Lookup:
        """Under fair sharing a nomination that ran no preemption search read nothing of the queue but its spec
        and usage (as without fair sharing); one whose searches read no queue's identity
        (:class:`~gpufleet.scheduling.kueue.search_reads.SearchReads`) is also shared by value, with the queue's
        own candidates, with every queue alike that is not among the queues its walk stopped at; any other keeps
        the queue's name in its key."""
        searchless = (_SEARCHLESS, q.spec, usage, *head)
        found = table.get(searchless)
        if found is not None:
            return found
        own = self._own(q, info)
        alike: Hashable = None
        queue: AdmittedQueue | None = None
        n = 0
        if own is not None:
            desc, queue, n = own
            alike = (_ALIKE, q.spec, desc, usage, *head)
            found = table.get(alike)
            if found is not None and found.reads is not None and found.reads.admits(name, q.pos):
                self.alike_hits += 1
                if found.maps_own:
                    self.mapped += found.made_for != name
                    assert queue is not None
                    return found.mapped_to(queue.ordered()[:n])
                return found
        key = (name, usage, *head)
        found = table.get(key)
        if found is None:
            self.misses += 1
            return Lookup(table, key, False, over, queue, n, searchless, alike)
        return found


@dataclass(slots=True)
class Lookup:
    """Where the nomination made for a head that found none to recall is to be remembered."""

    table: dict[Hashable, Nomination]
    key: Hashable
    by_value: bool  # the queue is described by value: its own targets are remembered by position in ``own``
    over: bool  # ... while above its quota: no target may be another queue's
    queue: AdmittedQueue | None
    n: int  # its first n workloads in standing order are described by value
    # Fair sharing: where a nomination that ran no preemption search is remembered instead, for every queue alike.
    searchless: Hashable = None
    # Fair sharing: where one whose searches read no queue's identity is remembered, for the queues alike (own
    # candidates by value, the first ``n`` of ``queue``) that its walks did not stop at; None when the queue has
    # too many own candidates to describe.
    alike: Hashable = None

    @property
    def own(self) -> list[WorkloadInfo]:
        """The queue's workloads described by value, in standing order."""
        if self.queue is None or not self.n:
            return []
        return self.queue.ordered()[:self.n]

    def remember(self, cq: CQSpec, assignment: Assignment, targets: list[Target], message: str,
                 searched: bool = True, reads: SearchReads | None = None) -> None:
        """Remember the nomination made; ``searched``: it ran a preemption search (its flavor search asked for
        targets, or it did); ``reads``: what its searches read beyond values."""
        if not searched and self.searchless is not None:
            self.table[self.searchless] = Nomination(assignment, (), (), message, cq.name, False)
            return
        if (self.alike is not None and reads is not None and not reads.opaque and cq.name not in reads.queues
                and self.alike not in self.table):
            self._remember(self.alike, True, cq, assignment, targets, message, reads)
            return
        self._remember(self.key, self.by_value, cq, assignment, targets, message, None)

    def _remember(self, key: Hashable, by_value: bool, cq: CQSpec, assignment: Assignment, targets: list[Target],
                  message: str, reads: SearchReads | None) -> None:
        positions = {id(c): i for i, c in enumerate(self.own)} if by_value else {}
        where = []
        for t in targets:
            i = positions.get(id(t.info), -1)
            if i < 0 and by_value:
                if t.info.cluster_queue == cq.name:
                    return  # an own target the key does not describe: not to be handed to another queue
                # A queue above its quota is described by value only when its searches take nothing of another
                # queue (NominationMemo's docstring); such a target would mean that proof is wrong.
                assert not self.over or key == self.alike, f"{cq.name}: a search above quota took {t.info.key}"
            where.append(i)
        self.table[key] = Nomination(assignment, tuple(targets), tuple(where), message, cq.name,
                                     any(i >= 0 for i in where), reads)
