"""Figures of the fragmentation benchmark: unallocated GPU % and fragmentation rate against arrived demand.

matplotlib is an optional dependency (the ``report`` extra); it is imported only when a plot is asked for.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from gpufleet.sim.fragbench.bench import PUBLISHED_UNALLOCATED, PolicySummary

__all__ = ["plot_summaries"]


def plot_summaries(summaries: Sequence[PolicySummary], path: str | Path, *, x_min: int = 85) -> None:
    """Two panels: unallocated GPU % (mean ± one standard deviation over seeds, published points as
    markers on the default trace) and fragmentation rate, both against arrived GPU demand (% of capacity)."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only; never open a window
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError("plotting needs matplotlib: pip install 'gpufleet[report]'") from exc
    fig, (ax_u, ax_r) = plt.subplots(1, 2, figsize=(12, 4.5))
    xs = list(range(len(summaries[0].curve_mean))) if summaries else []
    for s in summaries:
        label = s.policy if len({x.trace for x in summaries}) == 1 else f"{s.policy} ({s.trace})"
        pts = [(x, m, sd) for x, m, sd in zip(xs, s.curve_mean, s.curve_std, strict=True)
               if x >= x_min and not math.isnan(m)]
        if not pts:
            continue
        line = ax_u.plot([p[0] for p in pts], [p[1] for p in pts], label=label)[0]
        ax_u.fill_between([p[0] for p in pts], [p[1] - (p[2] if not math.isnan(p[2]) else 0) for p in pts],
                          [p[1] + (p[2] if not math.isnan(p[2]) else 0) for p in pts],
                          color=line.get_color(), alpha=0.15, linewidth=0)
        published = PUBLISHED_UNALLOCATED.get(s.policy) if s.trace == "openb_pod_list_default" else None
        if published:
            ax_u.scatter(list(published), list(published.values()), marker="x", color=line.get_color())
        rate = [(x, r) for x, r in zip(xs, s.frag_rate_curve, strict=True) if x <= 100 and not math.isnan(r)]
        ax_r.plot([p[0] for p in rate], [p[1] for p in rate], label=label, color=line.get_color())
    ax_u.set_xlabel("Arrived GPU demand (% of cluster GPU capacity)")
    ax_u.set_ylabel("Unallocated GPU (%)")
    ax_u.set_title("Unallocated GPUs (mean ± sd over seeds; x = published)")
    ax_u.grid(alpha=0.3)
    ax_u.legend(fontsize=8)
    ax_r.set_xlabel("Arrived GPU demand (% of cluster GPU capacity)")
    ax_r.set_ylabel("Fragmentation rate (% of idle GPU)")
    ax_r.set_title("Fragment / idle GPU milli (mean over seeds)")
    ax_r.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(str(path), dpi=120)
    plt.close(fig)
