"""Random distributions written in YAML, for the synthetic workload generator.

A distribution is one of::

    6h                                         # a fixed value (a scalar)
    {distribution: fixed, value: 6h}
    {distribution: uniform, low: 0.1, high: 0.3}
    {distribution: lognormal, median: 6h, sigma: 0.8, min: 30m, max: 3d}   # median = e^mu
    {distribution: exponential, mean: 2h, min: 1m}
    {distribution: normal, mean: 0.5, sd: 0.1, min: 0, max: 1}
    {values: [2, 3, 4], weights: [2, 1, 1]}    # a choice; weights default to equal

``min``/``max`` clamp any of them. Values are read by a unit parser (durations, memory quantities or plain
numbers), so ``median: 6h`` and ``median: 20Gi`` both work where they make sense.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gpufleet.api.errors import shown
from gpufleet.api.kinds import parse_duration
from gpufleet.api.limits import MAX_DURATION_S
from gpufleet.api.quantity import QuantityError, parse_quantity

Unit = Callable[[Any], float]
Array = npt.NDArray[np.float64]


class DistributionError(ValueError):
    """A distribution that cannot be read; the message names the field and says what is expected."""


def seconds(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        parsed: float | None = number(value)
        if parsed is not None and not 0 <= parsed <= MAX_DURATION_S:
            parsed = None
    else:
        parsed = parse_duration(str(value))
    if parsed is None:
        raise DistributionError(f"{shown(value)} is not a duration of at most a year (write 30m, 6h, 2d or seconds)")
    return parsed


def mebibytes(value: Any) -> float:
    try:
        q = parse_quantity(value if isinstance(value, (int, float, str)) else str(value))
    except QuantityError as exc:
        raise DistributionError(f"{shown(value)} is not a memory quantity (write 20Gi)") from exc
    return float(q) / 2**20


def number(value: Any) -> float:
    """A finite number; strings longer than a number can be are refused before float() reads them."""
    if isinstance(value, bool) or (isinstance(value, str) and len(value) > 64):
        raise DistributionError(f"{shown(value)} is not a number")
    try:
        result = float(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise DistributionError(f"{shown(value)} is not a finite number") from exc
    if not math.isfinite(result):
        raise DistributionError(f"{shown(value)} is not a finite number")
    return result


@dataclass(frozen=True, slots=True)
class Distribution:
    kind: str
    params: tuple[float, ...]
    values: tuple[float, ...] = ()
    weights: tuple[float, ...] = ()
    low: float = -np.inf
    high: float = np.inf

    def sample(self, rng: np.random.Generator, n: int) -> Array:
        if self.kind == "fixed":
            out = np.full(n, self.params[0])
        elif self.kind == "uniform":
            out = rng.uniform(self.params[0], self.params[1], n)
        elif self.kind == "lognormal":
            out = self.params[0] * np.exp(self.params[1] * rng.standard_normal(n))
        elif self.kind == "exponential":
            out = rng.exponential(self.params[0], n)
        elif self.kind == "normal":
            out = rng.normal(self.params[0], self.params[1], n)
        else:
            p = np.array(self.weights) / sum(self.weights)
            out = np.array(self.values)[rng.choice(len(self.values), size=n, p=p)]
        clipped: Array = np.clip(out.astype(np.float64), self.low, self.high)
        return clipped

    @property
    def mean_hint(self) -> float:
        """A rough central value, for documentation and sanity checks (not used in sampling)."""
        if self.kind in ("fixed", "lognormal", "exponential", "normal"):
            return self.params[0]
        if self.kind == "uniform":
            return (self.params[0] + self.params[1]) / 2
        return float(np.average(self.values, weights=self.weights))


def _need(spec: Mapping[str, Any], key: str, unit: Unit, where: str) -> float:
    if key not in spec:
        raise DistributionError(f"{where}: {spec.get('distribution')} needs {key}")
    try:
        return unit(spec[key])
    except DistributionError as exc:
        raise DistributionError(f"{where}.{key}: {exc}") from exc


def parse_distribution(spec: Any, unit: Unit, where: str) -> Distribution:
    if not isinstance(spec, Mapping):
        try:
            return Distribution("fixed", (unit(spec),))
        except DistributionError as exc:
            raise DistributionError(f"{where}: {exc}") from exc
    low = _need(spec, "min", unit, where) if "min" in spec else -np.inf
    high = _need(spec, "max", unit, where) if "max" in spec else np.inf
    if "values" in spec:
        raw = spec["values"]
        if not isinstance(raw, list) or not raw:
            raise DistributionError(f"{where}.values: give a non-empty list")
        values = tuple(unit(v) for v in raw)
        weights = tuple(number(w) for w in spec.get("weights", [1] * len(values)))
        if len(weights) != len(values) or any(w < 0 for w in weights) or sum(weights) <= 0:
            raise DistributionError(f"{where}.weights: one non-negative weight per value, not all zero")
        return Distribution("choice", (), values, weights, low, high)
    kind = str(spec.get("distribution", "fixed"))
    if kind == "fixed":
        return Distribution("fixed", (_need(spec, "value", unit, where),), low=low, high=high)
    if kind == "uniform":
        lo, hi = _need(spec, "low", unit, where), _need(spec, "high", unit, where)
        if hi < lo:
            raise DistributionError(f"{where}: uniform high {hi} is below low {lo}")
        return Distribution("uniform", (lo, hi), low=low, high=high)
    if kind == "lognormal":
        median, sigma = _need(spec, "median", unit, where), _need(spec, "sigma", number, where)
        if median <= 0 or sigma < 0:
            raise DistributionError(f"{where}: lognormal needs median > 0 and sigma >= 0")
        return Distribution("lognormal", (median, sigma), low=low, high=high)
    if kind == "exponential":
        mean = _need(spec, "mean", unit, where)
        if mean <= 0:
            raise DistributionError(f"{where}: exponential needs mean > 0")
        return Distribution("exponential", (mean,), low=low, high=high)
    if kind == "normal":
        return Distribution("normal", (_need(spec, "mean", unit, where), _need(spec, "sd", unit, where)),
                            low=low, high=high)
    raise DistributionError(f"{where}.distribution: {kind!r} is not one of fixed, uniform, lognormal, "
                            "exponential, normal (or give values: for a choice)")
