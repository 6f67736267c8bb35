"""The simulator as judge: a proposal run on the demand, its figures, and its score on the objective.

Every proposal, the given configuration included, runs the same jobs (the same arrivals, durations, work and
memory; each class asking for its proposal's device) under the ``gpufleet`` policy with the same seed. Scores
are lower-is-better and relative to the given configuration, whose own figures are therefore always within
its guards: the given configuration is always a candidate, and nothing worse than it on the objective asked
is ever chosen.

* ``cost``: what serving the whole demand costs per busy GPU-hour of the work it got done (:func:`demand_costs`:
  held GPUs over the whole run, over the compute that attempts which succeeded or still run kept busy), so
  that a configuration where more jobs complete is not counted dearer for the work it did;
  guards: job success not more than 1 point lower, p95 queue wait at most 25% (or 30 minutes) longer, no more
  jobs unfinished than 1% of them beyond the given's;
* ``wait``: the p95 queue wait (the mean of the queues' p95 breaks ties); guards: job success not more than 1
  point lower, the demand's cost at most 5% higher, unfinished jobs as above;
* ``balanced``: the sum of the demand's cost per work done, p95 wait (plus 5 minutes) and failed share of jobs
  (plus 1 point), each over the given configuration's; guards: none of the three worse than with the given
  configuration (the cost per work not higher, the wait not a minute longer, job success not half a point
  lower), so that a gain on one is never bought with a loss on another; unfinished jobs as above.

``--budget`` (CHF per hour, what the held GPUs cost on average over the window) is a guard for every
objective, the given configuration's included.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.advise.contract import Judged, Objective, Proposal
from gpufleet.sim.jobs import JobLine, job_lines
from gpufleet.sim.metrics import INFERENCE_ROLE, kpis, per_queue
from gpufleet.sim.records import SimResult
from gpufleet.sim.report.build import duration_text
from gpufleet.sim.scenario import Scenario, run_scenario

SUCCESS_SLACK_PTS = 1.0
WAIT_SLACK = 1.25
WAIT_SLACK_S = 1800.0
COST_SLACK = 1.05
WAIT_FLOOR_S = 300.0
BALANCED_WAIT_S = 60.0
BALANCED_SUCCESS_PTS = 0.5


def run(scenario: Scenario, policy: str, seed: int) -> tuple[dict[str, Any], dict[str, Any], float]:
    """The run's KPIs (with :func:`demand_costs`) and per-queue figures, and how long it took."""
    started = time.perf_counter()
    result = run_scenario(scenario, policy, seed=seed)
    lines = job_lines(result)
    k = kpis(result, lines)
    k.update(demand_costs(result, lines))
    return k, per_queue(result), time.perf_counter() - started


def demand_costs(result: SimResult, lines: Sequence[JobLine]) -> dict[str, float]:
    """What serving the whole demand cost: every held device over the whole run, the drain included.

    The window's ``cost`` counts only what falls inside the window, so a configuration that makes work wait
    past its end looks cheaper; for the same jobs, the whole run's cost does not reward waiting. The work is
    what the per-job records ``lines`` (:func:`~gpufleet.sim.jobs.job_lines`) count useful."""
    inference = {j.key for j in result.jobs if j.role == INFERENCE_ROLE}
    total = inference_total = 0.0
    for x in result.spans:
        held = x.share * x.price * max(0.0, x.held_to - x.held_from) / 3600.0
        total += held
        if x.job in inference:
            inference_total += held
    work = sum(x.gpu_seconds_busy_useful for x in lines) / 3600.0
    return {"demand_cost": round(total, 2), "demand_inference_cost": round(inference_total, 2),
            "demand_cost_per_work": round(total / work, 4) if work > 0 else 0.0}


def _num(k: Mapping[str, Any], key: str, default: float = 0.0) -> float:
    value = k.get(key)
    return float(value) if value is not None else default


def _queue_p95(q: Mapping[str, Any]) -> float:
    waits = [float(v["wait_p95_s"]) for v in q.values() if v.get("wait_p95_s") is not None]
    return sum(waits) / len(waits) if waits else 0.0


def cost_per_hour(k: Mapping[str, Any]) -> float:
    window = _num(k, "window_s", 1.0)
    return _num(k, "cost") / max(window / 3600.0, 1e-9)


def score(objective: Objective, k: Mapping[str, Any], q: Mapping[str, Any], given: Mapping[str, Any]) -> float:
    """The objective's value (lower is better), relative to the given configuration's figures ``given``."""
    if objective == "cost":
        return _num(k, "demand_cost_per_work")
    if objective == "wait":
        return _num(k, "wait_p95_s") + _queue_p95(q) / 1000.0
    failed = 100.0 - _num(k, "job_success_pct", 100.0)
    failed_given = 100.0 - _num(given, "job_success_pct", 100.0)
    return (_num(k, "demand_cost_per_work") / max(_num(given, "demand_cost_per_work"), 1e-9)
            + (_num(k, "wait_p95_s") + WAIT_FLOOR_S) / (_num(given, "wait_p95_s") + WAIT_FLOOR_S)
            + (failed + 1.0) / (failed_given + 1.0))


def guards(objective: Objective, k: Mapping[str, Any], given: Mapping[str, Any],
           budget: float | None) -> str | None:
    """Why a run is out of bounds for the objective (module doc), or None."""
    jobs = _num(given, "jobs", 1.0)
    if _num(k, "jobs_unfinished") > _num(given, "jobs_unfinished") + max(1.0, 0.01 * jobs):
        return (f"{_num(k, 'jobs_unfinished'):.0f} jobs unfinished against {_num(given, 'jobs_unfinished'):.0f} "
                "with the given configuration")
    if budget is not None and cost_per_hour(k) > budget + 1e-9:
        return f"held GPUs cost {cost_per_hour(k):.2f} CHF/h on average, above the budget of {budget:g} CHF/h"
    if objective in ("cost", "wait"):
        success, success_given = _num(k, "job_success_pct", 100.0), _num(given, "job_success_pct", 100.0)
        if success < success_given - SUCCESS_SLACK_PTS:
            return f"job success {success:.1f}% against {success_given:.1f}% with the given configuration"
    if objective == "cost":
        wait, wait_given = _num(k, "wait_p95_s"), _num(given, "wait_p95_s")
        if wait > max(wait_given * WAIT_SLACK, wait_given + WAIT_SLACK_S):
            return (f"p95 queue wait {duration_text(wait)} against {duration_text(wait_given)} with the given "
                    "configuration")
    if objective == "balanced":
        if _num(k, "demand_cost_per_work") > _num(given, "demand_cost_per_work") + 1e-6:
            return (f"the demand costs {_num(k, 'demand_cost_per_work'):.2f} CHF per busy GPU-hour of work done "
                    f"against {_num(given, 'demand_cost_per_work'):.2f} CHF with the given configuration")
        if _num(k, "wait_p95_s") > _num(given, "wait_p95_s") + BALANCED_WAIT_S:
            return (f"p95 queue wait {duration_text(_num(k, 'wait_p95_s'))} against "
                    f"{duration_text(_num(given, 'wait_p95_s'))} with "
                    "the given configuration")
        success, success_given = _num(k, "job_success_pct", 100.0), _num(given, "job_success_pct", 100.0)
        if success < success_given - BALANCED_SUCCESS_PTS:
            return f"job success {success:.1f}% against {success_given:.1f}% with the given configuration"
    if objective == "wait" and _num(k, "demand_cost_per_work") > _num(given, "demand_cost_per_work") * COST_SLACK:
        return (f"the demand costs {_num(k, 'demand_cost_per_work'):.2f} CHF per busy GPU-hour of work done "
                f"against {_num(given, 'demand_cost_per_work'):.2f} CHF with the given configuration")
    return None


def judged(proposal: Proposal, objective: Objective, k: dict[str, Any], q: dict[str, Any],
           given: Mapping[str, Any], budget: float | None, wall_s: float) -> Judged:
    why = guards(objective, k, given, budget)
    return Judged(proposal, k, q, score(objective, k, q, given), why is None, why, wall_s)
