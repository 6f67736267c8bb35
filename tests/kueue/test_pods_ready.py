"""waitForPodsReady (kueue.md §1.14): timeout eviction, requeue backoff, deactivation, blockAdmission, and
the per-ClusterQueue override."""

from __future__ import annotations

from gpufleet.scheduling.kueue.info import State
from gpufleet.scheduling.types import Decisions
from tests.kueue.scenario import Scenario, job, names
from tests.kueue.test_cohorts import FLAVOR, cq

CONFIG = """---
apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
waitForPodsReady:
  enable: true
  timeout: 60s
  blockAdmission: {block}
  requeuingStrategy: {{timestamp: Eviction, backoffBaseSeconds: 10, backoffMaxSeconds: 15, backoffLimitCount: 2}}
"""


def scenario(text: str = "", block: str = "false") -> Scenario:
    return Scenario(FLAVOR + CONFIG.format(block=block) + cq("team", 4, None) + (text or job("w", "team")))


def timeout_cycle(s: Scenario, t: float) -> Decisions:
    d = s.policy.cycle(t)
    for p in d.preempted:
        s.policy.evicted(p.workload, t, requeue=True, reason=p.reason)
    return d


def test_not_ready_in_time_is_evicted_and_requeued_with_exponential_backoff() -> None:
    s = scenario()
    t0 = s.now
    assert names(s.policy.cycle(t0).admitted) == ["w"]
    assert s.policy.next_wakeup(t0) == t0 + 60
    assert not timeout_cycle(s, t0 + 59).preempted
    d = timeout_cycle(s, t0 + 60)
    assert [(p.workload, p.preemptor, p.reason) for p in d.preempted] == [("default/w", "", "PodsReadyTimeout")]
    info = s.policy.info("default/w")
    assert info is not None and info.requeue_count == 1 and info.queue_ts == t0 + 60
    # First requeue after 10 s (base * 2^0), not before.
    assert s.policy.next_wakeup(t0 + 60) == t0 + 70
    assert not s.policy.cycle(t0 + 69).admitted
    assert names(s.policy.cycle(t0 + 70).admitted) == ["w"]
    # Second timeout: 20 s, capped at backoffMaxSeconds 15.
    timeout_cycle(s, t0 + 130)
    assert s.policy.next_wakeup(t0 + 130) == t0 + 145
    assert names(s.policy.cycle(t0 + 145).admitted) == ["w"]
    # Third timeout: requeued twice already (backoffLimitCount 2): deactivated.
    timeout_cycle(s, t0 + 205)
    assert info.state is State.DEACTIVATED
    assert s.pending()["w"].startswith("The workload is deactivated")
    assert not s.policy.cycle(t0 + 10_000).admitted and s.policy.next_wakeup(t0 + 10_000) is None


def test_pods_ready_in_time_stops_the_clock() -> None:
    s = scenario()
    t0 = s.now
    s.policy.cycle(t0)
    s.policy.pods_ready("default/w", t0 + 30)
    assert s.policy.next_wakeup(t0 + 30) is None
    assert not timeout_cycle(s, t0 + 1000).preempted and s.admitted() == {"w"}


def test_block_admission_waits_until_admitted_workloads_are_ready() -> None:
    s = scenario(job("first", "team", created=1) + job("second", "team", created=2), block="true")
    t0 = s.now
    assert names(s.policy.cycle(t0).admitted) == ["first"]
    assert not s.policy.cycle(t0 + 1).admitted
    assert s.pending()["second"] == "waiting for all admitted workloads to be in PodsReady condition"
    s.policy.pods_ready("default/first", t0 + 2)
    assert names(s.policy.cycle(t0 + 3).admitted) == ["second"]


def test_cluster_queue_override_disables_the_global_setting() -> None:
    text = FLAVOR + CONFIG.format(block="false") + cq("relaxed", 4, None, spec="\n  waitForPodsReady: {enable: false}")
    s = Scenario(text + job("w", "relaxed"))
    t0 = s.now
    s.policy.cycle(t0)
    assert s.policy.next_wakeup(t0) is None
    assert not timeout_cycle(s, t0 + 1000).preempted


def test_cluster_queue_override_enables_it_with_its_own_timeout() -> None:
    text = FLAVOR + cq("strict", 4, None, spec="\n  waitForPodsReady: {enable: true, timeout: 5s}")
    s = Scenario(text + job("w", "strict"))
    t0 = s.now
    s.policy.cycle(t0)
    assert s.policy.next_wakeup(t0) == t0 + 5
    assert [p.reason for p in timeout_cycle(s, t0 + 5).preempted] == ["PodsReadyTimeout"]
    info = s.policy.info("default/w")
    assert info is not None and info.requeue_at == t0 + 5 + 60  # Kueue's default backoff base


def test_a_rebuilt_policy_told_of_the_requeue_backs_off_as_the_one_that_evicted() -> None:
    # The live scheduler's full cycle builds its policy anew: told what Kueue keeps in status.requeueState
    # (KueuePolicy.requeued), it holds the workload back until the backoff ends, at the back of its queue.
    s = scenario(job("w", "team") + job("other", "team", created=5))
    t0 = s.now
    s.policy.requeued("default/w", 1, t0 + 10, t0, t0)
    info = s.policy.info("default/w")
    assert info is not None and info.requeue_count == 1 and info.queue_ts == t0  # Eviction: ordered by it
    assert names(s.policy.cycle(t0).admitted) == ["other"]
    assert s.policy.next_wakeup(t0) == t0 + 10
    assert not s.policy.cycle(t0 + 9).admitted
    assert names(s.policy.cycle(t0 + 10).admitted) == ["w"]


def test_a_rebuilt_policy_told_of_a_deactivation_keeps_the_workload_out() -> None:
    s = scenario()
    t0 = s.now
    s.policy.requeued("default/w", 3, None, t0, t0, deactivated=True)
    info = s.policy.info("default/w")
    assert info is not None and info.state is State.DEACTIVATED
    assert not s.policy.cycle(t0 + 10_000).admitted
    assert s.pending()["w"].startswith("The workload is deactivated")


def test_a_workload_without_a_queue_backs_off_too() -> None:
    # gpufleet admits workloads without a queue (no_quota); the live scheduler times them out under the
    # scheduler-wide waitForPodsReady, so their requeue backoff must hold as well.
    s = scenario(job("free", None))
    t0 = s.now
    s.policy.requeued("default/free", 1, t0 + 10, t0, t0)
    assert not s.policy.cycle(t0 + 5).admitted
    assert names(s.policy.cycle(t0 + 10).admitted) == ["free"]


def test_a_requeue_whose_backoff_is_over_leaves_a_parked_workload_parked() -> None:
    # A workload that does not fit is parked (BestEffortFIFO) and stays so until something is released; being told
    # of an old requeue must not put it back among the heads (every full cycle would evaluate it again).
    s = scenario(job("big", "team", cpu="8"))
    t0 = s.now
    assert not s.policy.cycle(t0).admitted
    queue = s.policy.state.queues.queues["team"]
    assert "default/big" in queue.parked
    s.policy.requeued("default/big", 1, t0 - 10, t0 - 20, t0)
    assert "default/big" in queue.parked and "default/big" not in queue.active
    info = s.policy.info("default/big")
    assert info is not None and info.requeue_count == 1


def test_deactivating_a_workload_that_waits_for_its_queue_lists_it_once() -> None:
    s = scenario(job("lost", "nosuch"))  # its LocalQueue does not exist: it waits, unqueued
    t0 = s.now
    s.policy.requeued("default/lost", 2, None, t0, t0, deactivated=True)
    assert "default/lost" not in s.policy.state.unqueued
    report = [p.workload for p in s.policy.pending_report()]
    assert report.count("default/lost") == 1


def test_a_rebuilt_policy_told_a_running_workload_is_not_ready_blocks_admission_without_a_deadline() -> None:
    # The live scheduler's rebuilt policy admits what holds nodes as ready; told from the pods that one is not
    # (KueuePolicy.pods_not_ready), blockAdmission holds the next workload back until pods_ready, and the core
    # sets no deadline when told none (the driver gives the one its pods' binds set, once they are all bound).
    s = scenario(job("first", "team", created=1) + job("second", "team", created=2), block="true")
    t0 = s.now
    assert names(s.policy.cycle(t0).admitted) == ["first"]
    s.policy.pods_ready("default/first", t0)
    s.policy.pods_not_ready("default/first")
    assert s.policy.next_wakeup(t0) is None
    assert not s.policy.cycle(t0 + 1).admitted
    assert s.pending()["second"] == "waiting for all admitted workloads to be in PodsReady condition"
    assert not s.policy.cycle(t0 + 10_000).preempted  # no deadline: never timed out by the core
    s.policy.pods_ready("default/first", t0 + 10_001)
    assert names(s.policy.cycle(t0 + 10_002).admitted) == ["second"]


def test_a_deadline_the_driver_reads_off_the_pods_is_the_cores_to_keep() -> None:
    # The live scheduler's rule, in the core (issue 27): told that a running workload's pods are not ready and when
    # they were bound (the deadline), the core wakes the driver then and its round evicts the workload; told in time
    # that they are ready, it evicts nothing. A workload without a queue times out alike, and blocks nothing.
    s = scenario(job("first", "team", created=1) + job("free", None, created=2))
    t0 = s.now
    assert sorted(names(s.policy.cycle(t0).admitted)) == ["first", "free"]
    for key in ("default/first", "default/free"):
        s.policy.pods_ready(key, t0)
    s.policy.pods_not_ready("default/first", deadline=t0 + 120)
    s.policy.pods_not_ready("default/free", deadline=t0 + 90)
    assert s.policy.next_wakeup(t0) == t0 + 90
    assert not s.policy.cycle(t0 + 89).preempted
    assert [(p.workload, p.preemptor, p.reason) for p in s.policy.cycle(t0 + 90).preempted] == [
        ("default/free", "", "PodsReadyTimeout")]
    s.policy.pods_ready("default/first", t0 + 100)
    assert not s.policy.cycle(t0 + 121).preempted and s.policy.next_wakeup(t0 + 121) is None


def test_a_workload_without_a_queue_times_out_under_the_scheduler_wide_setting_and_blocks_nothing() -> None:
    # One rule for the simulator and the live scheduler: gpufleet admits workloads without a queue, and the live
    # scheduler times them out under the scheduler-wide waitForPodsReady; the core does too. blockAdmission is about
    # Kueue's workloads: one without a queue holds no admission back.
    s = scenario(job("free", None, created=1) + job("queued", "team", created=2), block="true")
    t0 = s.now
    assert names(s.policy.cycle(t0).admitted) == ["free", "queued"]
    s.policy.pods_ready("default/queued", t0)
    s.add(job("next", "team", created=3))
    assert names(s.policy.cycle(t0 + 1).admitted) == ["next"]  # "free", not ready, does not block
    s.policy.pods_ready("default/next", t0 + 1)
    assert s.policy.next_wakeup(t0 + 1) == t0 + 60
    d = timeout_cycle(s, t0 + 60)
    assert [(p.workload, p.reason) for p in d.preempted] == [("default/free", "PodsReadyTimeout")]
    info = s.policy.info("default/free")
    assert info is not None and info.requeue_count == 1  # and it backs off as a queued one does
    assert s.policy.next_wakeup(t0 + 60) == t0 + 70  # its backoff's end wakes the driver
    assert not s.policy.cycle(t0 + 69).admitted
    assert names(s.policy.cycle(t0 + 70).admitted) == ["free"]
