"""The twin's verdict: gpufleet against kube-default and Kueue on the case study and five more workloads.

Each workload is the case study's cluster and queues (the *after* configuration) with a variant of its workload
generator: other seeds, a heavier load, other mixes. Every policy runs the same jobs; the table prints, per
workload, the yardsticks that count work done (sim/yardsticks.py) and whether gpufleet is at least as good as
both peers on each. A workload's wait that a quota imposes by design shows in the per-queue lines below it.

    .venv/bin/python bench/twin.py [--only NAME] [--reserve-after 16h]

``--reserve-after`` sets gpufleet's gang reservation on the research ClusterQueue (annotation
``gpufleet.io/reserve-after``) in every workload, to measure what it trades.
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from gpufleet.sim import casestudy
from gpufleet.sim.runner import plan, run_plan

POLICIES = ("kube-default", "kueue", "gpufleet")
# (KPI key, words, +1 higher is better / -1 lower is better)
YARDSTICKS: tuple[tuple[str, str, int], ...] = (
    ("work_done_gpu_hours", "work done (GPU-h)", 1),
    ("cost_per_useful_gpu_hour", "CHF per useful GPU-h", -1),
    ("job_completion_pct", "job completion %", 1),
    ("training_completion_pct", "training completion %", 1),
    ("first_start_p95_s", "first start p95 (h)", -1),
    ("first_start_p95_gpu_weighted_s", "... GPU-weighted (h)", -1),
)

Spec = dict[str, Any]


def _classes(spec: Spec) -> dict[str, Spec]:
    return {c["name"]: c for c in spec["spec"]["classes"]}


def _scale_rates(spec: Spec, factors: dict[str, float], default: float = 1.0) -> None:
    for name, c in _classes(spec).items():
        c["arrival"]["ratePerHour"] = round(c["arrival"]["ratePerHour"] * factors.get(name, default), 6)


def _seed(seed: int) -> Callable[[Spec], None]:
    def change(spec: Spec) -> None:
        spec["spec"]["seed"] = seed
    return change


def _load(factor: float) -> Callable[[Spec], None]:
    def change(spec: Spec) -> None:
        _scale_rates(spec, {}, factor)
    return change


def _training_heavy(spec: Spec) -> None:
    _scale_rates(spec, {"research-training": 1.6, "finetuning": 1.5, "notebooks": 0.5})


def _shared_batch(spec: Spec) -> None:
    """Data science also runs small training jobs on the time-sliced L40S: contention and memory matter."""
    classes = spec["spec"]["classes"]
    experiments = copy.deepcopy(_classes(spec)["light-inference"])
    experiments.update({
        "name": "ds-experiments", "role": "training", "backoffLimit": 2,
        "arrival": {"ratePerHour": 0.4, "diurnal": {"amplitude": 0.7, "peakHour": 13}, "weekendFactor": 0.2},
        "duration": {"distribution": "lognormal", "median": "2h", "sigma": 0.6, "min": "20m", "max": "12h"},
        "gpuUtilization": {"distribution": "uniform", "low": 0.3, "high": 0.7},
        "gpuMemoryUsed": {"distribution": "lognormal", "median": "12Gi", "sigma": 0.4, "max": "40Gi"},
    })
    classes.append(experiments)


VARIANTS: dict[str, tuple[str, Callable[[Spec], None] | None]] = {
    "casestudy": ("the case study as shipped (seed 20250101)", None),
    "seed-1": ("the same classes, another draw (seed 1)", _seed(1)),
    "seed-2": ("the same classes, another draw (seed 2)", _seed(2)),
    "load-1.4x": ("every class arriving 1.4 times as often", _load(1.4)),
    "training-heavy": ("research 1.6x, fine-tuning 1.5x, notebooks 0.5x", _training_heavy),
    "shared-batch": ("plus data-science training jobs on the time-sliced L40S", _shared_batch),
}


def write_variant(folder: Path, change: Callable[[Spec], None] | None, reserve_after: str | None) -> None:
    for name in ("cluster.yaml", "queues.yaml"):
        text = casestudy.read_text(name)
        if name == "queues.yaml" and reserve_after is not None:
            text = text.replace("kind: ClusterQueue\nmetadata: {name: research}",
                                "kind: ClusterQueue\nmetadata:\n  name: research\n"
                                f"  annotations: {{gpufleet.io/reserve-after: \"{reserve_after}\"}}")
        (folder / name).write_text(text, encoding="utf-8")
    spec = yaml.safe_load(casestudy.read_text("workload.yaml"))
    if change is not None:
        change(spec)
    (folder / "workload.yaml").write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")


def run_variant(name: str, reserve_after: str | None) -> dict[str, dict[str, Any]]:
    _, change = VARIANTS[name]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_variant(folder, change, reserve_after)
        p = plan([str(folder)], compare=",".join(POLICIES))
        return {r.summary["policy"]: r.summary for r in run_plan(p)}


def _cell(key: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value / 3600:.1f}" if key.endswith("_s") else f"{value:,.2f}" if value < 100 else f"{value:,.0f}"


def verdicts(runs: dict[str, dict[str, Any]]) -> dict[str, bool]:
    """Per yardstick: whether gpufleet is at least as good as every peer."""
    out: dict[str, bool] = {}
    ours = runs["gpufleet"]["kpis"]
    for key, _, better in YARDSTICKS:
        mine = ours.get(key)
        peers = [runs[p]["kpis"].get(key) for p in POLICIES if p != "gpufleet"]
        out[key] = mine is not None and all(v is None or (mine - v) * better >= -1e-9 for v in peers)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=sorted(VARIANTS))
    ap.add_argument("--reserve-after", default=None)
    args = ap.parse_args()
    names = [args.only] if args.only else list(VARIANTS)
    header = f"{'workload':16s} {'policy':13s} " + " ".join(f"{w:>22s}" for _, w, _ in YARDSTICKS)
    print(header)
    wins = 0
    total = 0
    for name in names:
        started = time.perf_counter()
        runs = run_variant(name, args.reserve_after)
        verdict = verdicts(runs)
        for policy in POLICIES:
            k = runs[policy]["kpis"]
            print(f"{name:16s} {policy:13s} " + " ".join(f"{_cell(key, k.get(key)):>22s}" for key, _, _ in YARDSTICKS))
        print(f"{'':16s} {'at least both?':13s} " + " ".join(f"{'yes' if verdict[key] else 'NO':>22s}"
                                                              for key, _, _ in YARDSTICKS))
        print(f"{'':16s}   jobs never started: " + ", ".join(
            f"{policy} {runs[policy]['kpis']['jobs_never_started']}" for policy in POLICIES))
        for q, v in runs["gpufleet"]["per_queue"].items():
            print(f"{'':16s}   gpufleet queue {q}: p95 wait {(v['wait_p95_s'] or 0) / 3600:.1f} h, "
                  f"{v['succeeded']}/{v['jobs']} succeeded")
        print(f"{'':16s}   ({VARIANTS[name][0]}; {time.perf_counter() - started:.1f} s)")
        wins += sum(verdict.values())
        total += len(verdict)
    print(f"gpufleet at least as good as kube-default and kueue on {wins} of {total} (workload, yardstick) pairs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
