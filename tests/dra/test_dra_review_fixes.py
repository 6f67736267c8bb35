"""Defects a review found in the DRA code, each pinned: the selector cache never gives a device another device's
answer, a claim's results name the firstAvailable entry the devices meet, a claim with many entries stays cheap,
a class's implicit extended resource is placed, and live leaves extended-resource pods to device plugins."""

from __future__ import annotations

from fractions import Fraction

import pytest

from gpufleet.api.dra_need import ClaimRequest, DraChoice, DraNeed
from gpufleet.api.dra_objects import (
    ClaimSpec,
    Device,
    DeviceAttribute,
    DeviceClass,
    DeviceRequest,
    DeviceSelection,
    DeviceSubRequest,
    ResourceClaimTemplate,
)
from gpufleet.api.manifests import Manifests
from gpufleet.api.objects import GpuDemand, ObjectMeta, Pod, PodResourceClaim, PodTemplate
from gpufleet.cluster.build import build_workloads
from gpufleet.cluster.dra_claims import MAX_CHOICES, DraCatalog, PublishedDevice, resolve_pod_claims
from gpufleet.cluster.dra_selectors import matches
from gpufleet.scheduling.placement.dra_results import claim_results

DRIVER = "gpu.nvidia.com"


def _device(name: str, product: str) -> PublishedDevice:
    attributes = {f"{DRIVER}/productName": DeviceAttribute("string", product),
                  f"{DRIVER}/type": DeviceAttribute("string", "gpu")}
    if product == "H100":
        attributes[f"{DRIVER}/profile"] = DeviceAttribute("string", "none")
    return PublishedDevice("n1", DRIVER, "n1", Device(name, attributes, {f"{DRIVER}/memory": Fraction(80)}), "whole")


@pytest.mark.parametrize("expression", [
    'device.attributes["gpu.nvidia.com"].exists(k, k == "profile")',
    'device.attributes["gpu.nvidia.com"].size() == 3',
    'device .attributes["gpu.nvidia.com"].productName == "H100"',
    'device["attributes"]["gpu.nvidia.com"]["productName"] == "H100"',
    '(device).attributes["gpu.nvidia.com"].productName == "H100"',
    'device.\nattributes["gpu.nvidia.com"].productName == "H100"',
    '"H100" in device.attributes["gpu.nvidia.com"].map(k, device.attributes["gpu.nvidia.com"][k])',
])
def test_the_selector_cache_answers_each_device_as_cel_does(expression: str) -> None:
    from gpufleet.cluster.dra_claims import _activation

    devices = [_device("a", "H100"), _device("b", "A100")]
    truth = [d.device.name for d in devices if matches(expression, _activation(d))]
    found, _ = DraCatalog(devices=devices).matching([expression])
    assert [d.device.name for d in found] == truth == ["a"]


def test_results_name_the_entry_the_devices_meet() -> None:
    mig = DraChoice(GpuDemand("mig", 1, "nvidia.com/mig-1g.10gb", mig_profile="1g.10gb"), (),
                    (ClaimRequest("ns/c", "dev/mig", 1),))
    whole = DraChoice(GpuDemand("gpu", 1, "nvidia.com/gpu"), (), (ClaimRequest("ns/c", "dev/whole", 1),))
    need = DraNeed(("ns/c",), (mig, whole))
    [result] = claim_results(need, [(DRIVER, "n1", "gpu-0")], ("whole", None))
    assert result.request == "dev/whole"
    [result] = claim_results(need, [(DRIVER, "n1", "gpu-0-mig-1g10gb-19-0")], ("mig", "1g.10gb"))
    assert result.request == "dev/mig"


def test_many_first_available_entries_stay_cheap() -> None:
    # 8 requests of 8 entries, each entry its own device: 8**8 combinations, none of which plans (several sets).
    devices = [_device(f"gpu-{i}", f"M{i}") for i in range(64)]
    classes = {DRIVER: DeviceClass(ObjectMeta(DRIVER), "resource.k8s.io/v1", ())}
    requests = tuple(DeviceRequest(f"r{r}", first_available=tuple(
        DeviceSubRequest(f"e{e}", DeviceSelection(DRIVER, (
            f"device.attributes['gpu.nvidia.com'].productName == 'M{r * 8 + e}'",))) for e in range(8)))
        for r in range(8))
    template = ResourceClaimTemplate(ObjectMeta("t", "ns"), "resource.k8s.io/v1", ClaimSpec(requests))
    catalog = DraCatalog(classes=classes, templates={"ns/t": template}, devices=devices)
    need = resolve_pod_claims("ns", "p", (PodResourceClaim("c", resource_claim_template_name="t"),), catalog)
    assert need.problem is not None and "select different devices" in need.problem
    assert len(need.choices) <= MAX_CHOICES


def test_live_leaves_extended_resource_pods_to_device_plugins() -> None:
    from gpufleet.api.dra_objects import DraGpu, ResourcePool, ResourceSlice
    from gpufleet.api.objects import GPU, Node

    node = Node(ObjectMeta("n1"), {}, {"cpu": 64000})
    node.dra_gpus = (DraGpu(DRIVER, "n1", "gpu-0", "GPU-0", "H100-SXM5-80GB", 81559, 0),)
    device = Device("gpu-0", {f"{DRIVER}/type": DeviceAttribute("string", "gpu")}, {})
    slices = [ResourceSlice(ObjectMeta("s"), "resource.k8s.io/v1", DRIVER, ResourcePool("n1", 1, 1), "nodeName",
                            "n1", (device,))]
    cls = DeviceClass(ObjectMeta(DRIVER), "resource.k8s.io/v1", ("device.driver == 'gpu.nvidia.com'",),
                      extended_resource_name=GPU)
    pod = Pod(ObjectMeta("p", "ns"), PodTemplate({}, {}, {GPU: 1}, {GPU: 1}, gpu=GpuDemand("gpu", 1, GPU)))

    def need(create_missing: bool) -> DraNeed | None:
        m = Manifests(pods=[pod], nodes=[node], resource_slices=slices, device_classes=[cls])
        [w] = build_workloads(m, create_missing=create_missing)
        return w.pods[0].template.dra

    planned = need(True)
    assert planned is not None and [c.plugin for c in planned.choices] == [True, False]
    assert need(False) is None  # live: no claim is created for it, so it is not placed on DRA devices
