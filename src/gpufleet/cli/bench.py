"""``gpufleet bench``: benchmarks run from the command line; ``fragmentation`` is FGD's openb fill-up.

The lead wires the group into the application: ``app.add_typer(bench_app, name="bench")``.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from gpufleet.sim.fragbench import (
    BASELINE_POLICIES,
    POLICIES,
    PUBLISHED_UNALLOCATED,
    REPORT_POINTS,
    TIE_BREAKS,
    BenchConfig,
    PolicySummary,
    RunResult,
    TieBreak,
    default_trace_paths,
    parse_seeds,
    run_benchmark,
    summarize,
    to_json,
)
from gpufleet.sim.fragbench_trace import TraceError

__all__ = ["bench_app", "fragmentation", "render_table"]

bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks: the FGD fragmentation fill-up on the openb trace.")
out = Console()
err = Console(stderr=True)

DEFAULT_TRACE = "openb_pod_list_default"


@bench_app.callback()
def _group() -> None:
    """Benchmarks (a group even while it has one command, so ``gpufleet bench fragmentation`` stays stable)."""


def _cell(mean: float, std: float) -> str:
    if math.isnan(mean):
        return "-"
    return f"{mean:.2f} ± {std:.2f}"


def render_table(summaries: list[PolicySummary]) -> Table:
    """Unallocated GPU % per policy at the report points, the published mean beside it on the default trace."""
    traces = sorted({s.trace for s in summaries})
    one = traces[0] if len(traces) == 1 else None
    title = "Unallocated GPU % (mean ± sd over seeds) at arrived GPU demand = % of capacity"
    table = Table(title=title + (f", {one}" if one else ""))
    table.add_column("policy", no_wrap=True)
    if one is None:
        table.add_column("trace", no_wrap=True)
    for b in REPORT_POINTS:
        table.add_column(f"{b}%", justify="right", no_wrap=True)
    table.add_column("published 100%", justify="right")
    table.add_column("frag rate 80%", justify="right")
    table.add_column("failed pods", justify="right")
    table.add_column("s/run", justify="right")
    for s in summaries:
        published = PUBLISHED_UNALLOCATED.get(s.policy, {}).get(100) if s.trace == DEFAULT_TRACE else None
        rate80 = s.frag_rate_curve[80] if len(s.frag_rate_curve) > 80 else math.nan
        table.add_row(
            s.policy, *(() if one else (s.trace,)),
            *(_cell(s.unallocated[b].mean, s.unallocated[b].std) for b in REPORT_POINTS),
            f"{published:.2f}" if published is not None else "-",
            "-" if math.isnan(rate80) else f"{rate80:.1f}",
            f"{s.failed_pods:.0f}", f"{s.seconds_per_run:.1f}",
        )
    return table


def _tie_break(name: str) -> TieBreak:
    for t in TIE_BREAKS:
        if t == name:
            return t
    raise ValueError(f"unknown tie-break {name!r}; expected one of {', '.join(TIE_BREAKS)}")


@bench_app.command("fragmentation")
def fragmentation(
    nodes: Annotated[Path | None, typer.Option("--nodes", help="Node CSV (default: the openb GPU node list).",
                                               dir_okay=False)] = None,
    pods: Annotated[Path | None, typer.Option("--pods", help="Pod CSV (default: openb_pod_list_default.csv).",
                                              dir_okay=False)] = None,
    policy: Annotated[list[str] | None, typer.Option(
        "--policy", help=f"Policy to run, repeatable: {', '.join(POLICIES)} (default: the paper's six).")] = None,
    seeds: Annotated[str, typer.Option(help="Seeds: a range 42-51 and/or a list 1,5,9.")] = "42-51",
    inflate: Annotated[float, typer.Option(help="Arrived GPU demand to reach, × cluster GPU capacity.")] = 1.3,
    jobs: Annotated[int, typer.Option(help="Runs in parallel (processes); results do not depend on it.")] = 1,
    tie_break: Annotated[str, typer.Option(
        "--tie-break", help="first: first tied node of the seed-shuffled order (reproduces the published "
        "figures); random: uniform.")] = "first",
    exact_stop: Annotated[bool, typer.Option(
        "--exact-stop", help="Stop the resampling on the pod's total GPU demand, not on the reference's "
        "per-GPU milli (only the last resampled pod can differ).")] = False,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the results as JSON here.",
                                                  dir_okay=False)] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write the curves as a PNG here.",
                                              dir_okay=False)] = None,
) -> None:
    """FGD's fragmentation benchmark: pods arrive one at a time (never leave) until 130% of GPU capacity;
    report unallocated GPU % per policy at 100/110/120/130% arrived demand."""
    default_nodes, default_pods = default_trace_paths()
    nodes_csv = nodes or default_nodes
    pods_csv = pods or default_pods
    if nodes_csv is None or pods_csv is None:
        err.print("[red]the openb trace was not found[/red]: give --nodes and --pods, or set GPUFLEET_OPENB_DIR "
                  "to the folder holding openb_node_list_gpu_node.csv")
        raise typer.Exit(2)
    for f in (nodes_csv, pods_csv):
        if not f.is_file():
            err.print(f"[red]{f}: no such file[/red]")
            raise typer.Exit(2)
    try:
        cfg = BenchConfig(
            nodes_csv=nodes_csv, pods_csv=pods_csv,
            policies=tuple(p.strip().lower() for p in policy) if policy else BASELINE_POLICIES,
            seeds=tuple(parse_seeds(seeds)), inflate=inflate, jobs=jobs,
            tie_break=_tie_break(tie_break), reference_stop=not exact_stop,
        )
    except ValueError as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None
    total = len(cfg.policies) * len(cfg.seeds)
    done = 0
    started = time.perf_counter()

    def progress(r: RunResult) -> None:
        nonlocal done
        done += 1
        err.print(f"[{done}/{total}] {r.policy} seed {r.seed}: {r.unallocated_pct[100]:.2f}% unallocated at "
                  f"100% arrived, {r.failed_pods} failed pods, {r.seconds:.1f}s", highlight=False, soft_wrap=True)

    try:
        results = run_benchmark(cfg, progress)
    except TraceError as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(1) from None
    summaries = summarize(results)
    if not out.is_terminal:
        out.width = 160  # a log or a pipe: keep each row on one line
    out.print(render_table(summaries))
    out.print(f"{total} runs in {time.perf_counter() - started:.1f}s wall ({cfg.jobs} job(s), "
              f"tie-break {cfg.tie_break})")
    if json_out is not None:
        json_out.write_text(json.dumps(to_json(summaries), indent=1) + "\n")
        out.print(f"JSON written to {json_out}")
    if plot is not None:
        from gpufleet.sim.fragbench_plot import plot_summaries

        try:
            plot_summaries(summaries, plot)
        except RuntimeError as exc:
            err.print(f"[red]{exc}[/red]")
            raise typer.Exit(1) from None
        out.print(f"plot written to {plot}")
