"""ResourceFlavors and ClusterQueue quotas that match a proposal's devices, and the Kueue rules they keep.

* **Flavors**: one per GPU model and mode the proposal has nodes in (``a100-sxm4-80gb-mig``,
  ``l40s-time-sliced``), selecting its nodes by GPU Feature Discovery's product label and the guide's
  ``gpu-mode`` label, which the proposal sets on every GPU node.
* **ClusterQueues** whose LocalQueues a class of the demand uses get their ``resourceGroups`` rewritten: one group
  covering the resources their pods request (CPU, memory and the rest, then the GPU resources the proposal has
  them ask), a flavor for every model and mode that offers those resources and that their pods accept, the
  flavor the plan uses most first. Everything else in the spec (cohort, preemption, namespace selector,
  queueing strategy, fair sharing...) is kept. ClusterQueues no class uses are left as written.
* **Quotas**: each flavor's GPU devices are shared out among the ClusterQueues that cover them, in proportion to
  what the plan reserves for each queue's classes there (largest remainders), so that the nominal quotas of a
  resource in a flavor add up to exactly the devices its nodes offer: no quota promises a device that does
  not exist, and no device is left to nobody. Queues in a cohort borrow what another leaves idle, as Kueue
  lets them. CPU, memory and other resources get the flavor's node totals: GPUs are what the quotas ration.
* A **Cohort** object's own ``resourceGroups`` are dropped: the capacity they held is in the members' quotas.

:func:`check_kueue` checks the written objects against Kueue's rules (one group per resource, one group per
flavor, every flavor listing exactly its group's resources in order, non-negative quotas, flavors that
exist, at most 16 groups and 64 flavors) and against the proposal (quotas of a resource in a flavor add up
to its devices; every class's resource is covered by its queue in a flavor that offers it).
"""

from __future__ import annotations

import copy
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpufleet.advise.contract import ClassForm, Mode, NodeConfig, PoolConfig, QuotaLine
from gpufleet.advise.demand import DemandClass
from gpufleet.advise.fleet import MODE_LABEL, HardwarePool
from gpufleet.api.objects import PRODUCT_LABEL
from gpufleet.api.source import Document
from gpufleet.gpu.catalog import GpuModel
from gpufleet.gpu.constants import FRACTION_RESOURCE, GPU, MILLI

KUEUE_API = "kueue.x-k8s.io/v1beta1"
MAX_RESOURCE_GROUPS = 16
MAX_FLAVORS = 64
_GPU_PREFIX = "nvidia.com/"


def is_gpu_resource(name: str) -> bool:
    return name.startswith(_GPU_PREFIX) or name == FRACTION_RESOURCE


@dataclass(slots=True)
class Flavor:
    name: str
    model: GpuModel
    mode: Mode
    capacity: dict[str, int] = field(default_factory=dict)  # GPU resource -> devices (gpu-milli in thousandths)
    gpus_per_node: int = 0  # the most GPUs one of its nodes has
    host: dict[str, int] = field(default_factory=dict)  # other allocatable resources -> node totals

    @property
    def node_labels(self) -> dict[str, str]:
        return {PRODUCT_LABEL: self.model.product, MODE_LABEL: self.mode}


def flavor_name(model: GpuModel, mode: Mode) -> str:
    slug = re.sub(r"[^a-z0-9.-]+", "-", model.key.lower()).strip("-.")
    return f"{slug}-{mode}"


def flavors_of(pools: Mapping[str, HardwarePool], groups: Sequence[PoolConfig]) -> dict[str, Flavor]:
    """The flavors of a proposal's node groups (module doc), with their devices and node totals."""
    out: dict[str, Flavor] = {}
    for group in groups:
        pool = pools[group.pool]
        name = flavor_name(pool.model, group.config.mode)
        flavor = out.setdefault(name, Flavor(name, pool.model, group.config.mode))
        flavor.gpus_per_node = max(flavor.gpus_per_node, pool.gpus_per_node)
        for resource, per_gpu in group.config.devices_per_gpu().items():
            flavor.capacity[resource] = flavor.capacity.get(resource, 0) + per_gpu * pool.gpus_per_node * len(
                group.nodes)
        if group.config.mode == "exclusive":
            flavor.capacity[FRACTION_RESOURCE] = flavor.capacity.get(FRACTION_RESOURCE, 0) + \
                MILLI * pool.gpus_per_node * len(group.nodes)
        sample = pool.nodes[0]
        for resource, amount in sample.allocatable.items():
            if not is_gpu_resource(resource):
                flavor.host[resource] = flavor.host.get(resource, 0) + amount * len(group.nodes)
    return out


def flavor_of(pool: HardwarePool, config: NodeConfig) -> str:
    return flavor_name(pool.model, config.mode)


def _requested(c: DemandClass) -> list[str]:
    names: set[str] = set()
    for job in c.jobs[:50]:
        for pod in job.workload.pods:
            names |= {r for r, v in pod.template.requests.items() if v > 0 and not is_gpu_resource(r)}
    first = [r for r in ("cpu", "memory") if r in names]
    return first + sorted(names - set(first))


def cluster_queue_of(classes: Sequence[DemandClass], local_queues: Mapping[tuple[str, str], str]) -> dict[int, str]:
    """Class index -> the ClusterQueue its LocalQueue points to (classes in no queue are left out)."""
    out = {}
    for k, c in enumerate(classes):
        if c.queue is not None and (c.namespace, c.queue) in local_queues:
            out[k] = local_queues[(c.namespace, c.queue)]
    return out


def synthesise_quotas(flavors: Mapping[str, Flavor], classes: Sequence[DemandClass], forms: Sequence[ClassForm],
                      reserved: Mapping[tuple[int, str, str], float], queue_of: Mapping[int, str]) -> list[QuotaLine]:
    """Nominal GPU quotas per ClusterQueue, flavor and resource (module doc); ``reserved`` is the plan's
    (class, flavor, resource) -> devices at the peak."""
    users: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)  # (flavor, resource) -> cq -> planned
    for k, form in enumerate(forms):
        cq = queue_of.get(k)
        if cq is None:
            continue
        for f in _flavors_for(flavors, classes[k], form.resource):
            users[(f, form.resource)].setdefault(cq, 0.0)
    for (k, f, resource), devices in reserved.items():
        cq = queue_of.get(k)
        if cq is not None and (f, resource) in users:
            users[(f, resource)][cq] = users[(f, resource)].get(cq, 0.0) + devices
    lines: list[QuotaLine] = []
    for (f, resource), planned in sorted(users.items()):
        capacity = flavors[f].capacity.get(resource, 0)
        for cq, n in _apportion(capacity, planned).items():
            lines.append(QuotaLine(cq, f, resource, n))
    return lines


def _apportion(total: int, weights: Mapping[str, float]) -> dict[str, int]:
    """``total`` shared out in proportion to ``weights`` by largest remainders (ties by name); all of it to the
    heaviest (else the first) when no weight is positive."""
    names = sorted(weights)
    positive = sum(max(w, 0.0) for w in weights.values())
    if positive <= 0:
        return {n: (total if i == 0 else 0) for i, n in enumerate(names)}
    exact = {n: total * max(weights[n], 0.0) / positive for n in names}
    out = {n: int(exact[n]) for n in names}
    left = total - sum(out.values())
    for n in sorted(names, key=lambda n: (-(exact[n] - out[n]), n))[:left]:
        out[n] += 1
    return out


def _flavors_for(flavors: Mapping[str, Flavor], c: DemandClass, resource: str) -> list[str]:
    """Flavors that offer ``resource`` on a model the class accepts, on nodes with room for one of its pods,
    cheapest first."""
    found = [f for f in flavors.values() if f.capacity.get(resource, 0) > 0 and c.accepts(f.model.key)
             and (c.single_device or resource != GPU or f.gpus_per_node >= c.count)]
    return [f.name for f in sorted(found, key=lambda f: (f.model.price_per_hour, f.name))]


def flavor_documents(flavors: Mapping[str, Flavor]) -> list[dict[str, Any]]:
    return [{"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": f.name},
             "spec": {"nodeLabels": dict(f.node_labels)}} for f in flavors.values()]


def cluster_queue_documents(given: Sequence[Document], flavors: Mapping[str, Flavor],
                            classes: Sequence[DemandClass], forms: Sequence[ClassForm],
                            queue_of: Mapping[int, str], quotas: Sequence[QuotaLine]) -> list[dict[str, Any]]:
    """The given ClusterQueue documents that a class uses, with their resourceGroups rewritten (module doc)."""
    nominal = {(q.cluster_queue, q.flavor, q.resource): q.nominal for q in quotas}
    planned: dict[tuple[str, str], int] = defaultdict(int)
    for q in quotas:
        planned[(q.cluster_queue, q.flavor)] += q.nominal
    out: list[dict[str, Any]] = []
    for doc in given:
        data = doc.data
        if not isinstance(data, dict) or data.get("kind") != "ClusterQueue":
            continue
        name = str((data.get("metadata") or {}).get("name", ""))
        mine = [k for k, cq in queue_of.items() if cq == name]
        if not mine:
            continue
        host = list(dict.fromkeys(r for k in mine for r in _requested(classes[k])))
        gpu = sorted({forms[k].resource for k in mine})
        names = list(dict.fromkeys(f for k in mine for f in _flavors_for(flavors, classes[k], forms[k].resource)))
        order = {f: i for i, f in enumerate(names)}
        names.sort(key=lambda f: (-planned.get((name, f), 0), order[f]))
        group_flavors = []
        for f in names[:MAX_FLAVORS]:
            resources = [{"name": r, "nominalQuota": flavors[f].host.get(r, 0)} for r in host]
            resources += [{"name": r, "nominalQuota": nominal.get((name, f, r), 0)} for r in gpu]
            group_flavors.append({"name": f, "resources": _quantities(resources)})
        new = copy.deepcopy(data)
        spec = new.setdefault("spec", {})
        spec["resourceGroups"] = [{"coveredResources": host + gpu, "flavors": group_flavors}]
        out.append(new)
    return out


def _quantities(resources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Quotas written as Kubernetes quantities: memory in Gi where it divides, CPU in cores or millicores."""
    out = []
    for r in resources:
        amount = int(r["nominalQuota"])
        if r["name"] == "memory":
            value: Any = f"{amount // 2**30}Gi" if amount % 2**30 == 0 else str(amount)
        elif r["name"] == "cpu":
            value = amount // 1000 if amount % 1000 == 0 else f"{amount}m"
        else:
            value = amount
        out.append({"name": r["name"], "nominalQuota": value})
    return out


def cohort_documents(given: Sequence[Document]) -> list[dict[str, Any]]:
    """The given Cohort objects without their own resourceGroups (module doc)."""
    out = []
    for doc in given:
        data = doc.data
        if isinstance(data, dict) and data.get("kind") == "Cohort":
            new = copy.deepcopy(data)
            if isinstance(new.get("spec"), dict):
                new["spec"].pop("resourceGroups", None)
            out.append(new)
    return out


def check_kueue(flavor_docs: Sequence[Mapping[str, Any]], queue_docs: Sequence[Mapping[str, Any]],
                flavors: Mapping[str, Flavor], quotas: Sequence[QuotaLine], classes: Sequence[DemandClass],
                forms: Sequence[ClassForm], queue_of: Mapping[int, str]) -> list[str]:
    """Every way the written objects break Kueue's rules or miss the proposal (module doc); empty when none."""
    problems: list[str] = []
    defined = {str(d["metadata"]["name"]) for d in flavor_docs}
    for doc in queue_docs:
        name = doc["metadata"]["name"]
        groups = doc.get("spec", {}).get("resourceGroups", [])
        if len(groups) > MAX_RESOURCE_GROUPS:
            problems.append(f"ClusterQueue {name}: {len(groups)} resource groups, Kueue allows {MAX_RESOURCE_GROUPS}")
        seen_resources: set[str] = set()
        seen_flavors: set[str] = set()
        for g in groups:
            covered = list(g.get("coveredResources", []))
            for r in covered:
                if r in seen_resources:
                    problems.append(f"ClusterQueue {name}: {r} is covered by two resource groups")
                seen_resources.add(r)
            if len(g.get("flavors", [])) > MAX_FLAVORS:
                problems.append(f"ClusterQueue {name}: more than {MAX_FLAVORS} flavors in a group")
            for f in g.get("flavors", []):
                if f["name"] in seen_flavors:
                    problems.append(f"ClusterQueue {name}: flavor {f['name']} is in two resource groups")
                seen_flavors.add(f["name"])
                if f["name"] not in defined:
                    problems.append(f"ClusterQueue {name}: flavor {f['name']} is not defined")
                listed = [r["name"] for r in f.get("resources", [])]
                if listed != covered:
                    problems.append(f"ClusterQueue {name}: flavor {f['name']} lists {listed}, not the group's "
                                    f"covered resources {covered} in order")
                for r in f.get("resources", []):
                    value = r["nominalQuota"]
                    if isinstance(value, int) and value < 0:
                        problems.append(f"ClusterQueue {name}: negative quota of {r['name']} in {f['name']}")
    by: dict[tuple[str, str], int] = defaultdict(int)
    for q in quotas:
        by[(q.flavor, q.resource)] += q.nominal
    for (f, r), total in sorted(by.items()):
        capacity = flavors[f].capacity.get(r, 0)
        if total != capacity:
            problems.append(f"quotas of {r} in flavor {f} add up to {total}, its nodes offer {capacity}")
    covered_by = {(d["metadata"]["name"], r, fl["name"]) for d in queue_docs
               for g in d.get("spec", {}).get("resourceGroups", []) for fl in g.get("flavors", [])
               for r in g.get("coveredResources", [])}
    for k, form in enumerate(forms):
        cq = queue_of.get(k)
        if cq is None:
            continue
        offered = [f for f in flavors.values() if f.capacity.get(form.resource, 0) > 0
                   and (cq, form.resource, f.name) in covered_by]
        if not offered:
            problems.append(f"class {classes[k].name} asks {form.resource}, which ClusterQueue {cq} does not cover "
                            "in any flavor that offers it")
    return problems
