"""`gpufleet node agent` as users run it: bad input exits non-zero naming what is wrong; a real process serves
the kubelet, writes the Node and exits 0 on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from agent_env import node_object
from fake_kubelet import FakeKubelet
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


def test_a_malformed_config_file_names_file_line_and_field(tmp_path: Path) -> None:
    machine = write_machine(tmp_path, WHOLE_8)
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\nflags:\n  migStrategy: mixd\n")
    result = runner.invoke(app, agent_args(machine, "--config", str(config)))
    assert result.exit_code == 1
    assert f"{config}:3" in result.stderr and "flags.migStrategy" in result.stderr and "mixd" in result.stderr


def test_malformed_flags_and_environment_are_refused_before_anything_starts(tmp_path: Path) -> None:
    machine = write_machine(tmp_path, WHOLE_8)
    bad_address = runner.invoke(app, agent_args(machine, "--metrics-bind-address", "nine-four-hundred"))
    assert bad_address.exit_code == 2 and "'--metrics-bind-address'" in bad_address.stderr
    bad_nvml = runner.invoke(app, ["node", "agent", "--node-name", "n", "--nvml", "mock"])
    assert bad_nvml.exit_code == 2 and "'--nvml'" in bad_nvml.stderr
    bad_env = runner.invoke(app, agent_args(machine), env={"DP_DISABLE_HEALTHCHECKS": "48,seventy-nine"})
    assert bad_env.exit_code == 1 and "DP_DISABLE_HEALTHCHECKS" in bad_env.stderr
    assert "'seventy-nine' is not an XID number" in bad_env.stderr


def test_the_agent_process_runs_until_sigterm(apisim: ApiSim, sockdir: Path) -> None:
    machine = write_machine(sockdir, WHOLE_8)
    apisim.create(r.NODES, node_object("dgx-0"))
    kubeconfig = sockdir / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sim",
        "clusters": [{"name": "sim", "cluster": {"server": apisim.url}}], "users": [{"name": "sim", "user": {}}],
        "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "sim"}}]}))
    plugin_dir = sockdir / "dp"
    plugin_dir.mkdir()
    kubelet = FakeKubelet(plugin_dir, sockdir / "pr.sock")
    kubelet.start()
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "DP_DISABLE_HEALTHCHECKS")}
    process = subprocess.Popen(
        [sys.executable, "-m", "gpufleet.cli.main", *agent_args(machine), "--kubeconfig", str(kubeconfig),
         "--device-plugin-dir", str(plugin_dir), "--pod-resources-socket", str(sockdir / "pr.sock"),
         "--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        kubelet.wait_registered(["nvidia.com/gpu"], timeout=60)

        def labelled() -> bool:
            obj = apisim.get(r.NODES, None, "dgx-0")
            return obj is not None and (obj["metadata"].get("labels") or {}).get("nvidia.com/gpu.count") == "8"

        wait_until(labelled, timeout=30, what="the Node labelled by the agent process")
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
        assert process.returncode == 0, stderr
        assert not (plugin_dir / "gpufleet-gpu.sock").exists()  # its socket is cleaned up on the way out
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
        kubelet.close()


def test_inventory_only_is_switched_on_by_flag_or_environment(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import gpufleet.node.agent as agent_module

    seen: list[bool] = []

    class Stop(Exception):
        pass

    def recorder(client: object, options: AgentOptions, *rest: object) -> None:
        seen.append(options.inventory_only)
        raise Stop

    monkeypatch.setattr(agent_module, "NodeAgent", recorder)
    machine = write_machine(tmp_path, WHOLE_8)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "x", "cluster": {"server": "http://127.0.0.1:9"}}], "users": [{"name": "x", "user": {}}],
        "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}]}))
    for args, env in (([], {}), (["--inventory-only"], {}), ([], {"GPUFLEET_INVENTORY_ONLY": "true"})):
        result = runner.invoke(app, [*agent_args(machine, "--kubeconfig", str(kubeconfig)), *args], env=env)
        assert isinstance(result.exception, Stop), result.output
    assert seen == [False, True, True]
