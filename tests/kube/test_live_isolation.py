"""One hostile object costs only itself: the live scheduler goes on for everything else (issue 19, item 1)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kube_apisim import ApiSim
from live_env import NS, bound_node, events, node, pod, scheduled_condition, wait_until

from gpufleet.k8s import resources as r
from gpufleet.live import world as world_module
from gpufleet.live.quarantine import find_culprit
from gpufleet.live.scheduler import Scheduler

DIGITS = "9" * 5000


def _rejected(sched: Scheduler, kind: str, reason: str) -> float:
    value = sched.metrics.registry.get_sample_value("gpufleet_rejected_objects", {"kind": kind, "reason": reason})
    return value or 0.0


def test_poisoned_pods_in_other_namespaces_leave_every_other_pod_untouched(
    apisim: ApiSim, live_scheduler: Callable[..., Scheduler]
) -> None:
    apisim.create(r.NODES, node("n1", gpus=4))
    # The two poisons: another team's pod (default-scheduler, not even bound) with a 5,000-digit
    # fraction, and a gpufleet pod whose pod-group count is a superscript two.
    apisim.create(r.PODS, pod("theirs", gpus=0, ns="other-team", scheduler="default-scheduler",
                              annotations={"gpufleet.io/gpu-fraction": DIGITS}))
    apisim.create(r.PODS, pod("odd", gpus=1, ns="other-team", annotations={
        "kueue.x-k8s.io/pod-group-total-count": "²"}, ))
    # A bound pod of another scheduler whose annotation would not parse still holds its GPU.
    apisim.create(r.PODS, pod("holder", gpus=1, ns="other-team", scheduler="default-scheduler", node_name="n1",
                              annotations={"gpufleet.io/gpu-memory": DIGITS}))
    for i in range(3):
        apisim.create(r.PODS, pod(f"train-{i}", gpus=1))
    # A fifth GPU on a 4-GPU node, asked last: it stays pending.
    apisim.create(r.PODS, pod("late", gpus=1, created="2026-01-02T00:00:00Z"))
    sched = live_scheduler()
    wait_until(lambda: all(bound_node(apisim, f"train-{i}") == "n1" for i in range(3)), what="train pods bound")

    def late_refused() -> bool:
        cond = scheduled_condition(apisim.get(r.PODS, NS, "late"))
        return cond is not None and cond.get("reason") == "Unschedulable"

    wait_until(late_refused, what="late pod marked Unschedulable: the foreign holder's GPU was charged")
    assert bound_node(apisim, "odd", ns="other-team") is None
    wait_until(lambda: (scheduled_condition(apisim.get(r.PODS, "other-team", "odd")) or {}).get("reason")
               == "Unschedulable", what="the invalid gpufleet pod told why")
    cond = scheduled_condition(apisim.get(r.PODS, "other-team", "odd"))
    assert cond is not None and "pod-group-total-count" in cond["message"]
    wait_until(lambda: _rejected(sched, "Pod", "Invalid") == 1, what="invalid pod counted")
    assert sched.failures == 0 and sched.healthz().ok
    assert sched.metrics.cycle_failures._value.get() == 0


def test_an_object_that_makes_the_core_fail_is_found_set_aside_and_told(
    apisim: ApiSim, live_scheduler: Callable[..., Scheduler], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A bug reached only through one pod: the core raises whenever it sees it. The scheduler must find that
    # pod by itself (it does not know which one it is), set it aside and schedule everything else.
    real_entry = world_module.pod_entry

    def buggy_entry(key: str, raw: dict[str, Any], *args: Any, **kwargs: Any) -> world_module.PodEntry:
        if key == f"{NS}/poison":
            raise ZeroDivisionError("a bug reached through this pod")
        return real_entry(key, raw, *args, **kwargs)

    monkeypatch.setattr(world_module, "pod_entry", buggy_entry)
    apisim.create(r.NODES, node("n1", gpus=4))
    for i in range(5):
        apisim.create(r.PODS, pod(f"p{i}", gpus=0))
    apisim.create(r.PODS, pod("poison", gpus=0))
    apisim.create(r.PODS, pod("train", gpus=2))
    sched = live_scheduler()
    wait_until(lambda: bound_node(apisim, "train") == "n1" and all(bound_node(apisim, f"p{i}") for i in range(5)),
               what="every other pod bound")
    assert bound_node(apisim, "poison") is None
    wait_until(lambda: _rejected(sched, "Pod", "CycleFailure") == 1, what="the culprit counted")
    wait_until(lambda: "set this Pod aside" in ((scheduled_condition(apisim.get(r.PODS, NS, "poison")) or {})
                                                 .get("message") or ""), what="the culprit told")
    assert any(e["regarding"]["name"] == "poison" for e in events(apisim, "FailedScheduling"))
    assert sched.healthz().ok  # one object is not the scheduler's health

    # Edited, it gets another chance (still poisoned here, so it is set aside again at its new version).
    obj = apisim.get(r.PODS, NS, "poison")
    assert obj is not None
    apisim.modify(r.PODS, NS, "poison", {"metadata": {"labels": {"edited": "yes"}}})
    before = sched.metrics.cycle_failures._value.get()
    wait_until(lambda: [h.version for h in sched.runner.quarantine.held] not in ([], [obj["metadata"].get(
        "resourceVersion")]), what="set aside again at its new version")
    assert sched.metrics.cycle_failures._value.get() == before  # isolated, not a failed cycle


def test_find_culprit_bisects_to_one_object_and_refuses_failures_no_object_explains() -> None:
    from gpufleet.k8s.informer import CacheSnapshot

    objects = {"pods": {f"ns/p{i}": {"metadata": {"name": f"p{i}"}} for i in range(100)},
               "nodes": {"n1": {}, "n2": {}}}
    snapshot = CacheSnapshot(1, objects)
    calls = []

    def fails_with(bad: set[str]) -> Callable[[CacheSnapshot], bool]:
        def fails(s: CacheSnapshot) -> bool:
            calls.append(1)
            return any(k in bad for items in s.objects.values() for k in items)
        return fails

    assert find_culprit(snapshot, fails_with({"ns/p37"})) == ("pods", "ns/p37")
    assert len(calls) <= 2 + 2 * 7  # about 2·log2(102) runs, not one per object
    found = find_culprit(snapshot, fails_with({"ns/p3", "n2"}))
    assert found in {("pods", "ns/p3"), ("nodes", "n2")}
    assert find_culprit(snapshot, lambda s: True) is None  # fails even empty: a bug, not an object
