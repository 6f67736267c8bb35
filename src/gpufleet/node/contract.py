"""The node agent's boundary with NVML: what a backend reports and the one interface both backends implement.

Two backends sit behind :class:`NvmlBackend`: :mod:`gpufleet.node.nvml_real` (``nvidia-ml-py`` on a GPU node)
and :mod:`gpufleet.node.nvml_fake` (a machine described by a NodePool file, for tests and demos). Everything
above this module (discovery, labels, device plugins, health, metrics) sees only these types, so the whole
agent runs unchanged on either.

Words are NVML's: a *GPU* is a physical device (``GPU-…`` UUID, index, PCI bus id); a *MIG device* is a
compute instance inside a GPU instance (``MIG-…`` UUID, profile such as ``3g.40gb``, placement start on the
memory-slice axis, GPU-instance and compute-instance ids as XID events report them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

# NVML reports "the whole GPU" in an XID event's instance ids with this value.
ALL_INSTANCES = 0xFFFFFFFF


class NvmlError(RuntimeError):
    """NVML failed or is not there; the message says what and how to fix it (never a bare traceback)."""


@dataclass(frozen=True, slots=True)
class MigEngines:
    """Engines a MIG device shares (``nvmlDeviceGetAttributes``), published as ``engines.*`` labels."""

    copy: int
    decoder: int
    encoder: int
    jpeg: int
    ofa: int


@dataclass(frozen=True, slots=True)
class MigDevice:
    uuid: str
    profile: str  # canonical profile name, "3g.40gb"
    start: int  # placement start on the memory-slice axis
    gi_id: int  # GPU instance id (what XID events carry)
    ci_id: int  # compute instance id
    memory_mib: int
    multiprocessors: int | None
    gi_slices: int
    ci_slices: int
    engines: MigEngines | None = None  # None when the backend cannot tell


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    uuid: str
    name: str  # NVML's product name, "NVIDIA A100-SXM4-80GB"
    memory_mib: int
    compute_major: int
    compute_minor: int
    pci_bus_id: str
    mig_capable: bool
    mig_enabled: bool
    mig: tuple[MigDevice, ...] = ()
    numa_node: int | None = None  # None when the platform does not say (single socket, VMs)
    minor_number: int | None = None  # /dev/nvidia<minor>


@dataclass(frozen=True, slots=True)
class Machine:
    """One node's GPUs as discovered: what labels, the inventory and the device plugins are computed from."""

    driver_version: str  # "550.107.02"
    cuda_driver_version: int  # NVML's encoding: 12050 is CUDA 12.5
    gpus: tuple[Gpu, ...]
    nvlinks: Mapping[tuple[int, int], int] = field(default_factory=dict)  # (i, j), i < j -> active links
    machine_type: str = "unknown"  # GFD's gpu.machine: the DMI product name

    def gpu_by_uuid(self, uuid: str) -> Gpu | None:
        return next((g for g in self.gpus if g.uuid == uuid), None)


@dataclass(frozen=True, slots=True)
class InstanceSample:
    """The framebuffer of one MIG GPU instance (NVML answers memory per MIG device; the rest is the GPU's)."""

    gi_id: int
    fb_used_mib: float
    fb_free_mib: float


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One reading of a GPU's telemetry, in dcgm-exporter's units. A reading the backend cannot give (this GPU
    or driver does not support it) is NaN, and its metric is left out."""

    gpu_util: float  # percent
    mem_copy_util: float  # percent
    fb_used_mib: float
    fb_free_mib: float
    temperature_c: float
    power_w: float
    sm_clock_mhz: float
    mem_clock_mhz: float
    energy_mj: float  # total since driver load (a counter)
    last_xid: int = 0  # the last XID seen on this GPU, 0 for none (DCGM_FI_DEV_XID_ERRORS)
    memory_temp_c: float = math.nan
    ecc_sbe_volatile: float = math.nan  # corrected (single-bit) ECC errors since the last driver load
    ecc_dbe_volatile: float = math.nan  # uncorrected (double-bit) ECC errors since the last driver load
    remapped_rows_correctable: float = math.nan  # rows remapped for correctable errors (lifetime)
    remapped_rows_uncorrectable: float = math.nan  # rows remapped for uncorrectable errors (lifetime)
    row_remap_failure: float = math.nan  # 1 once a row could not be remapped
    gr_engine_active: float = math.nan  # fraction of time the graphics engine was busy (0..1)
    instances: tuple[InstanceSample, ...] = ()  # per MIG GPU instance, when MIG is on


@dataclass(frozen=True, slots=True)
class ProcessMemory:
    """A compute process on a GPU and the framebuffer it uses (NVML's running compute processes)."""

    pid: int  # in the host's PID namespace
    used_mib: float


@dataclass(frozen=True, slots=True)
class GpuMemory:
    fb_used_mib: float
    instances: tuple[InstanceSample, ...] = ()  # per MIG GPU instance, when MIG is on
    # The compute processes on the whole GPU and what each uses, where NVML tells it (not per MIG instance)
    processes: tuple[ProcessMemory, ...] = ()


@dataclass(frozen=True, slots=True)
class XidEvent:
    gpu_uuid: str
    xid: int
    gi_id: int = ALL_INSTANCES  # ALL_INSTANCES: the event concerns the whole GPU
    ci_id: int = ALL_INSTANCES


class NvmlBackend(Protocol):
    """What the agent asks of NVML. Implementations are thread-safe for one caller per method."""

    def machine(self) -> Machine:
        """Discover the GPUs now (MIG layouts change at run time, so callers ask again)."""
        ...

    def sample(self, gpu: Gpu) -> GpuSample:
        """Current telemetry of one GPU."""
        ...

    def memory(self, gpu: Gpu) -> GpuMemory:
        """The GPU's framebuffer in use now, and each MIG GPU instance's: :meth:`sample`'s memory figures alone,
        read without touching its other readings (GPM's window between two samples)."""
        ...

    def wait_events(self, timeout: float) -> list[XidEvent]:
        """XID events since the last call, waiting up to ``timeout`` seconds for the first one."""
        ...

    def close(self) -> None: ...


HolderCounts = Mapping[str, int]  # GPU UUID -> pods holding (part of) it, for the fake backend's telemetry
