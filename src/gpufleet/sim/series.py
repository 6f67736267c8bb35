"""Integrals and time series of quantities held over intervals (GPUs held, GPUs busy), with numpy.

A set of spans ``(start, end, value)`` is a piecewise-constant function of time. Its running integral is
piecewise linear, so sampling the integral at bucket edges with ``np.interp`` is exact, and the average of
a bucket is the difference of two samples over the bucket's width. Integrals add up, so pools and shared
GPUs are integrated apart and summed; only a cap (a time-sliced GPU is at most 100% busy) has to be applied
to the function itself, before integrating.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Step:
    """``values[i]`` on ``[times[i], times[i+1])``, 0 before ``times[0]`` (and the last value after)."""

    times: FloatArray
    values: FloatArray

    @classmethod
    def from_spans(cls, starts: FloatArray, ends: FloatArray, values: FloatArray) -> Step:
        keep = ends > starts
        starts, ends, values = starts[keep], ends[keep], values[keep]
        if starts.size == 0:
            return cls(np.zeros(1), np.zeros(1))
        times = np.concatenate([starts, ends])
        deltas = np.concatenate([values, -values])
        order = np.argsort(times, kind="stable")
        times, deltas = times[order], deltas[order]
        level = np.cumsum(deltas)
        # Several breakpoints at one instant: the level after the last of them holds from that instant on.
        last = np.r_[times[1:] != times[:-1], True]
        return cls(times[last], np.maximum(level[last], 0.0) * (np.abs(level[last]) > 1e-12))

    def capped(self, cap: float) -> Step:
        return Step(self.times, np.minimum(self.values, cap))

    def at(self, points: FloatArray) -> FloatArray:
        """The value at each point (0 before the first breakpoint)."""
        index = np.searchsorted(self.times, points, side="right") - 1
        out: FloatArray = np.where(index >= 0, self.values[np.maximum(index, 0)], 0.0)
        return out

    def integral_at(self, points: FloatArray) -> FloatArray:
        """∫ from -inf to each point."""
        widths = np.diff(self.times)
        running = np.concatenate([[0.0], np.cumsum(self.values[:-1] * widths)])
        inside = np.interp(points, self.times, running)
        # Past the last breakpoint the last level holds (0 for spans that all ended).
        after = np.maximum(points - self.times[-1], 0.0) * self.values[-1]
        out: FloatArray = np.where(points > self.times[-1], running[-1] + after, inside)
        return out


def integral(step: Step, t0: float, t1: float) -> float:
    a, b = step.integral_at(np.array([t0, t1], dtype=np.float64))
    return float(b - a)


def bucket_means(step: Step, edges: FloatArray) -> FloatArray:
    """Average value of ``step`` in each bucket between consecutive ``edges``."""
    f = step.integral_at(edges)
    widths = np.diff(edges)
    out: FloatArray = np.divide(np.diff(f), widths, out=np.zeros_like(widths), where=widths > 0)
    return out


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default), None for no values."""
    return float(np.percentile(np.array(values, dtype=np.float64), q)) if len(values) else None
