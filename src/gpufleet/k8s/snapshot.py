"""``gpufleet snapshot``: a live cluster's scheduling-relevant objects, as manifests ``plan`` and ``simulate`` read.

What is taken, each kind only where the server serves it (discovery):

* Nodes, Pods, Namespaces, PriorityClasses;
* the workload kinds gpufleet reads (:data:`WORKLOAD_KINDS`: Jobs, CronJobs, Deployments, StatefulSets,
  ReplicaSets, JobSets, Kubeflow's jobs and training runtimes, Ray, LeaderWorkerSets, Volcano's and KAI's kinds);
* the queue kinds of both ``kueue.x-k8s.io`` and ``gpufleet.io``, Kueue's Workloads and AdmissionChecks;
* NVIDIA's configuration: the GPU Operator's ClusterPolicy and the device plugin's and mig-parted's ConfigMaps
  (those the ClusterPolicy names, and any other ConfigMap whose data is such a configuration; no other);
* DRA (:data:`~gpufleet.api.workloadkinds.table.DRA_KINDS`): ResourceSlices, which give DRA nodes their GPUs,
  DeviceClasses, ResourceClaims and ResourceClaimTemplates, in the first version gpufleet reads that is served.

Each object is written as one YAML document, stripped to what scheduling reads (:func:`clean`): no
managedFields, resourceVersion or last-applied annotation, no node images, no container env, command or
volumes (which may hold secrets and never change a placement). Pods that finished and Jobs and Workloads that
finished are left out: they hold nothing and would otherwise be planned again.

With a namespace, that namespace's pods and namespaced objects are taken, and of every other namespace only the
pods bound to a node (reduced to their resources): they keep the nodes as full as they are.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpufleet.api.limits import MAX_DOCUMENTS, MAX_INPUT_BYTES
from gpufleet.api.nvidia_config import config_map_names, nvidia_config_kind
from gpufleet.api.workloadkinds.table import DRA_KINDS, RULES, SUPPORTING_KINDS
from gpufleet.k8s import resources as r
from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.discovery import Discovery
from gpufleet.k8s.errors import Forbidden
from gpufleet.k8s.resources import ResourceType

JsonDict = dict[str, Any]


@dataclass(frozen=True, slots=True)
class KindRef:
    """A kind to take when served: its group, kind, and the versions gpufleet reads (preferred first)."""

    group: str
    kind: str
    versions: tuple[str, ...]


# The workload kinds and the kinds they refer to (Volcano's and KAI's queues, Kubeflow's training runtimes), as
# gpufleet's manifest reader knows them (gpufleet.api.workloadkinds.table): taken in the first version listed that
# the server serves. Kueue's AdmissionChecks are among the queue kinds below.
WORKLOAD_KINDS: tuple[KindRef, ...] = (
    *(KindRef(group, kind, rule.versions) for (group, kind), rule in RULES.items()),
    *(KindRef(group, kind, versions) for (group, kind), versions in SUPPORTING_KINDS.items()
      if group != r.KUEUE_GROUP),
)
# The DRA kinds the manifest reader reads (gpufleet.api.dra_parse): a DRA node's GPUs are in its ResourceSlices.
DRA_KIND_REFS: tuple[KindRef, ...] = tuple(KindRef(group, kind, versions)
                                           for (group, kind), versions in DRA_KINDS.items())

QUEUE_KINDS: tuple[ResourceType, ...] = (
    *r.KUEUE_QUEUE_RESOURCES, r.KUEUE_TOPOLOGIES, r.KUEUE_WORKLOADS, r.KUEUE_ADMISSION_CHECKS,
    *r.GPUFLEET_QUEUE_RESOURCES,
)
CORE_KINDS: tuple[ResourceType, ...] = (r.NAMESPACES, r.PRIORITY_CLASSES, r.NODES, r.PODS)

# Annotations that are bulk, not meaning: kubectl's copy of the whole object, Deployment bookkeeping.
_NOISE_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)
_KEPT_META = ("name", "namespace", "generateName", "uid", "labels", "annotations", "ownerReferences",
              "creationTimestamp", "deletionTimestamp")
# What a pod spec keeps: every field a placement reads (the rest can hold secrets and is never read).
_KEPT_POD_SPEC = ("nodeName", "schedulerName", "priorityClassName", "priority", "preemptionPolicy", "nodeSelector",
                  "affinity", "tolerations", "topologySpreadConstraints", "schedulingGates", "runtimeClassName",
                  "overhead", "restartPolicy", "resourceClaims", "hostNetwork")
_KEPT_CONTAINER = ("name", "image", "resources", "restartPolicy", "ports")
_TERMINAL = ("Succeeded", "Failed")


@dataclass(slots=True)
class Taken:
    resource: ResourceType
    objects: list[JsonDict] = field(default_factory=list)
    left_out: int = 0  # finished objects, or (with a namespace) what another namespace holds


@dataclass(slots=True)
class Snapshot:
    taken: list[Taken] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # kinds the server serves but we may not list (403)

    @property
    def documents(self) -> int:
        return sum(len(t.objects) for t in self.taken)


def take(client: KubeClient, namespace: str | None = None, *,
         progress: Callable[[ResourceType], None] | None = None) -> Snapshot:
    """Read every kind of the module doc the server serves (see there for what is kept)."""
    discovery = Discovery(client)
    snap = Snapshot()
    kinds: list[ResourceType] = [*CORE_KINDS]
    for ref in (*WORKLOAD_KINDS, *DRA_KIND_REFS):
        found = discovery.find(ref.group, ref.kind, ref.versions)
        if found is not None:
            kinds.append(found)
    kinds += [res for res in QUEUE_KINDS if discovery.serves(res)]
    policy = discovery.find("nvidia.com", "ClusterPolicy", ("v1",))
    if policy is not None:
        kinds.append(policy)
    for res in kinds:
        if progress is not None:
            progress(res)
        try:
            snap.taken.append(_take_one(client, res, namespace))
        except Forbidden:
            snap.skipped.append(f"{res.kind}.{res.group or 'core'} (forbidden)")
    snap.taken.append(_take_config_maps(client, snap, progress))
    snap.taken = [t for t in snap.taken if t.objects or t.left_out]
    return snap


def _take_one(client: KubeClient, res: ResourceType, namespace: str | None) -> Taken:
    scoped = namespace if res.namespaced and res is not r.PODS else None
    items = client.list_all(res, scoped).items
    out = Taken(res)
    for obj in sorted(items, key=_order):
        obj.setdefault("apiVersion", res.api_version)
        obj.setdefault("kind", res.kind)
        if _finished(res, obj):
            out.left_out += 1
            continue
        if res is r.PODS and namespace is not None and (obj.get("metadata") or {}).get("namespace") != namespace:
            if (obj.get("spec") or {}).get("nodeName"):
                out.objects.append(_holdings(obj))  # another namespace's pod: only what it holds on its node
            else:
                out.left_out += 1
            continue
        out.objects.append(clean(obj))
    return out


def _take_config_maps(client: KubeClient, snap: Snapshot,
                      progress: Callable[[ResourceType], None] | None) -> Taken:
    """NVIDIA's ConfigMaps: named by a ClusterPolicy, or recognised by their data. Nothing else is kept."""
    out = Taken(r.CONFIG_MAPS)
    named: set[str] = set()
    for t in snap.taken:
        if t.resource.kind == "ClusterPolicy":
            for policy in t.objects:
                named |= config_map_names(policy)
    if progress is not None:
        progress(r.CONFIG_MAPS)
    try:
        items = client.list_all(r.CONFIG_MAPS).items
    except Forbidden:
        snap.skipped.append("ConfigMap.core (forbidden: NVIDIA's device-plugin and MIG configurations not read)")
        return out
    for obj in sorted(items, key=_order):
        name = str((obj.get("metadata") or {}).get("name") or "")
        data = obj.get("data") if isinstance(obj.get("data"), Mapping) else {}
        assert isinstance(data, Mapping)
        if name in named or any(nvidia_config_kind(v) for v in data.values() if isinstance(v, str)):
            obj.setdefault("apiVersion", "v1")
            obj.setdefault("kind", "ConfigMap")
            out.objects.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(obj), "data": dict(data)})
    return out


def _order(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _condition_true(obj: Mapping[str, Any], kinds: tuple[str, ...]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(isinstance(c, Mapping) and c.get("type") in kinds and c.get("status") == "True" for c in conditions)


def _finished(res: ResourceType, obj: Mapping[str, Any]) -> bool:
    if res is r.PODS:
        return (obj.get("status") or {}).get("phase") in _TERMINAL
    if res.group == "batch" and res.kind == "Job":
        return _condition_true(obj, ("Complete", "Failed"))
    if res is r.KUEUE_WORKLOADS:
        return _condition_true(obj, ("Finished",))
    return False


# --- cleaning ------------------------------------------------------------------------------------------------


def _meta(obj: Mapping[str, Any]) -> JsonDict:
    meta = obj.get("metadata") or {}
    out = {k: meta[k] for k in _KEPT_META if meta.get(k) not in (None, {}, [])}
    notes = out.get("annotations")
    if isinstance(notes, Mapping):
        kept = {k: v for k, v in notes.items() if k not in _NOISE_ANNOTATIONS}
        if kept:
            out["annotations"] = kept
        else:
            out.pop("annotations")
    return out


def _container(c: Any) -> Any:
    if not isinstance(c, Mapping):
        return c
    return {k: c[k] for k in _KEPT_CONTAINER if k in c}


def clean_pod_spec(spec: Mapping[str, Any]) -> JsonDict:
    out: JsonDict = {k: spec[k] for k in _KEPT_POD_SPEC if k in spec}
    for key in ("containers", "initContainers"):
        if isinstance(spec.get(key), list):
            out[key] = [_container(c) for c in spec[key]]
    return out


def _clean_templates(value: Any) -> Any:
    """Every pod template inside a workload object's spec, reduced as a pod's spec is (wherever it nests:
    Job.spec.template, JobSet's replicatedJobs, PyTorchJob's replicaSpecs, a Workload's podSets, ...)."""
    if isinstance(value, list):
        return [_clean_templates(v) for v in value]
    if not isinstance(value, Mapping):
        return value
    if isinstance(value.get("containers"), list):
        return clean_pod_spec(value)
    return {k: _clean_templates(v) for k, v in value.items()}


def _clean_node_status(status: Mapping[str, Any]) -> JsonDict:
    out = {k: status[k] for k in ("capacity", "allocatable") if k in status}
    ready = [{"type": "Ready", "status": c.get("status")} for c in status.get("conditions") or []
             if isinstance(c, Mapping) and c.get("type") == "Ready"]
    if ready:
        out["conditions"] = ready
    return out


def clean(obj: Mapping[str, Any]) -> JsonDict:
    """``obj`` without what scheduling never reads (see the module doc)."""
    out: JsonDict = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": _meta(obj)}
    kind = obj.get("kind")
    spec, status = obj.get("spec"), obj.get("status")
    if kind == "Pod":
        out["spec"] = clean_pod_spec(spec) if isinstance(spec, Mapping) else {}
        phase = (status or {}).get("phase") if isinstance(status, Mapping) else None
        if phase:
            out["status"] = {"phase": phase}
        return out
    if kind == "Node":
        if isinstance(spec, Mapping):
            node_spec = {k: spec[k] for k in ("taints", "unschedulable") if k in spec}
            if node_spec:
                out["spec"] = node_spec
        if isinstance(status, Mapping):
            out["status"] = _clean_node_status(status)
        return out
    for key, value in obj.items():
        if key in ("apiVersion", "kind", "metadata"):
            continue
        out[key] = _clean_templates(value) if key == "spec" else value
    return out


def _holdings(obj: Mapping[str, Any]) -> JsonDict:
    """A bound pod of another namespace, as what it holds on its node: its resources and node, nothing else."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}

    def containers(key: str) -> list[Any]:
        items = spec.get(key)
        return [{"name": c.get("name"), "resources": c.get("resources") or {}} for c in items
                if isinstance(c, Mapping)] if isinstance(items, list) else []

    out: JsonDict = {"apiVersion": "v1", "kind": "Pod",
                     "metadata": {k: meta[k] for k in ("name", "namespace", "uid") if k in meta},
                     "spec": {"nodeName": spec.get("nodeName"), "schedulerName": spec.get("schedulerName"),
                              "containers": containers("containers")}}
    if containers("initContainers"):
        out["spec"]["initContainers"] = containers("initContainers")
    notes = {k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith("gpufleet.io/")}
    if notes:
        out["metadata"]["annotations"] = notes  # the devices it holds, when gpufleet recorded them
    phase = (obj.get("status") or {}).get("phase")
    if phase:
        out["status"] = {"phase": phase}
    return out


# --- writing -------------------------------------------------------------------------------------------------


def file_name(res: ResourceType) -> str:
    return f"{res.plural}.{res.group}.yaml" if res.group else f"{res.plural}.yaml"


def documents(taken: Taken) -> Iterator[str]:
    for obj in taken.objects:
        yield yaml.safe_dump(obj, sort_keys=False, allow_unicode=True, default_flow_style=False, width=120)


def render(taken: Taken) -> str:
    buf = io.StringIO()
    for i, doc in enumerate(documents(taken)):
        if i:
            buf.write("---\n")
        buf.write(doc)
    return buf.getvalue()


@dataclass(frozen=True, slots=True)
class Written:
    file: str
    kind: str
    count: int
    left_out: int
    bytes: int


def write(snap: Snapshot, folder: Path) -> list[Written]:
    """One file per kind in ``folder`` (created), one document per object; what was written, kind by kind."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for t in snap.taken:
        kind = f"{t.resource.kind}.{t.resource.group or 'core'}"
        if not t.objects:  # all left out: said in the table, no empty file
            out.append(Written("", kind, 0, t.left_out, 0))
            continue
        text = render(t)
        path = folder / file_name(t.resource)
        path.write_text(text)
        out.append(Written(path.name, kind, len(t.objects), t.left_out, len(text.encode())))
    return out


def stream(snap: Snapshot) -> str:
    """Every document of the snapshot as one YAML stream (``-o -``)."""
    return "---\n".join(text for t in snap.taken if (text := render(t)))


def over_limits(total_bytes: int, documents: int) -> str | None:
    """Why ``plan`` would not read the whole snapshot in one run; None when it would."""
    if total_bytes > MAX_INPUT_BYTES:
        return (f"the snapshot is {total_bytes / 2**20:.1f} MiB; plan and simulate read at most "
                f"{MAX_INPUT_BYTES // 2**20} MiB per run (docs/limits.md): take one namespace at a time (-n)")
    if documents > MAX_DOCUMENTS:
        return (f"the snapshot holds {documents:,} documents; plan and simulate read at most {MAX_DOCUMENTS:,} "
                "per run (docs/limits.md): take one namespace at a time (-n)")
    return None
