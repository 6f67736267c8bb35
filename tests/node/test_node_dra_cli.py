"""`gpufleet node agent --dra`: off by default, on by flag or GPUFLEET_DRA, refused beside --inventory-only, and as a
real process it publishes the pool and withdraws it on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from agent_env import node_object
from kube_apisim import ApiSim
from live_env import wait_until
from machines import WHOLE_8, write_machine
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.k8s import resources as r
from gpufleet.node.agent import AgentOptions

runner = CliRunner()


def agent_args(machine: Path, *extra: str) -> list[str]:
    return ["node", "agent", "--node-name", "dgx-0", "--nvml", f"fake:{machine}", *extra]


def kubeconfig_for(folder: Path, server: str) -> Path:
    path = folder / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sim",
        "clusters": [{"name": "sim", "cluster": {"server": server}}], "users": [{"name": "sim", "user": {}}],
        "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "sim"}}]}))
    return path


def test_dra_is_off_by_default_and_switched_on_by_flag_or_environment(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import gpufleet.node.agent as agent_module

    seen: list[bool] = []

    class Stop(Exception):
        pass

    def recorder(client: object, options: AgentOptions, *rest: object) -> None:
        seen.append(options.dra)
        raise Stop

    monkeypatch.setattr(agent_module, "NodeAgent", recorder)
    monkeypatch.delenv("GPUFLEET_DRA", raising=False)
    machine = write_machine(tmp_path, WHOLE_8)
    kubeconfig = kubeconfig_for(tmp_path, "http://127.0.0.1:9")
    for args, env in (([], {}), (["--dra"], {}), ([], {"GPUFLEET_DRA": "true"})):
        result = runner.invoke(app, [*agent_args(machine, "--kubeconfig", str(kubeconfig)), *args], env=env)
        assert isinstance(result.exception, Stop), result.output
    assert seen == [False, True, True]


def test_dra_beside_inventory_only_is_refused(tmp_path: Path) -> None:
    machine = write_machine(tmp_path, WHOLE_8)
    result = runner.invoke(app, agent_args(machine, "--dra", "--inventory-only"))
    assert result.exit_code == 2 and "'--dra'" in result.stderr
    assert "NVIDIA's device plugin" in " ".join(result.stderr.split())
    from_env = runner.invoke(app, agent_args(machine, "--dra"), env={"GPUFLEET_INVENTORY_ONLY": "true"})
    assert from_env.exit_code == 2 and "'--dra'" in from_env.stderr


def test_the_agent_process_publishes_the_pool_and_withdraws_it_on_sigterm(apisim: ApiSim, sockdir: Path) -> None:
    apisim.serve(r.RESOURCE_SLICES)
    machine = write_machine(sockdir, WHOLE_8)
    apisim.create(r.NODES, node_object("dgx-0"))
    kubeconfig = kubeconfig_for(sockdir, apisim.url)
    plugin_dir = sockdir / "dp"
    plugin_dir.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("KUBECONFIG", "DP_DISABLE_HEALTHCHECKS", "GPUFLEET_INVENTORY_ONLY", "GPUFLEET_DRA")}
    process = subprocess.Popen(
        [sys.executable, "-m", "gpufleet.cli.main", *agent_args(machine, "--dra"), "--kubeconfig", str(kubeconfig),
         "--device-plugin-dir", str(plugin_dir), "--pod-resources-socket", str(sockdir / "pr.sock"),
         "--metrics-bind-address", "0", "--health-probe-bind-address", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    name = "dgx-0-gpu.nvidia.com-0"
    try:
        def published() -> bool:
            obj = apisim.get(r.RESOURCE_SLICES, None, name)
            return obj is not None and len(obj["spec"]["devices"]) == 8

        wait_until(published, timeout=30, what="the pool published by the agent process")
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
        assert process.returncode == 0, stderr
        assert apisim.get(r.RESOURCE_SLICES, None, name) is None
        assert "no device plugin is started" in stderr
        assert not list(plugin_dir.glob("gpufleet-*.sock"))
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
