"""``gpufleet advise --objective fragmentation``: which nodes to close to fractional pods so that fewer GPUs stay
unallocated at saturation, with as many pods placed.

The measure is FGD's (Weng et al., ATC'23), run by the fragmentation benchmark's own fill-up
(:mod:`gpufleet.advise.fillup`): unallocated GPUs, % of capacity, at 100% of the capacity arrived, averaged over
:data:`SEEDS` seeds that every configuration shares (paired: the same arrivals in the same order).

The lever is the node label ``gpufleet.io/gpu-fractions: "false"``: a share of the nodes of every pool with 2+
GPUs per node closed to fractional pods (:mod:`gpufleet.advise.closure`), over the grid :data:`SHARES`; the given
configuration is always a candidate. A candidate is *within the guard* when it places, on average, no fewer pods
until 100% arrived than the given configuration, less :data:`PLACED_TOLERANCE` of them: refusing small pods to
raise the share of GPUs allocated is never proposed. It *improves* when its paired difference in unallocated GPUs
is negative by more than two standard errors. The improving candidate within the guard with the fewest
unallocated GPUs wins; otherwise the given configuration.

Measured on the openb trace (docs/advise.md), gains come from closing a quarter to a third of the nodes; past 40%
fractional pods are refused, which the guard catches. The grid stops at 30% for that reason and for time (each
candidate is one fill-up per seed).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpufleet.advise.closure import MIN_GPUS, Closure, closure
from gpufleet.advise.fillup import Demand, FillUp, bench_fleet, fill_up
from gpufleet.advise.inputs import AdviseInput
from gpufleet.api.objects import GPU_FRACTIONS_LABEL

SHARES: tuple[float, ...] = (0.10, 0.20, 0.25, 0.30)
SEEDS = 4
PLACED_TOLERANCE = 0.001  # of the given configuration's pods placed until 100% arrived (8 of openb's 8,054)


Progress = Callable[[str], None]


@dataclass(slots=True)
class Measured:
    """A configuration and its fill-up."""

    name: str
    closure: Closure
    fill: FillUp
    delta: tuple[float, float] = (0.0, 0.0)  # paired (mean, sd) of unallocated GPU % against the given
    within_guard: bool = True
    improves: bool = False
    why_not: str | None = None


@dataclass(slots=True)
class FragmentationAdvice:
    seeds: tuple[int, ...]
    given: Measured
    chosen: Measured
    tried: list[Measured]
    tolerance_pods: int
    reasons: list[str]
    seconds: float
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.chosen is not self.given

    def delta_text(self, m: Measured) -> str:
        """``m``'s paired difference against the given configuration, in points (a dash for the given itself)."""
        return "—" if m is self.given else f"{m.delta[0]:+.3f} ± {m.delta[1]:.3f}"

    def verdict(self, m: Measured) -> str:
        """Why ``m`` was chosen or not, as the tables of every configuration measured say it."""
        return "chosen" if m is self.chosen else (m.why_not or ("the reference" if m is self.given else ""))


def seeds_from(first: int, count: int = SEEDS) -> tuple[int, ...]:
    return tuple(range(first, first + count))


def _percent(share: float) -> str:
    return f"{share * 100:g}%"


def search(inp: AdviseInput, *, seeds: Sequence[int] | None = None, shares: Sequence[float] = SHARES,
           progress: Progress | None = None) -> FragmentationAdvice:
    """Measure the given configuration and every share of the grid; choose (module doc)."""
    started = time.perf_counter()
    used = tuple(seeds) if seeds is not None else seeds_from(inp.seed)
    demand = Demand.of(inp.jobs)

    def measure(name: str, c: Closure) -> Measured:
        fill = fill_up(bench_fleet(c.nodes), demand, used)
        m = Measured(name, c, fill)
        if progress is not None:
            progress(f"{name}: {fill.mean_unallocated:.3f}% unallocated, {fill.mean_placed:,.1f} pods placed "
                     f"({fill.seconds:.0f} s)")
        return m

    given = measure("given", closure(inp, None))
    tolerance = int(PLACED_TOLERANCE * given.fill.mean_placed)
    tried: list[Measured] = []
    seen = {given.closure.closed}
    for share in shares:
        c = closure(inp, share)
        if c.closed in seen:  # the same nodes closed as a configuration already measured (small pools)
            continue
        seen.add(c.closed)
        m = measure(f"{_percent(share)} of the nodes of each pool with {MIN_GPUS}+ GPUs closed to fractions", c)
        m.delta = m.fill.paired_delta(given.fill)
        mean, sd = m.delta
        se = sd / math.sqrt(len(used)) if len(used) > 1 else 0.0
        m.improves = mean < 0 and mean + 2 * se < 0
        lost = given.fill.mean_placed - m.fill.mean_placed
        m.within_guard = lost <= tolerance
        if not m.within_guard:
            m.why_not = (f"places {lost:,.1f} fewer pods until 100% arrived (at most {tolerance} fewer allowed): "
                         "more GPUs allocated by serving fewer pods, not by packing them better")
        elif not m.improves:
            m.why_not = (f"paired difference {mean:+.3f} ± {sd:.3f} points: not lower by more than two standard "
                         "errors")
        tried.append(m)
    chosen = given
    for m in tried:
        if m.within_guard and m.improves and m.fill.mean_unallocated < chosen.fill.mean_unallocated - 1e-12:
            chosen = m
    for m in tried:
        if m.why_not is None and m is not chosen:
            m.why_not = f"within the guard and lower, but {chosen.name} leaves fewer GPUs unallocated"
    advice = FragmentationAdvice(used, given, chosen, tried, tolerance, [], time.perf_counter() - started)
    advice.reasons = reasons(advice)
    return advice


def reasons(a: FragmentationAdvice) -> list[str]:
    g, c = a.given.fill, a.chosen.fill
    seeds = f"{len(a.seeds)} paired seeds ({a.seeds[0]}-{a.seeds[-1]})"
    if not a.changed:
        best = min(a.tried, key=lambda m: m.fill.mean_unallocated, default=None)
        out = [f"the given configuration stays: no share of closed nodes lowers unallocated GPUs at saturation "
               f"within the guard ({seeds})"]
        if best is not None:
            out.append(f"the lowest tried, {best.name}: {best.fill.mean_unallocated:.3f}% ({best.why_not})")
        return out
    mean, sd = a.chosen.delta
    closed = len(a.chosen.closure.closed) - len(a.given.closure.closed)
    return [
        f"closing {closed:,} more nodes to fractional pods ({GPU_FRACTIONS_LABEL}=false) keeps their GPUs whole for "
        "whole-GPU pods, so fractions pack onto fewer GPUs",
        f"unallocated GPUs at 100% arrived: {g.mean_unallocated:.3f}% -> {c.mean_unallocated:.3f}% (paired "
        f"difference {mean:+.3f} ± {sd:.3f} points over {seeds})",
        f"pods placed until 100% arrived: {g.mean_placed:,.1f} -> {c.mean_placed:,.1f} (guard: at most "
        f"{a.tolerance_pods} fewer)",
    ]
