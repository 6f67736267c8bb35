"""The one console: user text is never markup, messages never hard-wrap, tables fold to the terminal and are
never cut, colour only on a terminal and never with NO_COLOR. Run through the real program, in pipes and in
pseudo-terminals of several widths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.cli.main import app
from tests.cli.terminal import COLOUR, clean_env, in_terminal, piped, visible
from tests.conftest import REPO
from tests.fragbench.helpers import write_trace

runner = CliRunner()

# Markup-like text in every user-controlled field of a manifest: the file name, names, namespaces, labels,
# annotations, quantities, queue names.
MARKUP_YAML = """apiVersion: v1
kind: Pod
metadata:
  name: "[bold]a"
  namespace: "[red]ns"
  labels: {"[/x]": "[/x]", kueue.x-k8s.io/queue-name: "[link=x]q"}
  annotations: {gpufleet.io/gpu-fraction: "[/]", gpufleet.io/gpu-memory: ":smile:"}
spec:
  containers:
  - name: "[i]c"
    resources: {limits: {nvidia.com/gpu: "[/x]", cpu: "[bold]3g.20gb"}}
"""
LITERALS = ("[bold]a", "[red]ns", "'[/x]'", "[bold]3g.20gb", "[/]", ":smile:")

LONG_NAME = "llm-pretrain-" + "with-a-name-long-enough-to-fold-" * 3 + "end"
SNAPSHOT = REPO / "examples" / "plan" / "snapshot.yaml"
CASESTUDY = REPO / "examples" / "casestudy"


def _long_snapshot(tmp_path: Path) -> Path:
    path = tmp_path / "long.yaml"
    path.write_text(SNAPSHOT.read_text().replace("name: llm-pretrain", f"name: {LONG_NAME}"))
    return path


@pytest.fixture
def markup_file(tmp_path: Path) -> Path:
    path = tmp_path / "[bold]manifest[x].yaml"
    path.write_text(MARKUP_YAML)
    return path


@pytest.mark.parametrize("command", [["validate"], ["plan"], ["nodes", "render"]])
@pytest.mark.parametrize("columns", ["40", "80", "200", None])
def test_markup_in_manifests_is_printed_literally(markup_file: Path, command: list[str], columns: str | None) -> None:
    env = {"COLUMNS": columns} if columns else {}
    result = runner.invoke(app, [*command, str(markup_file)], env=env)
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    assert str(markup_file) in result.output
    for text in LITERALS[:4]:
        assert text in result.output, text
    # One problem, one line, whatever the width.
    assert all(line.startswith(("error: ", "warning: ")) for line in result.stderr.splitlines()), result.stderr


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_markup_in_manifests_survives_documents(markup_file: Path, fmt: str) -> None:
    result = runner.invoke(app, ["validate", str(markup_file), "-o", fmt])
    assert result.exit_code == 1
    doc = json.loads(result.stdout) if fmt == "json" else yaml.safe_load(result.stdout)
    assert doc["valid"] is False
    messages = " ".join(p["message"] for p in doc["problems"])
    assert "'[/x]'" in messages and "[bold]3g.20gb" in messages
    assert {p["file"] for p in doc["problems"]} == {str(markup_file)}


def test_markup_in_a_mig_layout_is_printed_literally() -> None:
    result = runner.invoke(app, ["mig", "check", "A100-SXM4-80GB", "[bold]3g.20gb"])
    assert result.exit_code == 1
    assert "no MIG profile '[bold]3g.20gb'" in result.output


def test_an_error_is_one_line_in_a_pipe_under_a_long_path(tmp_path: Path) -> None:
    # A checkout or temp folder deep enough that any hard wrap at 80 columns would split the message.
    deep = tmp_path.joinpath(*(["a-rather-long-folder-name-for-a-checkout"] * 6))
    deep.mkdir(parents=True)
    nodes_csv, pods_csv = write_trace(deep)
    pods_csv.write_text(pods_csv.read_text() + "bad,1,1,1,2000,,,,,,\n")
    ran = piped("bench", "fragmentation", "--nodes", str(nodes_csv), "--pods", str(pods_csv), "--policy", "fgd",
                "--seeds", "1", "--jobs", "1", cwd=deep)
    assert ran.code == 1, ran.stderr
    (line,) = [x for x in ran.stderr.splitlines() if "rows rejected" in x]
    assert line.startswith(f"error: {pods_csv}: 1 of 121 rows rejected")
    assert f"{pods_csv}:122: gpu_milli: 2000 out of range" in ran.stderr  # the row's own line, unsplit
    bad = deep / "bad.yaml"
    bad.write_text(MARKUP_YAML)
    ran = piped("validate", str(bad), cwd=deep)
    assert ran.code == 1
    _one_line_per_problem(ran.stderr.splitlines())
    assert ran.stdout == "" and "\x1b[" not in ran.stderr


def test_piped_tables_keep_one_row_per_line_and_no_colour(tmp_path: Path) -> None:
    ran = piped("plan", str(CASESTUDY), str(_long_snapshot(tmp_path)), "-o", "wide")
    assert ran.code == 0, ran.stderr
    assert "\x1b[" not in ran.stdout
    (row,) = [x for x in ran.stdout.splitlines() if LONG_NAME in x]
    assert "pending" in row and "4 more needed" in row  # the whole reason on the workload's line


@pytest.mark.parametrize("columns", [60, 80, 132])
def test_tables_fold_to_the_terminal_and_never_cut(tmp_path: Path, columns: int) -> None:
    ran = in_terminal("plan", str(CASESTUDY), str(_long_snapshot(tmp_path)), "-o", "wide", columns=columns)
    assert ran.code == 0, ran.stdout
    screen = visible(ran.stdout)
    assert max(len(line) for line in screen.splitlines()) <= columns
    assert "…" not in screen
    # Folded, every character of the name is there, in order, in the first column.
    first = [line.split(" ", 1)[0] for line in screen.splitlines()]
    start = next(i for i, cell in enumerate(first) if cell.startswith("research/"))
    name = ""
    for cell in first[start:]:
        name += cell
        if name.endswith("end"):
            break
    assert name == f"research/{LONG_NAME}"


def test_colour_on_a_terminal_and_not_with_no_color() -> None:
    args = ("plan", str(CASESTUDY), str(SNAPSHOT))
    coloured = in_terminal(*args, columns=120)
    assert coloured.code == 0 and COLOUR.search(coloured.stdout), coloured.stdout[:400]
    plain = in_terminal(*args, columns=120, env=clean_env(TERM="xterm-256color", NO_COLOR="1"))
    assert plain.code == 0 and "admitted" in plain.stdout
    assert not COLOUR.search(plain.stdout), plain.stdout[:400]


def test_an_error_on_a_narrow_terminal_is_not_hard_wrapped(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(MARKUP_YAML)
    ran = in_terminal("validate", str(bad), columns=40)
    assert ran.code == 1
    # The terminal wraps the line itself; the program wrote one line per problem.
    _one_line_per_problem([x for x in visible(ran.stdout).splitlines() if x])


def _one_line_per_problem(lines: list[str]) -> None:
    assert all(x.startswith("error: ") for x in lines), lines
    assert lines[-1].startswith(f"error: {len(lines) - 1} error(s) in 1 document(s)"), lines
