"""An attempt's own failure (SimJob.crashes, drawn by calibration's failure rate): the attempt ends as
"Error" at its fraction of the run, the job is retried within its backoff limit, later attempts run whole."""

from __future__ import annotations

from dataclasses import replace

from gpufleet.sim.engine import simulate_jobs
from gpufleet.sim.metrics import kpis
from tests.sim.fakes import FifoPolicy
from tests.sim.helpers import cluster_of, job, jobs_of, pool


def test_a_crash_ends_the_attempt_at_its_fraction_and_the_retry_runs_whole() -> None:
    cluster = cluster_of(pool("p", 1, 4))
    [gang] = jobs_of(job("gang", pods=2, duration="2h", backoff=1))
    r = simulate_jobs(FifoPolicy(cluster), [replace(gang, crashes=(0.25, None))])
    j = r.jobs[0]
    assert [(a.ended, a.outcome, a.cause) for a in j.attempts] == [
        (1800.0, "failed", "Error"), (1810.0 + 7200.0, "succeeded", None)]
    assert j.outcome == "succeeded" and kpis(r)["failures"] == {"Error": 1}


def test_a_crash_without_retries_left_fails_the_job_and_pods_working_alone_crash_once() -> None:
    cluster = cluster_of(pool("p", 1, 4))
    [solo] = jobs_of(job("solo", duration="1h"))
    [spread] = jobs_of(job("spread", pods=3, duration="1h",
                           annotations='    sim.gpufleet.io/gang: "false"'))
    r = simulate_jobs(FifoPolicy(cluster), [replace(solo, crashes=(0.5,)), replace(spread, crashes=(0.1,))])
    by = {j.key: j for j in r.jobs}
    assert [(a.ended, a.cause) for a in by["team-a/solo"].attempts] == [(1800.0, "Error")]
    assert by["team-a/solo"].outcome == "failed"
    assert [(a.ended, a.cause) for a in by["team-a/spread"].attempts] == [(360.0, "Error")]
    assert kpis(r)["failures"] == {"Error": 2}


def test_no_crash_drawn_changes_nothing() -> None:
    cluster = cluster_of(pool("p", 1, 4))
    jobs = jobs_of(job("a", duration="1h") + job("b", gpus=2, duration="2h"))
    plain = simulate_jobs(FifoPolicy(cluster_of(pool("p", 1, 4))), jobs)
    drawn = simulate_jobs(FifoPolicy(cluster), [replace(j, crashes=(None, None)) for j in jobs])
    assert [(a.started, a.ended) for j in plain.jobs for a in j.attempts] == [
        (a.started, a.ended) for j in drawn.jobs for a in j.attempts]
