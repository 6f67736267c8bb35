"""From a discovered machine to the ``resource.k8s.io/v1`` ResourceSlices NVIDIA's DRA driver would publish.

Pure functions, no I/O: :mod:`gpufleet.node.dra_publisher` writes what they return. Everything here follows
what NVIDIA's GPU kubelet plugin publishes (driver ``gpu.nvidia.com``; NVIDIA/k8s-dra-driver-gpu,
``cmd/gpu-kubelet-plugin/deviceinfo.go`` and ``mig.go``, as the project's DRA reference notes, §2.1-2.3, read them),
so that DeviceClasses, CEL selectors and claims written for NVIDIA's driver select the same devices here:

* one pool per node, named after the node, ``spec.nodeName`` set (§2.1: ``Pools: {nodeName: ...}``);
* a whole GPU is ``gpu-<minor>`` with ``type=gpu``, ``uuid``, ``productName``, ``brand``, ``architecture``
  (strings), ``cudaComputeCapability``, ``driverVersion``, ``cudaDriverVersion`` (versions),
  ``resource.kubernetes.io/pciBusID`` and capacity ``memory`` (§2.2);
* a MIG device is ``gpu-<parentMinor>-mig-<profile without dots>-<giProfileId>-<placementStart>`` (§2.2, e.g.
  ``gpu-0-mig-1g10gb-15-0``) with ``type=mig``, ``uuid``, ``parentUUID``, ``profile`` and its parent's attributes;
  capacity ``memory``, ``multiprocessors``, the engines NVML reported and ``memorySlice<i>`` = 1 for each memory
  slice of its placement (static MIG, §2.3: no counters);
* an Unhealthy device is left out of the slices, as NVIDIA's driver does with its NVMLDeviceHealthCheck gate
  ("The DRA Driver removes unhealthy devices from the available ResourceSlices", the driver's
  docs on that gate); no device taint is used, so the 1.35 rule of at most 64 tainted devices per slice never
  applies;
* at most 128 devices per slice (reference §1.1); a larger pool is split into several slices that all carry the
  pool's generation and ``resourceSliceCount``.

Left out, because the node agent's NVML contract does not carry them: ``resource.kubernetes.io/pcieRoot`` (sysfs),
``addressingMode`` (coherent-memory platforms), VFIO devices, dynamic MIG (partitionable devices with counter sets)
and ComputeDomain devices (NVIDIA's other driver).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from gpufleet.api.dra_objects import NVIDIA_GPU_DRIVER
from gpufleet.api.dra_parse import MAX_DEVICES_PER_SLICE, MAX_STRING_ATTRIBUTE
from gpufleet.gpu.catalog import family_for
from gpufleet.gpu.mig import MigError, MigProfile, geometry_for
from gpufleet.node.contract import Gpu, Machine, MigDevice

JsonDict = dict[str, Any]

# The API's limits and NVIDIA's driver name, as the reader checks them (one definition, so what the agent publishes
# is what gpufleet reads back).
DRIVER = NVIDIA_GPU_DRIVER
API_VERSION = "resource.k8s.io/v1"
MAX_NAME = 253  # a DNS subdomain: the longest object name
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"  # the standard attribute NVIDIA moved to in v25.12.0
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "gpufleet-node-agent"

# NVIDIA's architecture strings (go-nvlib's names for NVML's architecture enum) for GFD's families, which
# gpufleet derives from the compute capability (gpufleet.gpu.catalog.family_for).
_ARCHITECTURES: Mapping[str, str] = {
    "fermi": "Fermi", "kepler": "Kepler", "maxwell": "Maxwell", "pascal": "Pascal", "volta": "Volta",
    "turing": "Turing", "ampere": "Ampere", "ada-lovelace": "Ada Lovelace", "hopper": "Hopper",
    "blackwell": "Blackwell", "rubin": "Rubin",
}


# --- values as the API types them ------------------------------------------------------------------------------


def _string(value: str) -> JsonDict:
    return {"string": value[:MAX_STRING_ATTRIBUTE]}


def _version(value: str) -> JsonDict:
    return {"version": value}


def quantity_from_mib(mib: int) -> str:
    """A byte count given in MiB as the API server writes it back (the largest binary suffix that is exact), so
    that what the agent wants and what the server holds compare equal: 81920 -> ``80Gi``, 9856 -> ``9856Mi``."""
    if mib <= 0:
        return "0"
    for suffix, factor in (("Ti", 1 << 20), ("Gi", 1 << 10)):
        if mib % factor == 0:
            return f"{mib // factor}{suffix}"
    return f"{mib}Mi"


def _count(value: int) -> JsonDict:
    return {"value": str(value)}


def semver(text: str) -> str | None:
    """A dotted version as semantic version 2.0 wants it: three numeric parts without leading zeros (NVIDIA's
    driver publishes driver 580.95.05 as ``580.95.5``); None when ``text`` is not a dotted number."""
    parts = text.strip().split(".")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        return None
    numbers = [int(p) for p in parts] + [0] * (3 - len(parts))
    return ".".join(str(n) for n in numbers)


def cuda_version(encoded: int) -> str:
    """NVML's CUDA driver version (12040 is CUDA 12.4) as a semantic version, ``12.4.0``."""
    return f"{encoded // 1000}.{(encoded % 1000) // 10}.0"


def pci_bus_id(nvml_bus_id: str) -> str:
    """NVML's bus id (``00000000:10:00.0``, an 8-digit domain) in the sysfs form NVIDIA's driver publishes
    (``0000:10:00.0``, lower case)."""
    domain, sep, rest = nvml_bus_id.strip().lower().partition(":")
    if not sep:
        return nvml_bus_id.strip().lower()
    return f"{domain[-4:].rjust(4, '0')}:{rest}"


def architecture(gpu: Gpu) -> str | None:
    return _ARCHITECTURES.get(family_for(gpu.compute_major, gpu.compute_minor))


def brand(gpu: Gpu) -> str:
    """NVML's brand, as NVIDIA's driver writes it (``Nvidia``, ``Tesla``). The contract does not carry
    ``nvmlDeviceGetBrand``, so it is derived: published slices show ``Tesla`` for a Tesla P4 and ``Nvidia`` for a
    Tesla T4, A10 and A100 (current drivers report Turing and later data-centre parts under the NVIDIA brand)."""
    older = (gpu.compute_major, gpu.compute_minor) < (7, 5)
    return "Tesla" if older and gpu.name.startswith("Tesla") else "Nvidia"


# --- devices ------------------------------------------------------------------------------------------------------


def minor(gpu: Gpu) -> int:
    """NVIDIA names devices after the GPU's minor number (``/dev/nvidia<minor>``); NVML's index where the
    backend cannot tell (they agree on every machine NVIDIA's docs show)."""
    return gpu.minor_number if gpu.minor_number is not None else gpu.index


def gpu_device_name(gpu: Gpu) -> str:
    return f"gpu-{minor(gpu)}"


def _profile_label(profile: str) -> str:
    # The driver's rule (mig.go): dots dropped, lower case, anything outside [a-z0-9-] a dash, dashes trimmed, so
    # "1g.10gb" is "1g10gb" and "1g.10gb+me" is "1g10gb-me" (a device name is a DNS label: no dots, no "+").
    return re.sub(r"[^a-z0-9-]", "-", profile.replace(".", "").lower()).strip("-")


def _mig_profile(gpu: Gpu, mig: MigDevice) -> MigProfile | None:
    geometry = geometry_for(gpu.name)
    if geometry is None:
        return None
    try:
        return geometry.profile(mig.profile)
    except MigError:
        return None


def mig_device_name(gpu: Gpu, mig: MigDevice) -> str:
    """NVIDIA's canonical MIG device name; the GPU-instance profile id (``nvidia-smi mig -lgip``'s ID) comes from
    gpufleet's MIG geometry. For a model gpufleet has no geometry for, the id is left out of the name
    (``gpu-0-mig-1g10gb-3``): still unique on the GPU, since a placement start holds one instance."""
    profile = _mig_profile(gpu, mig)
    label = _profile_label(mig.profile)
    if profile is None or profile.profile_id is None:
        return f"gpu-{minor(gpu)}-mig-{label}-{mig.start}"
    return f"gpu-{minor(gpu)}-mig-{label}-{profile.profile_id}-{mig.start}"


def _common_attributes(machine: Machine, gpu: Gpu) -> JsonDict:
    """What a whole GPU and each of its MIG devices both carry."""
    out: JsonDict = {"productName": _string(gpu.name), "brand": _string(brand(gpu))}
    arch = architecture(gpu)
    if arch is not None:
        out["architecture"] = _string(arch)
    out["cudaComputeCapability"] = _version(f"{gpu.compute_major}.{gpu.compute_minor}.0")
    driver = semver(machine.driver_version)
    if driver is not None:  # an unparsable version would make the API server refuse the whole slice
        out["driverVersion"] = _version(driver)
    if machine.cuda_driver_version > 0:
        out["cudaDriverVersion"] = _version(cuda_version(machine.cuda_driver_version))
    if gpu.pci_bus_id:
        out[PCI_BUS_ID] = _string(pci_bus_id(gpu.pci_bus_id))
    return out


def gpu_device(machine: Machine, gpu: Gpu) -> JsonDict:
    attributes = {"type": _string("gpu"), "uuid": _string(gpu.uuid), **_common_attributes(machine, gpu)}
    return {"name": gpu_device_name(gpu), "attributes": attributes,
            "capacity": {"memory": {"value": quantity_from_mib(gpu.memory_mib)}}}


def mig_device(machine: Machine, gpu: Gpu, mig: MigDevice) -> JsonDict:
    attributes = {"type": _string("mig"), "uuid": _string(mig.uuid), "parentUUID": _string(gpu.uuid),
                  "profile": _string(mig.profile), **_common_attributes(machine, gpu)}
    # memory: the profile's size (NVIDIA multiplies the profile's MiB by 2^20; NVML's MIG device reports the same).
    capacity: JsonDict = {"memory": {"value": quantity_from_mib(mig.memory_mib)}}
    if mig.multiprocessors is not None:
        capacity["multiprocessors"] = _count(mig.multiprocessors)
    if mig.engines is not None:
        for key, value in (("copyEngines", mig.engines.copy), ("decoders", mig.engines.decoder),
                           ("encoders", mig.engines.encoder), ("jpegEngines", mig.engines.jpeg),
                           ("ofaEngines", mig.engines.ofa)):
            capacity[key] = _count(value)
    profile = _mig_profile(gpu, mig)
    if profile is not None:
        for i in range(mig.start, mig.start + profile.memory_slices):
            capacity[f"memorySlice{i}"] = _count(1)
    return {"name": mig_device_name(gpu, mig), "attributes": attributes, "capacity": capacity}


def devices(machine: Machine, *, unhealthy: Collection[str] = ()) -> list[JsonDict]:
    """This machine's DRA devices, GPU by GPU in minor order, Unhealthy ones (by GPU or MIG UUID) left out.

    A MIG-enabled GPU offers its MIG devices and not itself: with MIG on, a container cannot use the GPU whole,
    whatever the device plugin's migStrategy says (the DRA driver has no strategy). Within a GPU, MIG devices
    are in name order, as NVIDIA's driver sorts them: the scheduler takes the first device that fits, so the
    smaller profiles come first.
    """
    broken = set(unhealthy)
    out: list[JsonDict] = []
    for gpu in sorted(machine.gpus, key=minor):
        if gpu.uuid in broken:
            continue  # the whole GPU, and every MIG device on it
        if not gpu.mig_enabled:
            out.append(gpu_device(machine, gpu))
            continue
        migs = [mig_device(machine, gpu, m) for m in gpu.mig if m.uuid not in broken]
        out.extend(sorted(migs, key=lambda d: str(d["name"])))
    return out


# --- slices -------------------------------------------------------------------------------------------------------


def slice_name(node_name: str, index: int, driver: str = DRIVER) -> str:
    """``<node>-<driver>-<index>``: deterministic, so a restarted agent finds its own slices by name. A node name
    is a DNS subdomain, so the result is one unless it is too long; then the node part is cut and a hash of the
    whole node name keeps names of different nodes apart."""
    suffix = f"-{driver}-{index}"
    name = f"{node_name}{suffix}"
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(node_name.encode()).hexdigest()[:10]
    head = node_name[:MAX_NAME - len(suffix) - len(digest) - 1]
    # Each dot-separated part must start and end with a letter or digit: a cut may leave a dot or dash at the end.
    head = head.rstrip(".-")
    return f"{head}-{digest}{suffix}"


def chunks(items: Sequence[JsonDict], size: int = MAX_DEVICES_PER_SLICE) -> list[list[JsonDict]]:
    """The devices per slice; one empty slice for an empty pool, so that consumers see the pool, complete and
    empty (every GPU Unhealthy), rather than no pool at all (``resourceSliceCount`` must be at least 1)."""
    if not items:
        return [[]]
    return [list(items[i:i + size]) for i in range(0, len(items), size)]


def slices(node_name: str, pool_devices: Sequence[JsonDict], *, generation: int, driver: str = DRIVER,
           owner_uid: str | None = None) -> list[JsonDict]:
    """The ResourceSlice objects of this node's pool at ``generation``: one per 128 devices.

    With ``owner_uid`` (the Node's UID) each slice is owned by the Node, so deleting the Node deletes its slices,
    as the kubelet plugin library does for NVIDIA's driver.
    """
    parts = chunks(pool_devices)
    out = []
    for k, part in enumerate(parts):
        metadata: JsonDict = {"name": slice_name(node_name, k, driver), "labels": {MANAGED_BY_LABEL: MANAGED_BY}}
        if owner_uid:
            metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": owner_uid,
                                            "controller": True}]
        out.append({
            "apiVersion": API_VERSION,
            "kind": "ResourceSlice",
            "metadata": metadata,
            "spec": {
                "driver": driver,
                "nodeName": node_name,
                "pool": {"name": node_name, "generation": generation, "resourceSliceCount": len(parts)},
                "devices": part,
            },
        })
    return out


def build_slices(machine: Machine, node_name: str, *, generation: int = 1, unhealthy: Collection[str] = (),
                 owner_uid: str | None = None) -> list[JsonDict]:
    """The whole answer in one call: this machine's pool on ``node_name`` at ``generation``."""
    return slices(node_name, devices(machine, unhealthy=unhealthy), generation=generation, owner_uid=owner_uid)
