"""The GPU devices of one node and who holds them.

A physical GPU is offered in exactly one way, set by the device plugin's configuration on its node:

* ``whole``: advertised as ``nvidia.com/gpu``; held entirely by one pod, or shared by fractional pods
  (KAI-style ``gpu-fraction``) whose thousandths sum to at most 1000 and whose memory to at most the GPU's;
* ``replicas``: time-sliced into ``replicas`` interchangeable slots (``nvidia.com/gpu`` or
  ``nvidia.com/gpu.shared``), one pod per slot, no memory isolation;
* ``mig``: partitioned into MIG instances (``nvidia.com/mig-<profile>``), one pod per instance.

A GPU that DRA publishes as a partitionable device (NVIDIA's dynamic MIG, KEP-4815) is a ``whole`` GPU that may
instead be carved: its ``partitions`` are the MIG devices that could be created on it, each consuming counters of
the GPU's counter sets (``counters``), as the whole GPU consumes all of them. A partition is granted only while
what the held devices consume, with it, stays within every counter; the whole GPU only while nothing is carved.

Device IDs follow the device plugin: the GPU UUID, ``UUID::i`` for a replica, the MIG UUID for an
instance; a node without a published inventory gets stable logical IDs (``NODE/gpu-0``, ``NODE/gpu-0::3``,
``NODE/gpu-0/3g.40gb@4``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

from gpufleet.gpu.constants import MILLI
from gpufleet.gpu.mig import MigPlacement, geometry_for

GpuMode = Literal["whole", "replicas", "mig"]


class InvariantError(RuntimeError):
    """An allocation or release that would break a device or capacity invariant (a bug, never user input)."""


@dataclass(slots=True)
class MigSlot:
    placement: MigPlacement
    device_id: str
    resource: str  # nvidia.com/mig-3g.40gb
    memory_mib: int
    compute_slices: int
    holder: str | None = None
    dra_device: str | None = None  # its DRA device name when a ResourceSlice publishes it (driver, pool: its GPU's)
    # A partition of a dynamic MIG GPU: what carving it takes from the GPU's counters ("set/counter" -> amount).
    consumes: Mapping[str, Fraction] = field(default_factory=dict)


@dataclass(slots=True)
class GpuSlot:
    """One physical GPU of a node."""

    index: int
    device_id: str  # GPU UUID or logical id
    model: str
    memory_mib: int
    mode: GpuMode
    resource: str  # what the device plugin advertises for it (for mig: the parent, informational)
    replicas: int = 1
    holder: str | None = None  # whole mode: the pod holding all of it
    fractions: dict[str, tuple[int, int]] = field(default_factory=dict)  # pod -> (milli, memory MiB)
    replica_holders: list[str | None] = field(default_factory=list)
    # Time-sliced GPUs isolate no memory: what each replica holder is known to use (observed, declared or
    # expected MiB; a holder with nothing known is absent). A hint for placement, not an invariant.
    replica_memory: dict[str, int] = field(default_factory=dict)
    mig: list[MigSlot] = field(default_factory=list)
    healthy: bool = True
    # DRA identity when a ResourceSlice publishes it (driver, pool, device name; None: the device plugin's GPU, or
    # a GPU offered only as its MIG devices, whose dra_device is on each MigSlot).
    dra_driver: str | None = None
    dra_pool: str | None = None
    dra_device: str | None = None
    # Dynamic MIG (a whole-mode GPU DRA publishes as partitionable): the MIG devices that may be carved from it,
    # its counter sets' capacity ("set/counter" -> amount), and what the whole GPU consumes of them.
    partitions: list[MigSlot] = field(default_factory=list)
    counters: Mapping[str, Fraction] = field(default_factory=dict)
    whole_consumes: Mapping[str, Fraction] = field(default_factory=dict)

    # ---- derived views -------------------------------------------------------------------------------------
    @property
    def carved(self) -> bool:
        """Some partition of it is held (dynamic MIG): the whole GPU is not to be had."""
        return any(p.holder is not None for p in self.partitions)

    def counters_used(self) -> dict[str, Fraction]:
        """What its held devices (the whole GPU, carved partitions) take from its counters."""
        used: dict[str, Fraction] = {}
        for held in ([self.whole_consumes] if self.holder is not None else []) + [
                p.consumes for p in self.partitions if p.holder is not None]:
            for name, amount in held.items():
                used[name] = used.get(name, Fraction(0)) + amount
        return used

    def counters_allow(self, consumes: Mapping[str, Fraction], used: Mapping[str, Fraction] | None = None) -> bool:
        """Whether ``consumes`` more (beside ``used``, by default what is held now) stays within every counter."""
        taken = self.counters_used() if used is None else used
        return all(taken.get(name, 0) + amount <= self.counters.get(name, 0) for name, amount in consumes.items())

    def partition_free(self, k: int) -> bool:
        """Partition ``k`` can be carved now: not held, the GPU not held whole, its counters not exceeded."""
        p = self.partitions[k]
        return p.holder is None and self.holder is None and self.healthy and self.counters_allow(p.consumes)

    @property
    def used_milli(self) -> int:
        if self.mode == "whole":
            if self.holder is not None:
                return MILLI
            if self.partitions:
                carved = sum(p.compute_slices for p in self.partitions if p.holder is not None)
                if carved:
                    geometry = geometry_for(self.model)
                    return min(MILLI, MILLI * carved // (geometry.compute_slices if geometry else 7))
            return sum(m for m, _ in self.fractions.values())
        if self.mode == "replicas":
            held = sum(1 for h in self.replica_holders if h is not None)
            return (MILLI * held) // self.replicas
        total = sum(s.compute_slices for s in self.mig) or 1
        return MILLI * sum(s.compute_slices for s in self.mig if s.holder is not None) // total

    @property
    def free_milli(self) -> int:
        """Thousandths of this GPU not held (the fragmentation view of a whole-mode GPU)."""
        return MILLI - self.used_milli

    @property
    def used_memory_mib(self) -> int:
        if self.mode == "whole":
            if self.holder is not None:
                return self.memory_mib
            return sum(m for _, m in self.fractions.values()) + sum(
                p.memory_mib for p in self.partitions if p.holder is not None)
        return 0

    @property
    def shared_memory_mib(self) -> int:
        """GPU memory its time-slice replica holders are known to use (0 for other modes)."""
        return sum(self.replica_memory.values()) if self.replica_memory else 0

    @property
    def is_free(self) -> bool:
        """Nothing at all is held on it."""
        if self.mode == "whole":
            return self.holder is None and not self.fractions and not self.carved
        if self.mode == "replicas":
            return all(h is None for h in self.replica_holders)
        return all(s.holder is None for s in self.mig)

    def free_replicas(self) -> list[int]:
        return [i for i, h in enumerate(self.replica_holders) if h is None]

    def replica_id(self, i: int) -> str:
        return f"{self.device_id}::{i}"

    def holders(self) -> set[str]:
        out: set[str] = set()
        if self.holder is not None:
            out.add(self.holder)
        out.update(self.fractions)
        out.update(h for h in self.replica_holders if h is not None)
        out.update(s.holder for s in self.mig if s.holder is not None)
        out.update(p.holder for p in self.partitions if p.holder is not None)
        return out


def fraction_need(milli: int, memory_mib: int | None, gpu_memory_mib: int) -> tuple[int, int]:
    """(thousandths, MiB) a fractional pod takes on a GPU with ``gpu_memory_mib``.

    A share means that share of the GPU's compute and memory (the openb trace's and KAI's reading); a pod
    that declares only memory takes the compute share its memory is of the GPU, so packing stays honest.
    A GPU whose memory is unknown (0) holds no declared memory: the pod's MiB are taken as they are.
    """
    if gpu_memory_mib <= 0:
        return milli, memory_mib or 0
    by_memory = -(-MILLI * memory_mib // gpu_memory_mib) if memory_mib else 0
    share = max(milli, by_memory)
    memory = max(memory_mib or 0, (share * gpu_memory_mib) // MILLI)
    return share, memory


@dataclass(frozen=True, slots=True)
class DeviceGrant:
    """Which devices of a node a pod holds; enough to release them exactly."""

    kind: Literal["whole", "replica", "mig", "fraction", "partition"]
    gpu: int  # GPU index
    slot: int = 0  # replica index, MIG slot index, or partition index (dynamic MIG)
    milli: int = 0
    memory_mib: int = 0  # a fraction's reserved memory; a replica's expected use (0: unknown)


def grant_device_id(gpu: GpuSlot, grant: DeviceGrant) -> str:
    if grant.kind == "replica":
        return gpu.replica_id(grant.slot)
    if grant.kind == "mig":
        return gpu.mig[grant.slot].device_id
    if grant.kind == "partition":
        return gpu.partitions[grant.slot].device_id
    return gpu.device_id
