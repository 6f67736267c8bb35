"""One scheduling cycle (§1.8): heads, snapshot, nominate, order, process, requeue.

1. Workloads whose requeue backoff ended return to their queues; admitted workloads past their
   waitForPodsReady timeout are evicted (``PodsReadyTimeout``).
2. Workloads without any queue (no quota) are placed first: nothing gates them but nodes.
3. One head per ClusterQueue is popped; each is nominated against the same snapshot: namespace selector,
   flavor assignment, and preemption targets when it needs preemption (partial admission if neither fits).
4. Entries are ordered (classical, or the fair-sharing tournament) and processed one by one against the
   mutating snapshot: a preemptor without targets may reserve capacity; one whose targets overlap an earlier
   preemptor's, or that no longer fits once earlier decisions are counted, is skipped; a preemptor issues its
   evictions and waits for a later cycle; a fitting workload is placed on nodes (all pods or none, with
   placement preemption when nodes, not quota, are short) and admitted. When pods are placed, a preemption is
   issued only if its preemptor also fits on nodes once its targets are gone, with more victims if needed, and
   the room it makes is held until the preemptor is processed in the next cycle (kueue.room); none is issued
   when nothing makes room. Rooms the last cycle's preemptions made are held before the first entry.
5. The snapshot is rolled back, the held room released, and admissions recorded (their quota was charged for good
   when they were decided: :meth:`QuotaTree.add_lasting_usage` outlives the rollback); every head not admitted is
   requeued by its queueing strategy.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.scheduling.kueue.config import CQSpec
from gpufleet.scheduling.kueue.flavors import Assignment, FlavorAssigner, Oracle
from gpufleet.scheduling.kueue.gangs import GangPlacer, Group
from gpufleet.scheduling.kueue.info import PENDING, AdmissionShape, PodSetAdmission, WorkloadInfo
from gpufleet.scheduling.kueue.memo import Lookup
from gpufleet.scheduling.kueue.memo import Nomination as RememberedNomination  # room.Nomination is another
from gpufleet.scheduling.kueue.modes import FIT, NO_FIT, PREEMPT, Granular, Mode, Outcome
from gpufleet.scheduling.kueue.ordering import Orderable, classical, fair_sharing
from gpufleet.scheduling.kueue.pending import PendingReason
from gpufleet.scheduling.kueue.preemption import Target
from gpufleet.scheduling.kueue.queues import FAILED_AFTER_NOMINATION, GENERIC, NAMESPACE_MISMATCH, PENDING_PREEMPTION
from gpufleet.scheduling.kueue.reservation import BACKFILL_LIMIT, quota_hold, starving
from gpufleet.scheduling.kueue.reservation import message as reservation_message
from gpufleet.scheduling.kueue.room import HeldRooms, Nomination, Room, make_room
from gpufleet.scheduling.kueue.search_reads import SearchReads
from gpufleet.scheduling.kueue.state import CLUSTER_QUEUE_STOPPED, PODS_READY_TIMEOUT, SchedulerState
from gpufleet.scheduling.quota import FR
from gpufleet.scheduling.types import Decisions, PendingWorkload, PodAssignment, PreemptedWorkload

NAMESPACE_MISMATCH_MESSAGE = "Workload namespace doesn't match ClusterQueue selector"
OVERLAPPING_MESSAGE = "Workload has overlapping preemption targets with another workload"
NO_LONGER_FITS_MESSAGE = "Workload no longer fits after processing another workload"
WAITING_PODS_READY_MESSAGE = "waiting for all admitted workloads to be in PodsReady condition"
NO_ROOM_MESSAGE = "no preemption makes room on nodes"


# What an entry holds before nomination gives it an assignment: no pod set, never changed.
_UNASSIGNED = Assignment()


def _quota_reason(assignment: Assignment) -> PendingReason:
    """Queued when the flavor search fits quota (it may still wait for nodes or its turn), else quota is short."""
    return PendingReason.QUEUED if assignment.outcome is FIT else PendingReason.INSUFFICIENT_QUOTA


class Entry:
    """A nominated head: its assignment, its preemption targets, and what processing decided."""

    __slots__ = ("admitted", "assignment", "cq", "held", "info", "message", "pending", "reason", "room_held",
                 "skipped", "targets")

    def __init__(self, info: WorkloadInfo, cq: CQSpec) -> None:
        self.info = info
        self.cq = cq
        self.assignment = _UNASSIGNED
        self.targets: list[Target] = []
        self.skipped = False
        self.admitted = False
        self.reason = GENERIC  # requeue reason
        self.message = ""
        self.pending = PendingReason.QUEUED  # why it waits, if it does (set with the message)
        self.held: dict[FR, int] = {}  # quota it holds back in this cycle's snapshot (resourcesToReserve)
        # A room an earlier cycle's preemption made for it was still held when it was processed (kueue.room).
        self.room_held = False

    @property
    def cq_name(self) -> str:
        return self.cq.name

    @property
    def borrowing(self) -> int:
        return self.assignment.borrowing

    @property
    def usage(self) -> dict[FR, int]:
        return self.assignment.usage


class Cycle:
    def __init__(self, state: SchedulerState, now: float) -> None:
        self.state = state
        self.now = now
        self.decisions = Decisions()
        self.preempted: dict[str, WorkloadInfo] = {}  # targets chosen this cycle
        self.admitted: list[tuple[Entry, list[PodAssignment]]] = []
        self.backfilled: list[Entry] = []  # admitted beside a reservation (kueue.reservation), not as heads
        # The room on nodes preemptions are making, held for their preemptors (kueue.room); None without nodes.
        placer = state.placer
        self.rooms = HeldRooms(placer.cluster) if placer is not None else None
        # Nomination sees one unchanging snapshot, so a target search asked twice (by the flavor oracle, then
        # for the whole assignment of a single-resource workload) has one answer.
        self._searches: dict[tuple[str, frozenset[FR], tuple[tuple[FR, int], ...]], list[Target]] = {}
        self.searches = 0  # preemption searches asked for (the nomination memo reads whether a head asked any)
        # What the searches of the head being nominated read beyond values (the nomination memo reads it).
        self.reads: SearchReads | None = None

    def _targets(self, info: WorkloadInfo, frs: set[FR], usage: dict[FR, int]) -> list[Target]:
        self.searches += 1
        key = (info.key, frozenset(frs), tuple(sorted(usage.items())))
        found = self._searches.get(key)
        if found is None:
            # An answer recalled from the cache is the same head's: its reads are in self.reads already.
            found = self._searches[key] = self.state.preemptor.targets(info, frs, usage, self.reads)
        return list(found)

    # ---- 1-2: timers and workloads without queue ---------------------------------------------------------------
    def _timers(self) -> None:
        state, now = self.state, self.now
        for info in [i for i in state.backoff.values() if i.requeue_at is not None and i.requeue_at <= now]:
            del state.backoff[info.key]
            state.queues.unpark_where([info], now)
        for info in [*state.waiting_ready.values(), *state.free_waiting.values()]:
            if info.ready_deadline is not None and info.ready_deadline <= now and info.evicting is None:
                state.begin_eviction(info, PODS_READY_TIMEOUT)
                self.decisions.preempted.append(PreemptedWorkload(info.key, "", PODS_READY_TIMEOUT))
        for name in state.draining:
            # stopPolicy HoldAndDrain: Kueue evicts every workload the stopped ClusterQueue admitted ("The
            # ClusterQueue is stopped"); they wait there, held, until it is resumed.
            for info in state.admitted[name].ordered():
                if info.evicting is None:
                    state.begin_eviction(info, CLUSTER_QUEUE_STOPPED)
                    self.decisions.preempted.append(PreemptedWorkload(info.key, "", CLUSTER_QUEUE_STOPPED))

    def _no_quota(self) -> None:
        state = self.state
        for info in sorted(state.no_quota.values(), key=lambda i: (-i.priority, i.queue_ts, i.order, i.key)):
            if info.requeue_at is not None and info.requeue_at > self.now:
                continue  # backing off after a PodsReadyTimeout (KueuePolicy.requeued)
            pods: list[PodAssignment] = []
            gangs = state.placer
            if gangs is not None:
                groups = gangs.groups(info, [{} for _ in info.podsets], [ps.count for ps in info.podsets])
                placed, failed = gangs.place(groups)
                if placed is None:
                    assert failed is not None
                    info.message = gangs.explain(failed, sum(len(g[1]) for g in groups))
                    info.pending = PendingReason.INSUFFICIENT_NODES
                    self.decisions.pending.append(PendingWorkload(info.key, info.message))
                    continue
                pods = [PodAssignment(p.pod, p.node, p.device_ids) for p in placed]
            del state.no_quota[info.key]
            shape = AdmissionShape.of([PodSetAdmission(ps.name, ps.count, {}) for ps in info.podsets], {})
            self.decisions.admitted.append(state.commit_admission(info, None, shape, pods, self.now))

    # ---- 3: nominate ---------------------------------------------------------------------------------------------
    def _oracle(self, info: WorkloadInfo, cq: CQSpec) -> Oracle:
        tree = self.state.tree

        def oracle(fr: FR, quantity: int) -> Granular:
            targets = self._targets(info, {fr}, {fr: quantity})
            if not targets:
                return Granular(Mode.NO_CANDIDATES, tree.lowest_subtree_that_fits(cq.name, fr, quantity)[0])
            mark = tree.checkpoint()
            try:
                for t in targets:
                    assert t.info.cluster_queue is not None
                    tree.remove_usage(t.info.cluster_queue, t.info.usage)
                borrow = tree.lowest_subtree_that_fits(cq.name, fr, quantity)[0]
            finally:
                tree.rollback(mark)
            own = any(t.info.cluster_queue == cq.name for t in targets)
            return Granular(Mode.PREEMPT if own else Mode.RECLAIM, borrow)

        return oracle

    def _assignments(self, info: WorkloadInfo, cq: CQSpec) -> tuple[Assignment, list[Target]]:
        assigner = self.state.assigner(cq.name)
        oracle = self._oracle(info, cq)
        full = assigner.assign(info, oracle)
        if full.outcome is Outcome.FIT:
            return full, []
        if full.outcome is Outcome.PREEMPT:
            targets = self._targets(info, full.frs_needing_preemption(), full.usage)
            if targets:
                return full, targets
        partial = self._partial(info, assigner, oracle)
        return partial if partial is not None else (full, [])

    def _partial(self, info: WorkloadInfo, assigner: FlavorAssigner,
                 oracle: Oracle) -> tuple[Assignment, list[Target]] | None:
        """Partial admission (§1.11): the smallest reduction of the pod sets with a minimum count that fits
        or can preempt."""
        deltas = {ps.index: ps.count - ps.min_count for ps in info.podsets
                  if ps.min_count is not None and ps.min_count < ps.count}
        total = sum(deltas.values())
        if total <= 0:
            return None
        found: dict[int, tuple[Assignment, list[Target]] | None] = {}

        def attempt(i: int) -> tuple[Assignment, list[Target]] | None:
            if i not in found:
                counts = [ps.count - (deltas[ps.index] * i) // total if ps.index in deltas else ps.count
                          for ps in info.podsets]
                a = assigner.assign(info, oracle, counts)
                result: tuple[Assignment, list[Target]] | None = None
                if a.outcome is Outcome.FIT:
                    result = (a, [])
                elif a.outcome is Outcome.PREEMPT:
                    targets = self._targets(info, a.frs_needing_preemption(), a.usage)
                    if targets:
                        result = (a, targets)
                found[i] = result
            return found[i]

        lo, hi = 0, total + 1  # smallest i in [0, total] that works, as a binary search
        while lo < hi:
            mid = (lo + hi) // 2
            if attempt(mid) is not None:
                hi = mid
            else:
                lo = mid + 1
        return attempt(lo) if lo <= total else None

    def _nominate(self, heads: Iterable[WorkloadInfo]) -> tuple[list[Entry], list[Entry]]:
        entries: list[Entry] = []
        inadmissible: list[Entry] = []
        state = self.state
        cqs = state.config.cluster_queues
        placement_parked = state.placement_parked
        memo = state.memo
        matches = state.namespace_matches  # remembered per ClusterQueue and namespace: namespace_match() fills it
        for info in heads:
            assert info.cluster_queue is not None
            # Evaluated afresh: whether it waits for nodes is decided again below.
            info.placement_parked = False
            if placement_parked:
                placement_parked.pop(info.key, None)
            cq = cqs[info.cluster_queue]
            e = Entry(info, cq)
            if cq.stopped:
                e.message = f"ClusterQueue {cq.name} is inactive"
                e.pending = PendingReason.OTHER
            elif not (match if (match := matches[cq.name].get(info.namespace)) is not None
                      else state.namespace_match(cq, info.namespace)):
                e.message = NAMESPACE_MISMATCH_MESSAGE
                e.pending = PendingReason.OTHER
                e.reason = NAMESPACE_MISMATCH
            else:
                at: Lookup | None = None
                if memo is not None:
                    answer = memo.lookup(info, cq)
                    if isinstance(answer, RememberedNomination):
                        e.assignment = answer.assignment
                        if answer.targets:  # most remembered nominations have none
                            e.targets = list(answer.targets)
                        e.message = answer.message
                        e.pending = _quota_reason(e.assignment)
                        entries.append(e)
                        continue
                    at = answer  # none to recall: where the one made now is remembered
                asked = self.searches
                reads = self.reads = SearchReads() if at is not None else None
                e.assignment, e.targets = self._assignments(info, cq)
                self.reads = None
                e.message = e.assignment.message() if e.assignment.outcome is not FIT else ""
                e.pending = _quota_reason(e.assignment)
                if at is not None:
                    at.remember(cq, e.assignment, e.targets, e.message, self.searches != asked, reads)
                entries.append(e)
                continue
            inadmissible.append(e)
        return entries, inadmissible

    # ---- 4: process ----------------------------------------------------------------------------------------------
    def _reserve(self, e: Entry) -> dict[FR, int]:
        """What a preemptor without targets holds back from its cohort this cycle (resourcesToReserve)."""
        tree, cq = self.state.tree, e.cq
        out: dict[FR, int] = {}
        for fr, v in e.assignment.usage.items():
            used = tree.usage(cq.name, fr)
            if e.assignment.borrowing > 0:
                limit = cq.borrowing_limit(fr)
                amount = v if limit is None else min(v, cq.nominal(fr) + limit - used)
            else:
                amount = min(v, cq.nominal(fr) - used)
            if amount > 0:
                out[fr] = amount
        return out

    def _fits(self, e: Entry) -> bool:
        """Whether the entry fits once this cycle's victims and its own targets are taken out."""
        tree = self.state.tree
        if not self.preempted and not e.targets:
            return tree.fits(e.cq.name, e.assignment.usage)  # nothing to take out first (the common case)
        mark = tree.checkpoint()
        try:
            gone = dict(self.preempted)
            gone.update((t.info.key, t.info) for t in e.targets)
            for victim in gone.values():
                assert victim.cluster_queue is not None
                tree.remove_usage(victim.cluster_queue, victim.usage)
            return tree.fits(e.cq.name, e.assignment.usage)
        finally:
            tree.rollback(mark)

    def _issue(self, e: Entry, targets: list[Target]) -> None:
        for t in targets:
            self.preempted[t.info.key] = t.info
            if t.info.evicting is None:
                self.state.begin_eviction(t.info, t.reason)
                self.decisions.preempted.append(PreemptedWorkload(t.info.key, e.info.key, t.reason))
        e.reason = PENDING_PREEMPTION
        e.pending = PendingReason.PREEMPTING
        e.message = (e.message + ". " if e.message else "") + f"Pending the preemption of {len(targets)} workload(s)"
        e.info.last_tried = None

    def _skip(self, e: Entry, message: str) -> None:
        """Kueue's setSkipped: the next flavor search tries every flavor again, except for a preemptor whose room
        on nodes was held for it (kueue.room): its search keeps starting at the flavors it made room in, as after
        the preemption (:meth:`_issue_with_room`). Kueue starts over here too, but its flavor search knows nodes;
        ours knows quota only, and would take the preemptor to an earlier flavor that fits in quota but not on
        nodes, to wait for nodes while the room its evictions made is free."""
        e.skipped = True
        e.message = message
        e.pending = PendingReason.OTHER
        if not e.room_held:
            e.info.last_tried = None

    def _process(self, e: Entry) -> None:
        """:meth:`_decide` with the rooms of other nominations held (the cycle decides directly without rooms)."""
        rooms = self.rooms
        assert rooms is not None
        if not rooms.nominations:
            self._decide(e)
            return
        e.room_held = e.info.key in rooms.nominations
        rooms.drop(e.info.key)  # its own room: it is decided again now
        lower = rooms.below(e.info.key, e.info.priority)
        try:
            self._decide(e)
        finally:
            rooms.restore(lower)

    def _decide(self, e: Entry) -> None:
        tree = self.state.tree
        outcome = e.assignment.outcome
        if outcome is NO_FIT:
            return
        if outcome is PREEMPT and not e.targets:
            if not e.cq.can_always_reclaim():
                e.held = self._reserve(e)
                tree.add_usage(e.cq.name, e.held)
            return
        if e.targets and any(t.info.key in self.preempted for t in e.targets):
            self._skip(e, OVERLAPPING_MESSAGE)
            return
        if not self._fits(e):
            self._skip(e, NO_LONGER_FITS_MESSAGE)
            return
        if outcome is PREEMPT:
            self._preempt(e)
            return
        if self.state.waiting_ready and self.state.config.pods_ready_for(e.cq.name).block_admission:
            self._skip(e, WAITING_PODS_READY_MESSAGE)
            return
        pods: list[PodAssignment] = []
        if self.rooms is not None:  # the policy places pods (SchedulerState.placer is set)
            placed = self._place(e)
            if placed is None:
                return
            pods = placed
        # Charged for good now, not in the snapshot: run() commits it after the rollback without charging it again
        # (QuotaTree.add_lasting_usage), and takes it out again if the cycle fails.
        tree.add_lasting_usage(e.cq.name, e.assignment.usage)
        e.admitted = True
        self.admitted.append((e, pods))

    def _groups(self, gangs: GangPlacer, e: Entry) -> list[Group]:
        return gangs.groups(e.info, [ps.flavors() for ps in e.assignment.podsets], e.assignment.counts())

    def _preempt(self, e: Entry) -> None:
        """Issue the preemption, with what its pods also need on nodes when the policy places pods (kueue.room);
        when no eviction the rules allow makes room there, none is issued (Kueue: no candidates) and it waits
        for nodes. Without a placer, the quota targets as they are."""
        gangs = self.state.placer
        if gangs is None:
            self.state.tree.add_usage(e.cq.name, e.assignment.usage)
            self._issue(e, e.targets)
            return
        room = make_room(self.state, e.info, e.cq, e.assignment.usage, self._groups(gangs, e), e.targets,
                         self.preempted.values())
        if room.targets is None:
            e.message = (e.message + ". " if e.message else "") + f"{NO_ROOM_MESSAGE}: {room.why}"
            e.pending = PendingReason.INSUFFICIENT_NODES
            e.info.placement_parked = True
            if not e.cq.can_always_reclaim():
                e.held = self._reserve(e)
                self.state.tree.add_usage(e.cq.name, e.held)
            return
        self._issue_with_room(e, room)

    def _issue_with_room(self, e: Entry, room: Room) -> None:
        """Hold the room for ``e``, charge its usage, and issue the evictions that make it. After such a
        preemption the next flavor search starts at the flavors it was made for. Kueue starts over after a
        preemption, but its flavor search knows nodes (TAS); ours knows quota only, and an earlier flavor that fits
        in quota but not on nodes would take the preemptor away from the room it made while its victims come back
        into that room: the loop kueue.room is there to prevent."""
        assert self.rooms is not None and room.targets is not None
        victims = frozenset(t.info.key for t in room.targets)
        self.rooms.issue(Nomination(e.info.key, e.info.priority, room, victims))
        self.state.tree.add_usage(e.cq.name, e.assignment.usage)
        self._issue(e, room.targets)
        e.info.last_tried = self.state.assigner(e.cq.name).resume_at(e.assignment)

    def _place(self, e: Entry) -> list[PodAssignment] | None:
        gangs = self.state.placer
        assert gangs is not None
        groups = self._groups(gangs, e)
        placed, failed = gangs.place(groups)
        if placed is not None:
            return [PodAssignment(p.pod, p.node, p.device_ids) for p in placed]
        assert failed is not None
        why = gangs.explain(failed, sum(len(g[1]) for g in groups))
        room = make_room(self.state, e.info, e.cq, e.assignment.usage, groups, [], self.preempted.values(), why)
        if not room.targets:
            e.message = why
            e.pending = PendingReason.INSUFFICIENT_NODES
            e.info.placement_parked = True
            return None
        e.message = "insufficient node capacity for the gang"
        e.pending = PendingReason.INSUFFICIENT_NODES
        self._issue_with_room(e, room)
        return None

    # ---- gang reservation (kueue.reservation) ---------------------------------------------------------------
    def _reservations(self, entries: list[Entry]) -> None:
        """Heads that waited past their queue's reservation time reserve; the workloads behind each reservation
        are nominated against the snapshot with its quota held, and admitted when they fit beside it."""
        state, now = self.state, self.now
        for e in entries:
            cq = e.cq
            if e.admitted or cq.reserve_after_s is None:
                continue
            holder = state.reservations.get(cq.name)
            if holder is None and starving(e.info, cq, now):
                state.reservations[cq.name] = holder = e.info.key
            if holder != e.info.key:
                continue
            e.message = reservation_message(e.info, cq, now)
            e.pending = PendingReason.OTHER
            if not e.targets:
                # A head whose preemption is under way charged its usage in the snapshot and is about to be
                # admitted: nothing is backfilled beside it this cycle.
                self._backfill(e)

    def _backfill(self, reserved: Entry) -> None:
        """The queue's next workloads, in queue order, each admitted when it fits beside the reserved quota and on
        nodes as they are: no preemption, no room made on nodes, and only what its queue would nominate (its
        namespace matched, the queue active)."""
        state, cq = self.state, reserved.cq
        if cq.stopped:
            return
        # In the snapshot (rolled back after the cycle), beyond what its nomination already held back this cycle.
        hold = {fr: v - reserved.held.get(fr, 0) for fr, v in quota_hold(reserved.info, cq).items()}
        state.tree.add_usage(cq.name, {fr: v for fr, v in hold.items() if v > 0})
        behind = [w for w in state.queues.queues[cq.name].ordered() if w.key != reserved.info.key]
        blocked = state.waiting_ready and state.config.pods_ready_for(cq.name).block_admission
        for info in behind[:BACKFILL_LIMIT]:
            if (info.requeue_at is not None and info.requeue_at > self.now) or blocked \
                    or not state.namespace_match(cq, info.namespace):
                continue
            e = Entry(info, cq)
            e.assignment, e.targets = self._assignments(info, cq)
            if e.assignment.outcome is not FIT or not self._fits(e):
                continue  # beside the hold it does not fit, or only by preempting: it waits
            pods: list[PodAssignment] = []
            gangs = state.placer
            if gangs is not None:
                placed, _ = gangs.place(self._groups(gangs, e))
                if placed is None:
                    continue  # it would need room made on nodes: it waits
                pods = [PodAssignment(p.pod, p.node, p.device_ids) for p in placed]
            state.tree.add_lasting_usage(cq.name, e.assignment.usage)
            e.admitted = True
            self.admitted.append((e, pods))
            self.backfilled.append(e)

    # ---- the cycle -------------------------------------------------------------------------------------------
    def run(self) -> Decisions:
        state = self.state
        self._timers()
        self._no_quota()
        queues = state.queues
        heads = queues.heads(self.now, state.beyond_any_node() if queues.releases_pending else frozenset())
        tree = state.tree
        mark = tree.checkpoint()
        try:
            with state.preemptor.nomination():
                entries, inadmissible = self._nominate(heads)
            self._searches.clear()  # processing changes the snapshot
            rooms, carried = self.rooms, state.nominations
            state.nominations = {}
            if rooms is not None:
                for nomination in carried.values():
                    rooms.hold(nomination)
            order: Iterable[Orderable] = (fair_sharing(entries, tree) if state.config.fair_sharing
                                          else classical(entries))
            # Without nodes there is no room to hold (rooms is None): each entry is decided as it is.
            process = self._decide if rooms is None else self._process
            for item in order:
                assert isinstance(item, Entry)
                process(item)
            if state.reserve:
                self._reservations(entries)
            if rooms is not None:
                state.nominations = rooms.carried()
        except BaseException:
            for e, _ in self.admitted:  # nothing is admitted: what _decide charged for good goes too
                tree.remove_lasting_usage(e.cq.name, e.assignment.usage)
            raise
        finally:
            tree.rollback(mark)
            if self.rooms is not None:
                self.rooms.release_all()
        commit, admitted, now = state.commit_admission, self.decisions.admitted, self.now
        for e, pods in self.admitted:
            admitted.append(commit(e.info, e.cq.name, e.assignment.admission_shape(), pods, now, charged=True))
        for e in self.backfilled:  # never popped as heads: out of their queue now
            state.queues.remove(e.info)
        for e in [*entries, *inadmissible]:
            if not e.admitted:
                self._requeue(e)
        state.last_decided = bool(self.decisions)
        state.last_evaluated = frozenset([info.key for info in heads])
        return self.decisions

    def _requeue(self, e: Entry) -> None:
        state, info = self.state, e.info
        if not e.skipped and e.reason == GENERIC and e.assignment.podsets:
            info.last_tried = e.assignment.last_tried
        reason = FAILED_AFTER_NOMINATION if e.skipped and e.reason == GENERIC else e.reason
        info.message = e.message
        info.pending = e.pending
        info.state = PENDING
        if state.reservations.get(e.cq.name) == info.key:
            if e.reason != NAMESPACE_MISMATCH and not e.cq.stopped:
                state.queues.hold_head(info)  # it stays the head while it reserves
                self.decisions.pending.append(PendingWorkload(info.key, e.message))
                return
            del state.reservations[e.cq.name]  # its queue would no longer admit it: the reservation ends
        state.queues.requeue(info, reason)
        if info.placement_parked:
            q = state.queues.queues[e.cq.name]
            if info.key in q.parked:
                state.placement_parked[info.key] = info
            else:
                info.placement_parked = False
        self.decisions.pending.append(PendingWorkload(info.key, e.message))
