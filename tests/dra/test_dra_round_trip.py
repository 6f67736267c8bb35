"""The node agent's ResourceSlices read back by the manifest reader: what ``--dra`` publishes for a machine is what
``gpufleet plan`` plans on.

The slices come from the agent's own builder (gpufleet.node.dra_slices) for the fake machines of tests/node; they are
dumped as YAML beside Node manifests, the DeviceClasses of NVIDIA's chart (examples/dra/deviceclasses.yaml) and
pods with claims, then loaded with the project's manifest loader, as a user's ``kubectl get -o yaml`` would be.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpufleet.api.dra_parse import MAX_DEVICES_PER_SLICE
from gpufleet.api.manifests import Manifests, load_manifests
from gpufleet.cli.main import app
from gpufleet.cluster.devices import GpuSlot
from gpufleet.cluster.state import ClusterState
from gpufleet.gpu.mig import MigPlacement, enumerate_maximal_layouts, geometry_for, resource_name_for_profile
from gpufleet.node.dra_slices import DRIVER, build_slices
from gpufleet.node.nvml_fake import FakeMachineSpec, load_machine_spec
from gpufleet.scheduling.placement.dra import slot_key
from tests.node.machines import MIG_MIXED, WHOLE_8, write_machine

JsonDict = dict[str, Any]
DeviceKey = tuple[str, str, str]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "dra"
runner = CliRunner()
MIB = 2**20

# 20 A100s cut into seven 1g.10gb each: 140 MIG devices, published as two slices of one pool.
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

# Claims as users write them for NVIDIA's driver, each pinning down where the round trip must land.
CLAIMS = """\
apiVersion: v1
kind: Namespace
metadata: {name: ml}
---
# Two whole A100s of at least 80 GiB: the GPU class, a product-name selector and a capacity selector.
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: two-a100, namespace: ml}
spec:
  spec:
    devices:
      requests:
      - name: gpus
        exactly:
          deviceClassName: gpu.nvidia.com
          count: 2
          selectors:
          - cel: {expression: "device.attributes['gpu.nvidia.com'].productName.matches('A100')"}
          - cel: {expression: "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) >= 0"}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: mig-3g, namespace: ml}
spec:
  spec:
    devices:
      requests:
      - name: mig
        exactly:
          deviceClassName: mig.nvidia.com
          selectors:
          - cel: {expression: "device.attributes['gpu.nvidia.com'].profile == '3g.40gb'"}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: mig-1g-pair, namespace: ml}
spec:
  spec:
    devices:
      requests:
      - name: mig
        exactly:
          deviceClassName: mig.nvidia.com
          count: 2
          selectors:
          - cel: {expression: "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"}
---
# One GPU named by the UUID the agent published for it: the uuid attribute must survive the trip.
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: pinned, namespace: ml}
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.nvidia.com
        selectors:
        - cel: {expression: "device.attributes['gpu.nvidia.com'].uuid == '@PINNED_UUID@'"}
"""


def _pod(name: str, claim: str, *, template: bool = True) -> JsonDict:
    ref = {"name": "c", "resourceClaimTemplateName" if template else "resourceClaimName": claim}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"resourceClaims": [ref],
                     "containers": [{"name": "main", "image": "busybox",
                                     "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                                                   "claims": [{"name": "c"}]}}]}}


PODS = [_pod("trainer", "two-a100"), _pod("big-mig", "mig-3g"), _pod("small-migs", "mig-1g-pair"),
        _pod("pinned", "pinned", template=False)]


def _node(name: str) -> JsonDict:
    """A Node as a DRA node shows it: no nvidia.com/gpu in its allocatable (its GPUs are in the slices)."""
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"capacity": resources, "allocatable": resources,
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def _machine(folder: Path, text: str, name: str) -> FakeMachineSpec:
    return load_machine_spec(str(write_machine(folder, text, name)))


def _write_input(folder: Path, specs: Sequence[FakeMachineSpec], slices: Sequence[JsonDict],
                 extra: str = "") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "nodes.yaml").write_text(yaml.safe_dump_all([_node(s.node_name) for s in specs]), encoding="utf-8")
    (folder / "slices.yaml").write_text(yaml.safe_dump_all(list(slices)), encoding="utf-8")
    # NVIDIA's chart's classes, read from the example rather than copied into this file
    (folder / "deviceclasses.yaml").write_text((EXAMPLES / "deviceclasses.yaml").read_text(encoding="utf-8"),
                                               encoding="utf-8")
    if extra:
        (folder / "workloads.yaml").write_text(extra, encoding="utf-8")


def _published(slices: Sequence[JsonDict]) -> dict[DeviceKey, JsonDict]:
    """Every device the slices publish, by (driver, pool, device name)."""
    out: dict[DeviceKey, JsonDict] = {}
    for s in slices:
        spec = s["spec"]
        for d in spec["devices"]:
            key = (spec["driver"], spec["pool"]["name"], d["name"])
            assert key not in out
            out[key] = d
    return out


def _attr(device: JsonDict, name: str) -> Any:
    [value] = device["attributes"][name].values()
    return value


def _memory_mib(device: JsonDict) -> int:
    text = device["capacity"]["memory"]["value"]
    for suffix, factor in (("Ti", 2**20), ("Gi", 2**10), ("Mi", 1)):
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * factor
    return int(text) // MIB


def _slots(manifests: Manifests) -> dict[DeviceKey, tuple[str, GpuSlot, int | None]]:
    """Every DRA device of the cluster state: (node, its GPU slot, MIG instance index or None), by DRA key."""
    out: dict[DeviceKey, tuple[str, GpuSlot, int | None]] = {}
    for ns in ClusterState.from_nodes(manifests.nodes).nodes.values():
        for gpu in ns.gpus:
            keys = [(slot_key(gpu), None)] if gpu.mode == "whole" else \
                [(slot_key(gpu, m), k) for k, m in enumerate(gpu.mig)]
            for key, index in keys:
                assert key is not None, f"{ns.name}: a GPU slot without DRA identity"
                assert key not in out, f"{key} is two slots"
                out[key] = (ns.name, gpu, index)
    return out


def _assert_round_trip(specs: Sequence[FakeMachineSpec], slices: Sequence[JsonDict], manifests: Manifests) -> None:
    """Every published device is exactly one GPU slot (whole) or MIG slot, with the agent's identity, model,
    memory, UUID and profile; nothing else."""
    published = _published(slices)
    slots = _slots(manifests)
    assert set(slots) == set(published)
    models = {s.node_name: s.model.key for s in specs}
    # what NVML (the fake machine) said of each GPU and MIG device, by UUID: the far end of the trip
    nvml_gpus = {g.uuid: g for s in specs for g in s.machine.gpus}
    nvml_migs = {m.uuid: m for g in nvml_gpus.values() for m in g.mig}
    for key, device in published.items():
        node, gpu, index = slots[key]
        assert key[0] == DRIVER and key[1] == node  # one pool per node, named after it
        assert (gpu.dra_driver, gpu.dra_pool) == (DRIVER, node)
        assert gpu.model == models[node]
        if index is None:
            assert _attr(device, "type") == "gpu" and gpu.mode == "whole" and gpu.dra_device == key[2]
            assert gpu.device_id == _attr(device, "uuid") and gpu.memory_mib == _memory_mib(device)
            assert gpu.memory_mib == nvml_gpus[gpu.device_id].memory_mib
        else:
            mig = gpu.mig[index]
            assert _attr(device, "type") == "mig" and gpu.mode == "mig" and gpu.dra_device is None
            assert gpu.device_id == _attr(device, "parentUUID") and mig.device_id == _attr(device, "uuid")
            assert mig.placement.profile == _attr(device, "profile")
            assert mig.resource == resource_name_for_profile(_attr(device, "profile"))
            assert mig.memory_mib == _memory_mib(device) == nvml_migs[mig.device_id].memory_mib
            assert (mig.placement.profile, mig.placement.start) == (nvml_migs[mig.device_id].profile,
                                                                    nvml_migs[mig.device_id].start)
            # the placement start is in the name (..-<start>) and in the memory slices the device takes
            start = int(key[2].rsplit("-", 1)[1])
            assert mig.placement.start == start
            assert f"memorySlice{start}" in device["capacity"]


def _plan(folder: Path) -> dict[str, Any]:
    got = runner.invoke(app, ["plan", str(folder), "--until-stable", "-o", "json"])
    assert got.exit_code == 0, got.output
    doc: dict[str, Any] = json.loads(got.stdout)
    return doc


def _placed(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["pod"]: p for c in doc["cycles"] for a in c["admitted"] for p in a["pods"]}


# ---- whole GPUs and MIG devices, then planned --------------------------------------------------------------------

def test_published_gpus_and_mig_devices_become_gpu_slots_and_are_planned(tmp_path: Path) -> None:
    whole = _machine(tmp_path, WHOLE_8, "whole.yaml")
    mig = _machine(tmp_path, MIG_MIXED, "mig.yaml")
    slices = build_slices(whole.machine, whole.node_name) + build_slices(mig.machine, mig.node_name, generation=4)
    pinned = whole.machine.gpus[5]
    folder = tmp_path / "input"
    _write_input(folder, [whole, mig], slices,
                 CLAIMS.replace("@PINNED_UUID@", pinned.uuid) + "---\n" + yaml.safe_dump_all(PODS))
    manifests = load_manifests([str(folder)])
    assert not manifests.problems.errors, manifests.problems.errors
    _assert_round_trip([whole, mig], slices, manifests)
    by_node = {n.name: n for n in manifests.nodes}
    assert len(by_node[whole.node_name].dra_gpus) == 8 and len(by_node[mig.node_name].dra_gpus) == 2
    assert all(len(g.mig) == 4 for g in by_node[mig.node_name].dra_gpus)

    published = _published(slices)
    placed = _placed(_plan(folder))
    assert set(placed) == {"ml/trainer", "ml/big-mig", "ml/small-migs", "ml/pinned"}
    taken: list[DeviceKey] = []
    for pod in placed.values():
        keys = [(c["driver"], c["pool"], c["device"]) for c in pod["claims"]]
        assert all(k in published and k[1] == pod["node"] for k in keys), pod
        # the device ids placement hands the pod are the UUIDs the agent published for the claimed devices
        assert pod["devices"] == [_attr(published[k], "uuid") for k in keys]
        taken += keys
    assert len(taken) == len(set(taken)) == 2 + 1 + 2 + 1  # no device given twice

    trainer = placed["ml/trainer"]
    assert trainer["node"] == whole.node_name and [c["request"] for c in trainer["claims"]] == ["gpus", "gpus"]
    [big] = placed["ml/big-mig"]["claims"]
    assert placed["ml/big-mig"]["node"] == mig.node_name
    assert _attr(published[(DRIVER, mig.node_name, big["device"])], "profile") == "3g.40gb"
    small = placed["ml/small-migs"]["claims"]
    assert [_attr(published[(DRIVER, mig.node_name, c["device"])], "profile") for c in small] == ["1g.10gb"] * 2
    [one] = placed["ml/pinned"]["claims"]
    assert one["claim"] == "ml/pinned" and (one["pool"], one["device"]) == (whole.node_name, "gpu-5")
    assert placed["ml/pinned"]["devices"] == [pinned.uuid]


# ---- pools of several slices -----------------------------------------------------------------------------------

def test_a_pool_split_into_several_slices_reads_back_whole(tmp_path: Path) -> None:
    big = _machine(tmp_path, MIG_140, "big.yaml")
    slices = build_slices(big.machine, big.node_name, generation=7)
    assert len(slices) == 2 and len(slices[0]["spec"]["devices"]) == MAX_DEVICES_PER_SLICE
    _write_input(tmp_path / "input", [big], slices)
    manifests = load_manifests([str(tmp_path / "input")])
    assert not [w for w in manifests.problems.warnings if "pool" in w.message], manifests.problems.warnings
    _assert_round_trip([big], slices, manifests)
    [node] = manifests.nodes
    assert len(node.dra_gpus) == 20 and sum(len(g.mig) for g in node.dra_gpus) == 140


def test_a_pool_missing_one_slice_gives_no_devices_and_says_so(tmp_path: Path) -> None:
    big = _machine(tmp_path, MIG_140, "big.yaml")
    first, _second = build_slices(big.machine, big.node_name, generation=7)
    _write_input(tmp_path / "input", [big], [first])
    manifests = load_manifests([str(tmp_path / "input")])
    [node] = manifests.nodes
    assert node.dra_gpus == ()
    assert ClusterState.from_nodes(manifests.nodes).nodes[big.node_name].gpus == []
    said = [w for w in manifests.problems.warnings if w.kind == "ResourceSlice"]
    assert len(said) == 1
    assert f"pool {big.node_name} of driver {DRIVER} is incomplete" in said[0].message
    assert "resourceSliceCount says 2" in said[0].message and said[0].name == first["metadata"]["name"]


# ---- any valid MIG layout --------------------------------------------------------------------------------------

_MIG_MODELS = ("A100-SXM4-80GB", "A30", "H100-SXM5-80GB", "H200")


def _layouts(model: str) -> list[tuple[MigPlacement, ...]]:
    geometry = geometry_for(model)
    assert geometry is not None
    return enumerate_maximal_layouts(geometry)


_LAYOUTS = {model: _layouts(model) for model in _MIG_MODELS}


@st.composite
def _mig_machines(draw: st.DrawFn) -> tuple[str, int, tuple[MigPlacement, ...]]:
    """(model, GPUs, layout): any part of one of the model's maximal layouts (every part of a valid layout is
    valid), so every profile and placement start the project knows can come up."""
    model = draw(st.sampled_from(_MIG_MODELS))
    layout = draw(st.sampled_from(_LAYOUTS[model]))
    kept = draw(st.sets(st.integers(0, len(layout) - 1), min_size=1))
    return model, draw(st.integers(1, 3)), tuple(p for i, p in enumerate(layout) if i in kept)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mig_machines())
def test_every_published_mig_device_is_read_back_once_with_its_profile(
        drawn: tuple[str, int, tuple[MigPlacement, ...]]) -> None:
    model, count, layout = drawn
    text = f"""\
apiVersion: gpufleet.io/v1alpha1
kind: NodePool
metadata: {{name: m}}
spec:
  count: 1
  namePrefix: m
  gpu: {{model: {model}, count: {count}, migLayout: "{','.join(f'{p.profile}@{p.start}' for p in layout)}"}}
  cpu: "64"
  memory: 512Gi
  sharing: {{migStrategy: mixed}}
"""
    # a folder per example: hypothesis runs the body many times within one test, which tmp_path would share
    with tempfile.TemporaryDirectory() as where:
        folder = Path(where)
        spec = _machine(folder, text, "machine.yaml")
        slices = build_slices(spec.machine, spec.node_name)
        _write_input(folder / "input", [spec], slices)
        manifests = load_manifests([str(folder / "input")])
    assert not manifests.problems.errors, manifests.problems.errors
    _assert_round_trip([spec], slices, manifests)
    [node] = manifests.nodes
    gpus = node.dra_gpus
    assert [g.uuid for g in gpus] == [g.uuid for g in spec.machine.gpus]
    for dra, gpu in zip(gpus, spec.machine.gpus, strict=True):
        assert dra.device is None  # a MIG-mode GPU is offered as its MIG devices alone
        assert sorted((m.profile, m.start, m.uuid) for m in dra.mig) == \
            sorted((m.profile, m.start, m.uuid) for m in gpu.mig)
