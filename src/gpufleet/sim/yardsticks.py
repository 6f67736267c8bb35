"""The yardsticks that count work done, computed from the per-job records (:mod:`gpufleet.sim.jobs`).

Every figure here covers every job submitted in the measurement window, over the whole run (the window and its
drain), so work left undone can never show up as a saving:

* **work done**: useful GPU-hours, held by attempts that succeeded or are still running at the end;
* **work done, busy**: the compute that useful work kept busy (the same for a job whatever device it holds);
* **wasted GPU-hours**: held by attempts that failed, were preempted, or never got all their pods, and by pods that
  failed alone and were replaced (the ``replace_pods`` failure model);
* **cost per useful GPU-hour**: what the fleet costs over the run (every GPU at its price, idle or not: a
  platform pays for its GPUs whether or not the scheduler uses them) over the work done. What the jobs held,
  priced, is ``cost_held`` beside it; held cost per useful hour would rise with the share of work done on
  dearer models, so a policy that completes more H100 work would look worse for it;
* **job completion**: jobs that succeeded over every job submitted; jobs never started and jobs that starve
  count as not completed, those still running at the end are reported apart;
* **time to first start** p50/p95/p99 over every job: from submission until its work first began; a job that
  never started counts until the end of the run (how many did is said beside it);
* the same completion, time to first start and work done **per role and per class**.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from gpufleet.sim.jobs import JobLine
from gpufleet.sim.series import percentile

TRAINING_ROLE = "training"

# One line per yardstick, for reports and the dashboard: (KPI key, its definition).
DEFINITIONS: tuple[tuple[str, str], ...] = (
    ("work_done_gpu_hours", "GPU-hours (whole-GPU equivalents; a MIG instance by its compute slices over 7) held by "
                            "attempts that succeeded or are still running at the end."),
    ("cost_per_useful_gpu_hour", "what the fleet costs over the run (every GPU at its model's price per hour, idle "
                                 "or not) over the work done: more work on the same fleet, a lower figure."),
    ("job_completion_pct", "jobs that succeeded over every job submitted in the window; never started and starved "
                           "jobs count as not completed."),
    ("training_completion_pct", "the same over jobs of role training."),
    ("first_start_p95_s", "95th percentile over every job of the time from submission until its work first began; "
                          "a job that never started counts until the end of the run."),
    ("first_start_p95_gpu_weighted_s", "the same, each job weighing the GPUs it held when placed (else asks): by "
                                       "then the jobs holding 95% of the GPUs had started (a 16-GPU gang weighs as "
                                       "much as 128 notebooks on eighth replicas)."),
    ("wasted_gpu_hours", "GPU-hours held by attempts that failed, were preempted, or never got all their pods, and by "
                         "pods replaced after failing alone."),
)


def weighted_percentile(values: Sequence[float], weights: Sequence[float], q: float) -> float | None:
    """The smallest value by which ``q`` percent of the total weight is reached (no interpolation); None without
    weight."""
    pairs = sorted((v, w) for v, w in zip(values, weights, strict=True) if w > 0)
    total = sum(w for _, w in pairs)
    if total <= 0:
        return None
    need = total * q / 100.0
    seen = 0.0
    for v, w in pairs:
        seen += w
        if seen >= need - 1e-9:
            return v
    return pairs[-1][0]


def _r(x: float | None, nd: int = 2) -> float | None:
    return None if x is None else round(x, nd)


def _pct(part: int, whole: int) -> float | None:
    return _r(100.0 * part / whole) if whole else None


def completion(lines: Sequence[JobLine], run_end: float) -> dict[str, Any]:
    """Completion, outcomes at the end, time to first start and work done of a group of jobs."""
    outcomes = {o: 0 for o in ("succeeded", "failed", "running", "pending")}
    for x in lines:
        outcomes[x.outcome] += 1
    starts = [x.time_to_start(run_end) for x in lines]
    return {
        "jobs": len(lines), **outcomes,
        "never_started": sum(1 for x in lines if not x.started),
        "completion_pct": _pct(outcomes["succeeded"], len(lines)),
        "first_start_p50_s": _r(percentile(starts, 50), 1),
        "first_start_p95_s": _r(percentile(starts, 95), 1),
        "work_done_gpu_hours": round(sum(x.gpu_seconds_useful for x in lines) / 3600, 3),
    }


def yardstick_kpis(lines: Sequence[JobLine], run_end: float, fleet_cost: float) -> dict[str, Any]:
    """The headline yardsticks (merged into ``kpis`` of ``--json``); ``fleet_cost``: every GPU of the fleet at its
    price over the run."""
    every = completion(lines, run_end)
    held = sum(x.gpu_seconds_held for x in lines) / 3600
    useful = sum(x.gpu_seconds_useful for x in lines) / 3600
    starts = [x.time_to_start(run_end) for x in lines]
    training = [x for x in lines if x.role == TRAINING_ROLE]
    return {
        "work_done_gpu_hours": every["work_done_gpu_hours"],
        "work_done_busy_gpu_hours": round(sum(x.gpu_seconds_busy_useful for x in lines) / 3600, 3),
        "wasted_gpu_hours": round(held - useful, 3),
        "cost_per_useful_gpu_hour": _r(fleet_cost / useful if useful > 0 else None, 3),
        "fleet_cost": round(fleet_cost, 2),
        "cost_held": round(sum(x.cost_held for x in lines), 2),
        "job_completion_pct": every["completion_pct"],
        "training_completion_pct": _pct(sum(1 for x in training if x.outcome == "succeeded"), len(training)),
        "first_start_p50_s": every["first_start_p50_s"],
        "first_start_p95_s": every["first_start_p95_s"],
        "first_start_p99_s": _r(percentile(starts, 99), 1),
        "first_start_p95_gpu_weighted_s": _r(weighted_percentile(starts, [x.gpus for x in lines], 95), 1),
        "jobs_never_started": every["never_started"],
        "jobs_running_at_end": every["running"],
        "jobs_pending_at_end": every["pending"],
    }


def _grouped(lines: Sequence[JobLine], key: Callable[[JobLine], str | None], run_end: float) -> dict[str, Any]:
    groups: dict[str, list[JobLine]] = defaultdict(list)
    for x in lines:
        groups[key(x) or "(none)"].append(x)
    return {k: completion(v, run_end) for k, v in sorted(groups.items())}


def per_role(lines: Sequence[JobLine], run_end: float) -> dict[str, Any]:
    return _grouped(lines, lambda x: x.role, run_end)


def per_class(lines: Sequence[JobLine], run_end: float) -> dict[str, Any]:
    return _grouped(lines, lambda x: x.klass, run_end)
