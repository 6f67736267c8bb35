"""Device-plugin resources and GFD labels compared with the reference tables (nvidia-gpu-stack.md §2.2-2.3, §4)."""

from __future__ import annotations

import pytest

from gpufleet.gpu.catalog import DEFAULT_CATALOG
from gpufleet.gpu.mig import MigPlacement
from gpufleet.gpu.sharing import (
    DevicePluginConfig,
    PhysicalGpu,
    SharingError,
    advertised_resources,
    gfd_labels,
    make_gpus,
)

A100_40 = DEFAULT_CATALOG.get("A100-SXM4-40GB")
A100_80 = DEFAULT_CATALOG.get("A100-SXM4-80GB")
T4 = DEFAULT_CATALOG.get("T4")


def _mig(model_key: str, layout: str, n: int = 2) -> tuple[PhysicalGpu, ...]:
    placements = [MigPlacement(p.split("@")[0], int(p.split("@")[1])) for p in layout.split(",")]
    return make_gpus("node-a", DEFAULT_CATALOG.get(model_key), n, placements)


def test_plain_gpus() -> None:
    gpus = make_gpus("n", T4, 4)
    cfg = DevicePluginConfig()
    assert advertised_resources(gpus, cfg) == {"nvidia.com/gpu": 4}
    labels = gfd_labels(gpus, cfg)
    assert labels["nvidia.com/gpu.product"] == "Tesla-T4"
    assert labels["nvidia.com/gpu.count"] == "4"
    assert labels["nvidia.com/gpu.replicas"] == "1"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "none"
    assert labels["nvidia.com/gpu.memory"] == "15360"
    assert labels["nvidia.com/gpu.family"] == "turing"
    assert (labels["nvidia.com/gpu.compute.major"], labels["nvidia.com/gpu.compute.minor"]) == ("7", "5")
    assert labels["nvidia.com/mig.capable"] == "false"
    assert "nvidia.com/mig.strategy" not in labels  # omitted for none


def test_time_slicing_keeps_the_name_and_marks_the_product_shared() -> None:
    gpus = make_gpus("n", A100_80, 8)
    cfg = DevicePluginConfig(time_slicing={"nvidia.com/gpu": 10})
    # Capacity = physical devices x replicas (8 x 10 -> 80).
    assert advertised_resources(gpus, cfg) == {"nvidia.com/gpu": 80}
    labels = gfd_labels(gpus, cfg)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB-SHARED"
    assert labels["nvidia.com/gpu.count"] == "8"  # physical GPUs, not multiplied (code over README)
    assert labels["nvidia.com/gpu.replicas"] == "10"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"


def test_rename_by_default_advertises_shared_and_keeps_the_plain_product() -> None:
    gpus = make_gpus("n", T4, 2)
    cfg = DevicePluginConfig(time_slicing={"nvidia.com/gpu": 4}, rename_by_default=True)
    assert advertised_resources(gpus, cfg) == {"nvidia.com/gpu.shared": 8}
    labels = gfd_labels(gpus, cfg)
    assert labels["nvidia.com/gpu.product"] == "Tesla-T4"  # renamed: no -SHARED suffix
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert "nvidia.com/gpu.shared.product" not in labels  # labels stay keyed under the original name


def test_mig_single_strategy() -> None:
    gpus = _mig("A100-SXM4-40GB", ",".join(f"1g.5gb@{i}" for i in range(7)), n=2)
    cfg = DevicePluginConfig(mig_strategy="single")
    assert advertised_resources(gpus, cfg) == {"nvidia.com/gpu": 14}
    labels = gfd_labels(gpus, cfg)
    assert labels["nvidia.com/mig.strategy"] == "single"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"
    assert labels["nvidia.com/gpu.count"] == "14"
    assert labels["nvidia.com/gpu.memory"] == "4864"
    assert labels["nvidia.com/gpu.slices.gi"] == "1"
    assert labels["nvidia.com/gpu.multiprocessors"] == "14"


def test_mig_single_refuses_two_profiles_and_mixed_enablement() -> None:
    with pytest.raises(SharingError, match="more than one MIG device type"):
        advertised_resources(_mig("A100-SXM4-40GB", "3g.20gb@0,2g.10gb@4"), DevicePluginConfig(mig_strategy="single"))
    mixed = (*make_gpus("n", A100_40, 1), *_mig("A100-SXM4-40GB", "7g.40gb@0", n=1))
    with pytest.raises(SharingError, match="same migEnabled value"):
        advertised_resources(mixed, DevicePluginConfig(mig_strategy="single"))


def test_mig_mixed_strategy_per_profile_resources_and_labels() -> None:
    gpus = _mig("A100-SXM4-80GB", "3g.40gb@0,2g.20gb@4,1g.10gb@6", n=2)
    cfg = DevicePluginConfig(mig_strategy="mixed")
    assert advertised_resources(gpus, cfg) == {
        "nvidia.com/mig-3g.40gb": 2, "nvidia.com/mig-2g.20gb": 2, "nvidia.com/mig-1g.10gb": 2}
    labels = gfd_labels(gpus, cfg)
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/mig-3g.40gb.product"] == "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb"
    assert labels["nvidia.com/mig-3g.40gb.count"] == "2"
    assert labels["nvidia.com/mig-3g.40gb.memory"] == "40192"
    assert labels["nvidia.com/mig-1g.10gb.slices.ci"] == "1"
    assert labels["nvidia.com/gpu.replicas"] == "0"  # every GPU is a MIG parent


def test_mig_mixed_node_with_a_plain_gpu_offers_both() -> None:
    gpus = (*_mig("A100-SXM4-80GB", "7g.80gb@0", n=1), *make_gpus("n2", A100_80, 1))
    gpus = (gpus[0], PhysicalGpu(1, gpus[1].uuid, A100_80))
    assert advertised_resources(gpus, DevicePluginConfig(mig_strategy="mixed")) == {
        "nvidia.com/mig-7g.80gb": 1, "nvidia.com/gpu": 1}


def test_mig_enabled_gpus_under_strategy_none_are_full_gpus() -> None:
    gpus = _mig("A100-SXM4-80GB", "3g.40gb@0,3g.40gb@4", n=2)
    assert advertised_resources(gpus, DevicePluginConfig()) == {"nvidia.com/gpu": 2}


def test_time_sliced_mig_and_me_resource_names() -> None:
    gpus = _mig("A100-SXM4-80GB", "1g.10gb+me@0,3g.40gb@4", n=1)
    cfg = DevicePluginConfig(mig_strategy="mixed", time_slicing={"nvidia.com/mig-3g.40gb": 2})
    assert advertised_resources(gpus, cfg) == {"nvidia.com/mig-1g.10gb.me": 1, "nvidia.com/mig-3g.40gb": 2}
    labels = gfd_labels(gpus, cfg)
    assert labels["nvidia.com/mig-3g.40gb.product"] == "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb-SHARED"
    assert labels["nvidia.com/mig-3g.40gb.replicas"] == "2"
    assert labels["nvidia.com/mig-1g.10gb.me.count"] == "1"


def test_invalid_configurations_are_refused() -> None:
    with pytest.raises(SharingError, match="at least 2"):
        advertised_resources(make_gpus("n", T4, 1), DevicePluginConfig(time_slicing={"nvidia.com/gpu": 1}))
    with pytest.raises(SharingError, match="does not support MIG"):
        make_gpus("n", T4, 1, [MigPlacement("1g.5gb", 0)])


def test_uuids_are_stable_and_distinct() -> None:
    a = make_gpus("node-1", T4, 2)
    b = make_gpus("node-1", T4, 2)
    c = make_gpus("node-2", T4, 2)
    assert [g.uuid for g in a] == [g.uuid for g in b]
    assert len({g.uuid for g in (*a, *c)}) == 4
    assert a[0].uuid.startswith("GPU-")
