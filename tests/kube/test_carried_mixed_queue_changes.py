"""Queue changes of every kind carried on among pods arriving, finishing and preempting, on two flavors and pools
with a Cohort object, fair sharing on or off: each cycle is held to what the scheduler's own full cycle decides
on the same snapshot (a rebuild with the parse cache and the parked memory the scheduler keeps). Written by a
review (2026-12-07), which found with it the defects the files test_carried_local_queue_checks.py,
test_carried_room_resume.py and test_carried_queue_children_order.py hold. ``GPUFLEET_CARRIED_EXAMPLES`` sets the
number of examples."""

from __future__ import annotations

import copy
import json
import os
import time
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live_env import NS, fast_settings, local_queue, node, pod, priority_class, stamp
from test_carried_cycles import Cluster, _nonzero, runner
from test_carried_evictions import kept_as_run
from test_carried_references import _land_assumed

from gpufleet.api.objects import SchedulerConfig
from gpufleet.k8s import resources as r
from gpufleet.live.cycle import CycleRunner
from gpufleet.live.queuestatus import QueueCounts

JsonDict = dict[str, Any]
FLAVORS = ("fa", "fb")


def _flavor(name: str, pool: str) -> JsonDict:
    return {"apiVersion": "gpufleet.io/v1alpha1", "kind": "ResourceFlavor", "metadata": {"name": name},
            "spec": {"nodeLabels": {"pool": pool}}}


def _cq(name: str, quotas: dict[str, int], cohort: str | None = "company") -> JsonDict:
    flavors = [{"name": f, "resources": [{"name": "cpu", "nominalQuota": "1000"},
                                         {"name": "memory", "nominalQuota": "10Ti"},
                                         {"name": "nvidia.com/gpu", "nominalQuota": quotas.get(f, 0)}]}
               for f in FLAVORS]
    spec: JsonDict = {"namespaceSelector": {}, "resourceGroups": [{
        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"], "flavors": flavors}],
        "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}}
    if cohort:
        spec["cohort"] = cohort
    return {"apiVersion": "gpufleet.io/v1alpha1", "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def _cohort(quotas: dict[str, int]) -> JsonDict:
    return {"apiVersion": "gpufleet.io/v1alpha1", "kind": "Cohort", "metadata": {"name": "company"},
            "spec": {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                {"name": f, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": quotas.get(f, 0)}]}
                for f in FLAVORS]}]}}


def _copy(c: Cluster, res: r.ResourceType, key: str) -> JsonDict | None:
    obj = c.cache.get(res, key)
    return None if obj is None else json.loads(json.dumps(obj))


PREEMPTIONS = [
    {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"},
    {"withinClusterQueue": "Never", "reclaimWithinCohort": "Never"},
    {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "LowerPriority",
     "borrowWithinCohort": {"policy": "LowerPriority"}},
    {"withinClusterQueue": "LowerOrNewerEqualPriority", "reclaimWithinCohort": "Never"},
]
FUNGIBILITY = [None, {"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "Preempt"},
               {"whenCanBorrow": "Borrow", "whenCanPreempt": "TryNextFlavor"},
               {"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "TryNextFlavor"}]

CQS = st.sampled_from(["cq", "cq2", "cq3"])
ACTION = st.one_of(
    st.tuples(st.just("pod"), st.tuples(st.sampled_from(["lq", "lq2", "lq3", "default", None]), st.integers(1, 4),
                                        st.sampled_from(["low", "high"]))),
    st.tuples(st.just("finish"), st.integers(0, 20)),
    st.tuples(st.just("gone"), st.just(0)),
    st.tuples(st.just("quota"), st.tuples(CQS, st.sampled_from(FLAVORS), st.sampled_from([0, 1, 2, 4, 8]),
                                          st.sampled_from([None, 0, 2]), st.sampled_from([None, 0, 2]))),
    st.tuples(st.just("cohort"), st.tuples(st.sampled_from(FLAVORS), st.sampled_from([0, 2, 4]))),
    st.tuples(st.just("cohort_weight"), st.sampled_from(["0.5", "1", "2"])),
    st.tuples(st.just("weight"), st.tuples(CQS, st.sampled_from(["0", "0.5", "1", "3"]))),
    st.tuples(st.just("preemption"), st.tuples(CQS, st.integers(0, len(PREEMPTIONS) - 1))),
    st.tuples(st.just("fungibility"), st.tuples(CQS, st.integers(0, len(FUNGIBILITY) - 1))),
    st.tuples(st.just("hold"), CQS),
    st.tuples(st.just("selector"), CQS),
    st.tuples(st.just("add"), st.sampled_from([None, "company", "other"])),
    st.tuples(st.just("nslabel"), st.sampled_from(["b", "x"])),
    st.tuples(st.just("podb"), st.tuples(st.integers(1, 4), st.sampled_from(["low", "high"]))),
    st.tuples(st.just("lqb"), st.sampled_from(["cq", "cq2", "cq3"])),
    st.tuples(st.just("lq"), st.tuples(st.sampled_from(["lq", "lq2", "lq3", "default"]),
                                       st.sampled_from(["cq", "cq2", "cq3", "missing", None]))),
)


def _check(run: CycleRunner, c: Cluster, now: float, log: list[str]) -> bool:
    snapshot = c.cache.snapshot()
    # The scheduler's memory as the last cycle left it (what a full cycle parks again: ParkedMemory), copied before
    # the carried cycle remembers what it decides on this very snapshot (a fresh runner given a later copy re-parked
    # a head the carried cycle had just parked, and never evaluated it).
    fresh = runner(c, run.settings)
    fresh.assumed = run.assumed.copy()
    fresh.requeues = run.requeues.copy()
    fresh.seen_ready = set(run.seen_ready)
    fresh.parked = copy.deepcopy(run.parked)
    carried = run._carry_on(snapshot, now)
    fresh.parse = run.parse  # (whose queue generation the parked memory is judged against)
    rebuilt = fresh._decide_isolating(snapshot, now)
    d = carried
    if d is None:
        run._last_full = run._statuses_at = now
        d = run._decide_isolating(snapshot, now)
    what = "carried" if carried is not None else "full"

    # (a gang whose pods arrive in part waits off the books for the rest in a carried cycle: World.unjoined)
    waiting = {k.rpartition("/")[0] for k in ()} | {w for w in set(rebuilt.plan.pending) if any(
        k in d.world.unjoined for k in rebuilt.world.pods_of.get(w, []))}

    def view(x: Any) -> Any:
        return ({a.workload for a in x.plan.admitted}, set(x.plan.pending) - waiting,
                {p.workload for p in x.plan.preempted})
    assert view(d) == view(rebuilt), (what, log)
    if carried is not None and not waiting:
        assert carried.counts is not None
        assert _nonzero(carried.counts) == _nonzero(QueueCounts(rebuilt.plan.policy)), (what, log)
        carried.world.cluster.check_invariants()
    kept_as_run(run, d, snapshot, now)
    for v in d.victims:  # the evictions accepted: their pods being deleted
        for raw in v.pods:
            key = r.PODS.object_key(raw)
            obj = _copy(c, r.PODS, key)
            if obj is not None and not obj["metadata"].get("deletionTimestamp"):
                obj["metadata"]["deletionTimestamp"] = "2026-01-03T00:00:00Z"
                c.put(r.PODS, obj, "MODIFIED")
    return carried is not None


def finish_one(c: Cluster, which: int, deleting: bool = True) -> None:
    """A running pod (the ``which``-th, modulo, in key order; ``deleting``: those being deleted too) succeeds."""
    running = [k for k in sorted(c.cache.keys(r.PODS))
               if (o := c.cache.get(r.PODS, k)) is not None and (o.get("status") or {}).get("phase") == "Running"
               and (deleting or not o["metadata"].get("deletionTimestamp"))]
    if running:
        obj = _copy(c, r.PODS, running[which % len(running)])
        assert obj is not None
        obj["status"] = {"phase": "Succeeded"}
        c.put(r.PODS, obj, "MODIFIED")


def _apply(c: Cluster, kind: str, arg: Any, made: list[int], now: float) -> None:
    if kind == "pod":
        queue, gpus, prio = arg
        if queue == "default":
            queue = None  # (a pod naming no queue: the namespace's default LocalQueue, if any)
        made[0] += 1
        c.put(r.PODS, pod(f"p{made[0]}", gpus=gpus, queue=queue, priority_class=prio,
                          created=stamp(now + made[0])))
    elif kind == "finish":
        finish_one(c, arg, deleting=False)
    elif kind == "podb":
        gpus, prio = arg
        made[0] += 1
        c.put(r.PODS, pod(f"b{made[0]}", gpus=gpus, queue="lqb", ns="team-b", priority_class=prio,
                          created=stamp(now + made[0])))
    elif kind == "nslabel":
        obj = _copy(c, r.NAMESPACES, "team-b")
        assert obj is not None
        obj["metadata"]["labels"] = {"team": arg}
        c.put(r.NAMESPACES, obj, "MODIFIED")
    elif kind == "lqb":
        obj = _copy(c, r.LOCAL_QUEUES, "team-b/lqb")
        assert obj is not None
        obj["spec"]["clusterQueue"] = arg
        c.put(r.LOCAL_QUEUES, obj, "MODIFIED")
    elif kind == "gone":
        for k in sorted(c.cache.keys(r.PODS)):
            o = c.cache.get(r.PODS, k)
            if o is not None and o["metadata"].get("deletionTimestamp"):
                c.put(r.PODS, json.loads(json.dumps(o)), "DELETED")
    elif kind in ("cohort", "cohort_weight"):
        obj = _copy(c, r.COHORTS, "company")
        assert obj is not None
        if kind == "cohort":
            f, n = arg
            for fl in obj["spec"]["resourceGroups"][0]["flavors"]:
                if fl["name"] == f:
                    fl["resources"][0]["nominalQuota"] = n
        else:
            obj["spec"]["fairSharing"] = {"weight": arg}
        c.put(r.COHORTS, obj, "MODIFIED")
    elif kind == "add":
        if c.cache.get(r.CLUSTER_QUEUES, "cq3") is None:
            c.put(r.CLUSTER_QUEUES, _cq("cq3", {"fa": 2, "fb": 2}, arg))
    elif kind == "lq":
        name, target = arg
        key = f"{NS}/{name}"
        old = _copy(c, r.LOCAL_QUEUES, key)
        if target is None:
            if old is not None:
                c.put(r.LOCAL_QUEUES, old, "DELETED")
        elif old is None:
            c.put(r.LOCAL_QUEUES, local_queue(name, target))
        else:
            old["spec"]["clusterQueue"] = target
            c.put(r.LOCAL_QUEUES, old, "MODIFIED")
    else:
        name = arg[0] if isinstance(arg, tuple) else arg
        cq = _copy(c, r.CLUSTER_QUEUES, name)
        if cq is None:
            return
        spec = cq["spec"]
        if kind == "quota":
            _, f, nominal, borrowing, lending = arg
            for fl in spec["resourceGroups"][0]["flavors"]:
                if fl["name"] != f:
                    continue
                for q in fl["resources"]:
                    if q["name"] == "nvidia.com/gpu":
                        q["nominalQuota"] = nominal
                        for field, v in (("borrowingLimit", borrowing), ("lendingLimit", lending)):
                            if v is None or not spec.get("cohort"):
                                q.pop(field, None)
                            else:
                                q[field] = v
        elif kind == "weight":
            spec["fairSharing"] = {"weight": arg[1]}
        elif kind == "preemption":
            spec["preemption"] = PREEMPTIONS[arg[1]]
        elif kind == "fungibility":
            f = FUNGIBILITY[arg[1]]
            if f is None:
                spec.pop("flavorFungibility", None)
            else:
                spec["flavorFungibility"] = f
        elif kind == "hold":
            spec["stopPolicy"] = "None" if spec.get("stopPolicy") == "Hold" else "Hold"
        elif kind == "selector":
            spec["namespaceSelector"] = {} if spec["namespaceSelector"] else {"matchLabels": {"team": "b"}}
        c.put(r.CLUSTER_QUEUES, cq, "MODIFIED")


def _world(fair: bool) -> tuple[Cluster, CycleRunner, float]:
    c = Cluster()
    c.put(r.RESOURCE_FLAVORS, _flavor("fa", "a"))
    c.put(r.RESOURCE_FLAVORS, _flavor("fb", "b"))
    c.put(r.CLUSTER_QUEUES, _cq("cq", {"fa": 4, "fb": 0}), "MODIFIED")
    c.put(r.CLUSTER_QUEUES, _cq("cq2", {"fa": 0, "fb": 2}))
    c.put(r.COHORTS, _cohort({"fa": 2, "fb": 2}))
    c.put(r.LOCAL_QUEUES, local_queue("lq2", "cq2"))
    c.put(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b",
                                                                             "labels": {"team": "b"}}})
    c.put(r.LOCAL_QUEUES, local_queue("lqb", "cq2", ns="team-b"))
    c.put(r.PRIORITY_CLASSES, priority_class("low", 1))
    c.put(r.PRIORITY_CLASSES, priority_class("high", 100))
    c.put(r.NODES, node("na", gpus=8, labels={"pool": "a"}))
    c.put(r.NODES, node("nb", gpus=4, labels={"pool": "b"}))
    run = runner(c, fast_settings(cycle_period=3600.0, kueue=SchedulerConfig(fair_sharing=fair)))
    return c, run, time.time()


EXAMPLES = int(os.environ.get("GPUFLEET_CARRIED_EXAMPLES", "40"))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fair=st.booleans(), actions=st.lists(st.lists(ACTION, min_size=1, max_size=3), min_size=1, max_size=8))
def test_queue_changes_among_pods_decided_as_rebuilt(fair: bool, actions: list[list[tuple[str, Any]]]) -> None:
    c, run, now = _world(fair)
    made = [0]
    drive(run, c, now, actions, lambda kind, arg: _apply(c, kind, arg, made, now))


def drive(run: CycleRunner, c: Cluster, now: float, actions: list[list[tuple[str, Any]]],
          apply: Callable[[str, Any], None]) -> None:
    """A first cycle, then each batch of ``actions`` applied (``apply``) and a cycle held to :func:`_check`, the
    Bindings landing after each."""
    log: list[str] = []
    _check(run, c, now, log)
    _land_assumed(run, c)
    for step_no, batch in enumerate(actions, 1):
        for kind, arg in batch:
            apply(kind, arg)
            log.append(f"{step_no}:{kind}:{arg}")
        carried = _check(run, c, now + step_no, log)
        log.append(f"-> {'carried' if carried else 'full'}")
        _land_assumed(run, c)

