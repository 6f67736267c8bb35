"""A preemptor whose room on nodes was made in a later flavor searches from the first flavor again in the next
cycle, as a rebuild does (the kept policy drops the room: CycleRunner._keep): once an earlier flavor has room
(quota freed there, or a ClusterQueue created in the cohort that lends it), it is admitted there. A review found
the carried cycle resuming at the room's flavor, waiting for its victims."""

from __future__ import annotations

import json
import time
from typing import Any

from live_env import NS, fast_settings, node, pod, priority_class, stamp
from test_carried_cycles import Cluster, _finish_cycle, runner
from test_carried_evictions import _step
from test_carried_references import _land_assumed

from gpufleet.k8s import resources as r
from gpufleet.live.cycle import CycleRunner

JsonDict = dict[str, Any]
PREEMPTION = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}


def _flavor(name: str, pool: str) -> JsonDict:
    return {"apiVersion": "gpufleet.io/v1alpha1", "kind": "ResourceFlavor", "metadata": {"name": name},
            "spec": {"nodeLabels": {"pool": pool}}}


def _cq(name: str, fa: int, fb: int) -> JsonDict:
    """A ClusterQueue in cohort ``company`` with two flavors: ``fa`` (nodes of pool a) first, then ``fb``."""
    flavors = [{"name": f, "resources": [{"name": "cpu", "nominalQuota": "1000"},
                                         {"name": "memory", "nominalQuota": "10Ti"},
                                         {"name": "nvidia.com/gpu", "nominalQuota": n}]}
               for f, n in (("fa", fa), ("fb", fb))]
    return {"apiVersion": "gpufleet.io/v1alpha1", "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": {"namespaceSelector": {}, "cohort": "company", "preemption": PREEMPTION, "resourceGroups": [
                {"coveredResources": ["cpu", "memory", "nvidia.com/gpu"], "flavors": flavors}]}}


def _cluster(fa: int) -> Cluster:
    c = Cluster()
    c.put(r.RESOURCE_FLAVORS, _flavor("fa", "a"))
    c.put(r.RESOURCE_FLAVORS, _flavor("fb", "b"))
    c.put(r.CLUSTER_QUEUES, _cq("cq", fa, 4), "MODIFIED")
    c.put(r.PRIORITY_CLASSES, priority_class("low", 1))
    c.put(r.PRIORITY_CLASSES, priority_class("high", 100))
    c.put(r.NODES, node("na", gpus=8, labels={"pool": "a"}))
    c.put(r.NODES, node("nb", gpus=4, labels={"pool": "b"}))
    c.put(r.PODS, pod("low", gpus=4, queue="lq", priority_class="low", node_name="nb", created=stamp(100.0)))
    return c


def _preempted(run: CycleRunner, c: Cluster, now: float) -> None:
    """``hi`` arrives; the carried cycle preempts ``low`` (in fb, room held on nb), the eviction accepted and its
    pod being deleted."""
    c.put(r.PODS, pod("hi", gpus=4, queue="lq", priority_class="high", created=stamp(200.0)))
    d, carried = _step(run, now)
    assert carried and [v.workload for v in d.victims] == [f"{NS}/low"]
    assert run.kept is not None
    low = json.loads(json.dumps(c.cache.get(r.PODS, f"{NS}/low")))
    low["metadata"]["deletionTimestamp"] = "2026-01-03T00:00:00Z"
    c.put(r.PODS, low, "MODIFIED")


def _admitted_as_rebuilt(run: CycleRunner, c: Cluster, now: float) -> None:
    snapshot = c.cache.snapshot()
    carried = run._carry_on(snapshot, now)
    assert carried is not None
    fresh = runner(c, run.settings)
    fresh.assumed = run.assumed.copy()
    rebuilt = fresh._decide_isolating(snapshot, now)
    assert {a.workload for a in rebuilt.plan.admitted} == {f"{NS}/hi"}  # in fa, beside low leaving fb
    assert {a.workload for a in carried.plan.admitted} == {a.workload for a in rebuilt.plan.admitted}
    _finish_cycle(run, snapshot, carried, now)


def test_quota_freed_in_an_earlier_flavor_admits_the_preemptor_there_as_rebuilt() -> None:
    c = _cluster(fa=4)
    c.put(r.PODS, pod("other", gpus=4, queue="lq", priority_class="high", node_name="na", created=stamp(50.0)))
    run = runner(c, fast_settings(cycle_period=3600.0))
    now = time.time()
    snapshot = c.cache.snapshot()
    assert run._carry_on(snapshot, now) is None
    _finish_cycle(run, snapshot, None, now)
    _preempted(run, c, now + 1)  # fa is full of a workload hi cannot preempt (same priority): fb
    _land_assumed(run, c)
    other = json.loads(json.dumps(c.cache.get(r.PODS, f"{NS}/other")))
    other["status"] = {"phase": "Succeeded"}
    c.put(r.PODS, other, "MODIFIED")
    _admitted_as_rebuilt(run, c, now + 2)


def test_a_queue_created_in_the_cohort_admits_the_preemptor_in_the_flavor_it_lends_as_rebuilt() -> None:
    c = _cluster(fa=0)
    run = runner(c, fast_settings(cycle_period=3600.0))
    now = time.time()
    snapshot = c.cache.snapshot()
    assert run._carry_on(snapshot, now) is None
    _finish_cycle(run, snapshot, None, now)
    _preempted(run, c, now + 1)
    c.put(r.CLUSTER_QUEUES, _cq("cq3", 8, 0))  # fa for the cohort to lend: hi fits there now
    _admitted_as_rebuilt(run, c, now + 2)
