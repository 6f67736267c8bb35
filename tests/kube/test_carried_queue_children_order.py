"""A ClusterQueue created under a kept policy takes its place among its cohort's children as a rebuild lists them
(the configuration's order), not last: fair-sharing preemption breaks equal shares by that position, and a review
found the carried cycle picking another victim than the rebuild."""

from __future__ import annotations

import time

from live_env import NS, cluster_queue, fast_settings, local_queue, node, pod, stamp
from test_carried_cycles import Cluster, _finish_cycle, carried_beside_rebuilt, runner
from test_carried_references import _land_assumed

from gpufleet.api.objects import SchedulerConfig
from gpufleet.k8s import resources as r

PREEMPTION = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}


def test_a_queue_created_takes_its_place_among_its_cohorts_queues_as_rebuilt() -> None:
    c = Cluster()
    c.put(r.CLUSTER_QUEUES, cluster_queue("cq", 2, cpu="100000", cohort="company", preemption=PREEMPTION),
          "MODIFIED")
    c.put(r.CLUSTER_QUEUES, cluster_queue("cq2", 4, cpu="100000", cohort="company", preemption=PREEMPTION))
    c.put(r.LOCAL_QUEUES, local_queue("lq2", "cq2"))
    c.put(r.NODES, node("n0", gpus=8))
    c.put(r.NODES, node("n1", gpus=8))
    c.put(r.PODS, pod("x", gpus=4, queue="lq", node_name="n0", created=stamp(100.0)))  # cq borrows 2
    run = runner(c, fast_settings(cycle_period=3600.0, kueue=SchedulerConfig(fair_sharing=True)))
    now = time.time()
    snapshot = c.cache.snapshot()
    assert run._carry_on(snapshot, now) is None
    _finish_cycle(run, snapshot, None, now)
    # A team onboarded: "a0" sorts before "cq" in the configuration; its first workload borrows 2 as cq does.
    c.put(r.CLUSTER_QUEUES, cluster_queue("a0", 2, cpu="100000", cohort="company", preemption=PREEMPTION))
    c.put(r.LOCAL_QUEUES, local_queue("la0", "a0"))
    c.put(r.PODS, pod("y", gpus=4, queue="la0", created=stamp(150.0)))
    snapshot = c.cache.snapshot()
    d = run._carry_on(snapshot, now + 1)
    assert d is not None and {a.workload for a in d.plan.admitted} == {f"{NS}/y"}
    _finish_cycle(run, snapshot, d, now + 1)
    _land_assumed(run, c)
    c.put(r.PODS, pod("z", gpus=4, queue="lq2", created=stamp(300.0)))  # cq2 reclaims 4: x or y goes
    carried, rebuilt = carried_beside_rebuilt(run, c, now + 2)
    assert len(rebuilt.plan.preempted) == 1
    assert {p.workload for p in carried.plan.preempted} == {p.workload for p in rebuilt.plan.preempted}
