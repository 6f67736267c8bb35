"""Parsers from manifest documents to the typed objects of :mod:`gpufleet.api.objects`, one per kind.

Every parser takes a :class:`FieldReader` and returns an object or None; problems go to the reader's
collector with file, line, object and field. A parser keeps whatever is valid: one bad container limit does
not lose the pod's other fields, and the caller decides whether an object with errors is kept.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable
from dataclasses import replace
from fractions import Fraction
from typing import Any, cast

from gpufleet.api import limits
from gpufleet.api.dra_podclaims import ClaimUse, container_claims, generated_claim_names, read_pod_claims
from gpufleet.api.errors import LEFT_OUT, shown
from gpufleet.api.gpushare import (
    FRACTION_KEYS,
    HAMI_CORES,
    HAMI_MEMORY,
    HAMI_MEMORY_PERCENT,
    HAMI_RESOURCES,
    MEMORY_KEYS,
    HamiShare,
    hami_conflict,
    hami_share,
    is_fractional,
)
from gpufleet.api.kueue_dra_config import parse_device_class_mappings, parse_feature_gates
from gpufleet.api.mig_resized import RESIZE_ON_OOM_ANNOTATION
from gpufleet.api.objects import (
    CPU,
    GPU,
    GPU_FRACTION_ANNOTATION,
    GPU_FRACTIONS_LABEL,
    GPU_FRACTIONS_VALUES,
    GPU_MEMORY_ANNOTATION,
    GPU_MEMORY_USED_ANNOTATION,
    GPU_MODEL_ANNOTATION,
    KAI_FRACTION_ANNOTATION,
    KAI_MEMORY_ANNOTATION,
    NO_GPU,
    POD_GROUP_COUNT_ANNOTATION,
    RESERVE_AFTER_ANNOTATION,
    Admission,
    BorrowWithinCohort,
    ClusterQueue,
    Cohort,
    FlavorFungibility,
    FlavorQuotas,
    GpuDemand,
    KueueWorkload,
    LabelSelector,
    LocalQueue,
    Namespace,
    Node,
    NodePool,
    NodePoolGpu,
    NodeSelectorTerm,
    ObjectMeta,
    Pod,
    PodResourceClaim,
    PodSetAssignment,
    PodSetSpec,
    PodsReadyPolicy,
    PodTemplate,
    PreemptionPolicy,
    PreferredTerm,
    PriorityClass,
    Quota,
    Requirement,
    ResourceFlavor,
    ResourceGroup,
    ResourceList,
    SchedulerConfig,
    SourceRef,
    Taint,
    Toleration,
    Topology,
    WorkloadPriorityClass,
)
from gpufleet.api.quantity import QuantityError, int_value, mib_value, milli_value, parse_quantity
from gpufleet.api.reader import FieldReader, parse_int_text
from gpufleet.gpu.constants import DEFAULT_MAX_PODS
from gpufleet.gpu.constants import FRACTION_RESOURCE as FRACTION_RESOURCE
from gpufleet.gpu.constants import SHARED_GPU as SHARED_GPU
from gpufleet.gpu.mig import GEOMETRIES, MigError, parse_layout, profile_from_resource_name
from gpufleet.gpu.sharing import DevicePluginConfig

JOB_MIN_PARALLELISM_ANNOTATION = "kueue.x-k8s.io/job-min-parallelism"
BYTE_RESOURCES = ("memory", "ephemeral-storage")
_MAX_POD_SETS = 8  # Kueue's validation: a Workload holds 1 to 8 pod sets
_INT32 = 2**31 - 1  # Kubernetes' int32 fields (priorities, counts, weights)
_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


# ---- quantities in canonical units ----------------------------------------------------------------------------

def is_native(resource: str) -> bool:
    return resource in (CPU, "memory", "ephemeral-storage", "pods") or resource.startswith("hugepages-")


def canonical_amount(resource: str, q: Fraction) -> int:
    """An amount in gpufleet's canonical unit for ``resource`` (millicores, bytes, or a whole count)."""
    if resource == CPU:
        return milli_value(q)
    if resource in BYTE_RESOURCES or resource.startswith("hugepages-"):
        return int_value(q)
    return int_value(q)


def format_amount(resource: str, amount: int) -> str:
    """The inverse of :func:`canonical_amount`, in the notation users write."""
    if resource == CPU:
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    if resource in BYTE_RESOURCES or resource.startswith("hugepages-"):
        for suffix, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if amount and amount % size == 0:
                return f"{amount // size}{suffix}"
        return str(amount)
    return str(amount)


def _pod_cap(resource: str) -> limits.Limit | None:
    """GPU devices are counted per pod; HAMi's share resources are percentages and MiB of one GPU, bounded where
    the share is read (:func:`_hami_demand`)."""
    return limits.GPUS_PER_POD if resource.startswith("nvidia.com/") and resource not in HAMI_RESOURCES else None


def _node_cap(resource: str) -> limits.Limit | None:
    if resource.startswith("nvidia.com/"):
        return limits.DEVICES_PER_NODE
    return limits.PODS_PER_NODE if resource == "pods" else None


# Resource lists read before, by content: the pods of one template (and nodes of one shape) repeat theirs, and a
# scheduler's first cycle reads every pod and node of the cluster (a third of a pod's parse was its resources).
_RESOURCE_LISTS: dict[tuple[Callable[[str], limits.Limit | None], tuple[tuple[str, str], ...]],
                      tuple[ResourceList, dict[str, Fraction]]] = {}
_RESOURCE_LISTS_MAX = 4096  # distinct lists kept; past that, lists are read each time


def _resource_list(r: FieldReader, key: str, cap: Callable[[str], limits.Limit | None] = _pod_cap,
                   ) -> tuple[ResourceList, dict[str, Fraction]]:
    """Canonical amounts, and the exact quantities (to spot a fractional extended resource).

    ``cap`` bounds the resources that later become one object each (GPU devices, pod slots)."""
    out: ResourceList = {}
    exact: dict[str, Fraction] = {}
    section = r.obj(key)
    if section is None:
        return out, exact
    raw = section.value
    # Memoised by content for lists of strings only (what the API server sends: a boolean or a number would be
    # equal to another value of another type, and read differently), and only when read without an error.
    memo_key = (cap, tuple(raw.items())) if all(type(k) is str and type(v) is str for k, v in raw.items()) else None
    hit = _RESOURCE_LISTS.get(memo_key) if memo_key is not None else None
    if hit is not None:
        return dict(hit[0]), dict(hit[1])
    before = section.problems.error_count
    for name in section.value:
        resource = str(name)
        q = section.quantity(resource)
        if q is None:
            continue
        exact[resource] = q
        if not is_native(resource) and q.denominator != 1:
            fix = ("extended resources are whole numbers; to share a GPU, set the annotation "
                   f'{GPU_FRACTION_ANNOTATION}: "{float(q):g}" and drop this resource') if resource == GPU else (
                "extended resources are whole numbers; request a whole count")
            section.error(f"{resource} must be a whole number, got {shown(section.raw(resource))}", resource,
                          fix=fix)
            continue
        limit = cap(resource)
        if limit is not None and q > limit.value:
            section.error(f"{resource}: {shown(section.raw(resource))} is too large: {limit.says()}", resource,
                          fix=f"use at most {limit.value:,}")
            continue
        out[resource] = canonical_amount(resource, q)
    if memo_key is not None and section.problems.error_count == before and len(_RESOURCE_LISTS) < _RESOURCE_LISTS_MAX:
        _RESOURCE_LISTS[memo_key] = (dict(out), dict(exact))
    return out, exact


# ---- metadata ---------------------------------------------------------------------------------------------------

# Seconds since the epoch that a timestamp may hold: year 1 to year 9999, what RFC 3339 can write.
_EPOCH_RANGE = (-62_135_596_800.0, 253_402_300_799.0)


def parse_timestamp(value: Any) -> float | None:
    """Seconds since the epoch from an RFC 3339 time (or a number of seconds); None when it is not one."""
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        stamp = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        return stamp.timestamp()
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value) if abs(value) < 1e300 else math.inf
        return seconds if _EPOCH_RANGE[0] <= seconds <= _EPOCH_RANGE[1] else None
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC).timestamp()
    if not isinstance(value, str) or len(value) > 64:
        return None
    text = value.strip()
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except (ValueError, OverflowError):
        return None


def parse_meta(r: FieldReader, *, namespaced: bool) -> ObjectMeta | None:
    m = r.obj("metadata", required=True)
    if m is None:
        return None
    name = m.text("name", required=True)
    if name is None:
        return None
    if not _NAME_RE.match(name) or len(name) > 253:
        m.error(f"name {shown(name)} is not a valid Kubernetes object name", "name",
                fix="use lower-case letters, digits, '-' and '.', starting and ending with a letter or digit")
    namespace = (m.text("namespace") or "default") if namespaced else None
    r.name = f"{namespace}/{name}" if namespace else name
    m.name = r.name
    created = m.raw("creationTimestamp")
    stamp = parse_timestamp(created)
    if created is not None and stamp is None:
        m.error(f"creationTimestamp {shown(created)} is not an RFC 3339 time", "creationTimestamp",
                fix="write it like 2026-01-31T12:00:00Z")
    annotations = m.string_map("annotations")
    size = sum(len(k) + len(v) for k, v in annotations.items())
    if size > limits.MAX_ANNOTATION_BYTES:
        m.error(f"the annotations hold {size:,} characters: {limits.ANNOTATION_BYTES.says()}", "annotations",
                fix="keep large data out of annotations (a ConfigMap, say)")
    return ObjectMeta(
        name=name,
        namespace=namespace,
        labels=m.string_map("labels"),
        annotations=annotations,
        creation_timestamp=stamp,
        uid=m.text("uid"),
        source=SourceRef(r.doc.file, r.doc.line),
        owners=_owner_uids(m),
    )


def _owner_uids(m: FieldReader) -> tuple[str, ...]:
    """The UIDs of ``ownerReferences`` (who owns the object; malformed entries are skipped: ownership is a hint
    for grouping, never a reason to refuse an object)."""
    refs = m.raw("ownerReferences")
    if not isinstance(refs, list):
        return ()
    return tuple(str(ref["uid"]) for ref in refs[:64] if isinstance(ref, dict) and isinstance(ref.get("uid"), str)
                 and ref["uid"])


# ---- shared pieces ----------------------------------------------------------------------------------------------

def parse_taint(r: FieldReader) -> Taint | None:
    key = r.text("key", required=True)
    effect = r.enum("effect", ("NoSchedule", "PreferNoSchedule", "NoExecute"), "NoSchedule")
    if key is None:
        return None
    return Taint(key, r.text("value", "") or "", cast(Any, effect))


def parse_toleration(r: FieldReader) -> Toleration:
    operator = r.enum("operator", ("Equal", "Exists"), "Equal")
    effect = r.text("effect", "") or ""
    if effect and effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
        r.error(f"effect {shown(effect)} is not NoSchedule, PreferNoSchedule or NoExecute", "effect")
    return Toleration(r.text("key", "") or "", cast(Any, operator), r.text("value", "") or "", effect)


_OPS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


def parse_requirement(r: FieldReader) -> Requirement | None:
    key = r.text("key", required=True)
    op = r.text("operator", required=True)
    if key is None or op is None:
        return None
    if op not in _OPS:
        r.error(f"operator {shown(op)} is not one of {', '.join(_OPS)}", "operator")
        return None
    values = tuple(r.string_list("values"))
    if op in ("In", "NotIn") and not values:
        r.error(f"operator {op} needs at least one value", "values")
    if op in ("Exists", "DoesNotExist") and values:
        r.error(f"operator {op} takes no values", "values", fix="remove values")
    if op in ("Gt", "Lt") and (len(values) != 1 or parse_int_text(values[0]) is None):
        r.error(f"operator {op} needs exactly one integer value", "values")
        return None
    return Requirement(key, cast(Any, op), values)


def parse_term(r: FieldReader) -> NodeSelectorTerm:
    reqs = r.each("matchExpressions", parse_requirement)
    if r.has("matchFields"):
        for item in r.items("matchFields"):
            req = parse_requirement(item)
            if req is not None and req.key == "metadata.name":
                reqs.append(Requirement("kubernetes.io/hostname", req.operator, req.values))
            elif req is not None:
                item.error("only metadata.name is supported in matchFields", "key")
    return NodeSelectorTerm(tuple(reqs))


def parse_label_selector(r: FieldReader | None) -> LabelSelector | None:
    if r is None:
        return None
    labels = r.string_map("matchLabels")
    return LabelSelector(tuple(sorted(labels.items())), tuple(r.each("matchExpressions", parse_requirement)))


# ---- pods and templates ----------------------------------------------------------------------------------------

def _container_resources(c: FieldReader, requests: ResourceList, limits: ResourceList,
                         pod_validation: bool = True) -> None:
    """Add a container's requests and limits. ``pod_validation``: the API server validates this template as a
    Pod (a Pod, a Job's template), so an extended resource needs a limit equal to its request; a Kueue
    Workload's podSet template is not validated so (Kueue only refuses requests above limits)."""
    res = c.obj("resources")
    if res is None:
        return
    req, _ = _resource_list(res, "requests")
    lim, _ = _resource_list(res, "limits")
    for resource in set(req) | set(lim):
        if is_native(resource):
            continue
        if resource in req and resource not in lim:
            if pod_validation:
                res.error(f"{resource} is requested without a limit", "requests", resource,
                          fix=f"set limits.{resource} equal to requests.{resource} (extended resources are not "
                          "overcommitted)")
        elif resource in req and req[resource] != lim[resource]:
            if pod_validation:
                res.error(f"{resource} requests ({req[resource]}) differ from limits ({lim[resource]})",
                          "limits", resource, fix=f"make requests.{resource} and limits.{resource} equal")
            elif req[resource] > lim[resource]:
                res.error(f"{resource} requests ({req[resource]}) exceed limits ({lim[resource]}); Kueue does not "
                          "admit such a Workload", "requests", resource,
                          fix=f"lower requests.{resource} to at most limits.{resource}, or drop the limit")
    for resource, amount in lim.items():
        # Kubernetes defaults a missing request to the limit.
        requests[resource] = requests.get(resource, 0) + req.get(resource, amount)
        limits[resource] = limits.get(resource, 0) + amount
    for resource, amount in req.items():
        if resource not in lim:
            requests[resource] = requests.get(resource, 0) + amount


def _gpu_models(r: FieldReader, annotations: dict[str, str]) -> tuple[str, ...]:
    from gpufleet.gpu.catalog import DEFAULT_CATALOG

    text = annotations.get(GPU_MODEL_ANNOTATION)
    if not text:
        return ()
    models = []
    for name in re.split(r"[|,]", text):
        name = name.strip()
        if not name:
            continue
        found = DEFAULT_CATALOG.find(name)
        if found is None:
            r.warning(f"annotation {GPU_MODEL_ANNOTATION}: {name} is not in the GPU catalog; only nodes whose model "
                      "is named exactly so will match", "metadata", "annotations", GPU_MODEL_ANNOTATION,
                      fix="use a catalog model: " + ", ".join(m.key for m in DEFAULT_CATALOG))
        models.append(found.key if found else name)
    return tuple(models)


def _gpu_demand(r: FieldReader, requests: ResourceList, annotations: dict[str, str],
                asks: list[HamiAsk]) -> GpuDemand:
    demand = _gpu_demand_kind(r, requests, annotations, asks)
    models = _gpu_models(r, annotations)
    if models and demand.kind != "none":
        return replace(demand, models=models)
    return demand


# A HAMi share asked by one container: its reader (for the fields errors point at) and what it asks.
HamiAsk = tuple[FieldReader, HamiShare]


def _hami_field(c: FieldReader, resource: str) -> tuple[str, str, str]:
    """Where a container writes ``resource``: its limits, else its requests (HAMi reads either)."""
    res = c.raw("resources")
    lim = res.get("limits") if isinstance(res, dict) else None
    return "resources", "limits" if isinstance(lim, dict) and resource in lim else "requests", resource


def _largest_gpu_memory() -> tuple[int, str]:
    """The most memory one GPU of the catalog has (MiB), and its model: the bound of a HAMi gpumem share."""
    from gpufleet.gpu.catalog import DEFAULT_CATALOG

    model = max(DEFAULT_CATALOG, key=lambda m: m.memory_mib)
    return model.memory_mib, model.key


def _hami_share_ok(c: FieldReader, share: HamiShare) -> bool:
    """A container's HAMi share within HAMi's bounds, else an error at its field."""
    for name, value in ((HAMI_CORES, share.cores), (HAMI_MEMORY_PERCENT, share.memory_percent)):
        if value is not None and value > 100:
            c.error(f"{name} is a percentage of one GPU: at most 100, got {value}", *_hami_field(c, name),
                    fix=f"give {name} from 1 to 100")
            return False
    most, model = _largest_gpu_memory()
    if share.memory_mib is not None and share.memory_mib > most:
        c.error(f"{HAMI_MEMORY} is MiB of one GPU's memory: at most {most:,} (the largest GPU in the catalog, "
                f"{model}), got {share.memory_mib:,}", *_hami_field(c, HAMI_MEMORY),
                fix=f"give the MiB the container needs on each GPU, at most {most:,}; for all of a GPU's memory "
                f"drop {HAMI_MEMORY}")
        return False
    if share.gpus > limits.MAX_GPUS_PER_POD:
        c.error(f"{GPU}: {share.gpus:,} devices in one pod is too many: {limits.GPUS_PER_POD.says()}",
                *_hami_field(c, GPU), fix="a pod runs on one node: ask for at most the devices one node has")
        return False
    return True


def _hami_whole(share: HamiShare) -> bool:
    """All of each GPU: no memory share (or all of it), and all of its compute or none given."""
    return share.exclusive or (share.milli >= 1000 and share.memory_mib is None)


def _hami_demand(r: FieldReader, asks: list[HamiAsk], others: list[str], annotations: dict[str, str],
                 hami: list[str]) -> GpuDemand:
    """A pod whose containers ask HAMi shares (gpufleet.api.gpushare), as gpufleet places it. HAMi's semantics
    are per container: each container asking a share gets its own."""
    conflict = hami_conflict(annotations, hami)
    if conflict is not None:
        key = next(k for k in (*FRACTION_KEYS, *MEMORY_KEYS) if k in annotations)
        r.error(conflict[0], "metadata", "annotations", key, fix=conflict[1])
        return NO_GPU
    if others:
        asks[0][0].error(f"HAMi's nvidia.com/gpucores and nvidia.com/gpumem share nvidia.com/gpu devices; the pod "
                         f"also asks {', '.join(others)}", "resources",
                         fix="split the pod, or ask nvidia.com/gpu with HAMi's share alone")
        return NO_GPU
    if not all(_hami_share_ok(c, share) for c, share in asks):
        return NO_GPU
    if len(asks) > 1:
        names = [str(c.raw("name") or "?") for c, _ in asks]
        gpus = sum(share.gpus for _, share in asks)
        mems = [share.memory_mib for _, share in asks if share.memory_mib is not None]
        if not all(_hami_whole(share) for _, share in asks):  # whole GPUs all: nothing left out
            asks[1][0].warning(
                f"containers {', '.join(names)} each ask a HAMi share, which HAMi gives each container on its "
                f"own; gpufleet plans one share per pod, so the pod is counted as {gpus} whole GPUs (left out)",
                "resources", fix="ask the share in one container, or expect HAMi to pack more pods than gpufleet "
                "says", code=LEFT_OUT)
        if gpus > limits.MAX_GPUS_PER_POD:
            r.error(f"{GPU}: {gpus:,} devices in one pod is too many: {limits.GPUS_PER_POD.says()}", "spec",
                    "containers", fix="a pod runs on one node: ask for at most the devices one node has")
            return NO_GPU
        return GpuDemand(kind="gpu", count=gpus, resource=GPU, memory_mib=max(mems) if mems else None)
    c, share = asks[0]
    if _hami_whole(share):
        return GpuDemand(kind="gpu", count=share.gpus, resource=GPU)  # all of each GPU: HAMi shares it with none
    if share.gpus > 1:
        c.warning(f"a HAMi share of {share.gpus} GPUs is counted as {share.gpus} whole GPUs: gpufleet's fraction is "
                  "a share of one GPU (left out)", *_hami_field(c, GPU),
                  fix="ask nvidia.com/gpu: 1 to plan the share, or expect HAMi to pack more pods than gpufleet says",
                  code=LEFT_OUT)
        return GpuDemand(kind="gpu", count=share.gpus, resource=GPU, memory_mib=share.memory_mib)
    return GpuDemand(kind="fraction", count=1, milli=share.milli, memory_mib=share.memory_mib)


def _gpu_demand_kind(r: FieldReader, requests: ResourceList, annotations: dict[str, str],
                     asks: list[HamiAsk]) -> GpuDemand:
    """``asks``: the HAMi shares the pod's containers ask, one per container."""
    gpu_resources = {k: v for k, v in requests.items()
                     if k.startswith("nvidia.com/") and v > 0 and k not in HAMI_RESOURCES}
    hami = hami_share(requests)
    if hami is not None:
        # a share asked by init containers alone: read at the pod's level
        return _hami_demand(r, asks or [(r, hami)], sorted(set(gpu_resources) - {GPU}), annotations,
                            [h for h in HAMI_RESOURCES if requests.get(h, 0) > 0])
    fraction_text = annotations.get(GPU_FRACTION_ANNOTATION, annotations.get(KAI_FRACTION_ANNOTATION))
    memory_text = annotations.get(GPU_MEMORY_ANNOTATION, annotations.get(KAI_MEMORY_ANNOTATION))
    fraction_key = GPU_FRACTION_ANNOTATION if GPU_FRACTION_ANNOTATION in annotations else KAI_FRACTION_ANNOTATION
    memory_mib: int | None = None
    if memory_text is not None:
        memory_key = GPU_MEMORY_ANNOTATION if GPU_MEMORY_ANNOTATION in annotations else KAI_MEMORY_ANNOTATION
        try:
            q = parse_quantity(memory_text)
            # KAI's gpu-memory is a plain number of MiB; ours is a quantity ("20Gi").
            plain = re.fullmatch(r"\d+", memory_text.strip()) is not None
            memory_mib = int(q) if plain and memory_key == KAI_MEMORY_ANNOTATION else int_value(q / 2**20)
            if memory_mib <= 0:
                raise QuantityError("GPU memory must be positive")
        except QuantityError as exc:
            r.error(f"annotation {memory_key}: {exc}", "metadata", "annotations", memory_key,
                    fix=f'write it like {memory_key}: "20Gi"')
            memory_mib = None
    milli = 0
    if fraction_text is not None:
        try:
            f = parse_quantity(fraction_text)
        except QuantityError:
            f = Fraction(-1)
        if not 0 < f <= 1:
            r.error(f"annotation {fraction_key}: the fraction must be in (0, 1], got {shown(fraction_text)}",
                    "metadata", "annotations", fraction_key,
                    fix="write a share of one GPU such as \"0.5\"; for more than one GPU request nvidia.com/gpu")
            fraction_text = None
        else:
            milli = max(1, round(f * 1000))
    if len(gpu_resources) > 1:
        r.error(f"a pod asks for one kind of GPU device, got {', '.join(sorted(gpu_resources))}", "spec",
                "containers", fix="split the pod, or ask for one resource kind")
        return NO_GPU
    if is_fractional(annotations, gpu_resources) and (fraction_text is not None or memory_mib is not None):
        if gpu_resources:
            r.error(f"a fractional pod must not also request {next(iter(gpu_resources))}", "spec", "containers",
                    fix=f"drop the {next(iter(gpu_resources))} request and keep the {fraction_key} annotation")
            return NO_GPU
        return GpuDemand(kind="fraction", count=1, milli=milli, memory_mib=memory_mib)
    if not gpu_resources:
        return NO_GPU
    resource, count = next(iter(gpu_resources.items()))
    if count > limits.MAX_GPUS_PER_POD:
        r.error(f"{resource}: {count:,} devices in one pod is too many: {limits.GPUS_PER_POD.says()}", "spec",
                "containers", fix="a pod runs on one node: ask for at most the devices one node has")
        return NO_GPU
    if resource == GPU:
        return GpuDemand(kind="gpu", count=count, resource=resource, memory_mib=memory_mib)
    if resource == SHARED_GPU:
        return GpuDemand(kind="shared", count=count, resource=resource, memory_mib=memory_mib)
    profile = profile_from_resource_name(resource.removesuffix(".shared"))
    if profile is not None:
        if not any(g.has_profile(profile) for g in GEOMETRIES.values()):
            r.error(f"{resource}: no MIG-capable GPU has the profile {profile}", "spec", "containers",
                    fix="use a profile of your GPU model, e.g. nvidia.com/mig-3g.40gb on A100-80GB "
                    "(see `gpufleet mig layouts MODEL`)")
            return NO_GPU
        return GpuDemand(kind="mig", count=count, resource=resource, mig_profile=profile, memory_mib=memory_mib)
    return NO_GPU


def parse_pod_template(r: FieldReader, meta_labels: dict[str, str], meta_annotations: dict[str, str],
                       spec: FieldReader | None, *, pod_validation: bool = True) -> PodTemplate:
    requests: ResourceList = {}
    limits: ResourceList = {}
    node_selector: dict[str, str] = {}
    required: list[NodeSelectorTerm] = []
    preferred: list[PreferredTerm] = []
    tolerations: list[Toleration] = []
    priority_class: str | None = None
    priority: int | None = None
    scheduler = "default-scheduler"
    restart = "Always"
    asks: list[HamiAsk] = []  # HAMi's shares, one per GPU container (HAMi's semantics are per container)
    claim_uses: list[ClaimUse] = []  # the DRA claims the containers use (resources.claims)
    resource_claims: tuple[PodResourceClaim, ...] = ()
    if spec is not None:
        containers = list(spec.items("containers", required=True))
        for c in containers:
            own: ResourceList = {}
            _container_resources(c, own, limits, pod_validation)
            container_claims(c, claim_uses)
            for k, v in own.items():
                requests[k] = requests.get(k, 0) + v
            # read only when the pod asks a HAMi share: then a container asking nvidia.com/gpu alone gets whole
            # GPUs from HAMi (no memory share)
            share = hami_share(own) or (HamiShare(own[GPU], None, None, None) if own.get(GPU, 0) > 0 else None)
            if share is not None:
                asks.append((c, share))
        for c in spec.items("initContainers"):
            init_req: ResourceList = {}
            init_lim: ResourceList = {}
            _container_resources(c, init_req, init_lim, pod_validation)
            container_claims(c, claim_uses)
            for k, v in init_req.items():
                requests[k] = max(requests.get(k, 0), v)
        resource_claims = read_pod_claims(spec, claim_uses)
        node_selector = spec.string_map("nodeSelector")
        affinity = spec.obj("affinity")
        node_aff = affinity.obj("nodeAffinity") if affinity else None
        if node_aff is not None:
            req = node_aff.obj("requiredDuringSchedulingIgnoredDuringExecution")
            if req is not None:
                required = req.each("nodeSelectorTerms", parse_term, required=True)
            for item in node_aff.items("preferredDuringSchedulingIgnoredDuringExecution"):
                weight = item.integer("weight", 1, minimum=1, maximum=100) or 1
                pref = item.obj("preference", required=True)
                if pref is not None:
                    preferred.append(PreferredTerm(weight, parse_term(pref)))
        tolerations = spec.each("tolerations", parse_toleration)
        priority_class = spec.text("priorityClassName")
        priority = spec.integer("priority", minimum=-_INT32, maximum=_INT32)
        scheduler = spec.text("schedulerName", "default-scheduler") or "default-scheduler"
        restart = spec.enum("restartPolicy", ("Always", "OnFailure", "Never"), "Always")
    gpu = _gpu_demand(r, requests, meta_annotations, asks)
    if gpu.kind == "fraction" and gpu.milli and not any(requests.get(h, 0) > 0 for h in HAMI_RESOURCES):
        # Quota for a fractional pod is charged in thousandths of a GPU on a resource of its own. A HAMi share is
        # charged as the pod asks it (nvidia.com/gpu, gpucores, gpumem), as Kueue charges it; placement leaves
        # those to the share's GPU (gpushare.placed_requests).
        requests[FRACTION_RESOURCE] = gpu.milli
    return PodTemplate(
        labels=meta_labels, annotations=meta_annotations, requests=requests, limits=limits,
        node_selector=node_selector, required_affinity=tuple(required), preferred_affinity=tuple(preferred),
        tolerations=tuple(tolerations), priority_class_name=priority_class, priority=priority,
        scheduler_name=scheduler, gpu=gpu, restart_policy=restart, resource_claims=resource_claims,
    )


def parse_pod(r: FieldReader) -> Pod | None:
    meta = parse_meta(r, namespaced=True)
    if meta is None:
        return None
    _check_count_annotation(r, meta.annotations, POD_GROUP_COUNT_ANNOTATION)
    spec = r.obj("spec", required=True)
    template = parse_pod_template(r, meta.labels, meta.annotations, spec)
    status = r.obj("status")
    phase = status.enum("phase", ("Pending", "Running", "Succeeded", "Failed", "Unknown"), "Pending") \
        if status else "Pending"
    if template is not None and status is not None and template.resource_claims:
        template.resource_claims = generated_claim_names(status, template.resource_claims)
    return Pod(meta, template, node_name=spec.text("nodeName") if spec else None, phase=cast(Any, phase),
               gpu_memory_used_mib=_memory_used(r, meta.annotations))


def _memory_used(r: FieldReader, annotations: dict[str, str]) -> int | None:
    """The node agent's observation (GPU_MEMORY_USED_ANNOTATION), in MiB; a value that is no positive quantity is
    left out with a warning (the pod stays valid: an observation only informs placement)."""
    text = annotations.get(GPU_MEMORY_USED_ANNOTATION)
    if text is None:
        return None
    try:
        mib = mib_value(text)
    except QuantityError as exc:
        r.warning(f"annotation {GPU_MEMORY_USED_ANNOTATION}: {exc}; the observation is ignored", "metadata",
                  "annotations", GPU_MEMORY_USED_ANNOTATION,
                  fix=f'leave it to the node agent, or write it like {GPU_MEMORY_USED_ANNOTATION}: "24576Mi"')
        return None
    if mib <= 0:
        r.warning(f"annotation {GPU_MEMORY_USED_ANNOTATION}: {text!r} is not a positive amount of memory; the "
                  "observation is ignored", "metadata", "annotations", GPU_MEMORY_USED_ANNOTATION,
                  fix=f'leave it to the node agent, or write it like {GPU_MEMORY_USED_ANNOTATION}: "24576Mi"')
        return None
    return mib


def _check_count_annotation(r: FieldReader, annotations: dict[str, str], key: str) -> None:
    text = annotations.get(key)
    if text is None:
        return
    count = parse_int_text(text)
    if count is None or not 0 < count <= limits.MAX_PODS_PER_WORKLOAD:
        r.error(f"annotation {key}: {shown(text)} is not a count of pods from 1 to {limits.MAX_PODS_PER_WORKLOAD:,}",
                "metadata", "annotations", key, fix=f'write a whole number of pods in ASCII digits, e.g. {key}: "4"')


def read_pod_template(r: FieldReader, key: str = "template", *, pod_validation: bool = True) -> PodTemplate | None:
    """A pod template (``metadata`` and ``spec``) under ``key``, through the same parser Pods go through."""
    t = r.obj(key, required=True)
    if t is None:
        return None
    m = t.obj("metadata")
    labels = m.string_map("labels") if m else {}
    annotations = m.string_map("annotations") if m else {}
    return parse_pod_template(t, labels, annotations, t.obj("spec", required=True), pod_validation=pod_validation)


# ---- nodes -------------------------------------------------------------------------------------------------------

# GPU Feature Discovery labels that gpufleet reads as numbers when a node has no gpufleet.io/gpus inventory.
_GFD_INT_LABELS = {
    "nvidia.com/gpu.count": limits.MAX_GPUS_PER_NODE,
    "nvidia.com/gpu.replicas": limits.MAX_REPLICAS_PER_GPU,
    "nvidia.com/gpu.memory": 16 * 2**20,  # MiB
}


def parse_node(r: FieldReader) -> Node | None:
    from gpufleet.api.inventory import parse_inventory_annotation

    meta = parse_meta(r, namespaced=False)
    if meta is None:
        return None
    spec = r.obj("spec")
    status = r.obj("status")
    capacity, _ = _resource_list(status, "capacity", _node_cap) if status else ({}, {})
    allocatable, _ = _resource_list(status, "allocatable", _node_cap) if status else ({}, {})
    if not allocatable:
        allocatable = dict(capacity)
    if not capacity:
        capacity = dict(allocatable)
    if not allocatable:
        r.error("node has no status.allocatable (nor status.capacity): nothing can be placed on it", "status",
                fix="add status.allocatable with cpu, memory, pods and the GPU resources it offers")
    allocatable.setdefault("pods", DEFAULT_MAX_PODS)
    ready = True
    if status is not None:
        for cond in status.items("conditions"):
            if cond.text("type") == "Ready":
                ready = cond.text("status") == "True"
    meta.labels.setdefault("kubernetes.io/hostname", meta.name)
    for label, top in _GFD_INT_LABELS.items():
        text = meta.labels.get(label)
        value = parse_int_text(text) if text is not None else 0
        if value is None or not 0 <= value <= top:
            r.error(f"label {label}: {shown(text)} is not a whole number from 0 to {top:,}", "metadata", "labels",
                    label, fix="let GPU Feature Discovery write it, or correct the value")
    fractions = meta.labels.get(GPU_FRACTIONS_LABEL)
    if fractions is not None and fractions not in GPU_FRACTIONS_VALUES:
        r.warning(f"{shown(fractions)} is neither \"true\" nor \"false\": the node stays open "
                  "to fractional GPU pods", "metadata", "labels", GPU_FRACTIONS_LABEL,
                  fix=f"set {GPU_FRACTIONS_LABEL}: \"false\" to close its GPUs to fractional pods, \"true\" (or no "
                      "label) to keep them open")
    gpus = parse_inventory_annotation(r, meta.annotations)
    return Node(
        meta=meta, capacity=capacity, allocatable=allocatable,
        taints=tuple(spec.each("taints", parse_taint)) if spec else (),
        unschedulable=spec.flag("unschedulable") if spec else False,
        ready=ready, gpus=gpus, pool=meta.labels.get("gpufleet.io/node-pool"),
    )


def parse_namespace(r: FieldReader) -> Namespace | None:
    meta = parse_meta(r, namespaced=False)
    return Namespace(meta) if meta else None


def parse_priority_class(r: FieldReader) -> PriorityClass | None:
    meta = parse_meta(r, namespaced=False)
    value = r.integer("value", required=True, minimum=-_INT32, maximum=_INT32)
    if meta is None or value is None:
        return None
    return PriorityClass(meta, value, r.flag("globalDefault"),
                         r.text("preemptionPolicy", "PreemptLowerPriority") or "PreemptLowerPriority")


# ---- Kueue kinds ------------------------------------------------------------------------------------------------

def _quota_amount(r: FieldReader, key: str, resource: str) -> int | None:
    q = r.quantity(key)
    if q is None:
        return None
    if not is_native(resource) and q.denominator != 1:
        r.error(f"{key} for {resource} must be a whole number, got {shown(r.raw(key))}", key)
        return None
    return canonical_amount(resource, q)


def parse_resource_groups(r: FieldReader, *, has_cohort: bool, owner: str) -> list[ResourceGroup]:
    groups: list[ResourceGroup] = []
    seen_resources: dict[str, int] = {}
    seen_flavors: dict[str, int] = {}
    for gi, g in enumerate(r.items("resourceGroups")):
        covered = tuple(g.string_list("coveredResources"))
        if not covered:
            g.error("coveredResources is empty", "coveredResources", fix="list the resources this group covers")
        for res in covered:
            if res in seen_resources:
                g.error(f"resource {res} is already covered by resourceGroups[{seen_resources[res]}]",
                        "coveredResources", fix="a resource may appear in one resource group only")
            seen_resources[res] = gi
        flavors: list[FlavorQuotas] = []
        for f in g.items("flavors", required=True):
            fname = f.text("name", required=True)
            if fname is None:
                continue
            if fname in seen_flavors:
                f.error(f"flavor {fname} already appears in resourceGroups[{seen_flavors[fname]}]", "name",
                        fix="a flavor may appear in one resource group only")
            seen_flavors[fname] = gi
            quotas: dict[str, Quota] = {}
            for q in f.items("resources", required=True):
                rname = q.text("name", required=True)
                if rname is None:
                    continue
                if covered and rname not in covered:
                    q.error(f"resource {rname} is not in this group's coveredResources", "name",
                            fix=f"add {rname} to coveredResources or remove it here")
                nominal = _quota_amount(q, "nominalQuota", rname)
                if nominal is None and not q.has("nominalQuota"):
                    q.error("missing required field nominalQuota", "nominalQuota", fix="add nominalQuota")
                bl = _quota_amount(q, "borrowingLimit", rname)
                ll = _quota_amount(q, "lendingLimit", rname)
                if not has_cohort and (bl is not None or ll is not None):
                    q.error(f"borrowingLimit and lendingLimit need a cohort; {owner} has none",
                            "borrowingLimit" if bl is not None else "lendingLimit",
                            fix="set spec.cohort or remove the limit")
                if ll is not None and nominal is not None and ll > nominal:
                    q.error("lendingLimit is larger than nominalQuota", "lendingLimit",
                            fix="lend at most the nominal quota")
                quotas[rname] = Quota(nominal or 0, bl, ll)
            missing = [c for c in covered if c not in quotas]
            if missing:
                f.error(f"flavor {fname} does not list covered resource(s) {', '.join(missing)}", "resources",
                        fix="every flavor lists every covered resource (nominalQuota 0 is allowed)")
            flavors.append(FlavorQuotas(fname, quotas))
        groups.append(ResourceGroup(covered, flavors))
    return groups


def parse_resource_flavor(r: FieldReader) -> ResourceFlavor | None:
    meta = parse_meta(r, namespaced=False)
    if meta is None:
        return None
    spec = r.obj("spec")
    if spec is None:
        return ResourceFlavor(meta)
    return ResourceFlavor(meta, spec.string_map("nodeLabels"), tuple(spec.each("nodeTaints", parse_taint)),
                          tuple(spec.each("tolerations", parse_toleration)), spec.text("topologyName"))


def parse_pods_ready(r: FieldReader | None) -> PodsReadyPolicy | None:
    if r is None:
        return None
    timeout = _duration(r, "timeout", 300.0)
    rq = r.obj("requeuingStrategy")
    return PodsReadyPolicy(
        enable=r.flag("enable", True),
        timeout_s=timeout,
        block_admission=r.flag("blockAdmission"),
        backoff_base_s=float(rq.integer("backoffBaseSeconds", 60, minimum=0, maximum=limits.MAX_DURATION_S) or 0)
        if rq else 60.0,
        backoff_max_s=float(rq.integer("backoffMaxSeconds", 3600, minimum=0, maximum=limits.MAX_DURATION_S) or 0)
        if rq else 3600.0,
        backoff_limit_count=rq.integer("backoffLimitCount", minimum=0, maximum=_INT32) if rq else None,
        requeue_timestamp=cast(Any, rq.enum("timestamp", ("Eviction", "Creation"), "Eviction") if rq else "Eviction"),
    )


_NUM = r"[0-9]{1,12}(?:\.[0-9]{1,9})?"  # ASCII digits: \d would also take "²", which float() refuses
_DURATION_RE = re.compile(rf"(?:({_NUM})h)?(?:({_NUM})m(?!s))?(?:({_NUM})s)?(?:([0-9]{{1,12}})ms)?")


def parse_duration(text: str) -> float | None:
    """A Go duration ("30m", "1h30m", "45s", "500ms") or a plain number of seconds, at most a year long;
    None if malformed or longer."""
    text = text.strip()
    if len(text) > 64:
        return None
    if re.fullmatch(_NUM, text):
        seconds = float(text)
    elif re.fullmatch(_NUM + "d", text):
        seconds = float(text[:-1]) * 86400
    else:
        m = _DURATION_RE.fullmatch(text)
        if not text or m is None or not any(m.groups()):
            return None
        h, mi, s, ms = (float(x) if x else 0.0 for x in m.groups())
        seconds = h * 3600 + mi * 60 + s + ms / 1000
    return seconds if seconds <= limits.MAX_DURATION_S else None


def _duration(r: FieldReader, key: str, default: float) -> float:
    raw = r.raw(key)
    if raw is None:
        return default
    value = parse_duration(str(raw)) if isinstance(raw, str | int | float) and not isinstance(raw, bool) and (
        not isinstance(raw, int) or raw.bit_length() < 64) else None
    if value is None:
        r.error(f"{shown(raw)} is not a duration of at most a year", key,
                fix="write a duration such as 30m, 1h or 90s")
        return default
    return value


def parse_cluster_queue(r: FieldReader) -> ClusterQueue | None:
    meta = parse_meta(r, namespaced=False)
    spec = r.obj("spec", required=True)
    if meta is None or spec is None:
        return None
    cohort = spec.text("cohort") or spec.text("cohortName")
    ns_sel = spec.obj("namespaceSelector")
    if not spec.has("namespaceSelector"):
        spec.warning("namespaceSelector is not set, so this ClusterQueue admits workloads from no namespace "
                     "(Kueue semantics)", "namespaceSelector",
                     fix="write namespaceSelector: {} to admit every namespace")
    pre = spec.obj("preemption")
    preemption = PreemptionPolicy()
    if pre is not None:
        bwc = pre.obj("borrowWithinCohort")
        preemption = PreemptionPolicy(
            within_cluster_queue=cast(Any, pre.enum("withinClusterQueue",
                                                    ("Never", "LowerPriority", "LowerOrNewerEqualPriority"), "Never")),
            reclaim_within_cohort=cast(Any, pre.enum("reclaimWithinCohort", ("Never", "LowerPriority", "Any"),
                                                     "Never")),
            borrow_within_cohort=BorrowWithinCohort(
                cast(Any, bwc.enum("policy", ("Never", "LowerPriority"), "Never")),
                bwc.integer("maxPriorityThreshold", minimum=-_INT32, maximum=_INT32)) if bwc else BorrowWithinCohort(),
        )
        if preemption.reclaim_within_cohort == "Never" and preemption.borrow_within_cohort.policy != "Never":
            pre.error("borrowWithinCohort needs reclaimWithinCohort other than Never", "borrowWithinCohort",
                      fix="set reclaimWithinCohort: LowerPriority or Any")
    ff = spec.obj("flavorFungibility")
    # Kueue v1beta2 spells Borrow and Preempt (stop at the flavor that fits by borrowing or preempting) MayStopSearch
    borrow = ff.enum("whenCanBorrow", ("Borrow", "MayStopSearch", "TryNextFlavor"), "Borrow") if ff else "Borrow"
    preempt = ff.enum("whenCanPreempt", ("Preempt", "MayStopSearch", "TryNextFlavor"), "TryNextFlavor") \
        if ff else "TryNextFlavor"
    fungibility = FlavorFungibility(
        cast(Any, "Borrow" if borrow == "MayStopSearch" else borrow),
        cast(Any, "Preempt" if preempt == "MayStopSearch" else preempt),
    )
    fs = spec.obj("fairSharing")
    weight = _weight(fs)
    return ClusterQueue(
        meta=meta,
        resource_groups=parse_resource_groups(spec, has_cohort=cohort is not None, owner=f"ClusterQueue {meta.name}"),
        cohort=cohort,
        namespace_selector=parse_label_selector(ns_sel) if ns_sel is not None else None,
        queueing_strategy=cast(Any, spec.enum("queueingStrategy", ("StrictFIFO", "BestEffortFIFO"), "BestEffortFIFO")),
        preemption=preemption,
        flavor_fungibility=fungibility,
        fair_weight=weight,
        stop_policy=spec.enum("stopPolicy", ("None", "Hold", "HoldAndDrain"), "None"),
        pods_ready=parse_pods_ready(spec.obj("waitForPodsReady")),
        reserve_after_s=_reserve_after(r, meta.annotations),
        mig_resize_on_oom=_mig_resize_on_oom(r, meta.annotations),
    )


def _mig_resize_on_oom(r: FieldReader, annotations: dict[str, str]) -> bool:
    text = annotations.get(RESIZE_ON_OOM_ANNOTATION)
    if text is None or text.strip().lower() in ("true", "false"):
        return text is not None and text.strip().lower() == "true"
    r.error(f"annotation {RESIZE_ON_OOM_ANNOTATION}: {shown(text)} is neither true nor false",
            "metadata", "annotations", RESIZE_ON_OOM_ANNOTATION,
            fix='write "true" to give a workload that ran out of GPU memory on a MIG instance the next larger profile '
                'the queue covers, "false" (or no annotation) to keep what its pods ask')
    return False


def _reserve_after(r: FieldReader, annotations: dict[str, str]) -> float | None:
    text = annotations.get(RESERVE_AFTER_ANNOTATION)
    if text is None:
        return None
    value = parse_duration(text)
    if value is None:
        r.error(f"annotation {RESERVE_AFTER_ANNOTATION}: {shown(text)} is not a duration of at most a year",
                "metadata", "annotations", RESERVE_AFTER_ANNOTATION,
                fix=f'write how long a workload waits before it reserves its quota, e.g. "{RESERVE_AFTER_ANNOTATION}: '
                    '2h"')
    return value


def _weight(fs: FieldReader | None) -> float:
    if fs is None or not fs.has("weight"):
        return 1.0
    q = fs.quantity("weight")
    return float(q) if q is not None else 1.0


def parse_cohort(r: FieldReader) -> Cohort | None:
    meta = parse_meta(r, namespaced=False)
    if meta is None:
        return None
    spec = r.obj("spec")
    if spec is None:
        return Cohort(meta)
    parent = spec.text("parentName") or spec.text("parent")
    groups = parse_resource_groups(spec, has_cohort=parent is not None, owner=f"Cohort {meta.name}")
    return Cohort(meta, parent, groups, _weight(spec.obj("fairSharing")))


def parse_local_queue(r: FieldReader) -> LocalQueue | None:
    meta = parse_meta(r, namespaced=True)
    spec = r.obj("spec", required=True)
    if meta is None or spec is None:
        return None
    cq = spec.text("clusterQueue", required=True)
    return LocalQueue(meta, cq) if cq else None


def parse_workload_priority_class(r: FieldReader) -> WorkloadPriorityClass | None:
    meta = parse_meta(r, namespaced=False)
    value = r.integer("value", required=True, minimum=-_INT32, maximum=_INT32)
    if meta is None or value is None:
        return None
    return WorkloadPriorityClass(meta, value, r.text("description", "") or "")


def _admission_conditions(status: FieldReader) -> tuple[float | None, str | None]:
    """What a Workload's status conditions say about its admission: when its quota was reserved (the True
    ``QuotaReserved`` condition's lastTransitionTime, the time Kueue orders preemption candidates by) and the
    reason of a True ``Evicted`` condition (an eviction under way)."""
    reserved_at: float | None = None
    evicted: str | None = None
    for cond in status.items("conditions"):
        kind = cond.text("type")
        if cond.text("status") != "True":
            continue
        if kind == "QuotaReserved":
            raw = cond.raw("lastTransitionTime")
            reserved_at = parse_timestamp(raw)
            if reserved_at is None:
                cond.error(f"QuotaReserved condition: lastTransitionTime {raw!r} is not an RFC 3339 time",
                           "lastTransitionTime",
                           fix='write when the quota was reserved, e.g. lastTransitionTime: "2024-01-01T00:00:00Z"')
        elif kind == "Evicted":
            evicted = cond.text("reason") or "Evicted"
    return reserved_at, evicted


def parse_workload(r: FieldReader) -> KueueWorkload | None:
    meta = parse_meta(r, namespaced=True)
    spec = r.obj("spec", required=True)
    if meta is None or spec is None:
        return None
    pod_sets: list[PodSetSpec] = []
    listed = spec.raw("podSets")
    if isinstance(listed, list) and len(listed) > _MAX_POD_SETS:
        spec.error(f"{len(listed)} podSets; Kueue allows at most {_MAX_POD_SETS}", "podSets",
                   fix="merge pod sets with the same template")
        return None
    for ps in spec.items("podSets", required=True):
        # Kueue runs no Pod validation on a Workload's templates: requests without limits are accepted.
        template = read_pod_template(ps, pod_validation=False)
        if template is None:
            continue
        count = ps.integer("count", 1, minimum=0, maximum=limits.PODS_PER_WORKLOAD) or 0
        pod_sets.append(PodSetSpec(ps.text("name", "main") or "main", count, template,
                                   ps.integer("minCount", minimum=0, maximum=limits.PODS_PER_WORKLOAD)))
    admission: Admission | None = None
    status = r.obj("status")
    adm = status.obj("admission") if status else None
    if adm is not None:
        cq = adm.text("clusterQueue", required=True)
        assignments = []
        for a in adm.items("podSetAssignments"):
            usage_reader = a.obj("resourceUsage")
            usage: ResourceList = {}
            if usage_reader is not None:
                for res in usage_reader.value:
                    q = usage_reader.quantity(str(res))
                    if q is not None:
                        usage[str(res)] = canonical_amount(str(res), q)
            assignments.append(PodSetAssignment(a.text("name", "main") or "main", a.string_map("flavors"), usage,
                                                a.integer("count", 0, minimum=0,
                                                          maximum=limits.PODS_PER_WORKLOAD) or 0))
        if cq:
            reserved_at, evicted = _admission_conditions(status) if status is not None else (None, None)
            admission = Admission(cq, assignments, reserved_at, evicted)
    return KueueWorkload(
        meta=meta, queue_name=spec.text("queueName"), pod_sets=pod_sets,
        priority=spec.integer("priority", minimum=-_INT32, maximum=_INT32),
        priority_class_name=spec.text("priorityClassName"), priority_class_source=spec.text("priorityClassSource"),
        active=spec.flag("active", True), admission=admission,
    )


def parse_topology(r: FieldReader) -> Topology | None:
    meta = parse_meta(r, namespaced=False)
    spec = r.obj("spec", required=True)
    if meta is None or spec is None:
        return None
    levels = []
    for lv in spec.items("levels", required=True):
        label = lv.text("nodeLabel", required=True)
        if label:
            levels.append(label)
    return Topology(meta, tuple(levels))


def parse_configuration(r: FieldReader) -> SchedulerConfig:
    fs = r.obj("fairSharing")
    strategies: tuple[Any, ...] = ("LessThanOrEqualToFinalShare", "LessThanInitialShare")
    if fs is not None and fs.has("preemptionStrategies"):
        given = fs.string_list("preemptionStrategies")
        bad = [s for s in given if s not in strategies]
        if bad:
            fs.error(f"unknown preemption strategy {', '.join(bad)}", "preemptionStrategies",
                     fix="use LessThanOrEqualToFinalShare and/or LessThanInitialShare")
        strategies = tuple(s for s in given if s in strategies)
    pods_ready = parse_pods_ready(r.obj("waitForPodsReady"))
    gates = parse_feature_gates(r)
    return SchedulerConfig(
        fair_sharing=fs.flag("enable") if fs else False,
        fair_sharing_strategies=strategies,
        pods_ready=pods_ready or PodsReadyPolicy(),
        source=SourceRef(r.doc.file, r.doc.line),
        device_class_mappings=parse_device_class_mappings(r, gates),
        feature_gates=gates,
    )


# ---- gpufleet NodePool ------------------------------------------------------------------------------------------

def parse_sharing(r: FieldReader | None) -> DevicePluginConfig:
    if r is None:
        return DevicePluginConfig()
    strategy = r.enum("migStrategy", ("none", "single", "mixed"), "none")
    ts = r.obj("timeSlicing")
    replicas: dict[str, int] = {}
    rename = False
    fail_gt1 = False
    if ts is not None:
        rename = ts.flag("renameByDefault")
        fail_gt1 = ts.flag("failRequestsGreaterThanOne")
        if ts.has("replicas"):
            n = ts.integer("replicas", minimum=2, maximum=limits.REPLICAS_PER_GPU)
            if n is not None:
                replicas["nvidia.com/gpu"] = n
        for item in ts.items("resources"):
            name = item.text("name", required=True)
            n = item.integer("replicas", required=True, minimum=2, maximum=limits.REPLICAS_PER_GPU)
            if name and n:
                replicas[name] = n
    return DevicePluginConfig(cast(Any, strategy), replicas, rename, fail_gt1)


_MAX_GPU_MEMORY_MIB = 16 * 2**20  # 16 TiB: a bound on one GPU's memory, far above any product


def _pool_devices_fit(spec: FieldReader, model: Any, gpu: NodePoolGpu, sharing: DevicePluginConfig) -> bool:
    """Whether each node of the pool advertises at most the devices a node may (counted on one node's GPUs,
    without making the devices: 64 GPUs cut in 7 MIG instances with 64 replicas each are 28,672)."""
    from gpufleet.gpu.sharing import advertised_counts, make_gpus

    mig_on = gpu.mig_layout is not None and sharing.mig_strategy != "none"
    devices = sum(advertised_counts(make_gpus("pool", model, gpu.count, gpu.mig_layout if mig_on else None),
                                    sharing).values())
    if devices <= limits.MAX_DEVICES_PER_NODE:
        return True
    spec.error(f"each node would advertise {devices:,} GPU devices ({gpu.count} GPUs"
               f"{', MIG' if mig_on else ''}, time-slicing replicas included): {limits.DEVICES_PER_NODE.says()}",
               "sharing", fix="lower the time-slicing replicas or the GPUs per node")
    return False


def parse_node_pool(r: FieldReader) -> NodePool | None:
    from gpufleet.gpu.catalog import DEFAULT_CATALOG, AmbiguousModelError

    meta = parse_meta(r, namespaced=False)
    spec = r.obj("spec", required=True)
    if meta is None or spec is None:
        return None
    count = spec.integer("count", required=True, minimum=0, maximum=limits.NODES_PER_POOL)
    cpu = spec.quantity("cpu")
    memory = spec.quantity("memory")
    if cpu is None:
        spec.error("missing required field cpu", "cpu", fix="add cpu, e.g. cpu: 64")
    if memory is None:
        spec.error("missing required field memory", "memory", fix="add memory, e.g. memory: 512Gi")
    gpu_r = spec.obj("gpu")
    gpu: NodePoolGpu | None = None
    sharing = parse_sharing(spec.obj("sharing"))
    if gpu_r is not None:
        model = gpu_r.text("model", required=True) or ""
        gcount = gpu_r.integer("count", required=True, minimum=1, maximum=limits.GPUS_PER_NODE) or 0
        mem_q = gpu_r.quantity("memory")
        memory_mib = int_value(mem_q / 2**20) if mem_q is not None else None
        if memory_mib is not None and not 0 < memory_mib <= _MAX_GPU_MEMORY_MIB:
            gpu_r.error(f"GPU memory {shown(gpu_r.raw('memory'))} is out of range (more than 0, at most 16Ti)",
                        "memory", fix="give one GPU's memory, e.g. memory: 32Gi")
            memory_mib = None
        try:
            found = DEFAULT_CATALOG.lookup(model)  # the catalog's one rule: a name several models share is refused
        except AmbiguousModelError as exc:
            found = None
            gpu_r.error(str(exc), "model")
        else:
            if model and found is None and memory_mib is None and not gpu_r.has("memory"):
                gpu_r.error(f"unknown GPU model {shown(model)} and no memory given", "model", fix="add gpu.memory "
                            "(e.g. 32Gi) or use one of: " + ", ".join(m.key for m in DEFAULT_CATALOG))
        layout = None
        mig_text = gpu_r.raw("migLayout")
        if mig_text is not None:
            geometry = GEOMETRIES.get(found.key) if found else None
            if geometry is None:
                gpu_r.error(f"{model} does not support MIG", "migLayout",
                            fix="remove migLayout or use a MIG-capable model (A30, A100, H100, H200)")
            else:
                text = ",".join(str(x) for x in mig_text) if isinstance(mig_text, list) else str(mig_text)
                try:
                    layout = parse_layout(text, geometry)
                except MigError as exc:
                    gpu_r.error(str(exc), "migLayout",
                                fix=f"list profiles of {geometry.model} (see `gpufleet mig layouts {geometry.model}`)")
            if sharing.mig_strategy == "none" and layout is not None:
                spec.warning("a MIG layout with migStrategy none: the device plugin exposes whole GPUs",
                             "sharing", "migStrategy", fix="set sharing.migStrategy: mixed or single")
        elif sharing.mig_strategy != "none":
            spec.error(f"migStrategy {sharing.mig_strategy} without gpu.migLayout", "sharing", "migStrategy",
                       fix="add gpu.migLayout, e.g. \"3g.40gb:2,1g.10gb\"")
        gpu = NodePoolGpu(found.key if found else model, gcount, memory_mib, layout,
                          cast(Any, gpu_r.enum("nvlink", ("auto", "all", "pairs", "none"), "auto")))
    topology: dict[str, tuple[str, ...]] = {}
    per_domain: dict[str, int] = {}
    for t in spec.items("topology"):
        label = t.text("nodeLabel", required=True)
        values = t.string_list("values")
        size = t.integer("nodesPerDomain", minimum=1, maximum=limits.MAX_NODES)
        if label and not values and size is None:
            t.error("a topology level needs values or nodesPerDomain", "values",
                    fix="e.g. {nodeLabel: example.com/rack, nodesPerDomain: 4}")
        if label:
            topology[label] = tuple(values)
            if size is not None:
                per_domain[label] = size
    for problem in sharing.validate():
        spec.error(problem, "sharing")
    if gpu is not None and found is not None and not _pool_devices_fit(spec, found, gpu, sharing):
        return None  # refused before a single node is made: each would be refused anyway, at a great cost
    return NodePool(
        meta=meta, count=count or 0, name_prefix=spec.text("namePrefix", meta.name) or meta.name, gpu=gpu,
        cpu_milli=milli_value(cpu) if cpu is not None else 0,
        memory_bytes=int_value(memory) if memory is not None else 0,
        pods=spec.integer("pods", DEFAULT_MAX_PODS, minimum=1, maximum=limits.PODS_PER_NODE) or DEFAULT_MAX_PODS,
        sharing=sharing,
        node_labels=spec.string_map("labels"), taints=tuple(spec.each("taints", parse_taint)),
        topology=topology, nodes_per_domain=per_domain,
    )


Parser = Callable[[FieldReader], Any]

KUEUE_GROUPS = ("kueue.x-k8s.io", "gpufleet.io")

PARSERS: dict[tuple[str, str], Parser] = {
    ("", "Node"): parse_node,
    ("", "Pod"): parse_pod,
    ("", "Namespace"): parse_namespace,
    ("scheduling.k8s.io", "PriorityClass"): parse_priority_class,
    ("config.kueue.x-k8s.io", "Configuration"): parse_configuration,
    ("gpufleet.io", "NodePool"): parse_node_pool,
}
for _group in KUEUE_GROUPS:
    PARSERS[(_group, "ResourceFlavor")] = parse_resource_flavor
    PARSERS[(_group, "ClusterQueue")] = parse_cluster_queue
    PARSERS[(_group, "LocalQueue")] = parse_local_queue
    PARSERS[(_group, "Cohort")] = parse_cohort
    PARSERS[(_group, "WorkloadPriorityClass")] = parse_workload_priority_class
    PARSERS[(_group, "Workload")] = parse_workload
    PARSERS[(_group, "Topology")] = parse_topology
