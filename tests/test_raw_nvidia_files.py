"""Documents without apiVersion and kind recognised by their shape (issue 29, items 7 and 9): mig-parted's and the
device plugin's own configuration files, as NVIDIA's docs give them (re-typed), are read as the ConfigMaps the GPU
Operator keeps them in; the JSON files gpufleet writes are skipped with a word, not called broken manifests."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gpufleet.api.manifests import load_manifests
from gpufleet.cli.main import app
from gpufleet.cluster.state import ClusterState
from tests.test_nvidia_config import node

runner = CliRunner()

# mig-parted's config.yaml as its README writes it: version and mig-configs, no ConfigMap around it.
MIG_PARTED_FILE = """version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-balanced:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 2
        "2g.20gb": 1
        "3g.40gb": 1
"""

# The device plugin's --config-file with time-slicing, as NVIDIA's README gives it.
DEVICE_PLUGIN_FILE = """version: v1
flags:
  migStrategy: none
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""

POLICY = """apiVersion: nvidia.com/v1
kind: ClusterPolicy
metadata: {name: cluster-policy}
spec:
  mig: {strategy: mixed}
  migManager: {config: {name: default-mig-parted-config}}
"""


def test_a_raw_mig_parted_file_is_read_as_the_operators_config_map(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(MIG_PARTED_FILE)
    capacity = {"nvidia.com/mig-1g.10gb": 4, "nvidia.com/mig-2g.20gb": 2, "nvidia.com/mig-3g.40gb": 2}
    (tmp_path / "cluster.yaml").write_text(POLICY + node("mig", 2, capacity, {"nvidia.com/mig.config": "all-balanced"}))
    m = load_manifests([str(tmp_path / "cluster.yaml"), str(tmp_path / "config.yaml")])
    assert not m.problems.errors, m.problems.all
    [said] = m.problems.warnings
    assert said.file == str(tmp_path / "config.yaml") and said.line == 1
    assert "mig-parted's configuration file" in said.message
    assert "gpu-operator/default-mig-parted-config, key config.yaml" in said.message
    assert said.fix is not None and "kubectl create configmap default-mig-parted-config" in said.fix
    [mig] = m.nodes
    assert mig.gpus is not None and [sorted(p.profile for p, _ in g) for g in mig.gpus.mig] == [
        ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]] * 2
    assert all(len(g.mig) == 4 for g in ClusterState.from_nodes(m.nodes).nodes["mig"].gpus)


def test_a_raw_device_plugin_file_configures_nodes_without_the_label(tmp_path: Path) -> None:
    (tmp_path / "time-slicing.yaml").write_text(DEVICE_PLUGIN_FILE)
    (tmp_path / "nodes.yaml").write_text(node("shared", 2, {"nvidia.com/gpu": 8}))
    m = load_manifests([str(tmp_path)])
    assert not m.problems.errors, m.problems.all
    [said] = m.problems.warnings
    assert "the NVIDIA device plugin's configuration file" in said.message
    assert "gpu-operator/time-slicing, key default" in said.message
    [shared] = m.nodes
    assert shared.gpus is not None and dict(shared.gpus.sharing.time_slicing) == {"nvidia.com/gpu": 4}


def test_a_raw_file_with_an_error_is_reported_at_its_own_line(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(MIG_PARTED_FILE.replace("      mig-enabled: false", "      mig-enabld: false"))
    m = load_manifests([str(path)])
    error = m.problems.errors[0]
    assert (error.file, error.line) == (str(path), 5) and "unknown field mig-enabld" in error.message
    assert not m.config_maps  # a configuration with errors is not kept


def test_what_advise_writes_is_recognised_by_validate(tmp_path: Path) -> None:
    (tmp_path / "advice.json").write_text(json.dumps({"input": "x", "objective": "cost", "given": {},
                                                      "proposal": {}, "tried": []}))
    (tmp_path / "whatif.json").write_text(json.dumps({"runs": [], "advice": {}}))
    (tmp_path / "kpis.json").write_text(json.dumps({"runs": []}))
    result = runner.invoke(app, ["validate", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "needs apiVersion and kind" not in result.output
    assert "gpufleet advise's advice" in result.output and "gpufleet advise's what-if" in result.output
    assert "gpufleet simulate's KPIs" in result.output
    (tmp_path / "other.json").write_text(json.dumps({"something": "else"}))
    assert runner.invoke(app, ["validate", str(tmp_path)]).exit_code == 1  # an unknown shape is still an error
