"""Per-job records and the yardsticks computed from them, on a run written by hand and computed by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.sim.jobs import job_lines, write_jsonl
from gpufleet.sim.metrics import kpis
from gpufleet.sim.records import Attempt, JobRecord, PodSpan, PoolInfo, SimResult
from gpufleet.sim.yardsticks import per_role, weighted_percentile

HOUR = 3600.0


def _record(key: str, role: str, arrival: float, attempts: list[Attempt], outcome: str = "unfinished",
            ended: float | None = None, klass: str = "c") -> JobRecord:
    return JobRecord(key, "ns", "t", "q", klass, role, 1, 1.0, arrival, attempts, outcome, ended)  # type: ignore[arg-type]


def _span(job: str, attempt: int, held: tuple[float, float], share: float, price: float,
          equivalent: float | None = None, demand: float = 0.0) -> PodSpan:
    busy = (held[0], held[1]) if demand else (None, None)
    return PodSpan(job, job + "-0", "n", "p", "M", share, price, held[0], held[1], busy[0], busy[1], demand,
                   attempt=attempt, equivalent=equivalent)


def _run() -> SimResult:
    """Run end at 10 h; 4 GPUs at 2 CHF/h.

    * a (training): fails by OOM at 1 h (held 1 GPU 0-1 h), retried, succeeds 2-5 h (1 GPU), busy 0.8 of it;
    * b (training): a gang that never got all its pods: one pod held 3 of 7 slices (a MIG 3g instance, share 0.5
      of its GPU) from 1 h to the end, never started;
    * c (inference): a replica of 8 from 4 h, running at the end;
    * d (interactive): submitted at 9 h, never placed.
    """
    a = _record("ns/a", "training", 0.0, [Attempt(0.0, 0.0, HOUR, "failed", "OOMKilled"),
                                          Attempt(1.5 * HOUR, 2 * HOUR, 5 * HOUR, "succeeded")],
                "succeeded", 5 * HOUR)
    b = _record("ns/b", "training", HOUR, [Attempt(HOUR)])
    c = _record("ns/c", "inference", 4 * HOUR, [Attempt(4 * HOUR, 4 * HOUR, None, "running")])
    d = _record("ns/d", "interactive", 9 * HOUR, [Attempt(9 * HOUR)])
    spans = [_span("ns/a", 0, (0.0, HOUR), 1.0, 2.0, demand=0.8),
             _span("ns/a", 1, (2 * HOUR, 5 * HOUR), 1.0, 2.0, demand=0.8),
             _span("ns/b", 0, (HOUR, 10 * HOUR), 0.5, 2.0, equivalent=3 / 7),
             _span("ns/c", 0, (4 * HOUR, 10 * HOUR), 0.125, 2.0)]
    return SimResult("s", "gpufleet", 10 * HOUR, 10 * HOUR, 4.0, [PoolInfo("p", 4, ("M",))], [a, b, c, d], spans,
                     [], gpus={("p", "M"): 4}, prices={"M": 2.0})


def test_job_lines_by_hand() -> None:
    lines = {x.job: x for x in job_lines(_run())}
    a, b, c, d = lines["ns/a"], lines["ns/b"], lines["ns/c"], lines["ns/d"]
    assert (a.outcome, a.first_start, a.finished, a.attempts, a.failures) == (
        "succeeded", 0.0, 5 * HOUR, 2, {"OOMKilled": 1})
    assert a.gpu_seconds_held == 4 * HOUR and a.gpu_seconds_useful == 3 * HOUR
    assert a.gpu_seconds_busy_useful == pytest.approx(0.8 * 3 * HOUR)  # the failed attempt's busy hour is not
    assert a.cost_held == pytest.approx(8.0)
    assert (b.outcome, b.first_start) == ("pending", None)
    assert b.gpu_seconds_held == pytest.approx(9 * HOUR * 3 / 7) and b.gpu_seconds_useful == 0.0
    assert b.cost_held == pytest.approx(9 * 0.5 * 2.0)  # priced by its share of the GPU
    assert (c.outcome, c.gpu_seconds_useful) == ("running", 6 * HOUR / 8)
    assert (d.outcome, d.gpu_seconds_held, d.time_to_start(10 * HOUR)) == ("pending", 0.0, HOUR)
    # What each weighs: what its first placed attempt held (3/7 for the 3g instance, 1/8 for the replica), else
    # what it asks (d, never placed).
    assert (a.gpus, b.gpus, c.gpus, d.gpus) == (1.0, pytest.approx(3 / 7), 0.125, 1.0)


def test_yardsticks_by_hand() -> None:
    k = kpis(_run())
    assert k["work_done_gpu_hours"] == pytest.approx(3 + 0.75, abs=1e-3)
    assert k["wasted_gpu_hours"] == pytest.approx(1 + 9 * 3 / 7, abs=1e-3)
    assert k["fleet_cost"] == pytest.approx(4 * 2.0 * 10)
    assert k["cost_per_useful_gpu_hour"] == pytest.approx(80 / 3.75, abs=1e-3)
    assert k["cost_held"] == pytest.approx(8 + 9 + 6 * 0.125 * 2, abs=0.01)
    assert k["job_completion_pct"] == 25.0  # a of a, b, c, d: running and never started are not completed
    assert k["training_completion_pct"] == 50.0
    assert (k["jobs_never_started"], k["jobs_running_at_end"], k["jobs_pending_at_end"]) == (2, 1, 2)
    # Time to first start: a 0, c 0, b 9 h (never: until the end), d 1 h -> p50 0.5 h.
    assert k["first_start_p50_s"] == pytest.approx(0.5 * HOUR)
    # Job success over the jobs that ended says 100%: the old figure alone hides b and d.
    assert k["job_success_pct"] == 100.0
    roles = per_role(job_lines(_run()), 10 * HOUR)
    assert roles["training"]["completion_pct"] == 50.0 and roles["training"]["never_started"] == 1
    assert roles["interactive"]["pending"] == 1 and roles["inference"]["running"] == 1


def test_jobs_out_writes_one_json_line_per_job_per_run(tmp_path: Path) -> None:
    path = tmp_path / "jobs.jsonl"
    assert write_jsonl(path, [_run(), _run()]) == 8
    rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    assert rows[0] == {"policy": "gpufleet", "scenario": "s", "job": "ns/a", "class": "c", "queue": "q",
                       "role": "training", "gpus": 1.0, "submitted": 0.0, "outcome": "succeeded", "firstStart": 0.0,
                       "finished": 18000.0, "attempts": 2, "failures": {"OOMKilled": 1}, "preemptions": 0,
                       "gpuSecondsHeld": 14400.0, "gpuSecondsUseful": 10800.0, "gpuSecondsBusyUseful": 8640.0,
                       "costHeld": 8.0}
    assert [r["outcome"] for r in rows[:4]] == ["succeeded", "pending", "running", "pending"]


def test_gpu_weighted_first_start_counts_a_gang_by_its_gpus() -> None:
    # Times to start 0 (a notebook of 1/8), 0 (another), 10 h (a 16-GPU gang): by count, p95 is 9 h and some;
    # by GPUs asked the gang is 16 of 16.25, so its 10 h is where 95% of the GPUs asked had started.
    assert weighted_percentile([0.0, 0.0, 36000.0], [0.125, 0.125, 16.0], 95) == 36000.0
    assert weighted_percentile([0.0, 0.0, 36000.0], [8.0, 8.0, 0.125], 95) == 0.0
    assert weighted_percentile([5.0], [0.0], 95) is None
    k = kpis(_run())
    assert k["first_start_p95_gpu_weighted_s"] == 9 * HOUR  # four jobs of one GPU each: b's 9 h is the 95th
