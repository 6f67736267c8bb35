"""``gpufleet bench fragmentation`` through typer's runner, on a small synthetic trace."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from tests.fragbench.helpers import write_trace

runner = CliRunner()


def test_fragmentation_table_json_and_plot(tmp_path: Path) -> None:
    nodes_csv, pods_csv = write_trace(tmp_path)
    out_json, out_png = tmp_path / "r.json", tmp_path / "r.png"
    result = runner.invoke(app, ["bench", "fragmentation", "--nodes", str(nodes_csv), "--pods", str(pods_csv),
                                 "--policy", "fgd", "--policy", "FGDplus", "--seeds", "1-2",
                                 "--json", str(out_json), "--plot", str(out_png)])
    assert result.exit_code == 0, result.output
    assert "fgdplus" in result.output and "Unallocated GPU" in result.output
    doc = json.loads(out_json.read_text())
    assert [r["policy"] for r in doc["results"]] == ["fgd", "fgdplus"]
    assert all(r["seeds"] == [1, 2] and r["trace"] == "pods" for r in doc["results"])
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_arguments_exit_2_and_a_missing_file_exits_1(tmp_path: Path) -> None:
    nodes_csv, pods_csv = write_trace(tmp_path)
    base = ["bench", "fragmentation", "--nodes", str(nodes_csv), "--pods", str(pods_csv)]
    for extra, message in ((["--seeds", "9-1"], "empty seed range"), (["--policy", "tetris"], "unknown policy"),
                           (["--tie-break", "last"], "unknown tie-break")):
        result = runner.invoke(app, base + extra)
        assert result.exit_code == 2, (extra, result.output)
        assert message in result.output
    missing = runner.invoke(app, ["bench", "fragmentation", "--nodes", str(tmp_path / "none.csv"),
                                  "--pods", str(pods_csv)])
    assert missing.exit_code == 1 and "no such file" in missing.output  # an input that cannot be read


def test_damaged_trace_exits_1(tmp_path: Path) -> None:
    nodes_csv, pods_csv = write_trace(tmp_path)
    pods_csv.write_text(pods_csv.read_text() + "bad,1,1,1,2000,,,,,,\n")
    result = runner.invoke(app, ["bench", "fragmentation", "--nodes", str(nodes_csv), "--pods", str(pods_csv),
                                 "--policy", "fgd", "--seeds", "1"])
    assert result.exit_code == 1 and "rows rejected" in result.output


def test_a_plot_without_matplotlib_is_refused_before_running(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    nodes_csv, pods_csv = write_trace(tmp_path)
    result = runner.invoke(app, ["bench", "fragmentation", "--nodes", str(nodes_csv), "--pods", str(pods_csv),
                                 "--policy", "fgd", "--seeds", "1", "--plot", str(tmp_path / "p.png")])
    assert result.exit_code == 2 and "cannot write a plot: matplotlib is not installed" in result.output
    assert "[1/1]" not in result.output  # nothing ran


def test_jobs_default_to_the_cores_and_progress_is_one_line_per_run(tmp_path: Path) -> None:
    from gpufleet.cli.bench import available_cores

    nodes_csv, pods_csv = write_trace(tmp_path)
    result = runner.invoke(app, ["bench", "fragmentation", "--nodes", str(nodes_csv), "--pods", str(pods_csv),
                                 "--policy", "fgd", "--seeds", "1-3"])
    assert result.exit_code == 0, result.output
    assert f"3 run(s) of pods on {min(3, available_cores())} process(es)" in result.stderr
    progress = [line for line in result.stderr.splitlines() if line.startswith("[")]
    assert [line.split("]")[0] for line in progress] == ["[1/3", "[2/3", "[3/3"]
    assert "left" in progress[0] and "left" not in progress[-1]
    assert f"process(es) of --jobs {available_cores()}," in result.stderr
    help_text = " ".join(runner.invoke(app, ["bench", "fragmentation", "-h"]).output.split())
    assert "default: the number of cores" in help_text
