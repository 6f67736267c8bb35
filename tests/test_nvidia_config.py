"""NVIDIA's configuration read as it is (issue 14 item 4): the device plugin's ConfigMap (selected by the node label
nvidia.com/device-plugin.config), mig-parted's (nvidia.com/mig.config) and the GPU Operator's ClusterPolicy give
a GPU node without gpufleet's inventory its GPUs, MIG instances and replicas, checked against its capacity."""

from __future__ import annotations

import json
import textwrap

from gpufleet.api.errors import Problems
from gpufleet.api.manifests import load_manifest_text
from gpufleet.api.nvidia_config import (
    ClusterPolicy,
    NvidiaConfigMap,
    config_map_names,
    nvidia_config_kind,
)
from gpufleet.api.objects import Node
from gpufleet.cluster.state import ClusterState
from gpufleet.gpu.mig import check_layout, geometry_for

FILE = "cluster.yaml"

POLICY = """apiVersion: nvidia.com/v1
kind: ClusterPolicy
metadata: {name: cluster-policy}
spec:
  mig: {strategy: %s}
  devicePlugin: {config: {name: device-plugin-config, default: plain}}
  migManager: {config: {name: default-mig-parted-config}}
"""

DEVICE_PLUGIN = """apiVersion: v1
kind: ConfigMap
metadata: {name: device-plugin-config, namespace: gpu-operator}
data:
  plain: |-
    version: v1
    flags: {migStrategy: none}
  ts4: |-
    version: v1
    sharing:
      timeSlicing:
        renameByDefault: false
        failRequestsGreaterThanOne: true
        resources:
        - name: nvidia.com/gpu
          replicas: 4
"""

MIG_PARTED = """apiVersion: v1
kind: ConfigMap
metadata: {name: default-mig-parted-config, namespace: gpu-operator}
data:
  config.yaml: |
    version: v1
    mig-configs:
      all-disabled:
        - devices: all
          mig-enabled: false
      all-3g.40gb:
        - devices: all
          mig-enabled: true
          mig-devices: {"3g.40gb": 2}
      all-balanced:
        - device-filter: ["0x20B010DE", "0x20B110DE"]
          devices: all
          mig-enabled: true
          mig-devices: {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
        - device-filter: ["0x233010DE", "0x20B210DE", "0x20B510DE"]
          devices: all
          mig-enabled: true
          mig-devices: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
      half:
        - devices: [0]
          mig-enabled: true
          mig-devices: {"7g.80gb": 1}
        - devices: [1]
          mig-enabled: false
"""


def node(name: str, count: int, capacity: dict[str, int], labels: dict[str, str] | None = None,
         product: str = "NVIDIA-A100-SXM4-80GB") -> str:
    all_labels = {"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(count), **(labels or {})}
    resources = {"cpu": "64", "memory": "512Gi", **{k: str(v) for k, v in capacity.items()}}
    return "---\n" + json.dumps({"apiVersion": "v1", "kind": "Node",
                                 "metadata": {"name": name, "labels": all_labels},
                                 "status": {"capacity": resources, "allocatable": resources}}) + "\n"


def read(text: str) -> tuple[list[Node], list[NvidiaConfigMap], list[ClusterPolicy], Problems]:
    """The manifest reader's nodes (configured), NVIDIA objects and problems."""
    m = load_manifest_text(text, FILE)
    return m.nodes, m.config_maps, m.cluster_policies, m.problems


def by_name(nodes: list[Node]) -> dict[str, Node]:
    return {n.name: n for n in nodes}


def test_time_slicing_from_the_config_the_node_label_selects() -> None:
    text = (POLICY % "single" + "---\n" + DEVICE_PLUGIN + "---\n" + MIG_PARTED
            + node("shared", 2, {"nvidia.com/gpu": 8}, {"nvidia.com/device-plugin.config": "ts4"})
            + node("whole", 2, {"nvidia.com/gpu": 2}))  # no label: the ClusterPolicy's default, "plain"
    nodes, _, _, problems = read(text)
    assert not problems.errors and not problems.warnings, problems.all
    shared, whole = by_name(nodes)["shared"].gpus, by_name(nodes)["whole"].gpus
    assert shared is not None and whole is not None
    assert dict(shared.sharing.time_slicing) == {"nvidia.com/gpu": 4} and shared.sharing.fail_requests_greater_than_one
    assert whole.sharing.time_slicing == {} and whole.count == 2
    state = ClusterState.from_nodes(nodes)
    assert [(g.mode, g.replicas) for g in state.nodes["shared"].gpus] == [("replicas", 4), ("replicas", 4)]
    assert [g.mode for g in state.nodes["whole"].gpus] == ["whole", "whole"]


def test_mig_layouts_from_mig_parted_with_device_filters_and_the_policys_strategy() -> None:
    capacity = {"nvidia.com/mig-1g.10gb": 4, "nvidia.com/mig-2g.20gb": 2, "nvidia.com/mig-3g.40gb": 2}
    text = (POLICY % "mixed" + "---\n" + DEVICE_PLUGIN + "---\n" + MIG_PARTED
            + node("mig", 2, capacity, {"nvidia.com/mig.config": "all-balanced",
                                        "nvidia.com/mig.config.state": "success"})
            + node("half", 2, {"nvidia.com/gpu": 1, "nvidia.com/mig-7g.80gb": 1}, {"nvidia.com/mig.config": "half"}))
    nodes, _, _, problems = read(text)
    assert not problems.all, problems.all
    inv = by_name(nodes)["mig"].gpus
    assert inv is not None and inv.sharing.mig_strategy == "mixed"
    geometry = geometry_for("A100-SXM4-80GB")
    assert geometry is not None
    for gpu in inv.mig:  # the 80GB entry applies (A100-80GB's PCI IDs), not the 40GB one
        layout = [p for p, _ in gpu]
        check_layout(geometry, layout)
        assert sorted(p.profile for p in layout) == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    state = ClusterState.from_nodes(nodes)
    mig = state.nodes["mig"]
    assert [g.mode for g in mig.gpus] == ["mig", "mig"] and all(len(g.mig) == 4 for g in mig.gpus)
    half = by_name(nodes)["half"].gpus
    assert half is not None and [len(m) for m in half.mig] == [1, 0]  # per device index


def test_single_strategy_counts_mig_devices_in_gfd_labels() -> None:
    # GFD's nvidia.com/gpu.count is the number of MIG devices under migStrategy single: 2 GPUs x 2 instances.
    text = (POLICY % "single" + "---\n" + DEVICE_PLUGIN + "---\n" + MIG_PARTED
            + node("single", 4, {"nvidia.com/gpu": 4}, {"nvidia.com/mig.config": "all-3g.40gb"}))
    nodes, _, _, problems = read(text)
    assert not problems.all, problems.all
    inv = by_name(nodes)["single"].gpus
    assert inv is not None and inv.count == 2 and [len(m) for m in inv.mig] == [2, 2]


def test_a_configuration_the_capacity_contradicts_is_not_applied_and_said() -> None:
    text = (POLICY % "single" + "---\n" + DEVICE_PLUGIN
            + node("stale", 2, {"nvidia.com/gpu": 2}, {"nvidia.com/device-plugin.config": "ts4"})
            + node("busy", 2, {"nvidia.com/gpu": 2}, {"nvidia.com/mig.config": "all-balanced",
                                                        "nvidia.com/mig.config.state": "pending"})
            + node("typo", 2, {"nvidia.com/gpu": 2}, {"nvidia.com/device-plugin.config": "ts8"}))
    nodes, _, _, problems = read(text)
    assert all(n.gpus is None for n in nodes)  # read from resources and labels, as without the configuration
    messages = {w.name: w.message for w in problems.warnings}
    assert "device-plugin config ts4 of ConfigMap gpu-operator/device-plugin-config" in messages["stale"]
    assert "nvidia.com/gpu: 8" in messages["stale"] and "capacity shows nvidia.com/gpu: 2" in messages["stale"]
    assert "being applied (nvidia.com/mig.config.state=pending)" in messages["busy"]
    assert "ts8 is not in ConfigMap" in messages["typo"] and "plain, ts4" in messages["typo"]


def test_many_nodes_with_one_reason_make_one_warning() -> None:
    text = POLICY % "single" + "---\n" + DEVICE_PLUGIN + "".join(
        node(f"n{i}", 1, {"nvidia.com/gpu": 1}, {"nvidia.com/device-plugin.config": "ts4"}) for i in range(8))
    _, _, _, problems = read(text)
    [warning] = problems.warnings
    assert warning.message.startswith("nodes n0, n1, n2, n3, n4 and 3 more: ")


def test_errors_in_embedded_configurations_name_the_manifests_own_line() -> None:
    broken = MIG_PARTED.replace("        - devices: [1]\n", "        - devices: [1]\n          mig-enabld: true\n")
    text = POLICY % "single" + "---\n" + broken
    _, _, _, problems = read(text)
    [error] = problems.errors
    line = text.splitlines().index("          mig-enabld: true") + 1
    assert (error.file, error.line, error.kind, error.name) == (FILE, line, "ConfigMap",
                                                                "gpu-operator/default-mig-parted-config")
    assert error.field == "mig-configs.half[1].mig-enabld" and "unknown field" in error.message
    ts = DEVICE_PLUGIN.replace("replicas: 4", "replicas: 1")
    _, _, _, problems = read(ts)
    [error] = problems.errors
    assert error.line == ts.splitlines().index("          replicas: 1") + 1 and "at least 2" in error.message


def test_nodes_with_gpufleets_inventory_and_inputs_without_nvidia_config_are_left_alone() -> None:
    inventory = {"model": "A100-SXM4-80GB", "memoryMiB": 81920, "sharing": {"migStrategy": "none"},
                 "gpus": [{"index": 0, "uuid": "GPU-x"}], "nvlinks": []}
    measured = json.loads(node("measured", 1, {"nvidia.com/gpu": 1}).removeprefix("---\n"))
    measured["metadata"]["annotations"] = {"gpufleet.io/gpus": json.dumps(inventory)}
    text = (POLICY % "mixed" + "---\n" + DEVICE_PLUGIN + "---\n" + json.dumps(measured) + "\n"
            + node("other", 2, {"nvidia.com/gpu": 2}))
    nodes, _, _, problems = read(text)
    assert by_name(nodes)["measured"].gpus is not None and by_name(nodes)["measured"].gpus.uuids == ("GPU-x",)
    assert by_name(nodes)["other"].gpus is not None
    nodes, _, _, problems = read(node("alone", 2, {"nvidia.com/gpu": 2}))
    assert nodes[0].gpus is None and not problems.all


def test_other_config_maps_are_named_and_left_out() -> None:
    text = textwrap.dedent("""\
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: app, namespace: ml}
        data: {settings.yaml: "version: 3\\nlevel: debug\\n"}
        """)
    _, cms, _, problems = read(text)
    assert not cms
    [warning] = problems.warnings
    assert "no NVIDIA device-plugin or mig-parted configuration" in warning.message
    assert (warning.kind, warning.name, warning.code) == ("ConfigMap", "ml/app", "left-out")  # an error with --strict
    assert nvidia_config_kind("version: v1\nflags: {migStrategy: mixed}\n") == "device-plugin"
    assert nvidia_config_kind("version: v1\nmig-configs: {}\n") == "mig-parted"
    assert nvidia_config_kind("password: x\n") is None
    assert config_map_names({"spec": {"devicePlugin": {"config": {"name": "dp"}}}}) == {
        "dp", "default-mig-parted-config"}


# --- the invariant: applied exactly when the configuration explains the node's capacity ----------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from gpufleet.gpu.catalog import DEFAULT_CATALOG  # noqa: E402
from gpufleet.gpu.mig import enumerate_maximal_layouts, layout_mix  # noqa: E402
from gpufleet.gpu.sharing import DevicePluginConfig, advertised_resources, make_gpus  # noqa: E402

A100 = DEFAULT_CATALOG.find("A100-SXM4-80GB")
A100_LAYOUTS = enumerate_maximal_layouts(geometry_for("A100-SXM4-80GB"))  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(count=st.integers(1, 8), strategy=st.sampled_from(["none", "single", "mixed"]),
       layout=st.one_of(st.none(), st.sampled_from(A100_LAYOUTS)), replicas=st.sampled_from([1, 2, 4]),
       tamper=st.integers(-1, 1))
def test_an_inventory_is_applied_exactly_when_it_explains_the_capacity(
        count: int, strategy: str, layout: tuple | None, replicas: int, tamper: int) -> None:
    assert A100 is not None
    sharing = DevicePluginConfig(mig_strategy=strategy,  # type: ignore[arg-type]
                                 time_slicing={"nvidia.com/gpu": replicas} if replicas > 1 else {})
    if layout is not None and strategy == "single" and len({p.profile for p in layout}) > 1:
        layout = tuple(p for p in layout if p.profile == layout[0].profile)  # single: one profile per GPU
    gpus = make_gpus("n", A100, count, layout)
    capacity = advertised_resources(gpus, sharing)  # what NVIDIA's plugin registers for this configuration
    first = sorted(capacity)[0]
    capacity[first] += tamper
    mig = {} if layout is None else {k: v for k, v in layout_mix(layout).items()}
    config = {"version": "v1", "mig-configs": {"chosen": [
        {"devices": "all", "mig-enabled": layout is not None, "mig-devices": mig}]}}
    plugin: dict[str, object] = {"version": "v1", "flags": {"migStrategy": strategy}}
    if replicas > 1:
        plugin["sharing"] = {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": replicas}]}}
    sliced_mig = replicas > 1 and layout is not None and strategy != "none"
    shown = sum(len(g.mig) for g in gpus) if strategy == "single" and layout is not None else count
    text = (POLICY % strategy + "---\n" + json.dumps({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "device-plugin-config", "namespace": "g"},
        "data": {"plain": json.dumps(plugin)}}) + "\n---\n" + json.dumps({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "default-mig-parted-config", "namespace": "g"},
        "data": {"config.yaml": json.dumps(config)}}) + "\n"
        + node("n", shown, capacity, {"nvidia.com/mig.config": "chosen"}))
    nodes, _, _, problems = read(text)
    assert not problems.errors, problems.errors
    applied = nodes[0].gpus is not None
    # Time-sliced MIG devices are not modelled: never applied (and said), whatever the capacity.
    assert applied == (tamper == 0 and not sliced_mig), problems.warnings
    if sliced_mig and tamper == 0:
        assert "time-slices MIG devices" in problems.warnings[0].message
    if applied:
        state = ClusterState.from_nodes(nodes)
        offered: dict[str, int] = {}
        for g in state.nodes["n"].gpus:
            for unit in (g.mig or [None]) if g.mode == "mig" else [None]:
                resource = unit.resource if unit is not None else g.resource
                offered[resource] = offered.get(resource, 0) + (g.replicas if g.mode == "replicas" else 1)
        assert offered == capacity


def test_plan_places_mig_pods_on_a_gpu_operator_snapshot_without_a_node_pool() -> None:
    capacity = {"nvidia.com/mig-1g.10gb": 4, "nvidia.com/mig-2g.20gb": 2, "nvidia.com/mig-3g.40gb": 2}
    pods = "".join(f"""---
apiVersion: v1
kind: Pod
metadata: {{name: infer-{i}, namespace: ml, creationTimestamp: "2026-01-01T00:00:0{i}Z"}}
spec:
  containers:
  - name: c
    resources: {{limits: {{nvidia.com/mig-3g.40gb: 1}}}}
""" for i in range(3))
    text = (POLICY % "mixed" + "---\n" + DEVICE_PLUGIN + "---\n" + MIG_PARTED
            + node("mig", 2, capacity, {"nvidia.com/mig.config": "all-balanced"}) + pods)
    manifests = load_manifest_text(text, FILE)
    assert not manifests.problems.errors and manifests.counts()["ConfigMap"] == 2, manifests.problems.all
    assert manifests.counts()["ClusterPolicy"] == 1
    from gpufleet.cli.plan import run_cycles

    result = run_cycles(manifests, 3, False)
    placed = {p.pod: p.devices for c in result.cycles for a in c.decisions.admitted for p in a.pods}
    pending = [p.workload for p in result.cycles[-1].pending]
    # Two 3g.40gb instances, one per GPU (all-balanced): two pods placed, on instances of different GPUs.
    assert sorted(placed) == ["ml/infer-0", "ml/infer-1"] and pending == ["ml/infer-2"]
    devices = sorted(d for ds in placed.values() for d in ds)
    assert all(d.startswith("mig/gpu-") and "/3g.40gb@" in d for d in devices), devices
    assert len({d.split("/")[1] for d in devices}) == 2  # one per GPU
