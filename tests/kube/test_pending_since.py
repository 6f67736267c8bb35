"""The pod scheduling SLI: from the informer event that first showed a pod of ours waiting to its Binding sent and
accepted, each counted once per pod (gpufleet.live.pending_since), and the histogram the live scheduler fills."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable

from kube_apisim import ApiSim
from live_env import bound_node, node, pod, wait_until

from gpufleet.k8s import resources as r
from gpufleet.k8s.errors import ApiConnectionError
from gpufleet.k8s.informer import ObjectCache
from gpufleet.live.binder import Binder, BindJob, PodBind
from gpufleet.live.pending_since import PendingSince
from gpufleet.live.scheduler import Scheduler
from gpufleet.scheduler_metrics import SchedulerMetrics

SLI = "gpufleet_pod_scheduling_sli_duration_seconds"


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def versioned(obj: dict[str, object], rv: int, uid: str | None = None) -> dict[str, object]:
    out = copy.deepcopy(obj)
    meta = out["metadata"]
    assert isinstance(meta, dict)
    meta["resourceVersion"] = str(rv)
    meta["uid"] = uid or f"uid-{meta['name']}"
    return out


def test_each_figure_runs_from_the_first_event_that_showed_the_pod_waiting_and_is_taken_once() -> None:
    cache, clock = ObjectCache(), Clock(100.0)
    since = PendingSince(cache, "gpufleet", clock=clock)
    waiting = versioned(pod("p"), 1)
    cache.apply(r.PODS, "ADDED", waiting)
    clock.now = 100.5
    status = versioned(waiting, 2)
    status["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}
    cache.apply(r.PODS, "MODIFIED", status)  # a later event of the same pod does not restart its clock
    clock.now = 101.0
    assert since.sent("ml/p", "uid-p") == 1.0
    assert since.sent("ml/p", "uid-p") is None  # a Binding sent again is not counted again
    clock.now = 101.25
    landed = versioned(pod("p", node_name="n0"), 3)
    cache.apply(r.PODS, "MODIFIED", landed)  # our Binding's watch event, before its answer reached the binder
    assert since.bound("ml/p", "uid-p") == 1.25
    assert since.bound("ml/p", "uid-p") is None and len(since) == 0


def test_only_our_waiting_pods_are_timed_and_a_replaced_pod_starts_afresh() -> None:
    cache, clock = ObjectCache(), Clock(10.0)
    since = PendingSince(cache, "gpufleet", clock=clock)
    cache.apply(r.PODS, "ADDED", versioned(pod("theirs", scheduler="default-scheduler"), 1))
    cache.apply(r.PODS, "ADDED", versioned(pod("running", node_name="n0"), 2))
    cache.apply(r.PODS, "ADDED", versioned(pod("p"), 3))
    assert len(since) == 1
    assert since.sent("ml/theirs", "uid-theirs") is None and since.sent("ml/running", "uid-running") is None

    clock.now = 20.0
    cache.apply(r.PODS, "DELETED", versioned(pod("p"), 4))
    cache.apply(r.PODS, "ADDED", versioned(pod("p"), 5, uid="uid-p2"))  # same name, another pod
    clock.now = 20.5
    assert since.sent("ml/p", "uid-p") is None  # the first pod's Binding would not be the new one's
    assert since.sent("ml/p", "uid-p2") == 0.5

    assert since.bound("ml/p", "uid-p2") == 0.5 and len(since) == 0

    cache.apply(r.PODS, "ADDED", versioned(pod("r"), 6))
    cache.apply(r.PODS, "MODIFIED", versioned(pod("r", node_name="n0"), 7))  # bound by another, none of ours sent
    assert since.bound("ml/r", "uid-r") is None and len(since) == 0
    cache.apply(r.PODS, "ADDED", versioned(pod("s"), 8))
    assert since.sent("ml/s", "uid-s") == 0.0
    cache.apply(r.PODS, "DELETED", versioned(pod("s"), 9))  # its Binding's answer never came: no entry is kept
    assert len(since) == 0
    since.close()
    cache.apply(r.PODS, "ADDED", versioned(pod("q"), 7))
    assert len(since) == 0  # closed: no longer listening


def test_the_live_scheduler_observes_sent_and_bound_once_per_pod_it_binds(
    apisim: ApiSim, live_scheduler: Callable[..., Scheduler]
) -> None:
    apisim.create(r.NODES, node("big", gpus=4))
    apisim.create(r.PODS, pod("other", gpus=1, scheduler="default-scheduler", node_name="big"))
    apisim.create(r.PODS, pod("not-ours", gpus=1, scheduler="default-scheduler"))
    started = time.monotonic()
    sched = live_scheduler()
    apisim.create(r.PODS, pod("a", gpus=1))
    apisim.create(r.PODS, pod("b", gpus=2))
    wait_until(lambda: bound_node(apisim, "a") is not None and bound_node(apisim, "b") is not None,
               what="a and b bound")
    elapsed = time.monotonic() - started

    def sample(suffix: str, until: str) -> float | None:
        return sched.metrics.registry.get_sample_value(f"{SLI}{suffix}", {"until": until})

    wait_until(lambda: sample("_count", "bound") == 2, what="both Bindings observed")
    assert sample("_count", "binding_sent") == 2  # the pods of another scheduler are not counted
    sent, accepted = sample("_sum", "binding_sent"), sample("_sum", "bound")
    assert sent is not None and accepted is not None
    assert 0.0 <= sent <= accepted <= 2 * elapsed  # seconds, sending before its answer


class LostAnswerClient:
    """The Binding lands (the cache shows the pod bound) but its answer is lost; reading back finds it bound."""

    def __init__(self, cache: ObjectCache, bound: dict[str, object]) -> None:
        self.cache, self.bound_pod = cache, bound

    def bind(self, namespace: str, pod_name: str, node_name: str, **_: object) -> None:
        self.cache.apply(r.PODS, "MODIFIED", self.bound_pod)
        raise ApiConnectionError("connection reset")

    def get(self, resource: object, name: str, namespace: str | None = None) -> dict[str, object]:
        return self.bound_pod


def test_a_binding_found_bound_on_reading_back_ends_the_sli_and_leaves_no_entry() -> None:
    cache, clock = ObjectCache(), Clock(50.0)
    since = PendingSince(cache, "gpufleet", clock=clock)
    cache.apply(r.PODS, "ADDED", versioned(pod("p"), 1))
    client = LostAnswerClient(cache, versioned(pod("p", node_name="n0"), 2))
    metrics = SchedulerMetrics()
    recorder = type("R", (), {"scheduled": lambda self, raw, node: None})()
    b = Binder(client, recorder, metrics, may_write=lambda: True, retries=0, sleep=lambda _: None,  # type: ignore[arg-type]
               pending=since)
    clock.now = 50.5
    result = b.run(BindJob("ml/p", (PodBind("ml/p", "uid-p", "n0", (), None, {"metadata": {}}),)), 1000.0)
    assert result.bound == ["ml/p"]
    assert metrics.registry.get_sample_value(f"{SLI}_count", {"until": "bound"}) == 1.0
    assert metrics.registry.get_sample_value(f"{SLI}_sum", {"until": "bound"}) == 0.5
    assert len(since) == 0
