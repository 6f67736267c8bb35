"""What a head's preemption searches read of the cohort that the nomination memo cannot describe by value.

Under fair sharing the memo shares a searching nomination between queues alike (spec, usage, own candidates by
value; :mod:`~gpufleet.scheduling.kueue.memo`) only when the searches' answers do not depend on which of them
asked. In a flat cohort's walk (:mod:`~gpufleet.scheduling.kueue.flat_fair_search`) the asking queue's identity
enters in two ways only:

* its own place in the walk order is passed over (its usage is the preemptor's, its candidates its own): a search
  records the queues at whose places the walk stopped (:attr:`SearchReads.queues`); for two queues alike, neither
  among them, each one's walk stops at the same places and reads the same there;
* while it has own candidates left, its own node is ranked among the queues of equal share by its position among
  the cohort's children (ties go to the later child): the walk records the positions of the queues it was ranked
  against at an equal share, nearest to its own on either side (:attr:`~SearchReads.low`,
  :attr:`~SearchReads.high`); a queue alike whose position lies within them (a bound may be its own place) is
  ranked before and after the same queues.

Anything else that reads the asker's identity (a cohort that is not flat, the classical search) marks the reads
:attr:`~SearchReads.opaque`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field


@dataclass(slots=True)
class SearchReads:
    """Accumulated over every preemption search of one head's nomination."""

    # The ClusterQueues whose place in a flat cohort's walk a search stopped at (visited, or passed over as the
    # asker's own or as one it had already taken from).
    queues: set[str] = field(default_factory=set)
    # A search read something of the asking queue that is not described by value: its nomination keeps the name.
    opaque: bool = False
    # The positions among the cohort's children a queue alike may have, bounds included.
    low: int = -1
    high: int = sys.maxsize

    def ranked_against(self, pos: int, own: int) -> None:
        """The asker's own node (at position ``own``) was ranked against the queue at ``pos`` at an equal share."""
        if pos > own:
            self.high = min(self.high, pos)
        elif pos < own:
            self.low = max(self.low, pos)

    def admits(self, name: str, pos: int) -> bool:
        """Whether a queue alike, ``name`` at position ``pos``, would read the same."""
        return not self.opaque and name not in self.queues and self.low <= pos <= self.high
