"""DRA claims placed by gpufleet's placement: CEL selectors on devices, claims resolved into demands with the devices
allowed, firstAvailable in the user's order, matchAttribute groups, and what is refused with a reason."""

from __future__ import annotations

import random
from dataclasses import replace
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.api.dra_objects import (
    ClaimSpec,
    Device,
    DeviceAttribute,
    DeviceClass,
    DeviceConstraint,
    DeviceRequest,
    DeviceSelection,
    DeviceSubRequest,
    DraGpu,
    DraMigDevice,
    ResourceClaimTemplate,
)
from gpufleet.api.objects import CPU, MEMORY, PODS, ObjectMeta, PodResourceClaim
from gpufleet.cluster.dra_claims import DraCatalog, PublishedDevice, generated_claim_name, resolve_pod_claims
from gpufleet.cluster.dra_devices import dra_gpu_slots
from gpufleet.cluster.dra_selectors import SelectorError, device_activation, matches, parse_semver
from gpufleet.cluster.state import ClusterState, NodeState, device_resources
from gpufleet.scheduling.placement import make_placer
from gpufleet.scheduling.placement.dra import slot_key
from gpufleet.scheduling.types import PodRequest
from tests.placement.placement_helpers import pod

DRIVER = "gpu.nvidia.com"
GIB = 2**30
GPU_CLASS = DeviceClass(ObjectMeta("gpu.nvidia.com"), "resource.k8s.io/v1",
                        ("device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",))
MIG_CLASS = DeviceClass(ObjectMeta("mig.nvidia.com"), "resource.k8s.io/v1",
                        ("device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'",))


# ---- selectors -------------------------------------------------------------------------------------------------

def _h100_activation() -> dict[str, object]:
    return device_activation(DRIVER, {"type": "gpu", "productName": "NVIDIA H100 80GB HBM3",
                                      "driverVersion": parse_semver("550.54.15"),
                                      "resource.kubernetes.io/pcieRoot": "pci0000:00"},
                             {"memory": Fraction(80 * GIB)})


@pytest.mark.parametrize(("expression", "expected"), [
    ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0", True),
    ("device.capacity['gpu.nvidia.com'].memory.isLessThan(quantity('80Gi'))", False),
    ("device.attributes['gpu.nvidia.com'].driverVersion.compareTo(semver('550.100.0')) < 0", True),
    ("device.attributes['gpu.nvidia.com'].driverVersion.major() == 550", True),
    ("device.attributes['resource.kubernetes.io'].pcieRoot == 'pci0000:00'", True),
    ("!('x' in device.attributes['other.example.com'])", True),  # an unknown domain reads as an empty map
    ("device.attributes['gpu.nvidia.com'].productName.matches('A100')", False),
])
def test_selectors_evaluate_as_kubernetes_defines_them(expression: str, expected: bool) -> None:
    assert matches(expression, _h100_activation()) is expected


@pytest.mark.parametrize(("expression", "why"), [
    ("device.attributes['gpu.nvidia.com'].nosuch == 1", "evaluating it failed"),
    ("device.driver", "not a boolean"),
    ("device.driver ==", "does not compile"),
    ("cel.bind(x, 1, x == 1)", "cel.bind"),
])
def test_selector_failures_say_why(expression: str, why: str) -> None:
    with pytest.raises(SelectorError, match=why):
        matches(expression, _h100_activation())


# ---- a small DRA cluster ---------------------------------------------------------------------------------------

def _attr(kind: str, value: object) -> DeviceAttribute:
    return DeviceAttribute(kind, value)  # type: ignore[arg-type]


def _gpu_device(name: str, product: str, memory_gib: int, root: str) -> Device:
    return Device(name, {f"{DRIVER}/type": _attr("string", "gpu"), f"{DRIVER}/productName": _attr("string", product),
                         "resource.kubernetes.io/pcieRoot": _attr("string", root)},
                  {f"{DRIVER}/memory": Fraction(memory_gib * GIB)})


def _mig_device(name: str, profile: str) -> Device:
    return Device(name, {f"{DRIVER}/type": _attr("string", "mig"), f"{DRIVER}/profile": _attr("string", profile)},
                  {f"{DRIVER}/memory": Fraction(10 * GIB)})


def _node(name: str, gpus: list[DraGpu]) -> NodeState:
    slots = dra_gpu_slots(gpus)  # allocatable as node_state_from gives a DRA node: its devices as resources
    return NodeState(name=name, labels={"kubernetes.io/hostname": name}, taints=(),
                     allocatable={CPU: 64000, MEMORY: 512 * GIB, PODS: 110, **device_resources(slots)}, used={},
                     gpus=slots, gpu_model=gpus[0].model)


def _cluster_and_catalog(h100_nodes: int = 1, a100_nodes: int = 1) -> tuple[ClusterState, DraCatalog]:
    nodes: list[NodeState] = []
    published: list[PublishedDevice] = []
    for n in range(h100_nodes):
        name = f"h100-{n}"
        gpus = [DraGpu(DRIVER, name, f"gpu-{i}", f"GPU-{name}-{i}", "H100-SXM5-80GB", 81559, i) for i in range(4)]
        nodes.append(_node(name, gpus))
        published += [PublishedDevice(name, DRIVER, name, _gpu_device(f"gpu-{i}", "NVIDIA H100 80GB HBM3", 80,
                                                                      f"pci{i // 2}"), "whole") for i in range(4)]
    for n in range(a100_nodes):
        name = f"a100-{n}"
        migs = tuple(DraMigDevice(f"gpu-0-mig-1g10gb-19-{s}", "1g.10gb", s, 9728, 1, f"MIG-{name}-{s}")
                     for s in range(7))
        nodes.append(_node(name, [DraGpu(DRIVER, name, None, f"GPU-{name}", "A100-SXM4-80GB", 81920, 0, mig=migs)]))
        published += [PublishedDevice(name, DRIVER, name, _mig_device(m.device, "1g.10gb"), "mig", "1g.10gb")
                      for m in migs]
    catalog = DraCatalog(classes={"gpu.nvidia.com": GPU_CLASS, "mig.nvidia.com": MIG_CLASS}, devices=published)
    return ClusterState(nodes), catalog


def _template(name: str, *requests: DeviceRequest, constraints: tuple[DeviceConstraint, ...] = ()
              ) -> ResourceClaimTemplate:
    return ResourceClaimTemplate(ObjectMeta(name, "ml"), "resource.k8s.io/v1", ClaimSpec(requests, constraints))


def _gpus(count: int, *selectors: str, name: str = "gpu") -> DeviceRequest:
    return DeviceRequest(name, exactly=DeviceSelection("gpu.nvidia.com", selectors, count=count))


def _claimed_pod(catalog: DraCatalog, key: str, template: str) -> PodRequest:
    namespace, name = key.split("/")
    refs = (PodResourceClaim("gpus", resource_claim_template_name=template),)
    need = resolve_pod_claims(namespace, name, refs, catalog)
    base = pod(key)
    gpu = need.choices[0].demand if need.choices else base.template.gpu
    return replace(base, template=replace(base.template, resource_claims=refs, dra=need, gpu=gpu))


def _held_keys(cluster: ClusterState, key: str) -> list[tuple[str, str, str]]:
    placed = cluster.placements[key]
    node = cluster.nodes[placed.node]
    out = []
    for grant in placed.grants:
        gpu = node.gpus[grant.gpu]
        found = slot_key(gpu, gpu.mig[grant.slot] if grant.kind == "mig" else None)
        assert found is not None
        out.append(found)
    return out


# ---- resolving and placing -------------------------------------------------------------------------------------

def test_a_template_claim_becomes_whole_gpus_on_the_devices_its_selector_allows() -> None:
    cluster, catalog = _cluster_and_catalog()
    catalog.templates = {"ml/two": _template("two", _gpus(
        2, "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"))}
    p = _claimed_pod(catalog, "ml/train", "two")
    assert p.template.dra is not None and p.template.dra.problem is None
    assert p.template.gpu.kind == "gpu" and p.template.gpu.count == 2
    placed = make_placer(cluster, "gpufleet", random.Random(0)).place([p])
    assert placed is not None and placed[0].node == "h100-0"
    assert all(k[1] == "h100-0" for k in _held_keys(cluster, "ml/train"))
    # The claim's name is the resourceclaim controller's: <pod>-<claim>-<five letters>, reproducible.
    name = p.template.dra.claims[0].split("/")[1]
    assert name.startswith("train-gpus-") and len(name) == len("train-gpus-") + 5
    assert name == generated_claim_name("train", "gpus", "ml/train/gpus")


def test_mig_claims_take_mig_devices_and_never_collide() -> None:
    cluster, catalog = _cluster_and_catalog(h100_nodes=0)
    catalog.templates = {"ml/mig": _template("mig", DeviceRequest(
        "mig", exactly=DeviceSelection("mig.nvidia.com",
                                       ("device.attributes['gpu.nvidia.com'].profile == '1g.10gb'",))))}
    placer = make_placer(cluster, "gpufleet", random.Random(0))
    held: list[tuple[str, str, str]] = []
    for i in range(7):
        p = _claimed_pod(catalog, f"ml/inf-{i}", "mig")
        assert p.template.gpu.kind == "mig" and p.template.gpu.mig_profile == "1g.10gb"
        assert placer.place([p]) is not None
        held += _held_keys(cluster, f"ml/inf-{i}")
    assert len(set(held)) == 7
    assert placer.place([_claimed_pod(catalog, "ml/inf-7", "mig")]) is None


def test_first_available_takes_the_users_first_choice_that_fits_anywhere() -> None:
    cluster, catalog = _cluster_and_catalog()
    first = DeviceSubRequest("h100", DeviceSelection("gpu.nvidia.com", (
        "device.attributes['gpu.nvidia.com'].productName.matches('H100')",), count=4))
    second = DeviceSubRequest("mig", DeviceSelection("mig.nvidia.com", count=1))
    catalog.templates = {"ml/pref": _template("pref", DeviceRequest("gpu", first_available=(first, second)))}
    placer = make_placer(cluster, "gpufleet", random.Random(0))
    a = _claimed_pod(catalog, "ml/a", "pref")
    assert [c.requests[0].request for c in a.template.dra.choices] == ["gpu/h100", "gpu/mig"]  # type: ignore[union-attr]
    assert placer.place([a]) is not None and cluster.placements["ml/a"].node == "h100-0"
    # The H100s are taken: the next pod gets its second choice.
    assert placer.place([_claimed_pod(catalog, "ml/b", "pref")]) is not None
    assert cluster.placements["ml/b"].node == "a100-0"


def test_match_attribute_keeps_a_pods_devices_under_one_value() -> None:
    cluster, catalog = _cluster_and_catalog(a100_nodes=0)
    catalog.templates = {"ml/pair": _template("pair", _gpus(2), constraints=(
        DeviceConstraint((), "resource.kubernetes.io/pcieRoot"),))}
    placer = make_placer(cluster, "gpufleet", random.Random(0))
    one = _claimed_pod(catalog, "ml/one", "pair")
    assert len(one.template.dra.choices[0].groups) == 2  # type: ignore[union-attr]
    for key in ("ml/one", "ml/two"):
        assert placer.place([_claimed_pod(catalog, key, "pair")]) is not None
        held = _held_keys(cluster, key)
        roots = {next(d for d in catalog.devices if d.key == k).device.attributes[
            "resource.kubernetes.io/pcieRoot"].value for k in held}
        assert len(roots) == 1


@pytest.mark.parametrize(("request_", "words"), [
    (DeviceRequest("admin", exactly=DeviceSelection("gpu.nvidia.com", admin_access=True)), "adminAccess"),
    (DeviceRequest("nope", exactly=DeviceSelection("no-such-class")), "DeviceClass no-such-class"),
    (_gpus(1, "device.attributes['gpu.nvidia.com'].productName == 'B200'", name="b200"), "no device in the cluster"),
])
def test_what_cannot_be_planned_stays_pending_naming_the_claim_and_request(request_: DeviceRequest,
                                                                           words: str) -> None:
    cluster, catalog = _cluster_and_catalog()
    catalog.templates = {"ml/bad": _template("bad", request_)}
    p = _claimed_pod(catalog, "ml/bad-pod", "bad")
    assert p.template.dra is not None and p.template.dra.problem is not None
    assert words in p.template.dra.problem and f"request {request_.name}" in p.template.dra.problem
    placer = make_placer(cluster, "gpufleet", random.Random(0))
    assert placer.place([p]) is None
    assert words in placer.explain(p)


def test_allocation_mode_all_takes_every_matching_device_of_one_free_node() -> None:
    cluster, catalog = _cluster_and_catalog(h100_nodes=2, a100_nodes=0)
    catalog.templates = {"ml/all": _template("all", DeviceRequest(
        "every", exactly=DeviceSelection("gpu.nvidia.com", allocation_mode="All")))}
    placer = make_placer(cluster, "gpufleet", random.Random(0))
    # A one-GPU pod on h100-1 first: that node's GPUs are no longer all free.
    catalog.templates["ml/one"] = _template("one", _gpus(1))
    assert placer.place([_claimed_pod(catalog, "ml/single", "one")]) is not None
    busy = cluster.placements["ml/single"].node
    first = _claimed_pod(catalog, "ml/all-1", "all")
    assert first.template.gpu.count == 4
    assert placer.place([first]) is not None
    held = _held_keys(cluster, "ml/all-1")
    assert cluster.placements["ml/all-1"].node != busy and len(set(held)) == 4 and {k[1] for k in held} == {
        cluster.placements["ml/all-1"].node}
    # No node has all its GPUs free any more.
    assert placer.place([_claimed_pod(catalog, "ml/all-2", "all")]) is None


def test_a_missing_template_is_named() -> None:
    _, catalog = _cluster_and_catalog()
    need = resolve_pod_claims("ml", "p", (PodResourceClaim("gpus", resource_claim_template_name="gone"),), catalog)
    assert need.problem is not None and "ResourceClaimTemplate ml/gone is not in the input" in need.problem


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["one", "two", "pair", "spread", "mig"]), st.booleans()), min_size=1,
                max_size=20))
def test_claimed_devices_are_never_shared_and_always_allowed(pods: list[tuple[str, bool]]) -> None:
    cluster, catalog = _cluster_and_catalog(h100_nodes=2, a100_nodes=1)
    catalog.templates = {
        "ml/one": _template("one", _gpus(1)), "ml/two": _template("two", _gpus(2)),
        "ml/pair": _template("pair", _gpus(2), constraints=(DeviceConstraint((), "resource.kubernetes.io/pcieRoot"),)),
        "ml/spread": _template("spread", _gpus(2), constraints=(
            DeviceConstraint((), distinct_attribute="resource.kubernetes.io/pcieRoot"),)),
        "ml/mig": _template("mig", DeviceRequest("m", exactly=DeviceSelection("mig.nvidia.com")))}
    placer = make_placer(cluster, "gpufleet", random.Random(0))
    live: list[str] = []
    for i, (template, release) in enumerate(pods):
        key = f"ml/p{i}"
        p = _claimed_pod(catalog, key, template)
        if placer.place([p]) is not None:
            live.append(key)
            held = _held_keys(cluster, key)
            # Allowed: one group's devices, or (no group named: the claim takes any DRA device of its kind) DRA
            # devices of the demand's kind.
            groups = p.template.dra.choices[0].groups  # type: ignore[union-attr]
            kinds = {(d.kind, d.profile) for d in catalog.devices if d.key in set(held)}
            assert any(set(held) <= g for g in groups) if groups else len(kinds) == 1
            roots = [next(d for d in catalog.devices if d.key == k).device.attributes[
                "resource.kubernetes.io/pcieRoot"].value for k in held if k[2].startswith("gpu-") and "mig" not in k[2]]
            if template == "pair":
                assert len(set(roots)) == 1
            if template == "spread":
                assert len(set(roots)) == len(roots) == 2
        if release and live:
            cluster.release(live.pop(0))
    every = [k for key in live for k in _held_keys(cluster, key)]
    assert len(every) == len(set(every))


def test_distinct_attribute_spreads_a_pods_devices_over_its_values() -> None:
    cluster, catalog = _cluster_and_catalog(h100_nodes=1, a100_nodes=0)
    spread = (DeviceConstraint((), distinct_attribute="resource.kubernetes.io/pcieRoot"),)
    catalog.templates = {"ml/spread": _template("spread", _gpus(2), constraints=spread),
                         "ml/three": _template("three", _gpus(3), constraints=spread)}
    placer = make_placer(cluster, "binpack", random.Random(0))
    # Four GPUs on two PCIe roots (gpu-0 and gpu-1 on pci0): binpack alone would take gpu-0 and gpu-1.
    assert placer.place([_claimed_pod(catalog, "ml/a", "spread")]) is not None
    roots = sorted(next(d for d in catalog.devices if d.key == k).device.attributes[
        "resource.kubernetes.io/pcieRoot"].value for k in _held_keys(cluster, "ml/a"))
    assert roots == ["pci0", "pci1"]
    assert placer.place([_claimed_pod(catalog, "ml/b", "spread")]) is not None  # the other two, one per root
    cluster.release("ml/a")
    cluster.release("ml/b")
    # Three devices that differ in a two-valued attribute: never plannable, said.
    p = _claimed_pod(catalog, "ml/c", "three")
    assert p.template.dra is not None and p.template.dra.problem is not None
    assert "2 distinct value(s) of resource.kubernetes.io/pcieRoot, fewer than the 3" in p.template.dra.problem


def test_distinct_attribute_waits_when_the_free_devices_share_a_value() -> None:
    cluster, catalog = _cluster_and_catalog(h100_nodes=1, a100_nodes=0)
    catalog.templates = {"ml/one": _template("one", _gpus(1)), "ml/spread": _template("spread", _gpus(2), constraints=(
        DeviceConstraint((), distinct_attribute="resource.kubernetes.io/pcieRoot"),))}
    placer = make_placer(cluster, "binpack", random.Random(0))
    for key in ("ml/x", "ml/y"):  # binpack fills gpu-0 and gpu-1: pci0 is full, gpu-2 and gpu-3 share pci1
        assert placer.place([_claimed_pod(catalog, key, "one")]) is not None
    held = {k for key in ("ml/x", "ml/y") for k in _held_keys(cluster, key)}
    assert held == {(DRIVER, "h100-0", "gpu-0"), (DRIVER, "h100-0", "gpu-1")}
    p = _claimed_pod(catalog, "ml/s", "spread")
    assert placer.place([p]) is None
    assert "too few free devices" in placer.explain(p)


def test_a_claim_selecting_a_model_is_kept_to_that_models_nodes_without_naming_devices() -> None:
    # Two H100 nodes and two nodes of whole A100s: a selector on the product covers every GPU of the H100 nodes, so
    # the choice names no devices (placement by node class, fast) and the GPU model filter keeps the pod there.
    nodes: list[NodeState] = []
    published: list[PublishedDevice] = []
    for n, (model, product) in enumerate([("H100-SXM5-80GB", "NVIDIA H100 80GB HBM3")] * 2
                                         + [("A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB")] * 2):
        name = f"node-{n}"
        nodes.append(_node(name, [DraGpu(DRIVER, name, f"gpu-{i}", f"GPU-{name}-{i}", model, 81559, i)
                                  for i in range(4)]))
        published += [PublishedDevice(name, DRIVER, name, _gpu_device(f"gpu-{i}", product, 80, f"pci{i // 2}"),
                                      "whole", model=model) for i in range(4)]
    cluster = ClusterState(nodes)
    catalog = DraCatalog(classes={"gpu.nvidia.com": GPU_CLASS}, devices=published, templates={
        "ml/h100": _template("h100", _gpus(1, "device.attributes['gpu.nvidia.com'].productName.startsWith("
                                              "'NVIDIA H100')")),
        "ml/root0": _template("root0", _gpus(1, "device.attributes['resource.kubernetes.io'].pcieRoot == 'pci0'"))})
    first = _claimed_pod(catalog, "ml/p0", "h100").template.dra
    assert first is not None and first.choices[0].groups == ()
    assert first.choices[0].demand.models == ("H100-SXM5-80GB",)
    # A selector that picks devices within nodes still names them.
    root0 = _claimed_pod(catalog, "ml/r", "root0").template.dra
    assert root0 is not None and root0.choices[0].groups and not root0.choices[0].demand.models
    placer = make_placer(cluster, "spread", random.Random(0))
    for i in range(8):
        assert placer.place([_claimed_pod(catalog, f"ml/p{i}", "h100")]) is not None
        assert cluster.placements[f"ml/p{i}"].node in ("node-0", "node-1")
    late = _claimed_pod(catalog, "ml/p8", "h100")
    assert placer.place([late]) is None  # the A100 nodes are free, and not for it
    assert all(g.is_free for n in ("node-2", "node-3") for g in cluster.nodes[n].gpus)
