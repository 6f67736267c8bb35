"""The agent's metrics endpoint: GPU telemetry under dcgm-exporter's names, plus the agent's own counters.

GPU series are named and labelled as dcgm-exporter names them (``DCGM_FI_DEV_GPU_UTIL{gpu, UUID, pci_bus_id,
device, modelName, Hostname, DCGM_FI_DRIVER_VERSION}``), so its Grafana dashboard (12239) and the alert rules
written for it work unchanged:

* on a MIG GPU every series is per GPU instance, with ``GPU_I_PROFILE`` and ``GPU_I_ID`` (``UUID`` stays the
  GPU's): the framebuffer is the instance's, the other readings are the GPU's, repeated;
* a GPU or MIG instance that exactly one pod holds (the kubelet's PodResources record, or a fractional pod)
  carries ``pod``, ``namespace`` and ``container``; a GPU several pods share carries none, and each holder's
  share and declared memory are ``gpufleet_node_gpu_holder_share`` and ``gpufleet_node_gpu_holder_memory_bytes``
  (:mod:`gpufleet.node.attribution`);
* a reading NVML does not give on this GPU (NaN) is left out: ECC on boards without it, the profiling metric
  ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` before Hopper or on MIG GPUs.

They are rendered here in the text format by hand because dcgm-exporter's counters (``..._TOTAL_ENERGY_
CONSUMPTION``, ECC and remapped-row counts) have no ``_total`` suffix, which prometheus_client would add.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from gpufleet.node.attribution import Attribution, PodRef
from gpufleet.node.contract import Gpu, GpuSample, InstanceSample, Machine


class AgentMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        reg = self.registry
        self.allocations = Counter(
            "gpufleet_node_preferred_allocations", "GetPreferredAllocation answers, by resource and by who chose the "
            "devices: scheduler (the pod's gpufleet.io/devices) or fallback (NVLink-aware best effort).",
            ["resource", "source"], registry=reg)
        self.mismatches = Counter(
            "gpufleet_node_allocation_mismatches", "Pods whose devices (per the kubelet's PodResources record) differ "
            "from the ones the scheduler chose.", ["resource"], registry=reg)
        self.refusals = Counter("gpufleet_node_allocate_refusals", "Allocate calls refused, by reason.",
                                ["resource", "reason"], registry=reg)
        self.xid_events = Counter("gpufleet_node_xid_events", "XID events seen, by XID and effect "
                                  "(unhealthy or ignored).", ["xid", "effect"], registry=reg)
        self.unhealthy = Gauge("gpufleet_node_unhealthy_devices", "Devices advertised Unhealthy, by resource and "
                               "reason (xid, or fractions: a whole GPU withheld because fractional pods use it).",
                               ["resource", "reason"], registry=reg)
        self.registrations = Counter("gpufleet_node_plugin_registrations", "Registrations with the kubelet, by "
                                     "resource and result.", ["resource", "result"], registry=reg)
        self.node_patches = Counter("gpufleet_node_patches", "Patches of this Node's labels and inventory, by result.",
                                    ["result"], registry=reg)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    kind: str
    help: str
    attr: str


GPU_FIELDS = (
    _Field("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "sm_clock_mhz"),
    _Field("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", "mem_clock_mhz"),
    _Field("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", "memory_temp_c"),
    _Field("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "temperature_c"),
    _Field("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "power_w"),
    _Field("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
           "Total energy consumption since boot (in mJ).", "energy_mj"),
    _Field("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "gpu_util"),
    _Field("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", "mem_copy_util"),
    _Field("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "fb_free_mib"),
    _Field("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "fb_used_mib"),
    _Field("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", "last_xid"),
    _Field("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total number of single-bit volatile ECC errors.",
           "ecc_sbe_volatile"),
    _Field("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors.",
           "ecc_dbe_volatile"),
    _Field("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors.",
           "remapped_rows_correctable"),
    _Field("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter",
           "Number of remapped rows for uncorrectable errors.", "remapped_rows_uncorrectable"),
    _Field("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed.", "row_remap_failure"),
    _Field("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.",
           "gr_engine_active"),
)
# Readings a MIG GPU instance has of its own (the others are the GPU's, repeated on each instance's series).
_INSTANCE_FIELDS = frozenset({"fb_free_mib", "fb_used_mib"})
HOLDER_SHARE = "gpufleet_node_gpu_holder_share"
HOLDER_MEMORY = "gpufleet_node_gpu_holder_memory_bytes"


def _number(value: float) -> str:
    """Every digit of a reading ("%g" keeps six: an energy counter in mJ would lose its last ones)."""
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _gpu_labels(gpu: Gpu, hostname: str) -> list[tuple[str, str]]:
    return [("gpu", str(gpu.index)), ("UUID", gpu.uuid), ("pci_bus_id", gpu.pci_bus_id),
            ("device", f"nvidia{gpu.minor_number if gpu.minor_number is not None else gpu.index}"),
            ("modelName", gpu.name), ("Hostname", hostname)]


def _text(pairs: Iterable[tuple[str, str]]) -> str:
    return ",".join(f'{k}="{_escape(v)}"' for k, v in pairs)


def _pod_labels(owner: PodRef | None) -> list[tuple[str, str]]:
    if owner is None:
        return []
    namespace, pod, container = owner
    return [("container", container), ("namespace", namespace), ("pod", pod)]


def _instance_profile(profile: str) -> str:
    """The GPU instance's profile of a MIG device's: "1c.2g.20gb" (a smaller compute instance) is in "2g.20gb"."""
    return re.sub(r"^\d+c\.", "", profile)


@dataclass(frozen=True, slots=True)
class _Row:
    labels: str
    sample: GpuSample
    mig: bool  # a MIG GPU instance's row (its own framebuffer readings are ``instance``'s)
    instance: InstanceSample | None = None  # None on a MIG row: NVML did not answer for this instance


def _rows(machine: Machine, samples: Iterable[tuple[Gpu, GpuSample]], hostname: str,
          held: Attribution) -> list[_Row]:
    rows: list[_Row] = []
    driver = [("DCGM_FI_DRIVER_VERSION", machine.driver_version)]
    for gpu, sample in samples:
        base = _gpu_labels(gpu, hostname)
        gis: dict[int, str] = {}
        for m in gpu.mig:
            gis.setdefault(m.gi_id, _instance_profile(m.profile))
        if gpu.mig_enabled and gis:
            by_gi = {i.gi_id: i for i in sample.instances}
            for gi_id, profile in sorted(gis.items()):
                labels = [*base[:5], ("GPU_I_PROFILE", profile), ("GPU_I_ID", str(gi_id)), base[5], *driver,
                          *_pod_labels(held.pod_of(gpu.uuid, gi_id))]
                rows.append(_Row(_text(labels), sample, True, by_gi.get(gi_id)))
        else:
            rows.append(_Row(_text([*base, *driver, *_pod_labels(held.pod_of(gpu.uuid))]), sample, False))
    return rows


def _value(row: _Row, attr: str) -> float:
    if row.mig and attr in _INSTANCE_FIELDS:
        return float(getattr(row.instance, attr)) if row.instance is not None else math.nan
    return float(getattr(row.sample, attr))


def render_gpu_metrics(machine: Machine, samples: Iterable[tuple[Gpu, GpuSample]], hostname: str,
                       held: Attribution | None = None) -> bytes:
    """The text exposition of the GPU series and of shared GPUs' holders; a reading NVML did not give (NaN) is
    left out."""
    held = held or Attribution()
    pairs = list(samples)
    rows = _rows(machine, pairs, hostname, held)
    lines: list[str] = []
    for f in GPU_FIELDS:
        values = [(row.labels, _value(row, f.attr)) for row in rows]
        present = [(labels, v) for labels, v in values if not math.isnan(v)]
        if not present:
            continue  # no GPU of this node gives it: the family is left out, as dcgm-exporter's unwatched fields
        lines.append(f"# HELP {f.name} {f.help}")
        lines.append(f"# TYPE {f.name} {f.kind}")
        lines.extend(f"{f.name}{{{labels}}} {_number(v)}" for labels, v in present)
    lines += _holder_lines(pairs, hostname, held)
    return ("\n".join(lines) + "\n").encode()


def _holder_lines(pairs: Iterable[tuple[Gpu, GpuSample]], hostname: str, held: Attribution) -> list[str]:
    shares: dict[str, float] = {}
    memory: dict[str, float] = {}
    for gpu, _ in pairs:
        for h in held.holders.get(gpu.uuid, []):
            labels = _text([*_gpu_labels(gpu, hostname), ("namespace", h.namespace), ("pod", h.pod),
                            ("container", h.container), ("kind", h.kind)])
            if h.share is not None:
                shares[labels] = shares.get(labels, 0.0) + h.share
            if h.memory_mib is not None:
                memory[labels] = max(memory.get(labels, 0.0), h.memory_mib * 2.0**20)
    lines = [f"# HELP {HOLDER_SHARE} Share of the GPU each pod holds on a GPU several pods share (a time-slice "
             "replica of 4 is 0.25, a fraction its declared share).", f"# TYPE {HOLDER_SHARE} gauge"]
    lines += [f"{HOLDER_SHARE}{{{labels}}} {_number(v)}" for labels, v in shares.items()]
    lines += [f"# HELP {HOLDER_MEMORY} GPU memory each pod on a shared GPU declared (gpufleet.io/gpu-memory; not "
              "enforced).", f"# TYPE {HOLDER_MEMORY} gauge"]
    lines += [f"{HOLDER_MEMORY}{{{labels}}} {_number(v)}" for labels, v in memory.items()]
    return lines
