from __future__ import annotations

import pytest

from gpufleet.sim.engine import simulate_jobs
from gpufleet.sim.metrics import kpis, per_queue
from gpufleet.sim.model import FailureModels, SimConfig, SimulationError
from tests.sim.fakes import FifoPolicy
from tests.sim.helpers import cluster_of, job, jobs_of, pool

A100_PRICE = 3.2


def test_two_jobs_metrics_by_hand() -> None:
    # 2 A100s. a: 1 GPU, 1 h, 50% busy. b: 2 GPUs, arrives with a, waits for it, then 1 h fully busy.
    cluster = cluster_of(pool("p", 1, 2))
    jobs = jobs_of(
        job("a", gpus=1, duration="1h", annotations='    sim.gpufleet.io/gpu-utilization: "0.5"')
        + job("b", gpus=2, duration="1h", annotations='    sim.gpufleet.io/gpu-utilization: "1"'))
    r = simulate_jobs(FifoPolicy(cluster), jobs)
    k = kpis(r)
    assert r.window_s == 7200
    assert k["gpu_allocation_pct"] == 75.0  # (1 GPU·h + 2 GPU·h) / (2 GPUs · 2 h)
    assert k["gpu_utilization_pct"] == 62.5  # (0.5 + 2) / 4
    assert k["busy_of_held_pct"] == pytest.approx(83.33, abs=0.01)
    assert k["job_success_pct"] == 100.0
    assert k["wait_p50_s"] == 1800.0  # waits 0 and 3600
    assert k["wait_p99_s"] == pytest.approx(3564.0)
    assert k["makespan_s"] == 7200.0
    assert k["gpu_hours"] == 3.0
    assert k["cost"] == pytest.approx(3 * A100_PRICE)
    q = per_queue(r)["(none)"]
    assert (q["jobs"], q["succeeded"], q["gpu_hours"]) == (2, 2, 3.0)


def test_gang_pod_by_pod_holds_what_it_got_then_fails_at_rendezvous() -> None:
    # 12 free GPUs, a 16-pod gang placed pod by pod: 12 run idle for 30 minutes, then the gang fails.
    cluster = cluster_of(pool("p", 3, 4))
    jobs = jobs_of(job("gang", pods=16, duration="2h"))
    r = simulate_jobs(FifoPolicy(cluster, gang=False), jobs)
    k = kpis(r)
    assert k["failures"] == {"RendezvousTimeout": 1}
    assert k["job_success_pct"] == 0.0
    assert k["gpu_hours"] == 6.0  # 12 GPUs × 0.5 h
    assert k["gpu_utilization_pct"] == 0.0
    assert r.jobs[0].ended == 1800.0
    assert cluster.gpu_allocated() == 0


def test_gang_all_or_nothing_waits_and_runs_whole() -> None:
    # 16 GPUs, 4 held by a 1-hour job: the gang waits that hour, then runs its 2 hours whole.
    cluster = cluster_of(pool("p", 4, 4))
    jobs = jobs_of(job("small", gpus=4, duration="1h") + job("gang", pods=16, duration="2h", arrival="1m"))
    r = simulate_jobs(FifoPolicy(cluster, gang=True), jobs)
    gang = next(j for j in r.jobs if j.key == "team-a/gang")
    assert gang.outcome == "succeeded"
    assert gang.attempts[0].started == 3600.0
    assert gang.ended == 3600.0 + 7200.0
    assert kpis(r)["failures"] == {}


def test_same_gang_pod_by_pod_fails_while_the_blocker_runs() -> None:
    cluster = cluster_of(pool("p", 4, 4))
    jobs = jobs_of(job("small", gpus=4, duration="1h") + job("gang", pods=16, duration="2h", arrival="1m"))
    r = simulate_jobs(FifoPolicy(cluster, gang=False), jobs, SimConfig(failures=FailureModels(retries=False)))
    gang = next(j for j in r.jobs if j.key == "team-a/gang")
    assert gang.outcome == "failed"
    assert gang.ended == 60.0 + 1800.0


def test_rendezvous_model_off_keeps_the_partial_gang_waiting() -> None:
    cluster = cluster_of(pool("p", 4, 4))
    jobs = jobs_of(job("small", gpus=4, duration="1h") + job("gang", pods=16, duration="2h", arrival="1m"))
    r = simulate_jobs(FifoPolicy(cluster, gang=False), jobs, SimConfig(failures=FailureModels(rendezvous=False)))
    gang = next(j for j in r.jobs if j.key == "team-a/gang")
    assert gang.outcome == "succeeded"
    assert gang.attempts[0].started == 3600.0  # the last 4 pods start when "small" ends


def test_retries_follow_backoff_limit_with_job_backoff() -> None:
    # 90 GiB on an 80 GB A100: OOM 60 s after each start; backoffLimit 2 -> three attempts, then failed.
    cluster = cluster_of(pool("p", 1, 1))
    jobs = jobs_of(job("big", backoff=2, annotations='    sim.gpufleet.io/gpu-memory-used: "90Gi"'))
    policy = FifoPolicy(cluster)
    r = simulate_jobs(policy, jobs)
    j = r.jobs[0]
    assert [(a.submitted, a.ended, a.cause) for a in j.attempts] == [
        (0.0, 60.0, "OOMKilled"), (70.0, 130.0, "OOMKilled"), (150.0, 210.0, "OOMKilled")]
    assert j.outcome == "failed"
    assert kpis(r)["failures"] == {"OOMKilled": 3}
    assert [c for c in policy.calls if c[0] == "finish"] == [
        ("finish", "team-a/big", 60.0), ("finish", "team-a/big", 130.0), ("finish", "team-a/big", 210.0)]


def test_retries_off_fails_at_first_failure() -> None:
    cluster = cluster_of(pool("p", 1, 1))
    jobs = jobs_of(job("big", backoff=2, annotations='    sim.gpufleet.io/gpu-memory-used: "90Gi"'))
    r = simulate_jobs(FifoPolicy(cluster), jobs, SimConfig(failures=FailureModels(retries=False)))
    assert len(r.jobs[0].attempts) == 1 and r.jobs[0].outcome == "failed"


def test_oom_model_off_lets_it_run() -> None:
    cluster = cluster_of(pool("p", 1, 1))
    jobs = jobs_of(job("big", annotations='    sim.gpufleet.io/gpu-memory-used: "90Gi"'))
    r = simulate_jobs(FifoPolicy(cluster), jobs, SimConfig(failures=FailureModels(oom=False)))
    assert r.jobs[0].outcome == "succeeded"


MIG_POOL = pool("mig", 1, 1, extra=", migLayout: \"3g.40gb:2\"").replace(
    "  cpu: \"64\"", "  sharing: {migStrategy: mixed}\n  cpu: \"64\"")


def test_oom_on_a_mig_instance_is_its_own_memory() -> None:
    cluster = cluster_of(MIG_POOL)
    jobs = jobs_of(
        job("fits", resource="nvidia.com/mig-3g.40gb", annotations='    sim.gpufleet.io/gpu-memory-used: "39Gi"')
        + job("over", resource="nvidia.com/mig-3g.40gb",
              annotations='    sim.gpufleet.io/gpu-memory-used: "41Gi"'))
    r = simulate_jobs(FifoPolicy(cluster), jobs)
    out = {j.key: (j.outcome, j.attempts[-1].cause) for j in r.jobs}
    assert out == {"team-a/fits": ("succeeded", None), "team-a/over": ("failed", "OOMKilled")}


def test_mig_instance_with_less_compute_than_the_job_needs_slows_it() -> None:
    # 3g.40gb has 3 of the A100's 7 compute slices; a job that keeps 0.6 of a whole GPU busy needs 0.6/(3/7)
    # = 1.4 times as long there, and keeps its instance fully busy (half the GPU in a two-halves layout).
    cluster = cluster_of(MIG_POOL)
    jobs = jobs_of(job("ft", resource="nvidia.com/mig-3g.40gb", duration="1h",
                       annotations='    sim.gpufleet.io/gpu-demand: "0.6"'))
    r = simulate_jobs(FifoPolicy(cluster), jobs)
    assert r.jobs[0].ended == pytest.approx(3600 * 1.4)
    assert r.spans[0].share == 0.5 and r.spans[0].demand == 0.5


TS_POOL = pool("ts", 1, 1, model="L40S").replace(
    "  cpu: \"64\"",
    "  sharing:\n    timeSlicing:\n      renameByDefault: true\n"
    "      resources: [{name: nvidia.com/gpu, replicas: 8}]\n  cpu: \"64\"")


def test_noisy_neighbour_on_a_time_sliced_gpu() -> None:
    # L40S 46068 MiB time-sliced: 30 GiB resident first, then a co-tenant reaching 20 GiB does not fit.
    cluster = cluster_of(TS_POOL)
    jobs = jobs_of(
        job("first", resource="nvidia.com/gpu.shared", annotations='    sim.gpufleet.io/gpu-memory-used: "30Gi"')
        + job("second", resource="nvidia.com/gpu.shared", arrival="10s",
              annotations='    sim.gpufleet.io/gpu-memory-used: "20Gi"')
        + job("third", resource="nvidia.com/gpu.shared", arrival="20s",
              annotations='    sim.gpufleet.io/gpu-memory-used: "10Gi"'))
    r = simulate_jobs(FifoPolicy(cluster), jobs)
    out = {j.key: (j.outcome, j.attempts[-1].cause) for j in r.jobs}
    assert out == {"team-a/first": ("succeeded", None), "team-a/second": ("failed", "OOMKilled"),
                   "team-a/third": ("succeeded", None)}
    assert kpis(r)["gpu_hours"] == pytest.approx((3600 + 60 + 3600) / 8 / 3600, abs=1e-3)


def test_time_sliced_gpu_busy_is_capped_at_one() -> None:
    cluster = cluster_of(TS_POOL)
    jobs = jobs_of("".join(job(f"n{i}", resource="nvidia.com/gpu.shared",
                               annotations='    sim.gpufleet.io/gpu-demand: "0.5"') for i in range(4)))
    r = simulate_jobs(FifoPolicy(cluster), jobs)
    k = kpis(r)
    assert k["gpu_allocation_pct"] == 50.0  # 4 of 8 replicas for the whole hour
    assert k["gpu_utilization_pct"] == 100.0  # 4 × 0.5 asked, one GPU


def test_fractions_share_memory_like_time_slicing() -> None:
    cluster = cluster_of(pool("p", 1, 1))
    text = "".join(
        job(n, gpus=0, arrival=a, pod_annotations='{gpufleet.io/gpu-fraction: "0.25"}',
            annotations=f'    sim.gpufleet.io/gpu-memory-used: "{m}"')
        for n, a, m in (("f1", "0s", "50Gi"), ("f2", "10s", "20Gi"), ("f3", "20s", "40Gi")))
    jobs = jobs_of(text.replace("nvidia.com/gpu: 0, ", ""))
    r = simulate_jobs(FifoPolicy(cluster), jobs)
    out = {j.key: j.attempts[-1].cause for j in r.jobs}
    assert out == {"team-a/f1": None, "team-a/f2": None, "team-a/f3": "OOMKilled"}


def test_preemption_stops_pods_and_requeues() -> None:
    cluster = cluster_of(pool("p", 1, 1))
    low = job("low", duration="2h")
    high = job("high", duration="1h", arrival="30m").replace(
        "restartPolicy: Never", "restartPolicy: Never\n      priority: 10")
    policy = FifoPolicy(cluster, preempt=True)
    r = simulate_jobs(policy, jobs_of(low + high))
    jl = next(j for j in r.jobs if j.key == "team-a/low")
    assert [(a.outcome, a.submitted, a.ended) for a in jl.attempts] == [
        ("preempted", 0.0, 1800.0), ("succeeded", 1800.0, 5400.0 + 7200.0)]
    assert ("evicted", "team-a/low", 1800.0) in policy.calls
    assert kpis(r)["preemptions"] == 1 and kpis(r)["failures"] == {}


def test_pods_ready_is_reported_when_every_pod_runs() -> None:
    cluster = cluster_of(pool("p", 1, 4))
    policy = FifoPolicy(cluster)
    simulate_jobs(policy, jobs_of(job("g", pods=4, arrival="5m")), SimConfig(pod_start_s=30))
    assert policy.ready == [("team-a/g", 330.0)]


def test_horizon_leaves_late_jobs_out_and_clips_the_window() -> None:
    cluster = cluster_of(pool("p", 1, 1))
    jobs = jobs_of(job("a", duration="3h") + job("late", arrival="5h"))
    r = simulate_jobs(FifoPolicy(cluster), jobs, SimConfig(horizon_s=7200))
    assert r.not_simulated == 1
    k = kpis(r)
    assert k["gpu_allocation_pct"] == 100.0 and k["gpu_hours"] == 2.0
    assert k["jobs_unfinished"] == 1


def test_determinism_same_input_same_records() -> None:
    def once() -> list[tuple[str, float | None]]:
        cluster = cluster_of(pool("p", 2, 4))
        text = "".join(job(f"j{i}", gpus=1 + i % 4, arrival=f"{i * 7}m", duration=f"{30 + i}m") for i in range(30))
        r = simulate_jobs(FifoPolicy(cluster, gang=False), jobs_of(text))
        return [(j.key, j.ended) for j in r.jobs]

    assert once() == once()


def test_a_policy_admitting_an_unknown_workload_is_an_error() -> None:
    from gpufleet.scheduling.types import AdmittedWorkload, Decisions

    class Rogue(FifoPolicy):
        def cycle(self, now: float) -> Decisions:
            return Decisions(admitted=[AdmittedWorkload("nobody/x", None)])

    cluster = cluster_of(pool("p", 1, 1))
    with pytest.raises(SimulationError, match="does not know"):
        simulate_jobs(Rogue(cluster), jobs_of(job("a")))


def test_samples_go_on_when_every_job_arrives_at_the_start() -> None:
    # 2 A100s, no horizon, both jobs arrive at 0: a holds one GPU for 1 h while b (2 GPUs) waits, so the idle GPU
    # is stranded for the first hour of two. The first sample comes before the first cycle places anything; the
    # samples once stopped there (nothing was live yet), and the run said 0% stranded from that one sample.
    cluster = cluster_of(pool("p", 1, 2))
    r = simulate_jobs(FifoPolicy(cluster), jobs_of(job("a", gpus=1, duration="1h") + job("b", gpus=2, duration="1h")))
    times = [s[0] for s in r.stranded]
    assert times[0] == 0.0 and times[-1] > 7000.0
    assert any(stranded == 1.0 for _, stranded, _, _ in r.stranded)
    assert kpis(r)["fragmentation_pct"] == 25.0
