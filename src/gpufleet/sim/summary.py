"""A run's summary as ``gpufleet simulate --json`` writes it (one entry of ``runs``): what :mod:`gpufleet.sim.metrics`
measures and the timeline :mod:`gpufleet.sim.timeline` draws from it, put together here so that neither of those two
modules imports the other's caller."""

from __future__ import annotations

from typing import Any

from gpufleet.sim.jobs import job_lines
from gpufleet.sim.metrics import breakdowns, kpis, per_queue, pool_series
from gpufleet.sim.records import SimResult
from gpufleet.sim.timeline import timeline


def run_summary(result: SimResult) -> dict[str, Any]:
    """One entry of ``--json``'s ``runs``: the KPIs, breakdowns and series of :mod:`gpufleet.sim.metrics`, and the
    ``timeline`` the dashboard draws (:mod:`gpufleet.sim.timeline`)."""
    lines = job_lines(result)
    return {"scenario": result.scenario, "policy": result.policy, "kpis": kpis(result, lines),
            "per_queue": per_queue(result), **breakdowns(result, lines), "series": pool_series(result),
            "timeline": timeline(result),
            "run": {"events": result.events, "cycles": result.cycles, "wall_s": round(result.wall_s, 3),
                    "run_end_s": round(result.run_end, 1), "capacity_gpus": result.capacity,
                    "not_simulated": result.not_simulated, "notes": result.notes}}
