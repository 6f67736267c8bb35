"""What a new user met following the README from a fresh clone under a long path, each kept fixed: every line
of an error is an ``error:`` line (simulate and advise listed the input's problems on bare lines), a missing
file is named once, and hostile input (markup-like text, a missing file, a folder without manifests, an empty
file) never ends in a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli import console
from gpufleet.cli.main import app
from tests.cli.terminal import piped
from tests.conftest import REPO
from tests.fragbench.helpers import write_trace

runner = CliRunner()


def test_an_error_of_several_lines_is_an_error_line_each(capsys: pytest.CaptureFixture[str]) -> None:
    console.error("the input has problems:\n  a.yaml:3: Pod x: bad\n\nwarning: a.yaml:9: Pod y: odd\nerror: b.yaml: z")
    assert capsys.readouterr().err.splitlines() == [
        "error: the input has problems:", "error: a.yaml:3: Pod x: bad", "warning: a.yaml:9: Pod y: odd",
        "error: b.yaml: z"]
    console.warning("two\nlines")
    assert capsys.readouterr().err.splitlines() == ["warning: two", "warning: lines"]


@pytest.mark.parametrize("command", [["simulate"], ["advise"], ["validate"], ["plan"], ["nodes", "render"]])
def test_a_missing_file_is_one_error_line_naming_it_once(tmp_path: Path, command: list[str]) -> None:
    missing = str(tmp_path / "[bold]missing[/].yaml")
    result = runner.invoke(app, [*command, missing])
    assert result.exit_code == 1, result.output
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), result.stderr
    assert f"error: {missing}: no such file or folder; fix: check the path" in result.stderr
    assert result.stderr.count(missing) == 1


def test_simulate_lists_every_problem_as_an_error_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("""apiVersion: v1
kind: Pod
metadata: {name: "[bold]a[/]"}
spec: {containers: [{name: c}]}
---
apiVersion: v1
kind: Node
metadata: {name: "[red]n"}
""")
    ran = piped("simulate", str(bad), "-o", "json")
    assert ran.code == 1 and ran.stdout == ""
    lines = ran.stderr.splitlines()
    assert lines[0] == "error: the input has problems:"
    assert len(lines) >= 3 and all(line.startswith(f"error: {bad}:") for line in lines[1:]), ran.stderr
    assert "Pod [bold]a[/]" in ran.stderr and "Node [red]n" in ran.stderr  # literally


@pytest.mark.parametrize("command", [["validate"], ["plan"], ["lint"], ["nodes", "render"], ["simulate"],
                                     ["advise"]])
def test_an_empty_file_and_a_folder_without_manifests(tmp_path: Path, command: list[str]) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    folder = tmp_path / "no-manifests"
    folder.mkdir()
    (folder / "README.txt").write_text("not a manifest")
    for path in (empty, folder):
        result = runner.invoke(app, [*command, str(path)])
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        # Nothing to simulate is an error in the input; the others have nothing to report.
        assert result.exit_code == (1 if command in (["simulate"], ["advise"]) else 0), result.output
        assert all(line.startswith(("error: ", "warning: ")) for line in result.stderr.splitlines())
    assert "the folder holds no .yaml, .yml or .json files" in runner.invoke(app, [*command, str(folder)]).stderr


def test_bench_says_the_processes_it_used(tmp_path: Path) -> None:
    nodes_csv, pods_csv = write_trace(tmp_path)
    result = runner.invoke(app, ["bench", "fragmentation", "--nodes", str(nodes_csv), "--pods", str(pods_csv),
                                 "--policy", "fgd", "--seeds", "1", "--jobs", "4"])
    assert result.exit_code == 0, result.output
    assert "1 run(s) of " in result.stderr and " on 1 process(es); one line per run" in result.stderr
    (last,) = [line for line in result.stderr.splitlines() if "s wall (" in line]
    assert last.startswith("1 run(s) in ") and "(1 process(es) of --jobs 4, tie-break first)" in last, last


def test_the_scheduler_example_runs_it_as_deploy_and_the_chart_do() -> None:
    # The -h example once named /etc/gpufleet/scheduler.yaml, a file the Deployment never mounts.
    help_text = runner.invoke(app, ["scheduler", "-h"]).output
    (example,) = [line.strip() for line in help_text.splitlines() if line.strip().startswith("gpufleet scheduler --")
                  and "--config" in line]
    args = example.split()[1:]
    chart = REPO / "charts" / "gpufleet" / "templates" / "deployment.yaml"
    for manifest in (REPO / "deploy" / "deployment.yaml", chart):
        text = manifest.read_text()
        assert f"--config, {args[args.index('--config') + 1]}," in text, manifest
        assert "--leader-elect" in text and "--scheduler-name" in text
