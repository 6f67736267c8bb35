"""The virtual clock: a heap of timed events.

Events at the same instant are taken in a fixed order of kinds (work that ends frees devices before pods
start, starts before the timers that would fail a gang at that very instant), then in the order they were
scheduled, so a run is a pure function of its inputs.
"""

from __future__ import annotations

import heapq
from enum import IntEnum
from typing import NamedTuple


class Kind(IntEnum):
    WORK_DONE = 0  # a gang's (or a single pod's) work is over
    POD_DONE = 1  # one pod of a job whose pods work independently is over
    POD_START = 2  # a bound pod starts running
    MEMORY_PEAK = 3  # a running pod reaches its GPU memory use (OOM check)
    RENDEZVOUS = 4  # a gang's rendezvous deadline
    RETRY = 5  # a failed job is resubmitted
    ARRIVAL = 6
    TICK = 7  # periodic scheduling cycle
    WAKEUP = 8  # the policy asked to be woken (a backoff ends)
    SAMPLE = 9  # fragmentation sample
    END = 10  # the run's last instant
    CRASH = 11  # an attempt fails on its own (SimJob.crashes)
    REPLACE = 12  # a failed pod's replacement is created (FailureModels.replace_pods) and asks to join its job


class Event(NamedTuple):
    time: float
    kind: Kind
    seq: int
    job: str
    token: int  # the job's attempt token when scheduled; a stale event is ignored
    pod: str
    version: int = 0  # of the work it ends: contention moves a work's end, and the old event goes stale


class EventQueue:
    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[Event] = []
        self._seq = 0

    def push(self, time: float, kind: Kind, job: str = "", token: int = 0, pod: str = "", version: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._heap, Event(time, kind, self._seq, job, token, pod, version))

    def pop(self) -> Event:
        return heapq.heappop(self._heap)

    def peek_time(self) -> float | None:
        return self._heap[0].time if self._heap else None

    def __len__(self) -> int:
        return len(self._heap)
