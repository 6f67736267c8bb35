"""The advice in words: what changes, why, and what the simulator saw, each sentence from the figures."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from gpufleet.advise.contract import FRAGMENTATION, Advice, Judged, NodeConfig, Proposal
from gpufleet.sim.report.build import duration_text

if TYPE_CHECKING:
    from gpufleet.advise.search import Context

KPI_WORDS = (("demand_cost", "cost of the demand", "CHF"),
             ("demand_cost_per_work", "cost per busy GPU-hour of work done", "CHF"),
             ("demand_inference_cost", "inference cost", "CHF"),
             ("wait_p95_s", "p95 queue wait", "s"), ("job_success_pct", "job success", "%"),
             ("gpu_utilization_pct", "GPU utilization", "%"), ("fragmentation_pct", "fragmentation", "%"))


# The fragmentation objective's figures (FGD's fill-up, gpufleet.advise.fragmentation), means over its seeds: its
# advice document's kpis hold these instead of a simulated run's.
FRAGMENTATION_KPI_WORDS = (
    ("unallocated_gpu_pct", "unallocated GPUs at 100% arrived", "%"),
    ("pods_placed", "pods placed until 100% arrived", "pods"),
    ("nodes_closed", "nodes closed to fractional pods", "nodes"))


def kpi_words(objective: str) -> tuple[tuple[str, str, str], ...]:
    """The figures an advice of ``objective`` compares, given beside proposal: (key, words, unit)."""
    return FRAGMENTATION_KPI_WORDS if objective == FRAGMENTATION else KPI_WORDS


def kpi_text(key: str, value: Any) -> str:
    if value is None:
        return "n/a"
    if key == "unallocated_gpu_pct":
        return f"{float(value):.3f}%"  # differences of a few GPUs in thousands: the points' thousandths
    if key == "pods_placed":
        return f"{float(value):,.1f}"
    if key == "nodes_closed":
        return f"{float(value):,.0f}"
    if key.endswith("_s"):
        return duration_text(float(value))
    if key.endswith("_pct"):
        return f"{float(value):.1f}%"
    if key.endswith("_per_work"):
        return f"{float(value):,.2f} CHF"
    return f"{float(value):,.0f} CHF"


def change_text(key: str, before: Any, after: Any) -> str:
    return f"{kpi_text(key, before)} → {kpi_text(key, after)}"


def _counts(proposal: Proposal, pool: str) -> Counter[NodeConfig]:
    out: Counter[NodeConfig] = Counter()
    for g in proposal.pools:
        if g.pool == pool:
            out[g.config] += len(g.nodes)
    return out


def _mix(counts: Mapping[NodeConfig, int]) -> str:
    return ", ".join(f"{n} node{'s' if n > 1 else ''} {c.text}" for c, n in sorted(counts.items()) if n)


def _mig_config(config: NodeConfig) -> tuple[tuple[str, int], ...]:
    """What a node's nvidia.com/mig.config says: its MIG instances (nothing for whole GPUs and time-slicing alike,
    both all-disabled)."""
    return config.mig if config.mode == "mig" else ()


def _how_applied(before: Counter[NodeConfig], after: Counter[NodeConfig]) -> str:
    """How the nodes of a pool that change are reconfigured: mig-manager drains a node only when its MIG layout
    (nvidia.com/mig.config) changes; a change of time-slicing or between whole and time-sliced GPUs is the device
    plugin's configuration (nvidia.com/device-plugin.config): the plugin restarts, running pods stay."""
    moved = sum((before - after).values())
    drained: Counter[tuple[tuple[str, int], ...]] = Counter()
    for config, n in before.items():
        drained[_mig_config(config)] += n
    for config, n in after.items():
        drained[_mig_config(config)] -= n
    mig = sum(n for n in drained.values() if n > 0)
    plugin = moved - mig
    parts = []
    if mig:
        parts.append(f"{mig} node{'s' if mig != 1 else ''} with a new MIG layout: mig-manager drains a node whose "
                     "nvidia.com/mig.config changes")
    if plugin:
        parts.append(f"{plugin} node{'s' if plugin != 1 else ''} with a new device-plugin configuration only "
                     "(nvidia.com/device-plugin.config): the device plugin restarts, no drain")
    return "; ".join(parts)


def _offered(ctx: Context, proposal: Proposal, k: int, resource: str) -> int:
    """Devices of ``resource`` the proposal offers where class ``k`` may run (its models, room for its pods)."""
    nodes: Counter[tuple[str, NodeConfig]] = Counter()
    for g in proposal.pools:
        nodes[(g.pool, g.config)] += len(g.nodes)
    total = 0
    for (kk, o) in ctx.problem.fits:
        offer = ctx.problem.offers[o]
        if kk == k and offer.resource == resource:
            pool = ctx.pools[offer.pool]
            total += offer.per_node * nodes[(pool.name, ctx.configs[offer.pool][offer.config])]
    return total


def headline(advice: Advice) -> str:
    g, c = advice.given.kpis, advice.chosen.kpis
    figures = "; ".join(f"{words} {change_text(key, g.get(key), c.get(key))}" for key, words, _ in KPI_WORDS)
    if not advice.changed:
        return (f"Keep the given configuration: of {len(advice.tried)} proposals the simulator judged, none did "
                f"better on {advice.objective} within its guards ({figures.split('; ')[0]} stays).")
    return f"On the same demand, the proposal against the given configuration: {figures}."


def reasons(ctx: Context, advice: Advice) -> list[str]:
    out = [headline(advice)]
    given, chosen = advice.given.proposal, advice.chosen.proposal
    if advice.changed:
        for pool in ctx.pools:
            before, after = _counts(given, pool.name), _counts(chosen, pool.name)
            if before == after:
                continue
            out.append(f"Pool {pool.name} ({len(pool.nodes)} × {pool.gpus_per_node} {pool.model.key}): "
                       f"{_mix(before)} → {_mix(after)} ({_how_applied(before, after)}).")
        for k, (f0, f1) in enumerate(zip(given.forms, chosen.forms, strict=True)):
            c = ctx.classes[k]
            demand = (f"{len(c.jobs)} jobs, {c.mean:.1f} devices held on average and {c.peak:.0f} at the 95th "
                      "percentile when nothing waits")
            if f1.resource != f0.resource:
                why = _device_words(ctx, k, f1.resource)
                out.append(f"{c.name} ({c.namespace}): ask {f1.resource} instead of {f0.resource} ({demand}); {why}. "
                           "Its manifests must change accordingly.")
            else:
                now, then = _offered(ctx, given, k, f1.resource), _offered(ctx, chosen, k, f1.resource)
                if now != then:
                    out.append(f"{c.name} ({c.namespace}) keeps asking {f1.resource} ({demand}): the cluster offers "
                               f"{then} of them instead of {now}.")
        queues = sorted({q.cluster_queue for q in chosen.quotas})
        for cq in queues:
            lines = [q for q in chosen.quotas if q.cluster_queue == cq and q.nominal > 0]
            text = ", ".join(f"{q.nominal} {q.resource.removeprefix('nvidia.com/')} in {q.flavor}" for q in lines)
            out.append(f"ClusterQueue {cq}: nominal quota {text or 'none of its own (it borrows in its cohort)'}; "
                       "each flavor's devices are shared out in proportion to what its classes need there, so "
                       "quotas add up to exactly what the nodes offer.")
    out += _queue_waits(advice.given, advice.chosen)
    out += _refusals(ctx)
    return out


def _device_words(ctx: Context, k: int, resource: str) -> str:
    c = ctx.classes[k]
    fits = [(o, f) for (kk, o), f in ctx.problem.fits.items() if kk == k and ctx.problem.form_of(k, o) == resource]
    parts = []
    if c.memory_mib:
        parts.append(f"its GPU memory use is {np.percentile(c.memory_mib, 95) / 1024:.0f} GiB at the 95th percentile")
    if c.need:
        parts.append(f"its work needs {np.percentile(c.need, 90):.2f} of a GPU at the 90th percentile")
    if fits:
        risk = max(f.risk for _, f in fits)
        stretch = min(f.stretch for _, f in fits)
        parts.append(f"on {resource} at most {risk:.0%} of its pods would run out of memory"
                     + (f" and its work takes {stretch:.2f}× as long" if stretch > 1.01 else ""))
    return "; ".join(parts) or "the program found it cheaper"


def _queue_waits(given: Judged, chosen: Judged) -> list[str]:
    rows = []
    for q in sorted(set(given.per_queue) | set(chosen.per_queue)):
        a = given.per_queue.get(q, {})
        b = chosen.per_queue.get(q, {})
        rows.append(f"{q} {duration_text(a.get('wait_p95_s'))} → {duration_text(b.get('wait_p95_s'))} "
                    f"(success {kpi_text('job_success_pct', a.get('job_success_pct'))} → "
                    f"{kpi_text('job_success_pct', b.get('job_success_pct'))})")
    return ["p95 queue wait per queue: " + "; ".join(rows) + "."] if rows else []


def _refusals(ctx: Context) -> list[str]:
    """Why the search did not offer a class smaller devices: one reason per class (memory or contention)."""
    first: dict[int, str] = {}
    for (k, _), why in sorted(ctx.problem.refused.items()):
        if k not in first and ("memory" in why or "contend" in why):
            first[k] = why
    return [f"Not offered: {why}." for _, why in sorted(first.items())]
