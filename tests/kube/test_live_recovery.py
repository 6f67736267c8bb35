"""The live scheduler when the API misbehaves: dropped watches, 410 Gone, failing Bindings, partial gangs."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import kmock
import pytest
from kube_apisim import ApiSim, failure, status
from live_env import (
    NS,
    PODS_RES,
    annotation_patches,
    bindings,
    bound_node,
    events,
    fast_settings,
    node,
    pod,
    stamp,
    wait_until,
)

from gpufleet.k8s import resources as r
from gpufleet.live.scheduler import Scheduler
from gpufleet.live.settings import BindingSettings


def _bind_requests(apisim: ApiSim, name: str) -> Any:
    return apisim.kmock["post", PODS_RES, lambda req: req.subresource == "binding" and req.name == name]


def test_dropped_watch_and_410_are_recovered_without_missing_or_repeating_work(
    apisim: ApiSim, live_scheduler: Callable[..., Scheduler]
) -> None:
    apisim.create(r.NODES, node("n0", gpus=8))
    apisim.create(r.PODS, pod("before"))
    sched = live_scheduler()
    wait_until(lambda: bound_node(apisim, "before") == "n0")
    wait_until(lambda: apisim.open_watches(r.PODS) == 1)

    def drop_and_create(sim: ApiSim) -> None:
        # The stream breaks and a pod arrives while the informer is away: only the relist can bring it.
        sim._drop(r.PODS)
        sim._create(r.PODS, pod("during-drop"), None)

    apisim.atomically(drop_and_create)
    wait_until(lambda: bound_node(apisim, "during-drop") == "n0", what="pod created during the drop bound")

    wait_until(lambda: apisim.open_watches(r.PODS) == 1)

    def expire(sim: ApiSim) -> None:
        sim._signal(r.PODS, "end", None)
        sim._create(r.PODS, pod("during-gone"), None)
        sim._compact(r.PODS)  # resuming from the old resourceVersion now answers 410 Gone

    apisim.atomically(expire)
    wait_until(lambda: bound_node(apisim, "during-gone") == "n0", what="pod created before the 410 bound")
    apisim.create(r.PODS, pod("after"))
    wait_until(lambda: bound_node(apisim, "after") == "n0")

    informer = sched.informers[r.PODS]
    assert informer.stats.relists_error >= 1 and informer.stats.relists_gone >= 1
    # Each pod bound exactly once: nothing missed, nothing repeated.
    for name in ("before", "during-drop", "during-gone", "after"):
        assert len(bindings(apisim, name)) == 1, name
    assert len(bindings(apisim)) == 4
    devices = [json.loads(apisim.get(r.PODS, NS, n)["metadata"]["annotations"]["gpufleet.io/devices"])[0]
               for n in ("before", "during-drop", "during-gone", "after")]
    assert len(set(devices)) == 4


def test_a_500_on_binding_is_retried_and_a_409_for_the_same_node_counts_as_done(
    apisim: ApiSim, live_scheduler: Callable[..., Scheduler]
) -> None:
    apisim.create(r.NODES, node("n0", gpus=2))
    flaky = _bind_requests(apisim, "flaky")
    apisim.harness.call(lambda: flaky[:1] << 500 << status(500, "InternalError", "etcd timeout"))

    def lost_answer(request: kmock.Request) -> Any:
        # The Binding lands, but its answer is lost: the retry then meets "already assigned".
        apisim._bind(r.PODS, request.namespace, request.name or "", request.data)
        raise failure(500, "InternalError", "connection to etcd lost after commit")

    lost = _bind_requests(apisim, "lost")
    apisim.harness.call(lambda: lost[:1] << lost_answer)
    apisim.create(r.PODS, pod("flaky"))
    apisim.create(r.PODS, pod("lost"))
    sched = live_scheduler()
    wait_until(lambda: bound_node(apisim, "flaky") == "n0" and bound_node(apisim, "lost") == "n0")
    wait_until(lambda: len(events(apisim, "Scheduled")) == 2, what="both Scheduled events")

    assert len(bindings(apisim, "flaky")) == 2  # the 500, then the retry that bound it
    assert len(bindings(apisim, "lost")) == 2  # the lost answer, then a 409 read back as done
    assert not any(c.bind_failed for c in sched.reports)
    assert not annotation_patches(apisim, "lost")  # the intent travels in the Binding: the retry sends the same
    first, retry = (b.data["metadata"]["annotations"] for b in bindings(apisim, "lost"))
    assert first == retry and first["gpufleet.io/node"] == "n0"
    text = sched.metrics.exposition().decode()
    assert 'gpufleet_bind_errors_total{code="500"} 2.0' in text
    assert 'gpufleet_bind_errors_total{code="409"} 1.0' in text
    assert sched.metrics.pods_scheduled._value.get() == 2


def test_a_gang_whose_binds_fail_is_completed_on_its_chosen_nodes_next_cycle(
    apisim: ApiSim, live_scheduler: Callable[..., Scheduler]
) -> None:
    for i in range(2):
        apisim.create(r.NODES, node(f"n{i}", gpus=2))
    names = [f"w{i}" for i in range(4)]
    stubborn = _bind_requests(apisim, "w2")
    # More failures than the binder retries within one cycle (retries=3 → 4 attempts).
    apisim.harness.call(lambda: stubborn[:5] << 503 << status(503, "ServiceUnavailable", "apiserver overloaded"))
    for name in names:
        apisim.create(r.PODS, pod(name, group="ring", group_size=4))
    sched = live_scheduler()
    wait_until(lambda: all(bound_node(apisim, n) for n in names), what="gang complete")
    wait_until(lambda: any(c.completed_gangs for c in sched.reports))

    partial = next(c for c in sched.reports if c.bind_failed)
    assert set(partial.bind_failed) == {f"{NS}/w2"} and len(partial.bound) == 3
    completing = next(c for c in sched.reports if c.completed_gangs)
    # Bindings end after their cycle (gpufleet.live.bindqueue): its report is filled in when they do.
    wait_until(lambda: bool(completing.bound), what="the completing cycle's Binding ended")
    assert completing.completed_gangs == [f"{NS}/ring"] and completing.bound == [f"{NS}/w2"]
    assert completing.number > partial.number
    obj = apisim.get(r.PODS, NS, "w2")
    assert obj is not None
    assert obj["spec"]["nodeName"] == obj["metadata"]["annotations"]["gpufleet.io/node"]  # where it was planned
    assert len(bindings(apisim, "w2")) == 6  # 4 failures in the first cycle, 1 more, then success
    for name in ("w0", "w1", "w3"):
        assert len(bindings(apisim, name)) == 1
    devices = {d for n in names for d in json.loads(apisim.get(r.PODS, NS, n)["metadata"]["annotations"]
                                                     ["gpufleet.io/devices"])}
    assert len(devices) == 4
    assert 'code="409"' not in sched.metrics.exposition().decode()  # nothing was ever bound twice


# An hour's cycle period: the repair timeout's own timer wakes the cycle that evicts (no resync runs meanwhile).
@pytest.mark.parametrize("cycle_period", [0.2, 3600.0])
def test_a_gang_that_cannot_be_completed_is_evicted_and_planned_again(
    apisim: ApiSim, live_scheduler: Callable[..., Scheduler], cycle_period: float
) -> None:
    for i in range(2):
        apisim.create(r.NODES, node(f"n{i}", gpus=2))
    # Two members were bound by an earlier scheduler; two were recreated just now and carry no intent.
    started = time.time()
    intent = {"gpufleet.io/node": "n0", "gpufleet.io/devices": json.dumps(["GPU-n0-0"]),
              "gpufleet.io/assigned-at": stamp(started - 60)}
    apisim.create(r.PODS, pod("w0", group="ring", group_size=4, node_name="n0", annotations=intent))
    apisim.create(r.PODS, pod("w1", group="ring", group_size=4, node_name="n0",
                              annotations={**intent, "gpufleet.io/devices": json.dumps(["GPU-n0-1"])}))
    apisim.create(r.PODS, pod("w2", group="ring", group_size=4, created=stamp(started)))
    apisim.create(r.PODS, pod("w3", group="ring", group_size=4, created=stamp(started)))
    settings = fast_settings(binding=BindingSettings(workers=4, retries=1, retry_backoff=0.01,
                                                     gang_repair_timeout=1.0, assume_timeout=10.0),
                             cycle_period=cycle_period)
    sched = live_scheduler(settings=settings)
    wait_until(lambda: apisim.get(r.PODS, NS, "w0") is None and apisim.get(r.PODS, NS, "w1") is None,
               what="partial gang evicted")
    assert time.time() - started >= 1.0  # the newest member got its grace period to join
    # Events are posted after the evictions, so the second may still be in flight when the pods are gone.
    wait_until(lambda: len(events(apisim, "Preempted")) >= 2, what="both Preempted events recorded")
    [event, _] = sorted(events(apisim, "Preempted"), key=lambda e: e["regarding"]["name"])
    assert event["regarding"]["name"] == "w0" and "GangIncomplete: 2 of 4 pods hold nodes" in event["note"]
    assert not bindings(apisim, "w2") and not bindings(apisim, "w3")
    wait_until(lambda: 'gpufleet_gang_timeouts_total{reason="GangIncomplete"} 1.0'
               in sched.metrics.exposition().decode())
    # The controller recreates the evicted members; the whole gang is then placed together.
    apisim.create(r.PODS, pod("w0", group="ring", group_size=4))
    apisim.create(r.PODS, pod("w1", group="ring", group_size=4))
    wait_until(lambda: all(bound_node(apisim, n) for n in ("w0", "w1", "w2", "w3")), what="gang re-planned")
