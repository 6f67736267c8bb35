"""A simulated run as OpenMetrics with timestamps, under the live scheduler's metric names.

``gpufleet simulate --metrics-out FILE`` writes it; ``promtool tsdb create-blocks-from openmetrics FILE DIR``
turns it into TSDB blocks a Prometheus serves, so the dashboards that watch the live fleet show a simulated
one, and "before" beside "after": every series carries a ``run`` label (the run's name, e.g.
``after (gpufleet)``), which live series do not have.

The names, types and help texts are the live scheduler's (:class:`gpufleet.scheduler_metrics.SchedulerMetrics`);
the values come from the run's records (:mod:`gpufleet.sim.records`), sampled every ``step`` seconds of the
measurement window so that Prometheus's five-minute lookback always finds a sample:

* ``gpufleet_gpus_capacity``, ``_held``, ``_idle`` and ``gpufleet_fragmented_gpus`` per node pool and model
  (fragmentation as sampled during the run, held until the next sample);
* ``gpufleet_cluster_queue_gpus_held`` and ``_cost_per_hour`` per ClusterQueue, pool and model, and
  ``gpufleet_gpu_price_per_hour`` per model;
* ``gpufleet_pending_workloads`` (attempts submitted and not yet running) and
  ``gpufleet_admitted_active_workloads`` (attempts running) per ClusterQueue; the simulator has no
  ``status`` or ``reason`` for a wait, so those labels are absent;
* counters ``gpufleet_admitted_workloads_total`` and ``gpufleet_evicted_workloads_total`` (reason
  ``Preempted``), and the histogram ``gpufleet_admission_wait_time_seconds`` with every other of the live
  buckets (1 s, 5 s, 20 s ... 5120 s): histograms are most of a file's size, and quantiles need no more.

What the simulator does not model is not written: GPU telemetry (``DCGM_FI_*``), queue quotas and usage per
flavor, gang waits, the scheduler's own cycle metrics. A simulated week is about 35 MB (some 130 series of
2,520 samples for two runs). A workload counts as admitted when its work begins (every pod
running), the simulator's start of an attempt, slightly later than Kueue's admission.

Timestamps: the run's virtual time 0 is placed so that the window ends at ``end`` (default: when the file is
written), rounded down to the step; every run of one file shares that origin, so runs overlay in Grafana.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np

from gpufleet.scheduler_metrics import WAIT_BUCKETS, SchedulerMetrics
from gpufleet.sim.records import Attempt, JobRecord, SimResult
from gpufleet.sim.series import FloatArray, Step

Labels = tuple[tuple[str, str], ...]
QueueOf = Callable[[str, str], str]  # (namespace, LocalQueue) -> ClusterQueue ("" when unknown)

MIN_STEP_S = 60.0
MAX_STEP_S = 240.0  # under Prometheus's 5-minute lookback, so an instant query never falls between samples
TARGET_POINTS = 2000
SIM_WAIT_BUCKETS = WAIT_BUCKETS[::2]


@dataclass(frozen=True, slots=True)
class SimRun:
    label: str  # the run label every series carries
    result: SimResult
    queue_of: QueueOf
    cluster_queues: tuple[str, ...] = ()  # every ClusterQueue of the scenario: shown at 0 when no job uses it


def step_for(window_s: float) -> float:
    """Sampling step: about TARGET_POINTS samples per series, between one and four minutes."""
    return float(min(MAX_STEP_S, max(MIN_STEP_S, math.ceil(window_s / TARGET_POINTS))))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Labels) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels) + "}" if labels else ""


def _number(x: float) -> str:
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return repr(round(x, 9)) if x != int(x) else str(int(x))


class _Series:
    """One family's series: label tuple -> values at the sample points."""

    def __init__(self, points: int) -> None:
        self.points = points
        self.values: dict[Labels, FloatArray] = {}

    def add(self, labels: Labels, values: FloatArray) -> None:
        if labels in self.values:
            self.values[labels] = self.values[labels] + values
        else:
            self.values[labels] = values.astype(np.float64)


def _step(spans: Iterable[tuple[float, float, float]]) -> Step:
    rows = list(spans)
    if not rows:
        return Step(np.zeros(1), np.zeros(1))
    a = np.array(rows, dtype=np.float64)
    return Step.from_spans(a[:, 0], a[:, 1], a[:, 2])


def _cumulative(times: Sequence[float], points: FloatArray) -> FloatArray:
    """How many of ``times`` are at or before each point."""
    out: FloatArray = np.searchsorted(np.sort(np.array(times, dtype=np.float64)), points, side="right").astype(
        np.float64)
    return out


def _attempts(jobs: Iterable[JobRecord]) -> Iterator[tuple[JobRecord, Attempt]]:
    for j in jobs:
        for a in j.attempts:
            yield j, a


def run_series(run: SimRun, points: FloatArray) -> dict[str, _Series]:
    """Every family's series of one run at the virtual ``points``."""
    r = run.result
    n = len(points)
    out: dict[str, _Series] = defaultdict(lambda: _Series(n))
    base: Labels = (("run", run.label),)
    cq_of_job = {j.key: run.queue_of(j.namespace, j.queue) for j in r.jobs}

    held: dict[tuple[str, str], list[tuple[float, float, float]]] = defaultdict(list)
    by_queue: dict[tuple[str, str, str], list[tuple[float, float, float]]] = defaultdict(list)
    for x in r.spans:
        if x.node is None or not x.model or x.share <= 0:
            continue  # admitted without a node (quota-only policies): it holds no physical GPU
        pool = x.pool or "(none)"
        held[(pool, x.model)].append((x.held_from, x.held_to, x.share))
        by_queue[(cq_of_job.get(x.job, ""), pool, x.model)].append((x.held_from, x.held_to, x.share))

    stranded_times = np.array([t for t, _ in r.stranded_by], dtype=np.float64)
    last_sample = np.searchsorted(stranded_times, points, side="right") - 1
    for (pool, model), capacity in sorted(r.gpus.items()):
        labels = (*base, ("node_pool", pool), ("model", model))
        held_now = _step(held.get((pool, model), [])).at(points)
        out["gpufleet_gpus_capacity"].add(labels, np.full(n, float(capacity)))
        out["gpufleet_gpus_held"].add(labels, held_now)
        out["gpufleet_gpus_idle"].add(labels, np.maximum(0.0, capacity - held_now))
        fragmented = np.array([r.stranded_by[i][1].get((pool, model), 0.0) if i >= 0 else 0.0
                               for i in last_sample], dtype=np.float64)
        out["gpufleet_fragmented_gpus"].add(labels, fragmented)
    for model, price in sorted(r.prices.items()):
        out["gpufleet_gpu_price_per_hour"].add((*base, ("model", model)), np.full(n, price))
    for (queue, pool, model), spans in sorted(by_queue.items()):
        labels = (*base, ("cluster_queue", queue), ("node_pool", pool), ("model", model))
        gpus = _step(spans).at(points)
        out["gpufleet_cluster_queue_gpus_held"].add(labels, gpus)
        out["gpufleet_cluster_queue_cost_per_hour"].add(labels, gpus * r.prices.get(model, 0.0))

    pending: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    active: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    started: dict[str, list[float]] = defaultdict(list)
    waits: dict[str, list[tuple[float, float]]] = defaultdict(list)
    preempted: dict[str, list[float]] = defaultdict(list)
    for j, a in _attempts(r.jobs):
        queue = cq_of_job[j.key]
        stop = a.started if a.started is not None else a.ended if a.ended is not None else r.run_end
        pending[queue].append((a.submitted, stop, 1.0))
        if a.started is not None:
            active[queue].append((a.started, a.ended if a.ended is not None else r.run_end, 1.0))
            started[queue].append(a.started)
            waits[queue].append((a.started, a.wait(r.run_end)))
        if a.outcome == "preempted" and a.ended is not None:
            preempted[queue].append(a.ended)
    for queue in sorted(set(cq_of_job.values()) | set(run.cluster_queues)):
        labels = (*base, ("cluster_queue", queue))
        out["gpufleet_pending_workloads"].add(labels, _step(pending[queue]).at(points))
        out["gpufleet_admitted_active_workloads"].add(labels, _step(active[queue]).at(points))
        out["gpufleet_admitted_workloads"].add(labels, _cumulative(started[queue], points))
        out["gpufleet_evicted_workloads"].add((*labels, ("reason", "Preempted")),
                                              _cumulative(preempted[queue], points))
        _histogram(out["gpufleet_admission_wait_time_seconds"], labels, waits[queue], points)
    return out


def _histogram(series: _Series, labels: Labels, observed: Sequence[tuple[float, float]], points: FloatArray) -> None:
    """Cumulative buckets, count and sum at each point of the observations (time, value) made so far; the
    label ``le`` tells the bucket rows apart, and ``__kind`` the count and sum rows (see :func:`_write_family`)."""
    at = [t for t, _ in observed]
    for le in (*SIM_WAIT_BUCKETS, math.inf):
        # le as prometheus_client writes it ("1.0", "+Inf"): the same label values as the live histograms.
        bound = "+Inf" if math.isinf(le) else repr(float(le))
        series.add((*labels, ("le", bound)), _cumulative([t for t, v in observed if v <= le], points))
    series.add((*labels, ("__kind", "count")), _cumulative(at, points))
    order = sorted(observed)
    times = np.array([t for t, _ in order], dtype=np.float64)
    running = np.concatenate([[0.0], np.cumsum([v for _, v in order])])
    series.add((*labels, ("__kind", "sum")), running[np.searchsorted(times, points, side="right")])


def _write_family(out: TextIO, name: str, kind: str, help_text: str, series: _Series,
                  stamps: Sequence[int]) -> int:
    out.write(f"# TYPE {name} {kind}\n# HELP {name} {help_text}\n")
    written = 0
    if kind == "histogram":
        # One MetricPoint per timestamp: every bucket, then the count and the sum, of one label set.
        groups: dict[Labels, list[tuple[Labels, str]]] = defaultdict(list)
        for labels in series.values:
            plain = tuple(kv for kv in labels if kv[0] not in ("le", "__kind"))
            groups[plain].append((labels, dict(labels).get("__kind") or "bucket"))
        for plain, rows in groups.items():
            buckets = [lb for lb, k in rows if k == "bucket"]
            count = next(lb for lb, k in rows if k == "count")
            total = next(lb for lb, k in rows if k == "sum")
            for i, stamp in enumerate(stamps):
                for lb in buckets:
                    le = dict(lb)["le"]
                    out.write(f"{name}_bucket{_labels((*plain, ('le', le)))} {_number(series.values[lb][i])} "
                              f"{stamp}\n")
                out.write(f"{name}_count{_labels(plain)} {_number(series.values[count][i])} {stamp}\n")
                out.write(f"{name}_sum{_labels(plain)} {_number(series.values[total][i])} {stamp}\n")
                written += len(buckets) + 2
        return written
    suffix = "_total" if kind == "counter" else ""
    for labels, values in series.values.items():
        for value, stamp in zip(values, stamps, strict=True):
            out.write(f"{name}{suffix}{_labels(labels)} {_number(float(value))} {stamp}\n")
            written += 1
    return written


def write_openmetrics(path: Path, runs: Sequence[SimRun], *, end: float | None = None,
                      step: float | None = None) -> int:
    """Write ``runs`` to ``path``; the number of samples written."""
    window = max((r.result.window_s for r in runs), default=0.0)
    step = step or step_for(window)
    end = time.time() if end is None else end
    origin = math.floor((end - window) / step) * step
    points = np.arange(0.0, window + 1e-9, step, dtype=np.float64)
    stamps = [int(origin + p) for p in points]
    families: dict[str, _Series] = defaultdict(lambda: _Series(len(points)))
    for run in runs:
        for name, series in run_series(run, points).items():
            for labels, values in series.values.items():
                families[name].add(labels, values)
    known = {f.name: (f.type, f.documentation) for f in SchedulerMetrics().registry.collect()}
    written = 0
    with path.open("w", encoding="utf-8") as out:
        for name in sorted(families):
            kind, help_text = known[name]
            written += _write_family(out, name, kind, help_text, families[name], stamps)
        out.write("# EOF\n")
    return written


def local_queue_map(pairs: Iterable[tuple[str, str, str]]) -> QueueOf:
    """(namespace, LocalQueue, ClusterQueue) triples as a lookup; unknown LocalQueues map to ""."""
    table: Mapping[tuple[str, str], str] = {(ns, lq): cq for ns, lq, cq in pairs}
    return lambda namespace, queue: table.get((namespace, queue), "")
