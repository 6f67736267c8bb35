"""The advisor's configurations are valid by construction and by check, and the files it writes are read back by
gpufleet's own parsers of NVIDIA's formats (api/nvidia_config.py, api/device_plugin_config.py) into exactly the
devices it proposed: MIG layouts valid for the model, replicas as proposed, the node's capacity explained."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.advise.contract import NodeConfig, PoolConfig
from gpufleet.advise.files import dump_documents
from gpufleet.advise.fleet import configurations, layout_of
from gpufleet.advise.nvidia import (
    cluster_policy_patch,
    device_plugin_config_map,
    device_plugin_configs,
    mig_config_name,
    mig_parted_config_map,
    node_labels,
    sharing_of,
)
from gpufleet.api.device_plugin_config import config_from_text
from gpufleet.api.errors import Problems
from gpufleet.api.manifests import build
from gpufleet.api.nodepool import expand_node_pool
from gpufleet.api.nvidia_config import configure_nodes, parse_cluster_policy, parse_config_map
from gpufleet.api.objects import GPU_INVENTORY_ANNOTATION
from gpufleet.api.reader import FieldReader
from gpufleet.api.source import load_text
from gpufleet.cluster.state import ClusterState
from gpufleet.gpu.catalog import DEFAULT_CATALOG, GpuModel
from gpufleet.gpu.mig import geometry_for, layout_mix, validate_layout

MIG_MODELS = [m for m in DEFAULT_CATALOG if m.mig_capable and geometry_for(m.key) is not None]
ALL_MODELS = [*MIG_MODELS, DEFAULT_CATALOG.get("L40S"), DEFAULT_CATALOG.get("T4")]


def pool_document(model: GpuModel, gpus: int, config: NodeConfig, count: int, name: str) -> dict[str, Any]:
    """A NodePool as the advisor writes one (realise.node_pool_documents' spec for one configuration)."""
    spec: dict[str, Any] = {"count": count, "namePrefix": name, "gpu": {"model": model.key, "count": gpus},
                            "cpu": "32", "memory": "256Gi", "labels": node_labels(config)}
    if config.mode == "mig":
        spec["gpu"]["migLayout"] = ",".join(str(p) for p in layout_of(model, config))
        spec["sharing"] = {"migStrategy": "mixed"}
    elif config.mode == "time-sliced":
        spec["sharing"] = {"timeSlicing": {"renameByDefault": True, "failRequestsGreaterThanOne": True,
                                           "resources": [{"name": "nvidia.com/gpu", "replicas": config.replicas}]}}
    return {"apiVersion": "gpufleet.io/v1alpha1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


def read_back(nodes: list[dict[str, Any]], configs: list[NodeConfig]) -> tuple[dict[str, Any], Problems]:
    """Nodes stripped of gpufleet's inventory, with the advisor's NVIDIA files, through the NVIDIA parsers."""
    text = dump_documents([mig_parted_config_map(configs), device_plugin_config_map(configs), cluster_policy_patch()])
    problems = Problems()
    docs = load_text(text, "nvidia.yaml", problems)
    bare = []
    for node in nodes:
        node = json.loads(json.dumps(node))
        node["metadata"]["annotations"].pop(GPU_INVENTORY_ANNOTATION)
        bare.append(node)
    built = build(load_text(dump_documents(bare), "nodes.yaml", problems), problems)
    maps, policies = [], []
    for doc in docs:
        r = FieldReader(doc, problems, kind=doc.data["kind"], name=None)
        if doc.data["kind"] == "ConfigMap":
            maps.append(parse_config_map(r))
        else:
            policies.append(parse_cluster_policy(r))
    configure_nodes(built.nodes, [m for m in maps if m is not None], [p for p in policies if p is not None],
                    problems)
    return {n.name: n for n in built.nodes}, problems


def configs_for(model: GpuModel) -> list[NodeConfig]:
    return configurations(model)


@st.composite
def proposals(draw: st.DrawFn) -> tuple[GpuModel, int, list[NodeConfig]]:
    model = draw(st.sampled_from(ALL_MODELS))
    gpus = draw(st.sampled_from([1, 2, 4, 8]))
    configs = draw(st.lists(st.sampled_from(configs_for(model)), min_size=1, max_size=4, unique=True))
    return model, gpus, configs


@settings(max_examples=60, deadline=None)
@given(proposals())
def test_every_configuration_is_valid_and_its_files_read_back_to_the_same_devices(
        case: tuple[GpuModel, int, list[NodeConfig]]) -> None:
    model, gpus, configs = case
    nodes: list[dict[str, Any]] = []
    by_node: dict[str, NodeConfig] = {}
    for i, config in enumerate(configs):
        if config.mode == "mig":
            geometry = geometry_for(model.key)
            assert geometry is not None
            layout = layout_of(model, config)
            assert validate_layout(geometry, layout) == []  # valid by check, whatever built it
            assert layout_mix(layout) == dict(config.mig)
        pool = build(load_text(dump_documents([pool_document(model, gpus, config, 1, f"p{i}")]), "p.yaml", Problems()))
        assert not pool.problems.errors, [str(e) for e in pool.problems.errors]
        for node in expand_node_pool(pool.node_pools[0]):
            nodes.append(node)
            by_node[node["metadata"]["name"]] = config
    read, problems = read_back(nodes, configs)
    assert not problems.errors and not problems.warnings, [str(p) for p in problems.all]
    for name, config in by_node.items():
        inventory = read[name].gpus
        assert inventory is not None, name  # the configuration explains the node's capacity exactly
        assert inventory.count == gpus
        if config.mode == "mig":
            assert all(Counter(p.profile for p, _ in gpu) == Counter(dict(config.mig)) for gpu in inventory.mig)
        else:
            assert all(not gpu for gpu in inventory.mig)
        expected = config.replicas if config.mode == "time-sliced" else 1
        assert inventory.sharing.replicas_for("nvidia.com/gpu") == expected
        slots = ClusterState.from_nodes([read[name]]).nodes[name].gpus
        assert {s.mode for s in slots} == {"mig" if config.mode == "mig" else
                                          "replicas" if config.mode == "time-sliced" else "whole"}


def test_device_plugin_files_are_nvidias_format_without_a_warning() -> None:
    configs = [NodeConfig("exclusive"), NodeConfig("time-sliced", 4), NodeConfig("mig", 1, (("3g.40gb", 2),))]
    files = device_plugin_configs(configs)
    assert sorted(files) == ["default", "time-sliced-4"]
    for name, doc in files.items():
        config, problems = config_from_text(yaml.safe_dump(doc), name)
        assert not problems.all, [str(p) for p in problems.all]
        assert config.sharing.mig_strategy == "mixed"
    ts = config_from_text(yaml.safe_dump(files["time-sliced-4"]), "ts")[0].sharing
    assert dict(ts.time_slicing) == {"nvidia.com/gpu": 4} and ts.rename_by_default
    assert sharing_of(NodeConfig("time-sliced", 4)).time_slicing == {"nvidia.com/gpu": 4}
    text = dump_documents([mig_parted_config_map(configs)])
    data = yaml.safe_load(yaml.safe_load(text)["data"]["config.yaml"])
    assert data["version"] == "v1"
    assert data["mig-configs"]["all-3g.40gb-x2"] == [{"devices": "all", "mig-enabled": True,
                                                      "mig-devices": {"3g.40gb": 2}}]
    assert data["mig-configs"]["all-disabled"] == [{"devices": "all", "mig-enabled": False}]


def test_mig_configuration_names_are_label_values() -> None:
    import re

    for model in MIG_MODELS:
        for config in configurations(model):
            name = mig_config_name(config)
            assert len(name) <= 63 and re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", name), name


def test_a_pool_config_names_its_nodes() -> None:
    group = PoolConfig("a100", "A100-SXM4-80GB", 1, NodeConfig("time-sliced", 3), ("n1", "n2"))
    assert group.config.devices_per_gpu() == {"nvidia.com/gpu.shared": 3}
    assert node_labels(group.config) == {"nvidia.com/mig.config": "all-disabled",
                                         "nvidia.com/device-plugin.config": "time-sliced-3",
                                         "gpu-mode": "time-sliced"}
