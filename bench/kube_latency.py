"""Live scheduling latency beside a backlog, and the scheduler's CPU while nothing changes (issue 27's scenario).

A platform team's everyday cluster: N nodes × 8 whole A100-80GB, 5 of each node's 8 GPUs held by bound pods (62 %),
B pending 16-GPU pods that fit on no node (the backlog of big jobs), then A new one-GPU pods created at R per
second. Options: ``--gang-size G``, each arrival a pod group of G one-GPU pods; ``--finish-rate F``, running pods
deleted at F per second meanwhile, as Jobs complete; with ``--running-gang-size H`` the bound pods are pod groups of
H on one node each, whose members finish (``Succeeded``) at F per second instead, as a training job's pods end;
``--pods-ready T``, waitForPodsReady on with a timeout of T seconds, every pod Ready as soon as it is bound (a
kubelet that starts it at once), but with ``--never-ready N`` every Nth new pod, which never gets Ready (an image
that never pulls) and is evicted T seconds after its Binding; ``--node-churn C``, a node cordoned C times a second
meanwhile (and the one cordoned before it uncordoned), as maintenance or an autoscaler's scale-down candidates do;
``--nodes-join J``, J new nodes a second meanwhile, as a cluster scaling up; ``--foreign-churn F``, another
scheduler's ReplicaSets (100 of them, web services of the default scheduler) scaled F times a second meanwhile,
every tenth change deleting one and creating its successor, as rollouts and autoscalers of a shared cluster do;
``--namespace-churn N``, N namespaces a second created meanwhile (a CI run's or a new team's), the one made before
it relabelled; ``--rollouts R``, 100 inference services of ours (a Deployment, its ReplicaSet and two bound one-GPU
pods each) rolled out R times a second meanwhile, as ``kubectl rollout restart`` and the Deployment's controller
change them (the restart annotation in the pod template, then the revision on the Deployment and its ReplicaSet; the
new ReplicaSet's pods are left out, so the GPUs held stay as they are); ``--quota-changes Q``, the ClusterQueue's
GPU quota changed Q times a second meanwhile (one GPU more, then back: an administrator or a quota controller);
``--nodes-lost L``, L nodes a second deleted under their pods meanwhile (a node lost, a spot instance reclaimed),
whose pods the pod garbage collector deletes ``--gc-after`` seconds later (40: kube-controller-manager's quarantine
of a node's orphaned pods); ``--preempt-rate P``, P pods of high priority a second meanwhile into a ClusterQueue
whose quota low-priority running pods fill (withinClusterQueue: LowerPriority), each preempting one of them (the
emulator deletes an evicted pod at once); with ``--victim-job-pods N`` those running are batch/v1 Jobs of N one-GPU
pods on one node and each high pod asks N GPUs: an evicted pod is marked deleted, the Job controller's replacement
is created at once (podReplacementPolicy TerminatingOrFailed, the default) and the old pod is gone ``--grace``
seconds later, as a kubelet ends it. The emulator of the tests (kmock + ApiSim over real HTTP on 127.0.0.1) and the
scheduler each run in a process of their own, as in ``bench/kube_binding.py``.

Each run reports:

* **idle CPU**: once the scheduler has looked at the whole backlog (a cycle reports B pending, and no cycle ran
  for 3 s since), the scheduler process's CPU over ``--idle`` seconds in which nothing changes, as a share of
  one core (with the old code, its periodic cycles);
* **create → Binding**: for each new pod, from the moment the emulator created it (its watch event leaves then)
  to the moment the emulator accepted its Binding: p50, p99, max, and how many were bound within ``--within``
  seconds of their creation;
* **event → Binding sent** (issue 27's goal): the scheduler's own ``gpufleet_pod_scheduling_sli_duration_seconds
  {until="binding_sent"}`` histogram, read from its registry at the end: the share within 100 ms (a bucket edge,
  exact) and the p99 interpolated within its bucket as Prometheus's ``histogram_quantile`` does (code without
  the metric, an older baseline, says so);
* the cycles run meanwhile (how many carried on from the last, the longest core phase), the scheduler's peak RSS;
* the emulator's checks on its final state (no pod bound twice, no node over its GPUs, no GPU handed twice).

``--baseline REF`` (default: the code before issue 27's timers, e36a5e0) runs the same scenario with the scheduler
of that git revision, alternating with the current code, and prints the ratios.

    .venv/bin/python bench/kube_latency.py [--nodes 200] [--backlog 500] [--arrivals 200] [--rate 5]
                                           [--gang-size 1] [--finish-rate 0] [--running-gang-size 1] [--pods-ready 0]
                                           [--never-ready 0]
                                           [--node-churn 0] [--nodes-join 0] [--foreign-churn 0]
                                           [--namespace-churn 0] [--rollouts 0] [--quota-changes 0]
                                           [--preempt-rate 0]
                                           [--victim-job-pods 0] [--grace 1] [--nodes-lost 0] [--gc-after 40]
                                           [--idle 20]
                                           [--within 120] [--repeat 1]
                                           [--baseline REF|none]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import dataclasses
import gc
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "kube"))
sys.path.append(str(ROOT / "bench"))

from kube_binding import _ask, _emit, _final_state  # noqa: E402  (sibling modules of this script)
from revision_src import revision_src  # noqa: E402

READY = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
BASELINE_REF = "e36a5e0"  # the live scheduler before its cycles ran on timers (issue 27)
DRA_DRIVER = "gpu.nvidia.com"

JsonDict = dict[str, Any]


# --- the emulator process ---------------------------------------------------------------------------------


def emulator_role(args: argparse.Namespace) -> int:
    import kmock
    from kmock._internal import parsing as kmock_parsing
    from kube_apisim import ApiSim, KmockThread, parse_path_with_namespaces
    from live_env import cluster_queue, flavor, local_queue, node, pod, priority_class
    from workload_env import job as job_object

    from gpufleet.k8s import resources as r

    class TimingSim(ApiSim):
        """ApiSim that notes when each new pod was created and when its Binding was accepted (loop thread)."""

        def __init__(self, harness: KmockThread) -> None:
            super().__init__(harness, record_requests=False)
            self.created: dict[str, float] = {}
            self.bound: dict[str, float] = {}
            self.accepted: dict[str, int] = {}
            self.replaced = 0
            self.high_created: dict[str, float] = {}  # the high-priority pods (--preempt-rate)

        def _bind(self, res: Any, ns: str | None, name: str, body: JsonDict) -> Any:
            out = super()._bind(res, ns, name, body)
            if args.pods_ready and not never_ready(name):  # the kubelet starts it at once: Running and Ready
                self._patched(res, ns, name, {"status": READY})
            key = f"{ns}/{name}"
            self.accepted[key] = self.accepted.get(key, 0) + 1
            self.bound.setdefault(key, time.monotonic())
            return out

        def _evict(self, res: Any, ns: str | None, name: str, body: JsonDict) -> Any:
            victim = self.objects[res.key].get((ns, name))
            job = ((victim or {}).get("metadata") or {}).get("labels", {}).get("batch.kubernetes.io/job-name")
            options = body.get("deleteOptions") or {}
            if not args.victim_job_pods or not job or "All" in (options.get("dryRun") or []):
                return super()._evict(res, ns, name, body)
            # Graceful: the pod is marked deleted, its Job's controller replaces it at once, the kubelet ends it later.
            super()._evict(res, ns, name, {**body, "deleteOptions": {**options, "dryRun": ["All"]}})
            uid = victim["metadata"]["uid"]  # type: ignore[index]
            self._patched(res, ns, name, {"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z",
                                                       "deletionGracePeriodSeconds": int(args.grace)}})
            self.replaced += 1
            self._create(res, job_pod(job, f"{job}-r{self.replaced}", None), None)

            def gone() -> None:
                current = self.objects[res.key].get((ns, name))
                if current is not None and current["metadata"]["uid"] == uid:
                    self._delete(res, ns, name)

            asyncio.get_running_loop().call_later(args.grace, gone)
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def never_ready(name: str) -> bool:
        """Whether the new pod ``name`` is one of those that never get Ready (--never-ready)."""
        return bool(args.never_ready) and name.startswith("new-") and int(name[4:9]) % args.never_ready == 0

    kmock_parsing.parse_path = parse_path_with_namespaces  # type: ignore[assignment]
    harness = KmockThread(kmock.KubernetesScaffold)
    harness.start()
    sim = TimingSim(harness)
    jobs_res = next(res for res in r.WORKLOAD_RESOURCES if (res.group, res.kind) == ("batch", "Job"))
    replica_sets = next(res for res in r.WORKLOAD_RESOURCES if (res.group, res.kind) == ("apps", "ReplicaSet"))
    deployments = next(res for res in r.WORKLOAD_RESOURCES if (res.group, res.kind) == ("apps", "Deployment"))
    sim.serve(r.NODES, r.PODS, r.NAMESPACES, r.PRIORITY_CLASSES, r.LEASES, r.EVENTS, r.RESOURCE_FLAVORS,
              r.CLUSTER_QUEUES, r.LOCAL_QUEUES, r.COHORTS, r.WORKLOAD_PRIORITY_CLASSES,
              *([jobs_res] if args.victim_job_pods else []),
              *([replica_sets] if args.foreign_churn or args.rollouts else []),
              *([deployments] if args.rollouts else []), *(r.DRA_RESOURCES if args.dra else ()))
    held = 5  # of each node's 8 GPUs
    total_gpus = args.nodes * 8 + 16 * args.backlog + args.arrivals * args.gang_size  # the queue's quota
    urgent = int(args.preempt_rate * args.arrivals / args.rate) if args.preempt_rate else 0  # high pods to come
    per_victim = max(1, args.victim_job_pods)  # GPUs a high pod asks, and a victim holds
    jobs: dict[str, JsonDict] = {}  # the victims' Jobs, by name

    def job_pod(name: str, pod_name: str, node_name: str | None) -> JsonDict:
        """A pod of the Job ``name``, as its controller makes it (the labels its pods are grouped by)."""
        out = pod(pod_name, gpus=1, queue="urgent", priority_class="urgent-low", node_name=node_name)
        out["metadata"]["labels"].update({"batch.kubernetes.io/controller-uid": jobs[name]["metadata"]["uid"],
                                          "batch.kubernetes.io/job-name": name})
        return out

    def claimed(obj: JsonDict, gpus: int, named: bool) -> JsonDict:
        """--dra: the pod asks its GPUs through a claim made from a template instead of nvidia.com/gpu; ``named``:
        its status names the claim the resourceclaim controller made."""
        container = obj["spec"]["containers"][0]
        container["resources"] = {"requests": {k: v for k, v in container["resources"]["requests"].items()
                                               if k != "nvidia.com/gpu"}, "claims": [{"name": "gpus"}]}
        obj["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": f"gpus-{gpus}"}]
        if named:
            obj["status"]["resourceClaimStatuses"] = [{"name": "gpus",
                                                       "resourceClaimName": dra_claim_name(obj["metadata"]["name"])}]
        return obj

    def dra_claim(pod_name: str, gpus: int, node_name: str | None = None, devices: list[str] | None = None,
                  uid: str = "", owner: str = "") -> JsonDict:
        """The claim the resourceclaim controller makes for a pod (allocated and reserved for it, ``uid``, when it
        runs on ``devices``), the pod its controller owner (``owner``: its uid) as the controller writes it."""
        from live_env import NS

        meta: JsonDict = {"name": dra_claim_name(pod_name), "namespace": NS}
        if owner:
            meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": owner,
                                        "controller": True, "blockOwnerDeletion": True}]
        claim: JsonDict = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta,
                           "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                               "deviceClassName": DRA_DRIVER, "count": gpus}}]}}}
        if node_name is not None and devices is not None:
            claim["status"] = {"allocation": {"devices": {"results": [
                {"request": "gpus", "driver": DRA_DRIVER, "pool": node_name, "device": d} for d in devices]}},
                "reservedFor": [{"resource": "pods", "name": pod_name, "uid": uid}]}
        return claim

    def fill_dra(s: ApiSim) -> None:
        """--dra: the driver's DeviceClass and the templates pods make their claims from (1 and 16 GPUs)."""
        from live_env import NS

        s._create(r.DEVICE_CLASSES, {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                                     "metadata": {"name": DRA_DRIVER},
                                     "spec": {"selectors": [{"cel": {"expression":
                                                                     f"device.driver == '{DRA_DRIVER}'"}}]}}, None)
        for gpus in (1, 16):
            s._create(r.RESOURCE_CLAIM_TEMPLATES, {
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": f"gpus-{gpus}", "namespace": NS},
                "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                    "deviceClassName": DRA_DRIVER, "count": gpus}}]}}}}, None)

    def fill(s: ApiSim) -> None:
        if args.dra:
            fill_dra(s)
        for i in range(args.nodes):
            name = f"node-{i:05d}"
            if args.dra:  # its GPUs published by the DRA driver, not counted by a device plugin
                s._create(r.NODES, dra_node(name), None)
                s._create(r.RESOURCE_SLICES, dra_slice(name, 8), None)
            else:
                s._create(r.NODES, node(name, gpus=8), None)
            for j in range(held):
                group = {} if args.running_gang_size == 1 else {
                    "group": f"job-{i:05d}-{j // args.running_gang_size}", "group_size": args.running_gang_size}
                running = pod(f"run-{i:05d}-{j}", gpus=1, queue="team", node_name=name, **group)
                if args.pods_ready:
                    running["status"] = READY
                if args.dra:
                    made = s._create(r.PODS, claimed(running, 1, named=True), None)
                    s._create(r.RESOURCE_CLAIMS, dra_claim(f"run-{i:05d}-{j}", 1, name, [f"gpu-{j}"],
                                                           made["metadata"]["uid"], made["metadata"]["uid"]), None)
                    continue
                s._create(r.PODS, running, None)
        s._create(r.RESOURCE_FLAVORS, flavor(), None)
        total = total_gpus
        queue = cluster_queue("all", gpus=total, cpu=str(total * 2))
        for quota in queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"]:
            if quota["name"] == "memory":
                quota["nominalQuota"] = f"{total * 2}Gi"  # every pod asks 1Gi: quota for all of them
        s._create(r.CLUSTER_QUEUES, queue, None)
        s._create(r.LOCAL_QUEUES, local_queue("team", "all"), None)
        for k in range(args.backlog):
            big = pod(f"big-{k:05d}", gpus=16, queue="team")
            if args.dra:
                made = s._create(r.PODS, claimed(big, 16, named=True), None)
                s._create(r.RESOURCE_CLAIMS, dra_claim(f"big-{k:05d}", 16, owner=made["metadata"]["uid"]), None)
                continue
            s._create(r.PODS, big, None)
        if args.preempt_rate:
            # A queue of its own, full of low-priority pods (one on each of the first nodes), for the high ones.
            s._create(r.PRIORITY_CLASSES, priority_class("urgent-low", 1), None)
            s._create(r.PRIORITY_CLASSES, priority_class("urgent-high", 1000), None)
            s._create(r.CLUSTER_QUEUES, cluster_queue("urgent", gpus=urgent * per_victim,
                                                      cpu=str(urgent * per_victim * 2),
                                                      preemption={"withinClusterQueue": "LowerPriority"}), None)
            s._create(r.LOCAL_QUEUES, local_queue("urgent", "urgent"), None)
            for i in range(urgent):
                where = f"node-{i % args.nodes:05d}"
                if not args.victim_job_pods:
                    s._create(r.PODS, pod(f"low-{i:05d}", gpus=1, queue="urgent", priority_class="urgent-low",
                                          node_name=where), None)
                    continue
                name = f"low-{i:05d}"
                owner = job_object(name, pods=per_victim, gpus=1, queue="urgent")
                owner["spec"]["template"]["spec"]["priorityClassName"] = "urgent-low"
                jobs[name] = s._create(jobs_res, owner, None)
                for m in range(per_victim):
                    s._create(r.PODS, job_pod(name, f"{name}-p{m}", where), None)

    def web(name: str, replicas: int) -> JsonDict:
        """A web service's ReplicaSet, whose pods the default scheduler places."""
        from live_env import NS

        template = {"metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "web", "image": "nginx",
                                             "resources": {"requests": {"cpu": "100m"}}}]}}
        return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name, "namespace": NS},
                "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": template}}

    def fill_web(s: ApiSim) -> None:
        for i in range(100 if args.foreign_churn else 0):
            s._create(replica_sets, web(f"web-{i:03d}", 2), None)

    def fill_services(s: ApiSim) -> None:
        """--rollouts: 100 inference services of ours, each a Deployment whose ReplicaSet has two bound pods (on the
        first nodes, beside the pods held there)."""
        from live_env import NS

        for i in range(100 if args.rollouts else 0):
            name, rs_name = f"svc-{i:03d}", f"svc-{i:03d}-6c8d7f9b5"
            labels = {"app": name, "kueue.x-k8s.io/queue-name": "team"}
            template = {"metadata": {"labels": dict(labels)},
                        "spec": {"schedulerName": "gpufleet", "containers": [{"name": "serve", "image": "vllm",
                                 "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"},
                                               "limits": {"nvidia.com/gpu": "1"}}}]}}
            dep = s._create(deployments, {
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "namespace": NS, "generation": 1, "labels": dict(labels)},
                "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}}, "template": template}}, None)
            rs = s._create(replica_sets, {
                "apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": rs_name, "namespace": NS, "labels": {**labels, "pod-template-hash": "6c8d7f9b5"},
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name,
                                                  "uid": dep["metadata"]["uid"], "controller": True}]},
                "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}}, "template": template}}, None)
            for suffix in ("x7k2p", "q9m4z"):
                served = pod(f"{rs_name}-{suffix}", gpus=1, queue="team", node_name=f"node-{i % args.nodes:05d}")
                served["metadata"]["labels"].update(app=name, **{"pod-template-hash": "6c8d7f9b5"})
                served["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                                          "name": rs_name, "uid": rs["metadata"]["uid"],
                                                          "controller": True}]
                s._create(r.PODS, served, None)

    sim.harness.call(lambda: fill(sim), timeout=600)
    sim.harness.call(lambda: fill_web(sim), timeout=600)
    sim.harness.call(lambda: fill_services(sim), timeout=600)
    # The emulator stands in for the API server, whose (Go) collector runs beside its requests: here a full
    # collection of the filled cluster's objects held the emulator's one loop for 0.15-0.4 s, delaying whichever
    # Binding came then. What is alive after the fill is left out of every later collection.
    gc.collect()
    gc.freeze()
    _emit({"url": sim.url})

    def finish() -> None:
        """Running pods end (their Jobs complete) at --finish-rate per second while the new ones arrive."""
        k = 0
        while args.finish_rate > 0 and k < args.nodes * held and time.monotonic() < started + args.arrivals / args.rate:
            due = started + k / args.finish_rate
            time.sleep(max(0.0, due - time.monotonic()))
            i, j = divmod(k, held)
            if args.running_gang_size == 1:
                sim.harness.call(lambda i=i, j=j: sim._delete(r.PODS, pod_ns, f"run-{i:05d}-{j}"), timeout=60)
            else:  # a member of a training job's pod group ends; the group ends with its last
                sim.harness.call(lambda i=i, j=j: sim._patched(r.PODS, pod_ns, f"run-{i:05d}-{j}",
                                                               {"status": {"phase": "Succeeded"}}), timeout=60)
            k += 1

    def paced(rate: float, act: Callable[[int], None]) -> None:
        """``act(k)`` for k = 0, 1, ... at ``rate`` per second while the new pods arrive (nothing when 0)."""
        k = 0
        while rate > 0 and time.monotonic() < started + args.arrivals / args.rate:
            time.sleep(max(0.0, started + k / rate - time.monotonic()))
            act(k)
            k += 1

    def churn(k: int) -> None:
        """Nodes cordoned and uncordoned at --node-churn per second (maintenance, an autoscaler's scale-down
        candidates): node k is cordoned, and the one cordoned before it uncordoned."""
        name, back = f"node-{k % args.nodes:05d}", f"node-{(k - 1) % args.nodes:05d}"

        def flip() -> None:
            sim._patched(r.NODES, None, name, {"spec": {"unschedulable": True}})
            if k > 0:
                sim._patched(r.NODES, None, back, {"spec": {"unschedulable": False}})

        sim.harness.call(flip, timeout=60)

    def foreign(k: int) -> None:
        """Another scheduler's ReplicaSets changing at --foreign-churn per second: scaled, and every tenth change
        one replaced by its successor (a rollout)."""
        i = k % 100

        def change() -> None:
            names = sorted(n for _, n in sim.objects[replica_sets.key] if n.startswith(f"web-{i:03d}"))
            if k % 10 == 9:
                sim._delete(replica_sets, pod_ns, names[-1])
                sim._create(replica_sets, web(f"web-{i:03d}-r{k}", 2), None)
            else:
                sim._patched(replica_sets, pod_ns, names[-1], {"spec": {"replicas": 1 + k % 5}})

        sim.harness.call(change, timeout=60)

    def rollout(k: int) -> None:
        """A service of ours rolled out at --rollouts per second: ``kubectl rollout restart`` writes the restart
        annotation into its template, then its controller records the revision on it and on its ReplicaSet."""
        name = f"svc-{k % 100:03d}"

        def change() -> None:
            sim._patched(deployments, pod_ns, name, {
                "metadata": {"generation": k + 2},
                "spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": f"r{k}"}}}}})
            revision = {"metadata": {"annotations": {"deployment.kubernetes.io/revision": str(k + 2)}}}
            sim._patched(deployments, pod_ns, name, revision)
            sim._patched(replica_sets, pod_ns, f"{name}-6c8d7f9b5", revision)

        sim.harness.call(change, timeout=60)

    def requota(k: int) -> None:
        """The ClusterQueue's GPU quota changed at --quota-changes per second (one more GPU, then back), as an
        administrator or a quota controller changes a team's share."""
        def change() -> None:
            groups = copy.deepcopy(sim.objects[r.CLUSTER_QUEUES.key][(None, "all")]["spec"]["resourceGroups"])
            for quota in groups[0]["flavors"][0]["resources"]:
                if quota["name"] == "nvidia.com/gpu":
                    quota["nominalQuota"] = total_gpus + k % 2
            sim._patched(r.CLUSTER_QUEUES, None, "all", {"spec": {"resourceGroups": groups}})

        sim.harness.call(change, timeout=60)

    def namespaces(k: int) -> None:
        """Namespaces created at --namespace-churn per second, the one made before relabelled."""
        def change() -> None:
            sim._create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": f"ci-{k:05d}", "labels": {"ci": "true"}}}, None)
            if k > 0:
                sim._patched(r.NAMESPACES, None, f"ci-{k - 1:05d}", {"metadata": {"labels": {"ci": "done"}}})

        sim.harness.call(change, timeout=60)

    def join(k: int) -> None:
        """Nodes joining at --nodes-join per second (a cluster scaling up)."""
        sim.harness.call(lambda: sim._create(r.NODES, node(f"join-{k:05d}", gpus=8), None), timeout=60)

    def lose(k: int) -> None:
        """Nodes deleted under their pods at --nodes-lost per second (from the last one, away from the preemptions'
        nodes); their pods deleted --gc-after seconds later, as the pod garbage collector does."""
        name = f"node-{args.nodes - 1 - k:05d}"

        def gone() -> None:
            sim._delete(r.NODES, None, name)
            orphans = [key for key, o in sim.objects[r.PODS.key].items()
                       if (o.get("spec") or {}).get("nodeName") == name]

            def collect() -> None:
                for ns, pod_name in orphans:
                    if (ns, pod_name) in sim.objects[r.PODS.key]:
                        sim._delete(r.PODS, ns, pod_name)

            asyncio.get_running_loop().call_later(args.gc_after, collect)

        sim.harness.call(gone, timeout=60)

    def preempt() -> None:
        """Pods of high priority into the full urgent queue at --preempt-rate per second: each preempts one."""
        for k in range(urgent):
            due = started + k / args.preempt_rate
            time.sleep(max(0.0, due - time.monotonic()))
            def create(k: int = k) -> None:
                sim._create(r.PODS, pod(f"high-{k:05d}", gpus=per_victim, queue="urgent",
                                        priority_class="urgent-high"), None)
                sim.high_created[f"{pod_ns}/high-{k:05d}"] = time.monotonic()

            sim.harness.call(create, timeout=60)

    def arrive() -> None:
        for k in range(args.arrivals):
            due = started + k / args.rate
            time.sleep(max(0.0, due - time.monotonic()))
            name = f"new-{k:05d}"

            def create(name: str = name) -> None:
                if args.dra:
                    # The pod, then what the resourceclaim controller does on seeing it: the claim made from the
                    # template, then the pod's status naming it (a watch event each).
                    made = sim._create(r.PODS, claimed(pod(name, gpus=1, queue="team"), 1, named=False), None)
                    sim.created[f"{pod_ns}/{name}"] = time.monotonic()
                    sim._create(r.RESOURCE_CLAIMS, dra_claim(name, 1, owner=made["metadata"]["uid"]), None)
                    sim._patched(r.PODS, pod_ns, name, {"status": {"resourceClaimStatuses": [
                        {"name": "gpus", "resourceClaimName": dra_claim_name(name)}]}})
                    return
                if args.gang_size == 1:
                    sim._create(r.PODS, pod(name, gpus=1, queue="team"), None)
                    sim.created[f"{pod_ns}/{name}"] = time.monotonic()
                    return
                for m in range(args.gang_size):  # a pod group, all its members created at once
                    member = f"{name}-{m}"
                    sim._create(r.PODS, pod(member, gpus=1, queue="team", group=name, group_size=args.gang_size),
                                None)
                    sim.created[f"{pod_ns}/{member}"] = time.monotonic()

            sim.harness.call(create, timeout=60)

    from live_env import NS as pod_ns

    started = 0.0
    for line in sys.stdin:
        command = line.strip()
        if command == "arrive":
            started = time.monotonic()
            threading.Thread(target=arrive, daemon=True).start()
            threading.Thread(target=finish, daemon=True).start()
            threading.Thread(target=paced, args=(args.node_churn, churn), daemon=True).start()
            threading.Thread(target=paced, args=(args.nodes_join, join), daemon=True).start()
            threading.Thread(target=paced, args=(args.foreign_churn, foreign), daemon=True).start()
            threading.Thread(target=paced, args=(args.namespace_churn, namespaces), daemon=True).start()
            threading.Thread(target=paced, args=(args.rollouts, rollout), daemon=True).start()
            threading.Thread(target=paced, args=(args.quota_changes, requota), daemon=True).start()
            threading.Thread(target=preempt, daemon=True).start()
            threading.Thread(target=paced, args=(args.nodes_lost, lose), daemon=True).start()
            _emit({"ok": True})
        elif command == "report":
            def gather() -> JsonDict:
                latencies = [sim.bound[k] - t for k, t in sim.created.items() if k in sim.bound]
                high = [k for k in sim.bound if k.startswith(f"{pod_ns}/high-")]
                return {"created": len(sim.created), "latencies": latencies, "high_bound": len(high),
                        "high_latencies": [sim.bound[k] - sim.high_created[k] for k in high
                                           if k in sim.high_created],
                        "double_bound": sorted(k for k, n in sim.accepted.items() if n > 1),
                        **_final_state(sim, r.PODS.key, r.NODES.key),
                        **({"shared_gpus_nodes": _shared_claimed(sim, r.RESOURCE_CLAIMS.key)} if args.dra else {})}
            _emit(sim.harness.call(gather, timeout=120))
        elif command == "quit":
            break
    sim.close()
    harness.stop()
    return 0


# --- the scheduler process --------------------------------------------------------------------------------


def dra_claim_name(pod_name: str) -> str:
    return f"{pod_name}-gpus-x7k2p"  # (the resourceclaim controller's five random letters)


def dra_node(name: str) -> JsonDict:
    """--dra: a node whose 8 GPUs only its DRA driver's ResourceSlice publishes."""
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"capacity": resources, "allocatable": resources,
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def dra_slice(node_name: str, gpus: int) -> JsonDict:
    devices = [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"},
                                                  "uuid": {"string": f"GPU-{node_name}-{i}"},
                                                  "productName": {"string": "NVIDIA A100-SXM4-80GB"}},
                "capacity": {"memory": {"value": "81920Mi"}}} for i in range(gpus)]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node_name}-{DRA_DRIVER}"},
            "spec": {"driver": DRA_DRIVER, "nodeName": node_name,
                     "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1}, "devices": devices}}


def _shared_claimed(sim: Any, claims_key: str) -> list[str]:
    """--dra: the nodes (pools) one of whose devices two allocated claims name (run on the emulator's loop)."""
    seen: set[tuple[str, str]] = set()
    shared: set[str] = set()
    for claim in sim.objects[claims_key].values():
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for res in (allocation.get("devices") or {}).get("results") or []:
            device = (res.get("pool") or "", res.get("device") or "")
            if device in seen:
                shared.add(device[0])
            seen.add(device)
    return sorted(shared)


def scheduler_role(args: argparse.Namespace) -> int:
    try:
        from gpufleet.k8s.client import KubeClient
        from gpufleet.k8s.informer import Backoff
        from gpufleet.live import settings as ks
        from gpufleet.live.scheduler import Scheduler
    except ImportError:  # a baseline revision from before gpufleet.kube was split (issue 27)
        from gpufleet.kube import settings as ks  # type: ignore[no-redef]
        from gpufleet.kube.client import KubeClient  # type: ignore[no-redef]
        from gpufleet.kube.informer import Backoff  # type: ignore[no-redef]
        from gpufleet.kube.scheduler import Scheduler  # type: ignore[no-redef]

    # The production defaults, but for the HTTP endpoints (none) and, with --pods-ready, waitForPodsReady.
    settings = ks.SchedulerSettings(metrics_bind_address="127.0.0.1:0", health_probe_bind_address="127.0.0.1:0")
    if args.pods_ready:
        from gpufleet.api.objects import PodsReadyPolicy, SchedulerConfig

        settings = dataclasses.replace(settings, kueue=SchedulerConfig(
            pods_ready=PodsReadyPolicy(enable=True, timeout_s=args.pods_ready)))
    client = KubeClient(host=args.url, timeout=30.0)
    sched = Scheduler(client, settings, identity="bench", leader_elect=False, serve=False,
                      informer_options={"backoff": Backoff(initial=0.05, maximum=0.2, jitter=0.0),
                                        "min_watch_seconds": 0.0})
    sched.start()
    if not sched.informers.wait_for_sync(600.0):
        _emit({"error": "informers did not sync"})
        return 1
    _emit({"synced": True})
    marked = 0
    for line in sys.stdin:
        command = line.strip()
        if command == "pending":
            reports = list(sched.reports)
            _emit({"cycles": len(reports), "pending": reports[-1].pending if reports else -1})
        elif command == "cpu":
            marked = len(sched.reports)
            _emit({"cpu_s": time.process_time(), "cycles": marked})
        elif command == "stop":
            break
    sched.stop()
    client.close()
    reports = list(sched.reports)[marked:]
    _emit({"sli": _sli_buckets(sched.metrics),
           "cycles": len(reports), "carried": sum(1 for c in reports if getattr(c, "carried", False)),
           "core_max": max((c.core_s for c in reports), default=0.0),
           "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
    return 0


def _sli_buckets(metrics: Any) -> dict[str, list[tuple[float, float]]] | None:
    """The pod scheduling SLI histogram's cumulative buckets per stage; None for code without it (a baseline)."""
    if getattr(metrics, "pod_scheduling_sli", None) is None:
        return None
    from prometheus_client.utils import floatToGoString

    from gpufleet.scheduler_metrics import SLI_BUCKETS

    name = "gpufleet_pod_scheduling_sli_duration_seconds_bucket"
    out: dict[str, list[tuple[float, float]]] = {}
    for until in ("binding_sent", "bound"):
        out[until] = [(le, metrics.registry.get_sample_value(name, {"until": until, "le": floatToGoString(le)}) or 0.0)
                      for le in (*SLI_BUCKETS, float("inf"))]
    return out


def _share_within(buckets: list[tuple[float, float]], edge: float) -> float:
    total = buckets[-1][1]
    return next((n for le, n in buckets if le == edge), float("nan")) / total if total else float("nan")


def _quantile(buckets: list[tuple[float, float]], q: float) -> float:
    """Prometheus's histogram_quantile: linear within the bucket the rank falls in."""
    total = buckets[-1][1]
    if not total:
        return float("nan")
    rank, lower, below = q * total, 0.0, 0.0
    for le, n in buckets:
        if n >= rank:
            if le == float("inf"):
                return lower
            return lower + (le - lower) * ((rank - below) / (n - below) if n > below else 1.0)
        lower, below = le, n
    return lower


# --- the orchestrator -------------------------------------------------------------------------------------


def _child(role: str, args: argparse.Namespace, extra: list[str], src: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), str(ROOT / "tests" / "kube")]))
    command = [sys.executable, str(Path(__file__).resolve()), "--role", role, "--nodes", str(args.nodes),
               "--backlog", str(args.backlog), "--arrivals", str(args.arrivals), "--rate", str(args.rate),
               "--gang-size", str(args.gang_size),
               "--finish-rate", str(args.finish_rate), "--pods-ready", str(args.pods_ready),
               "--never-ready", str(args.never_ready),
               "--node-churn", str(args.node_churn), "--nodes-join", str(args.nodes_join),
               "--foreign-churn", str(args.foreign_churn), "--namespace-churn", str(args.namespace_churn),
               "--rollouts", str(args.rollouts), "--quota-changes", str(args.quota_changes),
               "--preempt-rate", str(args.preempt_rate), "--victim-job-pods", str(args.victim_job_pods),
               "--grace", str(args.grace), "--nodes-lost", str(args.nodes_lost), "--gc-after", str(args.gc_after),
               "--running-gang-size", str(args.running_gang_size), *(["--dra"] if args.dra else []), *extra]
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_once(args: argparse.Namespace, src: Path) -> JsonDict:
    emulator = _child("emulator", args, [], ROOT / "src")
    scheduler: subprocess.Popen[str] | None = None
    try:
        url = _ask(emulator)["url"]
        scheduler = _child("scheduler", args, ["--url", url], src)
        _ask(scheduler)
        deadline = time.monotonic() + args.timeout
        # Settled: a cycle reported the whole backlog pending, and no cycle ran for 3 s since (the conditions it
        # wrote on the backlog's pods have come back through the watch).
        last, quiet_since = -1, time.monotonic()
        while True:
            answer = _ask(scheduler, "pending")
            if answer["cycles"] != last:
                last, quiet_since = answer["cycles"], time.monotonic()
            if answer["pending"] >= args.backlog and time.monotonic() - quiet_since >= 3.0:
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the scheduler never settled with the whole backlog pending")
            time.sleep(0.2)
        before = _ask(scheduler, "cpu")
        time.sleep(args.idle)
        after = _ask(scheduler, "cpu")
        _ask(emulator, "arrive")
        end = time.monotonic() + args.arrivals / args.rate + args.within
        state = _ask(emulator, "report")
        while len(state["latencies"]) < args.arrivals * args.gang_size and time.monotonic() < end:
            time.sleep(0.5)
            state = _ask(emulator, "report")
        cycles = _ask(scheduler, "stop")
        emulator.stdin.write("quit\n")  # type: ignore[union-attr]
        emulator.stdin.flush()  # type: ignore[union-attr]
    finally:
        for proc in (scheduler, emulator):
            if proc is not None:
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    latencies = state["latencies"]
    return {"sli": cycles.get("sli"), "idle_core": (after["cpu_s"] - before["cpu_s"]) / args.idle,
            "idle_cycles": after["cycles"] - before["cycles"],
            "bound": sum(1 for x in latencies if x <= args.within), "p50": _percentile(latencies, 0.5),
            "p99": _percentile(latencies, 0.99), "max": max(latencies, default=float("nan")),
            "cycles": cycles["cycles"], "carried": cycles["carried"], "core_max": cycles["core_max"],
            "rss_mib": cycles["rss_mib"], "high_bound": state.get("high_bound", 0),
            "high_p50": _percentile(state.get("high_latencies", []), 0.5),
            "high_max": max(state.get("high_latencies", []), default=float("nan")),
            "checks": not (state["double_bound"] or state["overcommitted_nodes"] or state["shared_gpus_nodes"])}


def _sli_text(run: JsonDict) -> str:
    sli = run.get("sli")
    if not sli:
        return "event->Binding sent: not measured (code without the SLI metric)  "
    sent, bound = sli["binding_sent"], sli["bound"]
    return (f"event->Binding sent p99 {_quantile(sent, 0.99):.3f}s (histogram), within 100 ms "
            f"{100 * _share_within(sent, 0.1):.1f}% of {sent[-1][1]:.0f}; answered p99 {_quantile(bound, 0.99):.3f}s  ")


def _line(label: str, run: JsonDict, args: argparse.Namespace) -> str:
    return (f"{label:9} " + _sli_text(run)
            + f"idle {100 * run['idle_core']:5.1f}% of a core ({run['idle_cycles']} cycles in {args.idle:g}s)  "
            f"create->Binding p50 {run['p50']:7.3f}s p99 {run['p99']:7.3f}s max {run['max']:7.3f}s  "
            f"bound within {args.within:g}s {run['bound']}/{args.arrivals * args.gang_size}  cycles {run['cycles']} "
            f"({run['carried']} carried on, longest core {run['core_max']:.3f}s)  peak RSS {run['rss_mib']:.0f} MiB  "
            + (f"high-priority pods bound {run['high_bound']} (create->Binding p50 {run['high_p50']:.3f}s max "
               f"{run['high_max']:.3f}s)  " if args.preempt_rate else "") +
            f"checks "
            f"{'ok' if run['checks'] else 'VIOLATED'}  load {os.getloadavg()[0]:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--role", choices=("orchestrator", "emulator", "scheduler"), default="orchestrator",
                        help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--backlog", type=int, default=500, help="pending 16-GPU pods that fit on no node")
    parser.add_argument("--arrivals", type=int, default=200, help="new one-GPU pods")
    parser.add_argument("--rate", type=float, default=5.0, help="new pods (or pod groups) per second")
    parser.add_argument("--gang-size", type=int, default=1,
                        help="each arrival a pod group of this many one-GPU pods (Kueue's pod group labels)")
    parser.add_argument("--node-churn", type=float, default=0.0,
                        help="nodes cordoned (and the one before uncordoned) per second while the new pods arrive")
    parser.add_argument("--nodes-join", type=float, default=0.0,
                        help="new 8-GPU nodes created per second while the new pods arrive (a scale-up)")
    parser.add_argument("--foreign-churn", type=float, default=0.0,
                        help="another scheduler's ReplicaSets changing per second (rollouts, autoscaling)")
    parser.add_argument("--namespace-churn", type=float, default=0.0,
                        help="namespaces created per second (CI runs, teams onboarded), the last one relabelled")
    parser.add_argument("--rollouts", type=float, default=0.0,
                        help="rollouts of our own inference services (Deployments) per second meanwhile")
    parser.add_argument("--quota-changes", type=float, default=0.0,
                        help="changes per second of the ClusterQueue's GPU quota (one more, then back) meanwhile")
    parser.add_argument("--preempt-rate", type=float, default=0.0,
                        help="high-priority pods a second, each preempting a low-priority running one")
    parser.add_argument("--victim-job-pods", type=int, default=0,
                        help="the low-priority running work as Jobs of N pods (evicted gracefully, their pods "
                             "replaced by the Job controller); each high-priority pod asks N GPUs")
    parser.add_argument("--nodes-lost", type=float, default=0.0,
                        help="nodes a second deleted under their pods while the new pods arrive")
    parser.add_argument("--gc-after", type=float, default=40.0,
                        help="seconds after a node's loss its pods are deleted (the pod garbage collector)")
    parser.add_argument("--grace", type=float, default=1.0,
                        help="seconds an evicted Job pod takes to go (with --victim-job-pods)")
    parser.add_argument("--finish-rate", type=float, default=0.0,
                        help="running pods deleted per second while the new ones arrive (churn)")
    parser.add_argument("--running-gang-size", type=int, default=1, choices=range(1, 6),
                        help="the bound pods as pod groups of this many on one node; --finish-rate then ends members")
    parser.add_argument("--pods-ready", type=float, default=0.0,
                        help="waitForPodsReady timeout in seconds (0: off); bound pods turn Ready at once")
    parser.add_argument("--never-ready", type=int, default=0,
                        help="with --pods-ready, every Nth new pod never gets Ready (0: none), so it times out")
    parser.add_argument("--dra", action="store_true",
                        help="GPUs published by a DRA driver's ResourceSlices, every pod asking them through a claim "
                             "made from a template (the resourceclaim controller emulated)")
    parser.add_argument("--idle", type=float, default=20.0, help="seconds of nothing changing, CPU measured")
    parser.add_argument("--within", type=float, default=120.0, help="seconds after its creation a pod counts bound")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the backlog's first look")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each code")
    parser.add_argument("--baseline", default=BASELINE_REF, help="git revision of the previous code; 'none' to skip")
    args = parser.parse_args()
    if args.role == "emulator":
        return emulator_role(args)
    if args.role == "scheduler":
        return scheduler_role(args)
    print(f"{args.nodes} nodes x 8 GPUs, {args.nodes * 5} pods bound, {args.backlog} pending 16-GPU pods, "
          + (f"{args.arrivals} new one-GPU pods at {args.rate:g}/s" if args.gang_size == 1 else
             f"{args.arrivals} new pod groups of {args.gang_size} one-GPU pods at {args.rate:g}/s")
          + (f", running pods ending at {args.finish_rate:g}/s meanwhile" if args.finish_rate else "")
          + (f", a node cordoned at {args.node_churn:g}/s meanwhile" if args.node_churn else "")
          + (f", nodes joining at {args.nodes_join:g}/s meanwhile" if args.nodes_join else "")
          + (f", another scheduler's ReplicaSets changing at {args.foreign_churn:g}/s meanwhile"
             if args.foreign_churn else "")
          + (f", namespaces created at {args.namespace_churn:g}/s meanwhile" if args.namespace_churn else "")
          + (f", our services rolled out at {args.rollouts:g}/s meanwhile" if args.rollouts else "")
          + (f", the queue's quota changed at {args.quota_changes:g}/s meanwhile" if args.quota_changes else "")
          + (f", nodes lost under their pods at {args.nodes_lost:g}/s meanwhile (collected {args.gc_after:g}s later)"
             if args.nodes_lost else "")
          + (f", high-priority pods preempting at {args.preempt_rate:g}/s meanwhile"
             + (f" (victims: Jobs of {args.victim_job_pods} pods)" if args.victim_job_pods else "")
             if args.preempt_rate else "")
          + (f" (pod groups of {args.running_gang_size})" if args.running_gang_size > 1 else "")
          + (f", waitForPodsReady {args.pods_ready:g}s" if args.pods_ready else "")
          + (", every pod's GPUs through a DRA claim" if args.dra else "")
          + (f" (every {args.never_ready}th new pod never Ready)" if args.pods_ready and args.never_ready else "")
          + f" ({os.cpu_count()} CPUs)", flush=True)
    runs: dict[str, list[JsonDict]] = {"current": [], "baseline": []}
    with tempfile.TemporaryDirectory() as tmp:
        codes = [("current", ROOT / "src")]
        if args.baseline != "none":
            codes.append(("baseline", revision_src(args.baseline, Path(tmp))))
        for _ in range(args.repeat):
            for label, src in codes:
                run = run_once(args, src)
                runs[label].append(run)
                print(_line(label, run, args), flush=True)
    if runs["baseline"]:
        def median(label: str, key: str) -> float:
            return statistics.median(r[key] for r in runs[label])
        for key, what in (("idle_core", "idle CPU"), ("p50", "p50 create->Binding"), ("p99", "p99 create->Binding")):
            cur, base = median("current", key), median("baseline", key)
            print(f"{what}: baseline / current = {base / cur if cur else float('inf'):.1f}x "
                  f"({base:.3g} -> {cur:.3g})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
