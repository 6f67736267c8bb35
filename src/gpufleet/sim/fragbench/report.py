"""What the fragmentation benchmark measures after every arrival, and how curves are binned and averaged.

After each arriving pod (placed or failed) the reference logs the arrived GPU demand, the allocated milli-GPU
and the cluster fragmentation. Its post-processing bins these rows on the integer arrive ratio
``round(arrived / capacity · 100)`` (Python's round, half to even), averages the rows of each bin, and fills
an empty bin with the mean of the rows in the ±1 neighbouring bins. We do the same, without the reference's
intermediate rounding of each ratio to two decimals (it moves a mean by less than 0.005 points).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.scheduling.fragmentation import FragmentationModel

__all__ = [
    "MAX_BIN",
    "FragTracker",
    "MeanStd",
    "NodeFragView",
    "arrive_bins",
    "bin_curve",
    "mean_std",
]

MAX_BIN = 130

# (free milli per GPU, free CPU milli, GPU model) of one node.
NodeFragView = tuple[Sequence[int], int, str]


class FragTracker:
    """Cluster fragmentation Σ_n F_n(M) and idle GPU milli, kept up to date one changed node at a time.

    Recomputing all 1213 nodes after each of ~10.8k arrivals is what makes the reference slow; only the
    node that took the pod changes, so its F is recomputed (memoised by the model) and the sums adjusted.
    """

    def __init__(self, model: FragmentationModel, view: Callable[[int], NodeFragView], nodes: int) -> None:
        self.model = model
        self._view = view
        self._frag = np.zeros(nodes, dtype=np.float64)
        self._idle = [0] * nodes
        for i in range(nodes):
            self._frag[i], self._idle[i] = self._measure(i)
        # The amount is summed afresh when asked (numpy's pairwise sum, microseconds for 1213 nodes): a
        # running float total updated by differences would drift over 10k arrivals.
        self._idle_total = sum(self._idle)

    def _measure(self, i: int) -> tuple[float, int]:
        free, cpu, model = self._view(i)
        return self.model.node(free, cpu, model), sum(free)

    def update(self, i: int) -> None:
        frag, idle = self._measure(i)
        self._idle_total += idle - self._idle[i]
        self._frag[i] = frag
        self._idle[i] = idle

    @property
    def amount(self) -> float:
        """Σ_n F_n(M), milli-GPU."""
        return float(self._frag.sum())

    @property
    def idle(self) -> int:
        """Σ_n idle GPU milli."""
        return self._idle_total

    @property
    def ratio(self) -> float:
        """Frag amount / idle GPU milli (0 when nothing is idle)."""
        return self.amount / self._idle_total if self._idle_total else 0.0

    def node(self, i: int) -> float:
        return float(self._frag[i])


def arrive_bins(arrived_milli: npt.NDArray[np.int64], capacity_milli: int) -> npt.NDArray[np.int64]:
    """Integer arrive ratio of each row, as the reference computes it (percent, rounded half to even)."""
    gpus = capacity_milli / 1000
    return np.round(arrived_milli / gpus / 10).astype(np.int64)


def bin_curve(
    arrived_milli: npt.NDArray[np.int64],
    values: npt.NDArray[np.float64],
    capacity_milli: int,
    max_bin: int = MAX_BIN,
) -> npt.NDArray[np.float64]:
    """Mean of ``values`` per integer arrive-ratio bin 0..max_bin; NaN where even the neighbours are empty."""
    if arrived_milli.shape != values.shape:
        raise ValueError("arrived and values differ in length")
    bins = arrive_bins(arrived_milli, capacity_milli)
    size = max_bin + 2  # one spare so that bin max_bin can look at max_bin + 1
    keep = (bins >= 0) & (bins < size)
    sums = np.bincount(bins[keep], weights=values[keep], minlength=size)
    counts = np.bincount(bins[keep], minlength=size)
    out = np.full(max_bin + 1, np.nan)
    for b in range(max_bin + 1):
        if counts[b]:
            out[b] = sums[b] / counts[b]
            continue
        lo, hi = max(b - 1, 0), b + 1
        n = counts[lo:hi + 1].sum()
        if n:
            out[b] = sums[lo:hi + 1].sum() / n
    return out


@dataclass(frozen=True, slots=True)
class MeanStd:
    mean: float
    std: float  # sample standard deviation (ddof=1, as pandas computes it); 0 for a single run
    n: int


def mean_std(values: Sequence[float]) -> MeanStd:
    """Mean and sample standard deviation over runs, ignoring runs that have no value (NaN)."""
    xs = [v for v in values if not math.isnan(v)]
    if not xs:
        return MeanStd(math.nan, math.nan, 0)
    mean = math.fsum(xs) / len(xs)
    if len(xs) == 1:
        return MeanStd(mean, 0.0, 1)
    var = math.fsum((x - mean) ** 2 for x in xs) / (len(xs) - 1)
    return MeanStd(mean, math.sqrt(var), len(xs))
