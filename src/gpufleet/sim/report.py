"""A Markdown report with PNG plots: KPIs side by side, per-pool allocation and utilization over time, the
queue-wait CDF per queue, cost per team, and (for the case study) the published claims beside ours with the
reasons they differ. matplotlib is optional (``pip install gpufleet[report]``): without it the report is
written without plots and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.sim.metrics import pool_series, queue_waits
from gpufleet.sim.records import SimResult

KPI_ROWS: tuple[tuple[str, str], ...] = (
    ("gpu_allocation_pct", "GPU allocation %"),
    ("gpu_utilization_pct", "GPU utilization %"),
    ("busy_of_held_pct", "busy share of held GPUs %"),
    ("job_success_pct", "job success %"),
    ("wait_p50_s", "queue wait p50 (s)"),
    ("wait_p95_s", "queue wait p95 (s)"),
    ("wait_p99_s", "queue wait p99 (s)"),
    ("makespan_s", "makespan (s)"),
    ("gpu_hours", "GPU-hours"),
    ("cost", "cost (CHF)"),
    ("inference_cost", "inference cost (CHF)"),
    ("fragmentation_pct", "fragmentation %"),
    ("jobs", "jobs"),
    ("jobs_failed", "jobs failed"),
    ("jobs_unfinished", "jobs unfinished"),
    ("preemptions", "preemptions"),
)


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


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def _plots(directory: Path, runs: Sequence[RunOutput]) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only; never open a window
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError("the report's plots need matplotlib: pip install 'gpufleet[report]'") from exc
    files: list[str] = []
    series = [pool_series(r.result) for r in runs]
    pools = sorted({p for s in series for p in s})
    if pools:
        cols = 2 if len(pools) > 1 else 1
        rows = (len(pools) + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 2.8 * rows), squeeze=False, sharex=True)
        for ax, pool in zip(axes.flat, pools, strict=False):
            for i, (run, s) in enumerate(zip(runs, series, strict=True)):
                if pool not in s:
                    continue
                days = [t / 86400 for t in s[pool]["t"]]
                ax.plot(days, s[pool]["allocation_pct"], color=f"C{i}", lw=1.2, label=f"{run.label} allocated")
                ax.plot(days, s[pool]["utilization_pct"], color=f"C{i}", lw=1.0, ls="--",
                        label=f"{run.label} busy")
            ax.set_title(pool, fontsize=9)
            ax.set_ylim(0, 105)
            ax.set_ylabel("% of pool GPUs", fontsize=8)
        for ax in axes.flat[len(pools):]:
            ax.axis("off")
        axes.flat[0].legend(fontsize=7, loc="upper right")
        for ax in axes[-1]:
            ax.set_xlabel("day")
        fig.tight_layout()
        fig.savefig(directory / "allocation_utilization.png", dpi=110)
        plt.close(fig)
        files.append("allocation_utilization.png")
    waits = [queue_waits(r.result) for r in runs]
    queues = sorted({q for w in waits for q in w})
    if queues:
        fig, axes = plt.subplots(1, len(queues), figsize=(4.2 * len(queues), 3.2), squeeze=False)
        for ax, q in zip(axes[0], queues, strict=True):
            right = max(1.0, 1.2 * max((v for w in waits for v in w.get(q, [])), default=0.0) / 3600)
            for i, (run, w) in enumerate(zip(runs, waits, strict=True)):
                values = w.get(q, [])
                if not values:
                    continue
                # From (0, 0) to the right edge, so that a queue where nobody waits shows as a line at 1.
                hours = [0.0, *(v / 3600 for v in values), right]
                shares = [0.0, *((k + 1) / len(values) for k in range(len(values))), 1.0]
                ax.step(hours, shares, where="post", color=f"C{i}", lw=1.8 - 0.5 * i, label=run.label)
            ax.set_xscale("symlog", linthresh=0.1)
            ax.set_xlim(0, right)
            ax.set_title(f"queue {q}", fontsize=9)
            ax.set_xlabel("wait (hours)")
            ax.set_ylim(0, 1.02)
        axes[0][0].set_ylabel("share of attempts")
        axes[0][0].legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        fig.savefig(directory / "wait_cdf.png", dpi=110)
        plt.close(fig)
        files.append("wait_cdf.png")
    teams = sorted({t for r in runs for t in r.summary["per_team"]})
    if teams:
        fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(teams), 3.2))
        width = 0.8 / len(runs)
        for i, run in enumerate(runs):
            costs = [run.summary["per_team"].get(t, {}).get("cost", 0.0) for t in teams]
            ax.bar([k + i * width for k in range(len(teams))], costs, width, label=run.label, color=f"C{i}")
        ax.set_xticks([k + width * (len(runs) - 1) / 2 for k in range(len(teams))], teams)
        ax.set_ylabel("cost (CHF) in the window")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(directory / "cost_per_team.png", dpi=110)
        plt.close(fig)
        files.append("cost_per_team.png")
    return files


def write_report(directory: Path, runs: Sequence[RunOutput], *, title: str, intro: Sequence[str] = (),
                 claims: Sequence[tuple[str, str, str]] = (), explanation: Sequence[str] = ()) -> Path:
    """Write ``report.md`` and its plots into ``directory``; return the Markdown file's path."""
    directory.mkdir(parents=True, exist_ok=True)
    plots = _plots(directory, runs)
    lines = [f"# {title}", ""]
    lines += [*intro, ""] if intro else []
    lines += ["## KPIs", ""]
    lines += _table(["KPI", *(r.label for r in runs)],
                    [[name, *(fmt(r.summary["kpis"].get(key)) for r in runs)] for key, name in KPI_ROWS])
    lines += ["", "Failures by cause (failed attempts): "
              + "; ".join(f"{r.label}: {fmt(r.summary['kpis']['failures'])}" for r in runs), ""]
    if claims:
        lines += ["## Published claims beside ours", ""]
        lines += _table(["figure", "ours (before → after)", "published claim"], [list(c) for c in claims])
        lines += ["", *[p + "\n" for p in explanation]]
    if "allocation_utilization.png" in plots:
        lines += ["## Allocation and utilization per node pool", "",
                  "Solid: GPUs held, dashed: GPUs busy, in % of the pool's GPUs, averaged per slice of the window.",
                  "", "![allocation and utilization](allocation_utilization.png)", ""]
    for r in runs:
        lines += [f"## {r.label}", ""]
        lines += _table(["queue", "jobs", "succeeded", "failed", "unfinished", "wait p50 s", "wait p95 s",
                         "wait p99 s", "GPU-hours", "cost"],
                        [[q, *(fmt(v.get(k)) for k in ("jobs", "succeeded", "failed", "unfinished", "wait_p50_s",
                                                        "wait_p95_s", "wait_p99_s", "gpu_hours", "cost"))]
                         for q, v in r.summary["per_queue"].items()])
        lines += [""]
        lines += _table(["node pool", "GPUs", "allocation %", "utilization %"],
                        [[p, fmt(v["gpus"]), fmt(v["gpu_allocation_pct"]), fmt(v["gpu_utilization_pct"])]
                         for p, v in r.summary["per_pool"].items()])
        lines += [""]
        for group, name in (("per_team", "team"), ("per_model", "GPU model"), ("per_class", "class")):
            lines += _table([name, "GPU-hours", "cost (CHF)"],
                            [[k, fmt(v["gpu_hours"]), fmt(v["cost"])] for k, v in r.summary[group].items()])
            lines += [""]
        for note in r.summary["run"]["notes"]:
            lines += [f"- {note}"]
        lines += [""]
    if "wait_cdf.png" in plots:
        lines += ["## Queue wait", "", "![wait CDF per queue](wait_cdf.png)", ""]
    if "cost_per_team.png" in plots:
        lines += ["## Cost per team", "", "![cost per team](cost_per_team.png)", ""]
    if not plots:
        lines += ["_Plots need matplotlib: pip install 'gpufleet[report]'._", ""]
    path = directory / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
