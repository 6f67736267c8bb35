"""Output habits a newcomer meets (issue 29, items 8 and 9): a closed pipe, narrow widths, demo's report, help that
tells the truth, ambiguous model names, the plan's last cycle and a plan made without nodes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpufleet.api.manifests import load_manifests
from gpufleet.cli import calibration
from gpufleet.cli import simulate as simulate_module
from gpufleet.cli.main import app
from gpufleet.web.source_files import QUOTA_ONLY, FilesSource
from tests.cli.terminal import COMMAND, TIMEOUT_S, clean_env, in_terminal, piped, visible
from tests.conftest import REPO

runner = CliRunner()
CASESTUDY = str(REPO / "examples" / "casestudy")
QUEUES = str(REPO / "examples" / "casestudy" / "queues.yaml")
SNAPSHOT = str(REPO / "examples" / "plan" / "snapshot.yaml")


def _into_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """The program writing into a pipe whose reader has gone (``| head -2`` after its lines): the read end is
    closed before the program starts, so its first write meets the closed pipe whatever the buffer sizes."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([*COMMAND, *args], stdout=write, stderr=subprocess.PIPE, text=True, env=clean_env(),
                              timeout=TIMEOUT_S, check=False)
    finally:
        os.close(write)


@pytest.mark.parametrize("args", [
    ["plan", CASESTUDY, SNAPSHOT],
    ["plan", CASESTUDY, SNAPSHOT, "-o", "json"],
    ["mig", "layouts", "A100-SXM4-40GB"],
    ["mig", "layouts", "A100-SXM4-40GB", "-o", "yaml"],
    ["--help"],
], ids=["plan", "plan-json", "mig-layouts", "mig-layouts-yaml", "help"])
def test_a_closed_pipe_ends_quietly_with_status_0(args: list[str]) -> None:
    done = _into_closed_pipe(*args)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_demo_takes_a_report_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(simulate_module, "simulate", lambda **kwargs: seen.update(kwargs))
    result = runner.invoke(app, ["demo", "--report", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert seen["report"] == tmp_path / "out"


def test_simulate_help_names_what_demo_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example said to be what demo runs is what demo runs (demo calibrates; plain simulate does not)."""
    seen: dict[str, Any] = {}
    monkeypatch.setattr(simulate_module, "simulate", lambda **kwargs: seen.update(kwargs))
    assert runner.invoke(app, ["demo"]).exit_code == 0
    lines = [x.strip() for x in runner.invoke(app, ["simulate", "-h"], env={"COLUMNS": "400"}).output.splitlines()]
    claims = [i for i, x in enumerate(lines) if x.startswith("#") and "what `gpufleet demo` runs" in x]
    assert claims, lines
    for i in claims:
        command = lines[i + 1].split()
        assert command[:2] == ["gpufleet", "simulate"] and command[2:] != []
        options = dict(zip(command[2::2], command[3::2], strict=True))
        assert options == {"--calibrate": seen["calibrate"], "--attribute": seen["attribute"]}
    assert seen["calibrate"] == calibration.GUIDE_BASELINE


@pytest.mark.parametrize("name", ["A100", "a100", "NVIDIA-A100"])
def test_an_ambiguous_model_is_a_usage_error_listing_the_choices(name: str) -> None:
    for command in (["mig", "check", name, "1g.10gb"], ["mig", "layouts", name]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2, result.output
        assert all(c in result.output for c in ("A100-SXM4-40GB", "A100-SXM4-80GB")), result.output


@pytest.mark.parametrize("name", ["A100-SXM4-80GB", "A100-80GB", "NVIDIA A100-SXM4-40GB", "H200", "A30",
                                  "H100", "h100"])  # h100: H100-SXM5-80GB's declared alias
def test_a_model_named_exactly_is_taken(name: str) -> None:
    assert runner.invoke(app, ["mig", "layouts", name]).exit_code == 0


def _plan(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["plan", *args, "-o", "json"])
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def test_until_stable_prints_no_trailing_cycle_that_changed_nothing() -> None:
    stable = _plan(CASESTUDY, SNAPSHOT, "--until-stable")
    two = _plan(CASESTUDY, SNAPSHOT, "--cycles", "2")
    assert len(two["cycles"]) == 2 and not two["cycles"][1]["admitted"] and not two["cycles"][1]["preempted"]
    assert len(stable["cycles"]) == 1
    assert stable["cycles"][0]["pending"] == two["cycles"][1]["pending"]  # the final reasons
    text = piped("plan", CASESTUDY, SNAPSHOT, "--until-stable")
    assert text.code == 0 and "cycle 2" not in text.stdout


def test_a_plan_without_nodes_says_it_is_quota_only_everywhere() -> None:
    assert _plan(QUEUES, SNAPSHOT)["quotaOnly"] is True
    assert _plan(CASESTUDY, SNAPSHOT)["quotaOnly"] is False
    text = piped("plan", QUEUES, SNAPSHOT)
    assert text.code == 0 and text.stdout.startswith(QUOTA_ONLY + "\n"), text.stdout[:300]
    assert "admitted by quota only" in text.stdout
    with_nodes = piped("plan", CASESTUDY, SNAPSHOT)
    assert "quota only" not in with_nodes.stdout
    dashboard = FilesSource(load_manifests([QUEUES, SNAPSHOT]), "no nodes").cluster()
    assert dashboard.notes[0] == QUOTA_ONLY
    assert QUOTA_ONLY not in FilesSource(load_manifests([CASESTUDY, SNAPSHOT]), "nodes").cluster().notes


def test_the_dashboard_counts_the_cycles_plan_prints() -> None:
    printed = len(_plan(CASESTUDY, SNAPSHOT, "--until-stable")["cycles"])
    notes = FilesSource(load_manifests([CASESTUDY, SNAPSHOT]), "nodes").cluster().notes
    said = [n for n in notes if n.startswith("planned as gpufleet plan --until-stable")]
    assert said == [f"planned as gpufleet plan --until-stable: {printed} cycle{'s' if printed != 1 else ''}"]


NAMES = ("default/stray", "production/embeddings", "data-science/notebook-anna", "research/llm-pretrain",
         "nvidia.com/mig-1g.10gb=a100-mig-1g10gb", "production/embeddings→a100-b-1",
         "(MIG-f839f107-8bed-5e8c-85c3-ff5444aa6be2)", "nvidia.com/gpu.shared")


def test_columns_50_in_a_pipe_breaks_no_name_the_lines_run_long() -> None:
    ran = piped("plan", CASESTUDY, SNAPSHOT, "-o", "wide", env=clean_env(COLUMNS="50"))
    assert ran.code == 0, ran.stderr
    words = {w for line in ran.stdout.splitlines() for w in line.split()}
    assert all(name in words for name in NAMES), sorted(words)
    rows = [line for line in ran.stdout.splitlines() if line.startswith("production/embeddings ")]
    assert len(rows) == 1 and "admitted" in rows[0] and "production" in rows[0]  # a row still starts on one line


@pytest.mark.parametrize("columns", [50, 70])
def test_a_narrow_terminal_wraps_between_columns_never_inside_a_name(columns: int) -> None:
    ran = in_terminal("plan", CASESTUDY, SNAPSHOT, "-o", "wide", columns=columns)
    assert ran.code == 0, ran.stdout
    screen = visible(ran.stdout)
    assert max(len(line) for line in screen.splitlines()) <= columns
    words = {w for line in screen.splitlines() for w in line.split()}
    assert all(name in words for name in NAMES), sorted(words)
    usage = in_terminal("plan", CASESTUDY, SNAPSHOT, columns=columns)
    assert "nvidia.com/mig-3g.40gb" in {w for line in visible(usage.stdout).splitlines() for w in line.split()}
