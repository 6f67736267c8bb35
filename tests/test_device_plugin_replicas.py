"""More than 64 time-slicing replicas: refused where gpufleet's node agent reads its --config (it makes a device per
replica), a warning naming the limit for plan and validate (NVIDIA's plugin has no such limit)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.api.device_plugin_config import DpConfigError, config_from_text, load_device_config
from gpufleet.cli.main import app

runner = CliRunner()


def _config(replicas: int) -> str:
    return ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
            f"      replicas: {replicas}\n")


def _config_map(replicas: int) -> str:
    body = "".join(f"    {line}\n" for line in _config(replicas).splitlines())
    return ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: time-slicing-config, namespace: gpu-operator}\n"
            f"data:\n  any: |-\n{body}")


_POOL = ("apiVersion: gpufleet.io/v1alpha1\nkind: NodePool\nmetadata: {name: gpu}\nspec:\n  count: 1\n  cpu: \"8\"\n"
         "  memory: 32Gi\n  gpu: {model: A100-SXM4-80GB, count: 2}\n")


def test_the_node_agent_refuses_more_than_64_replicas(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(_config(100))
    with pytest.raises(DpConfigError, match=r"c\.yaml:6: .*replicas: 100 is too large: at most 64"):
        load_device_config(str(path))
    config, problems = config_from_text(_config(64), "c.yaml")
    assert not problems.errors and config.sharing.time_slicing == {"nvidia.com/gpu": 64}


def test_validate_warns_of_100_replicas_naming_the_limit(tmp_path: Path) -> None:
    (tmp_path / "cm.yaml").write_text(_config_map(100))
    (tmp_path / "pool.yaml").write_text(_POOL)
    result = runner.invoke(app, ["validate", str(tmp_path / "cm.yaml"), str(tmp_path / "pool.yaml")])
    assert result.exit_code == 0, result.output
    warning = next(x for x in result.stderr.splitlines() if x.startswith("warning:") and "replicas" in x)
    assert "cm.yaml:11" in warning and "at most 64" in warning and "node agent" in warning, warning


def test_a_plan_still_refuses_more_replicas_than_a_node_may_advertise(tmp_path: Path) -> None:
    (tmp_path / "cm.yaml").write_text(_config_map(1_000_000))
    result = runner.invoke(app, ["validate", str(tmp_path / "cm.yaml")])
    assert result.exit_code != 0
    assert "at most 4,096" in result.stderr, result.stderr
