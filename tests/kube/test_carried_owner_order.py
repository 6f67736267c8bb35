"""Two Jobs of one priority created in the same second queue as a rebuild queues them, whatever was read between
them. A workload object's input order (Workload.order, the queue's last tie-break before the key) used to be its
position in the live parse, which a queue object created since (a Namespace, a LocalQueue, a ClusterQueue, each
taken in place) shifted, while the kept world kept the old numbers (found by a review); live, every owner's order
is now 0, ties going to the key."""

from __future__ import annotations

import time

from live_env import NS, cluster_queue, node
from test_carried_cycles import JOBS, Cluster, _finish_cycle, carried_beside_rebuilt, runner
from workload_env import job, job_pods

from gpufleet.k8s import resources as r


def _job(c: Cluster, name: str) -> None:
    owner = job(name, pods=1, gpus=1, queue="lq")  # (created 2026-01-01T00:00:00Z, as every Job here)
    c.put(JOBS, owner)
    for p in job_pods(owner):
        c.put(r.PODS, p)


def test_two_jobs_created_in_one_second_queue_as_rebuilt_after_a_namespace_is_created() -> None:
    c = Cluster()
    c.put(r.CLUSTER_QUEUES, cluster_queue("cq", 0, cpu="100000"), "MODIFIED")
    c.put(r.NODES, node("n0", gpus=8))
    _job(c, "z")
    run = runner(c)
    now = time.time()
    snapshot = c.cache.snapshot()
    assert run._carry_on(snapshot, now) is None
    _finish_cycle(run, snapshot, None, now)
    c.put(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"}})
    _job(c, "a")
    snapshot = c.cache.snapshot()
    d = run._carry_on(snapshot, now + 1)
    assert d is not None
    _finish_cycle(run, snapshot, d, now + 1)
    c.put(r.CLUSTER_QUEUES, {**cluster_queue("cq", 1, cpu="100000"), "metadata": {"name": "cq", "uid": "uid--cq"}},
          "MODIFIED")  # room for one of them
    carried, rebuilt = carried_beside_rebuilt(run, c, now + 2)
    assert {a.workload for a in rebuilt.plan.admitted} == {f"{NS}/a"}
    assert {a.workload for a in carried.plan.admitted} == {a.workload for a in rebuilt.plan.admitted}
