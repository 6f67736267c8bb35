"""A LocalQueue pointed at a ClusterQueue with admission checks (no ClusterQueue changed), or away from one, must
hold what waits in it, or let it in, as a rebuild does (the kept workloads' holds were made under the old
LocalQueue: found by a review; now a full cycle)."""

from __future__ import annotations

import json
import time

import pytest
from live_env import NS, cluster_queue, node, pod
from test_carried_cycles import Cluster, first_cycle, outcome, runner
from test_carried_references import decided_as_rebuilt
from workload_env import admission_check

from gpufleet.k8s import resources as r


@pytest.mark.parametrize("checked", ["cq2", "cq"])
def test_a_local_queue_pointed_at_or_away_from_a_checked_queue_decides_as_rebuilt(checked: str) -> None:
    """``lq`` moves from ``cq`` to ``cq2``; the one named ``checked`` has an admission check no controller set Ready
    (``cq`` has no room when it is the unchecked one: ``w`` waits either way at first)."""
    c = Cluster()
    c.put(r.KUEUE_ADMISSION_CHECKS, admission_check("provisioning", "kueue.x-k8s.io/provisioning-request"))
    for name, event in (("cq", "MODIFIED"), ("cq2", "ADDED")):
        cq = cluster_queue(name, 8 if name == "cq2" or checked == "cq" else 0, cpu="100000")
        if name == checked:
            cq["spec"]["admissionChecks"] = ["provisioning"]
        c.put(r.CLUSTER_QUEUES, cq, event)
    c.put(r.NODES, node("n0", gpus=8))
    c.put(r.PODS, pod("w", gpus=1, queue="lq"))
    run = runner(c)
    now = time.time()
    assert f"{NS}/w" in outcome(first_cycle(run, now))[1]
    lq = json.loads(json.dumps(c.cache.get(r.LOCAL_QUEUES, f"{NS}/lq")))
    lq["spec"]["clusterQueue"] = "cq2"
    c.put(r.LOCAL_QUEUES, lq, "MODIFIED")
    decided_as_rebuilt(run, c, now + 1)
