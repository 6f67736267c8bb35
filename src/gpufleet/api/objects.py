"""Typed, validated forms of the manifests gpufleet reads.

Resource amounts are integers in canonical units everywhere past the parser: ``cpu`` in millicores, memory and
storage in bytes, every other resource (``pods``, ``nvidia.com/gpu``, MIG and shared resources) as a count.
Conversion happens once, in :mod:`gpufleet.api.kinds`, with Kubernetes' own rounding (up).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

# Resource names live in gpufleet.gpu.constants, re-exported here for the importers that read them with the
# objects.
from gpufleet.gpu.constants import CPU as CPU
from gpufleet.gpu.constants import DEFAULT_MAX_PODS
from gpufleet.gpu.constants import GPU as GPU
from gpufleet.gpu.constants import MEMORY as MEMORY
from gpufleet.gpu.constants import PODS as PODS
from gpufleet.gpu.mig import MigPlacement
from gpufleet.gpu.sharing import DevicePluginConfig

if TYPE_CHECKING:
    from gpufleet.api.dra_need import DraNeed
    from gpufleet.api.dra_objects import DraGpu

ResourceList = dict[str, int]

# Label and annotation keys the rest of gpufleet reads.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GPUFLEET_QUEUE_LABEL = "gpufleet.io/queue"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
POD_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_COUNT_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
GPU_FRACTION_ANNOTATION = "gpufleet.io/gpu-fraction"
GPU_MEMORY_ANNOTATION = "gpufleet.io/gpu-memory"
# What a running pod was seen to use of each GPU device it holds alone (the peak of DCGM_FI_DEV_FB_USED while it
# was the device's only holder), a quantity ("24576Mi"): written by the node agent (gpufleet.node.memory_report),
# read by the scheduler's memory book. An observation, never a request: gpufleet.io/gpu-memory declares.
GPU_MEMORY_USED_ANNOTATION = "gpufleet.io/gpu-memory-used"
GPU_MODEL_ANNOTATION = "gpufleet.io/gpu-model"  # allowed GPU models, "A100-SXM4-80GB|H100-SXM5-80GB"
KAI_FRACTION_ANNOTATION = "gpu-fraction"
KAI_MEMORY_ANNOTATION = "gpu-memory"
# A node label: "false" closes the node's GPUs to fractional pods (gpufleet.io/gpu-fraction, gpu-milli); whole GPUs,
# MIG instances and time-slice replicas are unaffected. Absent or "true": open. Another value leaves the node open
# and `gpufleet validate` warns (gpufleet.cluster.free_devices.fractions_closed decides).
GPU_FRACTIONS_LABEL = "gpufleet.io/gpu-fractions"
GPU_FRACTIONS_VALUES = ("true", "false")
GPU_INVENTORY_ANNOTATION = "gpufleet.io/gpus"
DEVICES_ANNOTATION = "gpufleet.io/devices"
NODE_ANNOTATION = "gpufleet.io/node"  # the node the devices of gpufleet.io/devices are on
# The GPU a fractional pod uses, read by its containers through the downward API: the mutating webhook
# (gpufleet.admission.webhook) sets their NVIDIA_VISIBLE_DEVICES from it, and the lint rules (gpufleet.policy) know it.
VISIBLE_DEVICES_ANNOTATION = "gpufleet.io/visible-devices"
VISIBLE_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES"
VISIBLE_DEVICES_FIELD_PATH = f"metadata.annotations['{VISIBLE_DEVICES_ANNOTATION}']"
REQUIRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-preferred-topology"
PRODUCT_LABEL = "nvidia.com/gpu.product"
HOSTNAME_LABEL = "kubernetes.io/hostname"


@dataclass(frozen=True, slots=True)
class SourceRef:
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(slots=True)
class ObjectMeta:
    name: str
    namespace: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    creation_timestamp: float | None = None  # seconds since the epoch
    uid: str | None = None
    source: SourceRef | None = None
    order: int = 0  # position of the object's document in the whole input: the last ordering tie-breaker
    owners: tuple[str, ...] = ()  # the UIDs of metadata.ownerReferences (a Job's pods, a Kueue Workload's owner)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


# ---- scheduling vocabulary shared by nodes, pods and flavors -----------------------------------------------

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: TaintEffect = "NoSchedule"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""  # empty with operator Exists tolerates everything
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: str = ""  # empty = every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


SelectorOperator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: SelectorOperator
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        if self.operator == "In":
            return present and labels[self.key] in self.values
        if self.operator == "NotIn":
            return not present or labels[self.key] not in self.values
        # Gt / Lt compare integers; a label that is not an integer never matches (as kube-scheduler).
        if not present:
            return False
        from gpufleet.api.reader import parse_int_text

        have = parse_int_text(labels[self.key])
        want = parse_int_text(self.values[0]) if self.values else None
        if have is None or want is None:
            return False
        return have > want if self.operator == "Gt" else have < want


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """Requirements ANDed; the terms of a required node affinity are ORed."""

    requirements: tuple[Requirement, ...]

    def matches(self, labels: dict[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)


@dataclass(frozen=True, slots=True)
class PreferredTerm:
    weight: int
    term: NodeSelectorTerm


@dataclass(frozen=True, slots=True)
class LabelSelector:
    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            r.matches(labels) for r in self.match_expressions
        )


# ---- GPU demand ----------------------------------------------------------------------------------------------

GpuDemandKind = Literal["none", "gpu", "shared", "mig", "fraction"]


@dataclass(frozen=True, slots=True)
class GpuDemand:
    """What one pod asks of GPUs.

    ``gpu``: ``count`` whole GPUs (``nvidia.com/gpu``), or replicas when it lands on a time-sliced node that
    keeps the plain name; ``shared``: ``count`` replicas of the renamed ``nvidia.com/gpu.shared``; ``mig``:
    ``count`` instances of ``mig_profile``; ``fraction``: a share of one GPU (``milli`` thousandths and/or
    ``memory_mib``) declared by annotation, as KAI does.
    """

    kind: GpuDemandKind = "none"
    count: int = 0
    resource: str | None = None
    mig_profile: str | None = None
    milli: int = 0  # fraction of one GPU in thousandths (fraction kind)
    memory_mib: int | None = None  # declared GPU memory need (any kind)
    models: tuple[str, ...] = ()  # allowed GPU model keys (annotation gpufleet.io/gpu-model); empty = any

    @property
    def wants_gpu(self) -> bool:
        return self.kind != "none"

    @property
    def gpu_equivalent(self) -> float:
        """GPUs this demand holds, for accounting (a MIG instance counts as its compute share)."""
        if self.kind == "fraction":
            return self.milli / 1000
        return float(self.count)


NO_GPU = GpuDemand()


# ---- core kinds -----------------------------------------------------------------------------------------------

@dataclass(slots=True)
class Namespace:
    meta: ObjectMeta


@dataclass(slots=True)
class PriorityClass:
    meta: ObjectMeta
    value: int
    global_default: bool = False
    preemption_policy: str = "PreemptLowerPriority"


@dataclass(slots=True)
class GpuInventory:
    """A node's GPUs as the ``gpufleet.io/gpus`` annotation publishes them."""

    model: str
    memory_mib: int
    uuids: tuple[str, ...]
    mig: tuple[tuple[tuple[MigPlacement, str], ...], ...]  # per GPU: (placement, MIG UUID)
    nvlinks: dict[tuple[int, int], int]  # (i, j), i < j -> links between them
    sharing: DevicePluginConfig
    unhealthy: frozenset[int] = frozenset()  # GPU indexes the node agent reported broken

    @property
    def count(self) -> int:
        return len(self.uuids)


@dataclass(slots=True)
class Node:
    meta: ObjectMeta
    capacity: ResourceList
    allocatable: ResourceList
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True
    gpus: GpuInventory | None = None
    pool: str | None = None  # the NodePool it came from, for per-pool reports
    # The GPUs the input's ResourceSlices publish for this node (DRA, gpufleet.api.dra_nodes): when present they
    # are the node's GPUs, in place of the inventory, labels and device-plugin resources.
    dra_gpus: tuple[DraGpu, ...] = ()

    @property
    def name(self) -> str:
        return self.meta.name

    @property
    def labels(self) -> dict[str, str]:
        return self.meta.labels


@dataclass(frozen=True, slots=True)
class ContainerClaim:
    """A container's use of one of its pod's claims (``resources.claims[]``): all of it, or one request."""

    container: str
    request: str | None = None  # None: every device the claim allocates


@dataclass(frozen=True, slots=True)
class PodResourceClaim:
    """One entry of a pod's ``spec.resourceClaims`` (DRA): a claim by name, or one made per pod from a template,
    and the containers that use it (gpufleet.cluster.dra_claims turns them into GPU demands)."""

    name: str
    resource_claim_name: str | None = None
    resource_claim_template_name: str | None = None
    used_by: tuple[ContainerClaim, ...] = ()
    # The claim the resourceclaim controller made from the template for this pod, as the pod's
    # status.resourceClaimStatuses names it (a snapshot of a live cluster has it; None before it is made).
    generated_name: str | None = None


@dataclass(slots=True)
class PodTemplate:
    """The scheduling-relevant part of a pod spec, shared by Pods, Jobs and Workload pod sets."""

    labels: dict[str, str]
    annotations: dict[str, str]
    requests: ResourceList  # effective requests: max(sum of containers, largest init container)
    limits: ResourceList
    node_selector: dict[str, str] = field(default_factory=dict)
    required_affinity: tuple[NodeSelectorTerm, ...] = ()  # ORed; empty = no constraint
    preferred_affinity: tuple[PreferredTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    priority_class_name: str | None = None
    priority: int | None = None
    scheduler_name: str = "default-scheduler"
    gpu: GpuDemand = NO_GPU
    restart_policy: str = "Always"
    resource_claims: tuple[PodResourceClaim, ...] = ()  # spec.resourceClaims (DRA), with the containers using each
    # What those claims ask, resolved against the input's DRA objects (gpufleet.cluster.dra_claims); None: no
    # claims, or not resolved yet.
    dra: DraNeed | None = None


PodPhase = Literal["Pending", "Running", "Succeeded", "Failed", "Unknown"]


@dataclass(slots=True)
class Pod:
    meta: ObjectMeta
    template: PodTemplate
    node_name: str | None = None
    phase: PodPhase = "Pending"
    gpu_memory_used_mib: int | None = None  # GPU_MEMORY_USED_ANNOTATION: what the node agent saw it use

    @property
    def key(self) -> str:
        return self.meta.key

    @property
    def resource_claims(self) -> tuple[PodResourceClaim, ...]:
        """The pod's DRA claims (spec.resourceClaims), read but not yet turned into GPU demands."""
        return self.template.resource_claims


# ---- Kueue kinds ----------------------------------------------------------------------------------------------

@dataclass(slots=True)
class ResourceFlavor:
    meta: ObjectMeta
    node_labels: dict[str, str] = field(default_factory=dict)
    node_taints: tuple[Taint, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    topology_name: str | None = None

    @property
    def name(self) -> str:
        return self.meta.name


@dataclass(slots=True)
class Quota:
    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(slots=True)
class FlavorQuotas:
    name: str
    resources: dict[str, Quota]


@dataclass(slots=True)
class ResourceGroup:
    covered_resources: tuple[str, ...]
    flavors: list[FlavorQuotas]


@dataclass(frozen=True, slots=True)
class BorrowWithinCohort:
    policy: Literal["Never", "LowerPriority"] = "Never"
    max_priority_threshold: int | None = None


@dataclass(frozen=True, slots=True)
class PreemptionPolicy:
    within_cluster_queue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] = "Never"
    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] = "Never"
    borrow_within_cohort: BorrowWithinCohort = BorrowWithinCohort()


@dataclass(frozen=True, slots=True)
class FlavorFungibility:
    when_can_borrow: Literal["Borrow", "TryNextFlavor"] = "Borrow"
    when_can_preempt: Literal["Preempt", "TryNextFlavor"] = "TryNextFlavor"


@dataclass(frozen=True, slots=True)
class PodsReadyPolicy:
    """waitForPodsReady, per ClusterQueue (a gpufleet extension) or global (Kueue's Configuration)."""

    enable: bool = False
    timeout_s: float = 300.0
    block_admission: bool = False
    backoff_base_s: float = 60.0
    backoff_max_s: float = 3600.0
    backoff_limit_count: int | None = None
    requeue_timestamp: Literal["Eviction", "Creation"] = "Eviction"


QueueingStrategy = Literal["StrictFIFO", "BestEffortFIFO"]


@dataclass(slots=True)
class ClusterQueue:
    meta: ObjectMeta
    resource_groups: list[ResourceGroup]
    cohort: str | None = None
    namespace_selector: LabelSelector | None = None  # None matches nothing, as in Kueue
    queueing_strategy: QueueingStrategy = "BestEffortFIFO"
    preemption: PreemptionPolicy = PreemptionPolicy()
    flavor_fungibility: FlavorFungibility = FlavorFungibility()
    fair_weight: float = 1.0
    stop_policy: str = "None"
    pods_ready: PodsReadyPolicy | None = None  # overrides the global waitForPodsReady when set
    # gpufleet's gang reservation (annotation RESERVE_AFTER_ANNOTATION): a workload pending this long holds its
    # quota; only work that fits beside it is admitted meanwhile (backfill). None: off, as in Kueue.
    reserve_after_s: float | None = None
    # gpufleet's MIG resize (annotation gpufleet.io/mig-resize-on-oom, gpufleet.api.mig_resized): a workload that
    # ran out of GPU memory on a MIG instance asks the next larger profile the queue covers. False: off, as Kueue.
    mig_resize_on_oom: bool = False

    @property
    def name(self) -> str:
        return self.meta.name


RESERVE_AFTER_ANNOTATION = "gpufleet.io/reserve-after"


@dataclass(slots=True)
class Cohort:
    meta: ObjectMeta
    parent: str | None = None
    resource_groups: list[ResourceGroup] = field(default_factory=list)
    fair_weight: float = 1.0

    @property
    def name(self) -> str:
        return self.meta.name


@dataclass(slots=True)
class LocalQueue:
    meta: ObjectMeta
    cluster_queue: str

    @property
    def key(self) -> str:
        return self.meta.key


@dataclass(slots=True)
class WorkloadPriorityClass:
    meta: ObjectMeta
    value: int
    description: str = ""


@dataclass(slots=True)
class PodSetSpec:
    name: str
    count: int
    template: PodTemplate
    min_count: int | None = None


@dataclass(slots=True)
class PodSetAssignment:
    name: str
    flavors: dict[str, str]  # resource -> flavor
    resource_usage: ResourceList
    count: int


@dataclass(slots=True)
class Admission:
    """A Workload's ``status.admission``, with what its status conditions say about that admission."""

    cluster_queue: str
    pod_set_assignments: list[PodSetAssignment]
    # The QuotaReserved condition's lastTransitionTime (seconds since the epoch) when it is True; None when the
    # status does not record it (Kueue then takes the current time: such a workload counts as the newest).
    quota_reserved_at: float | None = None
    # The Evicted condition's reason when it is True: the eviction is under way, the quota is still held.
    evicted: str | None = None


@dataclass(slots=True)
class KueueWorkload:
    """A ``kueue.x-k8s.io`` Workload object as written (the unit of admission)."""

    meta: ObjectMeta
    queue_name: str | None
    pod_sets: list[PodSetSpec]
    priority: int | None = None
    priority_class_name: str | None = None
    priority_class_source: str | None = None
    active: bool = True
    admission: Admission | None = None


@dataclass(slots=True)
class TopologyLevel:
    node_label: str


@dataclass(slots=True)
class Topology:
    meta: ObjectMeta
    levels: tuple[str, ...]  # broadest first


FairSharingStrategy = Literal["LessThanOrEqualToFinalShare", "LessThanInitialShare"]


@dataclass(frozen=True, slots=True)
class DeviceClassMapping:
    """An entry of the Configuration's ``resources.deviceClassMappings`` (Kueue's DRA quota): the devices of these
    DeviceClasses are charged to ClusterQueue quota as the resource ``name``, one per device."""

    name: str
    device_class_names: tuple[str, ...]


# The feature gates that turn Kueue's DRA integration on or off: KueueDRAIntegration since Kueue 0.18, which kept
# DynamicResourceAllocation (0.14-0.17) as an alias.
DRA_GATES = ("KueueDRAIntegration", "DynamicResourceAllocation")


def dra_gate(gates: Mapping[str, bool]) -> str | None:
    """The gate of Kueue's DRA integration that ``gates`` (a Configuration's featureGates) names, if any."""
    return next((g for g in DRA_GATES if g in gates), None)


@dataclass(slots=True)
class SchedulerConfig:
    """Kueue's controller Configuration (config.kueue.x-k8s.io/v1beta1), the parts the scheduler reads."""

    fair_sharing: bool = False
    fair_sharing_strategies: tuple[FairSharingStrategy, ...] = (
        "LessThanOrEqualToFinalShare", "LessThanInitialShare")
    pods_ready: PodsReadyPolicy = PodsReadyPolicy()
    source: SourceRef | None = None
    device_class_mappings: tuple[DeviceClassMapping, ...] = ()
    feature_gates: dict[str, bool] = field(default_factory=dict)  # featureGates, as written

    @property
    def dra_integration(self) -> bool:
        """Whether Kueue charges DRA claims to quota: as ``featureGates`` says when it names the gate, else when
        device classes are mapped. Kueue 0.14 (gpufleet's baseline) has the gate off by default; a Configuration
        that maps device classes is written for a Kueue that has it on (0.18 and later, or the gate set)."""
        gate = dra_gate(self.feature_gates)
        return self.feature_gates[gate] if gate is not None else bool(self.device_class_mappings)


@dataclass(slots=True)
class NodePoolGpu:
    model: str
    count: int
    memory_mib: int | None = None  # for models the catalog does not know
    mig_layout: tuple[MigPlacement, ...] | None = None  # applied to every GPU when MIG is enabled
    nvlink: Literal["auto", "all", "pairs", "none"] = "auto"


@dataclass(slots=True)
class NodePool:
    meta: ObjectMeta
    count: int
    name_prefix: str
    gpu: NodePoolGpu | None
    cpu_milli: int
    memory_bytes: int
    pods: int = DEFAULT_MAX_PODS
    sharing: DevicePluginConfig = field(default_factory=DevicePluginConfig)
    node_labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    # topology: node label -> list of domain values; node i gets values[i * len // count]
    topology: dict[str, tuple[str, ...]] = field(default_factory=dict)
    nodes_per_domain: dict[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.meta.name
