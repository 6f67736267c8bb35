"""A preemption's evictions no longer cost a full cycle: once every eviction is accepted, the next cycles carry on
from the kept policy, where the victims hold their quota and nodes until their pods are gone and are never chosen
again, and they decide what a rebuild decides on the same snapshot (which reads the same off the pods being
deleted).

In process, as tests/kube/test_carried_cycles.py: an ObjectCache filled by hand, runners that never write; the
evictions' answers are given to the runner as its cycle would have received them."""

from __future__ import annotations

import json
import time
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live_env import NS, cluster_queue, node, pod, priority_class, stamp
from test_carried_cycles import Cluster, first_cycle, outcome, runner

from gpufleet.api.objects import POD_GROUP_LABEL
from gpufleet.k8s import resources as r
from gpufleet.live.cycle import CycleReport, CycleRunner, _Decided

JsonDict = dict[str, Any]
PREEMPTION = {"withinClusterQueue": "LowerPriority"}


def _cluster() -> Cluster:
    """A queue of 2 GPUs, both held by low-priority pods on a 4-GPU node."""
    c = Cluster()
    c.put(r.CLUSTER_QUEUES, cluster_queue("cq", 2, cpu="100000", preemption=PREEMPTION), "MODIFIED")
    c.put(r.PRIORITY_CLASSES, priority_class("low", 1))
    c.put(r.PRIORITY_CLASSES, priority_class("high", 100))
    c.put(r.NODES, node("n0", gpus=4))
    for i in range(2):
        c.put(r.PODS, pod(f"low{i}", queue="lq", priority_class="low", node_name="n0", created=stamp(100.0 + i)))
    return c


def _step(run: CycleRunner, now: float, *, evicted: bool = True, refused: bool = False) -> tuple[_Decided, bool]:
    """One cycle as run() decides and keeps it, its evictions answered as ``evicted``/``refused`` say."""
    snapshot = run.cache.snapshot()
    d = run._carry_on(snapshot, now)
    carried = d is not None
    if d is None:
        run._last_full = run._statuses_at = now
        d = run._decide_isolating(snapshot, now)
    run._assume(d.world, d.jobs, now)
    run._after_hand_off(d)
    report = CycleReport(run.count, now)
    if evicted:
        report.evicted = [v.workload for v in d.victims]
    if refused:
        report.refused = [v.workload for v in d.victims]
    run._keep(d, snapshot, d.victims, report)
    return d, carried


def _rebuilt(c: Cluster, run: CycleRunner, now: float) -> _Decided:
    fresh = runner(c)
    fresh.assumed = run.assumed.copy()
    return fresh._decide_isolating(c.cache.snapshot(), now)


def _deleting(c: Cluster, key: str) -> None:
    obj = json.loads(json.dumps(c.cache.get(r.PODS, key)))
    obj["metadata"]["deletionTimestamp"] = "2026-01-03T00:00:00Z"
    c.put(r.PODS, obj, "MODIFIED")


def test_a_preemption_accepted_is_carried_on_until_its_preemptor_runs() -> None:
    c = _cluster()
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    c.put(r.PODS, pod("hi", queue="lq", priority_class="high", created=stamp(now)))
    d, carried = _step(run, now + 1)
    [victim] = [v.workload for v in d.victims]
    assert carried and victim == f"{NS}/low1"  # (the one admitted last, as Kueue orders candidates)
    assert run.kept is not None, "every eviction accepted: the next cycle carries on"
    # The victim's pod is being deleted: it holds its quota, and is not evicted again.
    _deleting(c, victim)
    c.put(r.PODS, pod("late", queue="lq", priority_class="low", created=stamp(now + 2)))
    rebuilt = _rebuilt(c, run, now + 3)  # (on the same snapshot, before the cycle's admissions are assumed)
    d, carried = _step(run, now + 3)
    assert carried and not d.plan.preempted and not d.victims
    assert outcome(d)[0] == set() and f"{NS}/hi" in outcome(d)[1]
    assert rebuilt.world.pods[victim].deleting
    assert not rebuilt.plan.preempted, "a rebuild reads the victim on its way out off its pod being deleted"
    assert outcome(rebuilt) == outcome(d)
    # Its pod gone: the preemptor takes its place, in the cycle that carries on as in a rebuild.
    c.put(r.PODS, c.cache.get(r.PODS, victim), "DELETED")
    rebuilt = _rebuilt(c, run, now + 4)
    d, carried = _step(run, now + 4)
    assert carried and outcome(d)[0] == {f"{NS}/hi"}
    assert outcome(rebuilt) == outcome(d)
    d.world.cluster.check_invariants()


def test_a_refused_eviction_or_one_without_an_answer_takes_a_full_cycle() -> None:
    for answer in ({"refused": True, "evicted": False}, {"evicted": False}):
        c = _cluster()
        run = runner(c)
        now = time.time()
        first_cycle(run, now)
        c.put(r.PODS, pod("hi", queue="lq", priority_class="high", created=stamp(now)))
        d, _ = _step(run, now + 1, **answer)
        assert d.victims and run.kept is None, answer


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gpus=st.integers(2, 6), lows=st.integers(1, 6), grouped=st.booleans(),
       actions=st.lists(st.sampled_from(["high", "high2", "low", "gone", "gone1", "drop"]), min_size=1, max_size=8))
def test_cycles_carried_on_through_preemptions_decide_as_rebuilds(gpus: int, lows: int, grouped: bool,
                                                                  actions: list[str]) -> None:
    """Pods of high priority arrive and preempt running ones (``grouped``: pod groups of two); the API marks each
    victim's pod deleted at once (graceful deletion) and removes it later ("gone", or one of them: "gone1"); an
    owner deletes a running pod's workload ("drop": its pods being deleted); every cycle that carries on is held
    to a rebuild on the same snapshot: what is admitted, what waits, what is preempted."""
    c = Cluster()
    c.put(r.CLUSTER_QUEUES, cluster_queue("cq", gpus, cpu="100000", preemption=PREEMPTION), "MODIFIED")
    c.put(r.PRIORITY_CLASSES, priority_class("low", 1))
    c.put(r.PRIORITY_CLASSES, priority_class("high", 100))
    c.put(r.NODES, node("n0", gpus=gpus))
    for i in range(min(lows, gpus)):
        group = {"group": f"g{i // 2}", "group_size": 2} if grouped and i // 2 < min(lows, gpus) // 2 else {}
        c.put(r.PODS, pod(f"low{i}", queue="lq", priority_class="low", node_name="n0", created=stamp(100.0 + i),
                          **group))
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    leaving: list[str] = []  # victims' pods being deleted
    for k, action in enumerate(actions):
        at = now + 1 + k
        if action in ("high", "high2"):
            c.put(r.PODS, pod(f"hi{k}", gpus=1 if action == "high" else 2, queue="lq", priority_class="high",
                              created=stamp(at)))
        elif action == "low":
            c.put(r.PODS, pod(f"new{k}", queue="lq", priority_class="low", created=stamp(at)))
        elif action == "drop":
            running = sorted(key for key, o in c.cache.snapshot().of(r.PODS).items() if key.startswith(f"{NS}/low")
                             and (o.get("spec") or {}).get("nodeName") and key not in leaving)
            group = (c.cache.get(r.PODS, running[0])["metadata"]["labels"].get(POD_GROUP_LABEL) if running else None)
            for key in running:
                if key == running[0] or (group and c.cache.get(r.PODS, key)["metadata"]["labels"].get(
                        POD_GROUP_LABEL) == group):
                    _deleting(c, key)
                    leaving.append(key)
        else:
            for key in leaving if action == "gone" else leaving[:1]:
                c.put(r.PODS, c.cache.get(r.PODS, key), "DELETED")
            leaving = [] if action == "gone" else leaving[1:]
        rebuilt = _rebuilt(c, run, at)
        d, carried = _step(run, at)
        if carried:
            # (what waits is compared, not why: a workload the round did not reach keeps, in the kept policy, the
            # message of its last evaluation, as Kueue's Workload keeps its condition; a fresh policy has none)
            assert outcome(d)[0] == outcome(rebuilt)[0] and set(outcome(d)[1]) == set(outcome(rebuilt)[1])
            assert {p.workload for p in d.plan.preempted} == {p.workload for p in rebuilt.plan.preempted}
        d.world.cluster.check_invariants()
        for v in d.victims:
            for raw in v.pods:
                key = r.PODS.object_key(raw)
                if c.cache.get(r.PODS, key) is not None and key not in leaving:
                    _deleting(c, key)  # the Eviction API accepted it: the pod is being deleted
                    leaving.append(key)
