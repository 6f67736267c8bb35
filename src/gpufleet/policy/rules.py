"""Every lint rule, each a small object in :data:`RULES` (the house style of ``scheduling/placement/profiles.py``).

A rule's check reads one :class:`~gpufleet.policy.model.Subject` (and the :class:`~gpufleet.policy.cluster
.ClusterView`) and yields :class:`~gpufleet.policy.model.Hit` s; the engine adds the rule, the object and where it
is written. Rules that need nothing but the object also carry their CEL form (:class:`~gpufleet.policy.cel
.CelRule`), exported as ValidatingAdmissionPolicies. docs/lint.md is written from this list (a test keeps them
equal).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from gpufleet.api.objects import (
    GPU,
    POD_GROUP_LABEL,
    ClusterQueue,
    GpuDemand,
    PodTemplate,
    ResourceFlavor,
)
from gpufleet.api.objects import VISIBLE_DEVICES_ENV as ENV_NAME
from gpufleet.api.objects import VISIBLE_DEVICES_FIELD_PATH as FIELD_PATH
from gpufleet.api.quantity import QuantityError, parse_quantity
from gpufleet.api.workloadkinds.common import queue_label
from gpufleet.cluster.free_devices import demand_resource, device_kind
from gpufleet.cluster.state import NodeState
from gpufleet.gpu.catalog import DEFAULT_CATALOG
from gpufleet.gpu.constants import FRACTION_RESOURCE
from gpufleet.policy import cel, multipod
from gpufleet.policy.cel import CelRule
from gpufleet.policy.cluster import ClusterView
from gpufleet.policy.containers import (
    GPU_PREFIX,
    containers,
    declares,
    gpu_containers,
    gpu_resources,
    is_gpu_pod,
    mapping,
    named,
    resources,
)
from gpufleet.policy.images import images_of, known_memory_mib
from gpufleet.policy.model import Hit, PlannedPods, Rule, Subject

# ---- what the rules share ------------------------------------------------------------------------------------------

# Node labels that name a GPU model or what decides it: a selector or affinity on one of them is a model choice.
MODEL_LABELS = frozenset({
    "nvidia.com/gpu.product", "nvidia.com/gpu.family", "nvidia.com/gpu.machine", "nvidia.com/gpu.memory",
    "nvidia.com/gpu.compute.major", "cloud.google.com/gke-accelerator", "karpenter.k8s.aws/instance-gpu-name",
    "node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type", "eks.amazonaws.com/nodegroup",
    "cloud.google.com/gke-nodepool", "kubernetes.azure.com/agentpool",
})
# Labels or annotations by which a pod template joins an all-or-nothing pod group of some scheduler.
POD_GROUP_KEYS = (POD_GROUP_LABEL, "scheduling.x-k8s.io/pod-group", "pod-group.scheduling.sigs.k8s.io",
                  "scheduling.k8s.io/group-name", "pod-group-name")
GANG_SCHEDULERS = ("kai-scheduler", "volcano")  # they group a job's pods into one pod group themselves
# Kinds that train (or run batch work to completion): a time-slice replica is the wrong device for them.
TRAINING_KINDS = frozenset({
    ("batch", "Job"), ("batch", "CronJob"), ("jobset.x-k8s.io", "JobSet"), ("kubeflow.org", "PyTorchJob"),
    ("kubeflow.org", "TFJob"), ("kubeflow.org", "XGBoostJob"), ("kubeflow.org", "PaddleJob"),
    ("kubeflow.org", "MPIJob"), ("trainer.kubeflow.org", "TrainJob"), ("ray.io", "RayJob"),
    ("batch.volcano.sh", "Job"),
})
HARMLESS_VISIBLE_DEVICES = ("", "void", "none")  # the NVIDIA runtime exposes no GPU for these


def _gpu_sets(s: Subject) -> Iterator[PlannedPods]:
    for p in s.pods:
        if p.template.gpu.wants_gpu:
            yield p


def _where(s: Subject, p: PlannedPods) -> str:
    """The field a planned pod set is written at, as precisely as known."""
    if s.pod is not None:
        return "spec"
    if len(s.templates) == 1:
        return s.templates[0].spec_path
    return f"pod set {p.name}"


def _queue(s: Subject) -> str | None:
    if s.owner is not None:
        return s.owner.queue
    if s.pod is not None:
        return queue_label(s.pod.meta.labels)[0]
    return None


def _namespace(s: Subject) -> str:
    return s.ref.namespace or "default"


def _flavors(s: Subject, cluster: ClusterView, t: PodTemplate) -> list[ResourceFlavor] | None:
    return cluster.flavors_for(t, _namespace(s), _queue(s))


def _mib(mib: int) -> str:
    return f"{mib / 1024:.0f} GiB" if mib >= 1024 else f"{mib} MiB"


def _offer(node: NodeState) -> str:
    """What one empty node offers a pod, in the words of its resources; GPUs a ResourceSlice publishes are offered
    through DRA claims only (their slots carry resource names for grouping, which the node does not advertise)."""
    parts = []
    whole = [g for g in node.gpus if g.mode == "whole"]
    replicas = [g for g in node.gpus if g.mode == "replicas"]
    if whole:
        how = f"through DRA claims ({whole[0].dra_driver})" if whole[0].dra_driver else f"as {whole[0].resource}"
        parts.append(f"{len(whole)}x {whole[0].model} ({_mib(whole[0].memory_mib)}) {how}")
    if replicas:
        parts.append(f"{sum(g.replicas for g in replicas)} time-slice replicas of {replicas[0].model} as "
                     f"{replicas[0].resource}")
    migs: dict[str, int] = {}
    for g in node.gpus:
        for m in g.mig:
            what = (f"MIG {m.placement.profile} through DRA claims ({g.dra_driver})" if g.dra_driver
                    else m.resource)
            migs[what] = migs.get(what, 0) + 1
    parts.extend(f"{n}x {r}" for r, n in sorted(migs.items()))
    if not parts:
        parts.append("no GPU")
    cpu, memory = node.allocatable.get("cpu", 0), node.allocatable.get("memory", 0)
    parts.append(f"{cpu / 1000:g} CPU, {memory / 2**30:g} GiB memory")
    return f"{node.name}: " + ", ".join(parts)


def _asks(g: GpuDemand) -> str:
    if g.kind == "fraction":
        share = f"{g.milli / 1000:g} of a GPU" if g.milli else "a share of a GPU"
        return share + (f" with {_mib(g.memory_mib)}" if g.memory_mib else "")
    text = f"{g.count} {demand_resource(g)}"
    return text + (f" with {_mib(g.memory_mib)} each" if g.memory_mib else "")


def _bound(s: Subject) -> bool:
    return s.pod is not None and s.pod.node_name is not None


# ---- anti-pattern 1: no GPU model ----------------------------------------------------------------------------------

def _chooses_model(t: PodTemplate) -> bool:
    if t.gpu.models or any(k in MODEL_LABELS for k in t.node_selector):
        return True
    terms = [*t.required_affinity, *(p.term for p in t.preferred_affinity)]
    return any(r.key in MODEL_LABELS for term in terms for r in term.requirements)


def _check_model(s: Subject, cluster: ClusterView) -> Iterator[Hit]:
    if _bound(s):
        return
    for p in _gpu_sets(s):
        t = p.template
        if _chooses_model(t):
            continue
        fitting = cluster.fitting(t, _flavors(s, cluster, t))
        models = sorted({n.gpu_model for n in fitting if n.gpu_model})
        if len(models) < 2:
            continue
        priced = [m for m in (DEFAULT_CATALOG.find(x) for x in models) if m is not None and m.known]
        cheapest = min(priced, key=lambda m: m.price_per_hour).product if priced else models[0]
        yield Hit(_where(s, p), f"a GPU pod that names no GPU model: it can land on {len(models)} models "
                  f"({', '.join(models)}), whichever has room, at very different prices and speeds",
                  f"choose the model: nodeSelector nvidia.com/gpu.product: {cheapest} (or a required node affinity "
                  "on nvidia.com/gpu.product listing the models that suit it, or the gpufleet.io/gpu-model "
                  "annotation)")


# ---- anti-pattern 2: a whole GPU for a small pod -------------------------------------------------------------------

def _memory_need(s: Subject, p: PlannedPods) -> tuple[int, str] | None:
    if p.template.gpu.memory_mib:
        return p.template.gpu.memory_mib, "declares"
    if len(s.templates) != 1:
        return None
    found = known_memory_mib(images_of(c for _, c in containers(s.templates[0])))
    return (found[0], f"runs {found[1]}, known to need at most") if found else None


def _check_whole_gpu(s: Subject, cluster: ClusterView) -> Iterator[Hit]:
    for p in _gpu_sets(s):
        g = p.template.gpu
        if g.kind != "gpu" or g.count != 1:
            continue
        need = _memory_need(s, p)
        if need is None:
            continue
        mib, how = need
        fitting = cluster.fitting(p.template, _flavors(s, cluster, p.template))
        whole = [gpu for n in fitting if device_kind(n, GPU) == "whole" for gpu in n.gpus if gpu.mode == "whole"]
        if not whole:
            continue
        smallest_whole = min(gpu.memory_mib for gpu in whole)
        profiles = sorted({(m.memory_mib, m.resource) for n in cluster.states for gpu in n.gpus for m in gpu.mig
                           if m.memory_mib >= mib and m.memory_mib < smallest_whole})
        if profiles:
            memory, resource = profiles[0]
            yield Hit(_where(s, p), f"asks a whole {GPU} ({_mib(smallest_whole)} or more) for a pod that {how} "
                      f"{_mib(mib)} of GPU memory; the cluster offers {resource} ({_mib(memory)})",
                      f"request {resource}: 1 instead of {GPU}: 1")
            continue
        if p.template.scheduler_name == "gpufleet" and mib * 2 <= smallest_whole:
            yield Hit(_where(s, p), f"asks a whole {GPU} ({_mib(smallest_whole)}) for a pod that {how} "
                      f"{_mib(mib)} of GPU memory; gpufleet can give it a fraction of one",
                      f"drop {GPU} and annotate the pod template gpufleet.io/gpu-memory: \"{mib}Mi\" (a fractional "
                      "pod shares a GPU, with no memory isolation)")


# ---- anti-pattern 3: a gang without all-or-nothing -----------------------------------------------------------------

def _in_pod_group(s: Subject) -> bool:
    meta = mapping(s.raw.get("metadata"))
    places = [mapping(meta.get("labels")), mapping(meta.get("annotations"))]
    for t in s.templates:
        places += [mapping(t.metadata.get("labels")), mapping(t.metadata.get("annotations"))]
        if t.spec.get("schedulerName") in GANG_SCHEDULERS:
            return True
    return any(key in place for place in places for key in POD_GROUP_KEYS)


def _uses_gpus(s: Subject) -> bool:
    """A template as written asks for a GPU (the test the container rules make), or a pod planned from elsewhere
    does (a TrainJob's, from its runtime). For every kind whose templates are all in the object the first is the
    whole answer: what the parsers plan from the object's templates never uses a GPU they do not name."""
    return any(is_gpu_pod(t) for t in s.templates) or any(True for _ in _gpu_sets(s))


def _check_gang(s: Subject, cluster: ClusterView) -> Iterator[Hit]:
    owner = s.owner
    if owner is None or owner.rule.group == "apps" or not owner.rule.gang or owner.rule.grouping == "pod-group":
        return
    if owner.rule.queue_system != "kueue" or owner.queue is not None or s.largest_workload <= 1:
        return
    if not _uses_gpus(s) or _in_pod_group(s):
        return
    yield Hit("metadata.labels", f"{s.largest_workload} pods that only work together, on GPUs, with no queue and no "
              "pod group: kube-scheduler starts whichever fit, and those wait on the rest holding their GPUs "
              "(a deadlock when two such jobs each hold part of the GPUs)",
              f"admit it all or nothing: give it a Kueue queue ({owner.rule.queue}), or a pod group of a gang "
              "scheduler")


def _in_pod_group_cel(meta: str) -> str:
    return " || ".join(f"(has({meta}.{where}) && {list(POD_GROUP_KEYS)!r}.exists(k, k in {meta}.{where}))"
                       for where in ("labels", "annotations"))


_GANG_CEL = CelRule(
    ok=f"!({multipod.ungrouped_gang()} &&\n  variables.templates.exists(t, {cel.GPU_POD}) &&\n  "
       f"!({_in_pod_group_cel('object.metadata')} || variables.templates.exists(t, (has(t.metadata) && "
       f"({_in_pod_group_cel('t.metadata')})) || (has(t.spec.schedulerName) && "
       f"t.spec.schedulerName in {list(GANG_SCHEDULERS)!r}))))",
    message="GPU pods that only work together, with no queue and no pod group: kube-scheduler may start some and "
            "leave them waiting on the rest, holding their GPUs (metadata.labels)",
    kinds=frozenset(multipod.MULTI_POD), whole_object=True)


# ---- anti-pattern 4: quota bypassed --------------------------------------------------------------------------------

def _check_queue(s: Subject, cluster: ClusterView) -> Iterator[Hit]:
    if (s.owner is None and s.pod is None) or _queue(s) is not None or _bound(s):
        return
    if s.owner is not None and (s.owner.rule.queue_system != "kueue" or s.owner.rule.grouping == "pod-group"):
        return
    if not any(True for _ in _gpu_sets(s)):
        return
    queues = cluster.queue_namespaces.get(_namespace(s))
    if not queues:
        return
    where = s.owner.rule.queue if s.owner is not None else "label kueue.x-k8s.io/queue-name on the Pod"
    yield Hit("metadata.labels", f"a GPU workload with no queue in namespace {_namespace(s)}, which has "
              f"LocalQueue(s) {', '.join(sorted(queues))}: it is admitted against no quota",
              f"name one: {where} = {sorted(queues)[0]}")


# ---- anti-pattern 5: requests and limits ---------------------------------------------------------------------------

def _same_amount(a: Any, b: Any) -> bool:
    try:
        return parse_quantity(a) == parse_quantity(b)
    except (QuantityError, TypeError):
        return str(a) == str(b)


def _check_limits(s: Subject, cluster: ClusterView) -> Iterator[Hit]:
    for t in s.templates:
        for path, c in containers(t):
            requests, limits = resources(c, "requests"), resources(c, "limits")
            for key in sorted(str(k) for k in requests):
                if not key.startswith(GPU_PREFIX):
                    continue
                if key not in limits:
                    yield Hit(f"{named(path, c)}.resources", f"requests {key} ({requests[key]}) without a limit",
                              f"set limits.{key} to {requests[key]} (or give only the limit: the request defaults "
                              "to it)")
                elif not _same_amount(requests[key], limits[key]):
                    yield Hit(f"{named(path, c)}.resources", f"requests {key} {requests[key]} but limits it to "
                              f"{limits[key]}: a GPU is not shared by throttling",
                              f"make requests.{key} and limits.{key} equal")


_LIMITS_CEL = CelRule(
    ok=f"{cel.ALL_CONTAINERS}.all(c, {cel._names('requests')}.all(k, !k.startsWith('{GPU_PREFIX}') || "
       f"(k in {cel._names('limits')} && quantity(string(c.resources.requests[k])).compareTo("
       "quantity(string(c.resources.limits[k]))) == 0)))",
    message="a container requests an nvidia.com/ resource without a limit equal to the request "
            "(containers[].resources)")


def _check_cpu_memory(s: Subject, cluster: ClusterView) -> Iterator[Hit]:
    for t in s.templates:
        for path, c in gpu_containers(t):
            missing = [r for r in ("cpu", "memory") if not declares(c, r)]
            if missing:
                yield Hit(f"{named(path, c)}.resources", f"a GPU container with no {' or '.join(missing)} request: "
                          "the node may have too little left to feed the GPU, and the pod is among the first "
                          "evicted under memory pressure",
                          f"set requests.{missing[0]}" + (f" and requests.{missing[1]}" if len(missing) > 1 else "")
                          + " to what the process needs")


_CPU_MEMORY_CEL = CelRule(
    ok=f"{cel.GPU_CONTAINERS}.all(c, {cel.declares('cpu')} && {cel.declares('memory')})",
    message="a GPU container has no CPU or memory request (containers[].resources.requests)")


# ---- requests no node can ever satisfy -----------------------------------------------------------------------------

def _kinship(node: NodeState, g: GpuDemand) -> tuple[int, int]:
    """How close a node's devices are to a demand, after the filters' depth: how many of the resource it has, then
    how many devices of the same kind (MIG instances for a MIG profile, whole GPUs otherwise)."""
    resource = demand_resource(g)
    same = node.allocatable.get(resource, 0) if resource else 0
    if g.kind == "mig":
        return same, sum(len(gpu.mig) for gpu in node.gpus)
    return same, sum(1 for gpu in node.gpus if gpu.mode != "mig")


def _check_impossible(s: Subject, cluster: ClusterView) -> Iterator[Hit]:
    if _bound(s):
        return
    for p in _gpu_sets(s):
        t = p.template
        verdicts = cluster.verdicts(t)
        if any(v.reason is None for v in verdicts):
            flavors = _flavors(s, cluster, t)
            if flavors is None or cluster.fitting(t, flavors):
                continue
            names = ", ".join(f.name for f in flavors)
            yield Hit(_where(s, p), f"asks {_asks(t.gpu)}: some nodes could take it, but none of its queue's "
                      f"flavors for GPUs ({names}) selects them", "point the queue's flavors at those nodes, or "
                      "use a queue whose flavors do")
            continue
        best = max(verdicts, key=lambda v: (v.depth, *_kinship(v.node, t.gpu)))
        closest = [v for v in verdicts if (v.depth, *_kinship(v.node, t.gpu)) == (best.depth,
                                                                                  *_kinship(best.node, t.gpu))]
        yield Hit(_where(s, p), f"asks {_asks(t.gpu)} and no node can ever take it ({best.reason}); the closest "
                  f"offer is {_offer(best.node)}" + (f" (and {len(closest) - 1} more like it)"
                                                     if len(closest) > 1 else ""),
                  "ask for what a node offers (see the closest offer), or add nodes that offer it")


# ---- a time-slice replica for training -----------------------------------------------------------------------------

def _shared_keys(c: Mapping[str, Any]) -> list[str]:
    return [k for k in gpu_resources(c) if k.endswith(".shared")]


def _check_time_sliced(s: Subject, cluster: ClusterView) -> Iterator[Hit]:
    if (s.group, s.ref.kind) not in TRAINING_KINDS:
        return
    said = False
    for t in s.templates:
        for path, c in containers(t):
            shared = _shared_keys(c)
            if shared:
                said = True
                yield Hit(f"{named(path, c)}.resources", f"a training job asks for a time-slice replica "
                          f"({shared[0]}): no memory isolation and a speed that depends on its neighbours",
                          f"request whole GPUs ({GPU}) or a MIG instance on nodes that do not time-slice")
    if said or not cluster.knows_nodes:
        return
    for p in _gpu_sets(s):
        g = p.template.gpu
        resource = demand_resource(g)
        if g.kind != "gpu" or resource is None:
            continue
        fitting = cluster.fitting(p.template, _flavors(s, cluster, p.template))
        if fitting and all(device_kind(n, resource) == "replicas" for n in fitting):
            yield Hit(_where(s, p), f"a training job asks for {resource}, which every node that could take it "
                      "time-slices: it gets a replica, with no memory isolation and a speed that depends on its "
                      "neighbours", "run it on nodes that give whole GPUs (a nodeSelector on their pool)")


_TIME_SLICED_CEL = CelRule(
    ok=f"{cel.ALL_CONTAINERS}.all(c, !({cel._names('requests')}.exists(k, k.startsWith('{GPU_PREFIX}') && "
       f"k.endsWith('.shared')) || {cel._names('limits')}.exists(k, k.startsWith('{GPU_PREFIX}') && "
       "k.endsWith('.shared'))))",
    message="a training job asks for a time-slice replica (containers[].resources: nvidia.com/*.shared)",
    kinds=TRAINING_KINDS)


# ---- GPUs reached around the device plugin -------------------------------------------------------------------------

def _ours(entry: Mapping[str, Any]) -> bool:
    ref = mapping(mapping(entry.get("valueFrom")).get("fieldRef"))
    return ref.get("fieldPath") == FIELD_PATH


def _check_visible_devices(s: Subject, cluster: ClusterView) -> Iterator[Hit]:
    for t in s.templates:
        for path, c in containers(t):
            env = c.get("env")
            for i, e in enumerate(env if isinstance(env, list) else []):
                if not isinstance(e, Mapping) or e.get("name") != ENV_NAME or _ours(e):
                    continue
                if "valueFrom" not in e and e.get("value", "") in HARMLESS_VISIBLE_DEVICES:
                    continue
                yield Hit(f"{named(path, c)}.env[{i}]", f"sets {ENV_NAME} by hand: the container sees the GPUs it "
                          "names, whatever the device plugin gave it (\"all\" means every GPU of the node)",
                          f"remove it and request {GPU} (or a MIG profile, or a fraction with gpufleet)")


_VISIBLE_CEL = CelRule(
    ok=f"{cel.ALL_CONTAINERS}.all(c, !has(c.env) || c.env.all(e, !has(e.name) || e.name != '{ENV_NAME}' || "
       f"(!has(e.valueFrom) && (!has(e.value) || e.value in {list(HARMLESS_VISIBLE_DEVICES)!r})) || "
       f"(has(e.valueFrom) && has(e.valueFrom.fieldRef) && e.valueFrom.fieldRef.fieldPath == '{cel.OURS}')))",
    message=f"a container sets {ENV_NAME} by hand (containers[].env)")


def _check_privileged(s: Subject, cluster: ClusterView) -> Iterator[Hit]:
    for t in s.templates:
        if not is_gpu_pod(t):
            continue
        for path, c in containers(t):
            if mapping(c.get("securityContext")).get("privileged") is True:
                yield Hit(f"{named(path, c)}.securityContext.privileged", "a privileged container in a GPU pod sees "
                          "every GPU of its node, not only the ones it was given", "drop privileged: the device "
                          "plugin mounts the GPUs the pod asked for")


_PRIVILEGED_CEL = CelRule(
    ok=f"!{cel.GPU_POD} || {cel.ALL_CONTAINERS}.all(c, !has(c.securityContext) || "
       "!has(c.securityContext.privileged) || c.securityContext.privileged != true)",
    message="a privileged container in a GPU pod (containers[].securityContext.privileged)")


def _nvidia_path(path: Any) -> bool:
    return isinstance(path, str) and (path in ("/dev", "/dev/") or path.startswith("/dev/nvidia"))


def _check_host_path(s: Subject, cluster: ClusterView) -> Iterator[Hit]:
    for t in s.templates:
        volumes = t.spec.get("volumes")
        for i, v in enumerate(volumes if isinstance(volumes, list) else []):
            path = mapping(mapping(v).get("hostPath")).get("path")
            if _nvidia_path(path):
                yield Hit(f"{t.spec_path}.volumes[{i}].hostPath", f"mounts {path} from the host: the pod reaches "
                          "NVIDIA devices the device plugin never gave it", f"remove the volume and request {GPU}")


_HOST_PATH_CEL = CelRule(
    ok="!has(t.spec.volumes) || t.spec.volumes.all(v, !has(v.hostPath) || !has(v.hostPath.path) || "
       "!(v.hostPath.path == '/dev' || v.hostPath.path == '/dev/' || v.hostPath.path.startsWith('/dev/nvidia')))",
    message="a hostPath volume mounts /dev or /dev/nvidia* (volumes[].hostPath)")


# ---- queue configuration -------------------------------------------------------------------------------------------

def _gpu_resource(name: str) -> bool:
    return name.startswith(GPU_PREFIX) or name == FRACTION_RESOURCE


def _offers(node: NodeState, resource: str, cluster: ClusterView) -> bool:
    if resource == FRACTION_RESOURCE:
        return any(g.mode == "whole" and g.dra_driver is None for g in node.gpus)  # DRA GPUs take no fractions
    if node.name in cluster.claim_resources.get(resource, ()):
        return True  # charged for DRA claims (Kueue's deviceClassMappings): its devices are published here
    return node.allocatable.get(resource, 0) > 0 or device_kind(node, resource) is not None


def _check_flavor_nodes(s: Subject, cluster: ClusterView) -> Iterator[Hit]:
    cq = s.cluster_queue
    if cq is None:
        return
    for gi, group in enumerate(cq.resource_groups):
        for fi, fq in enumerate(group.flavors):
            resources_ = [r for r, q in fq.resources.items() if _gpu_resource(r) and q.nominal > 0]
            flavor = cluster.flavors.get(fq.name)
            if not resources_ or flavor is None:
                continue
            labelled = [n for n in cluster.states if all(n.labels.get(k) == v for k, v in flavor.node_labels.items())]
            for resource in resources_:
                if not any(_offers(n, resource, cluster) for n in labelled):
                    on = (f"{len(labelled)} node(s) with its nodeLabels" if labelled
                          else "no node with its nodeLabels " + (", ".join(
                              f"{k}={v}" for k, v in sorted(flavor.node_labels.items())) or "(none)"))
                    yield Hit(f"spec.resourceGroups[{gi}].flavors[{fi}]", f"flavor {fq.name} has a quota of "
                              f"{resource} but covers no node that offers it ({on})",
                              "fix the flavor's nodeLabels, or drop the quota that no node can back")


def _may_borrow(cq: ClusterQueue, resource: str) -> bool:
    limits = [fq.resources[resource].borrowing_limit for g in cq.resource_groups for fq in g.flavors
              if resource in fq.resources]
    return any(limit is None or limit > 0 for limit in limits)


def _nominal(cq: ClusterQueue, resource: str) -> int:
    return sum(fq.resources[resource].nominal for g in cq.resource_groups for fq in g.flavors
               if resource in fq.resources)


def _lends_with_limit(cq: ClusterQueue, resource: str) -> bool:
    return any(resource in fq.resources and fq.resources[resource].lending_limit is not None
               for g in cq.resource_groups for fq in g.flavors)


def _check_borrowing(s: Subject, cluster: ClusterView) -> Iterator[Hit]:
    cq = s.cluster_queue
    if cq is None or cq.cohort is None:
        return
    cohort = [q for q in cluster.cluster_queues.values() if q.cohort == cq.cohort]
    covered = sorted({r for g in cq.resource_groups for r in g.covered_resources if _gpu_resource(r)})
    for resource in covered:
        if not _may_borrow(cq, resource) or any(_lends_with_limit(q, resource) for q in cohort):
            continue
        stuck = [q.name for q in cohort if q.name != cq.name and _nominal(q, resource) > 0
                 and q.preemption.reclaim_within_cohort == "Never"]
        if stuck:
            yield Hit("spec.resourceGroups", f"may borrow {resource} in cohort {cq.cohort}, where no ClusterQueue "
                      f"sets a lendingLimit on it, from {', '.join(stuck)}, which cannot reclaim it "
                      "(reclaimWithinCohort: Never): their guaranteed GPUs stay lent until this queue's workloads end",
                      f"set a lendingLimit on {stuck[0]}'s {resource}, let it reclaim (reclaimWithinCohort: "
                      "LowerPriority or Any), or give this queue a borrowingLimit of 0")


def _check_local_queue(s: Subject, cluster: ClusterView) -> Iterator[Hit]:
    lq = s.local_queue
    if lq is None or lq.cluster_queue in cluster.cluster_queues:
        return
    yield Hit("spec.clusterQueue", f"names ClusterQueue {lq.cluster_queue}, which does not exist: its workloads "
              "stay pending forever", f"create ClusterQueue {lq.cluster_queue}, or name an existing one (known: "
              + (", ".join(sorted(cluster.cluster_queues)[:8]) or "none") + ")")


# ---- the list ------------------------------------------------------------------------------------------------------

RULES: tuple[Rule, ...] = (
    Rule("gpu-model-unconstrained", "warning", "GPU pod without a GPU model constraint on a cluster with several "
         "models",
         "A pod that asks for nvidia.com/gpu and names no model runs on whichever model has room: light inference "
         "lands on an H100 that costs six times a T4, a 70B model on a 40 GB A100 that cannot hold it, and the "
         "models that restricted workloads need are filled by work that did not need them. The guide counts "
         "30 to 50% of a heterogeneous cluster's GPU budget lost this way.",
         "nodeSelector nvidia.com/gpu.product (or a node affinity over the models that suit the pod, or the "
         "gpufleet.io/gpu-model annotation)", _check_model, needs="nodes", anti_pattern=1),
    Rule("whole-gpu-for-small-pod", "warning", "Whole GPU asked by a pod that fits a MIG instance or a fraction",
         "A pod whose declared GPU memory (gpufleet.io/gpu-memory) or known image fits a MIG profile the cluster "
         "offers, or a fraction gpufleet can give, holds a whole GPU it leaves mostly idle; MIG instances cost a "
         "fraction of the GPU with hardware isolation.",
         "request the MIG profile named in the finding, or a fraction (gpufleet.io/gpu-memory with the gpufleet "
         "scheduler)", _check_whole_gpu, needs="nodes", anti_pattern=2),
    Rule("gang-without-all-or-nothing", "warning", "Multi-pod GPU job without a pod group or a queue",
         "A distributed job (a Job with parallelism above 1, a JobSet, a PyTorchJob, an MPIJob, a RayCluster...) "
         "whose pods only work together can start partially under kube-scheduler: the pods that started wait at "
         "the rendezvous holding their GPUs, and two such jobs can deadlock each other. Uber measured 20 to 40% of "
         "distributed training jobs failing this way without gang scheduling.",
         "give it a Kueue queue (kueue.x-k8s.io/queue-name), which admits its pods all or none, or a pod group of a "
         "gang scheduler", _check_gang, cel=_GANG_CEL, anti_pattern=3),
    Rule("gpu-workload-without-queue", "error", "GPU workload without a queue in a namespace that has LocalQueues",
         "In a namespace whose teams share GPUs through Kueue's LocalQueues, a workload that names no queue is "
         "admitted against no quota: it bypasses the team's share (Kueue documents a ValidatingAdmissionPolicy "
         "for exactly this).",
         "label it kueue.x-k8s.io/queue-name with one of the namespace's LocalQueues", _check_queue,
         needs="queues", anti_pattern=4),
    Rule("gpu-request-without-equal-limit", "error", "GPU requested without a limit, or with a different limit",
         "Extended resources are not overcommitted: a GPU request needs a limit equal to it. The API server refuses "
         "such Pods, but not the templates of custom kinds (PyTorchJob, RayCluster...), whose controller then fails "
         "to create pods; and a quota on limits alone is bypassed. A limit without a request is fine: the request "
         "defaults to it.",
         "give the limit (alone, or equal to the request)", _check_limits, cel=_LIMITS_CEL, anti_pattern=5),
    Rule("gpu-pod-without-cpu-memory-requests", "warning", "GPU container without CPU or memory requests",
         "A GPU container that requests no CPU or memory can be placed where too little is left to feed the GPU "
         "(data loading, tokenisation), and is among the first evicted under memory pressure, taking its GPU work "
         "with it.",
         "set requests.cpu and requests.memory on every container that uses a GPU", _check_cpu_memory,
         cel=_CPU_MEMORY_CEL, anti_pattern=5),
    Rule("gpu-request-unsatisfiable", "error", "GPU request that no node can ever satisfy",
         "A pod asking for a GPU model, a MIG profile, an amount of GPU memory or a number of GPUs that no node has "
         "(even empty) stays pending forever; the finding names the closest offer.",
         "ask for what a node offers, or add such nodes", _check_impossible, needs="nodes"),
    Rule("time-sliced-gpu-for-training", "warning", "Time-sliced GPU asked for training",
         "Time-slicing shares a GPU with no memory isolation and no guaranteed throughput: fine for notebooks and "
         "light inference, wrong for training, whose speed then depends on its neighbours and whose memory can "
         "be taken by them (CUDA out-of-memory errors).",
         "request whole GPUs or MIG instances for training", _check_time_sliced, cel=_TIME_SLICED_CEL),
    Rule("nvidia-visible-devices-by-hand", "error", "NVIDIA_VISIBLE_DEVICES set by hand",
         "The NVIDIA container runtime exposes the GPUs NVIDIA_VISIBLE_DEVICES names, so a container that sets it "
         "itself (\"all\", or a GPU index) reaches GPUs the device plugin gave to other pods, or GPUs when it "
         "asked for none. The variable gpufleet's own webhook adds for fractional pods (from the "
         "gpufleet.io/visible-devices annotation) and the harmless values void and none are allowed.",
         "remove it and request the GPU as a resource", _check_visible_devices, cel=_VISIBLE_CEL),
    Rule("privileged-gpu-container", "error", "Privileged container in a GPU pod",
         "A privileged container sees every device of its node, so in a GPU pod it reaches every GPU, not only "
         "the ones it was given: isolation and accounting are gone.",
         "drop securityContext.privileged; request the GPUs the container needs", _check_privileged,
         cel=_PRIVILEGED_CEL),
    Rule("hostpath-nvidia-devices", "error", "hostPath volume onto /dev/nvidia*",
         "Mounting /dev or /dev/nvidia* from the host gives a pod the node's GPUs outside the device plugin's "
         "accounting: the scheduler believes them free and gives them to others.",
         "remove the volume and request the GPU as a resource", _check_host_path, cel=_HOST_PATH_CEL),
    Rule("clusterqueue-flavor-without-nodes", "warning", "ClusterQueue GPU flavor that covers no node",
         "A flavor whose nodeLabels select no node offering the GPU resource it holds quota for promises GPUs no "
         "node can give: workloads admitted under it never start.",
         "fix the flavor's nodeLabels or the quota", _check_flavor_nodes, needs="nodes"),
    Rule("cohort-borrowing-without-lending-limit", "warning", "Borrowing in a cohort where nothing limits lending",
         "A ClusterQueue that may borrow GPUs from a cohort in which no ClusterQueue sets a lendingLimit can take a "
         "lender's whole nominal quota; when that lender cannot reclaim it (reclaimWithinCohort: Never), its "
         "guaranteed GPUs stay lent until the borrower's workloads end.",
         "set lendingLimit on the lenders, let them reclaim, or bound the borrowing", _check_borrowing,
         needs="queues"),
    Rule("localqueue-without-clusterqueue", "error", "LocalQueue naming a ClusterQueue that does not exist",
         "Workloads submitted to a LocalQueue whose ClusterQueue does not exist stay pending forever, with no "
         "error where the user looks.",
         "create the ClusterQueue or fix the name", _check_local_queue, needs="queues"),
)

RULE_IDS: tuple[str, ...] = tuple(r.id for r in RULES)
BY_ID: dict[str, Rule] = {r.id: r for r in RULES}
assert len(BY_ID) == len(RULES), "rule ids are unique"
