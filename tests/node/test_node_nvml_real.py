"""The nvidia-ml-py backend: against real NVML when this machine has it (skipped otherwise, with the reason),
and its mapping code through a fake ``pynvml`` module object that answers as NVML documents."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from gpufleet.node.contract import ALL_INSTANCES, NvmlError, XidEvent
from gpufleet.node.discovery import discover
from gpufleet.node.dpconfig import AgentDeviceConfig
from gpufleet.node.nvml_real import RealNvml, load_pynvml, sysfs_numa_node

MIB = 1024 * 1024


def test_against_real_nvml_when_present() -> None:
    try:
        nvml = load_pynvml()
    except NvmlError as e:
        pytest.skip(f"no NVML on this machine: {e}")
    backend = RealNvml(nvml)
    try:
        machine = backend.machine()
        assert machine.gpus and all(g.uuid.startswith("GPU-") for g in machine.gpus)
        found = discover(machine, AgentDeviceConfig())
        assert found.labels["nvidia.com/gpu.count"] == str(len(machine.gpus))
        assert backend.sample(machine.gpus[0]).fb_free_mib >= 0
        memory = backend.memory(machine.gpus[0])
        assert 0 <= memory.fb_used_mib <= machine.gpus[0].memory_mib
        assert all(p.pid > 0 and 0 < p.used_mib <= machine.gpus[0].memory_mib for p in memory.processes)
        assert isinstance(backend.wait_events(0.1), list)
    finally:
        backend.close()


def test_a_missing_nvml_library_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import pynvml

    def absent() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", absent)
    with pytest.raises(NvmlError, match=r"libnvidia-ml\.so\.1\) is not available.*--nvml fake:MACHINE"):
        load_pynvml()


# --- a fake pynvml ---------------------------------------------------------------------------------------


class NVMLError(Exception):
    pass


class NotSupported(NVMLError):
    pass


class NotFound(NVMLError):
    pass


class Timeout(NVMLError):
    pass


@dataclass
class FakeMig:
    uuid: str
    gi_id: int
    ci_id: int
    profile_id: int
    start: int
    slices: int
    memory_mb: int
    sms: int
    ci_slices: int | None = None


@dataclass
class FakeGpu:
    uuid: str
    name: str
    bus: str
    total_mib: int
    mig: list[FakeMig] | None = None  # None: not MIG capable
    links: dict[int, str] = field(default_factory=dict)  # link -> remote bus id
    ecc: tuple[int, int] | None = (3, 0)  # volatile corrected, uncorrected; None: no ECC (consumer boards)
    remapped: tuple[int, int, int, int] | None = (2, 0, 0, 0)  # correctable, uncorrectable, pending, failed
    gpm: bool = False  # GPU Performance Monitoring (Hopper and later)
    graphics_busy: list[float] = field(default_factory=list)  # GPM's answers, one per pair of samples
    # Running compute processes: (pid, bytes used, or None / all ones when NVML does not report it); None: the call
    # is not supported
    processes: list[tuple[int, int | None]] | None = field(default_factory=list)


class FakeGpmRequest:
    """pynvml's c_nvmlGpmMetricsGet_t, as far as RealNvml fills and reads it."""

    def __init__(self) -> None:
        self.version = self.numMetrics = 0
        self.sample1: Any = None
        self.sample2: Any = None
        self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(4)]


class FakePynvml:
    """The subset of pynvml's functions RealNvml calls, over a described machine."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NotSupported
    NVMLError_NotFound = NotFound
    NVMLError_Timeout = Timeout
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_FEATURE_ENABLED = 1
    NVML_NVLINK_MAX_LINKS = 4
    NVML_GPU_INSTANCE_PROFILE_COUNT = 0x12
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_SUCCESS = 0
    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_FI_DEV_MEMORY_TEMP = 82
    NVML_VALUE_TYPE_DOUBLE, NVML_VALUE_TYPE_UNSIGNED_INT, NVML_VALUE_TYPE_UNSIGNED_LONG = 0, 1, 2
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, NVML_VALUE_TYPE_SIGNED_LONG_LONG = 3, 4
    NVML_GPM_METRICS_GET_VERSION = 1
    NVML_GPM_METRIC_GRAPHICS_UTIL = 1
    c_nvmlGpmMetricsGet_t = FakeGpmRequest
    nvmlEventTypeSingleBitEccError = 0x1
    nvmlEventTypeDoubleBitEccError = 0x2
    nvmlEventTypeXidCriticalError = 0x8
    # A100's GPU-instance profile ids per profile enum (1_SLICE=19, 1_SLICE_REV1=20, 2_SLICE=14, 3_SLICE=9, ...).
    PROFILE_IDS: ClassVar[dict[int, int]] = {0x0: 19, 0x1: 14, 0x2: 9, 0x3: 5, 0x4: 0, 0x7: 20, 0x9: 15}

    def __init__(self, gpus: list[FakeGpu]) -> None:
        self.gpus = gpus
        self.queue: list[Any] = []
        self.registered: list[tuple[str, int]] = []
        self.gpm_samples: set[int] = set()  # GPM samples allocated and not freed
        self._next_sample = 0

    def _gpu(self, h: Any) -> FakeGpu:
        return self.gpus[h[1]]

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> Any:
        return ("gpu", i)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Any:
        for i, g in enumerate(self.gpus):
            if g.uuid == uuid:
                return ("gpu", i)
            for j, m in enumerate(g.mig or []):
                if m.uuid == uuid:
                    return ("mig", i, j)
        raise NotFound()

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.107.02"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12050

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> Any:
        if h[0] == "mig":
            total = self._mig(h).memory_mb * MIB
            return SimpleNamespace(total=total, used=(h[2] + 1) * 100 * MIB, free=total - (h[2] + 1) * 100 * MIB)
        total = self._gpu(h).total_mib * MIB
        return SimpleNamespace(total=total, used=1024 * MIB, free=total - 1024 * MIB)

    def nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list[Any]:
        found = self._gpu(h).processes
        if found is None:
            raise NotSupported()
        return [SimpleNamespace(pid=pid, usedGpuMemory=used, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)
                for pid, used in found]

    def nvmlDeviceGetTotalEccErrors(self, h: Any, kind: int, counter: int) -> int:
        ecc = self._gpu(h).ecc
        if ecc is None:
            raise NotSupported()
        return ecc[kind]

    def nvmlDeviceGetRemappedRows(self, h: Any) -> tuple[int, int, int, int]:
        rows = self._gpu(h).remapped
        if rows is None:
            raise NotSupported()
        return rows

    def nvmlDeviceGetFieldValues(self, h: Any, ids: list[int]) -> list[Any]:
        return [SimpleNamespace(fieldId=i, nvmlReturn=0 if i == self.NVML_FI_DEV_MEMORY_TEMP else 3,
                                valueType=self.NVML_VALUE_TYPE_UNSIGNED_INT, value=SimpleNamespace(uiVal=71))
                for i in ids]

    def nvmlGpmQueryDeviceSupport(self, h: Any) -> Any:
        return SimpleNamespace(isSupportedDevice=int(self._gpu(h).gpm))

    def nvmlGpmSampleAlloc(self) -> int:
        self._next_sample += 1
        self.gpm_samples.add(self._next_sample)
        return self._next_sample

    def nvmlGpmSampleGet(self, h: Any, sample: int) -> int:
        return sample

    def nvmlGpmSampleFree(self, sample: int) -> None:
        self.gpm_samples.remove(sample)

    def nvmlGpmMetricsGet(self, request: FakeGpmRequest) -> FakeGpmRequest:
        assert request.numMetrics == 1 and request.sample1 in self.gpm_samples and request.sample2 in self.gpm_samples
        gpu = next(g for g in self.gpus if g.gpm and g.graphics_busy)
        request.metrics[0].value = gpu.graphics_busy.pop(0)
        return request

    def nvmlDeviceGetCudaComputeCapability(self, h: Any) -> tuple[int, int]:
        return (8, 0)

    def nvmlDeviceGetPciInfo(self, h: Any) -> Any:
        return SimpleNamespace(busId=self._gpu(h).bus.encode())  # older pynvml answers bytes

    def nvmlDeviceGetMigMode(self, h: Any) -> list[int]:
        if self._gpu(h).mig is None:
            raise NotSupported()
        return [1 if self._gpu(h).mig else 0, 0]

    def nvmlDeviceGetMinorNumber(self, h: Any) -> int:
        return h[1]

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        if h[0] == "mig":
            return self.gpus[h[1]].mig[h[2]].uuid  # type: ignore[index]
        return self._gpu(h).uuid

    def nvmlDeviceGetName(self, h: Any) -> str:
        return self._gpu(h).name

    def nvmlDeviceGetGpuInstanceProfileInfo(self, h: Any, enum: int) -> Any:
        if enum not in self.PROFILE_IDS:
            raise NotSupported()
        return SimpleNamespace(id=self.PROFILE_IDS[enum])

    def nvmlDeviceGetMaxMigDeviceCount(self, h: Any) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: Any, i: int) -> Any:
        migs = self._gpu(h).mig or []
        if i >= len(migs):
            raise NotFound()
        return ("mig", h[1], i)

    def _mig(self, m: Any) -> FakeMig:
        return self.gpus[m[1]].mig[m[2]]  # type: ignore[index]

    def nvmlDeviceGetGpuInstanceId(self, m: Any) -> int:
        return self._mig(m).gi_id

    def nvmlDeviceGetComputeInstanceId(self, m: Any) -> int:
        return self._mig(m).ci_id

    def nvmlDeviceGetAttributes(self, m: Any) -> Any:
        d = self._mig(m)
        return SimpleNamespace(multiprocessorCount=d.sms, sharedCopyEngineCount=d.slices, sharedDecoderCount=1,
                               sharedEncoderCount=0, sharedJpegCount=0, sharedOfaCount=0,
                               gpuInstanceSliceCount=d.slices, computeInstanceSliceCount=d.ci_slices or d.slices,
                               memorySizeMB=d.memory_mb)

    def nvmlDeviceGetGpuInstanceById(self, h: Any, gi_id: int) -> Any:
        return ("gi", h[1], gi_id)

    def nvmlGpuInstanceGetInfo(self, gi: Any) -> Any:
        d = next(m for m in self.gpus[gi[1]].mig or [] if m.gi_id == gi[2])
        return SimpleNamespace(profileId=d.profile_id, placement=SimpleNamespace(start=d.start, size=d.slices))

    def nvmlDeviceGetNvLinkState(self, h: Any, link: int) -> int:
        if link not in self._gpu(h).links:
            raise NotSupported()
        return 1

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: Any, link: int) -> Any:
        return SimpleNamespace(busId=self._gpu(h).links[link])

    def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:
        return SimpleNamespace(gpu=87, memory=40)

    def nvmlDeviceGetTemperature(self, h: Any, sensor: int) -> int:
        return 61

    def nvmlDeviceGetPowerUsage(self, h: Any) -> int:
        return 312_500  # mW

    def nvmlDeviceGetClockInfo(self, h: Any, clock: int) -> int:
        return 1410 if clock == self.NVML_CLOCK_SM else 1593

    def nvmlDeviceGetTotalEnergyConsumption(self, h: Any) -> int:
        raise NotSupported()

    def nvmlEventSetCreate(self) -> str:
        return "set"

    def nvmlDeviceGetSupportedEventTypes(self, h: Any) -> int:
        return 0xF

    def nvmlDeviceRegisterEvents(self, h: Any, mask: int, event_set: str) -> None:
        self.registered.append((self._gpu(h).uuid, mask))

    def nvmlEventSetWait(self, event_set: str, ms: int) -> Any:
        if not self.queue:
            raise Timeout()
        return self.queue.pop(0)

    def nvmlEventSetFree(self, event_set: str) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass


def a100(i: int, mig: list[FakeMig] | None = None, links: dict[int, str] | None = None) -> FakeGpu:
    return FakeGpu(f"GPU-{i}", "NVIDIA A100-SXM4-80GB", f"00000000:{0x10 + i:02X}:00.0", 81920, mig, links or {})


def test_gpus_mig_devices_and_profile_names_map_as_go_nvlib_names_them(tmp_path: Path) -> None:
    migs = [FakeMig("MIG-b", 2, 0, 9, 4, 3, 40192, 42), FakeMig("MIG-a", 1, 0, 20, 0, 1, 9856, 14),
            FakeMig("MIG-c", 3, 0, 14, 2, 2, 19968, 28, ci_slices=1)]
    nvml = FakePynvml([a100(0, mig=migs), a100(1, mig=[]), FakeGpu("GPU-2", "Tesla T4", "00000000:30:00.0", 15360)])
    numa = {"00000000:10:00.0": 0, "00000000:11:00.0": 1}
    machine = RealNvml(nvml, numa_node=numa.get, machine_type_file=None).machine()
    g0, g1, g2 = machine.gpus
    assert (machine.driver_version, machine.cuda_driver_version) == ("550.107.02", 12050)
    assert g0.uuid == "GPU-0" and g0.pci_bus_id == "00000000:10:00.0" and g0.memory_mib == 81920
    assert (g0.mig_capable, g0.mig_enabled, g1.mig_capable, g1.mig_enabled) == (True, True, True, False)
    assert not g2.mig_capable and g2.numa_node is None and g0.numa_node == 0 and g1.numa_node == 1
    # Sorted by placement; the +me suffix from the REV1 profile; a smaller compute instance gets the c. prefix.
    assert [(d.profile, d.start, d.uuid, d.gi_id) for d in g0.mig] == [
        ("1g.10gb+me", 0, "MIG-a", 1), ("1c.2g.20gb", 2, "MIG-c", 3), ("3g.40gb", 4, "MIG-b", 2)]
    assert g0.mig[2].engines is not None and g0.mig[2].engines.copy == 3 and g0.mig[2].multiprocessors == 42
    assert machine.machine_type == "unknown"


def test_nvlinks_are_counted_per_pair_and_through_nvswitches() -> None:
    bus = [f"00000000:{0x10 + i:02X}:00.0" for i in range(4)]
    direct = FakePynvml([a100(0, links={0: bus[1], 1: bus[1]}), a100(1, links={0: bus[0], 1: bus[0]}),
                         a100(2, links={0: bus[3]}), a100(3, links={2: bus[2]})])
    assert RealNvml(direct, numa_node=lambda _: None).machine().nvlinks == {(0, 1): 2, (2, 3): 1}
    switch = "00000000:C0:00.0"
    switched = FakePynvml([a100(i, links={0: switch, 1: switch, 2: switch}) for i in range(3)])
    assert RealNvml(switched, numa_node=lambda _: None).machine().nvlinks == {(0, 1): 3, (0, 2): 3, (1, 2): 3}


def test_telemetry_units_and_unsupported_readings() -> None:
    nvml = FakePynvml([a100(0)])
    backend = RealNvml(nvml, numa_node=lambda _: None)
    s = backend.sample(backend.machine().gpus[0])
    assert (s.gpu_util, s.mem_copy_util, s.temperature_c, s.power_w, s.sm_clock_mhz) == (87, 40, 61, 312.5, 1410)
    assert s.fb_used_mib == 1024 and s.fb_free_mib == 81920 - 1024
    assert s.energy_mj != s.energy_mj  # NaN: not supported, left out of the metrics


def test_memory_temperature_ecc_row_remapping_and_mig_instance_memory() -> None:
    migs = [FakeMig("MIG-a", 1, 0, 9, 0, 4, 40192, 42), FakeMig("MIG-b", 2, 0, 9, 4, 4, 40192, 42)]
    nvml = FakePynvml([a100(0, mig=migs), FakeGpu("GPU-1", "Tesla T4", "00000000:30:00.0", 15360, ecc=None,
                                                  remapped=None)])
    backend = RealNvml(nvml, numa_node=lambda _: None)
    mig_gpu, t4 = backend.machine().gpus
    s = backend.sample(mig_gpu)
    assert (s.memory_temp_c, s.ecc_sbe_volatile, s.ecc_dbe_volatile) == (71, 3, 0)
    assert (s.remapped_rows_correctable, s.remapped_rows_uncorrectable, s.row_remap_failure) == (2, 0, 0)
    assert [(i.gi_id, i.fb_used_mib, i.fb_free_mib) for i in s.instances] == [(1, 100, 40092), (2, 200, 39992)]
    assert s.gr_engine_active != s.gr_engine_active  # MIG on: no GPU-wide GPM figure
    plain = backend.sample(t4)
    assert plain.instances == () and all(v != v for v in (plain.ecc_dbe_volatile, plain.row_remap_failure))
    # The memory alone (the node agent's per-pod reports): the same figures.
    memory = backend.memory(mig_gpu)
    assert memory.fb_used_mib == s.fb_used_mib and memory.instances == s.instances


def test_memory_lists_the_compute_processes_and_what_each_uses() -> None:
    """Bytes in MiB; a process whose use NVML does not report (None, or NVML_VALUE_NOT_AVAILABLE: all ones) left
    out; a GPU that does not support the call lists none; a MIG GPU's processes are not read (per instance)."""
    shared = a100(0)
    shared.processes = [(4242, 20 * 1024 * MIB), (4343, None), (4444, 2**64 - 1), (4545, 512 * MIB)]
    unsupported = a100(1)
    unsupported.processes = None
    mig = a100(2, mig=[FakeMig("MIG-a", 1, 0, 9, 0, 4, 40192, 42)])
    mig.processes = [(77, 100 * MIB)]
    backend = RealNvml(FakePynvml([shared, unsupported, mig]), numa_node=lambda _: None)
    gpus = backend.machine().gpus
    assert [(p.pid, p.used_mib) for p in backend.memory(gpus[0]).processes] == [(4242, 20480.0), (4545, 512.0)]
    assert backend.memory(gpus[1]).processes == ()
    assert backend.memory(gpus[2]).processes == ()


def test_reading_memory_leaves_the_gpm_window_to_the_scrapes() -> None:
    h100 = FakeGpu("GPU-0", "NVIDIA H100 80GB HBM3", "00000000:10:00.0", 81559, gpm=True,
                   graphics_busy=[37.5, 80.0])
    nvml = FakePynvml([h100])
    backend = RealNvml(nvml, numa_node=lambda _: None)
    [hopper] = backend.machine().gpus
    backend.sample(hopper)
    backend.memory(hopper)  # between two scrapes: no GPM sample taken, none freed
    assert backend.sample(hopper).gr_engine_active == 0.375
    backend.close()


def test_graphics_activity_from_gpm_between_two_samples() -> None:
    h100 = FakeGpu("GPU-0", "NVIDIA H100 80GB HBM3", "00000000:10:00.0", 81559, gpm=True,
                   graphics_busy=[37.5, 80.0])
    nvml = FakePynvml([h100, a100(1)])
    backend = RealNvml(nvml, numa_node=lambda _: None)
    hopper, ampere = backend.machine().gpus
    first = backend.sample(hopper).gr_engine_active
    assert first != first  # one sample: no interval yet
    assert backend.sample(hopper).gr_engine_active == 0.375 and backend.sample(hopper).gr_engine_active == 0.8
    assert len(nvml.gpm_samples) == 1  # each interval's older sample is freed
    assert backend.sample(ampere).gr_engine_active != backend.sample(ampere).gr_engine_active  # no GPM: NaN
    backend.close()
    assert nvml.gpm_samples == set()


def test_xid_events_are_read_from_the_event_set_and_ecc_events_are_not_xids() -> None:
    nvml = FakePynvml([a100(0), a100(1)])
    backend = RealNvml(nvml, numa_node=lambda _: None)
    nvml.queue = [SimpleNamespace(device=("gpu", 1), eventType=0x8, eventData=79, gpuInstanceId=ALL_INSTANCES,
                                  computeInstanceId=ALL_INSTANCES),
                  SimpleNamespace(device=("gpu", 0), eventType=0x2, eventData=0, gpuInstanceId=0, computeInstanceId=0),
                  SimpleNamespace(device=("gpu", 0), eventType=0x8, eventData=94, gpuInstanceId=2, computeInstanceId=0)]
    assert backend.wait_events(0.1) == [XidEvent("GPU-1", 79), XidEvent("GPU-0", 94, 2, 0)]
    assert nvml.registered == [("GPU-0", 0xB), ("GPU-1", 0xB)]  # XID | DBE | SBE, within what is supported
    assert backend.wait_events(0.0) == []
    assert backend.sample(backend.machine().gpus[1]).last_xid == 79


def test_numa_node_from_sysfs(tmp_path: Path) -> None:
    (tmp_path / "0000:3b:00.0").mkdir()
    (tmp_path / "0000:3b:00.0" / "numa_node").write_text("1\n")
    (tmp_path / "0000:5e:00.0").mkdir()
    (tmp_path / "0000:5e:00.0" / "numa_node").write_text("-1\n")
    assert sysfs_numa_node("00000000:3B:00.0", tmp_path) == 1
    assert sysfs_numa_node("00000000:5E:00.0", tmp_path) is None
    assert sysfs_numa_node("00000000:AF:00.0", tmp_path) is None
