"""The GPUs a node's DRA ResourceSlices publish, as the cluster state's GPU slots.

:mod:`gpufleet.api.dra_nodes` reads the slices into :class:`~gpufleet.api.dra_objects.DraGpu` records on each Node
(complete pools at their highest generation, NVIDIA's device names and attributes, the model from the catalog).
Here each becomes the same :class:`~gpufleet.cluster.devices.GpuSlot` a device-plugin GPU becomes: ``whole``, or
``mig`` with one :class:`~gpufleet.cluster.devices.MigSlot` per MIG device, so placement, fragmentation and metrics
count one fleet; a dynamic MIG GPU is ``whole`` with its partitions and counters (carved on demand). The slots
keep their DRA identity (driver, pool, device name): a claimed device is found by it, and a pod placed through
the device plugin never gets one (a DRA node offers no ``nvidia.com/gpu`` in its allocatable, and fractions stay
off DRA GPUs: gpufleet.cluster.free_devices).

The resources recorded on the slots are the names the device plugin would use (``nvidia.com/gpu``,
``nvidia.com/mig-1g.10gb``): what NVIDIA's chart maps the classes to (its ``extendedResourceName``), and what the
fragmentation and capacity views group devices by.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from gpufleet.api.dra_objects import CounterConsumption, DraGpu, DraMigDevice
from gpufleet.cluster.devices import GpuSlot, MigSlot
from gpufleet.gpu.constants import GPU
from gpufleet.gpu.mig import MigPlacement, resource_name_for_profile


def dra_gpu_slots(gpus: Sequence[DraGpu]) -> list[GpuSlot]:
    """The GPU slots of a node whose ResourceSlices publish ``gpus`` (in the node's GPU order)."""
    slots: list[GpuSlot] = []
    for index, g in enumerate(gpus):
        if g.mig:
            migs = [MigSlot(MigPlacement(m.profile, m.start), m.uuid or f"{g.driver}/{g.pool}/{m.device}",
                            resource_name_for_profile(m.profile), m.memory_mib, m.compute_slices, dra_device=m.device)
                    for m in g.mig]
            slots.append(GpuSlot(index, g.uuid, g.model, g.memory_mib, "mig", GPU, mig=migs, dra_driver=g.driver,
                                 dra_pool=g.pool, dra_device=g.device))
        else:
            slots.append(GpuSlot(index, g.uuid, g.model, g.memory_mib, "whole", GPU, dra_driver=g.driver,
                                 dra_pool=g.pool, dra_device=g.device,
                                 partitions=[_partition(g, m) for m in g.partitions],
                                 counters={f"{cs.name}/{name}": amount for cs in g.counter_sets
                                           for name, amount in cs.counters.items()},
                                 whole_consumes=_consumed(g.counters)))
    return slots


def _consumed(consumptions: Iterable[CounterConsumption]) -> dict[str, Fraction]:
    """What a device consumes, keyed "counter set/counter" as the GPU slot keys its counters."""
    return {f"{c.counter_set}/{name}": amount for c in consumptions for name, amount in c.counters.items()}


def _partition(g: DraGpu, m: DraMigDevice) -> MigSlot:
    """A dynamic MIG device of ``g``: an abstract device until carved, named by its DRA identity."""
    return MigSlot(MigPlacement(m.profile, m.start), m.uuid or f"{g.driver}/{g.pool}/{m.device}",
                   resource_name_for_profile(m.profile), m.memory_mib, m.compute_slices, dra_device=m.device,
                   consumes=_consumed(m.counters))


@dataclass(frozen=True, slots=True)
class DraNodeSummary:
    """One node's DRA GPUs in a line: what ``gpufleet plan`` shows of them."""

    node: str
    driver: str
    pools: tuple[str, ...]
    model: str
    gpus: int
    whole: int
    mig: tuple[tuple[str, int], ...]  # (profile, instances), by profile
    dynamic: int = 0  # GPUs in dynamic MIG mode: whole, or carved into MIG devices on demand

    def mig_text(self) -> str:
        parts = [f"{profile} x{n}" for profile, n in self.mig]
        if self.dynamic:
            parts.append(f"carved on demand on {self.dynamic} GPU(s) (dynamic MIG)")
        return ", ".join(parts) or "-"


def dra_summary(nodes: Iterable[tuple[str, Sequence[GpuSlot]]]) -> list[DraNodeSummary]:
    """The nodes (name, GPU slots) holding GPUs published through DRA, one summary each, by node name."""
    out: list[DraNodeSummary] = []
    for name, slots in sorted(nodes, key=lambda n: n[0]):
        dra = [g for g in slots if g.dra_driver is not None]
        if not dra:
            continue
        profiles: dict[str, int] = {}
        for g in dra:
            for m in g.mig:
                profiles[m.placement.profile] = profiles.get(m.placement.profile, 0) + 1
        models = sorted({g.model for g in dra})
        out.append(DraNodeSummary(name, ", ".join(sorted({g.dra_driver or "" for g in dra})),
                                  tuple(sorted({g.dra_pool or "" for g in dra})), ", ".join(models), len(dra),
                                  sum(1 for g in dra if g.mode == "whole"), tuple(sorted(profiles.items())),
                                  sum(1 for g in dra if g.partitions)))
    return out
