"""The report's plots, rendered to PNG bytes with matplotlib (optional: ``pip install 'gpufleet[report]'``)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from gpufleet.sim.metrics import pool_series, queue_waits
from gpufleet.sim.report.build import PLOT_HINT, Plot, RunOutput


def plotting_unavailable() -> str | None:
    """Why the report cannot have plots (matplotlib missing or broken), or None when it can."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only; never open a window
        import matplotlib.pyplot
    except ImportError as exc:
        return f"matplotlib is not installed ({exc.name or exc}); {PLOT_HINT}"
    return None


def _png(fig: Any) -> bytes:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return buffer.getvalue()


def render_plots(runs: Sequence[RunOutput]) -> list[Plot]:
    """Allocation and utilization per pool over days, the queue-wait CDF in hours, cost per team."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots: list[Plot] = []
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
        plots.append(Plot("allocation_utilization.png", "allocation and utilization per node pool",
                          "GPUs held (solid) and busy (dashed), % of the pool, by day", _png(fig)))
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
        plots.append(Plot("wait_cdf.png", "wait CDF per queue", "queue wait per queue, hours", _png(fig)))
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
        plots.append(Plot("cost_per_team.png", "cost per team", "cost per team in the window (CHF)", _png(fig)))
    return plots
