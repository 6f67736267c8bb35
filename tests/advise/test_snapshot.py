"""advise on a snapshot of a GPU Operator cluster: Nodes without gpufleet's inventory, NVIDIA's ConfigMaps and
ClusterPolicy saying how they are cut; the advisor reads the same devices as from NodePools and writes the
node labels a user applies with kubectl."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from gpufleet.advise.contract import NodeConfig
from gpufleet.advise.files import dump_documents
from gpufleet.advise.inputs import read_input
from gpufleet.advise.nvidia import cluster_policy_patch, device_plugin_config_map, mig_parted_config_map, node_labels
from gpufleet.api.errors import Problems
from gpufleet.api.manifests import build
from gpufleet.api.nodepool import expand_node_pool
from gpufleet.api.objects import GPU_INVENTORY_ANNOTATION
from gpufleet.api.source import load_paths
from gpufleet.cli.main import app

SMALL = Path(__file__).parent / "small.yaml"
WHOLE = NodeConfig("exclusive")
SLICED = NodeConfig("time-sliced", 8)


def snapshot(tmp_path: Path) -> list[str]:
    """small.yaml as `gpufleet snapshot` would take it from a GPU Operator cluster."""
    docs = load_paths([str(SMALL)], Problems())
    pools = build([d for d in docs if d.data["kind"] == "NodePool"]).node_pools
    nodes = []
    for pool in pools:
        config = WHOLE if pool.name == "a30" else SLICED
        for node in expand_node_pool(pool):
            node["metadata"]["annotations"].pop(GPU_INVENTORY_ANNOTATION)
            node["metadata"]["labels"].update(node_labels(config))
            node["metadata"]["labels"].pop("gpufleet.io/node-pool")
            nodes.append(node)
    (tmp_path / "nodes.yaml").write_text(dump_documents(nodes))
    (tmp_path / "nvidia.yaml").write_text(dump_documents([mig_parted_config_map([WHOLE, SLICED]),
                                                 device_plugin_config_map([WHOLE, SLICED]), cluster_policy_patch()]))
    (tmp_path / "rest.yaml").write_text(yaml.safe_dump_all([d.data for d in docs if d.data["kind"] != "NodePool"],
                                                           sort_keys=False))
    return [str(tmp_path / n) for n in ("nodes.yaml", "nvidia.yaml", "rest.yaml")]


def test_a_snapshot_reads_as_the_same_cluster_and_gets_kubectl_labels(tmp_path: Path) -> None:
    files = snapshot(tmp_path)
    inp = read_input(files)
    assert all(n.gpus is not None for n in inp.manifests.nodes), inp.notes  # NVIDIA's configuration applied
    from_pools = read_input([str(SMALL)])
    assert [(n.name, sorted(n.allocatable.items())) for n in inp.manifests.nodes] == [
        (n.name, sorted(n.allocatable.items())) for n in from_pools.manifests.nodes]
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["advise", *files, "--evaluations", "6", "-o", str(out), "-o", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["changed"]
    script = (out / "node-labels.sh").read_text().splitlines()
    assert script[0] == "#!/bin/sh"
    labelled = {line.split()[3] for line in script if line.startswith("kubectl label node ")}
    assert labelled == {n.name for n in inp.manifests.nodes}
    for pool in doc["proposal"]["pools"]:
        for name in pool["nodes"]:
            line = next(x for x in script if x.startswith(f"kubectl label node {name} "))
            for key, value in pool["labels"].items():
                assert f"{key}={value}" in line
    # cluster.yaml holds the same Nodes, reconfigured, with their names kept.
    written = build(load_paths([str(out / "cluster.yaml")], Problems()))
    assert sorted(n.name for n in written.nodes) == sorted(labelled)
