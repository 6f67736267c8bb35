"""KPIs of a run. The yardsticks that count work done come first (:mod:`.yardsticks`, from the per-job records of
:mod:`.jobs`, over every job and the whole run); the figures below are over the measurement window [0, window].

* GPU allocation %: GPUs held (by share) integrated over the window, over capacity × window;
* GPU utilization %: GPUs busy over capacity × window. A pod is busy while its work runs (a gang only once
  every pod runs), by its demand; a time-sliced or fractionally shared GPU is at most 100% busy;
* busy-of-held %: GPUs busy over GPUs in use, what DCGM shows averaged over the GPUs in use: a software-shared
  GPU (time-slice replicas, fractions) is in use, whole, while any pod holds part of it (its tenants' busy
  time is capped at that one GPU), so the share stays within [0, 100];
* job success %: jobs that succeeded over jobs that ended (succeeded, or failed for good after their
  retries); jobs still running or pending at the end are counted apart as unfinished; training-job success %
  the same over jobs of role training (what a team measures of its training runs, calibration's target);
* failures: failed attempts by cause (a job retried twice and then failed counts three);
* queue wait p50/p95/p99: per attempt, from submission (arrival, retry or requeue) until every pod runs,
  or until the attempt ended without that, or until the end of the run (censored);
* makespan: from the first arrival to the last end of a job that ended;
* GPU-hours and cost: held GPUs × hours (× the model's price per GPU-hour) inside the window;
* stranded capacity % (``fragmentation_pct``): idle GPUs that no pending pod fits now but some pending pod could
  use were they free (:mod:`.stranded`), averaged over the window's samples (each weighted by the time until
  the next), over capacity.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from itertools import pairwise
from typing import Any

import numpy as np

from gpufleet.sim.jobs import JobLine, job_lines
from gpufleet.sim.records import PodSpan, SimResult
from gpufleet.sim.series import FloatArray, Step, bucket_means, integral, percentile
from gpufleet.sim.yardsticks import TRAINING_ROLE, per_class, per_role, yardstick_kpis

INFERENCE_ROLE = "inference"


def _overlap(span: PodSpan, t1: float) -> float:
    return max(0.0, min(span.held_to, t1) - max(span.held_from, 0.0))


def held_step(spans: Iterable[PodSpan]) -> Step:
    s = list(spans)
    return Step.from_spans(np.array([x.held_from for x in s], dtype=np.float64),
                           np.array([x.held_to for x in s], dtype=np.float64),
                           np.array([x.share for x in s], dtype=np.float64))


def busy_integrals(spans: Iterable[PodSpan], points: FloatArray) -> FloatArray:
    """Running integral of busy GPUs at ``points``: exclusive devices summed, shared GPUs capped at 1 each."""
    exclusive: list[PodSpan] = []
    shared: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for x in spans:
        if x.busy_from is None or x.busy_to is None:
            continue
        if x.shared_gpus:
            part = x.demand / len(x.shared_gpus)
            for g in x.shared_gpus:
                shared[g].append((x.busy_from, x.busy_to, part))
        else:
            exclusive.append(x)
    total = Step.from_spans(np.array([x.busy_from or 0.0 for x in exclusive], dtype=np.float64),
                            np.array([x.busy_to or 0.0 for x in exclusive], dtype=np.float64),
                            np.array([x.demand for x in exclusive], dtype=np.float64)).integral_at(points)
    for rows in shared.values():
        a = np.array(rows, dtype=np.float64)
        total = total + Step.from_spans(a[:, 0], a[:, 1], a[:, 2]).capped(1.0).integral_at(points)
    return total


def in_use_integrals(spans: Iterable[PodSpan], points: FloatArray) -> FloatArray:
    """Running integral of GPUs in use at ``points``: held shares of exclusive devices (whole GPUs, MIG instances)
    summed, a software-shared GPU counted as one while any pod holds part of it.

    The denominator :func:`busy_integrals` is measured against: a replica of 8 holds 1/8 of a GPU yet may keep
    the whole GPU busy, so against its share alone the busy share could pass 100%.
    """
    exclusive: list[PodSpan] = []
    shared: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for x in spans:
        if x.shared_gpus:
            for g in x.shared_gpus:
                shared[g].append((x.held_from, x.held_to))
        else:
            exclusive.append(x)
    total = held_step(exclusive).integral_at(points)
    for rows in shared.values():
        a = np.array(rows, dtype=np.float64)
        total = total + Step.from_spans(a[:, 0], a[:, 1], np.ones(len(rows))).capped(1.0).integral_at(points)
    return total


def _group_costs(spans: Iterable[PodSpan], key: Callable[[PodSpan], str | None], t1: float) -> dict[str, Any]:
    out: dict[str, dict[str, float]] = {}
    for x in spans:
        k = key(x) or "(none)"
        hours = x.share * _overlap(x, t1) / 3600
        row = out.setdefault(k, {"gpu_hours": 0.0, "cost": 0.0})
        row["gpu_hours"] += hours
        row["cost"] += hours * x.price
    return {k: {"gpu_hours": round(v["gpu_hours"], 3), "cost": round(v["cost"], 2)} for k, v in sorted(out.items())}


def _waits(result: SimResult, jobs: Iterable[Any]) -> list[float]:
    return [a.wait(result.run_end) for j in jobs for a in j.attempts]


def _time_weighted(samples: list[tuple[float, float, float, int]], end: float) -> float | None:
    """Mean stranded GPUs, each sample standing for the time until the next one (samples may be uneven)."""
    if not samples:
        return None
    times = [s[0] for s in samples] + [max(end, samples[-1][0])]
    weights = [b - a for a, b in pairwise(times)]
    total = sum(weights)
    if total <= 0:
        return float(np.mean([s[1] for s in samples]))
    return sum(s[1] * wt for s, wt in zip(samples, weights, strict=True)) / total


def _r(x: float | None, nd: int = 2) -> float | None:
    return None if x is None else round(x, nd)


def fleet_cost(result: SimResult) -> float:
    """Every GPU of the cluster at its model's price per GPU-hour, over the whole run."""
    per_hour = sum(n * result.prices.get(model, 0.0) for (_, model), n in result.gpus.items())
    return per_hour * result.run_end / 3600


def kpis(result: SimResult, lines: Sequence[JobLine] | None = None) -> dict[str, Any]:
    """The run's headline figures (the ``kpis`` object of ``--json``): the yardsticks that count work done
    (:mod:`.yardsticks`, from the per-job records ``lines``, worked out when not given) first, then the
    figures of the window."""
    yard = yardstick_kpis(lines if lines is not None else job_lines(result), result.run_end, fleet_cost(result))
    w = result.window_s
    cap = result.capacity
    spans = result.spans
    held = integral(held_step(spans), 0.0, w)
    edges = np.array([0.0, w], dtype=np.float64)
    b = busy_integrals(spans, edges)
    busy = float(b[1] - b[0])
    u = in_use_integrals(spans, edges)
    in_use = float(u[1] - u[0])
    ended = [j for j in result.jobs if j.outcome != "unfinished"]
    succeeded = sum(1 for j in ended if j.outcome == "succeeded")
    trained = [j for j in ended if j.role == TRAINING_ROLE]
    waits = _waits(result, result.jobs)
    failures = Counter(a.cause or "Unknown" for j in result.jobs for a in j.attempts if a.outcome == "failed")
    ends = [j.ended for j in ended if j.ended is not None]
    first = min((j.arrival for j in result.jobs), default=0.0)
    cost = sum(x.share * x.price * _overlap(x, w) / 3600 for x in spans)
    role = {j.key: j.role for j in result.jobs}
    inference = [x for x in spans if role.get(x.job) == INFERENCE_ROLE]
    stranded = _time_weighted([s for s in result.stranded if s[0] <= w], w)
    denom = cap * w
    return {
        **yard,
        "gpu_allocation_pct": _r(100 * held / denom if denom else None),
        "gpu_utilization_pct": _r(100 * busy / denom if denom else None),
        "busy_of_held_pct": _r(100 * busy / in_use if in_use else None),
        "job_success_pct": _r(100 * succeeded / len(ended) if ended else None),
        "training_success_pct": _r(100 * sum(1 for j in trained if j.outcome == "succeeded") / len(trained)
                                   if trained else None),
        "wait_p50_s": _r(percentile(waits, 50), 1),
        "wait_p95_s": _r(percentile(waits, 95), 1),
        "wait_p99_s": _r(percentile(waits, 99), 1),
        "makespan_s": _r(max(ends) - first if ends else None, 1),
        "gpu_hours": round(held / 3600, 3),
        "cost": round(cost, 2),
        "inference_cost": round(sum(x.share * x.price * _overlap(x, w) / 3600 for x in inference), 2),
        "inference_gpu_hours": round(sum(x.share * _overlap(x, w) / 3600 for x in inference), 3),
        "fragmentation_pct": _r(100 * stranded / cap if stranded is not None and cap else None),
        "failures": dict(sorted(failures.items())),
        "jobs": len(result.jobs),
        "jobs_succeeded": succeeded,
        "jobs_failed": len(ended) - succeeded,
        "jobs_unfinished": len(result.jobs) - len(ended),
        "preemptions": sum(1 for j in result.jobs for a in j.attempts if a.outcome == "preempted"),
        "window_s": round(w, 1),
    }


def per_queue(result: SimResult) -> dict[str, Any]:
    out: dict[str, Any] = {}
    by_queue: dict[str, list[Any]] = defaultdict(list)
    for j in result.jobs:
        by_queue[j.queue].append(j)
    queue_of = {j.key: j.queue for j in result.jobs}
    costs = _group_costs(result.spans, lambda x: queue_of.get(x.job), result.window_s)
    for q, jobs in sorted(by_queue.items()):
        waits = _waits(result, jobs)
        ended = [j for j in jobs if j.outcome != "unfinished"]
        ok = sum(1 for j in ended if j.outcome == "succeeded")
        out[q] = {
            "jobs": len(jobs), "succeeded": ok, "failed": len(ended) - ok, "unfinished": len(jobs) - len(ended),
            "job_success_pct": _r(100 * ok / len(ended) if ended else None),
            "wait_p50_s": _r(percentile(waits, 50), 1), "wait_p95_s": _r(percentile(waits, 95), 1),
            "wait_p99_s": _r(percentile(waits, 99), 1),
            **costs.get(q, {"gpu_hours": 0.0, "cost": 0.0}),
        }
    return out


def breakdowns(result: SimResult, lines: Sequence[JobLine] | None = None) -> dict[str, Any]:
    """GPU-hours and cost per team, GPU model and workload class (with each class's completion, time to first
    start and work done); completion per role; allocation and utilization per pool."""
    lines = lines if lines is not None else job_lines(result)
    team = {j.key: j.team for j in result.jobs}
    klass = {j.key: j.klass for j in result.jobs}
    w = result.window_s
    pools: dict[str, Any] = {}
    edges = np.array([0.0, w], dtype=np.float64)
    for p in result.pools:
        spans = [x for x in result.spans if (x.pool or "(none)") == p.name]
        held = integral(held_step(spans), 0.0, w)
        b = busy_integrals(spans, edges)
        denom = p.gpus * w
        pools[p.name] = {"gpus": p.gpus, "models": list(p.models),
                         "gpu_allocation_pct": _r(100 * held / denom if denom else None),
                         "gpu_utilization_pct": _r(100 * float(b[1] - b[0]) / denom if denom else None)}
    costs = _group_costs(result.spans, lambda x: klass.get(x.job), w)
    classes = {k: {**v, **costs.pop(k, {"gpu_hours": 0.0, "cost": 0.0})}
               for k, v in per_class(lines, result.run_end).items()}
    return {
        "per_team": _group_costs(result.spans, lambda x: team.get(x.job), w),
        "per_model": _group_costs(result.spans, lambda x: x.model, w),
        "per_class": {**classes, **costs},
        "per_role": per_role(lines, result.run_end),
        "per_pool": pools,
    }


def pool_series(result: SimResult, buckets: int = 168) -> dict[str, dict[str, list[float]]]:
    """Per pool, allocation % and utilization % averaged over ``buckets`` equal slices of the window."""
    w = result.window_s
    edges = np.linspace(0.0, w, buckets + 1)
    out: dict[str, dict[str, list[float]]] = {}
    for p in result.pools:
        spans = [x for x in result.spans if (x.pool or "(none)") == p.name]
        alloc = bucket_means(held_step(spans), edges)
        busy_f = busy_integrals(spans, edges)
        widths = np.diff(edges)
        busy = np.divide(np.diff(busy_f), widths, out=np.zeros_like(widths), where=widths > 0)
        scale = 100.0 / p.gpus if p.gpus else 0.0
        out[p.name] = {"t": [float(x) for x in edges[:-1]],
                       "allocation_pct": [round(float(v) * scale, 3) for v in alloc],
                       "utilization_pct": [round(float(v) * scale, 3) for v in busy]}
    return out


def queue_waits(result: SimResult) -> dict[str, list[float]]:
    out: dict[str, list[float]] = defaultdict(list)
    for j in result.jobs:
        out[j.queue].extend(a.wait(result.run_end) for a in j.attempts)
    return {q: sorted(v) for q, v in sorted(out.items())}
