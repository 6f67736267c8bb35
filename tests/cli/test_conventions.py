"""kubectl's conventions on every command: -h with examples, --version, -o text|wide|json|yaml (golden
documents), -n, exit codes 0/1/2, plan --fail-on-pending, shell completion."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

import gpufleet
from gpufleet.cli.main import app
from tests.cli.terminal import clean_env
from tests.conftest import REPO
from tests.fragbench.helpers import write_trace
from tests.sim.helpers import job, pool

runner = CliRunner()
GOLDEN = Path(__file__).parent / "golden"
CASESTUDY = str(REPO / "examples" / "casestudy")
SNAPSHOT = str(REPO / "examples" / "plan" / "snapshot.yaml")
UPDATE = os.environ.get("GPUFLEET_UPDATE_GOLDEN") == "1"  # rewrite the golden files from the current output


def leaf_commands() -> Iterator[tuple[list[str], Any]]:
    """Every command a user can run, as (path of names, click command: typer's vendored click, duck-typed)."""
    def walk(path: list[str], command: Any) -> Iterator[tuple[list[str], Any]]:
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                yield from walk([*path, name], sub)
        else:
            yield path, command
    yield from walk([], typer.main.get_command(app))


LEAVES = sorted(" ".join(path) for path, _ in leaf_commands())


def test_every_command_is_reached() -> None:
    assert {"validate", "plan", "simulate", "demo", "bench fragmentation", "mig layouts", "mig check",
            "nodes render", "scheduler", "version", "completion"} <= set(LEAVES)


@pytest.mark.parametrize("name", LEAVES)
def test_help_with_h_has_examples_that_parse(name: str) -> None:
    result = runner.invoke(app, [*name.split(), "-h"])
    assert result.exit_code == 0, result.output
    assert "Examples:" in result.output
    commands = [line.strip() for line in result.output.split("Examples:", 1)[1].splitlines()
                if line.strip().startswith("gpufleet ")]
    assert commands, result.output
    root = typer.main.get_command(app)
    for line in commands:
        args = shlex.split(line.split(" > ")[0])[1:]
        command, path = root, []
        while hasattr(command, "commands"):
            path.append(args.pop(0))
            command = command.commands[path[-1]]
        assert " ".join(path) == name, line
        command.make_context(" ".join(["gpufleet", *path]), args)  # raises on an unknown or bad option


@pytest.mark.parametrize("name", LEAVES)
def test_an_unknown_option_is_a_usage_error_everywhere(name: str) -> None:
    result = runner.invoke(app, [*name.split(), "--no-such-option"])
    assert result.exit_code == 2, result.output
    assert "Error: No such option: --no-such-option" in result.output
    assert "-h' for help" in result.output


def test_version_option_and_command() -> None:
    for args in (["--version"], ["version"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0 and result.stdout == f"gpufleet {gpufleet.__version__}\n"
    doc = json.loads(runner.invoke(app, ["version", "-o", "json"]).stdout)
    assert doc["gpufleet"] == gpufleet.__version__


def test_bad_output_format_is_a_usage_error() -> None:
    result = runner.invoke(app, ["mig", "layouts", "A30", "-o", "xml"])
    assert result.exit_code == 2 and "'xml' is not one of" in result.output
    result = runner.invoke(app, ["mig", "layouts", "A30", "--json", "-o", "yaml"])
    assert result.exit_code == 2 and "--json means -o json" in result.output


def _invoke(args: list[str], code: int = 0, cwd: Path | None = None) -> str:
    previous = Path.cwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        result = runner.invoke(app, args)
    finally:
        os.chdir(previous)
    assert result.exit_code == code, result.output
    return result.stdout


# (golden name, arguments run from the golden folder, exit code)
GOLDEN_CASES = [
    ("mig-layouts-a30", ["mig", "layouts", "A30"], 0),
    ("mig-check-guide", ["mig", "check", "A100-SXM4-80GB", "3g.40gb:2,1g.10gb"], 1),
    ("mig-check-valid", ["mig", "check", "A100-SXM4-80GB", "3g.40gb@0,3g.40gb@4"], 0),
    ("validate-broken", ["validate", "broken.yaml"], 1),
    ("plan-snapshot", ["plan", "snapshot.yaml", "--until-stable"], 0),
]


@pytest.mark.parametrize(("name", "args", "code"), GOLDEN_CASES, ids=[c[0] for c in GOLDEN_CASES])
@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_documents_match_their_golden_output(name: str, args: list[str], code: int, fmt: str) -> None:
    out = _invoke([*args, "-o", fmt], code, cwd=GOLDEN)
    path = GOLDEN / f"{name}.{fmt}"
    if UPDATE:
        path.write_text(out)
    assert out == path.read_text(), f"{path} differs; GPUFLEET_UPDATE_GOLDEN=1 rewrites it"
    other = _invoke([*args, "-o", "yaml" if fmt == "json" else "json"], code, cwd=GOLDEN)
    assert (json.loads(out) if fmt == "json" else yaml.safe_load(out)) == (
        yaml.safe_load(other) if fmt == "json" else json.loads(other))


def test_json_flag_is_an_alias_of_output_json() -> None:
    for args in (["mig", "layouts", "A30"], ["plan", str(GOLDEN / "snapshot.yaml")]):
        assert _invoke([*args, "--json"]) == _invoke([*args, "-o", "json"])


def test_wide_adds_columns_text_keeps_names() -> None:
    text = _invoke(["plan", CASESTUDY, SNAPSHOT])
    wide = _invoke(["plan", CASESTUDY, SNAPSHOT, "-o", "wide"])
    assert "PODS → NODES" in wide and "PODS → NODES" not in text
    assert "production/embeddings→a100-b-" in wide
    for out in (text, wide):
        assert "research/llm-pretrain" in out and "production/embeddings" in out
    nodes = _invoke(["nodes", "render", CASESTUDY, "-o", "text"])
    assert "l40s-0" in nodes and "nvidia.com/gpu.shared=8" in nodes and "TAINTS" not in nodes
    assert "TAINTS" in _invoke(["nodes", "render", CASESTUDY, "-o", "wide"])


def test_nodes_render_json_is_a_list_of_the_yaml_nodes() -> None:
    docs = list(yaml.safe_load_all(_invoke(["nodes", "render", CASESTUDY])))
    doc = json.loads(_invoke(["nodes", "render", CASESTUDY, "-o", "json"]))
    assert doc["kind"] == "List" and doc["items"] == docs and len(docs) == 18


def test_namespace_filters_the_plan() -> None:
    doc = json.loads(_invoke(["plan", CASESTUDY, SNAPSHOT, "-n", "research", "-o", "json"]))
    names = {w["workload"] for c in doc["cycles"] for k in ("admitted", "preempted", "pending") for w in c[k]}
    assert names == {"research/llm-pretrain"}
    everyone = json.loads(_invoke(["plan", CASESTUDY, SNAPSHOT, "-o", "json"]))
    assert everyone["usage"] == doc["usage"]  # ClusterQueues are cluster-wide: kept whole
    assert len({w["workload"] for w in everyone["cycles"][0]["admitted"]}) == 3


def test_fail_on_pending_fails_a_ci_step() -> None:
    result = runner.invoke(app, ["plan", CASESTUDY, SNAPSHOT, "--until-stable", "--fail-on-pending"])
    assert result.exit_code == 1
    assert "error: 1 workload(s) still pending after cycle" in result.stderr
    assert "research/llm-pretrain (couldn't assign flavors" in result.stderr
    ok = runner.invoke(app, ["plan", CASESTUDY, SNAPSHOT, "--fail-on-pending", "-n", "production", "-o", "json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["cycles"][0]["pending"] == []
    assert runner.invoke(app, ["plan", CASESTUDY, SNAPSHOT]).exit_code == 0  # pending alone is not a failure


def test_errors_in_the_input_exit_1_everywhere(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.yaml")
    nodes_csv, _ = write_trace(tmp_path)
    for args in (["validate", missing], ["plan", missing], ["nodes", "render", missing], ["simulate", missing],
                 ["mig", "check", "A30", "4g.24gb:2"],
                 ["bench", "fragmentation", "--nodes", str(nodes_csv), "--pods", str(tmp_path / "none.csv")]):
        result = runner.invoke(app, args)
        assert result.exit_code == 1, (args, result.output)
        assert result.stderr.startswith("error: "), (args, result.stderr)


def test_bad_option_values_exit_2_everywhere(tmp_path: Path) -> None:
    f = tmp_path / "in.yaml"
    f.write_text(pool("p", 1, 4) + job("a"))
    nodes_csv, pods_csv = write_trace(tmp_path)
    bench = ["bench", "fragmentation", "--nodes", str(nodes_csv), "--pods", str(pods_csv)]
    for args in (["simulate", str(f), "--duration", "soon"], ["simulate", str(f), "--compare", "a,b"],
                 ["plan", str(f), "--cycles", "0"], ["mig", "layouts", "T4"],
                 ["mig", "layouts", "A30", "--profiles", "9g.99gb"], [*bench, "--jobs", "0"],
                 [*bench, "--seeds", "x"], ["completion", "tcsh"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert "Error: Invalid value" in result.output, (args, result.output)


def test_simulate_and_bench_print_documents_on_stdout(tmp_path: Path) -> None:
    f = tmp_path / "in.yaml"
    f.write_text(pool("p", 1, 4) + job("a", gpus=2, duration="1h"))
    out = tmp_path / "o.json"
    result = runner.invoke(app, ["simulate", str(f), "-o", "json", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == json.loads(out.read_text())  # -o prints what --json FILE writes
    nodes_csv, pods_csv = write_trace(tmp_path)
    result = runner.invoke(app, ["bench", "fragmentation", "--nodes", str(nodes_csv), "--pods", str(pods_csv),
                                 "--policy", "fgd", "--seeds", "1", "-o", "yaml"])
    assert result.exit_code == 0, result.output
    assert [r["policy"] for r in yaml.safe_load(result.stdout)["results"]] == ["fgd"]


def _gpufleet_script() -> Path:
    script = Path(sys.executable).parent / "gpufleet"
    if not script.exists():
        pytest.skip(f"the gpufleet console script is not installed next to {sys.executable}")
    return script


def test_completion_script_and_candidates() -> None:
    script = runner.invoke(app, ["completion", "bash"])
    assert script.exit_code == 0 and "_GPUFLEET_COMPLETE=complete_bash" in script.stdout
    gpufleet_bin = _gpufleet_script()

    def candidates(words: str) -> list[str]:
        env = clean_env(_GPUFLEET_COMPLETE="complete_bash", COMP_WORDS=words,
                        COMP_CWORD=str(len(words.split()) - (0 if words.endswith(" ") else 1)))
        done = subprocess.run([str(gpufleet_bin)], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert candidates("gpufleet pl") == ["plan"]
    assert candidates("gpufleet plan -o ") == ["text", "wide", "json", "yaml"]
    assert "A100-SXM4-80GB" in candidates("gpufleet mig check A1")
