"""The ResourceSlices built from fake NVML machines: NVIDIA's driver name, device names, typed attributes and
capacities, MIG devices, Unhealthy devices left out, and pools of more than 128 devices split."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from machines import MIG_MIXED, WHOLE_8, write_machine

from gpufleet.api.dra_parse import MAX_ATTRIBUTES_AND_CAPACITIES, MAX_DEVICES_PER_SLICE
from gpufleet.gpu.mig import geometry_for
from gpufleet.node.contract import Machine
from gpufleet.node.dra_slices import (
    DRIVER,
    PCI_BUS_ID,
    build_slices,
    devices,
    mig_device_name,
    pci_bus_id,
    quantity_from_mib,
    semver,
    slice_name,
)
from gpufleet.node.nvml_fake import FakeNvml

JsonDict = dict[str, Any]

# 20 A100s cut into seven 1g.10gb each: 140 MIG devices, more than one slice holds.
MIG_140 = """\
apiVersion: gpufleet.io/v1alpha1
kind: NodePool
metadata: {name: big}
spec:
  count: 1
  namePrefix: big
  gpu: {model: A100-SXM4-80GB, count: 20, migLayout: "1g.10gb:7"}
  cpu: "64"
  memory: 512Gi
  sharing: {migStrategy: mixed}
"""

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
SEMVER = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")
QUALIFIED = re.compile(r"([a-z0-9.-]+/)?[A-Za-z_][A-Za-z0-9_]{0,31}")


def machine_of(folder: Path, text: str) -> tuple[str, Machine]:
    fake = FakeNvml(str(write_machine(folder, text)))
    return fake.spec.node_name, fake.machine()


def attr(device: JsonDict, name: str) -> Any:
    [value] = device["attributes"][name].values()
    return value


def assert_valid_device(device: JsonDict) -> None:
    """What the API server validates per device (reference §1.1)."""
    assert DNS_LABEL.fullmatch(device["name"]) and len(device["name"]) <= 63, device["name"]
    assert len(device["attributes"]) + len(device["capacity"]) <= MAX_ATTRIBUTES_AND_CAPACITIES
    for name, value in device["attributes"].items():
        assert QUALIFIED.fullmatch(name), name
        [(kind, v)] = value.items()  # exactly one of int, bool, string, version
        assert kind in ("int", "bool", "string", "version")
        if kind == "version":
            assert SEMVER.fullmatch(v) and len(v) <= 64, (name, v)
        if kind == "string":
            assert isinstance(v, str) and len(v) <= 64
    for name, value in device["capacity"].items():
        assert QUALIFIED.fullmatch(name), name
        assert re.fullmatch(r"[0-9]+(Mi|Gi|Ti)?", value["value"]), value


def test_whole_gpus_are_published_as_nvidias_driver_publishes_them(tmp_path: Path) -> None:
    node, machine = machine_of(tmp_path, WHOLE_8)
    [one] = build_slices(machine, node, generation=1)
    assert one["apiVersion"] == "resource.k8s.io/v1" and one["kind"] == "ResourceSlice"
    assert one["metadata"]["name"] == f"{node}-gpu.nvidia.com-0"
    spec = one["spec"]
    assert spec["driver"] == DRIVER == "gpu.nvidia.com" and spec["nodeName"] == node
    assert spec["pool"] == {"name": node, "generation": 1, "resourceSliceCount": 1}
    assert [d["name"] for d in spec["devices"]] == [f"gpu-{i}" for i in range(8)]
    gpu0 = spec["devices"][0]
    assert gpu0["attributes"] == {
        "type": {"string": "gpu"},
        "uuid": {"string": machine.gpus[0].uuid},
        "productName": {"string": "NVIDIA A100-SXM4-80GB"},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": "Ampere"},
        "cudaComputeCapability": {"version": "8.0.0"},
        "driverVersion": {"version": "550.127.5"},  # NVML's 550.127.05, without semver's forbidden leading zero
        "cudaDriverVersion": {"version": "12.4.0"},
        PCI_BUS_ID: {"string": "0000:10:00.0"},
    }
    assert gpu0["capacity"] == {"memory": {"value": "80Gi"}}
    for device in spec["devices"]:
        assert_valid_device(device)
    assert len({attr(d, "uuid") for d in spec["devices"]}) == 8


def test_mig_devices_carry_nvidias_names_their_parent_profile_and_memory_slices(tmp_path: Path) -> None:
    node, machine = machine_of(tmp_path, MIG_MIXED)
    [one] = build_slices(machine, node)
    found = {d["name"]: d for d in one["spec"]["devices"]}
    geometry = geometry_for("A100-SXM4-80GB")
    assert geometry is not None
    expected = set()
    for gpu in machine.gpus:
        for mig in gpu.mig:
            profile = geometry.profile(mig.profile)
            # gpu-<parent minor>-mig-<profile without dots>-<GI profile id>-<placement start>
            name = f"gpu-{gpu.index}-mig-{mig.profile.replace('.', '')}-{profile.profile_id}-{mig.start}"
            expected.add(name)
            device = found[name]
            assert attr(device, "type") == "mig" and attr(device, "uuid") == mig.uuid
            assert attr(device, "parentUUID") == gpu.uuid and attr(device, "profile") == mig.profile
            assert attr(device, "productName") == gpu.name and attr(device, "architecture") == "Ampere"
            assert device["capacity"]["memory"] == {"value": quantity_from_mib(profile.memory_mib)}
            assert device["capacity"]["multiprocessors"] == {"value": str(profile.multiprocessors)}
            slices = {k for k in device["capacity"] if k.startswith("memorySlice")}
            assert slices == {f"memorySlice{i}" for i in range(mig.start, mig.start + profile.memory_slices)}
            assert_valid_device(device)
    # A MIG-enabled GPU offers its MIG devices, never itself whole.
    assert set(found) == expected and not any(re.fullmatch(r"gpu-[0-9]+", n) for n in found)
    assert "gpu-0-mig-3g40gb-9-4" in found and "gpu-1-mig-1g10gb-19-2" in found
    # Within a GPU, the devices come in name order (the scheduler takes the first that fits).
    names = [d["name"] for d in one["spec"]["devices"]]
    per_gpu = [n for n in names if n.startswith("gpu-0-")]
    assert per_gpu == sorted(per_gpu) and names.index(per_gpu[-1]) < names.index("gpu-1-mig-1g10gb-19-2")


def test_a_media_extension_profile_becomes_a_dns_label(tmp_path: Path) -> None:
    _, machine = machine_of(tmp_path, MIG_MIXED)
    gpu = machine.gpus[0]
    me = dataclasses.replace(gpu.mig[0], profile="1g.10gb+me", start=6)
    assert mig_device_name(gpu, me) == "gpu-0-mig-1g10gb-me-20-6"


def test_unhealthy_devices_are_left_out_as_nvidias_driver_does(tmp_path: Path) -> None:
    _, whole = machine_of(tmp_path, WHOLE_8)
    names = [d["name"] for d in devices(whole, unhealthy={whole.gpus[3].uuid})]
    assert names == [f"gpu-{i}" for i in range(8) if i != 3]

    _, mig = machine_of(tmp_path, MIG_MIXED)
    gpu0, gpu1 = mig.gpus
    # A broken GPU takes every MIG device on it; a broken MIG device only itself.
    left = [d for d in devices(mig, unhealthy={gpu0.uuid, gpu1.mig[0].uuid})]
    assert {attr(d, "parentUUID") for d in left} == {gpu1.uuid}
    assert {attr(d, "uuid") for d in left} == {m.uuid for m in gpu1.mig[1:]}


def test_more_than_128_devices_are_split_into_slices_of_one_pool(tmp_path: Path) -> None:
    node, machine = machine_of(tmp_path, MIG_140)
    built = build_slices(machine, node, generation=7)
    assert [len(s["spec"]["devices"]) for s in built] == [MAX_DEVICES_PER_SLICE, 140 - MAX_DEVICES_PER_SLICE]
    assert [s["metadata"]["name"] for s in built] == [f"{node}-gpu.nvidia.com-0", f"{node}-gpu.nvidia.com-1"]
    for s in built:
        assert s["spec"]["pool"] == {"name": node, "generation": 7, "resourceSliceCount": 2}
        assert s["spec"]["nodeName"] == node
    names = [d["name"] for s in built for d in s["spec"]["devices"]]
    assert len(set(names)) == 140  # unique within the pool, across its slices
    # Devices run in minor order across the slices (128 = 18 GPUs x 7 + 2: the cut falls inside GPU 18).
    assert names[0] == "gpu-0-mig-1g10gb-19-0" and names[-1] == "gpu-19-mig-1g10gb-19-6"
    assert names[127] == "gpu-18-mig-1g10gb-19-1" and names[128] == "gpu-18-mig-1g10gb-19-2"


def test_an_empty_pool_is_one_slice_without_devices(tmp_path: Path) -> None:
    node, machine = machine_of(tmp_path, WHOLE_8)
    [one] = build_slices(machine, node, generation=3, unhealthy={g.uuid for g in machine.gpus})
    assert one["spec"]["devices"] == []
    assert one["spec"]["pool"] == {"name": node, "generation": 3, "resourceSliceCount": 1}


def test_owner_reference_ties_the_slices_to_the_node(tmp_path: Path) -> None:
    node, machine = machine_of(tmp_path, WHOLE_8)
    [one] = build_slices(machine, node, owner_uid="1234")
    assert one["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": node, "uid": "1234", "controller": True}]
    assert one["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpufleet-node-agent"}


def test_slice_names_are_valid_and_distinct_for_long_node_names() -> None:
    assert slice_name("node-a", 2) == "node-a-gpu.nvidia.com-2"
    long_a = "a" * 230 + ".example-" + "x" * 20
    long_b = "a" * 230 + ".example-" + "y" * 20
    for node in (long_a, long_b, "b" * 253, "c" * 240 + "." + "d" * 12):
        for k in (0, 11):
            name = slice_name(node, k)
            assert len(name) <= 253 and DNS_SUBDOMAIN.fullmatch(name), name
            assert name.endswith(f"-gpu.nvidia.com-{k}")
    assert slice_name(long_a, 0) != slice_name(long_b, 0)
    assert slice_name(long_a, 0) == slice_name(long_a, 0)  # deterministic: a restarted agent finds its own


def test_value_helpers() -> None:
    assert semver("580.95.05") == "580.95.5" and semver("550.54") == "550.54.0" and semver("560") == "560.0.0"
    assert semver("r550-beta") is None and semver("1.2.3.4") is None
    assert pci_bus_id("00000000:1A:00.0") == "0000:1a:00.0" and pci_bus_id("0000:3b:00.0") == "0000:3b:00.0"
    assert quantity_from_mib(81920) == "80Gi" and quantity_from_mib(9856) == "9856Mi"
    assert quantity_from_mib(1 << 20) == "1Ti" and quantity_from_mib(40192) == "40192Mi"


@pytest.mark.parametrize("version", ["1.34.0", "1.35.0"])
def test_every_slice_is_valid_against_kubernetes_openapi_schema(tmp_path: Path, version: str) -> None:
    for text in (WHOLE_8, MIG_MIXED, MIG_140):
        node, machine = machine_of(tmp_path, text)
        for one in build_slices(machine, node, generation=2, owner_uid="0b7c4a3e-node-uid"):
            kubernetes_validate.validate(one, version, strict=True)
