"""A change to a workload-kind object of ours that decides (a Deployment moved to another queue) batched
with a queue-kind change (here a Namespace relabelled) must still take a full cycle, or be decided as a rebuild
decides it: the queue change's read put the changed object into the world before the workloads 'before' the
change were grouped, so before and after read the same and the change was carried, the workloads left in the old
queue (found by a review)."""

from __future__ import annotations

import json
import time

from live_env import NS, cluster_queue, local_queue
from test_carried_cycles import Cluster, first_cycle, outcome, runner
from test_carried_references import _deployment_with_its_replica_set, decided_as_rebuilt
from workload_env import DEPLOYMENTS

from gpufleet.k8s import resources as r


def test_a_deployment_moved_to_another_queue_beside_a_namespace_relabelled() -> None:
    c = Cluster()
    _deployment_with_its_replica_set(c)  # cq: 4 GPUs; two 4-GPU pods, one admitted
    c.put(r.CLUSTER_QUEUES, cluster_queue("cq2", 8, cpu="100000"))
    c.put(r.LOCAL_QUEUES, local_queue("lq2", "cq2"))
    run = runner(c)
    now = time.time()
    assert len(outcome(first_cycle(run, now))[0]) == 1
    dep = json.loads(json.dumps(c.cache.get(DEPLOYMENTS, f"{NS}/web")))
    dep["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "lq2"
    c.put(DEPLOYMENTS, dep, "MODIFIED")
    ns = json.loads(json.dumps(c.cache.get(r.NAMESPACES, NS)))
    ns["metadata"]["labels"] = {"team": "ml"}
    c.put(r.NAMESPACES, ns, "MODIFIED")
    carried = decided_as_rebuilt(run, c, now + 1)
    assert not carried, "the Deployment's pods are charged to another queue: a full cycle"
