"""The simulation report: what it says, once, and its Markdown form.

:func:`build_report` turns runs into a :class:`Report` (sections of paragraphs, tables and figures): KPIs
side by side, the published claims beside ours with the reasons they differ (case study), allocation and
utilization per pool over time, per-queue waits, costs per team, model and class. Durations are written
as people think of them (minutes, hours, days), not in seconds. :func:`write_report` writes it as
``report.md`` with PNG plots beside it and as one self-contained ``report.html`` (plots embedded;
:mod:`gpufleet.sim.report.html`). The plots need matplotlib (``pip install 'gpufleet[report]'``): without
it both files are written without plots and say so (:func:`gpufleet.sim.report.plots.plotting_unavailable`
lets a driver say it before running anything).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from gpufleet.sim.records import SimResult
from gpufleet.sim.yardsticks import DEFINITIONS


class KpiRow(NamedTuple):
    key: str
    name: str
    better: int  # 1: higher is better, -1: lower is better, 0: neither (a count, a size)


# The KPI table, the yardsticks that count work done first (their definitions: yardsticks.DEFINITIONS). The
# dashboard's KPI table reads these rows from its simulation API, so there is one list.
KPI_ROWS: tuple[KpiRow, ...] = (
    KpiRow("work_done_gpu_hours", "work done (useful GPU-hours)", 1),
    KpiRow("cost_per_useful_gpu_hour", "cost per useful GPU-hour (CHF)", -1),
    KpiRow("job_completion_pct", "job completion % (of jobs submitted)", 1),
    KpiRow("training_completion_pct", "training-job completion %", 1),
    KpiRow("first_start_p50_s", "time to first start p50", -1),
    KpiRow("first_start_p95_s", "time to first start p95", -1),
    KpiRow("first_start_p99_s", "time to first start p99", -1),
    KpiRow("first_start_p95_gpu_weighted_s", "time to first start p95, GPU-weighted", -1),
    KpiRow("jobs_never_started", "jobs never started", -1),
    KpiRow("jobs_running_at_end", "jobs running at the end", 0),
    KpiRow("wasted_gpu_hours", "wasted GPU-hours (failed, preempted, partial)", -1),
    KpiRow("gpu_allocation_pct", "GPU allocation %", 0),
    KpiRow("gpu_utilization_pct", "GPU utilization %", 1),
    KpiRow("busy_of_held_pct", "busy share of held GPUs %", 1),
    KpiRow("job_success_pct", "job success % (of jobs ended)", 1),
    KpiRow("wait_p50_s", "queue wait p50 (per attempt)", -1),
    KpiRow("wait_p95_s", "queue wait p95 (per attempt)", -1),
    KpiRow("wait_p99_s", "queue wait p99 (per attempt)", -1),
    KpiRow("makespan_s", "makespan", -1),
    KpiRow("gpu_hours", "GPU-hours held in the window", 0),
    KpiRow("cost", "cost held in the window (CHF)", 0),
    KpiRow("inference_cost", "inference cost (CHF)", -1),
    KpiRow("fragmentation_pct", "stranded capacity % (usable by a pending pod)", -1),
    KpiRow("jobs", "jobs", 0),
    KpiRow("jobs_failed", "jobs failed", -1),
    KpiRow("jobs_unfinished", "jobs unfinished", -1),
    KpiRow("preemptions", "preemptions", 0),
)

PLOT_HINT = "pip install 'gpufleet[report]'"


@dataclass(slots=True)
class RunOutput:
    summary: dict[str, Any]
    result: SimResult

    @property
    def label(self) -> str:
        return f"{self.summary['scenario']} ({self.summary['policy']})"


def fmt(x: Any) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float):
        return f"{x:,.1f}" if abs(x) >= 100 else f"{x:.2f}".rstrip("0").rstrip(".") if x % 1 else f"{x:.0f}"
    if isinstance(x, dict):
        return ", ".join(f"{k} {v}" for k, v in x.items()) or "none"
    return str(x)


def duration_text(seconds: float | None) -> str:
    """A duration in the unit people use for it: ``45 s``, ``12 min``, ``5.2 h``, ``3.4 d``."""
    if seconds is None:
        return "n/a"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def kpi_cell(key: str, kpis: dict[str, Any]) -> str:
    """One KPI as a report or a terminal shows it: durations humanised, job success with how many jobs ended
    (a success rate over 33 ended jobs of 425 is not the 100% it reads as alone)."""
    value = kpis.get(key)
    if key.endswith("_s"):
        return duration_text(value)
    if key == "job_success_pct" and kpis.get("jobs_unfinished"):
        ended = kpis["jobs"] - kpis["jobs_unfinished"]
        return f"{fmt(value)} ({ended} of {kpis['jobs']} ended)"
    return fmt(value)


def before_after(runs: Sequence[RunOutput]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The summaries of a study's before and after runs, when the runs are such a pair."""
    by = {r.summary["scenario"]: r.summary for r in runs}
    return (by["before"], by["after"]) if "before" in by and "after" in by and len(runs) == 2 else None


def completion_rows(before: dict[str, Any], after: dict[str, Any]) -> list[list[str]]:
    """Per role, then per class: jobs, completion before → after, first start p95 before → after."""
    rows: list[list[str]] = []
    for group, label in (("per_role", "role"), ("per_class", "class")):
        b, a = before.get(group, {}), after.get(group, {})
        for name in sorted(set(b) | set(a)):
            x, y = b.get(name, {}), a.get(name, {})
            if "jobs" not in x and "jobs" not in y:
                continue  # a class with GPU-hours but no job of the run (none here)
            rows.append([f"{label} {name}", fmt(y.get("jobs", x.get("jobs"))),
                         f"{fmt(x.get('completion_pct'))} → {fmt(y.get('completion_pct'))}",
                         f"{duration_text(x.get('first_start_p95_s'))} → {duration_text(y.get('first_start_p95_s'))}"])
    return rows


def definitions() -> list[tuple[str, str]]:
    """(KPI name, its one-line definition) for the yardsticks that count work done."""
    names = {r.key: r.name for r in KPI_ROWS}
    return [(names[key], text) for key, text in DEFINITIONS]


# ---- the report's content -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TableBlock:
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    numeric: tuple[bool, ...]  # right-aligned columns

    @staticmethod
    def of(header: Sequence[str], rows: Sequence[Sequence[str]], first_text: int = 1) -> TableBlock:
        """A table whose first ``first_text`` columns are text and the rest numbers."""
        return TableBlock(tuple(header), tuple(tuple(r) for r in rows),
                          tuple(i >= first_text for i in range(len(header))))


@dataclass(frozen=True, slots=True)
class FigureBlock:
    file: str  # the PNG beside report.md; report.html embeds the same bytes
    alt: str
    caption: str = ""


@dataclass(frozen=True, slots=True)
class BulletsBlock:
    items: tuple[str, ...]


Block = str | TableBlock | FigureBlock | BulletsBlock  # a str is a paragraph (with *emphasis* and `code`)


@dataclass(slots=True)
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)


@dataclass(slots=True)
class Report:
    title: str
    intro: list[str]
    sections: list[Section]


@dataclass(frozen=True, slots=True)
class Plot:
    """A rendered figure: where it goes in the report, and its PNG bytes."""

    file: str
    alt: str
    caption: str
    png: bytes


def _queue_rows(per_queue: dict[str, Any]) -> list[list[str]]:
    rows = []
    for q, v in per_queue.items():
        rows.append([q, fmt(v.get("jobs")), fmt(v.get("succeeded")), fmt(v.get("failed")), fmt(v.get("unfinished")),
                     *(duration_text(v.get(k)) for k in ("wait_p50_s", "wait_p95_s", "wait_p99_s")),
                     fmt(v.get("gpu_hours")), fmt(v.get("cost"))])
    return rows


def build_report(runs: Sequence[RunOutput], *, title: str, intro: Sequence[str] = (),
                 claims: Sequence[tuple[str, str, str, str]] = (), explanation: Sequence[str] = (),
                 plots: Sequence[Plot] = (), plots_missing: str | None = None,
                 extra: Sequence[Section] = ()) -> Report:
    """The report's content; ``plots`` are placed where their file names belong, ``plots_missing`` says why
    there are none; ``extra`` sections (a calibration's fit) follow the KPIs."""
    by_file = {p.file: FigureBlock(p.file, p.alt, p.caption) for p in plots}
    sections: list[Section] = []
    kpi = Section("KPIs", [TableBlock.of(["KPI", *(r.label for r in runs)],
                                         [[name, *(kpi_cell(key, r.summary["kpis"]) for r in runs)]
                                          for key, name, _ in KPI_ROWS])])
    kpi.blocks.append("Failures by cause (failed attempts): "
                      + "; ".join(f"{r.label}: {fmt(r.summary['kpis']['failures'])}" for r in runs) + ".")
    kpi.blocks.append(BulletsBlock(tuple(f"*{name}*: {text}" for name, text in definitions())))
    kpi.blocks.append("Job success is counted over the jobs that ended (succeeded, or failed after their "
                      "retries); jobs still waiting or running at the end are counted apart as unfinished. Job "
                      "completion counts every job submitted, so a job that never runs is never a saving.")
    if plots_missing:
        kpi.blocks.append(f"*No plots: {plots_missing}.*")
    sections.append(kpi)
    sections.extend(extra)
    if claims:
        sections.append(Section("Published claims beside ours", [
            TableBlock.of(["figure", "ours (before → after)", "published claim", "why ours differs"],
                          [list(c) for c in claims], 1),
            *explanation]))
    pair = before_after(runs)
    if pair is not None:
        sections.append(Section("Completion by role and class", [
            "Every job submitted, before → after: the share that succeeded, and the p95 of the time until its "
            "work first began (a job that never started counts until the end of the run).",
            TableBlock.of(["role or class", "jobs", "completion % (before → after)", "first start p95"],
                          completion_rows(*pair))]))
    if "allocation_utilization.png" in by_file:
        sections.append(Section("Allocation and utilization per node pool", [
            "Solid: GPUs held, dashed: GPUs busy, in % of the pool's GPUs, averaged per slice of the window.",
            by_file["allocation_utilization.png"]]))
    for r in runs:
        s = r.summary
        section = Section(r.label, [
            TableBlock.of(["queue", "jobs", "succeeded", "failed", "unfinished", "wait p50", "wait p95",
                           "wait p99", "GPU-hours", "cost (CHF)"], _queue_rows(s["per_queue"])),
            TableBlock.of(["node pool", "GPUs", "allocation %", "utilization %"],
                          [[p, fmt(v["gpus"]), fmt(v["gpu_allocation_pct"]), fmt(v["gpu_utilization_pct"])]
                           for p, v in s["per_pool"].items()])])
        for group, name in (("per_team", "team"), ("per_model", "GPU model"), ("per_class", "class")):
            section.blocks.append(TableBlock.of([name, "GPU-hours", "cost (CHF)"],
                                                [[k, fmt(v["gpu_hours"]), fmt(v["cost"])]
                                                 for k, v in s[group].items()]))
        if s["run"]["notes"]:
            section.blocks.append(BulletsBlock(tuple(s["run"]["notes"])))
        sections.append(section)
    if "wait_cdf.png" in by_file:
        sections.append(Section("Queue wait", [
            "Share of attempts that waited at most so long, per queue (hours, logarithmic beyond 0.1 h).",
            by_file["wait_cdf.png"]]))
    if "cost_per_team.png" in by_file:
        sections.append(Section("Cost per team", [by_file["cost_per_team.png"]]))
    return Report(title, list(intro), sections)


# ---- Markdown -----------------------------------------------------------------------------------------------


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(t: TableBlock) -> list[str]:
    out = ["| " + " | ".join(_md_cell(h) for h in t.header) + " |",
           "|" + "".join("---:|" if n else "---|" for n in t.numeric)]
    out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in t.rows]
    return out


def to_markdown(report: Report) -> str:
    lines = [f"# {report.title}", ""]
    for paragraph in report.intro:
        lines += [paragraph, ""]
    for section in report.sections:
        lines += [f"## {section.title}", ""]
        for block in section.blocks:
            if isinstance(block, str):
                lines += [block]
            elif isinstance(block, TableBlock):
                lines += _md_table(block)
            elif isinstance(block, FigureBlock):
                lines += [f"![{block.alt}]({block.file})"]
            else:
                lines += [f"- {item}" for item in block.items]
            lines += [""]
    return "\n".join(lines)


# ---- files --------------------------------------------------------------------------------------------------
