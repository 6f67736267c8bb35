"""Pending workloads per ClusterQueue: one heap each, a parking lot for inadmissible ones (§1.7, §1.9).

Heap order: the sticky workload (a BestEffortFIFO head waiting for its preemptions) first, then higher
priority, then earlier queue-order timestamp, then input order.

After a cycle each head that was not admitted is requeued:

* ``StrictFIFO``: straight back into the heap, so it stays the head and blocks the queue, except after a
  namespace mismatch, which parks it;
* ``BestEffortFIFO``: back into the heap only after failing once nominated (``FailedAfterNomination``),
  while waiting for its preemptions (``PendingPreemption``, which also makes it sticky), or when its last
  flavor search stopped early; otherwise parked so that the next workload becomes the head.

Parked workloads return to their heaps when quota is released in their cohort tree (a workload finishes or is
evicted), unless a requeue backoff keeps them out until it expires.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field

from gpufleet.api.objects import QueueingStrategy
from gpufleet.scheduling.kueue.info import WorkloadInfo

FAILED_AFTER_NOMINATION = "FailedAfterNomination"
PENDING_PREEMPTION = "PendingPreemption"
NAMESPACE_MISMATCH = "NamespaceMismatch"
GENERIC = ""

_IMMEDIATE = (FAILED_AFTER_NOMINATION, PENDING_PREEMPTION)

# (rank, queue timestamp, input order, key, push sequence, the workload), the rank being -priority, or STICKY for the
# sticky workload: one element for both, as every comparison in the heap starts with it. The sequence is unique,
# so comparisons never reach the workload, which rides along for pop to return.
_HeapItem = tuple[float, float, int, str, int, WorkloadInfo]
STICKY = float("-inf")  # before every priority


@dataclass(slots=True)
class ClusterQueueHeap:
    name: str
    strategy: QueueingStrategy
    heap: list[_HeapItem] = field(default_factory=list)
    active: dict[str, _HeapItem] = field(default_factory=dict)  # each queued workload's live heap item
    parked: dict[str, WorkloadInfo] = field(default_factory=dict)
    sticky: str | None = None
    _seq: int = 0
    # The heap item each parked workload returns with, made when it is parked (a parked workload is never the
    # sticky one, and its priority and queue timestamp do not change while it is parked), and the parked ones
    # that had a requeue backoff then: a release wakes every parked workload of a cohort tree's queues, and
    # with these it costs a heapify, not a push each.
    _returns: dict[str, _HeapItem] = field(default_factory=dict)
    _backoff: set[str] = field(default_factory=set)

    def _entry(self, info: WorkloadInfo) -> _HeapItem:
        self._seq += 1
        key = info.key
        return STICKY if key == self.sticky else -info.priority, info.queue_ts, info.order, key, self._seq, info

    def push(self, info: WorkloadInfo) -> None:
        key = info.key
        if self.parked.pop(key, None) is not None:
            del self._returns[key]
            self._backoff.discard(key)
        item = self.active[key] = self._entry(info)
        heapq.heappush(self.heap, item)

    def pop(self) -> WorkloadInfo | None:
        while self.heap:
            item = heapq.heappop(self.heap)
            if self.active.get(item[3]) is item:
                del self.active[item[3]]
                return item[5]
        return None

    def peek(self) -> WorkloadInfo | None:
        """The workload :meth:`pop` would return, left in place (stale heap items are dropped on the way)."""
        while self.heap:
            item = self.heap[0]
            if self.active.get(item[3]) is item:
                return item[5]
            heapq.heappop(self.heap)
        return None

    def park(self, info: WorkloadInfo) -> None:
        key = info.key
        if self.active:
            self.active.pop(key, None)  # its heap item goes stale
        if self.sticky == key:
            self.sticky = None
        self.parked[key] = info
        self._returns[key] = self._entry(info)
        if info.requeue_at is not None:
            self._backoff.add(key)
        elif self._backoff:
            self._backoff.discard(key)

    def set_strategy(self, strategy: QueueingStrategy, keep_sticky: bool = False) -> None:
        """The queue's strategy changed under a running policy: its sticky head (one waiting for its preemptions)
        is sticky no more, as a queue made anew has none, unless ``keep_sticky`` (a reservation holds it, which any
        strategy keeps: kueue.reservation); what is parked stays parked until a release wakes it."""
        self.strategy = strategy
        key = self.sticky
        if key is None or keep_sticky:
            return
        self.sticky = None
        item = self.active.get(key)
        if item is not None:
            self.push(item[5])  # (its heap item ranked it first: made again, by its priority and timestamp)

    def remove(self, key: str) -> None:
        self.active.pop(key, None)
        if self.parked.pop(key, None) is not None:
            del self._returns[key]
            self._backoff.discard(key)
        if self.sticky == key:
            self.sticky = None

    def unpark(self, now: float, keep: Collection[str] = ()) -> None:
        """Move parked workloads back to the heap, except those still in requeue backoff and those of ``keep``.

        When every parked workload returns, their entries made when they were parked go into the heap at once
        (one heapify): heap order is total (no two live entries share a key), so pops come out in the order
        pushing each in turn would give."""
        if not self.parked:
            return
        if self._backoff or keep:
            moved = [w for w in self.parked.values()
                     if (w.requeue_at is None or w.requeue_at <= now) and w.key not in keep]
            if len(moved) < len(self.parked):
                for w in moved:
                    self.push(w)
                return
        returns = self._returns
        heap = self.heap
        self.active.update(returns)
        if 4 * len(returns) >= len(heap):
            heap.extend(returns.values())
            heapq.heapify(heap)  # linear in the heap: cheaper than a push each when many return
        else:
            for item in returns.values():
                heapq.heappush(heap, item)
        self.parked.clear()
        returns.clear()
        self._backoff.clear()

    def __len__(self) -> int:
        return len(self.active) + len(self.parked)

    def pending(self) -> Iterator[WorkloadInfo]:
        yield from (item[5] for item in self.active.values())
        yield from self.parked.values()

    def ordered(self) -> list[WorkloadInfo]:
        """Active workloads in heap order, then parked ones (for reports)."""
        active = sorted(self.active.values())
        parked = sorted(self.parked.values(), key=lambda w: (-w.priority, w.queue_ts, w.order, w.key))
        return [item[5] for item in active] + parked


class QueueManager:
    """Every ClusterQueue's heap, and which ClusterQueues share a cohort tree."""

    def __init__(self, strategies: dict[str, QueueingStrategy], trees: dict[str, str]) -> None:
        self.queues = {name: ClusterQueueHeap(name, s) for name, s in strategies.items()}
        self.tree_of = trees  # ClusterQueue -> name of the root of its cohort tree (itself without cohort)
        self.members: dict[str, list[str]] = {}
        for cq, root in trees.items():
            self.members.setdefault(root, []).append(cq)
        # Cohort trees where quota was released since the last cycle; their parked workloads are requeued
        # when the next cycle takes its heads (events arrive between cycles, so nothing is seen later).
        self._released: set[str] = set()

    def add_queue(self, name: str, strategy: QueueingStrategy, tree: str) -> None:
        """A ClusterQueue added under a running policy, in the cohort tree whose root is ``tree``."""
        self.queues[name] = ClusterQueueHeap(name, strategy)
        self.tree_of[name] = tree
        self.members.setdefault(tree, []).append(name)

    def add(self, info: WorkloadInfo, now: float) -> None:
        assert info.cluster_queue is not None
        q = self.queues[info.cluster_queue]
        if info.requeue_at is not None and info.requeue_at > now:
            q.park(info)  # backoff: only its expiry brings it back
        else:
            q.push(info)

    def remove(self, info: WorkloadInfo) -> None:
        if info.cluster_queue in self.queues:
            self.queues[info.cluster_queue].remove(info.key)

    def heads(self, now: float, keep: Collection[str] = ()) -> list[WorkloadInfo]:
        """One head per ClusterQueue, popped (they are requeued after the cycle)."""
        for root in sorted(self._released):
            for cq in self.members[root]:
                q = self.queues[cq]
                if q.parked:
                    q.unpark(now, keep)
        self._released.clear()
        out = []
        for q in self.queues.values():
            head = q.pop()
            if head is not None:
                out.append(head)
        return out

    def next_heads(self) -> list[WorkloadInfo]:
        """The heads the next cycle would take, as things stand (parked workloads a release would wake
        count once they are woken, so callers check :attr:`releases_pending` too)."""
        return [head for q in self.queues.values() if (head := q.peek()) is not None]

    @property
    def releases_pending(self) -> bool:
        """Quota was released since the last cycle took its heads: parked workloads of those trees may return."""
        return any(self.queues[cq].parked for root in self._released for cq in self.members.get(root, ()))

    def requeue(self, info: WorkloadInfo, reason: str) -> None:
        assert info.cluster_queue is not None
        q = self.queues[info.cluster_queue]
        if reason == NAMESPACE_MISMATCH:
            q.park(info)
            return
        if q.strategy == "StrictFIFO" or reason in _IMMEDIATE or info.pending_flavors():
            if reason == PENDING_PREEMPTION and q.strategy == "BestEffortFIFO":
                q.sticky = info.key
            q.push(info)
            return
        q.park(info)

    def hold_head(self, info: WorkloadInfo) -> None:
        """Keep a workload the head of its queue, whatever its queueing strategy (it reserves:
        kueue.reservation)."""
        assert info.cluster_queue is not None
        q = self.queues[info.cluster_queue]
        q.sticky = info.key
        q.push(info)

    def clear_sticky(self, info: WorkloadInfo) -> None:
        q = self.queues.get(info.cluster_queue or "")
        if q is not None and q.sticky == info.key:
            q.sticky = None

    def release_in_tree(self, cluster_queue: str) -> None:
        """Quota was released in this ClusterQueue's cohort tree: its parked workloads may fit now."""
        self._released.add(self.tree_of.get(cluster_queue, cluster_queue))

    def unpark_where(self, infos: Iterable[WorkloadInfo], now: float) -> None:
        for info in infos:
            q = self.queues.get(info.cluster_queue or "")
            if q is not None and info.key in q.parked and (info.requeue_at is None or info.requeue_at <= now):
                q.push(info)

    def pending_count(self) -> int:
        return sum(len(q) for q in self.queues.values())
