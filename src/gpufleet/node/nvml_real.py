"""NVML on a real GPU node, through ``nvidia-ml-py`` (the ``pynvml`` module), imported only when used.

Read-only: nothing here changes MIG mode, clocks or any other GPU setting. The mapping from NVML's answers to
:mod:`gpufleet.node.contract` follows what NVIDIA's device plugin and GPU Feature Discovery do:

* MIG profile names are computed as go-nvlib names them (``<G>g.<GB>gb``, ``<C>c.<G>g.<GB>gb`` when the compute
  instance is smaller than its GPU instance, ``+me``/``+me.all``/``+gfx``/``-me`` from the profile's kind),
  with the memory figure from :func:`gpufleet.gpu.mig.mig_memory_gb`;
* NVLinks are counted per pair of GPUs from each link's state and remote PCI address; a link to an NVSwitch
  connects the GPU to every other switch-attached GPU (as go-gpuallocator reads NVSwitch boards);
* the NUMA node comes from ``/sys/bus/pci/devices/<bus id>/numa_node`` (absent or -1: none);
* XIDs come from an NVML event set registered for critical XID events on every GPU;
* telemetry in dcgm-exporter's units: memory temperature from NVML's field values, volatile ECC totals,
  remapped rows, the framebuffer of each MIG GPU instance (from its MIG device), and the graphics engine's
  activity (``DCGM_FI_PROF_GR_ENGINE_ACTIVE``) from GPU Performance Monitoring (Hopper and later) between two
  consecutive samples; whatever a GPU or driver does not support is left out.

``pynvml`` is passed in (tests give a fake module object); :func:`load_pynvml` imports the real one and turns
a missing library into a clear :class:`~gpufleet.node.contract.NvmlError`.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from gpufleet.gpu.mig import MigError, canonical_profile_name, mig_memory_gb
from gpufleet.node.contract import (
    Gpu,
    GpuMemory,
    GpuSample,
    InstanceSample,
    Machine,
    MigDevice,
    MigEngines,
    NvmlError,
    ProcessMemory,
    XidEvent,
)

MIB = 1024 * 1024
_NOT_AVAILABLE = 2**64 - 1  # NVML_VALUE_NOT_AVAILABLE in an unsigned long long (a process's use not reported)
SYSFS_PCI = Path("/sys/bus/pci/devices")
NO_NVML = ("the NVIDIA Management Library (libnvidia-ml.so.1) is not available: run the agent on a GPU node "
           "with the NVIDIA driver installed (the DaemonSet uses the nvidia runtime class for that), or use "
           "--nvml fake:MACHINE to run on a described machine")

# GPU-instance profile enums (nvml.h) that add a suffix to the profile name, as go-nvlib names them.
_SUFFIX_BY_PROFILE_ENUM = {0x7: "+me", 0x8: "+me", 0xF: "+me.all", 0x10: "+me.all", 0xA: "+gfx", 0xB: "+gfx",
                           0xC: "+gfx", 0x11: "+gfx", 0xD: "-me", 0xE: "-me"}


def load_pynvml() -> ModuleType:
    """Import ``pynvml`` and initialise NVML; :class:`NvmlError` with what to do when either fails."""
    try:
        import pynvml  # type: ignore[import-untyped]
    except ImportError as e:  # pragma: no cover - a declared dependency
        raise NvmlError(f"the nvidia-ml-py package is not installed ({e}); pip install nvidia-ml-py") from e
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound as e:
        raise NvmlError(NO_NVML) from e
    except pynvml.NVMLError as e:
        raise NvmlError(f"NVML failed to initialise: {e}; check the driver (nvidia-smi) on this node") from e
    module: ModuleType = pynvml
    return module


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def sysfs_numa_node(bus_id: str, root: Path = SYSFS_PCI) -> int | None:
    """The NUMA node of a PCI device from sysfs; NVML's 8-digit domain is sysfs' 4-digit one."""
    domain, _, rest = bus_id.lower().partition(":")
    path = root / f"{domain[-4:]}:{rest}" / "numa_node"
    try:
        node = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


class RealNvml:
    """:class:`~gpufleet.node.contract.NvmlBackend` over ``pynvml``."""

    def __init__(self, nvml: ModuleType | Any, *, numa_node: Callable[[str], int | None] = sysfs_numa_node,
                 machine_type_file: str | None = "/sys/class/dmi/id/product_name") -> None:
        self.nvml = nvml
        self.numa_node = numa_node
        self.machine_type_file = machine_type_file
        self._lock = threading.Lock()
        self._event_set: Any = None
        self._last_xid: dict[str, int] = {}
        self._gpm: dict[str, Any] = {}  # GPU UUID -> its last GPM sample (None: GPM not supported there)

    # --- discovery -----------------------------------------------------------------------------------

    def machine(self) -> Machine:
        n = self.nvml
        with self._lock:
            handles = [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]
            gpus = tuple(self._gpu(i, h) for i, h in enumerate(handles))
            return Machine(
                driver_version=_text(n.nvmlSystemGetDriverVersion()),
                cuda_driver_version=int(n.nvmlSystemGetCudaDriverVersion()),
                gpus=gpus,
                nvlinks=self._nvlinks(handles, gpus),
                machine_type=self._machine_type(),
            )

    def _machine_type(self) -> str:
        if not self.machine_type_file:
            return "unknown"
        try:
            text = Path(self.machine_type_file).read_text().strip()
        except OSError:
            return "unknown"
        return text or "unknown"

    def _gpu(self, index: int, handle: Any) -> Gpu:
        n = self.nvml
        memory = n.nvmlDeviceGetMemoryInfo(handle)
        major, minor = n.nvmlDeviceGetCudaComputeCapability(handle)
        bus_id = _text(n.nvmlDeviceGetPciInfo(handle).busId)
        mig_capable, mig_enabled = False, False
        try:
            current, _pending = n.nvmlDeviceGetMigMode(handle)
            mig_capable, mig_enabled = True, current == n.NVML_DEVICE_MIG_ENABLE
        except n.NVMLError_NotSupported:
            pass
        mig = self._mig_devices(handle, int(memory.total)) if mig_enabled else ()
        try:
            minor_number: int | None = int(n.nvmlDeviceGetMinorNumber(handle))
        except n.NVMLError:
            minor_number = None
        return Gpu(index=index, uuid=_text(n.nvmlDeviceGetUUID(handle)), name=_text(n.nvmlDeviceGetName(handle)),
                   memory_mib=int(memory.total) // MIB, compute_major=int(major), compute_minor=int(minor),
                   pci_bus_id=bus_id, mig_capable=mig_capable, mig_enabled=mig_enabled, mig=mig,
                   numa_node=self.numa_node(bus_id), minor_number=minor_number)

    def _profile_kinds(self, handle: Any) -> dict[int, int]:
        """GPU-instance profile id (as GPU instances report it) -> NVML profile enum."""
        n = self.nvml
        kinds: dict[int, int] = {}
        for enum in range(int(n.NVML_GPU_INSTANCE_PROFILE_COUNT)):
            try:
                info = n.nvmlDeviceGetGpuInstanceProfileInfo(handle, enum)
            except n.NVMLError:  # not supported on this GPU or driver
                continue
            kinds[int(info.id)] = enum
        return kinds

    def _mig_devices(self, handle: Any, total_bytes: int) -> tuple[MigDevice, ...]:
        n = self.nvml
        kinds = self._profile_kinds(handle)
        out = []
        for i in range(int(n.nvmlDeviceGetMaxMigDeviceCount(handle))):
            try:
                mig = n.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
            except n.NVMLError_NotFound:
                continue
            gi_id = int(n.nvmlDeviceGetGpuInstanceId(mig))
            ci_id = int(n.nvmlDeviceGetComputeInstanceId(mig))
            attrs = n.nvmlDeviceGetAttributes(mig)
            info = n.nvmlGpuInstanceGetInfo(n.nvmlDeviceGetGpuInstanceById(handle, gi_id))
            gi_slices, ci_slices = int(attrs.gpuInstanceSliceCount), int(attrs.computeInstanceSliceCount)
            gb = mig_memory_gb(total_bytes, int(attrs.memorySizeMB))
            name = f"{gi_slices}g.{gb}gb" if ci_slices == gi_slices else f"{ci_slices}c.{gi_slices}g.{gb}gb"
            name += _SUFFIX_BY_PROFILE_ENUM.get(kinds.get(int(info.profileId), -1), "")
            with contextlib.suppress(MigError):  # a name gpufleet cannot parse keeps NVML's spelling
                name = canonical_profile_name(name)
            engines = MigEngines(int(attrs.sharedCopyEngineCount), int(attrs.sharedDecoderCount),
                                 int(attrs.sharedEncoderCount), int(attrs.sharedJpegCount), int(attrs.sharedOfaCount))
            out.append(MigDevice(uuid=_text(n.nvmlDeviceGetUUID(mig)), profile=name, start=int(info.placement.start),
                                 gi_id=gi_id, ci_id=ci_id, memory_mib=int(attrs.memorySizeMB),
                                 multiprocessors=int(attrs.multiprocessorCount), gi_slices=gi_slices,
                                 ci_slices=ci_slices, engines=engines))
        return tuple(sorted(out, key=lambda d: (d.start, d.gi_id, d.ci_id)))

    def _nvlinks(self, handles: list[Any], gpus: tuple[Gpu, ...]) -> dict[tuple[int, int], int]:
        n = self.nvml
        by_bus = {g.pci_bus_id.lower(): g.index for g in gpus}
        pairs: dict[tuple[int, int], int] = {}
        to_switch: dict[int, int] = {}
        for gpu, handle in zip(gpus, handles, strict=True):
            for link in range(int(n.NVML_NVLINK_MAX_LINKS)):
                try:
                    if n.nvmlDeviceGetNvLinkState(handle, link) != n.NVML_FEATURE_ENABLED:
                        continue
                    remote = _text(n.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId).lower()
                except n.NVMLError:  # no such link, or NVLink not supported at all
                    continue
                peer = by_bus.get(remote)
                if peer is None:
                    # Not a GPU: an NVSwitch, which connects this GPU to every other switch-attached GPU.
                    to_switch[gpu.index] = to_switch.get(gpu.index, 0) + 1
                elif peer > gpu.index:
                    pairs[(gpu.index, peer)] = pairs.get((gpu.index, peer), 0) + 1
        switched = sorted(to_switch)
        for a_pos, a in enumerate(switched):
            for b in switched[a_pos + 1:]:
                pairs[(a, b)] = pairs.get((a, b), 0) + min(to_switch[a], to_switch[b])
        return pairs

    # --- telemetry -----------------------------------------------------------------------------------

    def _read(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except self.nvml.NVMLError:  # not supported on this GPU: the metric is left out (NaN)
            return None

    def sample(self, gpu: Gpu) -> GpuSample:
        n = self.nvml
        h = n.nvmlDeviceGetHandleByUUID(gpu.uuid)
        util = self._read(lambda: n.nvmlDeviceGetUtilizationRates(h))
        memory = self._read(lambda: n.nvmlDeviceGetMemoryInfo(h))
        temp = self._read(lambda: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU))
        power = self._read(lambda: n.nvmlDeviceGetPowerUsage(h))
        sm = self._read(lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM))
        mem_clock = self._read(lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM))
        energy = self._read(lambda: n.nvmlDeviceGetTotalEnergyConsumption(h))

        sbe = self._read(lambda: n.nvmlDeviceGetTotalEccErrors(h, n.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                                                                n.NVML_VOLATILE_ECC))
        dbe = self._read(lambda: n.nvmlDeviceGetTotalEccErrors(h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                                                n.NVML_VOLATILE_ECC))
        rows = self._read(lambda: n.nvmlDeviceGetRemappedRows(h))  # (correctable, uncorrectable, pending, failed)

        def num(value: Any, scale: float = 1.0) -> float:
            return math.nan if value is None else float(value) / scale

        return GpuSample(
            gpu_util=num(util.gpu if util is not None else None),
            mem_copy_util=num(util.memory if util is not None else None),
            fb_used_mib=num(memory.used if memory is not None else None, MIB),
            fb_free_mib=num(memory.free if memory is not None else None, MIB),
            temperature_c=num(temp), power_w=num(power, 1000.0), sm_clock_mhz=num(sm),
            mem_clock_mhz=num(mem_clock), energy_mj=num(energy), last_xid=self._last_xid.get(gpu.uuid, 0),
            memory_temp_c=self._field(h, n.NVML_FI_DEV_MEMORY_TEMP), ecc_sbe_volatile=num(sbe),
            ecc_dbe_volatile=num(dbe), remapped_rows_correctable=num(rows[0] if rows else None),
            remapped_rows_uncorrectable=num(rows[1] if rows else None),
            row_remap_failure=num((1 if rows[3] else 0) if rows else None),
            gr_engine_active=self._graphics_activity(gpu.uuid, h) if not gpu.mig_enabled else math.nan,
            instances=self._instances(gpu))

    def memory(self, gpu: Gpu) -> GpuMemory:
        n = self.nvml
        h = n.nvmlDeviceGetHandleByUUID(gpu.uuid)
        memory = self._read(lambda: n.nvmlDeviceGetMemoryInfo(h))
        processes = () if gpu.mig_enabled else self._processes(h)
        return GpuMemory(math.nan if memory is None else float(memory.used) / MIB, self._instances(gpu), processes)

    def _processes(self, handle: Any) -> tuple[ProcessMemory, ...]:
        """The GPU's compute processes and the framebuffer each uses; a process whose use NVML does not report
        (``NVML_VALUE_NOT_AVAILABLE``, all ones; or None) is left out."""
        n = self.nvml
        found = self._read(lambda: n.nvmlDeviceGetComputeRunningProcesses(handle)) or []
        out: list[ProcessMemory] = []
        for p in found:
            pid, used = getattr(p, "pid", None), getattr(p, "usedGpuMemory", None)
            if isinstance(pid, int) and pid > 0 and isinstance(used, int) and 0 < used < _NOT_AVAILABLE:
                out.append(ProcessMemory(pid, used / MIB))
        return tuple(out)

    def _field(self, handle: Any, field_id: int) -> float:
        """One NVML field value as a number; NaN when the GPU or driver does not report it."""
        n = self.nvml
        found = self._read(lambda: n.nvmlDeviceGetFieldValues(handle, [field_id]))
        if not found or int(found[0].nvmlReturn) != n.NVML_SUCCESS:
            return math.nan
        value, kind = found[0].value, int(found[0].valueType)
        return float({n.NVML_VALUE_TYPE_DOUBLE: lambda: value.dVal,
                      n.NVML_VALUE_TYPE_UNSIGNED_INT: lambda: value.uiVal,
                      n.NVML_VALUE_TYPE_UNSIGNED_LONG: lambda: value.ulVal,
                      n.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: lambda: value.ullVal,
                      n.NVML_VALUE_TYPE_SIGNED_LONG_LONG: lambda: value.sllVal}.get(kind, lambda: math.nan)())

    def _instances(self, gpu: Gpu) -> tuple[InstanceSample, ...]:
        """The framebuffer of each MIG GPU instance, read through its (first) MIG device."""
        out: dict[int, InstanceSample] = {}
        for m in gpu.mig:
            if m.gi_id not in out:
                memory = self._read(self._memory_reader(m.uuid))
                if memory is not None:
                    out[m.gi_id] = InstanceSample(m.gi_id, float(memory.used) / MIB, float(memory.free) / MIB)
        return tuple(out.values())

    def _memory_reader(self, uuid: str) -> Callable[[], Any]:
        n = self.nvml
        return lambda: n.nvmlDeviceGetMemoryInfo(n.nvmlDeviceGetHandleByUUID(uuid))

    def _graphics_activity(self, uuid: str, handle: Any) -> float:
        """GPM's graphics activity between the previous sample of this GPU and now, as a fraction (DCGM's
        GR_ENGINE_ACTIVE); NaN on the first sample and where GPM is not supported (before Hopper)."""
        n = self.nvml
        if uuid not in self._gpm:
            support = self._read(lambda: n.nvmlGpmQueryDeviceSupport(handle))
            supported = support is not None and bool(support.isSupportedDevice)
            self._gpm[uuid] = self._gpm_sample(handle) if supported else None
            return math.nan
        previous = self._gpm[uuid]
        current = self._gpm_sample(handle) if previous is not None else None
        if previous is None or current is None:
            return math.nan
        request = n.c_nvmlGpmMetricsGet_t()
        request.version = n.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = 1
        request.sample1, request.sample2 = previous, current
        request.metrics[0].metricId = n.NVML_GPM_METRIC_GRAPHICS_UTIL
        answer = self._read(lambda: n.nvmlGpmMetricsGet(request))
        with contextlib.suppress(n.NVMLError):
            n.nvmlGpmSampleFree(previous)
        self._gpm[uuid] = current
        if answer is None or int(answer.metrics[0].nvmlReturn) != n.NVML_SUCCESS:
            return math.nan
        return float(answer.metrics[0].value) / 100.0  # NVML: percent; DCGM: a ratio

    def _gpm_sample(self, handle: Any) -> Any:
        """A GPM sample of the GPU taken now, or None when NVML refuses."""
        n = self.nvml
        sample = self._read(n.nvmlGpmSampleAlloc)
        if sample is None:
            return None
        if self._read(lambda: n.nvmlGpmSampleGet(handle, sample)) is None:
            with contextlib.suppress(n.NVMLError):
                n.nvmlGpmSampleFree(sample)
            return None
        return sample

    # --- XID events ----------------------------------------------------------------------------------

    def _events(self) -> Any:
        n = self.nvml
        if self._event_set is None:
            event_set = n.nvmlEventSetCreate()
            wanted = n.nvmlEventTypeXidCriticalError | n.nvmlEventTypeDoubleBitEccError | \
                n.nvmlEventTypeSingleBitEccError
            for i in range(n.nvmlDeviceGetCount()):
                handle = n.nvmlDeviceGetHandleByIndex(i)
                try:
                    supported = n.nvmlDeviceGetSupportedEventTypes(handle)
                    n.nvmlDeviceRegisterEvents(handle, wanted & supported, event_set)
                except n.NVMLError_NotSupported:
                    continue  # too old for events: no XID health checks on this GPU, as NVIDIA's plugin warns
            self._event_set = event_set
        return self._event_set

    def wait_events(self, timeout: float) -> list[XidEvent]:
        n = self.nvml
        event_set = self._events()
        out: list[XidEvent] = []
        wait_ms = max(0, int(timeout * 1000))
        while True:
            try:
                data = n.nvmlEventSetWait(event_set, wait_ms)
            except n.NVMLError_Timeout:
                return out
            wait_ms = 0  # drain what is queued, without waiting again
            if data.eventType != n.nvmlEventTypeXidCriticalError:
                continue  # ECC events alone do not change health (NVIDIA's plugin acts on XIDs only)
            uuid = _text(n.nvmlDeviceGetUUID(data.device))
            self._last_xid[uuid] = int(data.eventData)
            out.append(XidEvent(uuid, int(data.eventData), int(data.gpuInstanceId), int(data.computeInstanceId)))

    def close(self) -> None:
        n = self.nvml
        for sample in self._gpm.values():
            if sample is not None:
                with contextlib.suppress(n.NVMLError):
                    n.nvmlGpmSampleFree(sample)
        self._gpm.clear()
        if self._event_set is not None:
            with contextlib.suppress(n.NVMLError):
                n.nvmlEventSetFree(self._event_set)
            self._event_set = None
        with contextlib.suppress(n.NVMLError):
            n.nvmlShutdown()
