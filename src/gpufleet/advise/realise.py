"""A proposal made concrete: the documents of the cluster it describes, and the demand asking what it says.

* A hardware pool of NodePools becomes one NodePool per configuration it gets (a NodePool whose configuration
  the proposal keeps keeps its name; the others are ``<first NodePool>-<configuration>``), each with its MIG
  layout, its sharing and the labels of :mod:`gpufleet.advise.nvidia` (``nvidia.com/mig.config``,
  ``nvidia.com/device-plugin.config``, ``gpu-mode``).
* Nodes of the input (a snapshot, an openb node list) keep their names: each is written as a Node with the
  devices, GPU Feature Discovery labels and gpufleet inventory its new configuration gives; a node keeps its
  configuration where the proposal has room for it (the fewest nodes change).
* The queues: new ResourceFlavors, rewritten ClusterQueues, Cohorts without their own quota
  (:mod:`gpufleet.advise.queues`); every other document of the input as it is.
* The demand: each class's pods ask for the device its form names (:func:`rewrite_jobs`).

The documents go through the same loader as any input (:func:`gpufleet.api.manifests.build`), so what the
simulator judges is what the files say.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpufleet.advise.contract import ClassForm, NodeConfig, PoolConfig, Proposal
from gpufleet.advise.demand import DemandClass
from gpufleet.advise.fleet import MODE_LABEL, HardwarePool, layout_of
from gpufleet.advise.inputs import NVIDIA_KINDS, AdviseInput
from gpufleet.advise.nvidia import node_labels, sharing_of
from gpufleet.advise.queues import (
    Flavor,
    cluster_queue_documents,
    cluster_queue_of,
    cohort_documents,
    flavor_documents,
    flavors_of,
    is_gpu_resource,
)
from gpufleet.api.errors import Problems
from gpufleet.api.inventory import format_inventory, nvlink_pairs
from gpufleet.api.kinds import format_amount
from gpufleet.api.manifests import Manifests, build
from gpufleet.api.nvidia_config import MIG_CONFIG_LABEL
from gpufleet.api.objects import (
    GPU_FRACTION_ANNOTATION,
    GPU_INVENTORY_ANNOTATION,
    KAI_FRACTION_ANNOTATION,
    GpuDemand,
    Node,
    PodTemplate,
)
from gpufleet.api.source import Document
from gpufleet.cluster.workloads import PodSet, WorkloadPod
from gpufleet.gpu.catalog import DEFAULT_CATALOG, GpuModel
from gpufleet.gpu.constants import FRACTION_RESOURCE, GPU, SHARED_GPU
from gpufleet.gpu.mig import profile_from_resource_name
from gpufleet.gpu.sharing import advertised_resources, gfd_labels, make_gpus
from gpufleet.sim.model import SimJob

_REPLACED_KINDS = {"NodePool", "Node", "ClusterQueue", "Cohort"}
# Labels a configuration writes on a GPU node, replaced when the configuration changes.
_GPU_LABEL_PREFIXES = ("nvidia.com/gpu.", "nvidia.com/mig", "nvidia.com/mps.", "nvidia.com/device-plugin.")


@dataclass(slots=True)
class Realised:
    documents: list[Document]  # the whole input as the proposal has it (jobs aside)
    cluster: list[dict[str, Any]]  # the NodePools and Nodes written
    flavors: list[dict[str, Any]]
    cluster_queues: list[dict[str, Any]]
    cohorts: list[dict[str, Any]]
    node_labels: dict[str, dict[str, str]] = field(default_factory=dict)  # Nodes of the input -> their labels
    flavor_objects: dict[str, Flavor] = field(default_factory=dict)


def assign_nodes(pool: HardwarePool, counts: Mapping[NodeConfig, int]) -> dict[NodeConfig, list[str]]:
    """Which nodes get which configuration: a node keeps its own where there is room, the rest in name order."""
    left = dict(counts)
    out: dict[NodeConfig, list[str]] = {c: [] for c in counts}
    rest = []
    for node in sorted(pool.names):
        config = pool.given[node]
        if left.get(config, 0) > 0:
            out[config].append(node)
            left[config] -= 1
        else:
            rest.append(node)
    for config in sorted(left):
        for _ in range(left[config]):
            out[config].append(rest.pop(0))
    return {c: nodes for c, nodes in out.items() if nodes}


def find_document(docs: Sequence[Document], kind: str, name: str) -> dict[str, Any] | None:
    """The first document of ``kind`` named ``name``, as read."""
    for doc in docs:
        data = doc.data
        if isinstance(data, dict) and data.get("kind") == kind and (data.get("metadata") or {}).get("name") == name:
            return data
    return None


def _layout_text(pool: HardwarePool, config: NodeConfig) -> str:
    return ",".join(str(p) for p in layout_of(pool.model, config))


def node_pool_documents(pool: HardwarePool, groups: Sequence[PoolConfig],
                        docs: Sequence[Document]) -> list[dict[str, Any]]:
    """The NodePools of a pool of NodePools under a proposal (module doc)."""
    sources = {name: find_document(docs, "NodePool", name) for name in pool.node_pools}
    given_config = {name: {pool.given[n.name] for n in pool.nodes if n.pool == name} for name in pool.node_pools}
    used: set[str] = set()
    out = []
    first = pool.node_pools[0]
    for group in groups:
        keep = next((name for name in pool.node_pools if name not in used and given_config[name] == {group.config}),
                    None)
        template = sources.get(keep or first)
        if template is None:
            raise ValueError(f"NodePool {keep or first} is not among the input's documents")
        data = copy.deepcopy(template)
        name = keep or f"{first}-{group.config.slug}"
        used.add(name)
        data["metadata"] = {**data.get("metadata", {}), "name": name}
        spec = data.setdefault("spec", {})
        spec["count"] = len(group.nodes)
        if keep is None:
            spec["namePrefix"] = f"{spec.get('namePrefix', first)}-{group.config.slug}"
        gpu = spec.setdefault("gpu", {})
        gpu.pop("migLayout", None)
        spec.pop("sharing", None)
        if group.config.mode == "mig":
            gpu["migLayout"] = _layout_text(pool, group.config)
            spec["sharing"] = {"migStrategy": "mixed"}
        elif group.config.mode == "time-sliced":
            spec["sharing"] = {"timeSlicing": {"renameByDefault": True, "failRequestsGreaterThanOne": True,
                                               "resources": [{"name": GPU, "replicas": group.config.replicas}]}}
        spec["labels"] = {**(spec.get("labels") or {}), **node_labels(group.config)}
        out.append(data)
    return out


def node_document(node: Node, pool: HardwarePool | None, config: NodeConfig | None) -> dict[str, Any]:
    """A Node of the input as a document; with a configuration, the devices, labels and inventory it gives."""
    labels = dict(node.labels)
    annotations: dict[str, str] = {}
    resources = {r: a for r, a in node.allocatable.items() if not (pool and config and is_gpu_resource(r))}
    capacity = {r: a for r, a in node.capacity.items() if not (pool and config and is_gpu_resource(r))}
    if pool is not None and config is not None:
        labels = {k: v for k, v in labels.items()
                  if not k.startswith(_GPU_LABEL_PREFIXES) and k not in (MODE_LABEL, MIG_CONFIG_LABEL)}
        layout = layout_of(pool.model, config) if config.mode == "mig" else None
        gpus = make_gpus(node.name, pool.model, pool.gpus_per_node, layout)
        sharing = sharing_of(config)
        offered = advertised_resources(gpus, sharing)
        resources.update(offered)
        capacity.update(offered)
        labels.update(gfd_labels(gpus, sharing))
        labels["nvidia.com/gpu.present"] = "true"
        labels.update(node_labels(config))
        links = dict(node.gpus.nvlinks) if node.gpus is not None else nvlink_pairs(
            len(gpus), pool.model.nvlinks_per_pair, "all" if "SXM" in pool.model.key else "pairs")
        annotations[GPU_INVENTORY_ANNOTATION] = format_inventory(gpus, sharing, links)
    elif node.gpus is not None:
        annotations[GPU_INVENTORY_ANNOTATION] = format_inventory(
            make_gpus(node.name, _catalog_model(node), node.gpus.count), node.gpus.sharing, dict(node.gpus.nvlinks))
    status = {"capacity": {r: format_amount(r, a) for r, a in sorted(capacity.items())},
              "allocatable": {r: format_amount(r, a) for r, a in sorted(resources.items())},
              "conditions": [{"type": "Ready", "status": "True" if node.ready else "False"}]}
    spec: dict[str, Any] = {}
    if node.taints:
        spec["taints"] = [{"key": t.key, **({"value": t.value} if t.value else {}), "effect": t.effect}
                          for t in node.taints]
    if node.unschedulable:
        spec["unschedulable"] = True
    meta: dict[str, Any] = {"name": node.name, "labels": dict(sorted(labels.items()))}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": spec, "status": status}


def _catalog_model(node: Node) -> GpuModel:
    assert node.gpus is not None
    return DEFAULT_CATALOG.resolve(node.gpus.model, node.gpus.memory_mib)


def realise(inp: AdviseInput, pools: Sequence[HardwarePool], proposal: Proposal,
            classes: Sequence[DemandClass]) -> Realised:
    """The documents of ``proposal`` (module doc)."""
    by_name = {p.name: p for p in pools}
    groups: dict[str, list[PoolConfig]] = {}
    for g in proposal.pools:
        groups.setdefault(g.pool, []).append(g)
    cluster: list[dict[str, Any]] = []
    labels: dict[str, dict[str, str]] = {}
    configured: dict[str, tuple[HardwarePool, NodeConfig]] = {}
    for pool in pools:
        if pool.node_pools:
            cluster += node_pool_documents(pool, groups.get(pool.name, []), inp.docs)
            continue
        for g in groups.get(pool.name, []):
            for name in g.nodes:
                configured[name] = (pool, g.config)
                labels[name] = node_labels(g.config)
    in_pools = {n.name for p in pools if p.node_pools for n in p.nodes}
    written_pools = {name for p in pools for name in p.node_pools}
    for node in inp.manifests.nodes:
        if node.name in in_pools or (node.pool is not None and node.pool in written_pools):
            continue
        pool_config = configured.get(node.name)
        cluster.append(node_document(node, *(pool_config or (None, None))))
    flavors = flavors_of(by_name, proposal.pools)
    flavor_docs = flavor_documents(flavors)
    queue_of = cluster_queue_of(classes, {(lq.meta.namespace or "", lq.meta.name): lq.cluster_queue
                                          for lq in inp.manifests.local_queues})
    queues = cluster_queue_documents(inp.docs, flavors, classes, proposal.forms, queue_of, proposal.quotas)
    cohorts = cohort_documents(inp.docs)
    rewritten = {d["metadata"]["name"] for d in queues}
    documents: list[Document] = []
    for doc in inp.docs:
        data = doc.data
        kind = data.get("kind") if isinstance(data, dict) else None
        if kind in ("NodePool", "Node", "Cohort") or (isinstance(data, dict) and (
                str(data.get("apiVersion")), str(kind)) in NVIDIA_KINDS):
            continue
        if kind == "ClusterQueue" and (data.get("metadata") or {}).get("name") in rewritten:
            continue
        documents.append(doc)
    existing = {(d.data.get("metadata") or {}).get("name") for d in documents
                if isinstance(d.data, dict) and d.data.get("kind") == "ResourceFlavor"}
    made = [*cluster, *(f for f in flavor_docs if f["metadata"]["name"] not in existing), *queues, *cohorts]
    documents += [Document(data=d, file="<gpufleet advise>", line=0, index=i) for i, d in enumerate(made)]
    return Realised(documents, cluster, flavor_docs, queues, cohorts, labels, flavors)


def manifests_of(realised: Realised) -> Manifests:
    """The realised documents read as any input is; an error in them is a bug of the advisor, said as such."""
    problems = Problems()
    manifests = build(realised.documents, problems)
    if problems.errors:
        raise ValueError("gpufleet advise wrote documents its own loader refuses (a bug): "
                         + "; ".join(str(e) for e in problems.errors[:5]))
    return manifests


# ---- the demand -----------------------------------------------------------------------------------------------

def _demand_for(old: GpuDemand, resource: str, count: int) -> GpuDemand:
    if resource == GPU:
        return GpuDemand("gpu", count, GPU, memory_mib=old.memory_mib, models=old.models)
    if resource == SHARED_GPU:
        return GpuDemand("shared", count, SHARED_GPU, memory_mib=old.memory_mib, models=old.models)
    profile = profile_from_resource_name(resource)
    return GpuDemand("mig", count, resource, mig_profile=profile, memory_mib=old.memory_mib, models=old.models)


def _template_for(t: PodTemplate, resource: str, count: int) -> PodTemplate:
    requests = {r: v for r, v in t.requests.items() if not is_gpu_resource(r)}
    limits = {r: v for r, v in t.limits.items() if not is_gpu_resource(r)}
    requests[resource] = count
    limits[resource] = count
    annotations = {k: v for k, v in t.annotations.items()
                   if k not in (GPU_FRACTION_ANNOTATION, KAI_FRACTION_ANNOTATION)}
    selector = {k: v for k, v in t.node_selector.items() if k != MODE_LABEL}
    return replace(t, requests=requests, limits=limits, annotations=annotations, node_selector=selector,
                   gpu=_demand_for(t.gpu, resource, count))


def rewrite_jobs(jobs: Sequence[SimJob], classes: Sequence[DemandClass], forms: Sequence[ClassForm]) -> list[SimJob]:
    """The demand with each class's GPU pods asking for its form's device; classes whose form is unchanged and
    pods without GPUs are as they were (the same objects)."""
    form_of: dict[int, ClassForm] = {}
    for k, c in enumerate(classes):
        if forms[k].changed and forms[k].resource != FRACTION_RESOURCE:
            for job in c.jobs:
                form_of[id(job)] = forms[k]
    out = []
    for job in jobs:
        form = form_of.get(id(job))
        if form is None:
            out.append(job)
            continue
        cache: dict[int, PodTemplate] = {}

        def new(t: PodTemplate, form: ClassForm = form, cache: dict[int, PodTemplate] = cache) -> PodTemplate:
            if not t.gpu.wants_gpu:
                return t
            if id(t) not in cache:
                cache[id(t)] = _template_for(t, form.resource, form.count)
            return cache[id(t)]

        w = job.workload
        workload = replace(w, pod_sets=[PodSet(ps.name, ps.count, new(ps.template), ps.min_count) for ps in w.pod_sets],
                           pods=[WorkloadPod(p.key, new(p.template), p.pod_set, p.node_name, p.phase) for p in w.pods])
        out.append(replace(job, workload=workload))
    return out
