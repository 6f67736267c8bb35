"""`gpufleet node discover` end to end through typer's runner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from machines import MIG_MIXED, WHOLE_8, write_machine
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.node.discovery import discover
from gpufleet.node.dpconfig import AgentDeviceConfig
from gpufleet.node.nvml_fake import FakeNvml

runner = CliRunner()


def test_discover_prints_labels_annotations_and_resources(tmp_path: Path) -> None:
    machine = write_machine(tmp_path, MIG_MIXED)
    result = runner.invoke(app, ["node", "discover", "--nvml", f"fake:{machine}", "-o", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert list(doc) == ["labels", "annotations", "resources"]
    fake = FakeNvml(str(machine))
    expected = discover(fake.machine(), AgentDeviceConfig(sharing=fake.sharing)).document()
    doc["labels"].pop("nvidia.com/gfd.timestamp")
    expected["labels"].pop("nvidia.com/gfd.timestamp")
    assert doc == expected
    as_yaml = runner.invoke(app, ["node", "discover", "--nvml", f"fake:{machine}", "-o", "yaml"])
    assert yaml.safe_load(as_yaml.stdout)["resources"] == expected["resources"]


def test_discover_with_an_nvidia_config_file(tmp_path: Path) -> None:
    machine = write_machine(tmp_path, WHOLE_8)
    config = tmp_path / "dp.yaml"
    config.write_text("version: v1\nflags:\n  gfd: {noTimestamp: true}\nsharing:\n  timeSlicing:\n"
                      "    resources: [{name: nvidia.com/gpu, replicas: 2}]\n")
    result = runner.invoke(app, ["node", "discover", "--nvml", f"fake:{machine}", "--config", str(config)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["resources"] == {"nvidia.com/gpu": 16}
    assert doc["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB-SHARED"
    assert "nvidia.com/gfd.timestamp" not in doc["labels"]


def test_bad_input_exits_non_zero_naming_the_file_line_and_field(tmp_path: Path) -> None:
    machine = write_machine(tmp_path, WHOLE_8)
    config = tmp_path / "dp.yaml"
    config.write_text("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
                      "      replicas: one\n")
    result = runner.invoke(app, ["node", "discover", "--nvml", f"fake:{machine}", "--config", str(config)])
    assert result.exit_code == 1
    assert f"{config}:6" in result.stderr and "sharing.timeSlicing.resources[0].replicas" in result.stderr
    assert result.stdout == ""
    bad_flag = runner.invoke(app, ["node", "discover", "--nvml", "fake"])
    assert bad_flag.exit_code == 2 and "'--nvml'" in bad_flag.stderr
    missing = runner.invoke(app, ["node", "discover", "--nvml", f"fake:{tmp_path / 'none.yaml'}"])
    assert missing.exit_code == 1 and "no such file" in missing.stderr
    folder = runner.invoke(app, ["node", "discover", "--nvml", f"fake:{tmp_path}"])
    assert folder.exit_code == 1 and "is a folder" in folder.stderr and "no such file" not in folder.stderr
    assert "a YAML file holding one gpufleet.io/v1alpha1 NodePool" in folder.stderr


def test_discover_on_a_machine_without_nvml_says_what_to_do() -> None:
    result = runner.invoke(app, ["node", "discover"])
    if result.exit_code == 0:
        pytest.skip("this machine has NVML: discover succeeded")
    assert result.exit_code == 1 and "--nvml fake:MACHINE" in result.stderr
