"""Under fair sharing, searching nominations shared by value between queues alike decide exactly as nominating every
head afresh (issue 27 item 5; ``kueue/memo.py``, ``kueue/search_reads.py``).

The reference is the same policy with ``state.memo = None``. Setups are flat cohorts, where the walk of
``kueue/flat_fair_search.py`` answers searches and tells what it read of the asking queue (the places it stopped at,
the positions its own node was ranked against): several copies of each queue spec (alike but for their names, kept
alike in usage by mirrored workloads), a lender that makes shares coarse (ties between queues of equal share are then
the rule, as at the bench's 500-queue cohorts), a hog that takes what is left, weights including 0, every preemption
policy, one strategy or both in either order. Low-priority workloads are admitted first at times, so that the heads
after them find candidates in their own queue and in the others. The driver submits, finishes, evicts and runs
cycles in a random order; every decision of every cycle and the final pending report must be the same.
``GPUFLEET_MEMO_EXAMPLES`` sets the number of examples (1000 by default). Directed cases below hold each part of what
a walk records to a setup where leaving it out hands a queue another's nomination wrongly.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, cast

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpufleet.api.objects import SchedulerConfig
from gpufleet.cluster.workloads import Workload
from gpufleet.scheduling.kueue import KueuePolicy
from gpufleet.scheduling.kueue.config import CQSpec
from gpufleet.scheduling.kueue.info import WorkloadInfo
from gpufleet.scheduling.kueue.memo import Lookup, Nomination, NominationMemo
from gpufleet.scheduling.quota import QuotaTree
from tests.kueue.test_flat_fair_search import STRATEGIES
from tests.kueue.test_nomination_memo import (
    CPU,
    EXAMPLES,
    FLAVORS,
    QueueSpec,
    Shape,
    Step,
    WorkloadSpec,
    _memo_and_reference,
    decided,
    manifests,
    shapes,
    steps,
    submitted,
)


@st.composite
def flat_specs(draw: st.DrawFn) -> QueueSpec:
    """A queue spec in the flat cohort ``pool``, with two to five copies."""
    reclaim = draw(st.sampled_from(["Never", "LowerPriority", "Any", "Any", "LowerOrNewerEqualPriority"]))
    return QueueSpec(
        flavors=tuple(draw(st.lists(st.sampled_from(FLAVORS[:2]), min_size=1, max_size=2, unique=True))),
        nominal=(draw(st.integers(0, 2)), draw(st.integers(0, 2))),
        borrowing_limit=draw(st.none() | st.none() | st.integers(0, 4)),
        lending_limit=None,
        parent="pool",
        within=draw(st.sampled_from(["Never", "Never", "LowerPriority", "LowerOrNewerEqualPriority"])),
        reclaim=reclaim,
        bwc=False,  # borrowWithinCohort does not apply under fair sharing
        threshold=None,
        strategy=draw(st.sampled_from(["BestEffortFIFO", "BestEffortFIFO", "StrictFIFO"])),
        fungibility=(draw(st.sampled_from(["Borrow", "TryNextFlavor"])),
                     draw(st.sampled_from(["Preempt", "TryNextFlavor"]))),
        gpus=None,
        copies=draw(st.integers(2, 5)),
    )


def lender(cpu: int) -> QueueSpec:
    """A queue that only lends: with much cpu, a workload barely moves a borrower's share (shares tie)."""
    return QueueSpec(flavors=FLAVORS[:2], nominal=(cpu, 4), borrowing_limit=None, lending_limit=None, parent="pool",
                     within="Never", reclaim="Never", bwc=False, threshold=None, strategy="BestEffortFIFO",
                     fungibility=("Borrow", "TryNextFlavor"), gpus=None, copies=1)


# A queue with no quota of its own that takes what the others leave of the cohort (one workload per flavor, as large
# as the room there), so that heads after it must preempt. With the lender's 6,000 cpu a copy's few cpu borrowed are
# a share of 0, 1 or 2 thousandths, as at the bench: copies alike tie with the preemptor's share, and a head's walk
# may stop at a copy like its own queue (which may then not be handed its nomination).
HOG = QueueSpec(flavors=FLAVORS[:2], nominal=(0, 0), borrowing_limit=None, lending_limit=None, parent="pool",
                within="Never", reclaim="Never", bwc=False, threshold=None, strategy="BestEffortFIFO",
                fungibility=("Borrow", "TryNextFlavor"), gpus=None, copies=1)
# Low-priority workloads mirrored in every copy of the first spec, admitted before anything else.
FILLER = Shape(cpu=2, memory=0, gpu=0, count=1, min_count=None, priority=0, tolerate_spot=True, select=None)


class WatchedMemo:
    """Counts lookups answered with a searching nomination shared by value, made for another queue, with and
    without targets (among them the asking queue's own), ranked by position; and those refused because the asking
    queue is among the queues its walks stopped at or out of its bounds of position."""

    def __init__(self, memo: NominationMemo) -> None:
        self.with_targets = 0
        self.without_targets = 0
        self.refused = 0
        self.own_targets = 0  # ... with targets among the asking queue's own workloads
        self.bounded = 0  # ... whose walk ranked its own queue against others of equal share by position
        self._memo = memo
        self._lookup = memo.lookup
        memo.lookup = self.lookup  # type: ignore[method-assign]

    def lookup(self, info: WorkloadInfo, cq: CQSpec) -> Nomination | Lookup:
        alike = self._memo.alike_hits
        found = self._lookup(info, cq)
        if self._memo.alike_hits > alike and isinstance(found, Nomination) and found.made_for != cq.name:
            if found.targets:
                self.with_targets += 1
            else:
                self.without_targets += 1
            self.own_targets += found.maps_own
            assert found.reads is not None
            self.bounded += found.reads.low >= 0 or found.reads.high < sys.maxsize
        if isinstance(found, Lookup) and found.alike is not None:
            recalled = found.table.get(found.alike)
            self.refused += (recalled is not None and recalled.reads is not None
                             and not recalled.reads.admits(cq.name, self._memo._queues[cq.name].pos))
        return found


class Driver:
    """Runs the memo's policy and the reference side by side, comparing every cycle's decisions."""

    def __init__(self, policies: list[KueuePolicy], names: list[str], events: bool = True) -> None:
        self.policies = policies
        self.events = events  # hypothesis events (inside a property only)
        self.names = names
        self.now = 0.0
        self.terminating: list[str] = []
        self.serial = 10_000  # workloads made here (above the jobs' own numbers)

    def submit(self, workloads: list[Workload]) -> None:
        for w in workloads:
            for p in self.policies:
                p.submit(w, self.now)

    def cycle(self) -> list[tuple[str, str, str]]:
        """Run a cycle in both; its preemptions."""
        self.now += 1.0
        results = [p.cycle(self.now) for p in self.policies]
        got = [decided(d) for d in results]
        assert got[0] == got[1]
        if got[0][1] and self.events:
            event("a cycle preempted")
        self.terminating.extend(victim.workload for victim in results[0].preempted)
        return [(p.workload, p.preemptor, p.reason) for p in results[0].preempted]

    def made(self, queue: int, shape: Shape, mirror: bool = False, created: int = 0) -> list[Workload]:
        self.serial += 1
        return submitted(self.serial, WorkloadSpec(queue, 0, created, mirror), self.names, [shape])

    def run(self, kinds: list[Shape], pending: list[tuple[int, WorkloadSpec]], script: list[Step]) -> None:
        """``script`` as kueue.test_nomination_memo's drive() carries it out, with this driver's clock."""
        for action, n in script:
            if action == "submit":
                batch, pending = pending[:n], pending[n:]
                self.submit([w for i, spec in batch for w in submitted(i, spec, self.names, kinds)])
            elif action == "confirm":
                if self.terminating:
                    gone = self.terminating.pop(0)
                    for p in self.policies:
                        p.evicted(gone, self.now, requeue=True)
            elif action in ("finish", "evict"):
                running = sorted(k for by_key in self.policies[0].state.admitted.values() for k in by_key)
                if running:
                    key = running[n % len(running)]
                    for p in self.policies:
                        if action == "finish":
                            p.finish(key, self.now)
                        else:
                            p.evicted(key, self.now)
            else:
                self.cycle()


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(flat_specs(), min_size=1, max_size=2), kinds=st.lists(shapes(), min_size=2, max_size=3),
       jobs=st.lists(st.builds(WorkloadSpec, queue=st.integers(0, 10), shape=st.integers(0, 2),
                               created=st.integers(0, 9), mirror=st.sampled_from([True, True, False])),
                     min_size=10, max_size=50),
       script=steps(), rising=st.booleans(), lend=st.sampled_from([0, 2, 6, 3000, 3000]), hog=st.booleans(),
       hog_priority=st.integers(0, 2), fill=st.sampled_from([0, 2, 4, 6]), contest=st.none() | st.integers(1, 3),
       weights=st.lists(st.sampled_from([1.0, 1.0, 2.0, 0.5, 0.0]), min_size=2, max_size=2),
       strategies=st.sampled_from(STRATEGIES))
def test_alike_queues_share_searching_nominations_as_fresh_ones_decide(
        specs: list[QueueSpec], kinds: list[Shape], jobs: list[WorkloadSpec], script: list[Step], rising: bool,
        lend: int, hog: bool, hog_priority: int, fill: int, contest: int | None, weights: list[float],
        strategies: tuple[str, ...]) -> None:
    m, names = manifests([*specs, *([lender(lend)] if lend else []), *([HOG] if hog else [])], True)
    # One flat cohort: the nested cohort the memo test's manifests declare is left out (no queue is under it).
    m.cohorts = [c for c in m.cohorts if c.name != "sub"]
    m.config = SchedulerConfig(fair_sharing=True, fair_sharing_strategies=cast(Any, strategies))
    m.cluster_queues = [dataclasses.replace(cq, fair_weight=weights[i]) if (i := int(cq.name[2:].split("-")[0]))
                        < len(specs) else cq for cq in m.cluster_queues]
    policies = _memo_and_reference(m)
    memo = policies[0].state.memo
    assert memo is not None
    with policies[0].state.preemptor.nomination():
        flat = policies[0].state.preemptor._flat
        assert flat is not None and flat.is_flat(policies[0].state.tree.cohort("pool"))
    watched = WatchedMemo(memo)
    driver = Driver(policies, names)
    # The first spec's copies borrow alike, one workload each per cycle.
    for _ in range(fill):
        driver.submit(driver.made(0, FILLER, mirror=True))
        driver.cycle()
    pending = list(enumerate(jobs))
    if rising:  # lower priorities first, admitted; higher ones arrive later and find them to preempt
        pending.sort(key=lambda job: kinds[job[1].shape % len(kinds)].priority)
        driver.run(kinds, pending[:len(pending) // 2], [("submit", len(pending) // 2), *[("cycle", 0)] * 6])
        pending = pending[len(pending) // 2:]
    if hog:  # it takes the room left in each flavor
        tree = policies[0].state.tree
        hog_queue = len(names) - 1
        for flavor in FLAVORS[:2]:
            room = tree.available(names[hog_queue], (flavor, "cpu")) // CPU
            if room > 0:
                driver.submit(driver.made(hog_queue, Shape(room, 0, 0, 1, None, hog_priority, True, flavor)))
                driver.cycle()
        driver.cycle()
    if contest is not None:
        # A head in every copy of the first spec at once: queues alike whose walks may stop at each other.
        driver.submit(driver.made(0, Shape(1, 0, 0, 1, None, contest, True, None), mirror=True))
        driver.cycle()
        driver.cycle()
    driver.run(kinds, pending, script)
    assert ([(p.workload, p.reason) for p in policies[0].pending_report()]
            == [(p.workload, p.reason) for p in policies[1].pending_report()])
    if watched.with_targets:
        event("a searching nomination with targets was shared by value")
    if watched.without_targets:
        event("a searching nomination without targets was shared by value")
    if watched.own_targets:
        event("a searching nomination with own targets was shared by value")
    if watched.bounded:
        event("a searching nomination bounded in position was shared by value")
    if watched.refused:
        event("a nomination shared by value was refused to a queue its walk stopped at")


def _alike(copies: int, within: str = "Never") -> tuple[list[KueuePolicy], list[str], Driver]:
    """``copies`` queues alike (no quota of their own, reclaimWithinCohort LowerPriority, ``within`` for
    withinClusterQueue) beside the lender of 6,000 cpu and the hog, in one flat cohort; the memo's policy first,
    then the reference's."""
    spec = QueueSpec(flavors=FLAVORS[:1], nominal=(0, 0), borrowing_limit=None, lending_limit=None, parent="pool",
                     within=within, reclaim="LowerPriority", bwc=False, threshold=None, strategy="BestEffortFIFO",
                     fungibility=("Borrow", "TryNextFlavor"), gpus=None, copies=copies)
    m, names = manifests([spec, lender(3000), HOG], True)
    m.cohorts = [c for c in m.cohorts if c.name != "sub"]
    policies = _memo_and_reference(m)
    return policies, names, Driver(policies, names, events=False)


def _hog_takes_the_rest(driver: Driver, policies: list[KueuePolicy], hog: int, priority: int) -> QuotaTree:
    """The hog (queue ``hog``) borrows all the lender has left, with workloads of ``priority``."""
    tree = policies[0].state.tree
    for flavor in FLAVORS[:2]:
        room = tree.available("cq2-0", (flavor, "cpu")) // CPU
        driver.submit(driver.made(hog, Shape(room, 0, 0, 1, None, priority, True, flavor)))
        driver.cycle()
    return tree


def test_a_walk_that_stops_at_a_queue_alike_is_not_handed_to_it() -> None:
    """Four queues alike (no quota of their own, reclaimWithinCohort LowerPriority, withinClusterQueue Never) each
    borrow 8 of the lender's 6,000 cpu with low-priority workloads; the hog takes the rest with workloads no head
    may reclaim. A 1-cpu head of higher priority in each: every share, the preemptor's with its head included, is 1
    thousandth, so each head's walk takes from the first queue alike in the walk order, the last one (ties go to
    the later child). The first head's nomination (its walk stopped at cq0-3 only) is handed to cq0-1 and cq0-2,
    not to cq0-3, whose own walk passes over its own place and takes from cq0-2. Decisions are the reference's."""
    policies, names, driver = _alike(4)
    memo = policies[0].state.memo
    assert memo is not None
    watched = WatchedMemo(memo)
    for _ in range(4):
        driver.submit(driver.made(0, FILLER, mirror=True))
        driver.cycle()
    tree = _hog_takes_the_rest(driver, policies, hog=5, priority=2)
    assert {tree.fair_sharing_key(name) for name in names[:4]} == {(0, 1.0)}
    driver.submit(driver.made(0, Shape(1, 0, 0, 1, None, 1, True, None), mirror=True))
    preempted = driver.cycle()
    assert preempted == [("cq0-3/w10004", "cq0-0/w10007", "InCohortFairSharing"),
                         ("cq0-2/w10004", "cq0-3/w10007", "InCohortFairSharing")]
    assert watched.with_targets == 2 and watched.refused == 1


def test_a_walk_that_passes_over_its_own_place_is_not_handed_to_a_queue_alike() -> None:
    """Three queues alike in spec (no quota of their own, withinClusterQueue Never, reclaimWithinCohort
    LowerPriority) borrow 8 of the lender's 6,000 cpu each (a share of 1 thousandth): cq0-0 with four 2-cpu workloads
    of priority 0, cq0-1 with a 1-cpu and a 7-cpu one of priority 2, cq0-2 with one 8-cpu one of priority 2; the hog
    takes the rest, with workloads no head may reclaim. cq0-1 and cq0-2 are alike to the memo (spec, usage, no own
    candidates), but not as candidates of others' walks. A 1-cpu head of priority 3 in each of the two: cq0-1's walk
    passes over cq0-2 (no workload of it can go with the share staying at 1), stops at its own place (which it
    passes over) and takes from cq0-0; cq0-2's walk takes cq0-1's 1-cpu workload there. cq0-1's nomination is not
    handed to cq0-2 (its walk stopped at cq0-1's place). Decisions are the reference's."""
    policies, names, driver = _alike(3)
    memo = policies[0].state.memo
    assert memo is not None
    watched = WatchedMemo(memo)
    for q, cpus, priority in ((0, (2, 2, 2, 2), 0), (1, (1, 7), 2), (2, (8,), 2)):
        for cpu in cpus:
            driver.submit(driver.made(q, Shape(cpu, 0, 0, 1, None, priority, True, None)))
            driver.cycle()
    tree = _hog_takes_the_rest(driver, policies, hog=4, priority=3)
    assert {tree.fair_sharing_key(name) for name in names[:3]} == {(0, 1.0)}
    driver.submit([*driver.made(1, Shape(1, 0, 0, 1, None, 3, True, None)),
                   *driver.made(2, Shape(1, 0, 0, 1, None, 3, True, None))])
    preempted = driver.cycle()
    assert preempted == [("cq0-0/w10004", "cq0-1/w10010", "InCohortFairSharing"),
                         ("cq0-1/w10005", "cq0-2/w10011", "InCohortFairSharing")]
    assert watched.with_targets == 0


def test_a_search_answered_without_a_walk_is_not_handed_to_a_queue_alike_that_would_walk() -> None:
    """As above, with only cq0-0 holding workloads a priority-1 head may reclaim (four 2-cpu ones of priority 0;
    cq0-1 holds one 8-cpu workload of priority 2). cq0-0's head finds nothing without walking (no other queue has
    candidates, and its own place is passed over), but cq0-1's, alike to the memo, takes from cq0-0: the first
    answer is not handed to it."""
    policies, names, driver = _alike(2)
    for q, cpus, priority in ((0, (2, 2, 2, 2), 0), (1, (8,), 2)):
        for cpu in cpus:
            driver.submit(driver.made(q, Shape(cpu, 0, 0, 1, None, priority, True, None)))
            driver.cycle()
    tree = _hog_takes_the_rest(driver, policies, hog=3, priority=3)
    assert {tree.fair_sharing_key(name) for name in names[:2]} == {(0, 1.0)}
    driver.submit([*driver.made(0, Shape(1, 0, 0, 1, None, 1, True, None)),
                   *driver.made(1, Shape(1, 0, 0, 1, None, 1, True, None))])
    assert driver.cycle() == [("cq0-0/w10004", "cq0-1/w10009", "InCohortFairSharing")]


def test_a_walk_with_own_candidates_is_not_handed_to_a_queue_alike() -> None:
    """cq0-0 and cq0-2, alike (withinClusterQueue LowerOrNewerEqualPriority, reclaimWithinCohort LowerPriority, four
    2-cpu workloads of priority 1 each, queued after the heads below), with cq0-1 between them holding four 2-cpu
    workloads of priority 0; all three at a share of 1 thousandth, the hog holding the rest. A 1-cpu head of priority
    1 in cq0-0 and cq0-2: its own queue's workloads are candidates, the others' of priority 1 are not. Shares tie,
    so the walk ranks the preemptor's own queue among the others by position: cq0-0's comes after cq0-1, whose
    workload it takes; cq0-2's comes first, and it takes its own. A search with own candidates is not shared."""
    policies, names, driver = _alike(3, within="LowerOrNewerEqualPriority")
    for _ in range(4):
        driver.submit([*driver.made(0, Shape(2, 0, 0, 1, None, 1, True, None), created=5), *driver.made(1, FILLER),
                       *driver.made(2, Shape(2, 0, 0, 1, None, 1, True, None), created=5)])
        driver.cycle()
    tree = _hog_takes_the_rest(driver, policies, hog=4, priority=3)
    assert {tree.fair_sharing_key(name) for name in names[:3]} == {(0, 1.0)}
    driver.submit([*driver.made(0, Shape(1, 0, 0, 1, None, 1, True, None)),
                   *driver.made(2, Shape(1, 0, 0, 1, None, 1, True, None))])
    assert driver.cycle() == [("cq0-1/w10011", "cq0-0/w10015", "InCohortFairSharing"),
                              ("cq0-2/w10012", "cq0-2/w10016", "InClusterQueue")]


def test_a_walk_that_ranks_its_own_queue_against_one_it_took_from_is_not_handed_across() -> None:
    """As above, but cq0-1 (between the two alike) borrows 12 cpu (six 2-cpu workloads of priority 0: a share of 2)
    and the heads ask for 3 cpu. Each head's walk takes one workload of cq0-1 first, which brings its share down to
    1, the preemptor's: then cq0-0's walk ranks cq0-1 first again (the later child) and takes a second one of it,
    cq0-2's ranks its own queue first and takes its own workload. cq0-0's nomination (made first: heads are
    nominated in queue order) is not cq0-2's."""
    policies, names, driver = _alike(3, within="LowerOrNewerEqualPriority")
    for k in range(6):
        alike = [driver.made(q, Shape(2, 0, 0, 1, None, 1, True, None), created=5) for q in (0, 2)] if k < 4 else []
        driver.submit([*driver.made(1, FILLER), *(w for made in alike for w in made)])
        driver.cycle()
    tree = _hog_takes_the_rest(driver, policies, hog=4, priority=3)
    assert [tree.fair_sharing_key(name) for name in names[:3]] == [(0, 1.0), (0, 2.0), (0, 1.0)]
    # cq0-2's head is made first: it wins the tournament's tie, and is processed before cq0-0's.
    driver.submit([*driver.made(2, Shape(3, 0, 0, 1, None, 1, True, None)),
                   *driver.made(0, Shape(3, 0, 0, 1, None, 1, True, None))])
    assert driver.cycle() == [("cq0-1/w10014", "cq0-2/w10017", "InCohortFairSharing"),
                              ("cq0-2/w10011", "cq0-2/w10017", "InClusterQueue")]
