"""A raw device-plugin file's warning says what it configures (Node manifests, not NodePools' nodes), and a second
raw file is refused rather than both taken with no word on which applies."""

from __future__ import annotations

from pathlib import Path

from gpufleet.api.manifests import load_manifests
from tests.test_nvidia_config import node
from tests.test_raw_nvidia_files import DEVICE_PLUGIN_FILE

POOL = ("apiVersion: gpufleet.io/v1alpha1\nkind: NodePool\nmetadata: {name: gpu}\nspec:\n  count: 1\n  cpu: \"8\"\n"
        "  memory: 32Gi\n  gpu: {model: A100-SXM4-80GB, count: 2}\n")


def test_the_warning_says_nodepools_are_not_configured_and_they_are_not(tmp_path: Path) -> None:
    (tmp_path / "ts.yaml").write_text(DEVICE_PLUGIN_FILE)
    (tmp_path / "pool.yaml").write_text(POOL)
    m = load_manifests([str(tmp_path)])
    assert not m.problems.errors, m.problems.all
    [said] = m.problems.warnings
    assert "every GPU node" not in said.message
    assert "does not configure NodePools' nodes" in said.message, said.message
    [pooled] = m.nodes
    assert pooled.allocatable.get("nvidia.com/gpu") == 2  # not 2 x 4 replicas


def test_a_second_raw_device_plugin_file_is_refused_naming_the_first(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(DEVICE_PLUGIN_FILE)
    (tmp_path / "b.yaml").write_text(DEVICE_PLUGIN_FILE.replace("replicas: 4", "replicas: 2"))
    (tmp_path / "nodes.yaml").write_text(node("shared", 2, {"nvidia.com/gpu": 8}))
    m = load_manifests([str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml"), str(tmp_path / "nodes.yaml")])
    [error] = m.problems.errors
    assert (error.file, error.line) == (str(tmp_path / "b.yaml"), 1)
    assert f"{tmp_path / 'a.yaml'}:1" in error.message and error.fix is not None and "ClusterPolicy" in error.fix
