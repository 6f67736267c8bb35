"""``gpufleet simulate --report``: report.md with its plots and one self-contained report.html (opened in
headless Chromium), a missing matplotlib said before simulating, and the case study's files simulated as the
demo runs them."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.sim.report.build import Report, Section, TableBlock, duration_text, to_markdown
from gpufleet.sim.report.html import to_html
from tests.chromium import browser_page
from tests.conftest import REPO
from tests.sim.helpers import job, pool

runner = CliRunner()
CASESTUDY = REPO / "examples" / "casestudy"


def _simulate(*args: str) -> Any:
    result = runner.invoke(app, ["simulate", *args])
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("report")
    _simulate("--duration", "1d", "--report", str(folder))
    return folder


def test_markdown_and_html_beside_the_plots(report_dir: Path) -> None:
    assert {p.name for p in report_dir.iterdir()} == {
        "report.md", "report.html", "allocation_utilization.png", "wait_cdf.png", "cost_per_team.png"}
    md = (report_dir / "report.md").read_text()
    html = (report_dir / "report.html").read_text()
    md_sections = re.findall(r"^## (.+)$", md, flags=re.M)
    html_sections = [s.replace("&#x27;", "'") for s in re.findall(r"<h2>(.+?)</h2>", html)]
    assert md_sections == html_sections and "Published claims beside ours" in md_sections
    assert md.count("](") == 3 and "data:image/png;base64," in html and 'src="http' not in html
    # Waits and makespans in hours and days, not seconds.
    kpis = md.split("## KPIs", 1)[1].split("\n## ", 1)[0]
    wait_rows = [line for line in kpis.splitlines() if line.startswith(("| queue wait", "| makespan"))]
    assert len(wait_rows) == 4 and all(re.search(r"\d (s|min|h|d) \|", row) for row in wait_rows), wait_rows
    assert "(s)" not in kpis


def test_html_report_opens_offline_in_headless_chromium(report_dir: Path) -> None:
    page_url = (report_dir / "report.html").as_uri()
    with browser_page(1000, 800) as page:
        requested: list[str] = page.requested
        page.goto(page_url, wait_until="load")
        assert page.title() == "gpufleet simulate: the case study"
        images = page.evaluate(
            "() => Array.from(document.images).map(i => ({alt: i.alt, src: i.src.slice(0, 22),"
            " w: i.naturalWidth, shown: i.getBoundingClientRect().width}))")
        assert len(images) == 3
        for image in images:
            assert image["src"] == "data:image/png;base64,", image
            assert image["w"] > 100 and 0 < image["shown"] <= 1000, image  # decoded, and fits the page
        kpi_rows = page.evaluate(
            "() => Array.from(document.querySelector('table').rows).map(r =>"
            " Array.from(r.cells).map(c => c.innerText))")
        assert kpi_rows[0] == ["KPI", "before (kube-default)", "after (gpufleet)"]
        assert any(r[0] == "queue wait p99 (per attempt)" for r in kpi_rows)
        assert kpi_rows[1][0] == "work done (useful GPU-hours)"
        align = page.evaluate("() => getComputedStyle(document.querySelector('td.num')).textAlign")
        assert align == "right"
        assert requested == [page_url]  # nothing else fetched: plots and styles are in the file


def test_without_matplotlib_it_is_said_first_and_the_reports_are_written(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    bad = tmp_path / "bad.yaml"
    bad.write_text(pool("p", 1, 4) + job("a", annotations='    sim.gpufleet.io/gpu-utilization: "high"'))
    refused = runner.invoke(app, ["simulate", str(bad), "--report", str(tmp_path / "none")])
    assert refused.exit_code == 1
    assert refused.stderr.startswith("warning: the report will have no plots: matplotlib is not installed")
    result = _simulate("--duration", "1d", "--report", str(tmp_path / "r"))
    assert result.stderr.startswith("warning: the report will have no plots")
    assert "(no plots)" in result.stderr and "Traceback" not in result.output
    assert {p.name for p in (tmp_path / "r").iterdir()} == {"report.md", "report.html"}
    assert "No plots: matplotlib is not installed" in (tmp_path / "r" / "report.md").read_text()
    assert "No plots: matplotlib is not installed" in (tmp_path / "r" / "report.html").read_text()


def _runs(*args: str) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = json.loads(_simulate(*args, "-o", "json").stdout)["runs"]
    for run in runs:
        run["run"].pop("wall_s")
    return runs


def test_the_case_study_files_reproduce_the_demo() -> None:
    demo = _runs("--duration", "1d")
    files = _runs(str(CASESTUDY), "--duration", "1d")
    assert [(r["scenario"], r["policy"]) for r in files] == [("before", "kube-default"), ("after", "gpufleet")]
    assert files == demo
    # And the published claims are shown for them, as for the demo.
    assert "published claim" in _simulate(str(CASESTUDY), "--duration", "1d").stdout


def test_a_changed_study_runs_before_and_after_without_the_guides_claims(tmp_path: Path) -> None:
    study = tmp_path / "study"
    shutil.copytree(CASESTUDY, study)
    workload = study / "workload.yaml"
    workload.write_text(workload.read_text().replace("seed: 20250101", "seed: 7"))
    result = _simulate(str(study), "--duration", "1d")
    assert "before (kube-default)" in result.stdout and "after (gpufleet)" in result.stdout
    assert "published claim" not in result.stdout
    after = _runs(str(study), "--duration", "1d", "--policy", "kube-default")
    assert [(r["scenario"], r["policy"]) for r in after] == [("after", "kube-default")]
    refused = runner.invoke(app, ["simulate", "-", "--duration", "1d"], input=workload.read_text())
    assert refused.exit_code == 1 and "is read from YAML files only" in refused.stderr


def test_job_success_says_how_many_jobs_ended(tmp_path: Path) -> None:
    f = tmp_path / "in.yaml"
    f.write_text(pool("p", 3, 4) + job("ddp", pods=16, duration="2h") + job("small", duration="1h"))
    out = _simulate(str(f), "--failures", "none").stdout  # gpufleet: the 16-GPU gang never starts on 12 GPUs
    (row,) = [line for line in out.splitlines() if line.startswith("job success")]
    assert row.split()[-4:] == ["(1", "of", "2", "ended)"]


@pytest.mark.parametrize(("seconds", "text"), [(None, "n/a"), (0.0, "0 s"), (89.0, "89 s"), (600.0, "10 min"),
                                                (5400.0, "1.5 h"), (47 * 3600.0, "47.0 h"), (3 * 86400.0, "3.0 d")])
def test_durations_in_the_unit_people_use(seconds: float | None, text: str) -> None:
    assert duration_text(seconds) == text


def test_html_escapes_every_text() -> None:
    report = Report("<t>", ["a *b* <c> `d&e`"], [Section("<s>", [TableBlock.of(["<h>", "n"], [["<x>", "1"]])])])
    html = to_html(report, {})
    assert "<t>" not in html and "&lt;t&gt;" in html and "&lt;s&gt;" in html and "&lt;x&gt;" in html
    assert "<em>b</em>" in html and "&lt;c&gt;" in html and "<code>d&amp;e</code>" in html
    assert "| <x> | 1 |" in to_markdown(report)


def test_the_report_writes_durations_and_amounts_as_people_read_them(report_dir: Path) -> None:
    """Issue 29, item 9: no "16709 s", no "3734.511 GPU-hours"."""
    text = (report_dir / "report.md").read_text()
    assert "Inference held" in text
    assert not re.search(r"\b\d{3,} s\b", text), re.findall(r".{40}\b\d{3,} s\b", text)
    assert not re.search(r"\d\.\d{3,}", text), re.findall(r".{40}\d\.\d{3,}", text)
    held = re.search(r"Inference held ([\d,.]+) GPU-hours for ([\d,]+) CHF", text)
    assert held is not None and re.fullmatch(r"\d{1,3}(,\d{3})*\.\d", held.group(1)), held
