"""The fragmentation benchmark of FGD (Weng et al., USENIX ATC'23) on the openb trace, run with gpufleet's own
placement plugins.

One run (policy, trace, seed): build the arrival sequence (:func:`~gpufleet.sim.fragbench.trace.build_arrivals`:
shuffled trace inflated to 130% of GPU capacity, shuffled nodes), then offer the pods one at a time to the
placement engine. A pod that fits nowhere fails and is not retried; nothing ever leaves. After every arrival
the arrived GPU demand (failed pods included), the allocated milli-GPU and the cluster fragmentation (FGD's
measure against the typical pods of the *original* trace, 95% cutoff) are recorded, and binned on the
integer arrive ratio (:mod:`gpufleet.sim.fragbench.report`).

Placement goes through the scheduler's placement engine (``gpufleet.scheduling.placement``: ``make_profile``
and ``make_placer``) on a :class:`~gpufleet.cluster.state.ClusterState` of the openb nodes, pods as
:class:`~gpufleet.scheduling.types.PodRequest` (:mod:`gpufleet.sim.fragbench.placer`).

Tie-break. Equal scores are common (FGD's score is ``int(sigmoid(Δ)·100)``, GpuClustering and GpuPacking
are coarse integers). Breaking them uniformly at random, as kube-scheduler 1.20's ``selectHost`` would, does
*not* reproduce the published figures (FGD leaves 10.2% unallocated at 100% arrived, GpuPacking 11.6%,
against 4.77% and 8.22%); taking the first tied node of the seed-shuffled node order reproduces all six
within 0.2 points (bench/README.md). The reference names its nodes ``%04d-<name>`` from ``rand.Perm``, so a
selection by name order in its scheduler fork would behave exactly so. ``tie_break="first"`` is therefore the
default; Random always draws uniformly (its plugin picks the node itself in PreScore).

Runs are independent and seeded, so results do not depend on how many run in parallel.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from gpufleet.scheduling.fragmentation import FragmentationModel, TypicalPod
from gpufleet.scheduling.gpuscore import SCORER_NAMES
from gpufleet.sim.fragbench.placer import OUR_POLICY, PlacerEngine
from gpufleet.sim.fragbench.report import MAX_BIN, FragTracker, MeanStd, bin_curve, mean_std
from gpufleet.sim.fragbench.trace import (
    Arrivals,
    BenchNode,
    BenchPod,
    build_arrivals,
    load_trace,
    trace_typical_pods,
)
from gpufleet.sim.openb import DEFAULT_POD_FILE, GPU_NODE_FILE, default_openb_dir

__all__ = [
    "BASELINE_POLICIES",
    "POLICIES",
    "PUBLISHED_UNALLOCATED",
    "REPORT_POINTS",
    "TIE_BREAKS",
    "BenchConfig",
    "PolicySummary",
    "RunResult",
    "TieBreak",
    "default_trace_paths",
    "effective_tie_break",
    "parse_seeds",
    "run_benchmark",
    "run_one",
    "simulate",
    "summarize",
    "to_json",
]

BASELINE_POLICIES: tuple[str, ...] = SCORER_NAMES
POLICIES: tuple[str, ...] = (*SCORER_NAMES, OUR_POLICY, "gpufleet")  # gpufleet: the default profile
TieBreak = Literal["first", "random"]
TIE_BREAKS: tuple[TieBreak, ...] = ("first", "random")
REPORT_POINTS = (100, 110, 120, 130)

# Published means over seeds 42-51, unallocated GPU % by arrived demand, default trace (the authors' cached
# results, see shared/reference/fragmentation-benchmark.md §3).
PUBLISHED_UNALLOCATED: dict[str, dict[int, float]] = {
    "random": {100: 13.70, 110: 13.12, 120: 12.72, 130: 12.53},
    "dotprod": {100: 9.38, 110: 9.30, 120: 9.23, 130: 9.15},
    "gpuclustering": {100: 8.35, 110: 8.27, 120: 8.20, 130: 8.12},
    "gpupacking": {100: 8.22, 110: 8.14, 120: 8.08, 130: 8.00},
    "bestfit": {100: 7.14, 110: 7.07, 120: 7.00, 130: 6.92},
    "fgd": {100: 4.77, 110: 4.70, 120: 4.65, 130: 4.61},
}


def default_trace_paths() -> tuple[Path | None, Path | None]:
    """(GPU node list, default pod list) from the openb folder, or None where the folder is missing."""
    folder = default_openb_dir()
    if folder is None:
        return None, None
    return folder / GPU_NODE_FILE, folder / DEFAULT_POD_FILE


def parse_seeds(text: str) -> list[int]:
    """"42-51" -> 42..51; "1,5,9" -> [1, 5, 9]; both forms may be mixed ("1,3-4")."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            if sep:
                a, b = int(lo), int(hi)
                if b < a:
                    raise ValueError(f"empty seed range {part!r}")
                seeds.extend(range(a, b + 1))
            else:
                seeds.append(int(part))
        except ValueError as exc:
            raise ValueError(f"bad seed list {text!r}: {exc}") from None
    if not seeds:
        raise ValueError(f"no seeds in {text!r}")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"repeated seeds in {text!r}")
    return seeds


@dataclass(slots=True)
class RunResult:
    """One (policy, trace, seed) run, with its curves binned on arrive ratio 0..130 (NaN: no data)."""

    policy: str
    trace: str
    seed: int
    pods: int
    originals: int
    failed_pods: int
    failed_gpu_milli: int
    capacity_milli: int
    seconds: float
    unallocated_pct: list[float]
    frag_amount_pct: list[float]  # Σ F_n(M) as % of GPU capacity
    frag_rate_pct: list[float]  # Σ F_n(M) / idle GPU milli, %
    final_unallocated_pct: float


def effective_tie_break(policy: str, tie_break: TieBreak) -> TieBreak:
    """Random draws its node uniformly among the feasible ones whatever the tie rule (the reference plugin
    picks it in PreScore and scores it alone), so it always goes through uniform tie-breaking."""
    return "random" if policy == "random" else tie_break


def _tie_rng(seed: int) -> random.Random:
    # A stream of its own for host tie-breaks and random GPU picks, so the workload (drawn from Random(seed))
    # is the same for every policy of a seed.
    return random.Random(f"fragbench-placement-{seed}")


def simulate(
    arrivals: Arrivals,
    typical: Sequence[TypicalPod],
    policy: str,
    *,
    tie_break: TieBreak = "first",
    trace: str = "",
    indexed: bool = True,
    on_step: Callable[[int, int | None], None] | None = None,
) -> RunResult:
    """Run one fill-up: offer every arriving pod once, record the cluster after each arrival."""
    fm = FragmentationModel(typical)
    rng = _tie_rng(arrivals.seed)
    started = time.perf_counter()
    eng = PlacerEngine(arrivals.nodes, policy, fm, rng, tie_break=effective_tie_break(policy, tie_break),
                       indexed=indexed)
    tracker = FragTracker(fm, eng.frag_view, len(arrivals.nodes))
    n = len(arrivals.pods)
    arrived = np.zeros(n, dtype=np.int64)
    used = np.zeros(n, dtype=np.int64)
    frag = np.zeros(n, dtype=np.float64)
    idle = np.zeros(n, dtype=np.int64)
    total_arrived = total_used = 0
    failed = failed_milli = 0
    for k, pod in enumerate(arrivals.pods):
        total_arrived += pod.total_gpu_milli
        where = eng.place(pod)
        if where is None:
            failed += 1
            failed_milli += pod.total_gpu_milli
        else:
            total_used += pod.total_gpu_milli
            tracker.update(where)
        if on_step is not None:
            on_step(k, where)
        arrived[k] = total_arrived
        used[k] = total_used
        frag[k] = tracker.amount
        idle[k] = tracker.idle
    seconds = time.perf_counter() - started
    allocated = round(eng.cluster.gpu_allocated() * 1000)
    if allocated != total_used:
        # The curve counts what the placer reported placed; the cluster must hold exactly that.
        raise RuntimeError(f"cluster holds {allocated} milli-GPU, the placements reported {total_used}")
    cap = arrivals.capacity_milli
    unalloc = 100.0 - used / cap * 100.0
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(idle > 0, frag / np.maximum(idle, 1) * 100.0, np.nan)
    return RunResult(
        policy=policy, trace=trace, seed=arrivals.seed, pods=n, originals=arrivals.originals,
        failed_pods=failed, failed_gpu_milli=failed_milli, capacity_milli=cap, seconds=seconds,
        unallocated_pct=bin_curve(arrived, unalloc, cap).tolist(),
        frag_amount_pct=bin_curve(arrived, frag / cap * 100.0, cap).tolist(),
        frag_rate_pct=bin_curve(arrived, rate, cap).tolist(),
        final_unallocated_pct=float(unalloc[-1]) if n else 100.0,
    )


@dataclass(frozen=True, slots=True)
class BenchConfig:
    nodes_csv: Path
    pods_csv: Path
    policies: tuple[str, ...] = BASELINE_POLICIES
    seeds: tuple[int, ...] = tuple(range(42, 52))
    inflate: float = 1.3
    tie_break: TieBreak = "first"
    reference_stop: bool = True
    cutoff: float = 0.95
    jobs: int = 1
    # Optional node and pod limits, for smoke runs: the first ``max_nodes`` nodes (by name) and ``max_pods``
    # pods (by name) of the trace.
    max_nodes: int | None = None
    max_pods: int | None = None

    def __post_init__(self) -> None:
        unknown = [p for p in self.policies if p not in POLICIES]
        if unknown:
            raise ValueError(f"unknown policy {', '.join(unknown)}; expected some of {', '.join(POLICIES)}")
        if self.tie_break not in TIE_BREAKS:
            raise ValueError(f"unknown tie_break {self.tie_break!r}; expected one of {', '.join(TIE_BREAKS)}")
        if self.jobs < 1:
            raise ValueError("jobs must be >= 1")
        if not self.seeds:
            raise ValueError("no seeds")

    @property
    def trace(self) -> str:
        return self.pods_csv.stem


_TRACE_CACHE: dict[tuple[str, str, int | None, int | None, float],
                   tuple[list[BenchNode], list[BenchPod], list[TypicalPod]]] = {}


def _trace(cfg: BenchConfig) -> tuple[list[BenchNode], list[BenchPod], list[TypicalPod]]:
    key = (str(cfg.nodes_csv), str(cfg.pods_csv), cfg.max_nodes, cfg.max_pods, cfg.cutoff)
    hit = _TRACE_CACHE.get(key)
    if hit is None:
        nodes, pods = load_trace(cfg.nodes_csv, cfg.pods_csv)
        if cfg.max_nodes is not None:
            nodes = sorted(nodes, key=lambda n: n.name)[: cfg.max_nodes]
        if cfg.max_pods is not None:
            pods = sorted(pods, key=lambda p: p.name)[: cfg.max_pods]
        hit = (nodes, pods, trace_typical_pods(pods, cfg.cutoff))
        _TRACE_CACHE[key] = hit
    return hit


def run_one(cfg: BenchConfig, policy: str, seed: int) -> RunResult:
    nodes, pods, typical = _trace(cfg)
    arrivals = build_arrivals(pods, nodes, seed, ratio=cfg.inflate, reference_stop=cfg.reference_stop)
    return simulate(arrivals, typical, policy, tie_break=cfg.tie_break, trace=cfg.trace)


def _run_task(args: tuple[BenchConfig, str, int]) -> RunResult:
    return run_one(*args)


def run_benchmark(
    cfg: BenchConfig, progress: Callable[[RunResult], None] | None = None
) -> list[RunResult]:
    """Every (policy, seed) run of ``cfg``, ordered by policy (as given) then seed; ``cfg.jobs`` processes."""
    tasks = [(cfg, policy, seed) for policy in cfg.policies for seed in cfg.seeds]
    results: list[RunResult] = []
    if cfg.jobs == 1 or len(tasks) == 1:
        for t in tasks:
            r = _run_task(t)
            if progress is not None:
                progress(r)
            results.append(r)
        return results
    workers = min(cfg.jobs, len(tasks), os.cpu_count() or 1) if cfg.jobs > 1 else 1
    with ProcessPoolExecutor(max_workers=max(workers, 1)) as pool:
        for r in pool.map(_run_task, tasks):
            if progress is not None:
                progress(r)
            results.append(r)
    return results


@dataclass(slots=True)
class PolicySummary:
    policy: str
    trace: str
    seeds: list[int]
    unallocated: dict[int, MeanStd]  # at REPORT_POINTS
    frag_amount: dict[int, MeanStd]
    frag_rate: dict[int, MeanStd]
    curve_mean: list[float]  # unallocated %, bins 0..130
    curve_std: list[float]
    frag_amount_curve: list[float]
    frag_rate_curve: list[float]
    seconds_per_run: float
    seconds_std: float
    failed_pods: float
    runs: list[RunResult] = field(default_factory=list)


def _at(runs: Sequence[RunResult], attr: str, b: int) -> MeanStd:
    return mean_std([getattr(r, attr)[b] for r in runs])


def _curve(runs: Sequence[RunResult], attr: str) -> tuple[list[float], list[float]]:
    stats = [_at(runs, attr, b) for b in range(MAX_BIN + 1)]
    return [s.mean for s in stats], [s.std for s in stats]


def summarize(results: Sequence[RunResult]) -> list[PolicySummary]:
    """Mean and sample standard deviation over seeds, per (policy, trace), in first-seen order."""
    groups: dict[tuple[str, str], list[RunResult]] = {}
    for r in results:
        groups.setdefault((r.policy, r.trace), []).append(r)
    out = []
    for (policy, trace), runs in groups.items():
        runs = sorted(runs, key=lambda r: r.seed)
        mean, std = _curve(runs, "unallocated_pct")
        amount, _ = _curve(runs, "frag_amount_pct")
        rate, _ = _curve(runs, "frag_rate_pct")
        secs = mean_std([r.seconds for r in runs])
        out.append(PolicySummary(
            policy=policy, trace=trace, seeds=[r.seed for r in runs],
            unallocated={b: _at(runs, "unallocated_pct", b) for b in REPORT_POINTS},
            frag_amount={b: _at(runs, "frag_amount_pct", b) for b in REPORT_POINTS},
            frag_rate={b: _at(runs, "frag_rate_pct", b) for b in REPORT_POINTS},
            curve_mean=mean, curve_std=std, frag_amount_curve=amount, frag_rate_curve=rate,
            seconds_per_run=secs.mean, seconds_std=secs.std,
            failed_pods=math.fsum(r.failed_pods for r in runs) / len(runs), runs=runs,
        ))
    return out


def _num(x: float) -> float | None:
    # JSON has no NaN; a missing bin is null.
    return None if math.isnan(x) else round(x, 4)


def _ms(s: MeanStd) -> dict[str, float | None]:
    return {"mean": _num(s.mean), "std": _num(s.std)}


def to_json(summaries: Sequence[PolicySummary]) -> dict[str, Any]:
    """The ``--json`` document: one entry per (policy, trace)."""
    results = []
    for s in summaries:
        results.append({
            "policy": s.policy,
            "trace": s.trace,
            "seeds": s.seeds,
            "unallocated_pct": {str(b): _ms(m) for b, m in s.unallocated.items()},
            "frag_amount_pct": {str(b): _ms(m) for b, m in s.frag_amount.items()},
            "frag_rate_pct": {str(b): _ms(m) for b, m in s.frag_rate.items()},
            "seconds_per_run": round(s.seconds_per_run, 3),
            "failed_pods": s.failed_pods,
            "curve": {
                "arrived_pct": list(range(MAX_BIN + 1)),
                "unallocated_mean": [_num(x) for x in s.curve_mean],
                "unallocated_std": [_num(x) for x in s.curve_std],
                "frag_amount_pct_mean": [_num(x) for x in s.frag_amount_curve],
                "frag_rate_pct_mean": [_num(x) for x in s.frag_rate_curve],
            },
            "runs": [{"seed": r.seed, "pods": r.pods, "failed_pods": r.failed_pods,
                      "seconds": round(r.seconds, 3),
                      "unallocated_pct": {str(b): _num(r.unallocated_pct[b]) for b in REPORT_POINTS}}
                     for r in s.runs],
        })
    return {"results": results}
