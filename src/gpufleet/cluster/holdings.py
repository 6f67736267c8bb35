"""What a placed pod holds, read off the cluster state: its share of GPUs, price, memory devices, compute.

Shares follow :meth:`ClusterState.gpu_allocated`, so the simulator's allocation agrees with the cluster's: a
whole GPU is 1, a time-slice replica 1/replicas, a fraction its thousandths, a MIG instance its compute
slices over those of the instances cut on that GPU. Compute speed is different for MIG: an instance runs
with its compute slices over the GPU's (3/7 for a 3g.40gb on an A100), which is what can slow a job down.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.cluster.state import ClusterState, Placement
from gpufleet.gpu.constants import MILLI
from gpufleet.gpu.mig import geometry_for


@dataclass(frozen=True, slots=True)
class MemoryDevice:
    key: str  # one physical GPU or one MIG instance
    memory_mib: int
    shared: bool  # software-shared: co-tenants' memory adds up on it


@dataclass(frozen=True, slots=True)
class Holding:
    node: str | None
    pool: str | None
    model: str | None
    share: float
    price: float
    shared_gpus: tuple[str, ...]
    devices: tuple[MemoryDevice, ...]
    mig_compute: float  # GPUs of compute in hard partitions (0 when the pod holds no MIG instance)
    whole: int  # whole GPUs held
    # Whole-GPU equivalents of what it holds, the unit of the per-job records (sim/jobs.py): a whole GPU 1, a MIG
    # instance its compute slices over the GPU's (3/7 for a 3g.40gb on an A100), a replica or fraction its share.
    equivalent: float


def holding_of(cluster: ClusterState, placement: Placement) -> Holding:
    ns = cluster.nodes[placement.node]
    share = 0.0
    mig_compute = 0.0
    soft = 0.0  # software-shared share (replicas, fractions)
    whole = 0
    shared: list[str] = []
    devices: list[MemoryDevice] = []
    for g in placement.grants:
        gpu = ns.gpus[g.gpu]
        gpu_key = f"{ns.name}/{gpu.index}"
        if g.kind == "whole":
            share += 1.0
            whole += 1
            devices.append(MemoryDevice(gpu_key, gpu.memory_mib, False))
        elif g.kind == "fraction":
            share += g.milli / MILLI
            soft += g.milli / MILLI
            shared.append(gpu_key)
            devices.append(MemoryDevice(gpu_key, gpu.memory_mib, True))
        elif g.kind == "replica":
            share += 1.0 / gpu.replicas
            soft += 1.0 / gpu.replicas
            shared.append(gpu_key)
            devices.append(MemoryDevice(gpu_key, gpu.memory_mib, True))
        elif g.kind == "partition":
            # a MIG device carved from a dynamic MIG GPU: its compute slices over the model's
            inst = gpu.partitions[g.slot]
            geometry = geometry_for(gpu.model)
            part = inst.compute_slices / (geometry.compute_slices if geometry else 7)
            share += part
            mig_compute += part
            devices.append(MemoryDevice(f"{gpu_key}/p{g.slot}", inst.memory_mib, False))
        else:
            inst = gpu.mig[g.slot]
            total = sum(s.compute_slices for s in gpu.mig) or 1
            share += inst.compute_slices / total
            geometry = geometry_for(gpu.model)
            mig_compute += inst.compute_slices / (geometry.compute_slices if geometry else total)
            devices.append(MemoryDevice(f"{gpu_key}/{g.slot}", inst.memory_mib, False))
    model = ns.gpu_model
    price = cluster.catalog.price(model) if model else 0.0
    # A pod holding two replicas of one GPU uses its memory there once, not twice.
    unique = tuple({d.key: d for d in devices}.values())
    return Holding(ns.name, ns.pool, model, share, price, tuple(dict.fromkeys(shared)), unique,
                   mig_compute, whole, whole + mig_compute + soft)


def unplaced_holding(gpu_equivalent: float) -> Holding:
    """A pod admitted without a node (quota-only policies): it counts by what it asked."""
    return Holding(None, None, None, gpu_equivalent, 0.0, (), (), 0.0, 0, gpu_equivalent)
