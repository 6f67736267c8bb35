"""Builders of Kubernetes objects and fast settings for tests of the live scheduler against ApiSim."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

import kmock
from kube_apisim import ApiSim

from gpufleet.api.objects import POD_GROUP_COUNT_ANNOTATION, POD_GROUP_LABEL
from gpufleet.gpu.catalog import DEFAULT_CATALOG
from gpufleet.k8s import resources as r
from gpufleet.k8s.annotations import format_time
from gpufleet.k8s.informer import Backoff
from gpufleet.live.settings import BindingSettings, LeaderElectionSettings, SchedulerSettings

JsonDict = dict[str, Any]
NS = "ml"
PODS_RES = kmock.resource("v1/pods")

# Fast informers: a broken stream relists after 50 ms, not 0.8 s.
FAST_INFORMERS: dict[str, Any] = {"backoff": Backoff(initial=0.05, maximum=0.2, jitter=0.0), "min_watch_seconds": 0.0}


def fast_settings(**overrides: Any) -> SchedulerSettings:
    base = SchedulerSettings(
        cycle_period=0.2,
        min_cycle_interval=0.01,
        metrics_bind_address="127.0.0.1:0",
        health_probe_bind_address="127.0.0.1:0",
        leader_election=LeaderElectionSettings("gpufleet-scheduler", "gpufleet-system", 1.0, 0.6, 0.1),
        binding=BindingSettings(workers=4, retries=3, retry_backoff=0.01, gang_repair_timeout=30.0,
                                assume_timeout=10.0),
        disruption_budget_backoff=30.0,
    )
    return dataclasses.replace(base, **overrides)


# Waits end at the event; the timeout only bounds a failure, so it is generous: a 2-core CI machine running the
# suite (or a developer's machine running other work) can be several times slower than an idle one.
WAIT_TIMEOUT = 30.0


def wait_until(predicate: Callable[[], bool], timeout: float = WAIT_TIMEOUT, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached in {timeout}s")
        time.sleep(0.02)


def stamp(seconds: float | None = None) -> str:
    """An RFC 3339 time (default: now), as the API server writes creationTimestamp."""
    return format_time(time.time() if seconds is None else seconds)


def gpu_uuid(node: str, i: int) -> str:
    return f"GPU-{node}-{i}"


def node(name: str, gpus: int = 4, model: str = "A100-SXM4-80GB", labels: Mapping[str, str] | None = None,
         cpu: str = "64", memory: str = "512Gi") -> JsonDict:
    gpu_model = DEFAULT_CATALOG.find(model)
    assert gpu_model is not None
    inventory = {"model": gpu_model.key, "memoryMiB": gpu_model.memory_mib,
                 "sharing": {"migStrategy": "none", "timeSlicing": {}, "renameByDefault": False,
                             "failRequestsGreaterThanOne": False},
                 "gpus": [{"index": i, "uuid": gpu_uuid(name, i)} for i in range(gpus)], "nvlinks": []}
    resources = {"cpu": cpu, "memory": memory, "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": gpu_model.key, **(labels or {})},
                         "annotations": {"gpufleet.io/gpus": json.dumps(inventory)}},
            "status": {"capacity": resources, "allocatable": resources,
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(name: str, gpus: int = 1, *, ns: str = NS, scheduler: str = "gpufleet", queue: str | None = None,
        priority_class: str | None = None, group: str | None = None, group_size: int | None = None,
        node_name: str | None = None, annotations: Mapping[str, str] | None = None, cpu: str = "1",
        env: list[JsonDict] | None = None, created: str = "2026-01-01T00:00:00Z") -> JsonDict:
    labels: dict[str, str] = {}
    notes: dict[str, str] = dict(annotations or {})
    if queue:
        labels["kueue.x-k8s.io/queue-name"] = queue
    if group:
        labels[POD_GROUP_LABEL] = group
        notes[POD_GROUP_COUNT_ANNOTATION] = str(group_size)
    resources: JsonDict = {"requests": {"cpu": cpu, "memory": "1Gi"}}
    if gpus:
        resources["requests"]["nvidia.com/gpu"] = str(gpus)
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    container: JsonDict = {"name": "main", "image": "busybox", "resources": resources}
    if env is not None:
        container["env"] = env
    spec: JsonDict = {"schedulerName": scheduler, "containers": [container]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": labels, "annotations": notes,
                         "creationTimestamp": created},
            "spec": spec, "status": {"phase": "Running" if node_name else "Pending"}}


def flavor(name: str = "gpu") -> JsonDict:
    return {"apiVersion": "gpufleet.io/v1alpha1", "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": {}}


def cluster_queue(name: str, gpus: int, *, flavor_name: str = "gpu", preemption: JsonDict | None = None,
                  cohort: str | None = None, cpu: str = "1000") -> JsonDict:
    spec: JsonDict = {"namespaceSelector": {}, "resourceGroups": [{
        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
        "flavors": [{"name": flavor_name, "resources": [
            {"name": "cpu", "nominalQuota": cpu}, {"name": "memory", "nominalQuota": "10Ti"},
            {"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}]}
    if preemption:
        spec["preemption"] = preemption
    if cohort:
        spec["cohort"] = cohort
    return {"apiVersion": "gpufleet.io/v1alpha1", "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def local_queue(name: str, cq: str, ns: str = NS) -> JsonDict:
    return {"apiVersion": "gpufleet.io/v1alpha1", "kind": "LocalQueue", "metadata": {"name": name, "namespace": ns},
            "spec": {"clusterQueue": cq}}


def priority_class(name: str, value: int) -> JsonDict:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
            "value": value}


def bound_node(apisim: ApiSim, name: str, ns: str = NS) -> str | None:
    obj = apisim.get(r.PODS, ns, name)
    return None if obj is None else (obj.get("spec") or {}).get("nodeName")


def pod_requests(apisim: ApiSim) -> list[kmock.Request]:
    """Every request kmock recorded for pods (and their subresources), in arrival order."""
    view = apisim.kmock[PODS_RES]
    return apisim.harness.call(lambda: list(view))


def bindings(apisim: ApiSim, name: str | None = None) -> list[kmock.Request]:
    return [q for q in pod_requests(apisim) if str(q.method.value) == "POST" and q.subresource == "binding"
            and (name is None or q.name == name)]


def annotation_patches(apisim: ApiSim, name: str | None = None) -> list[kmock.Request]:
    return [q for q in pod_requests(apisim) if str(q.method.value) == "PATCH" and q.subresource is None
            and (name is None or q.name == name)]


def evictions(apisim: ApiSim, name: str | None = None) -> list[kmock.Request]:
    return [q for q in pod_requests(apisim) if str(q.method.value) == "POST" and q.subresource == "eviction"
            and (name is None or q.name == name)]


def events(apisim: ApiSim, reason: str | None = None) -> list[JsonDict]:
    found = apisim.harness.call(lambda: [dict(o) for o in apisim.objects[r.EVENTS.key].values()])
    return [e for e in found if reason is None or e.get("reason") == reason]


def scheduled_condition(obj: JsonDict | None) -> JsonDict | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled":
            return dict(cond)
    return None
