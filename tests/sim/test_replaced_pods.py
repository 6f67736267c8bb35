"""A failed pod replaced while its job runs on (``FailureModels.replace_pods``): the simulator drives the core's late
members (``KueuePolicy.leave`` / ``join``, scheduling/kueue/late_members.py) as the live scheduler does when a Job's
controller recreates a pod. The job keeps its admission: its other pods run on, the replacement joins it next to
them, waits without preempting anyone while there is no room, and the job fails for good past its backoff limit."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

from gpufleet.sim.engine import Simulator, simulate_jobs
from gpufleet.sim.jobs import JobLine, job_lines
from gpufleet.sim.model import FailureModels, PodProfile, SimConfig, SimJob
from gpufleet.sim.policies import make_policy
from gpufleet.sim.runner import parse_failures
from tests.sim.helpers import job, jobs_of, kueue_queues, load, pool
from tests.sim.test_memory_policy import _time_sliced

GI = 1024
QUEUE = "kueue.x-k8s.io/queue-name: q"
APART = '    sim.gpufleet.io/gang: "false"'  # the Job's pods work apart: one failing does not stop the others
REPLACING = SimConfig(failures=FailureModels(replace_pods=True))


def lines(policy: str, nodes: str, jobs: list[SimJob], config: SimConfig) -> dict[str, JobLine]:
    m = load(nodes + kueue_queues(("nvidia.com/gpu", "nvidia.com/gpu.shared")))
    return {x.job: x for x in job_lines(simulate_jobs(make_policy(policy, m), jobs, config))}


def shared_gpu_jobs() -> list[SimJob]:
    """On one time-sliced L40S (46 GiB): a 30 GiB pod for ten minutes, then a Job of two 12 GiB pods for an hour:
    its second pod runs out of memory until the first job is gone."""
    text = job("hog", resource="nvidia.com/gpu.shared", duration="10m", labels=QUEUE,
               annotations='    sim.gpufleet.io/gpu-memory-used: "30Gi"')
    text += job("work", resource="nvidia.com/gpu.shared", pods=2, arrival="1s", duration="1h", labels=QUEUE,
                backoff=10, annotations='    sim.gpufleet.io/gpu-memory-used: "12Gi"\n' + APART)
    return jobs_of(text)


def test_a_failed_pod_is_replaced_and_joins_its_job_while_the_other_runs_on() -> None:
    nodes = _time_sliced("ts", 64)
    replaced = lines("kueue", nodes, shared_gpu_jobs(), REPLACING)["team-a/work"]
    resubmitted = lines("kueue", nodes, shared_gpu_jobs(), SimConfig())["team-a/work"]
    # Replaced: one attempt, the job admitted throughout; its pod that failed came back five times, each joining it.
    assert (replaced.outcome, replaced.attempts, replaced.failures) == ("succeeded", 1, {"OOMKilled": 5})
    # Without replacement each failure ends the attempt, and both pods start over each time.
    assert (resubmitted.outcome, resubmitted.attempts, resubmitted.failures) == ("succeeded", 6, {"OOMKilled": 5})
    assert replaced.finished == resubmitted.finished  # the last replacement starts when the last attempt did
    assert replaced.gpus == resubmitted.gpus == 0.25  # two eighths of the GPU, however often one was replaced


def test_the_pod_that_stayed_runs_once_and_the_failed_ones_are_never_useful() -> None:
    m = load(_time_sliced("ts", 64) + kueue_queues(("nvidia.com/gpu.shared",)))
    result = simulate_jobs(make_policy("kueue", m), shared_gpu_jobs(), REPLACING)
    spans = [s for s in result.spans if s.job == "team-a/work"]
    by_pod: dict[str, list[tuple[float, float, str | None]]] = {}
    for s in spans:
        by_pod.setdefault(s.pod, []).append((s.held_from, s.held_to, s.failed))
    stayed, failing = sorted(by_pod.values(), key=len)
    assert stayed == [(1.0, 4211.0, None)]  # placed once at the start, held to the job's end
    assert [f for _, _, f in failing] == ["OOMKilled"] * 5 + [None] and all(s.attempt == 0 for s in spans)
    assert all(to <= nxt for (_, to, _), (nxt, _, _) in pairwise(failing))
    (line,) = [x for x in job_lines(result) if x.job == "team-a/work"]
    held_ok = sum((to - start) for start, to, f in stayed + failing if f is None)
    assert line.gpu_seconds_useful == held_ok / 8  # a replica of 8 is an eighth of the GPU; failed spans excluded


def test_a_replacement_waits_for_room_without_preempting_and_the_job_fails_past_its_backoff_limit() -> None:
    # Two whole GPUs. The Job's first pod needs more memory than a GPU has: it fails at its memory peak, and the
    # GPU it frees goes to the job that waited (the pod leaving wakes it). Its replacement then waits for room next
    # to its job, evicting nobody, joins when the other job ends, fails again, and the job is over: backoffLimit 1.
    text = job("work", pods=2, duration="2h", labels=QUEUE, backoff=1, annotations=APART)
    text += job("other", arrival="30s", duration="30m", labels=QUEUE)
    work, other = jobs_of(text)
    first = work.workload.pods[0].key
    work = replace(work, profiles={first: PodProfile(memory_mib=100 * GI)})
    nodes = pool("a", 1, 2)
    m = load(nodes + kueue_queues(("nvidia.com/gpu", "nvidia.com/gpu.shared")))
    sim = Simulator(make_policy("kueue", m), [work, other], REPLACING)
    result = sim.run()
    got = {x.job: x for x in job_lines(result)}
    assert (got["team-a/other"].outcome, got["team-a/other"].first_start) == ("succeeded", 60.0)
    assert got["team-a/other"].preemptions == 0 and got["team-a/work"].preemptions == 0
    assert (got["team-a/work"].outcome, got["team-a/work"].attempts) == ("failed", 1)
    assert got["team-a/work"].failures == {"OOMKilled": 2}
    spans = sorted((s.held_from, s.failed) for s in result.spans if s.pod == first)
    # Rejoined when "other" ended (30s + 30m); its second failure ended the attempt, and is the attempt's cause.
    assert spans == [(0.0, "OOMKilled"), (1860.0, None)]
    assert "created after it, waits for room next to its pods" in sim.last_pending_reason["team-a/work"]


def test_gangs_and_policies_without_late_members_still_end_the_attempt() -> None:
    gang = job("gang", resource="nvidia.com/gpu.shared", pods=2, arrival="1s", duration="1h", labels=QUEUE,
               backoff=10, annotations='    sim.gpufleet.io/gpu-memory-used: "12Gi"')
    hog = job("hog", resource="nvidia.com/gpu.shared", duration="10m", labels=QUEUE,
              annotations='    sim.gpufleet.io/gpu-memory-used: "30Gi"')
    nodes = _time_sliced("ts", 64)
    assert lines("kueue", nodes, jobs_of(hog + gang), REPLACING)["team-a/gang"].attempts > 1
    assert lines("kube-default", nodes, shared_gpu_jobs(), REPLACING)["team-a/work"].attempts > 1


def test_replace_pods_is_asked_for_by_name() -> None:
    assert not parse_failures(None).replace_pods and not parse_failures("rendezvous,oom,retries").replace_pods
    assert parse_failures("oom,retries,replace-pods").replace_pods
