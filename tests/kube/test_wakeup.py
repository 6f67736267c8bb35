"""When the scheduling loop wakes: not for our own Bindings landing where they were assumed, nor for a queue's
status alone; for everything else in the cache and whenever poked."""

from __future__ import annotations

import copy

from live_env import cluster_queue, pod

from gpufleet.k8s import resources as r
from gpufleet.k8s.annotations import Intent
from gpufleet.k8s.informer import ObjectCache
from gpufleet.live.assumed import AssumedPods
from gpufleet.live.wakeup import Wakeup


def versioned(obj: dict[str, object], rv: int) -> dict[str, object]:
    out = copy.deepcopy(obj)
    meta = out["metadata"]
    assert isinstance(meta, dict)
    meta["resourceVersion"] = str(rv)
    meta.setdefault("uid", f"uid-{meta['name']}")
    return out


def test_own_bindings_landing_and_queue_status_alone_do_not_wake_the_loop_anything_else_does() -> None:
    cache, assumed = ObjectCache(), AssumedPods(30.0)
    wakeup = Wakeup(cache, assumed, clock=lambda: 1000.0)
    pending = versioned(pod("p"), 1)
    cache.apply(r.PODS, "ADDED", pending)
    assert wakeup.version == 1  # a new pod: work

    assumed.assume("ml/p", "uid-p", Intent("n0", ("GPU-0",), 1000.0), 1000.0)
    bound = versioned(pending, 2)
    bound["spec"]["nodeName"] = "n0"  # type: ignore[index]
    cache.apply(r.PODS, "MODIFIED", bound)
    assert (wakeup.version, wakeup.skipped) == (1, 1)  # our Binding landing where it was assumed

    other = versioned(pod("q"), 3)
    cache.apply(r.PODS, "ADDED", other)
    assumed.assume("ml/q", "uid-q", Intent("n0", ("GPU-1",), 1000.0), 1000.0)
    elsewhere = versioned(other, 4)
    elsewhere["spec"]["nodeName"] = "n1"  # type: ignore[index]
    cache.apply(r.PODS, "MODIFIED", elsewhere)  # bound, but not where we meant: work
    assert wakeup.version == 3

    cq = versioned(cluster_queue("gpus", gpus=8), 5)
    cache.apply(r.CLUSTER_QUEUES, "ADDED", cq)
    with_status = versioned(cq, 6)
    with_status["status"] = {"admittedWorkloads": 1}
    cache.apply(r.CLUSTER_QUEUES, "MODIFIED", with_status)
    assert wakeup.version == 4  # the ADDED woke it, the status write did not
    respec = versioned(with_status, 7)
    respec["spec"]["cohort"] = "all"  # type: ignore[index]
    cache.apply(r.CLUSTER_QUEUES, "MODIFIED", respec)
    assert wakeup.version == 5

    assert wakeup.wait(5, timeout=0.01) == 5  # nothing new: the wait times out
    wakeup.poke()
    assert wakeup.wait(5, timeout=10.0) == 6
    wakeup.close()
    cache.apply(r.PODS, "DELETED", elsewhere)
    assert wakeup.version == 6  # no longer listening


def test_a_waiting_pods_condition_does_not_wake_the_loop_its_phase_or_spec_does() -> None:
    cache, assumed = ObjectCache(), AssumedPods(30.0)
    wakeup = Wakeup(cache, assumed, clock=lambda: 1000.0)
    cache.apply(r.PODS, "ADDED", versioned(pod("p"), 1))
    assert wakeup.version == 1
    told = versioned(pod("p"), 2)
    told["status"] = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes"}]}
    cache.apply(r.PODS, "MODIFIED", told)  # our own PodScheduled=False on a pod that waits
    assert (wakeup.version, wakeup.skipped) == (1, 1)
    failed = versioned(told, 3)
    failed["status"] = {**told["status"], "phase": "Failed"}  # type: ignore[dict-item]
    cache.apply(r.PODS, "MODIFIED", failed)
    assert wakeup.version == 2  # its phase: work
    relabelled = versioned(failed, 4)
    relabelled["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "other"}  # type: ignore[index]
    cache.apply(r.PODS, "MODIFIED", relabelled)
    assert wakeup.version == 3  # its metadata: work
    running = versioned(pod("r", node_name="n0"), 5)
    cache.apply(r.PODS, "ADDED", running)
    ready = versioned(running, 6)
    ready["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    cache.apply(r.PODS, "MODIFIED", ready)
    assert wakeup.version == 5  # a bound pod's status (its readiness) still wakes the loop


def test_a_waiting_pods_status_naming_the_claim_made_for_it_wakes_the_loop() -> None:
    # What a pod with DRA claims from templates waits for: the resourceclaim controller naming, in the pod's status,
    # the claim it made. Skipped as a mere condition, the pod waited for an unrelated change or the resync (300 s)
    # whenever its claim reached the cache before its status did.
    cache, assumed = ObjectCache(), AssumedPods(30.0)
    wakeup = Wakeup(cache, assumed, clock=lambda: 1000.0)
    cache.apply(r.PODS, "ADDED", versioned(pod("p"), 1))
    named = versioned(pod("p"), 2)
    named["status"] = {"phase": "Pending", "resourceClaimStatuses": [{"name": "gpus",
                                                                     "resourceClaimName": "p-gpus-x7k2p"}]}
    cache.apply(r.PODS, "MODIFIED", named)
    assert (wakeup.version, wakeup.skipped) == (2, 0)
    told = versioned(named, 3)
    told["status"] = {**named["status"], "conditions": [  # type: ignore[dict-item]
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "waiting"}]}
    cache.apply(r.PODS, "MODIFIED", told)
    assert (wakeup.version, wakeup.skipped) == (2, 1)  # our condition beside it: nothing to do
