"""Discovery under each device-plugin setting: GFD's labels, resources, NVIDIA's device IDs, inventory health."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from machines import MIG_MIXED, MIG_SINGLE, TIME_SLICED, WHOLE_8, write_machine

from gpufleet.gpu.sharing import DevicePluginConfig
from gpufleet.node.contract import MigEngines
from gpufleet.node.discovery import DiscoveryError, discover
from gpufleet.node.dpconfig import AgentDeviceConfig
from gpufleet.node.nvml_fake import FakeNvml


def fake(tmp_path: Path, text: str) -> FakeNvml:
    return FakeNvml(str(write_machine(tmp_path, text)))


def test_whole_gpus(tmp_path: Path) -> None:
    machine = fake(tmp_path, WHOLE_8).machine()
    found = discover(machine, AgentDeviceConfig(), timestamp=1700000000)
    assert found.resources == {"nvidia.com/gpu": 8}
    assert [d.id for d in found.devices["nvidia.com/gpu"]] == [g.uuid for g in machine.gpus]
    assert all(d.visible == d.gpu_uuid == d.id for d in found.devices["nvidia.com/gpu"])
    labels = found.labels
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB" and labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/gpu.replicas"] == "1" and labels["nvidia.com/gpu.sharing-strategy"] == "none"
    assert labels["nvidia.com/gpu.family"] == "ampere" and labels["nvidia.com/gpu.compute.major"] == "8"
    assert labels["nvidia.com/cuda.driver-version.full"] == "550.127.05"
    assert labels["nvidia.com/cuda.runtime-version.full"] == "12.4"
    assert labels["nvidia.com/gfd.timestamp"] == "1700000000"
    assert "nvidia.com/mig.strategy" not in labels  # omitted for none, as GFD does
    no_stamp = discover(machine, dataclasses.replace(AgentDeviceConfig(), no_timestamp=True))
    assert "nvidia.com/gfd.timestamp" not in no_stamp.labels


def test_mig_mixed_offers_each_profile_under_its_own_resource_with_mig_uuids(tmp_path: Path) -> None:
    f = fake(tmp_path, MIG_MIXED)
    machine = f.machine()
    found = discover(machine, AgentDeviceConfig(sharing=f.sharing))
    assert found.resources == {"nvidia.com/mig-3g.40gb": 2, "nvidia.com/mig-2g.20gb": 2, "nvidia.com/mig-1g.10gb": 4}
    mig_uuids = {d.uuid for g in machine.gpus for d in g.mig}
    ids = [d.id for ds in found.devices.values() for d in ds]
    assert sorted(ids) == sorted(mig_uuids)
    one = found.devices["nvidia.com/mig-3g.40gb"][0]
    assert one.visible == one.id and one.index.count(":") == 1 and one.gpu_uuid == machine.gpus[0].uuid
    assert found.labels["nvidia.com/mig.strategy"] == "mixed"
    assert found.labels["nvidia.com/mig-1g.10gb.count"] == "4"
    assert found.labels["nvidia.com/mig-3g.40gb.product"] == "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb"
    assert found.labels["nvidia.com/gpu.replicas"] == "0"  # every GPU is a MIG parent


def test_mig_engines_and_memory_come_from_nvml_when_it_reports_them(tmp_path: Path) -> None:
    f = fake(tmp_path, MIG_MIXED)
    machine = f.machine()
    gpus = tuple(dataclasses.replace(g, mig=tuple(dataclasses.replace(d, engines=MigEngines(3, 2, 0, 0, 0),
                                                                          memory_mib=d.memory_mib - 1) for d in g.mig))
                 for g in machine.gpus)
    found = discover(dataclasses.replace(machine, gpus=gpus), AgentDeviceConfig(sharing=f.sharing))
    assert found.labels["nvidia.com/mig-3g.40gb.engines.copy"] == "3"
    assert found.labels["nvidia.com/mig-3g.40gb.engines.decoder"] == "2"
    assert found.labels["nvidia.com/mig-3g.40gb.memory"] == "40191"


def test_mig_single_and_its_refusal_of_mixed_profiles(tmp_path: Path) -> None:
    f = fake(tmp_path, MIG_SINGLE)
    found = discover(f.machine(), AgentDeviceConfig(sharing=f.sharing))
    assert found.resources == {"nvidia.com/gpu": 4}
    assert all(d.mig is not None for d in found.devices["nvidia.com/gpu"])
    assert found.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb"
    assert found.labels["nvidia.com/mig.strategy"] == "single"
    mixed = fake(tmp_path, MIG_MIXED).machine()
    with pytest.raises(DiscoveryError, match="more than one MIG device type"):
        discover(mixed, AgentDeviceConfig(sharing=DevicePluginConfig(mig_strategy="single"), source="cm.yaml"))


def test_mig_strategy_none_offers_mig_enabled_gpus_whole(tmp_path: Path) -> None:
    f = fake(tmp_path, MIG_MIXED)
    found = discover(f.machine(), AgentDeviceConfig())
    assert found.resources == {"nvidia.com/gpu": 2}
    assert "mig" not in json.loads(found.annotations["gpufleet.io/gpus"])["gpus"][0]


@pytest.mark.parametrize(("rename", "resource", "product"), [
    (False, "nvidia.com/gpu", "NVIDIA-L40S-SHARED"), (True, "nvidia.com/gpu.shared", "NVIDIA-L40S")])
def test_time_slicing_with_and_without_rename(tmp_path: Path, rename: bool, resource: str, product: str) -> None:
    f = fake(tmp_path, TIME_SLICED)
    sharing = dataclasses.replace(f.sharing, rename_by_default=rename)
    found = discover(f.machine(), AgentDeviceConfig(sharing=sharing))
    assert found.resources == {resource: 8}
    first = f.machine().gpus[0].uuid
    assert [d.id for d in found.devices[resource][:4]] == [f"{first}::{i}" for i in range(4)]
    assert {d.visible for d in found.devices[resource][:4]} == {first}
    assert found.labels["nvidia.com/gpu.product"] == product
    assert found.labels["nvidia.com/gpu.replicas"] == "4"
    assert found.labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert found.labels["nvidia.com/gpu.count"] == "2"  # physical GPUs, not replicas


def test_unhealthy_gpus_are_marked_in_the_inventory(tmp_path: Path) -> None:
    found = discover(fake(tmp_path, WHOLE_8).machine(), AgentDeviceConfig(), unhealthy_gpus={5})
    gpus = json.loads(found.annotations["gpufleet.io/gpus"])["gpus"]
    assert [g["index"] for g in gpus if g.get("health") == "Unhealthy"] == [5]


def test_a_model_outside_the_catalog_still_gets_labels_and_an_inventory(tmp_path: Path) -> None:
    machine = fake(tmp_path, WHOLE_8).machine()
    odd = tuple(dataclasses.replace(g, name="NVIDIA Quadro RTX 9999 (beta)", memory_mib=30000) for g in machine.gpus)
    found = discover(dataclasses.replace(machine, gpus=odd), AgentDeviceConfig())
    assert found.labels["nvidia.com/gpu.product"] == "NVIDIA-Quadro-RTX-9999-beta"
    assert found.labels["nvidia.com/gpu.memory"] == "30000"
    inventory = json.loads(found.annotations["gpufleet.io/gpus"])
    assert inventory["model"] == "Quadro-RTX-9999-beta" and inventory["memoryMiB"] == 30000
