"""What a head's preemption searches read of the cohort that the nomination memo cannot describe by value.

Under fair sharing the memo shares a searching nomination between queues alike (spec, usage, own candidates by
value; :mod:`~gpufleet.scheduling.kueue.memo`) only when the searches' answers do not depend on which of them
asked. In a flat cohort's walk (:mod:`~gpufleet.scheduling.kueue.flat_fair_search`) the asking queue's identity
enters in two ways only: its own place in the walk order is passed over (its usage is the preemptor's, its
candidates are its own), and its own node is ranked among the other queues by its position when their shares tie.
A search therefore records the queues at whose places the walk stopped (:attr:`SearchReads.queues`): for two
queues alike, neither among them, each one's walk stops at the same places and reads the same there. Anything
else that reads the asker's identity (its own candidates ranked against the other queues, a cohort that is not
flat, the classical search) marks the reads :attr:`~SearchReads.opaque`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class SearchReads:
    """Accumulated over every preemption search of one head's nomination."""

    # The ClusterQueues whose place in a flat cohort's walk a search stopped at (visited, or passed over as the
    # asker's own or as one it had already taken from).
    queues: set[str] = field(default_factory=set)
    # A search read something of the asking queue that is not described by value: its nomination keeps the name.
    opaque: bool = False
