"""Kueue's requeue state after PodsReadyTimeout evictions, kept by the live scheduler (gpufleet.live.requeues):
the backoff doubles from backoffBaseSeconds up to backoffMaxSeconds, past backoffLimitCount the workload is
deactivated, a workload whose owner was made again starts afresh; and against the emulator, a gang evicted for
not getting ready is not bound again before its backoff ends, nor at all once deactivated."""

from __future__ import annotations

import time
from collections.abc import Callable

from kube_apisim import ApiSim
from live_env import (
    NS,
    bound_node,
    cluster_queue,
    fast_settings,
    flavor,
    local_queue,
    node,
    pod,
    scheduled_condition,
    wait_until,
)

from gpufleet.api.objects import PodsReadyPolicy, SchedulerConfig
from gpufleet.k8s import resources as r
from gpufleet.live.gangs import WAS_READY_CONDITION
from gpufleet.live.requeues import FORGET_AFTER_S, RequeueMemory
from gpufleet.live.scheduler import Scheduler

POLICY = PodsReadyPolicy(enable=True, timeout_s=60, backoff_base_s=10, backoff_max_s=25, backoff_limit_count=3)


def test_the_backoff_doubles_up_to_its_maximum_then_the_workload_is_deactivated() -> None:
    m = RequeueMemory()
    delays = [(e := m.evicted("ns/w", POLICY, 100.0 * k)).requeue_at - e.evicted_at  # type: ignore[operator]
              for k in range(1, 4)]
    assert delays == [10, 20, 25]
    last = m.evicted("ns/w", POLICY, 400.0)
    assert last.count == 4 and last.deactivated and last.requeue_at is None


def test_a_workload_whose_owner_was_made_again_starts_afresh() -> None:
    m = RequeueMemory()
    m.evicted("ns/job", POLICY, 0.0, frozenset({"uid-1"}))
    assert m.evicted("ns/job", POLICY, 100.0, frozenset({"uid-1"})).count == 2
    assert m.evicted("ns/job", POLICY, 200.0, frozenset({"uid-2"})).count == 1  # the Job deleted and created again


def test_the_same_pods_evicted_again_are_the_same_eviction() -> None:
    # A full cycle that runs before an accepted eviction's deletions reach the cache finds the workload late again
    # and evicts the same pods: one requeue, not two (the backoff would double, the limit come early).
    m = RequeueMemory()
    first = m.evicted("ns/w", POLICY, 100.0, pods=frozenset({"p1", "p2"}))
    assert m.evicted("ns/w", POLICY, 101.0, pods=frozenset({"p1", "p2"})) == first
    # Half the deletions seen: the pod left is still of the eviction accepted (a loaded machine's CI once saw the
    # pair deactivated after its first timeout, counted twice)
    assert m.evicted("ns/w", POLICY, 101.5, pods=frozenset({"p2"})) == first
    assert m.evicted("ns/w", POLICY, 200.0, pods=frozenset({"p3", "p4"})).count == 2  # its pods made again
    # One stuck being deleted beside pods made since: the new ones' own timeout, one more requeue (a review)
    assert m.evicted("ns/w", POLICY, 300.0, pods=frozenset({"p4", "p5"})).count == 3


def test_an_entry_outlives_its_workloads_absence_for_a_while_then_goes() -> None:
    m = RequeueMemory()
    m.evicted("ns/w", POLICY, 0.0)
    m.forget_gone(set(), 10 + FORGET_AFTER_S - 1)  # its pods deleted by the eviction, not made again yet
    assert m.get("ns/w") is not None
    m.forget_gone({"ns/w"}, 10_000.0)  # present: kept however old
    assert m.get("ns/w") is not None
    m.forget_gone(set(), 10 + FORGET_AFTER_S + 1)
    assert m.get("ns/w") is None


def test_a_gang_evicted_for_not_getting_ready_backs_off_then_is_deactivated(
        apisim: ApiSim, live_scheduler: Callable[..., Scheduler]) -> None:
    apisim.create(r.NODES, node("n0", gpus=4))
    ready = PodsReadyPolicy(enable=True, timeout_s=1.5, backoff_base_s=3.0, backoff_max_s=3.0, backoff_limit_count=1)
    live_scheduler(settings=fast_settings(kueue=SchedulerConfig(pods_ready=ready), cycle_period=3600.0))

    def gang() -> None:  # what a controller does: the pair made (again), never Ready (an image that never pulls)
        for i in range(2):
            apisim.create(r.PODS, pod(f"g{i}", group="pair", group_size=2))

    def evicted() -> bool:
        return apisim.get(r.PODS, NS, "g0") is None and apisim.get(r.PODS, NS, "g1") is None

    gang()
    wait_until(lambda: bound_node(apisim, "g0") is not None, what="the pair bound")
    wait_until(evicted, what="the pair evicted for PodsReadyTimeout")
    seen_evicted = time.monotonic()  # after the evicting cycle's clock, from which the backoff runs
    gang()
    # Requeued once: not bound before its 3 s backoff has passed (without it, within a cycle), then bound again.
    wait_until(lambda: bound_node(apisim, "g0") is not None, timeout=30, what="the pair bound after its backoff")
    assert time.monotonic() - seen_evicted >= 2.5
    wait_until(evicted, what="the pair evicted a second time")
    gang()
    # Past backoffLimitCount 1: deactivated, its pods wait and say why.
    wait_until(lambda: "deactivated" in ((scheduled_condition(apisim.get(r.PODS, NS, "g0")) or {}).get("message")
                                         or ""), timeout=30, what="the pair deactivated")
    assert bound_node(apisim, "g0") is None


def test_a_trial_decision_changes_nothing_the_scheduler_remembers() -> None:
    # The search for an object that makes a cycle fail decides on cut-down snapshots: it must not forget a
    # deactivation because the workload's pods are not in the trial.
    from test_carried_cycles import build, runner

    c = build([2], [0], backlog=0)
    run = runner(c)
    run.requeues.evicted(f"{NS}/pair", POLICY, 0.0)  # long ago: absent from a snapshot, it would be forgotten
    assert not run._fails(c.cache.snapshot(), 10 * FORGET_AFTER_S)
    assert run.requeues.get(f"{NS}/pair") is not None


def test_a_workload_seen_ready_is_marked_on_its_pods_when_one_stops_being_ready(
        apisim: ApiSim, live_scheduler: Callable[..., Scheduler]) -> None:
    # What Kueue keeps on its Workload (PodsReady), kept on the pods for a scheduler that starts later (a new leader)
    # to read, written only when it matters: once a pod of a workload seen Ready is not Ready any more.
    apisim.create(r.NODES, node("n0", gpus=4))
    apisim.create(r.RESOURCE_FLAVORS, flavor())
    apisim.create(r.CLUSTER_QUEUES, cluster_queue("team", gpus=4))
    apisim.create(r.LOCAL_QUEUES, local_queue("team", "team"))
    ready = PodsReadyPolicy(enable=True, timeout_s=60.0, block_admission=True)
    live_scheduler(settings=fast_settings(kueue=SchedulerConfig(pods_ready=ready), cycle_period=3600.0))
    for i in range(2):
        apisim.create(r.PODS, pod(f"g{i}", group="pair", group_size=2, queue="team"))
    wait_until(lambda: all(bound_node(apisim, f"g{i}") is not None for i in range(2)), what="the pair bound")
    apisim.create(r.PODS, pod("next", queue="team"))  # held back (blockAdmission) until the pair is seen Ready
    for i in range(2):
        apisim.modify(r.PODS, NS, f"g{i}", {"status": {"phase": "Running",
                                                        "conditions": [{"type": "Ready", "status": "True"}]}})
    wait_until(lambda: bound_node(apisim, "next") is not None, what="the pair seen Ready")

    def marked(name: str) -> bool:
        conditions = ((apisim.get(r.PODS, NS, name) or {}).get("status") or {}).get("conditions") or []
        return any(c.get("type") == WAS_READY_CONDITION and c.get("status") == "True" for c in conditions)

    apisim.modify(r.PODS, NS, "g1", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    wait_until(lambda: marked("g0") and marked("g1"), what="the pair's pods marked as of a workload seen Ready")
    assert apisim.get(r.PODS, NS, "g1") is not None, "not evicted: its timeout no longer applies"
