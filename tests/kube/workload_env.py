"""Builders of workload-kind objects (as the API server returns them) and of the pods their controllers create, for
tests of the live scheduler's grouping against ApiSim. The tests play the controllers: they create the pods."""

from __future__ import annotations

import copy
from typing import Any

from live_env import NS, pod

from gpufleet.k8s import resources as r
from gpufleet.k8s.resources import ResourceType

JsonDict = dict[str, Any]
WORKLOAD_TYPES: dict[str, ResourceType] = {res.key: res for res in r.WORKLOAD_RESOURCES}
JOBSETS = WORKLOAD_TYPES["jobsets.jobset.x-k8s.io"]
JOBS = WORKLOAD_TYPES["jobs.batch"]
DEPLOYMENTS = WORKLOAD_TYPES["deployments.apps"]
REPLICA_SETS = WORKLOAD_TYPES["replicasets.apps"]
STATEFUL_SETS = WORKLOAD_TYPES["statefulsets.apps"]
PYTORCH_JOBS = WORKLOAD_TYPES["pytorchjobs.kubeflow.org"]
STAMP = "2026-01-01T00:00:00Z"


def _template(gpus: int, labels: dict[str, str] | None = None, scheduler: str = "gpufleet") -> JsonDict:
    """A pod template as the API server returns it (defaults filled in)."""
    resources: JsonDict = {"requests": {"cpu": "1", "memory": "1Gi"}}
    if gpus:
        resources["requests"]["nvidia.com/gpu"] = str(gpus)
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    return {"metadata": {"creationTimestamp": None, "labels": dict(labels or {})},
            "spec": {"schedulerName": scheduler, "restartPolicy": "Never", "dnsPolicy": "ClusterFirst",
                     "terminationGracePeriodSeconds": 30, "securityContext": {},
                     "containers": [{"name": "main", "image": "busybox", "imagePullPolicy": "Always",
                                     "terminationMessagePath": "/dev/termination-log",
                                     "terminationMessagePolicy": "File", "resources": resources}]}}


def _meta(name: str, ns: str, queue: str | None, uid: str) -> JsonDict:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    return {"name": name, "namespace": ns, "uid": uid, "generation": 1, "creationTimestamp": STAMP, "labels": labels}


def jobset(name: str, *, jobs: int = 2, pods_per_job: int = 2, gpus: int = 2, queue: str | None = None,
           ns: str = NS, suspend: bool | None = None, scheduler: str = "gpufleet") -> JsonDict:
    """A JobSet of one replicated job ``workers``: ``jobs`` Jobs of ``pods_per_job`` pods of ``gpus`` GPUs."""
    job_spec = {"parallelism": pods_per_job, "completions": pods_per_job, "backoffLimit": 0,
                "completionMode": "Indexed", "template": _template(gpus, scheduler=scheduler)}
    spec: JsonDict = {"replicatedJobs": [{"name": "workers", "replicas": jobs, "template": {"spec": job_spec}}],
                      "successPolicy": {"operator": "All"}, "startupPolicy": {"startupPolicyOrder": "AnyOrder"}}
    if suspend is not None:
        spec["suspend"] = suspend
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": _meta(name, ns, queue, f"js-{name}"), "spec": spec,
            "status": {"replicatedJobsStatus": [{"name": "workers", "active": 0, "ready": 0}]}}


def jobset_pods(owner: JsonDict) -> list[JsonDict]:
    """The pods JobSet's controller (through its Jobs) creates for ``owner``, in order."""
    name = owner["metadata"]["name"]
    ns = owner["metadata"]["namespace"]
    out = []
    for rj in owner["spec"]["replicatedJobs"]:
        job = rj["template"]["spec"]
        for j in range(rj["replicas"]):
            for i in range(job["parallelism"]):
                out.append(_pod_from(job["template"], f"{name}-{rj['name']}-{j}-{i}-x{j}{i}q", ns, {
                    "jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/replicatedjob-name": rj["name"],
                    "jobset.sigs.k8s.io/job-index": str(j),
                    "batch.kubernetes.io/job-name": f"{name}-{rj['name']}-{j}",
                    "batch.kubernetes.io/job-completion-index": str(i)}))
    return out


def job(name: str, *, pods: int = 2, gpus: int = 1, queue: str | None = None, ns: str = NS) -> JsonDict:
    spec = {"parallelism": pods, "completions": pods, "backoffLimit": 6, "completionMode": "NonIndexed",
            "suspend": False, "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": f"job-{name}"}},
            "template": _template(gpus, {"batch.kubernetes.io/controller-uid": f"job-{name}",
                                         "batch.kubernetes.io/job-name": name})}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": _meta(name, ns, queue, f"job-{name}"), "spec": spec,
            "status": {"active": 0}}


def job_pods(owner: JsonDict) -> list[JsonDict]:
    name, ns = owner["metadata"]["name"], owner["metadata"]["namespace"]
    return [_pod_from(owner["spec"]["template"], f"{name}-p{i}x", ns, {}) for i in range(owner["spec"]["parallelism"])]


def deployment(name: str, *, replicas: int = 3, gpus: int = 1, ns: str = NS) -> JsonDict:
    spec = {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "strategy": {"type": "RollingUpdate"},
            "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600, "template": _template(gpus, {"app": name})}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(name, ns, None, f"deploy-{name}"),
            "spec": spec, "status": {"replicas": 0}}


def deployment_pods(owner: JsonDict, template_hash: str = "5d8f7c9b6") -> list[JsonDict]:
    """The pods of the Deployment's ReplicaSet ``<name>-<hash>``."""
    name, ns = owner["metadata"]["name"], owner["metadata"]["namespace"]
    return [_pod_from(owner["spec"]["template"], f"{name}-{template_hash}-{suffix}", ns,
                      {"pod-template-hash": template_hash})
            for suffix in ("a1b2c", "d3e4f", "g5h6i", "j7k8l")[:owner["spec"]["replicas"]]]


def stateful_set(name: str, *, replicas: int = 3, gpus: int = 1, queue: str | None = None, ns: str = NS) -> JsonDict:
    spec = {"replicas": replicas, "serviceName": name, "podManagementPolicy": "OrderedReady",
            "selector": {"matchLabels": {"app": name}}, "template": _template(gpus, {"app": name}),
            "updateStrategy": {"type": "RollingUpdate"}}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": _meta(name, ns, queue, f"sts-{name}"),
            "spec": spec, "status": {"replicas": 0}}


def stateful_set_pod(owner: JsonDict, ordinal: int) -> JsonDict:
    name, ns = owner["metadata"]["name"], owner["metadata"]["namespace"]
    return _pod_from(owner["spec"]["template"], f"{name}-{ordinal}", ns, {
        "statefulset.kubernetes.io/pod-name": f"{name}-{ordinal}", "controller-revision-hash": f"{name}-7c4d"})


def _pod_from(template: JsonDict, name: str, ns: str, labels: dict[str, str]) -> JsonDict:
    """A pod made from a template, with the controller's labels."""
    out = pod(name, gpus=0, ns=ns, scheduler=template["spec"]["schedulerName"], created=STAMP)
    out["metadata"]["labels"] = {**(template.get("metadata") or {}).get("labels", {}), **labels}
    out["spec"] = {**copy.deepcopy(template["spec"]), **{k: v for k, v in out["spec"].items() if k != "containers"}}
    return out


def admission_check(name: str, controller: str) -> JsonDict:
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "AdmissionCheck", "metadata": {"name": name},
            "spec": {"controllerName": controller}}
