"""What a GPU node advertises and how it is labelled, under each NVIDIA device-plugin setting.

Given a node's physical GPUs (model, MIG layout) and a device-plugin configuration (migStrategy, time-slicing
replicas, renameByDefault, failRequestsGreaterThanOne), compute

* the extended resources the device plugin registers with the kubelet, with their counts
  (``nvidia.com/gpu``, ``nvidia.com/gpu.shared``, ``nvidia.com/mig-3g.40gb``, ...), and
* the labels GPU Feature Discovery writes (product with the ``-SHARED`` rule, count, replicas, memory,
  family, compute capability, sharing-strategy, mig.strategy and the ``mig-<profile>.*`` labels).

Where NVIDIA's README and code disagree (``gpu.replicas`` is the per-GPU replica count, not a product), the
code is followed, as the reference records. Not modelled: MPS (mutually exclusive with time-slicing), the
driver/CUDA version labels (a NodePool does not know the driver) and the MIG engine-count labels (NVML
attributes the reference does not tabulate for every profile).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from gpufleet.gpu.catalog import GpuModel
from gpufleet.gpu.constants import GPU
from gpufleet.gpu.mig import MigGeometry, MigPlacement, check_layout, geometry_for

MigStrategy = Literal["none", "single", "mixed"]
GPU_RESOURCE = GPU  # the resource the device plugin advertises GPUs under (gpu.constants)
SHARED_SUFFIX = ".shared"


class SharingError(ValueError):
    """A configuration the device plugin itself would refuse; the message says how to fix it."""


@dataclass(frozen=True, slots=True)
class DevicePluginConfig:
    """The parts of the NVIDIA device-plugin config file (version v1) that change what a node offers."""

    mig_strategy: MigStrategy = "none"
    # resource name ("nvidia.com/gpu" or a mixed-strategy MIG resource) -> replicas (>= 2)
    time_slicing: Mapping[str, int] = field(default_factory=dict)
    rename_by_default: bool = False
    fail_requests_greater_than_one: bool = False

    def replicas_for(self, resource: str) -> int:
        return self.time_slicing.get(resource, 1)

    @property
    def sharing_strategy(self) -> str:
        return "time-slicing" if any(r > 1 for r in self.time_slicing.values()) else "none"

    def validate(self) -> list[str]:
        problems = []
        if self.mig_strategy not in ("none", "single", "mixed"):
            problems.append(f"migStrategy {self.mig_strategy!r} is not one of none, single, mixed")
        for name, replicas in self.time_slicing.items():
            if replicas < 2:
                problems.append(f"timeSlicing replicas for {name} must be at least 2, got {replicas}")
            if name != GPU_RESOURCE and not name.startswith("nvidia.com/mig-"):
                problems.append(f"timeSlicing resource {name} is neither nvidia.com/gpu nor a MIG resource")
        return problems


@dataclass(frozen=True, slots=True)
class MigInstance:
    placement: MigPlacement
    uuid: str


@dataclass(frozen=True, slots=True)
class PhysicalGpu:
    index: int
    uuid: str
    model: GpuModel
    mig_enabled: bool = False
    mig: tuple[MigInstance, ...] = ()

    @property
    def geometry(self) -> MigGeometry | None:
        return geometry_for(self.model.key)


def gpu_uuid(node: str, index: int) -> str:
    """A stable GPU UUID for a simulated node, shaped like NVML's ``GPU-xxxxxxxx-...``."""
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpufleet:{node}/gpu/{index}"))


def mig_uuid(node: str, index: int, placement: MigPlacement) -> str:
    return "MIG-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpufleet:{node}/gpu/{index}/{placement}"))


def make_gpus(
    node: str, model: GpuModel, count: int, mig_layout: Sequence[MigPlacement] | None = None
) -> tuple[PhysicalGpu, ...]:
    """``count`` GPUs of one model, every one MIG-partitioned with ``mig_layout`` when it is given."""
    gpus = []
    for index in range(count):
        if mig_layout is None:
            gpus.append(PhysicalGpu(index, gpu_uuid(node, index), model))
            continue
        geometry = geometry_for(model.key)
        if geometry is None:
            raise SharingError(f"{model.key} does not support MIG; remove the MIG layout or pick a MIG-capable model")
        check_layout(geometry, mig_layout)
        instances = tuple(MigInstance(p, mig_uuid(node, index, p)) for p in sorted(mig_layout, key=lambda p: p.start))
        gpus.append(PhysicalGpu(index, gpu_uuid(node, index), model, True, instances))
    return tuple(gpus)


def _shared_name(resource: str, config: DevicePluginConfig) -> str:
    if config.replicas_for(resource) > 1 and config.rename_by_default:
        return resource + SHARED_SUFFIX
    return resource


def check_node(gpus: Sequence[PhysicalGpu], config: DevicePluginConfig) -> None:
    """Raise what the device plugin would refuse at start-up for this node."""
    problems = config.validate()
    if config.mig_strategy == "single" and gpus:
        if len({g.mig_enabled for g in gpus}) > 1:
            problems.append("migStrategy single: all devices on the node must be configured with the same "
                            "migEnabled value")
        elif gpus[0].mig_enabled:
            kinds = {i.placement.profile for g in gpus for i in g.mig}
            if any(not g.mig for g in gpus):
                problems.append("migStrategy single: a MIG-enabled GPU has no MIG devices")
            if len(kinds) > 1:
                problems.append("migStrategy single: more than one MIG device type present on node "
                                f"({', '.join(sorted(kinds))}); use migStrategy mixed or one profile")
    if problems:
        raise SharingError("; ".join(problems))


@dataclass(frozen=True, slots=True)
class AdvertisedUnit:
    """One device the plugin lists under ``resource``: a whole GPU, a MIG instance, or one replica of either."""

    resource: str
    gpu: PhysicalGpu
    mig: MigInstance | None = None
    replica: int | None = None  # None when the resource is not time-sliced


def _physical_devices(gpus: Sequence[PhysicalGpu], config: DevicePluginConfig
                      ) -> Iterator[tuple[str, PhysicalGpu, MigInstance | None]]:
    """(resource, GPU, MIG instance or None) of every device before time-slicing, in GPU order."""
    for gpu in gpus:
        if gpu.mig_enabled and config.mig_strategy == "single":
            for instance in gpu.mig:
                yield GPU_RESOURCE, gpu, instance
        elif gpu.mig_enabled and config.mig_strategy == "mixed":
            geometry = gpu.geometry
            assert geometry is not None
            for instance in gpu.mig:
                yield geometry.profile(instance.placement.profile).resource_name, gpu, instance
        else:
            # migStrategy none exposes MIG-enabled GPUs as full GPUs too.
            yield GPU_RESOURCE, gpu, None


def advertised_counts(gpus: Sequence[PhysicalGpu], config: DevicePluginConfig) -> Counter[str]:
    """How many devices the plugin would list per resource *as written in the config* (before renaming),
    counted without making them: what a limit on devices per node is checked against first."""
    counts: Counter[str] = Counter()
    for resource, _, _ in _physical_devices(gpus, config):
        counts[resource] += config.replicas_for(resource)
    return counts


def advertised_units(gpus: Sequence[PhysicalGpu], config: DevicePluginConfig) -> dict[str, list[AdvertisedUnit]]:
    """The devices the device plugin lists, per extended resource, in GPU order (what the node agent serves)."""
    check_node(gpus, config)
    out: dict[str, list[AdvertisedUnit]] = {}
    for resource, gpu, mig in _physical_devices(gpus, config):
        replicas = config.replicas_for(resource)
        name = _shared_name(resource, config)
        units = out.setdefault(name, [])
        if replicas > 1:
            units.extend(AdvertisedUnit(name, gpu, mig, i) for i in range(replicas))
        else:
            units.append(AdvertisedUnit(resource, gpu, mig))
    return out


def advertised_resources(gpus: Sequence[PhysicalGpu], config: DevicePluginConfig) -> dict[str, int]:
    """Extended resources and counts the device plugin registers (physical devices x replicas)."""
    return {resource: len(units) for resource, units in advertised_units(gpus, config).items()}


def _sharing_labels(prefix: str, resource: str, config: DevicePluginConfig, product: str) -> dict[str, str]:
    replicas = config.replicas_for(resource)
    shared = replicas > 1
    renamed = shared and config.rename_by_default
    return {
        f"{prefix}.product": product + ("-SHARED" if shared and not renamed else ""),
        f"{prefix}.replicas": str(replicas),
        f"{prefix}.sharing-strategy": "time-slicing" if shared else "none",
    }


def gfd_labels(gpus: Sequence[PhysicalGpu], config: DevicePluginConfig) -> dict[str, str]:
    """The labels GPU Feature Discovery writes for these GPUs under this configuration."""
    if not gpus:
        return {}
    check_node(gpus, config)
    labels: dict[str, str] = {}
    # GFD labels the first GPU's model; a NodePool has one model per node.
    model = gpus[0].model
    labels["nvidia.com/mig.capable"] = str(any(g.model.mig_capable for g in gpus)).lower()
    labels["nvidia.com/mps.capable"] = "false"
    labels["nvidia.com/gpu.mode"] = "compute"
    labels["nvidia.com/gpu.family"] = model.family
    labels["nvidia.com/gpu.compute.major"] = str(model.compute_major)
    labels["nvidia.com/gpu.compute.minor"] = str(model.compute_minor)
    mig_on = [g for g in gpus if g.mig_enabled]
    if config.mig_strategy != "none":
        labels["nvidia.com/mig.strategy"] = config.mig_strategy

    if config.mig_strategy == "single" and mig_on:
        geometry = gpus[0].geometry
        assert geometry is not None
        profile = geometry.profile(gpus[0].mig[0].placement.profile)
        labels.update(_sharing_labels("nvidia.com/gpu", GPU_RESOURCE, config,
                                      f"{model.product}-MIG-{profile.label_key[4:]}"))
        labels["nvidia.com/gpu.count"] = str(sum(len(g.mig) for g in gpus))
        labels.update(_mig_attribute_labels("nvidia.com/gpu", profile.memory_mib, profile.compute_slices,
                                            profile.multiprocessors))
        return labels

    labels.update(_sharing_labels("nvidia.com/gpu", GPU_RESOURCE, config, model.product))
    labels["nvidia.com/gpu.count"] = str(len(gpus))
    labels["nvidia.com/gpu.memory"] = str(model.memory_mib)
    if config.mig_strategy == "mixed" and mig_on:
        if len(mig_on) == len(gpus):
            # Every GPU is a MIG parent: the full-GPU resource offers nothing to share.
            labels["nvidia.com/gpu.replicas"] = "0"
        by_profile: Counter[str] = Counter(i.placement.profile for g in mig_on for i in g.mig)
        geometry = mig_on[0].geometry
        assert geometry is not None
        for name, count in sorted(by_profile.items()):
            profile = geometry.profile(name)
            prefix = f"nvidia.com/{profile.label_key}"
            labels.update(_sharing_labels(prefix, profile.resource_name, config,
                                          f"{model.product}-MIG-{profile.label_key[4:]}"))
            labels[f"{prefix}.count"] = str(count)
            labels.update(_mig_attribute_labels(prefix, profile.memory_mib, profile.compute_slices,
                                                profile.multiprocessors))
    return labels


def _mig_attribute_labels(prefix: str, memory_mib: int, slices: int, sms: int | None) -> dict[str, str]:
    labels = {
        f"{prefix}.memory": str(memory_mib),
        f"{prefix}.slices.gi": str(slices),
        f"{prefix}.slices.ci": str(slices),
    }
    if sms is not None:
        labels[f"{prefix}.multiprocessors"] = str(sms)
    return labels
