"""The agent's metrics endpoint: GPU telemetry under dcgm-exporter's names, plus the agent's own counters.

GPU series are named and labelled as dcgm-exporter names them (``DCGM_FI_DEV_GPU_UTIL{gpu, UUID, pci_bus_id,
device, modelName, Hostname, DCGM_FI_DRIVER_VERSION}``), so its Grafana dashboard (12239) and the alert rules
written for it work unchanged. They are rendered here in the text format by hand because dcgm-exporter's
counter ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` has no ``_total`` suffix, which prometheus_client would add.
Only the basic set is exported (utilisation, framebuffer, temperature, power, clocks, energy, last XID); the
full observability story (pod labels, profiling counters, alert rules) belongs to issue 12.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from gpufleet.node.contract import Gpu, GpuSample, Machine


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
    _Field("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "temperature_c"),
    _Field("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "power_w"),
    _Field("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
           "Total energy consumption since boot (in mJ).", "energy_mj"),
    _Field("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "gpu_util"),
    _Field("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", "mem_copy_util"),
    _Field("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "fb_free_mib"),
    _Field("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "fb_used_mib"),
    _Field("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", "last_xid"),
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(gpu: Gpu, hostname: str, driver: str) -> str:
    pairs = (("gpu", str(gpu.index)), ("UUID", gpu.uuid), ("pci_bus_id", gpu.pci_bus_id),
             ("device", f"nvidia{gpu.minor_number if gpu.minor_number is not None else gpu.index}"),
             ("modelName", gpu.name), ("Hostname", hostname), ("DCGM_FI_DRIVER_VERSION", driver))
    return ",".join(f'{k}="{_escape(v)}"' for k, v in pairs)


def render_gpu_metrics(machine: Machine, samples: Iterable[tuple[Gpu, GpuSample]], hostname: str) -> bytes:
    """The text exposition of the GPU series; a reading NVML did not give (NaN) is left out."""
    rows = [(gpu, sample, _labels(gpu, hostname, machine.driver_version)) for gpu, sample in samples]
    lines: list[str] = []
    for f in GPU_FIELDS:
        lines.append(f"# HELP {f.name} {f.help}")
        lines.append(f"# TYPE {f.name} {f.kind}")
        for _gpu, sample, labels in rows:
            value = float(getattr(sample, f.attr))
            if not math.isnan(value):
                lines.append(f"{f.name}{{{labels}}} {value:g}")
    return ("\n".join(lines) + "\n").encode()
