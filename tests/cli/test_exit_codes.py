"""Exit codes of the long-running and cluster-facing commands: 1 for what the command line points to (a
configuration file, a kubeconfig, a trace that cannot be read or is invalid), each said in one ``error:`` line
naming the file, the field and the fix; 2 only for the command line itself."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app

runner = CliRunner()


@pytest.fixture
def no_kubeconfig(tmp_path: Path) -> str:
    return str(tmp_path / "no-such-kubeconfig")


def _config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "scheduler config.yaml"
    path.write_text(text)
    return str(path)


def _lines(stderr: str) -> list[str]:
    lines = stderr.splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), stderr
    return lines


@pytest.mark.parametrize(("text", "says"), [
    ("binding: [\n", ":2: invalid YAML"),
    ("binding:\n  workers: -3\n", ":2: SchedulerConfiguration: binding.workers: must be at least 1, got -3; "
                                  "fix: use a value of at least 1"),
    ("cyclePeriod: soon\n", ":1: SchedulerConfiguration: cyclePeriod: 'soon' is not a positive duration; fix:"),
    ("nope: 1\n", ":1: SchedulerConfiguration: nope: unknown field nope; fix: remove it or fix its spelling"),
])
def test_scheduler_config_errors_exit_1_naming_file_field_and_fix(tmp_path: Path, no_kubeconfig: str, text: str,
                                                                  says: str) -> None:
    config = _config(tmp_path, text)
    result = runner.invoke(app, ["scheduler", "--config", config, "--kubeconfig", no_kubeconfig])
    assert result.exit_code == 1, result.output
    first, *_, last = _lines(result.stderr)
    assert first.startswith(f"error: {config}{says}"), first
    assert last == f"error: 1 error(s) in the configuration file {config}: the scheduler did not start"


def test_scheduler_unreadable_config_exits_1(tmp_path: Path, no_kubeconfig: str) -> None:
    for missing in (str(tmp_path / "missing.yaml"), str(tmp_path)):
        result = runner.invoke(app, ["scheduler", "--config", missing, "--kubeconfig", no_kubeconfig])
        assert result.exit_code == 1, result.output
        assert _lines(result.stderr)[0].startswith(f"error: {missing}: cannot read the configuration: ")
        assert "fix: check the --config path" in result.stderr


def test_scheduler_missing_kubeconfig_exits_1(tmp_path: Path, no_kubeconfig: str) -> None:
    result = runner.invoke(app, ["scheduler", "--config", _config(tmp_path, "schedulerName: s\n"),
                                 "--kubeconfig", no_kubeconfig])
    assert result.exit_code == 1, result.output
    assert _lines(result.stderr) == [f"error: no kubeconfig found at {no_kubeconfig}"]


def test_scheduler_bad_options_stay_usage_errors() -> None:
    for args, says in ((["--log-level", "loud"], "Invalid value for '--log-level': 'loud' is not one of"),
                       (["--leader-elect=maybe"], "Error")):
        result = runner.invoke(app, ["scheduler", *args])
        assert result.exit_code == 2, result.output
        assert says in result.output and "Traceback" not in result.output


def test_dashboard_and_snapshot_missing_kubeconfig_exit_1(tmp_path: Path, no_kubeconfig: str) -> None:
    for args in (["dashboard", "--kubeconfig", no_kubeconfig, "--address", "127.0.0.1:0"],
                 ["snapshot", "-o", str(tmp_path / "snap"), "--kubeconfig", no_kubeconfig]):
        result = runner.invoke(app, args)
        assert result.exit_code == 1, (args, result.output)
        assert _lines(result.stderr) == [f"error: no kubeconfig found at {no_kubeconfig}"], args


def test_snapshot_output_that_is_a_file_is_a_usage_error(tmp_path: Path) -> None:
    taken = tmp_path / "a-file"
    taken.write_text("")
    result = runner.invoke(app, ["snapshot", "-o", str(taken)])
    assert result.exit_code == 2, result.output
    assert "Invalid value for '-o'" in result.output and "is not a folder" in result.output


def test_bench_without_the_trace_exits_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFLEET_OPENB_DIR", str(tmp_path / "no-trace-here"))
    result = runner.invoke(app, ["bench", "fragmentation", "--seeds", "1"])
    assert result.exit_code == 1, result.output
    assert _lines(result.stderr)[0].startswith("error: the openb trace was not found: give --nodes and --pods")
