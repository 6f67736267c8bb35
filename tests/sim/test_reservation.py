"""Gang reservation (annotation gpufleet.io/reserve-after on a ClusterQueue): a gang that waited past it holds its
quota, so the queue drains for it instead of starving it; only work that fits beside it is admitted meanwhile."""

from __future__ import annotations

from gpufleet.api.manifests import load_manifest_text
from gpufleet.sim.engine import simulate_jobs
from gpufleet.sim.policies import make_policy
from tests.sim.helpers import job, jobs_of, kueue_queues, load, pool


def _queues(reserve_after: str | None) -> str:
    annotations = f'gpufleet.io/reserve-after: "{reserve_after}"' if reserve_after else ""
    return kueue_queues(cq_annotations=annotations, strategy="BestEffortFIFO")


LABEL = "kueue.x-k8s.io/queue-name: q"


def _workload() -> str:
    """16 GPUs of quota and of nodes. An 8-GPU gang runs from 0 to 2 h; a 16-GPU gang arrives at 1 min; 8-GPU gangs
    keep arriving every hour from 30 min, each running 2 h, so the queue never drains on its own before 10 h."""
    text = job("first", pods=2, gpus=4, duration="2h", labels=LABEL)
    text += job("big", pods=4, gpus=4, duration="1h", arrival="1m", labels=LABEL)
    for i in range(8):
        text += job(f"s{i}", pods=2, gpus=4, duration="2h", arrival=f"{30 + 60 * i}m", labels=LABEL)
    return text


def _started(reserve_after: str | None, policy: str = "gpufleet") -> dict[str, float | None]:
    m = load(pool("p", 4, 4) + _queues(reserve_after))
    r = simulate_jobs(make_policy(policy, m), jobs_of(_workload()))
    return {j.key.split("/")[1]: j.attempts[-1].started for j in r.jobs}


def test_without_a_reservation_the_big_gang_starves_until_the_stream_ends() -> None:
    started = _started(None)
    assert started["big"] is not None and started["big"] >= 9 * 3600  # after the last small gang started
    assert started["s0"] == 30 * 60 and started["s1"] == 2 * 3600  # the small ones pass it whenever 8 GPUs are free


def test_with_a_reservation_the_queue_drains_for_it_and_the_others_wait_their_turn() -> None:
    started = _started("1h")
    # s0 runs beside "first" from 30 min. At 2 h "first" ends: "big", pending 1 h 59 min, heads the queue and
    # reserves its 16 GPUs, so s1 (arrived at 1 h 30 min) is not admitted in its place.
    assert started["s0"] == 30 * 60
    assert started["big"] == 2.5 * 3600  # when s0's 8 GPUs come back: nothing else was admitted meanwhile
    assert all(started[f"s{i}"] is not None and started[f"s{i}"] >= 3.5 * 3600 for i in range(1, 8))


def test_the_kueue_peer_ignores_the_reservation_as_kueue_does() -> None:
    # Kueue has no gang reservation and ignores annotations it does not know: the peer a Kueue user compares with
    # must starve the big gang exactly as it would without the annotation.
    assert _started("1h", "kueue") == _started(None, "kueue")
    assert _started("1h", "kueue") != _started("1h")


def test_work_that_fits_beside_the_reservation_is_admitted_meanwhile() -> None:
    # A CPU-only job of the same queue arrives while "big" reserves: it takes no GPU quota, so it runs at once.
    m = load(pool("p", 4, 4) + _queues("1h"))
    cpu_only = job("cpu", duration="1h", arrival="2h10m", labels=LABEL).replace(
        "limits: {nvidia.com/gpu: 1, cpu: \"1\", memory: 1Gi}", "limits: {cpu: \"2\", memory: 1Gi}")
    assert "nvidia.com/gpu" not in cpu_only
    r = simulate_jobs(make_policy("gpufleet", m), jobs_of(_workload() + cpu_only))
    started = {j.key.split("/")[1]: j.attempts[-1].started for j in r.jobs}
    assert started["cpu"] == 2 * 3600 + 600 and started["big"] == 2.5 * 3600


def test_a_bad_reservation_time_names_the_queue_and_the_annotation() -> None:
    m = load_manifest_text(_queues("soon"))
    (error,) = [e for e in m.problems.errors if "reserve-after" in str(e)]
    assert "ClusterQueue" in str(error) and "cq" in str(error) and "2h" in str(error)


def test_backfill_admits_only_what_the_queue_would_nominate() -> None:
    # The queue admits namespaces labelled team=a; a LocalQueue of team-b points at it anyway. Its CPU-only job,
    # parked for the namespace mismatch, must not be backfilled beside the reservation.
    text = _queues("1h").replace("namespaceSelector: {}", "namespaceSelector: {matchLabels: {team: a}}").replace(
        "metadata: {name: team-a}", "metadata: {name: team-a, labels: {team: a}}")
    text += ("apiVersion: v1\nkind: Namespace\nmetadata: {name: team-b}\n---\napiVersion: kueue.x-k8s.io/v1beta1\n"
             "kind: LocalQueue\nmetadata: {name: q, namespace: team-b}\nspec: {clusterQueue: cq}\n---\n")
    m = load(pool("p", 4, 4) + text)
    intruder = job("intruder", duration="1h", arrival="2h10m", labels=LABEL, namespace="team-b").replace(
        "limits: {nvidia.com/gpu: 1, cpu: \"1\", memory: 1Gi}", "limits: {cpu: \"2\", memory: 1Gi}")
    r = simulate_jobs(make_policy("gpufleet", m), jobs_of(_workload() + intruder))
    outcome = {j.key: (j.outcome, j.attempts[-1].started) for j in r.jobs}
    assert outcome["team-b/intruder"] == ("unfinished", None)
    assert outcome["team-a/big"] == ("succeeded", 2.5 * 3600)
