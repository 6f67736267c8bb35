"""Assignment modes and the flavor-preference rules of Kueue's flavor assigner (§1.10)."""

from __future__ import annotations

import enum
from typing import NamedTuple

from gpufleet.api.objects import FlavorFungibility


class Mode(enum.IntEnum):
    """How a flavor can hold a request, worst first (Kueue's internal preemptionMode)."""

    NO_FIT = 0
    NO_CANDIDATES = 1  # preemption would be needed but the simulation found no targets
    PREEMPT = 2  # targets include the workload's own ClusterQueue
    RECLAIM = 3  # targets only in other ClusterQueues of the cohort
    FIT = 4

    @property
    def outcome(self) -> Outcome:
        if self is Mode.NO_FIT:
            return Outcome.NO_FIT
        if self is Mode.FIT:
            return Outcome.FIT
        return Outcome.PREEMPT


class Outcome(enum.IntEnum):
    """The mode Kueue reports outside the assigner (FlavorAssignmentMode)."""

    NO_FIT = 0
    PREEMPT = 1
    FIT = 2


# The members as module names, for code that reads them per head (see kueue.info's PENDING, ADMITTED, FINISHED).
FIT, NO_FIT, PREEMPT = Outcome.FIT, Outcome.NO_FIT, Outcome.PREEMPT

# Mode.outcome as a table indexed by the mode's value, for the assigner's inner loop.
MODE_OUTCOME: tuple[Outcome, ...] = (Outcome.NO_FIT, Outcome.PREEMPT, Outcome.PREEMPT, Outcome.PREEMPT, Outcome.FIT)


class Granular(NamedTuple):
    """A flavor-resource's mode with its borrowing level (a tuple: the flavor assigner makes one per quota check)."""

    mode: Mode
    borrow: int  # borrowing level: 0 within nominal, else height of the smallest cohort subtree that holds it


WORST = Granular(Mode.NO_FIT, 1 << 62)
BEST = Granular(Mode.FIT, 0)


def is_preferred(a: Granular, b: Granular) -> bool:
    """Whether ``a`` is better than ``b``: a better preemption mode first, then a lower borrowing level."""
    if a.mode is Mode.NO_FIT:
        return False
    if b.mode is Mode.NO_FIT:
        return True
    if a.mode != b.mode:
        return a.mode > b.mode
    return a.borrow < b.borrow


def should_try_next_flavor(mode: Granular, fungibility: FlavorFungibility) -> bool:
    if mode.mode in (Mode.NO_FIT, Mode.NO_CANDIDATES):
        return True
    if mode.mode in (Mode.PREEMPT, Mode.RECLAIM) and fungibility.when_can_preempt == "TryNextFlavor":
        return True
    return mode.borrow > 0 and fungibility.when_can_borrow == "TryNextFlavor"
