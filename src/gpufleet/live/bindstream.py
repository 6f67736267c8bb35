"""A round's admissions handed to the binders while the round goes on (issue 27's burst).

A full cycle at 5,000 nodes builds its world in about a second, then runs a policy round of up to
``roundBudget`` seconds. While a round's Bindings waited for its end, a burst paid the whole round before its
first Binding went out, and the API client's token bucket, which bounds how fast Bindings go, stood idle all that
time. Here the round's admissions go to the binders in batches as they are made, the way kube-scheduler hands
each assumed pod to a binding goroutine and goes on to the next.

Batches, not single admissions: a burst's round admits one workload per policy cycle, and each hand-off takes
the binders' lock and wakes their threads. What the buffer holds when the round ends goes with the cycle's other
Bindings: its pods are not marked as sent, so the cycle's own job list takes them.

Only until the round's first preemption (``gpufleet.live.planner.run``): from then on the round's admissions wait
for its end, as before, so a preemptor's Bindings never start ahead of its victims' evictions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gpufleet.live.world import World
from gpufleet.scheduling.types import AdmittedWorkload

log = logging.getLogger(__name__)

# A batch goes out once it holds this many admissions, or once this long passed since the last one went.
BATCH = 64
EVERY_S = 0.01


@dataclass(slots=True)
class BindStream:
    """Hears a round's admissions (``planner.run``'s ``on_admitted``, with the world) and hands them to ``send``
    in batches. ``send`` must either hand a whole batch over or raise before it changes anything."""

    send: Callable[[World, list[AdmittedWorkload]], None]
    batch: int = BATCH
    every_s: float = EVERY_S
    buffer: list[AdmittedWorkload] = field(default_factory=list)
    last: float = field(default_factory=time.perf_counter)
    sent: int = 0  # admissions handed over
    stopped: bool = False

    def __call__(self, world: World, admitted: list[AdmittedWorkload]) -> None:
        if self.stopped:
            return
        self.buffer.extend(admitted)
        now = time.perf_counter()
        if len(self.buffer) < self.batch and now - self.last < self.every_s:
            return
        batch, self.buffer = self.buffer, []
        self.last = now
        try:
            self.send(world, batch)
        except Exception:
            # Nothing of the batch was handed over; the cycle's own job list takes it at the round's end, and
            # fails there in turn if the fault is in the admissions themselves.
            log.exception("handing %d admissions to the binders during the round failed; the round's Bindings "
                          "wait for its end", len(batch))
            self.stopped = True
            return
        self.sent += len(batch)
