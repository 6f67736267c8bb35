"""A run's timeline: what the dashboard's replay and what-if plots read from ``simulate --json``.

Over ``buckets`` equal slices of the measurement window, each value the slice's average:

* per node with GPUs (up to :data:`MAX_NODES` nodes): its pool, model and GPUs, GPUs held and GPUs busy, so a
  replay shows which nodes are full, and which hold GPUs that do no work (held but not busy);
* the whole cluster: jobs waiting and jobs running at the start of each slice, and the fragmentation %
  (idle GPUs stranded, over capacity: :mod:`gpufleet.scheduling.placement.stranded`'s samples);
* per queue, the wait distribution: the 0th, 5th, ... 100th percentile of the attempts' waits (a CDF).

A fleet larger than :data:`MAX_NODES` gets no per-node series (``nodes_left_out`` says how many it has): the
document stays small enough for a browser; the per-pool series (``series``) cover it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from gpufleet.sim.metrics import busy_integrals, held_step, queue_waits
from gpufleet.sim.records import SimResult
from gpufleet.sim.series import Step, bucket_means

MAX_NODES = 300
QUANTILES = tuple(range(0, 101, 5))


def _round(values: Any, nd: int = 3) -> list[float]:
    return [round(float(v), nd) for v in values]


def _fragmentation(result: SimResult, edges: np.ndarray[Any, Any]) -> list[float | None]:
    """Stranded GPUs in % of capacity, each slice the time-weighted mean of the samples (a sample holds until
    the next one); None for slices before the first sample."""
    samples = sorted(result.stranded)
    if not samples or result.capacity <= 0:
        return [None] * (len(edges) - 1)
    times = np.array([s[0] for s in samples], dtype=np.float64)
    values = np.array([s[1] for s in samples], dtype=np.float64)
    step = Step(times, values)
    means = bucket_means(step, edges)
    first = times[0]
    return [None if edges[i + 1] <= first else round(100.0 * float(v) / result.capacity, 3)
            for i, v in enumerate(means)]


def _counts(result: SimResult, edges: np.ndarray[Any, Any]) -> tuple[list[int], list[int]]:
    """Jobs waiting and running at each slice's start."""
    starts = edges[:-1]
    waiting = np.zeros(len(starts), dtype=np.int64)
    running = np.zeros(len(starts), dtype=np.int64)
    end = result.run_end
    for j in result.jobs:
        for a in j.attempts:
            waited_to = a.started if a.started is not None else a.ended if a.ended is not None else end
            waiting += (starts >= a.submitted) & (starts < waited_to)
            if a.started is not None:
                ran_to = a.ended if a.ended is not None else end
                running += (starts >= a.started) & (starts < ran_to)
    return [int(v) for v in waiting], [int(v) for v in running]


def timeline(result: SimResult, buckets: int = 168) -> dict[str, Any]:
    """The ``timeline`` object of a run in ``--json`` (module doc)."""
    w = result.window_s
    edges = np.linspace(0.0, w, buckets + 1) if w > 0 else np.zeros(2)
    by_node: dict[str, list[Any]] = defaultdict(list)
    for span in result.spans:
        if span.node is not None:
            by_node[span.node].append(span)
    nodes: dict[str, Any] = {}
    names = sorted(set(result.gpu_nodes) | set(by_node))
    if len(names) <= MAX_NODES:
        widths = np.diff(edges)
        zeros = [0.0] * (len(edges) - 1)
        for name in names:
            spans = by_node.get(name, [])
            known = result.gpu_nodes.get(name)
            pool, model, gpus = known if known is not None else (spans[0].pool or "(none)", spans[0].model, 0)
            entry: dict[str, Any] = {"pool": pool, "model": model, "gpus": gpus, "held": zeros, "busy": zeros}
            if spans:
                busy_f = busy_integrals(spans, edges)
                busy = np.divide(np.diff(busy_f), widths, out=np.zeros_like(widths), where=widths > 0)
                entry.update(held=_round(bucket_means(held_step(spans), edges)), busy=_round(busy))
            nodes[name] = entry
    waiting, running = _counts(result, edges)
    waits = {q: _round(np.percentile(np.array(v, dtype=np.float64), QUANTILES), 1) if v else []
             for q, v in queue_waits(result).items()}
    return {"t": _round(edges[:-1], 1), "bucket_s": round(float(edges[1] - edges[0]), 3) if len(edges) > 1 else 0.0,
            "nodes": nodes, "nodes_left_out": 0 if nodes or not names else len(names),
            "jobs_waiting": waiting, "jobs_running": running,
            "fragmentation_pct": _fragmentation(result, edges),
            "wait_quantiles": {"q": list(QUANTILES), "per_queue": waits}}
