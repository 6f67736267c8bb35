"""``gpufleet bench``: benchmarks run from the command line; ``fragmentation`` is FGD's openb fill-up."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Annotated

import typer

from gpufleet.cli import console
from gpufleet.cli.options import EXIT_FINDINGS, Output, OutputFormat, examples, new_app, usage_error
from gpufleet.sim.fragbench.bench import (
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
from gpufleet.sim.fragbench.trace import TraceError

__all__ = ["bench_app", "fragmentation", "render_table"]

bench_app = new_app("Benchmarks: the FGD fragmentation fill-up on the openb trace.", epilog=examples(
    "gpufleet bench fragmentation --policy fgd --seeds 42"))

DEFAULT_TRACE = "openb_pod_list_default"


@bench_app.callback()
def _group() -> None:
    """Benchmarks (a group even while it has one command, so ``gpufleet bench fragmentation`` stays stable)."""


def _cell(mean: float, std: float) -> str:
    if math.isnan(mean):
        return "-"
    return f"{mean:.2f} ± {std:.2f}"


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def render_table(summaries: list[PolicySummary], *, wide: bool = False) -> console.Table:
    """Unallocated GPU % per policy at the report points, the published mean beside it on the default trace;
    ``wide`` adds the fragmentation rate at 80%, the failed pods and the seconds per run."""
    traces = sorted({s.trace for s in summaries})
    one = traces[0] if len(traces) == 1 else None
    title = "Unallocated GPU % (mean ± sd over seeds) at arrived GPU demand = % of capacity"
    columns: list[str | console.Column] = ["policy", *([] if one else ["trace"])]
    columns += [console.Column(f"{b}%", justify="right") for b in REPORT_POINTS]
    columns.append(console.Column("published 100%", justify="right"))
    if wide:
        columns += [console.Column(h, justify="right") for h in ("frag rate 80%", "failed pods", "s/run")]
    table = console.make_table(title + (f", {one}" if one else ""), *columns)
    for s in summaries:
        published = PUBLISHED_UNALLOCATED.get(s.policy, {}).get(100) if s.trace == DEFAULT_TRACE else None
        rate80 = s.frag_rate_curve[80] if len(s.frag_rate_curve) > 80 else math.nan
        row = [s.policy, *(() if one else (s.trace,)),
               *(_cell(s.unallocated[b].mean, s.unallocated[b].std) for b in REPORT_POINTS),
               f"{published:.2f}" if published is not None else "-"]
        if wide:
            row += ["-" if math.isnan(rate80) else f"{rate80:.1f}", f"{s.failed_pods:.0f}", f"{s.seconds_per_run:.1f}"]
        table.add_row(*row)
    return table


def _tie_break(name: str) -> TieBreak:
    for t in TIE_BREAKS:
        if t == name:
            return t
    raise usage_error(f"unknown tie-break {name!r}; expected one of {', '.join(TIE_BREAKS)}", "--tie-break")


@bench_app.command("fragmentation", epilog=examples(
    "# the paper's six policies, 10 seeds: 60 runs on every core (3-6 minutes on 2 cores)",
    "gpufleet bench fragmentation",
    "# one policy, one seed (5-10 s), the results as JSON and a plot",
    "gpufleet bench fragmentation --policy gpufleet --seeds 42 --json out.json --plot out.png",
))
def fragmentation(
    nodes: Annotated[Path | None, typer.Option("--nodes", help="Node CSV (default: the openb GPU node list).",
                                               dir_okay=False)] = None,
    pods: Annotated[Path | None, typer.Option("--pods", help="Pod CSV (default: openb_pod_list_default.csv).",
                                              dir_okay=False)] = None,
    policy: Annotated[list[str] | None, typer.Option(
        "--policy", help=f"Policy to run, repeatable: {', '.join(POLICIES)} (default: the paper's six).")] = None,
    seeds: Annotated[str, typer.Option(help="Seeds: a range 42-51 and/or a list 1,5,9.")] = "42-51",
    inflate: Annotated[float, typer.Option(help="Arrived GPU demand to reach, × cluster GPU capacity.")] = 1.3,
    jobs: Annotated[int | None, typer.Option(
        min=1, help="Runs in parallel (processes; default: the number of cores); results do not depend on it.",
        show_default=False)] = None,
    tie_break: Annotated[str, typer.Option(
        "--tie-break", help="first: first tied node of the seed-shuffled order (reproduces the published "
        "figures); random: uniform.")] = "first",
    exact_stop: Annotated[bool, typer.Option(
        "--exact-stop", help="Stop the resampling on the pod's total GPU demand, not on the reference's "
        "per-GPU milli (only the last resampled pod can differ).")] = False,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the results as JSON into this file.",
                                                  dir_okay=False)] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write the curves as a PNG here.",
                                              dir_okay=False)] = None,
    output: Output = OutputFormat.text,
) -> None:
    """FGD's fragmentation benchmark: pods arrive one at a time (never leave) until 130% of GPU capacity;
    report unallocated GPU % per policy at 100/110/120/130% arrived demand. A run of the full openb trace takes
    2-12 s on one core (bench/README.md); progress goes to standard error, one line per run with the time
    left."""
    default_nodes, default_pods = default_trace_paths()
    nodes_csv = nodes or default_nodes
    pods_csv = pods or default_pods
    if nodes_csv is None or pods_csv is None:
        console.error("the openb trace was not found: give --nodes and --pods, or set GPUFLEET_OPENB_DIR to the "
                      "folder holding openb_node_list_gpu_node.csv")
        raise typer.Exit(EXIT_FINDINGS)  # the input is missing; the command line is not wrong
    for f in (nodes_csv, pods_csv):
        if not f.is_file():
            console.error(f"{f}: no such file")
            raise typer.Exit(EXIT_FINDINGS)
    try:
        policies = tuple(p.strip().lower() for p in policy) if policy else BASELINE_POLICIES
        unknown = [p for p in policies if p not in POLICIES]
        if unknown:
            raise usage_error(f"unknown policy {', '.join(unknown)}; expected some of {', '.join(POLICIES)}",
                              "--policy")
        try:
            seed_list = tuple(parse_seeds(seeds))
        except ValueError as exc:
            raise usage_error(str(exc), "--seeds") from None
        cfg = BenchConfig(nodes_csv=nodes_csv, pods_csv=pods_csv, policies=policies, seeds=seed_list,
                          inflate=inflate, jobs=jobs or available_cores(), tie_break=_tie_break(tie_break),
                          reference_stop=not exact_stop)
    except ValueError as exc:
        raise usage_error(str(exc), "--inflate") from None
    if plot is not None:
        from gpufleet.sim.report.plots import plotting_unavailable

        missing = plotting_unavailable()
        if missing is not None:  # said now, not after the runs
            raise usage_error(f"cannot write a plot: {missing}", "--plot")
    total = len(cfg.policies) * len(cfg.seeds)
    done = 0
    started = time.perf_counter()
    console.note(f"{total} run(s) of {cfg.trace} on {min(cfg.jobs, total)} process(es); one line per run")

    def progress(r: RunResult) -> None:
        nonlocal done
        done += 1
        elapsed = time.perf_counter() - started
        left = elapsed / done * (total - done)
        console.note(f"[{done}/{total}] {r.policy} seed {r.seed}: {r.unallocated_pct[100]:.2f}% unallocated at "
                     f"100% arrived, {r.failed_pods} failed pods, {r.seconds:.1f}s"
                     + (f"; about {left:.0f}s left" if done < total else ""))

    try:
        results = run_benchmark(cfg, progress)
    except TraceError as exc:
        console.error(str(exc))
        raise typer.Exit(EXIT_FINDINGS) from None
    summaries = summarize(results)
    if output.is_document:
        console.emit(to_json(summaries), output.value)
    else:
        console.show(render_table(summaries, wide=output is OutputFormat.wide))
    console.note(f"{total} run(s) in {time.perf_counter() - started:.1f}s wall ({min(cfg.jobs, total)} process(es) "
                 f"of --jobs {cfg.jobs}, tie-break {cfg.tie_break})")
    if json_out is not None:
        json_out.write_text(json.dumps(to_json(summaries), indent=1) + "\n")
        console.note(f"JSON written to {json_out}")
    if plot is not None:
        from gpufleet.sim.fragbench.plot import plot_summaries

        try:
            plot_summaries(summaries, plot)
        except RuntimeError as exc:
            console.error(str(exc))
            raise typer.Exit(EXIT_FINDINGS) from None
        console.note(f"plot written to {plot}")
