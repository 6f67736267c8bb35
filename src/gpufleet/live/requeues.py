"""What the live scheduler remembers of the workloads it evicted for ``PodsReadyTimeout``: Kueue's requeue state.

Kueue keeps it in the Workload's ``status.requeueState`` (how many times the workload was requeued, until when it
backs off): an evicted workload waits ``backoffBaseSeconds × 2^(n-1)`` (at most ``backoffMaxSeconds``) before it
is tried again, goes to the back of its queue (``requeuingStrategy.timestamp: Eviction``), and is deactivated once
requeued more than ``backoffLimitCount`` times. gpufleet has no Workload object of its own, and its full cycle
builds a new policy from the cluster's objects, which knows nothing of an eviction: without this memory a Job whose
pods never get ready was admitted again at once, timed out again, and so on forever.

The memory lives in the scheduler process (a restart or a new leader starts it empty, as if nothing had been
evicted yet); every policy the scheduler builds is given it (:meth:`RequeueMemory.apply`, the core's
``KueuePolicy.requeued``). An entry goes once its workload has been gone for :data:`FORGET_AFTER_S` past its
backoff (a Job's pods are deleted by the eviction and created again by its controller: the workload is absent in
between, and must find its entry again).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from gpufleet.api.objects import PodsReadyPolicy
from gpufleet.scheduling.kueue import KueuePolicy

FORGET_AFTER_S = 600.0


@dataclass(frozen=True, slots=True)
class Requeue:
    count: int
    evicted_at: float
    requeue_at: float | None  # None: deactivated
    deactivated: bool
    # The UIDs of the evicted pods' owners (a Job's): a workload of the same name whose pods another owner made (the
    # Job deleted and created again) is a new workload, as Kueue makes a new Workload for it, and starts afresh.
    owners: frozenset[str] = frozenset()
    # The UIDs of the pods evicted: some of them evicted again, and no other (a cycle that ran before all of their
    # deletions reached the cache), is the same eviction, not one more requeue.
    pods: frozenset[str] = frozenset()


def made_again(before: frozenset[str], now: frozenset[str]) -> bool:
    """Whether the workload's pods now come from other owners than those evicted (the Job deleted and created
    again): a new workload, as Kueue makes a new Workload for it."""
    return bool(before and now and before.isdisjoint(now))


class RequeueMemory:
    """Workload key -> its requeue state after ``PodsReadyTimeout`` evictions (see the module doc)."""

    def __init__(self) -> None:
        self._entries: dict[str, Requeue] = {}  # (the cycle's thread alone reads and writes it)

    def copy(self) -> RequeueMemory:
        """For a trial decision (the search for an object that makes the cycle fail), which must change nothing."""
        out = RequeueMemory()
        out._entries = dict(self._entries)
        return out

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, workload: str) -> Requeue | None:
        return self._entries.get(workload)

    def evicted(self, workload: str, policy: PodsReadyPolicy, now: float,
                owners: frozenset[str] = frozenset(), pods: frozenset[str] = frozenset()) -> Requeue:
        """The workload was evicted for ``PodsReadyTimeout`` at ``now`` under ``policy``: one more requeue, unless
        these ``pods`` (UIDs) were all evicted then already (the rest of a gang whose other deletions were seen
        first; with a pod of its own, one stuck being deleted beside new ones, it is one more). ``owners``: its
        pods' owners' UIDs."""
        before = self._entries.get(workload)
        if before is not None and pods and pods <= before.pods:
            return before
        same = before is not None and not made_again(before.owners, owners)
        count = (before.count if before is not None and same else 0) + 1
        limit = policy.backoff_limit_count
        if limit is not None and count > limit:
            entry = Requeue(count, now, None, True, owners, pods)
        else:
            delay = min(policy.backoff_base_s * 2 ** (count - 1), policy.backoff_max_s)
            entry = Requeue(count, now, now + delay, False, owners, pods)
        self._entries[workload] = entry
        return entry

    def apply(self, policy: KueuePolicy, now: float, owners_of: Callable[[str], frozenset[str]],
              only: Collection[str] | None = None) -> int:
        """Give a policy built (or workloads submitted: ``only``) since the evictions what Kueue would have kept;
        how many of its workloads it touched. ``owners_of``: a workload's pods' owners' UIDs, as they stand."""
        entries = list(self._entries.items()) if only is None else [
            (k, e) for k in only if (e := self._entries.get(k)) is not None]
        touched = 0
        for key, e in entries:
            if policy.info(key) is None:
                continue
            now_owners = owners_of(key)
            if made_again(e.owners, now_owners):
                self._entries.pop(key, None)  # the owner was made again: a new workload, starting afresh
                continue
            policy.requeued(key, e.count, e.requeue_at, e.evicted_at, now, deactivated=e.deactivated)
            touched += 1
        return touched

    def forget_gone(self, present: Collection[str], now: float) -> None:
        """Drop the entries of workloads absent from ``present`` (the world's workload keys) for long enough."""
        for key in [k for k, e in self._entries.items() if k not in present
                    and now - max(e.evicted_at, e.requeue_at or 0.0) > FORGET_AFTER_S]:
            del self._entries[key]
