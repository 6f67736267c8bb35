from __future__ import annotations

from gpufleet.scheduling.kubedefault import KubeDefaultPolicy
from gpufleet.sim.engine import simulate_jobs
from gpufleet.sim.metrics import kpis
from gpufleet.sim.model import FailureModels, SimConfig
from tests.sim.helpers import cluster_of, job, jobs_of, pool


def test_16_pod_gang_on_12_free_gpus_holds_them_30_minutes_then_fails() -> None:
    cluster = cluster_of(pool("p", 3, 4))
    policy = KubeDefaultPolicy.for_cluster(cluster, seed=1)
    r = simulate_jobs(policy, jobs_of(job("ddp", pods=16, duration="4h")))
    k = kpis(r)
    assert k["failures"] == {"RendezvousTimeout": 1}
    assert k["job_success_pct"] == 0.0
    assert k["gpu_hours"] == 6.0  # 12 GPUs idle for 30 minutes
    assert k["gpu_utilization_pct"] == 0.0
    assert r.jobs[0].ended == 1800.0
    assert cluster.gpu_allocated() == 0 and policy.pending_count() == 0


def test_retried_gang_fails_again_while_the_cluster_is_short() -> None:
    cluster = cluster_of(pool("p", 3, 4))
    policy = KubeDefaultPolicy.for_cluster(cluster)
    r = simulate_jobs(policy, jobs_of(job("ddp", pods=16, duration="4h", backoff=2)))
    j = r.jobs[0]
    # fails at 1800, back after 10 s, fails 1800 s later, back after 20 s, fails again: 3 failures.
    assert [a.ended for a in j.attempts] == [1800.0, 3610.0, 5430.0]
    assert j.outcome == "failed"


def test_pods_go_one_at_a_time_and_do_not_block_each_other() -> None:
    # 4 GPUs: a 4-GPU pod arrives after a 2-GPU one; a 1-GPU pod behind it still runs at once.
    cluster = cluster_of(pool("p", 1, 4))
    jobs = jobs_of(job("two", gpus=2) + job("four", gpus=4, arrival="1m") + job("one", gpus=1, arrival="2m"))
    r = simulate_jobs(KubeDefaultPolicy.for_cluster(cluster), jobs)
    started = {j.key: j.attempts[0].started for j in r.jobs}
    assert started == {"team-a/two": 0.0, "team-a/four": 3720.0, "team-a/one": 120.0}


def test_namespace_quota_keeps_pods_pending() -> None:
    cluster = cluster_of(pool("p", 1, 4))
    policy = KubeDefaultPolicy.for_cluster(cluster, quotas={"team-a": {"nvidia.com/gpu": 2}})
    r = simulate_jobs(policy, jobs_of(job("a", gpus=2) + job("b", gpus=1)))
    started = {j.key: j.attempts[0].started for j in r.jobs}
    assert started == {"team-a/a": 0.0, "team-a/b": 3600.0}


def test_gang_with_rendezvous_off_completes_when_capacity_comes() -> None:
    cluster = cluster_of(pool("p", 4, 4))
    jobs = jobs_of(job("small", gpus=4, duration="1h") + job("gang", pods=16, duration="2h", arrival="1m"))
    r = simulate_jobs(KubeDefaultPolicy.for_cluster(cluster), jobs,
                      SimConfig(failures=FailureModels(rendezvous=False)))
    gang = next(j for j in r.jobs if j.key == "team-a/gang")
    assert gang.outcome == "succeeded" and gang.attempts[0].started == 3600.0
