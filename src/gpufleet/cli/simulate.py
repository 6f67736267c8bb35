"""``gpufleet simulate`` and ``gpufleet demo``: parse the options, run the simulator, render."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from gpufleet.cli import calibration, console
from gpufleet.cli.options import EXIT_FINDINGS, Output, OutputFormat, Strict, examples, usage_error
from gpufleet.sim.calibrate import Calibration, parse_attribution, parse_targets
from gpufleet.sim.jobs import write_jsonl
from gpufleet.sim.model import SimulationError
from gpufleet.sim.openmetrics import SimRun, local_queue_map, write_openmetrics
from gpufleet.sim.report.build import KPI_ROWS, RunOutput, before_after, completion_rows, fmt, kpi_cell
from gpufleet.sim.report.files import write_report
from gpufleet.sim.report.plots import plotting_unavailable
from gpufleet.sim.runner import (
    Plan,
    casestudy_claims,
    parse_duration_option,
    parse_failures,
    parse_policies,
    plan,
    run_plan,
)

EPILOG = examples(
    "# the embedded case study, before against after, uncalibrated (`gpufleet demo` runs it calibrated to the "
    "guide's before: other figures)",
    "gpufleet simulate",
    "# the same from its files, with a report (report.md, report.html and plots)",
    "gpufleet simulate examples/casestudy --report out/",
    "# what `gpufleet demo` runs",
    f"gpufleet simulate --calibrate {calibration.GUIDE_BASELINE} --attribute {calibration.GUIDE_ATTRIBUTION}",
    "# an openb trace under two policies, KPIs as JSON",
    "gpufleet simulate nodes.csv pods.csv --compare kube-default,gpufleet -o json",
    "# calibrated to what a team observed before, then the after prediction on the same workload",
    "gpufleet simulate --calibrate utilization=35,success=62",
    "# the case study as Prometheus samples, for the dashboards (deploy/grafana/)",
    "gpufleet simulate --metrics-out sim.om && promtool tsdb create-blocks-from openmetrics sim.om data/",
    "# one JSON line per job per run, for pandas: pd.read_json('jobs.jsonl', lines=True)",
    "gpufleet simulate examples/casestudy --compare kube-default,gpufleet --jobs-out jobs.jsonl",
)


class _LazyBar:
    """A progress bar on a terminal's standard error, shown once a run has taken more than a second."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.started = time.perf_counter()
        self.bar: Progress | None = None
        self.task: TaskID | None = None

    def __call__(self, now: float, end: float) -> None:
        if self.bar is None:
            if time.perf_counter() - self.started < 1.0:
                return
            err = console.stderr()
            if not err.is_terminal:
                return  # a log gets no bar (it would print a line per refresh)
            self.bar = Progress(TextColumn("{task.description}", markup=False), BarColumn(),
                                TextColumn("day {task.fields[day]}", markup=False),
                                TimeElapsedColumn(), console=err, transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.label, total=max(end, 1.0), day="0")
        assert self.task is not None
        self.bar.update(self.task, completed=min(now, end), total=max(end, 1.0), day=f"{now / 86400:.1f}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _kpi_table(runs: list[RunOutput], claims: dict[str, str]) -> console.Table:
    columns: list[str | console.Column] = ["KPI", *(console.Column(r.label, justify="right") for r in runs)]
    if claims:
        columns.append(console.Column("published claim", justify="right", style="dim"))
    table = console.make_table("Simulated KPIs", *columns)
    for key, name, _ in KPI_ROWS:
        row = [name, *(kpi_cell(key, r.summary["kpis"]) for r in runs)]
        if claims:
            row.append(claims.get(key, ""))
        table.add_row(*row)
    table.add_row("failures (attempts)", *(fmt(r.summary["kpis"]["failures"]) for r in runs),
                  *([""] if claims else []))
    return table


def _check_options(policy: str | None, compare: str | None, duration: str | None, failures: str | None) -> None:
    """Option values are the command line's: a bad one is a usage error (exit 2), found before any work."""
    for option, check in (("--policy/--compare", lambda: parse_policies(policy, compare)),
                          ("--duration", lambda: parse_duration_option(duration)),
                          ("--failures", lambda: parse_failures(failures))):
        try:
            check()
        except SimulationError as exc:
            raise usage_error(str(exc), option) from None


def simulate(
    files: Annotated[list[str] | None, typer.Argument(
        help="Manifests (nodes, queues, workloads with sim.gpufleet.io/* annotations, WorkloadGenerator) and "
             "openb CSVs. None: the embedded case study, before against after.", show_default=False)] = None,
    policy: Annotated[str | None, typer.Option(
        help="Policy: gpufleet (default), kueue (Kueue's admission with the default scheduler's placement) or "
             "kube-default.")] = None,
    compare: Annotated[str | None, typer.Option(help="Run several policies on the same input: P1,P2.")] = None,
    duration: Annotated[str | None, typer.Option(
        help="Measurement window and arrival horizon (14d, 36h); work started inside it may finish after.")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of the generator and the placers' tie-breaks.")] = None,
    failures: Annotated[str | None, typer.Option(
        help="Failure models to apply: rendezvous,oom,retries (default: all) or none; add replace-pods to replace a "
             "Job's failed pod while the job runs on (it joins the admitted workload).")] = None,
    json_out: Annotated[Path | None, typer.Option(
        "--json", help="Also write the KPIs of every run as JSON into this file.", dir_okay=False)] = None,
    report: Annotated[Path | None, typer.Option(
        help="Write report.md, report.html and PNG plots into this folder.", file_okay=False)] = None,
    jobs_out: Annotated[Path | None, typer.Option(
        "--jobs-out", help="Also write one JSON line per job per run (outcome, first start, attempts, failures, "
        "GPU-seconds held and useful, cost held): the records the yardsticks are computed from.",
        dir_okay=False)] = None,
    metrics_out: Annotated[Path | None, typer.Option(
        "--metrics-out", help="Also write every run as OpenMetrics with timestamps, under the live scheduler's metric "
        "names (load it with: promtool tsdb create-blocks-from openmetrics FILE DIR).", dir_okay=False)] = None,
    calibrate: Annotated[str | None, typer.Option(
        "--calibrate", metavar="utilization=35,success=62[,training_success=60][,wait_p95=4h]",
        help="Fit the workload (load, busy share, gangs and their rendezvous timeout, memory, and last the jobs' own "
             "failure rate) so that the before run (else the input's run) shows what a team observed, then run "
             "every scenario on that workload.")] = None,
    attribute: Annotated[str | None, typer.Option(
        "--attribute", metavar="gang=0.8,oom=0.1",
        help="With --calibrate: what the team observed of its failures, as shares of failed attempts: gang "
             "(partial gangs timing out), oom (out of GPU memory), error (the jobs' own).")] = None,
    output: Output = OutputFormat.text,
    strict: Strict = False,
) -> None:
    """Simulate scheduling on a virtual clock with the same core as the live scheduler."""
    _check_options(policy, compare, duration, failures)
    if calibrate is not None:
        try:
            parse_targets(calibrate)
        except SimulationError as exc:
            raise usage_error(str(exc).removeprefix("--calibrate: "), "--calibrate") from None
    if attribute is not None:
        if calibrate is None:
            raise usage_error("--attribute says what a calibration fits: give --calibrate with it", "--attribute")
        try:
            parse_attribution(attribute)
        except SimulationError as exc:
            raise usage_error(str(exc).removeprefix("--attribute: "), "--attribute") from None
    if report is not None:
        missing = plotting_unavailable()
        if missing is not None:  # said now, not after minutes of simulation
            console.warning(f"the report will have no plots: {missing}")
    bars: list[_LazyBar] = []

    def progress(label: str) -> _LazyBar:
        bar = _LazyBar(label)
        bars.append(bar)
        return bar

    cal: Calibration | None = None
    try:
        if calibrate is not None:
            p, cal = calibration.calibrate(files or [], calibrate, policy=policy, compare=compare, duration=duration,
                                           seed=seed, failures=failures, strict=strict, attribute=attribute)
        else:
            p = plan(files or [], policy=policy, compare=compare, duration=duration, seed=seed, failures=failures,
                     strict=strict)
        runs = run_plan(p, progress)
    except SimulationError as exc:
        console.error(str(exc))
        raise typer.Exit(EXIT_FINDINGS) from None
    finally:
        for bar in bars:
            bar.close()
    success_key = "training_success_pct" if cal is not None and "training_success" in cal.targets.values \
        else "job_success_pct"
    rows, explanation = casestudy_claims(runs, calibrated=cal is not None, success_key=success_key) \
        if p.is_casestudy else ([], [])
    doc: dict[str, Any] = {"runs": [r.summary for r in runs]}
    if cal is not None:
        doc["calibration"] = cal.summary()
    if output.is_document:
        console.emit(doc, output.value)
    else:
        for table in calibration.tables(cal) if cal is not None else []:
            console.show(table)
            console.say("")
        if cal is not None:
            console.say(calibration.split_line(cal, "the observed run"))
            console.say("")
        claims = {"gpu_utilization_pct": rows[0][2], success_key: rows[1][2],
                  "inference_cost": rows[2][2]} if rows else {}
        console.show(_kpi_table(runs, claims))
        pair = before_after(runs)
        if pair is not None:
            console.say("")
            table = console.make_table("Completion by role and class (every job submitted)", "role or class",
                                       console.Column("jobs", justify="right"),
                                       console.Column("completion % (before → after)", justify="right"),
                                       console.Column("first start p95", justify="right"))
            for cells in completion_rows(*pair):
                table.add_row(*cells)
            console.show(table)
        if rows:
            console.say("")
            table = console.make_table("The guide's published claims beside ours", "figure",
                                       console.Column("ours (before → after)", justify="right"),
                                       console.Column("published claim", justify="right"))
            for row in rows:
                table.add_row(*row[:3])
            console.show(table)
            for figure, _, _, why in rows:
                console.say(f"{figure}: {why}.")
            if report is None:
                console.say("The full reasoning is in the report (--report DIR).", style="dim")
    for r in runs:
        for note in r.summary["run"]["notes"]:
            console.warning(f"{r.label}: {note}")
    if json_out is not None:
        json_out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        console.note(f"JSON written to {json_out}")
    if jobs_out is not None:
        try:
            lines = write_jsonl(jobs_out, [r.result for r in runs])
        except OSError as exc:
            console.error(f"--jobs-out {jobs_out}: {exc.strerror or exc}")
            raise typer.Exit(EXIT_FINDINGS) from None
        console.note(f"per-job records written to {jobs_out} ({lines:,} lines, one per job per run)")
    if metrics_out is not None:
        _write_metrics(metrics_out, p, runs)
    if report is not None:
        written = write_report(report, runs, title=p.title, intro=p.intro, claims=rows, explanation=explanation,
                               extra=[calibration.section(cal)] if cal is not None else [])
        console.note(f"report written to {written.markdown} and {written.html}"
                     + (f" ({len(written.plots)} plots)" if written.plots else " (no plots)"))


def _write_metrics(path: Path, p: Plan, runs: list[RunOutput]) -> None:
    by_name = {sc.name: sc for sc in p.scenarios}
    sim_runs = []
    for r in runs:
        scenario = by_name[r.summary["scenario"]]
        queues = local_queue_map((lq.meta.namespace or "", lq.meta.name, lq.cluster_queue)
                                 for lq in scenario.manifests.local_queues)
        cluster_queues = tuple(sorted(cq.name for cq in scenario.manifests.cluster_queues))
        sim_runs.append(SimRun(r.label, r.result, queues, cluster_queues))
    try:
        samples = write_openmetrics(path, sim_runs)
    except OSError as exc:
        console.error(f"--metrics-out {path}: {exc.strerror or exc}")
        raise typer.Exit(EXIT_FINDINGS) from None
    console.note(f"OpenMetrics written to {path} ({samples:,} samples; promtool tsdb create-blocks-from "
                 "openmetrics loads it)")


def demo(
    output: Output = OutputFormat.text,
    report: Annotated[Path | None, typer.Option(
        help="Also write the report (report.md, report.html and PNG plots) into this folder.",
        file_okay=False)] = None,
) -> None:
    """The case study calibrated to the guide's published before (utilization 35%, job success 62%): the guide's
    before, and gpufleet's prediction of after (MIG, time-slicing, Kueue) beside the guide's claims. The same as
    `gpufleet simulate --calibrate utilization=35,training_success=62 --attribute gang=0.9`."""
    simulate(files=None, policy=None, compare=None, duration=None, seed=None, failures=None, json_out=None,
             report=report, jobs_out=None, metrics_out=None, calibrate=calibration.GUIDE_BASELINE,
             attribute=calibration.GUIDE_ATTRIBUTION, output=output, strict=False)
