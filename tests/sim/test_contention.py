"""Slowdown under contention on time-sliced GPUs: tenants whose demands add up to more than the GPU run at their
share of it; batch work takes longer, a service or a notebook stays as long and gets less done."""

from __future__ import annotations

import pytest

from gpufleet.sim.contention import Contention, Work, WorkClock
from gpufleet.sim.engine import simulate_jobs
from gpufleet.sim.jobs import job_lines
from tests.sim.fakes import FifoPolicy
from tests.sim.helpers import cluster_of, job, jobs_of, pool

TS_POOL = pool("ts", 1, 1, model="L40S").replace(
    "  cpu: \"64\"",
    "  sharing:\n    timeSlicing:\n      renameByDefault: true\n"
    "      resources: [{name: nvidia.com/gpu, replicas: 8}]\n  cpu: \"64\"")


def _shared(name: str, demand: float, arrival: str = "0s", role: str = "training", pods: int = 1) -> str:
    return job(name, resource="nvidia.com/gpu.shared", arrival=arrival, duration="1h", pods=pods,
               labels=f"sim.gpufleet.io/role: {role}",
               annotations=f'    sim.gpufleet.io/gpu-demand: "{demand}"')


def _ends(text: str) -> dict[str, float | None]:
    r = simulate_jobs(FifoPolicy(cluster_of(TS_POOL)), jobs_of(text))
    return {j.key: j.ended for j in r.jobs}


def test_two_batch_jobs_over_one_gpu_share_it_and_both_take_longer() -> None:
    # 0.8 + 0.8 = 1.6 GPUs of demand on one GPU: each runs at 1/1.6 of its pace, an hour of work takes 1.6 h.
    assert _ends(_shared("a", 0.8) + _shared("b", 0.8)) == {"team-a/a": pytest.approx(5760.0),
                                                             "team-a/b": pytest.approx(5760.0)}


def test_a_tenant_arriving_later_slows_the_first_only_while_both_run() -> None:
    # a alone for 30 min (half its work), then both at 1/1.6: a's last 30 min of work take 48 min (ends 78 min);
    # b did 30 min of work by then, and its last 30 min run alone (ends 108 min).
    ends = _ends(_shared("a", 0.8) + _shared("b", 0.8, arrival="30m"))
    assert ends == {"team-a/a": pytest.approx(4680.0), "team-a/b": pytest.approx(6480.0)}


def test_under_the_gpu_nothing_slows() -> None:
    assert _ends(_shared("a", 0.5) + _shared("b", 0.5)) == {"team-a/a": 3600.0, "team-a/b": 3600.0}


def test_a_notebook_stays_its_hour_but_slows_the_batch_job_and_gets_less_done() -> None:
    r = simulate_jobs(FifoPolicy(cluster_of(TS_POOL)),
                      jobs_of(_shared("train", 0.8) + _shared("nb", 0.8, role="interactive")))
    ends = {j.key: j.ended for j in r.jobs}
    # Together for the notebook's hour the job does 3600/1.6 = 2250 s of work; the rest alone: ends at 4950 s.
    assert ends == {"team-a/train": pytest.approx(4950.0), "team-a/nb": 3600.0}
    lines = {x.job: x for x in job_lines(r)}
    # Work done, busy: the batch job's hour of work at 0.8 GPU; the notebook got 1/1.6 of its hour.
    assert lines["team-a/train"].gpu_seconds_busy_useful == pytest.approx(0.8 * 3600)
    assert lines["team-a/nb"].gpu_seconds_busy_useful == pytest.approx(0.8 * 3600 / 1.6)


def test_a_gang_sharing_one_gpu_with_itself_is_slowed_and_ends_as_one() -> None:
    # Both replicas of a 2-pod gang (0.6 each) on the one GPU: 1.2 of demand, the gang's hour of work takes 1.2 h.
    r = simulate_jobs(FifoPolicy(cluster_of(TS_POOL)), jobs_of(_shared("gang", 0.6, pods=2)))
    assert r.jobs[0].ended == pytest.approx(4320.0)
    assert [x.work_s for x in r.spans] == [pytest.approx(3600.0)] * 2


def test_a_work_goes_at_the_pace_of_its_most_loaded_gpu() -> None:
    ends: dict[tuple[str, str], float] = {}
    clock = WorkClock(lambda w, at: ends.__setitem__(w.key, at))
    wide = Work(("j", ""), [("j-0", ["g0"], 0.6), ("j-1", ["g1"], 0.6)], 3600.0, True)
    clock.start(wide, 0.0)
    assert ends[("j", "")] == 3600.0
    solo = Work(("s", "s-0"), [("s-0", ["g1"], 0.8)], 3600.0, True)
    clock.start(solo, 0.0)  # g1 now carries 1.4: both go at 1/1.4
    assert ends[("j", "")] == pytest.approx(5040.0) and ends[("s", "s-0")] == pytest.approx(5040.0)
    assert wide.version == 1 and solo.version == 0
    clock.stop(solo, 1400.0)  # solo leaves after 1000 s of work: wide did 1000 s too, 2600 s left alone
    assert ends[("j", "")] == pytest.approx(1400.0 + 2600.0) and wide.version == 2


def test_contention_loads_and_paces() -> None:
    c = Contention()
    c.add("a", ["g0", "g1"], 1.2)  # 0.6 on each
    c.add("b", ["g0"], 0.9)
    assert c.load("g0") == pytest.approx(1.5) and c.load("g1") == pytest.approx(0.6)
    assert c.pace(["g0", "g1"]) == pytest.approx(1 / 1.5) and c.pace(["g1"]) == 1.0
    c.remove("b", ["g0"])
    assert c.pace(["g0"]) == 1.0 and c.tenants(["g0"]) == {"a"}
