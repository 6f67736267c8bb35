"""Typed forms of the DRA kinds (``resource.k8s.io``): ResourceSlice, DeviceClass, ResourceClaim and
ResourceClaimTemplate, and the GPUs a node's slices give it.

One shape for every version read: ``v1`` (Kubernetes 1.34 and later) and ``v1beta2`` and ``v1beta1``, which the API
server still serves. ``v1beta1`` writes a device's fields under ``basic`` and a request's fields inline, without
``exactly``; :mod:`gpufleet.api.dra_parse` moves them to where ``v1`` has them, so nothing past the parser knows
which version an object was written in (``api_version`` says it, for messages).

Attribute and capacity names are kept fully qualified: a name written without a domain belongs to the slice's
driver (``productName`` of ``gpu.nvidia.com`` is ``gpu.nvidia.com/productName``), which is how a constraint's
``matchAttribute`` and a CEL selector's ``device.attributes["gpu.nvidia.com"]`` name it too.

Nothing here allocates: claims are read and kept, and a later step turns them into demands (issue 28).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

from gpufleet.api.objects import ObjectMeta

DRA_GROUP = "resource.k8s.io"
DRA_VERSIONS = ("v1", "v1beta2", "v1beta1")  # v1 first: the version to write
NVIDIA_GPU_DRIVER = "gpu.nvidia.com"
# A DNS subdomain (a driver, a pool name's parts, a qualified name's prefix): lower-case labels joined by dots.
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

AttributeType = Literal["int", "bool", "string", "version"]
AllocationMode = Literal["ExactCount", "All"]
NodeSelection = Literal["nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection"]


def qualified(name: str, driver: str) -> str:
    """An attribute or capacity name with its domain: a bare name is the driver's."""
    return name if "/" in name else f"{driver}/{name}"


# ---- ResourceSlice -------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class DeviceAttribute:
    """One attribute value: exactly one of int, bool, string or version (a semantic version, kept as written)."""

    type: AttributeType
    value: int | bool | str


@dataclass(frozen=True, slots=True)
class CounterSet:
    """A slice's ``sharedCounters[]`` entry (partitionable devices): counters its devices draw from."""

    name: str
    counters: Mapping[str, Fraction]


@dataclass(frozen=True, slots=True)
class CounterConsumption:
    """A device's ``consumesCounters[]`` entry: what allocating it takes from one counter set."""

    counter_set: str
    counters: Mapping[str, Fraction]


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"  # NoSchedule, NoExecute, or None (1.35)


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a slice. ``attributes`` and ``capacity`` are keyed by fully qualified name; capacities are
    exact quantities (bytes for memory)."""

    name: str
    attributes: Mapping[str, DeviceAttribute] = field(default_factory=dict)
    capacity: Mapping[str, Fraction] = field(default_factory=dict)
    consumes_counters: tuple[CounterConsumption, ...] = ()
    taints: tuple[DeviceTaint, ...] = ()
    # where it is written (its index in spec.devices and its line), for what is said about it after parsing
    index: int = field(default=0, compare=False)
    line: int | None = field(default=None, compare=False)

    def attribute(self, name: str, driver: str) -> int | bool | str | None:
        """The value of attribute ``name`` (bare names are the driver's), None when the device has none."""
        found = self.attributes.get(qualified(name, driver))
        return found.value if found is not None else None

    def text(self, name: str, driver: str) -> str | None:
        """A string attribute's value (None when absent or of another type)."""
        found = self.attributes.get(qualified(name, driver))
        return found.value if found is not None and found.type == "string" and isinstance(found.value, str) \
            else None


@dataclass(frozen=True, slots=True)
class ResourcePool:
    name: str
    generation: int
    resource_slice_count: int


@dataclass(frozen=True, slots=True)
class ResourceSlice:
    meta: ObjectMeta
    api_version: str
    driver: str
    pool: ResourcePool
    node_selection: NodeSelection
    node_name: str | None = None  # set when node_selection is nodeName
    devices: tuple[Device, ...] = ()
    shared_counters: tuple[CounterSet, ...] = ()

    @property
    def kind(self) -> str:
        return "ResourceSlice"

    @property
    def name(self) -> str:
        return self.meta.name


# ---- DeviceClass ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class OpaqueConfig:
    """Configuration for a driver, passed to it and ignored by allocation; ``parameters`` as written."""

    driver: str
    parameters: Any = None


@dataclass(frozen=True, slots=True)
class DeviceClass:
    meta: ObjectMeta
    api_version: str
    selectors: tuple[str, ...] = ()  # CEL expressions, every one must match
    config: tuple[OpaqueConfig, ...] = ()
    extended_resource_name: str | None = None

    @property
    def kind(self) -> str:
        return "DeviceClass"

    @property
    def name(self) -> str:
        return self.meta.name


# ---- ResourceClaim and ResourceClaimTemplate -----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class DeviceToleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None


@dataclass(frozen=True, slots=True)
class DeviceSelection:
    """What ``exactly`` and each ``firstAvailable`` entry ask for (``admin_access`` is ``exactly``'s alone)."""

    device_class_name: str
    selectors: tuple[str, ...] = ()
    allocation_mode: AllocationMode = "ExactCount"
    count: int = 1
    admin_access: bool = False
    tolerations: tuple[DeviceToleration, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceSubRequest:
    name: str
    selection: DeviceSelection


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """One request of a claim: ``exactly`` one selection, or the first of ``first_available`` that fits."""

    name: str
    exactly: DeviceSelection | None = None
    first_available: tuple[DeviceSubRequest, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceConstraint:
    """One of: ``matchAttribute``, every device allocated for ``requests`` (empty: all of the claim's) has the same
    value of this fully qualified attribute; ``distinctAttribute``, each has a value of its own."""

    requests: tuple[str, ...] = ()
    match_attribute: str | None = None
    distinct_attribute: str | None = None


@dataclass(frozen=True, slots=True)
class ClaimConfig:
    requests: tuple[str, ...]
    opaque: OpaqueConfig


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[DeviceConstraint, ...] = ()
    config: tuple[ClaimConfig, ...] = ()

    def request(self, name: str) -> DeviceRequest | None:
        return next((q for q in self.requests if q.name == name), None)


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One result of an allocation: the request (``main/sub`` for a firstAvailable entry) and the device."""

    request: str
    driver: str
    pool: str
    device: str


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    devices: tuple[AllocatedDevice, ...] = ()
    node_name: str | None = None  # the node its nodeSelector names (matchFields metadata.name), when it names one


@dataclass(frozen=True, slots=True)
class ClaimConsumer:
    """An entry of ``status.reservedFor``: who may use the claim (a pod, usually)."""

    resource: str
    name: str
    uid: str | None = None
    api_group: str = ""


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    meta: ObjectMeta
    api_version: str
    spec: ClaimSpec
    allocation: ClaimAllocation | None = None
    reserved_for: tuple[ClaimConsumer, ...] = ()

    @property
    def kind(self) -> str:
        return "ResourceClaim"

    @property
    def key(self) -> str:
        return self.meta.key


@dataclass(frozen=True, slots=True)
class ResourceClaimTemplate:
    meta: ObjectMeta
    api_version: str
    spec: ClaimSpec
    claim_labels: Mapping[str, str] = field(default_factory=dict)  # spec.metadata: what each claim made gets
    claim_annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return "ResourceClaimTemplate"

    @property
    def key(self) -> str:
        return self.meta.key


# ---- what a node's slices give it ----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class DraMigDevice:
    """A MIG device of a GPU, from its slice: where it sits (profile, placement start) and its DRA name."""

    device: str
    profile: str  # canonical for the GPU's model
    start: int
    memory_mib: int
    compute_slices: int
    uuid: str | None = None
    counters: tuple[CounterConsumption, ...] = ()  # a dynamic MIG device: what carving it consumes


@dataclass(frozen=True, slots=True)
class DraGpu:
    """One physical GPU a node's ResourceSlices publish, as gpufleet plans it (gpufleet.api.dra_nodes).

    ``device`` is the whole GPU's DRA device name (``gpu-0``), None when only its MIG devices are published (a GPU
    in static MIG mode is offered as its MIG devices alone); ``mig`` lists those. A GPU with dynamic MIG
    (partitionable devices) is offered whole or as the MIG devices ``partitions`` lists, which may be carved from it
    while its ``counter_sets`` allow; ``counters`` is what the whole GPU consumes of them.
    """

    driver: str
    pool: str
    device: str | None
    uuid: str
    model: str  # a catalog key, or the productName of a model the catalog does not know
    memory_mib: int
    minor: int
    mig: tuple[DraMigDevice, ...] = ()
    counters: tuple[CounterConsumption, ...] = ()
    partitions: tuple[DraMigDevice, ...] = ()
    counter_sets: tuple[CounterSet, ...] = ()
