"""Workloads shielded from preemption for a while: those whose eviction a PodDisruptionBudget refused.

A shielded workload keeps its nodes and its quota but is no preemption candidate, so that the next cycle chooses
other victims instead of asking for the same refused eviction again; the shield lapses after the time the refusal
asked for (Retry-After) or a backoff, and the workload is a candidate again. The driver learns of the refusals
(the Eviction API answers 429) and says when: the table and the rule take ``now`` as an argument, and read no clock.
"""

from __future__ import annotations

import threading
from collections.abc import Collection

from gpufleet.scheduling.kueue.state import SchedulerState


class Shields:
    """Which workloads are shielded, and until when. Thread-safe: refusals may be recorded while a cycle reads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._until: dict[str, float] = {}

    def add(self, workload: str, until: float) -> None:
        with self._lock:
            self._until[workload] = max(until, self._until.get(workload, 0.0))

    def active(self, now: float) -> set[str]:
        """The workloads shielded at ``now``; those whose shield lapsed are forgotten."""
        with self._lock:
            for key in [k for k, t in self._until.items() if t <= now]:
                del self._until[key]
            return set(self._until)

    def next_expiry(self) -> float | None:
        """When the earliest shield lapses (its workload is a candidate again), or None with none held."""
        with self._lock:
            return min(self._until.values(), default=None)


def shield(state: SchedulerState, workloads: Collection[str]) -> None:
    """Take ``workloads`` out of the preemption candidates (their usage and placements stay charged).

    Candidates are read from the admitted-workload tables; quota lives in the quota tree and nodes in the
    ClusterState, so removing the table entries hides the workloads from preemption and nothing else."""
    if not workloads:
        return
    for table in state.admitted.values():
        for key in workloads:
            table.pop(key, None)
