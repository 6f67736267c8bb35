"""``gpufleet simulate --report DIR``: the report's files (``report.md`` with its PNG plots, and the self-contained
``report.html``). The report itself is built in :mod:`gpufleet.sim.report.build`; its HTML and plots are drawn by
:mod:`gpufleet.sim.report.html` and :mod:`gpufleet.sim.report.plots`, which read that module's blocks; this one
writes what they give, so no report module imports its own readers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpufleet.sim.report.build import RunOutput, Section, build_report, to_markdown
from gpufleet.sim.report.html import to_html
from gpufleet.sim.report.plots import plotting_unavailable, render_plots


@dataclass(frozen=True, slots=True)
class ReportFiles:
    markdown: Path
    html: Path
    plots: tuple[Path, ...]
    plots_missing: str | None  # why there are no plots, when there are none


def write_report(directory: Path, runs: Sequence[RunOutput], *, title: str, intro: Sequence[str] = (),
                 claims: Sequence[tuple[str, str, str, str]] = (), explanation: Sequence[str] = (),
                 extra: Sequence[Section] = ()) -> ReportFiles:
    """Write ``report.md`` with its PNG plots and the self-contained ``report.html`` into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    missing = plotting_unavailable()
    plots = render_plots(runs) if missing is None else []
    for p in plots:
        (directory / p.file).write_bytes(p.png)
    report = build_report(runs, title=title, intro=intro, claims=claims, explanation=explanation, plots=plots,
                          plots_missing=missing, extra=extra)
    markdown = directory / "report.md"
    markdown.write_text(to_markdown(report), encoding="utf-8")
    html = directory / "report.html"
    html.write_text(to_html(report, {p.file: p.png for p in plots}), encoding="utf-8")
    return ReportFiles(markdown, html, tuple(directory / p.file for p in plots), missing)
