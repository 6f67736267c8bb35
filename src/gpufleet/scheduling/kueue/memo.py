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
  groups, quotas, preemption and fungibility) and its usage of every flavor-resource. Queues alike in both get one
  nomination, provided nothing else of theirs can be read: the queue is above its quota nowhere (else its own
  workloads are candidates of the cohort's list, where their positions among the others' count), fair sharing is
  off (the target walk breaks ties by a queue's position among its siblings), and its own workloads a head could
  preempt (withinClusterQueue: those of lower priority, or of lower or equal priority under
  LowerOrNewerEqualPriority) are described by value: priority, whether they are being evicted, usage, and
  queue timestamp where the policy reads it; its other workloads count only through its usage. Targets among
  them are remembered by position in the queue's candidate order and mapped to the asking queue's own workloads.
  Otherwise the queue's name is part of the key;
* **the same head**: the requests of each pod set (count, minimum count, per-pod quota amounts), what flavor
  selection reads of its pod template (node selector, required affinity, tolerations, topology request), its
  priority, queue timestamp where a policy reads it, and where its last flavor search stopped.

``Cycle`` asks the memo only when ``SchedulerState.memo`` is set (the default); a property test compares cycles with
and without it on random setups (``tests/kueue/test_nomination_memo.py``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

from gpufleet.scheduling.kueue.admitted import AdmittedQueue
from gpufleet.scheduling.kueue.config import CQSpec
from gpufleet.scheduling.kueue.flavors import Assignment
from gpufleet.scheduling.kueue.info import WorkloadInfo
from gpufleet.scheduling.kueue.preemption_order import Target
from gpufleet.scheduling.quota import QuotaTree

# Own workloads described by value at most this many; a queue with more is keyed by its name.
MAX_OWN_BY_VALUE = 16
# Nominations remembered per cohort tree and generation at most; past it the tree's table starts afresh.
MAX_PER_TREE = 4096

_NEWER = "LowerOrNewerEqualPriority"


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

    def targets_for(self, own: list[WorkloadInfo]) -> list[Target]:
        if not self.targets:
            return []
        return [t if i < 0 else Target(own[i], t.reason) for t, i in zip(self.targets, self.own, strict=True)]


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


class NominationMemo:
    """Remembered nominations per cohort tree, valid while the tree's generation stays the same."""

    def __init__(self, tree: QuotaTree, cqs: Mapping[str, CQSpec], admitted: Mapping[str, AdmittedQueue],
                 fair_sharing: bool) -> None:
        self.tree = tree
        self.admitted = admitted
        self.fair_sharing = fair_sharing
        interned: dict[Hashable, int] = {}
        self._spec: dict[str, int] = {name: interned.setdefault(_spec_key(cq), len(interned))
                                      for name, cq in cqs.items()}
        self._tables: dict[int, tuple[tuple[int, int, int], dict[Hashable, Nomination]]] = {}
        # What the memo saved: nominations recalled, of which made for another queue, of which with targets among
        # the asking queue's own workloads; and nominations made.
        self.hits = 0
        self.shared = 0
        self.mapped = 0
        self.misses = 0

    def lookup(self, info: WorkloadInfo, cq: CQSpec) -> Lookup:
        """Where this head's nomination is (or will be) remembered."""
        tree = self.tree
        name = cq.name
        generation, usage, over = tree.local_state(name)
        entry = self._tables.get(generation[0])
        if entry is None or entry[0] != generation:
            # The tree moved on: what was remembered for it can no longer be asked for.
            entry = self._tables[generation[0]] = (generation, {})
        table = entry[1]
        if len(table) >= MAX_PER_TREE:
            table.clear()
        policy = cq.preemption
        within = policy.within_cluster_queue
        newer = within == _NEWER or policy.reclaim_within_cohort == _NEWER
        p = info.priority
        own: list[WorkloadInfo] = []
        who: Hashable = name
        if not over and not self.fair_sharing:
            who = self._spec[name]
            if within != "Never":
                # The queue's own candidates: its admitted workloads the policy lets this head evict on priority
                # grounds, at most those of lower priority (LowerPriority) or of lower or equal priority
                # (LowerOrNewerEqualPriority, which also compares queue timestamps, described below); the list is
                # in standing order, lowest priority first.
                queue = self.admitted[name]
                n = bisect_left(queue.standings(), (p + 1,) if within == _NEWER else (p,))
                if n > MAX_OWN_BY_VALUE:
                    who = name
                elif n:
                    own = queue.ordered()[:n]
                    who = (who, tuple([(c.priority, c.queue_ts if newer else None, bool(c.evicting),
                                        tuple(c.usage.items())) for c in own]))
        last = None if info.last_tried is None else tuple(tuple(d.items()) for d in info.last_tried)
        shape = info.shape
        if shape is None:
            shape = info.shape = head_key(info)
        key = (who, usage, shape, p, info.queue_ts if newer else None, last)
        found = table.get(key)
        if found is None:
            self.misses += 1
        else:
            self.hits += 1
            if found.made_for != name:
                self.shared += 1
                if any(i >= 0 for i in found.own):
                    self.mapped += 1
        return Lookup(table, key, found, who != name, own)


@dataclass(slots=True)
class Lookup:
    """One head's place in the memo: what was remembered (``found``), or where to remember it."""

    table: dict[Hashable, Nomination]
    key: Hashable
    found: Nomination | None
    by_value: bool  # the queue is described by value: its own targets are remembered by position in ``own``
    own: list[WorkloadInfo]

    def remember(self, cq: CQSpec, assignment: Assignment, targets: list[Target], message: str) -> None:
        positions = {id(c): i for i, c in enumerate(self.own)}
        where = []
        for t in targets:
            i = positions.get(id(t.info), -1)
            if i < 0 and self.by_value and t.info.cluster_queue == cq.name:
                return  # an own target the key does not describe: not to be handed to another queue
            where.append(i)
        self.table[self.key] = Nomination(assignment, tuple(targets), tuple(where), message, cq.name)
