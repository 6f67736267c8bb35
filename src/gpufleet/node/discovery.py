"""From a discovered machine and a device-plugin configuration to what the agent publishes.

* ``labels``: GPU Feature Discovery's, key for key. The sharing-dependent ones (product with the ``-SHARED``
  and ``-MIG-<profile>`` rules, count, replicas, memory, family, compute capability, sharing-strategy,
  ``mig.strategy``, ``nvidia.com/mig-<profile>.*``) come from :func:`gpufleet.gpu.sharing.gfd_labels`, the same
  code ``gpufleet nodes render`` uses; NVML adds what a NodePool cannot know: driver and CUDA versions, the
  machine type, the timestamp, and the MIG devices' own memory, multiprocessor and engine counts.
* ``annotations``: the ``gpufleet.io/gpus`` inventory the scheduler reads (:mod:`gpufleet.api.inventory`).
* ``resources``: what the device plugins advertise, and per resource the devices themselves with NVIDIA's IDs
  (GPU UUID, MIG UUID, ``<uuid>::<n>`` replicas), from :func:`gpufleet.gpu.sharing.advertised_units`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpufleet.api.errors import ManifestError
from gpufleet.api.inventory import format_inventory
from gpufleet.api.limits import DEVICES_PER_NODE, MAX_DEVICES_PER_NODE
from gpufleet.api.objects import GPU_INVENTORY_ANNOTATION
from gpufleet.gpu.catalog import DEFAULT_CATALOG, Catalog, GpuModel, sanitise_product
from gpufleet.gpu.mig import MigError, MigPlacement, geometry_for
from gpufleet.gpu.sharing import (
    AdvertisedUnit,
    DevicePluginConfig,
    MigInstance,
    PhysicalGpu,
    SharingError,
    advertised_counts,
    advertised_units,
    gfd_labels,
)
from gpufleet.node.contract import Gpu, Machine, MigDevice
from gpufleet.node.dpconfig import KIND, AgentDeviceConfig

log = logging.getLogger(__name__)

PRESENT_LABEL = "nvidia.com/gpu.present"
TIMESTAMP_LABEL = "nvidia.com/gfd.timestamp"


class DiscoveryError(ValueError):
    """The machine cannot be offered under this configuration (what NVIDIA's plugin refuses at start)."""


@dataclass(frozen=True, slots=True)
class PluginDevice:
    """One device as the kubelet sees it, and what a container that gets it must see."""

    id: str  # the kubelet's device ID: GPU UUID, MIG UUID, or either with ::<replica>
    resource: str
    gpu_index: int
    gpu_uuid: str  # the physical GPU (a MIG device's parent)
    visible: str  # NVIDIA_VISIBLE_DEVICES entry with deviceIDStrategy uuid (GPU or MIG UUID)
    index: str  # ... with deviceIDStrategy index ("0", or "0:1" for a MIG device)
    numa_node: int | None = None
    mig: MigDevice | None = None
    replica: int | None = None


@dataclass(frozen=True, slots=True)
class Discovery:
    machine: Machine
    config: AgentDeviceConfig
    gpus: tuple[PhysicalGpu, ...]
    labels: dict[str, str]
    annotations: dict[str, str]
    resources: dict[str, int]
    devices: dict[str, tuple[PluginDevice, ...]]  # resource -> its devices, in GPU order

    def document(self) -> dict[str, Any]:
        """What ``gpufleet node discover`` prints."""
        return {"labels": dict(sorted(self.labels.items())), "annotations": dict(self.annotations),
                "resources": dict(sorted(self.resources.items()))}

    def device(self, device_id: str) -> PluginDevice | None:
        for devices in self.devices.values():
            for d in devices:
                if d.id == device_id:
                    return d
        return None


def model_for(gpu: Gpu, catalog: Catalog = DEFAULT_CATALOG) -> GpuModel:
    """The catalog's model for an NVML name, with what NVML measured (name, memory) taking precedence."""
    product = sanitise_product(gpu.name)
    known = catalog.find(gpu.name) or catalog.find(product)
    if known is not None:
        return dataclasses.replace(known, product=product, nvml_name=gpu.name, memory_mib=gpu.memory_mib)
    # A model gpufleet does not know still gets GFD's labels and an inventory; the scheduler resolves it by
    # its memory (Catalog.resolve), as it does for the openb trace's undisclosed models.
    return GpuModel(key=product.removeprefix("NVIDIA-"), product=product, nvml_name=gpu.name,
                    memory_mib=gpu.memory_mib, compute_major=gpu.compute_major, compute_minor=gpu.compute_minor,
                    mig_capable=gpu.mig_capable, nvlink=False, nvlinks_per_pair=0, price_per_hour=0.0,
                    price_source="unknown")


def physical_gpus(machine: Machine, sharing: DevicePluginConfig, catalog: Catalog = DEFAULT_CATALOG
                  ) -> tuple[PhysicalGpu, ...]:
    if not machine.gpus:
        return ()
    model = model_for(machine.gpus[0], catalog)
    if len({g.name for g in machine.gpus}) > 1:
        log.warning("GPUs of several models on one node (%s); labels and the inventory describe %s, as GFD's "
                    "labels describe the first GPU", ", ".join(sorted({g.name for g in machine.gpus})), model.key)
    out = []
    for g in machine.gpus:
        # With migStrategy none a MIG-enabled GPU is offered whole, and so it is described (as the render does).
        mig_on = g.mig_enabled and sharing.mig_strategy != "none"
        if mig_on and geometry_for(model.key) is None:
            raise DiscoveryError(f"GPU {g.index} ({g.name}) has MIG enabled, but gpufleet has no MIG geometry for "
                                 f"{model.key}; use migStrategy none, or keep NVIDIA's plugin (--inventory-only)")
        instances = tuple(MigInstance(MigPlacement(d.profile, d.start), d.uuid)
                          for d in sorted(g.mig, key=lambda d: d.start)) if mig_on else ()
        out.append(PhysicalGpu(g.index, g.uuid, model, mig_on, instances))
    return tuple(out)


def _version_labels(machine: Machine) -> dict[str, str]:
    parts = machine.driver_version.split(".")
    major, minor = parts[0], parts[1] if len(parts) > 1 else ""
    rev = parts[2] if len(parts) > 2 else ""
    cuda_major, cuda_minor = machine.cuda_driver_version // 1000, (machine.cuda_driver_version % 1000) // 10
    return {
        "nvidia.com/cuda.driver.major": major, "nvidia.com/cuda.driver.minor": minor,
        "nvidia.com/cuda.driver.rev": rev,
        "nvidia.com/cuda.driver-version.major": major, "nvidia.com/cuda.driver-version.minor": minor,
        "nvidia.com/cuda.driver-version.revision": rev, "nvidia.com/cuda.driver-version.full": machine.driver_version,
        "nvidia.com/cuda.runtime.major": str(cuda_major), "nvidia.com/cuda.runtime.minor": str(cuda_minor),
        "nvidia.com/cuda.runtime-version.major": str(cuda_major),
        "nvidia.com/cuda.runtime-version.minor": str(cuda_minor),
        "nvidia.com/cuda.runtime-version.full": f"{cuda_major}.{cuda_minor}",
    }


def _mig_device_labels(machine: Machine, sharing: DevicePluginConfig, labels: Mapping[str, str]) -> dict[str, str]:
    """NVML's own figures for each MIG profile on offer (GFD reads them from nvmlDeviceGetAttributes)."""
    out: dict[str, str] = {}
    for gpu in machine.gpus:
        for d in gpu.mig:
            prefix = "nvidia.com/gpu" if sharing.mig_strategy == "single" else \
                f"nvidia.com/mig-{d.profile.replace('+', '.')}"
            if f"{prefix}.count" not in labels or f"{prefix}.slices.gi" not in labels:
                continue  # not offered as a MIG resource under this strategy
            out[f"{prefix}.memory"] = str(d.memory_mib)
            out[f"{prefix}.slices.gi"] = str(d.gi_slices)
            out[f"{prefix}.slices.ci"] = str(d.ci_slices)
            if d.multiprocessors is not None:
                out[f"{prefix}.multiprocessors"] = str(d.multiprocessors)
            if d.engines is not None:
                for name, value in (("copy", d.engines.copy), ("decoder", d.engines.decoder),
                                    ("encoder", d.engines.encoder), ("jpeg", d.engines.jpeg),
                                    ("ofa", d.engines.ofa)):
                    out[f"{prefix}.engines.{name}"] = str(value)
    return out


def _plugin_device(unit: AdvertisedUnit, gpu: Gpu) -> PluginDevice:
    if unit.mig is None:
        base, visible, index, mig = gpu.uuid, gpu.uuid, str(gpu.index), None
    else:
        positions = {d.uuid: k for k, d in enumerate(sorted(gpu.mig, key=lambda d: d.start))}
        mig = next(d for d in gpu.mig if d.uuid == unit.mig.uuid)
        base, visible, index = mig.uuid, mig.uuid, f"{gpu.index}:{positions[mig.uuid]}"
    device_id = base if unit.replica is None else f"{base}::{unit.replica}"
    return PluginDevice(device_id, unit.resource, gpu.index, gpu.uuid, visible, index, gpu.numa_node, mig,
                        unit.replica)


def _check_device_count(gpus: Sequence[PhysicalGpu], config: AgentDeviceConfig) -> None:
    """Refuse, before a single device is made, a configuration under which this machine would advertise more
    GPU devices than gpufleet's limit (docs/limits.md): the agent keeps, serves and labels each one. Each
    resource's replicas are bounded where the config is read; only here is the machine known (64 GPUs with 7
    MIG devices each, time-sliced 64 ways, would be 28,672)."""
    counts = advertised_counts(gpus, config.sharing)
    total = sum(counts.values())
    if total <= MAX_DEVICES_PER_NODE:
        return
    sharing = config.sharing
    shared = [r for r in counts if sharing.replicas_for(r) > 1]
    detail = ", ".join(f"{r}: {counts[r] // sharing.replicas_for(r):,} x {sharing.replicas_for(r)} replicas"
                       if r in shared else f"{r}: {counts[r]:,}" for r in sorted(counts))
    message = f"this machine would advertise {total:,} GPU devices ({detail}): {DEVICES_PER_NODE.says()}"
    if not shared:  # no replicas to lower: a machine beyond what gpufleet serves
        raise DiscoveryError(message)
    worst = max(shared, key=counts.__getitem__)
    physical = {r: counts[r] // sharing.replicas_for(r) for r in shared}
    room = (MAX_DEVICES_PER_NODE - (total - counts[worst])) // physical[worst]
    fix = f"lower the replicas of {worst} to at most {room}" if room >= 2 else _fewer_replicas(counts, physical,
                                                                                              sharing.replicas_for)
    field, line = config.replicas_at.get(worst, ("sharing.timeSlicing", None))
    raise DiscoveryError(str(ManifestError(message, config.source, line, KIND if config.source else None,
                                           field=field, fix=fix)))


def _fewer_replicas(counts: Mapping[str, int], physical: Mapping[str, int], replicas: Callable[[str], int]) -> str:
    """What brings the machine within the limit when lowering one resource's replicas is not enough: the fewest
    resources to stop time-slicing (those with the most devices first), and the highest replicas, one for every
    other time-sliced resource, that then fit; each step computed, so that the fix is true of this machine."""
    fixed = sum(n for r, n in counts.items() if r not in physical)
    order = sorted(physical, key=lambda r: (-physical[r], r))
    for k in range(len(order) + 1):
        stopped, rest = order[:k], order[k:]
        base = fixed + sum(physical[r] for r in stopped)

        def devices(cap: int, base: int = base, rest: list[str] = rest) -> int:
            return base + sum(physical[r] * min(replicas(r), cap) for r in rest)

        top = max((replicas(r) for r in rest), default=1)
        cap = next((c for c in range(top, 1, -1) if devices(c) <= MAX_DEVICES_PER_NODE), None)
        if cap is None and (rest or base > MAX_DEVICES_PER_NODE):
            continue
        steps = [f"stop time-slicing {' and '.join(stopped)}"] if stopped else []
        lowered = [r for r in rest if cap is not None and replicas(r) > cap]
        if lowered:
            steps.append(f"lower the replicas of {' and '.join(lowered)} to at most {cap}")
        return f"{', and '.join(steps)} ({devices(cap or 1):,} devices)"
    return "none: even without time-slicing this machine has more GPU devices than gpufleet serves"


def discover(machine: Machine, config: AgentDeviceConfig, *, unhealthy_gpus: Collection[int] = (),
             timestamp: float | None = None, catalog: Catalog = DEFAULT_CATALOG) -> Discovery:
    """Labels, inventory annotation, resources and plugin devices of ``machine`` under ``config``."""
    sharing = config.sharing
    try:
        gpus = physical_gpus(machine, sharing, catalog)
        _check_device_count(gpus, config)
        units = advertised_units(gpus, sharing)
        labels = gfd_labels(gpus, sharing)
    except (SharingError, MigError) as e:
        where = f" (from {config.source})" if config.source else ""
        raise DiscoveryError(f"the device-plugin configuration{where} does not fit this machine: {e}") from e
    if gpus:
        labels[PRESENT_LABEL] = "true"
        labels.update(_version_labels(machine))
        labels["nvidia.com/gpu.machine"] = sanitise_product(machine.machine_type) or "unknown"
        labels.update(_mig_device_labels(machine, sharing, labels))
        if not config.no_timestamp:
            labels[TIMESTAMP_LABEL] = str(int(time.time() if timestamp is None else timestamp))
    by_index = {g.index: g for g in machine.gpus}
    devices = {res: tuple(_plugin_device(u, by_index[u.gpu.index]) for u in us) for res, us in units.items()}
    inventory = format_inventory(gpus, sharing, dict(machine.nvlinks), unhealthy_gpus) if gpus else None
    return Discovery(machine=machine, config=config, gpus=gpus, labels=labels,
                     annotations={GPU_INVENTORY_ANNOTATION: inventory} if inventory else {},
                     resources={res: len(ds) for res, ds in devices.items()}, devices=devices)


def refresh_inventory(found: Discovery, unhealthy_gpus: Collection[int]) -> Discovery:
    """The same discovery with the inventory's health marks redone (after an XID), without asking NVML."""
    if not found.gpus:
        return found
    text = format_inventory(found.gpus, found.config.sharing, dict(found.machine.nvlinks), unhealthy_gpus)
    return dataclasses.replace(found, annotations={GPU_INVENTORY_ANNOTATION: text})
