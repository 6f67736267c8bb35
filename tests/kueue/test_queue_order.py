"""A ClusterQueue's pending workloads come out in Kueue's queue order whatever happened to them on the way.

``ClusterQueueHeap`` keeps a heap with stale items, items made when a workload is parked and joined again in one
heapify when quota is released: these tests hold it to a reference that keeps every queued workload in a dict and
takes the smallest order key each time (the sticky workload first, then higher priority, earlier queue timestamp,
input order, key), through random sequences of pushes, pops, peeks, parks, removals, requeue backoffs and releases.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.scheduling.kueue.info import WorkloadInfo
from gpufleet.scheduling.kueue.queues import ClusterQueueHeap


@dataclass
class Pending:
    """What the queue reads of a workload."""

    key: str
    priority: int
    queue_ts: float
    order: int
    requeue_at: float | None = None


OrderKey = tuple[float, float, int, str]


class Reference:
    """The same queue, written plainly."""

    def __init__(self) -> None:
        self.active: dict[str, OrderKey] = {}
        self.parked: dict[str, tuple[Pending, OrderKey]] = {}
        self.sticky: str | None = None

    def _key(self, w: Pending) -> OrderKey:
        return (float("-inf") if w.key == self.sticky else -w.priority, w.queue_ts, w.order, w.key)

    def push(self, w: Pending) -> None:
        self.parked.pop(w.key, None)
        self.active[w.key] = self._key(w)

    def head(self) -> str | None:
        return min(self.active.values())[3] if self.active else None

    def pop(self) -> str | None:
        key = self.head()
        if key is not None:
            del self.active[key]
        return key

    def park(self, w: Pending) -> None:
        self.active.pop(w.key, None)
        if self.sticky == w.key:
            self.sticky = None
        self.parked[w.key] = (w, self._key(w))

    def remove(self, key: str) -> None:
        self.active.pop(key, None)
        self.parked.pop(key, None)
        if self.sticky == key:
            self.sticky = None

    def unpark(self, now: float) -> None:
        waiting = [w for w, _ in self.parked.values() if w.requeue_at is not None and w.requeue_at > now]
        if waiting:
            for w, _ in list(self.parked.values()):
                if w.requeue_at is None or w.requeue_at <= now:
                    self.push(w)
            return
        for w, key in self.parked.values():
            self.active[w.key] = key
        self.parked.clear()


workloads = st.builds(Pending, key=st.sampled_from([f"ns/w{i}" for i in range(12)]),
                      priority=st.sampled_from([0, 100, 200]), queue_ts=st.sampled_from([0.0, 1.0, 1.5, 2.0]),
                      order=st.integers(0, 3), requeue_at=st.none() | st.sampled_from([1.0, 3.0]))
steps = st.lists(st.one_of(
    st.tuples(st.just("push"), workloads),
    st.tuples(st.just("sticky"), st.none()),
    st.tuples(st.just("park"), workloads),
    st.tuples(st.just("remove"), workloads),
    st.tuples(st.just("unpark"), st.sampled_from([0.0, 2.0, 5.0])),
    st.tuples(st.just("pop"), st.none()),
    st.tuples(st.just("peek"), st.none()),
), max_size=120)


@settings(max_examples=400, deadline=None)
@given(script=steps)
def test_the_queue_pops_in_kueue_order_whatever_happened(script: list[tuple[str, Any]]) -> None:
    q = ClusterQueueHeap("cq", "BestEffortFIFO")
    ref = Reference()
    current: dict[str, Pending] = {}  # the workload object each key stands for now
    for op, arg in script:
        if op == "sticky":
            # A BestEffortFIFO head waiting for its preemptions goes back in first (QueueManager.requeue): the head
            # just popped, so that no other sticky item is live.
            got = q.pop()
            assert (got.key if got else None) == ref.pop()
            if got is not None:
                q.sticky = ref.sticky = got.key
                q.push(got)
                ref.push(current[got.key])
        elif op in ("push", "park"):
            # A workload keeps its priority and timestamp while it is queued or parked: a changed one is a new
            # object, taken out first (as submit forgets the old one).
            w = arg
            old = current.get(w.key)
            if old is not None and (old.priority, old.queue_ts, old.order) != (w.priority, w.queue_ts, w.order):
                q.remove(w.key)
                ref.remove(w.key)
            current[w.key] = w
            getattr(q, "park" if op == "park" else "push")(cast(WorkloadInfo, w))
            getattr(ref, "park" if op == "park" else "push")(w)
        elif op == "remove":
            q.remove(arg.key)
            ref.remove(arg.key)
        elif op == "unpark":
            q.unpark(arg)
            ref.unpark(arg)
        elif op == "pop":
            got = q.pop()
            assert (got.key if got else None) == ref.pop()
        else:
            got = q.peek()
            assert (got.key if got else None) == ref.head()
        assert len(q) == len(ref.active) + len(ref.parked)
        assert set(q.parked) == set(ref.parked)
    order = [w.key for w in q.ordered()]
    assert order[:len(ref.active)] == [k[3] for k in sorted(ref.active.values())]
    drained = []
    while (w := q.pop()) is not None:
        drained.append(w.key)
    assert drained == [k[3] for k in sorted(ref.active.values())]


def test_parked_workloads_return_before_later_arrivals() -> None:
    """The usual release: heads parked one by one return before what arrived since."""
    q = ClusterQueueHeap("cq", "BestEffortFIFO")
    arrivals = [Pending(f"ns/w{i}", 0, float(i), i) for i in range(6)]
    for w in arrivals:
        q.push(cast(WorkloadInfo, w))
    for _ in range(3):  # three cycles: each head fails and is parked, the next one becomes the head
        head = q.pop()
        assert head is not None
        q.park(head)
    assert q.peek() is cast(WorkloadInfo, arrivals[3])
    q.unpark(0.0)
    assert [w.key for w in q.ordered()] == [w.key for w in arrivals]
    assert [q.pop() for _ in range(6)] == [cast(WorkloadInfo, w) for w in arrivals]
