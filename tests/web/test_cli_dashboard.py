"""``gpufleet dashboard``'s command line: one source at a time, clear errors for bad addresses and results, and a
served dashboard on files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from gpufleet.cli.dashboard import parse_address
from gpufleet.cli.main import app
from gpufleet.web.source_simulation import SimulationResultError, load_result
from tests.conftest import REPO
from tests.web.helpers import CASE_FILES

runner = CliRunner()


@pytest.mark.parametrize(("text", "expected"), [("127.0.0.1:8080", ("127.0.0.1", 8080)), ("[::1]:0", ("::1", 0)),
                                                ("0.0.0.0:9090", ("0.0.0.0", 9090))])
def test_addresses(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize("args", [["--address", "8080"], ["--address", "localhost:http"],
                                  ["--address", "::1:8080"], ["--address", "127.0.0.1:70000"],
                                  [*CASE_FILES[:1], "--simulation", "x.json"],
                                  [*CASE_FILES[:1], "--kubeconfig", "k"]])
def test_usage_errors_exit_2(args: list[str]) -> None:
    result = runner.invoke(app, ["dashboard", *args])
    assert result.exit_code == 2, result.output
    assert "Error" in result.output and "Traceback" not in result.output


def test_a_wrong_simulation_result_is_refused_with_the_field(tmp_path: Path) -> None:
    cases = {"not.json": "{", "empty.json": '{"runs": []}', "list.json": "[1]",
             "old.json": json.dumps({"runs": [{"scenario": "a", "policy": "b", "kpis": {}}]}),
             "nan.json": '{"runs": NaN}',
             "bad.json": json.dumps({"runs": [{"scenario": "a", "policy": "b", "kpis": {}, "per_queue": {},
                                               "per_team": {}, "per_pool": {}, "series": {}, "run": {},
                                               "timeline": {"t": [0, 1], "nodes": {}, "jobs_waiting": [0],
                                                            "jobs_running": [0, 0], "fragmentation_pct": [0, 0],
                                                            "wait_quantiles": {}}}]})}
    expected = {"not.json": "not.json:1:2: not JSON", "empty.json": "the result has no runs",
                "list.json": "no 'runs' list", "old.json": "has no timeline: it was written by an older gpufleet",
                "nan.json": "NaN is not JSON", "bad.json": "runs[0].timeline.jobs_waiting: 1 values for 2 times"}
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(SimulationResultError) as caught:
            load_result(path)
        assert expected[name] in str(caught.value), (name, caught.value)
        result = runner.invoke(app, ["dashboard", "--simulation", str(path)])
        assert result.exit_code == 1 and expected[name] in result.stderr and "Traceback" not in result.output
    missing = runner.invoke(app, ["dashboard", "--simulation", str(tmp_path / "none.json")])
    assert missing.exit_code == 1 and "none.json: No such file or directory" in missing.stderr


def test_the_command_serves_files_and_stops_on_sigterm(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "gpufleet.cli.main", "dashboard", *CASE_FILES,
                             "--address", "127.0.0.1:0"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("gpufleet dashboard of files source"), line
        url = line.split(" at ", 1)[1].split("/ ", 1)[0]
        assert url.startswith("http://127.0.0.1:")
        assert httpx.get(url + "/api/overview", timeout=30.0).json()["counts"]["nodes"] == 18
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "dashboard stopped" in err


def test_a_port_in_use_is_said() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = runner.invoke(app, ["dashboard", *CASE_FILES, "--address", f"127.0.0.1:{port}"])
    assert result.exit_code == 1 and f"--address 127.0.0.1:{port}: cannot listen there" in result.stderr


def _dashboard(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "gpufleet.cli.main", "dashboard", *args, "--address",
                             "127.0.0.1:0"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_missing_input_file_exits_1_without_serving(tmp_path: Path) -> None:
    proc = _dashboard([*CASE_FILES[:1], str(tmp_path / "none.yaml")])
    try:
        out, err = proc.communicate(timeout=120)  # served, it would run until stopped
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, (out, err)
    assert "none.yaml: no such file or folder" in err and "no dashboard served" in err
    assert "gpufleet dashboard of" not in out


def test_a_folder_without_manifests_is_a_warning_and_serves(tmp_path: Path) -> None:
    proc = _dashboard([str(tmp_path)])
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("gpufleet dashboard of files source"), line
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "the folder holds no .yaml, .yml or .json files" in err
