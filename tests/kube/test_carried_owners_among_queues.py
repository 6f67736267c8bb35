"""Owner changes (Jobs made whole or in part, annotated, reprioritised, resized, deleted; a Deployment restarted,
scaled, moved to another queue) among quota and LocalQueue changes, arrivals and finishes: each cycle held to the
scheduler's own full cycle on the same snapshot (test_carried_mixed_queue_changes._check). Written by a review
(2026-12-07), which found with it an owner's change carried, unseen, beside a queue change."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from live_env import NS, cluster_queue, fast_settings, local_queue, node, pod, stamp
from test_carried_cycles import JOBS, Cluster, runner
from test_carried_mixed_queue_changes import _copy, drive, finish_one
from test_carried_references import web_and_its_replica_set
from workload_env import DEPLOYMENTS, REPLICA_SETS, deployment_pods, job, job_pods

from gpufleet.k8s import resources as r

ACTION = st.one_of(
    st.tuples(st.just("job"), st.tuples(st.integers(1, 3), st.integers(1, 2), st.sampled_from(["lq", "lq2"]),
                                        st.booleans())),
    st.tuples(st.just("rest"), st.just(0)),
    st.tuples(st.just("note"), st.integers(0, 5)),
    st.tuples(st.just("prio"), st.integers(0, 5)),
    st.tuples(st.just("par"), st.tuples(st.integers(0, 5), st.integers(1, 3))),
    st.tuples(st.just("restart"), st.just(0)),
    st.tuples(st.just("scale"), st.integers(1, 4)),
    st.tuples(st.just("relabel"), st.just(0)),
    st.tuples(st.just("finish"), st.integers(0, 20)),
    st.tuples(st.just("jobdel"), st.integers(0, 5)),
    st.tuples(st.just("quota"), st.tuples(st.sampled_from(["cq", "cq2"]), st.sampled_from([0, 2, 4, 8]))),
    st.tuples(st.just("lq"), st.sampled_from(["cq", "cq2", "missing", None])),
    st.tuples(st.just("pod"), st.tuples(st.sampled_from(["lq", "lq2"]), st.integers(1, 3))),
)

SUFFIXES = ("a1b2c", "d3e4f", "g5h6i", "j7k8l")


def _world() -> tuple[Cluster, Any, float]:
    c = Cluster()
    c.put(r.CLUSTER_QUEUES, cluster_queue("cq", 6, cpu="100000", cohort="co"), "MODIFIED")
    c.put(r.CLUSTER_QUEUES, cluster_queue("cq2", 4, cpu="100000", cohort="co"))
    c.put(r.LOCAL_QUEUES, local_queue("lq2", "cq2"))
    c.put(r.KUEUE_WORKLOAD_PRIORITY_CLASSES, {"apiVersion": "kueue.x-k8s.io/v1beta1",
                                             "kind": "WorkloadPriorityClass", "metadata": {"name": "high"},
                                             "value": 1000})
    c.put(r.NODES, node("n0", gpus=8))
    c.put(r.NODES, node("n1", gpus=4))
    web_and_its_replica_set(c, gpus=1)
    return c, runner(c, fast_settings(cycle_period=3600.0)), time.time()


def _apply(c: Cluster, kind: str, arg: Any, st_: dict[str, Any], now: float) -> None:
    jobs = sorted(k for k in c.cache.keys(JOBS))
    if kind == "job":
        n, gpus, queue, partial = arg
        st_["made"] += 1
        owner = job(f"j{st_['made']}", pods=n, gpus=gpus, queue=queue)
        owner["metadata"]["creationTimestamp"] = stamp(now + st_["made"])
        c.put(JOBS, owner)
        pods = job_pods(owner)
        for p in pods:
            p["metadata"]["creationTimestamp"] = stamp(now + st_["made"])
        keep = pods[: len(pods) // 2] if partial and len(pods) > 1 else pods
        for p in keep:
            c.put(r.PODS, p)
        st_["rest"].extend(pods[len(keep):])
    elif kind == "rest":
        for p in st_["rest"]:
            if c.cache.get(JOBS, f"{NS}/{p['metadata']['labels']['batch.kubernetes.io/job-name']}") is not None:
                c.put(r.PODS, p)
        st_["rest"] = []
    elif kind in ("note", "prio", "par", "jobdel") and jobs:
        i = arg[0] if isinstance(arg, tuple) else arg
        key = jobs[i % len(jobs)]
        obj = _copy(c, JOBS, key)
        assert obj is not None
        if kind == "note":
            obj["metadata"]["annotations"] = {"team/ticket": str(st_["made"] + i)}
        elif kind == "prio":
            labels = obj["metadata"]["labels"]
            labels["kueue.x-k8s.io/priority-class"] = "" if labels.get("kueue.x-k8s.io/priority-class") else "high"
        elif kind == "par":
            obj["spec"]["parallelism"] = arg[1]
        if kind == "jobdel":
            c.put(JOBS, obj, "DELETED")
            for k in sorted(c.cache.keys(r.PODS)):
                o = c.cache.get(r.PODS, k)
                if o is not None and o["metadata"]["labels"].get("batch.kubernetes.io/job-name") == key.split("/")[1]:
                    c.put(r.PODS, json.loads(json.dumps(o)), "DELETED")
        else:
            c.put(JOBS, obj, "MODIFIED")
    elif kind == "restart":
        dep = _copy(c, DEPLOYMENTS, f"{NS}/web")
        assert dep is not None
        st_["made"] += 1
        dep["spec"]["template"]["metadata"].setdefault("annotations", {})["restartedAt"] = str(st_["made"])
        c.put(DEPLOYMENTS, dep, "MODIFIED")
    elif kind == "relabel":
        dep = _copy(c, DEPLOYMENTS, f"{NS}/web")
        assert dep is not None
        was = dep["metadata"]["labels"].get("kueue.x-k8s.io/queue-name")
        dep["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "lq2" if was == "lq" else "lq"
        c.put(DEPLOYMENTS, dep, "MODIFIED")
    elif kind == "scale":
        dep = _copy(c, DEPLOYMENTS, f"{NS}/web")
        rs = _copy(c, REPLICA_SETS, f"{NS}/web-5d8f7c9b6")
        assert dep is not None and rs is not None
        dep["spec"]["replicas"] = arg
        rs["spec"]["replicas"] = arg
        c.put(DEPLOYMENTS, dep, "MODIFIED")
        c.put(REPLICA_SETS, rs, "MODIFIED")
        dep["spec"]["replicas"] = 4
        for i, p in enumerate(deployment_pods(dep)):
            key = r.PODS.object_key(p)
            have = c.cache.get(r.PODS, key)
            if i < arg and have is None:
                p["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                                     "name": "web-5d8f7c9b6", "uid": "rs-web", "controller": True}]
                p["metadata"]["creationTimestamp"] = stamp(now + 100 + i)
                c.put(r.PODS, p)
            elif i >= arg and have is not None:
                c.put(r.PODS, json.loads(json.dumps(have)), "DELETED")
    elif kind == "finish":
        finish_one(c, arg)
    elif kind == "quota":
        name, gpus = arg
        c.put(r.CLUSTER_QUEUES, {**cluster_queue(name, gpus, cpu="100000", cohort="co"),
                                 "metadata": {"name": name, "uid": f"uid--{name}"}}, "MODIFIED")
    elif kind == "lq":
        old = _copy(c, r.LOCAL_QUEUES, f"{NS}/lq2")
        if arg is None:
            if old is not None:
                c.put(r.LOCAL_QUEUES, old, "DELETED")
        elif old is None:
            c.put(r.LOCAL_QUEUES, local_queue("lq2", arg))
        else:
            old["spec"]["clusterQueue"] = arg
            c.put(r.LOCAL_QUEUES, old, "MODIFIED")
    elif kind == "pod":
        queue, gpus = arg
        st_["made"] += 1
        c.put(r.PODS, pod(f"p{st_['made']}", gpus=gpus, queue=queue, created=stamp(now + st_["made"])))


EXAMPLES = int(os.environ.get("GPUFLEET_CARRIED_EXAMPLES", "40"))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions=st.lists(st.lists(ACTION, min_size=1, max_size=3), min_size=1, max_size=8))
# A head within its queue's nominal quota that finds nothing to preempt reserves the quota it asks (Kueue), which
# keeps a borrower of the cohort out; the harness's rebuild had been given the parked memory after the carried
# cycle had parked that head on the same snapshot, so it never evaluated it (CI, 2026-12-08).
@example(actions=[[("pod", ("lq2", 1)), ("job", (1, 2, "lq", False))],
                  [("quota", ("cq2", 0)), ("pod", ("lq2", 1)), ("job", (1, 2, "lq", False))]])
def test_owner_changes_among_queue_changes_decided_as_rebuilt(actions: list[list[tuple[str, Any]]]) -> None:
    c, run, now = _world()
    st_: dict[str, Any] = {"made": 0, "rest": []}
    drive(run, c, now, actions, lambda kind, arg: _apply(c, kind, arg, st_, now))
