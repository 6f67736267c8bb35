"""``gpufleet advise FILES... [--objective cost|wait|balanced] [--budget CHF/h] [-o DIR] [-o json]``: parse, run
the advisor, render."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.live import Live

from gpufleet.advise import fragmentation, fragmentation_files
from gpufleet.advise.contract import FRAGMENTATION, OBJECTIVES, Advice
from gpufleet.advise.files import advice_document, write
from gpufleet.advise.inputs import read_input
from gpufleet.advise.nvidia import node_labels
from gpufleet.advise.reasons import KPI_WORDS, kpi_text
from gpufleet.advise.search import DEFAULT_EVALUATIONS, Context, NoProposal, prepare, search
from gpufleet.cli import console
from gpufleet.cli.options import EXIT_FINDINGS, Namespace, OutputFormat, Strict, examples, in_namespace, usage_error
from gpufleet.sim.model import SimulationError

EPILOG = examples(
    "# the case study: improve the guide's hand-made MIG and time-slicing configuration",
    "gpufleet advise",
    "# write NVIDIA's files, the Kueue objects and a report into out/, and print the advice as JSON",
    "gpufleet advise examples/casestudy --objective wait -o out/ -o json",
    "# a snapshot of a live cluster and a workload generator, within a budget",
    "gpufleet advise snapshot/ workload.yaml --objective cost --budget 120",
    "# the same advice, showing only the requests of namespace research (the files are the whole cluster's)",
    "gpufleet advise snapshot/ workload.yaml -n research",
    "# which nodes to close to fractional pods so that fewer GPUs stay unallocated at saturation (FGD's fill-up)",
    "gpufleet advise openb_node_list_gpu_node.csv openb_pod_list_default.csv --objective fragmentation",
)

FORMATS = {f.value for f in OutputFormat}


class _Progress:
    """The advisor's progress on standard error, short: on a terminal one line that updates in place (and goes
    when the advice is printed); in a log, a line at each quarter of the configurations measured (every fourth
    when their number is not known in advance), never the advisor's long sentences."""

    def __init__(self, total: int | None, what: str) -> None:
        self.total, self.what, self.done = total, what, 0
        err = console.stderr()
        self.live: Live | None = Live(console.Text(""), console=err, transient=True) if err.is_terminal else None
        if self.live is not None:
            self.live.start()

    def _count(self) -> str:
        return f"advise: {self.done}" + (f" of {self.total}" if self.total else "") + f" {self.what} measured"

    def __call__(self, text: str) -> None:
        self.done += 1
        if self.live is not None:
            self.live.update(console.Text(f"{self._count()}: {text}", no_wrap=True, overflow="ellipsis"))
            return
        if self._step(self.done) > self._step(self.done - 1):
            console.note(self._count())

    def _step(self, n: int) -> int:
        """Which quarter of the total ``n`` configurations reach (which fourth configuration, without one)."""
        return n * 4 // self.total if self.total else n // 4

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None


def _outputs(values: list[str]) -> tuple[OutputFormat, Path | None]:
    """``-o`` given up to twice: a format (text, wide, json, yaml) and/or a folder for the files."""
    fmt: OutputFormat | None = None
    folder: Path | None = None
    for value in values:
        if value.lower() in FORMATS:
            if fmt is not None:
                raise usage_error(f"two output formats ({fmt.value} and {value}); give one", "-o")
            fmt = OutputFormat(value.lower())
        else:
            if folder is not None:
                raise usage_error(f"two folders ({folder} and {value}); give one", "-o")
            folder = Path(value)
            if folder.exists() and not folder.is_dir():
                raise usage_error(f"{value} exists and is not a folder", "-o")
    return fmt or OutputFormat.text, folder


def advise(
    files: Annotated[list[str] | None, typer.Argument(
        help="The cluster (NodePools, Nodes or a snapshot, with Kueue's objects and NVIDIA's ConfigMaps) and the "
             "demand (workload manifests, a WorkloadGenerator, openb CSVs). None: the embedded case study.",
        show_default=False)] = None,
    objective: Annotated[str, typer.Option(
        help="What to improve: cost (of serving the demand), wait (p95 queue wait), balanced (the three, "
             "each against the given configuration), or fragmentation (unallocated GPUs at saturation, FGD's "
             "fill-up: which nodes to close to fractional pods).",
        metavar="cost|wait|balanced|fragmentation")] = "balanced",
    budget: Annotated[float | None, typer.Option(
        help="Most the held GPUs may cost per hour on average (CHF/h); every proposal is held to it.",
        metavar="CHF/h")] = None,
    output: Annotated[list[str] | None, typer.Option(
        "-o", "--output", metavar="DIR|text|wide|json|yaml",
        help="A folder to write the files into (NVIDIA's ConfigMaps, the ClusterPolicy patch, node labels, the "
             "cluster, Kueue's objects, the report) and/or the output format; give -o twice for both.")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of the generator and the simulator.")] = None,
    duration: Annotated[str | None, typer.Option(help="Window of arrivals (14d, 36h).")] = None,
    evaluations: Annotated[int | None, typer.Option(
        help=f"Most proposals the simulator judges, besides the given configuration (default {DEFAULT_EVALUATIONS}).",
        min=1, max=500, show_default=False)] = None,
    namespace: Namespace = None,
    strict: Strict = False,
) -> None:
    """Propose MIG layouts, time-slicing, requests and quotas for a demand, each judged by the simulator. With -n,
    the advice is the same (computed on the whole cluster and demand, files included); only the requests
    shown are that namespace's."""
    if objective == FRAGMENTATION:
        if budget is not None:
            raise usage_error("--budget applies to cost, wait and balanced; fragmentation changes no GPU's cost",
                              "--budget")
        if evaluations is not None:
            raise usage_error("--evaluations applies to cost, wait and balanced; fragmentation measures its "
                              "configurations on the fill-up, not with the simulator", "--evaluations")
        if namespace is not None:
            raise usage_error("-n applies to cost, wait and balanced (it picks the requests shown); fragmentation "
                              "shows no namespace's requests", "--namespace")
        fmt, folder = _outputs(output or [])
        _advise_fragmentation(files or [], seed=seed, duration=duration, strict=strict, fmt=fmt, folder=folder)
        return
    if objective not in OBJECTIVES:
        raise usage_error(f"{objective!r} is not one of {', '.join((*OBJECTIVES, FRAGMENTATION))}", "--objective")
    if budget is not None and not budget > 0:
        raise usage_error("the budget is a positive number of CHF per hour", "--budget")
    fmt, folder = _outputs(output or [])
    count = DEFAULT_EVALUATIONS if evaluations is None else evaluations
    progress = _Progress(count + 1, "configurations")  # the given one and the proposals
    try:
        inp = read_input(files or [], seed=seed, duration=duration, strict=strict)
        ctx = prepare(inp)
        advice = search(inp, objective, budget=budget, evaluations=count, progress=progress)
    except NoProposal as exc:
        progress.close()
        console.error(str(exc))
        raise typer.Exit(EXIT_FINDINGS) from None
    except SimulationError as exc:
        progress.close()
        console.error(str(exc))
        raise typer.Exit(EXIT_FINDINGS) from None
    finally:
        progress.close()
    written = write(folder, ctx, advice).files if folder is not None else None
    for note in advice.notes:
        console.warning(note)
    if fmt.is_document:
        doc = json.loads(json.dumps(advice_document(ctx, advice, written), default=str))
        console.emit(_in_namespace(doc, namespace), fmt.value)
    else:
        _render(ctx, advice, wide=fmt is OutputFormat.wide, namespace=namespace)
    if written is not None:
        console.note(f"files written to {folder}: {', '.join(sorted(written))}")


def _advise_fragmentation(files: list[str], *, seed: int | None, duration: str | None, strict: bool,
                          fmt: OutputFormat, folder: Path | None) -> None:
    progress = _Progress(None, "configurations")
    try:
        inp = read_input(files, seed=seed, duration=duration, strict=strict)
        advice = fragmentation.search(inp, progress=progress)
    except SimulationError as exc:
        progress.close()
        console.error(str(exc))
        raise typer.Exit(EXIT_FINDINGS) from None
    finally:
        progress.close()
    written = fragmentation_files.write(folder, inp, advice) if folder is not None else None
    for note in [*inp.notes, *advice.notes]:
        console.warning(note)
    if fmt.is_document:
        console.emit(fragmentation_files.advice_document(inp, advice, written), fmt.value)
    else:
        _render_fragmentation(advice, wide=fmt is OutputFormat.wide)
    if written is not None:
        console.note(f"files written to {folder}: {', '.join(sorted(written))}")


def _render_fragmentation(a: fragmentation.FragmentationAdvice, *, wide: bool) -> None:
    g, c = a.given, a.chosen
    n = len(a.seeds)
    table = console.make_table("Objective fragmentation: " + ("the proposal" if a.changed else
                                                              "the given configuration wins"),
                               "figure", console.Column("given", justify="right"),
                               console.Column("proposal", justify="right"))
    for key, words, given, proposal in fragmentation_files.figures(a):
        table.add_row(f"{words} (mean of {n} seeds)" if key == "unallocated_gpu_pct" else words, given, proposal)
    console.show(table)
    console.say("")
    pools = console.make_table("Pools: nodes closed to fractional pods (gpufleet.io/gpu-fractions=false)", "pool",
                               "model", console.Column("GPUs/node", justify="right"),
                               console.Column("nodes", justify="right"), console.Column("given", justify="right"),
                               console.Column("proposal", justify="right"))
    for p in c.closure.pools:
        if wide or len(p.closed) != p.given_closed or p.given_closed:
            pools.add_row(p.pool, p.model, str(p.gpus_per_node), str(p.nodes), str(p.given_closed), str(len(p.closed)))
    console.show(pools)
    console.say("")
    tried = console.make_table("Every configuration measured", "configuration",
                               console.Column("unallocated", justify="right"),
                               console.Column("paired difference", justify="right"),
                               console.Column("pods placed", justify="right"), "chosen / why not")
    for m in [g, *a.tried]:
        tried.add_row(m.name, f"{m.fill.mean_unallocated:.3f}%", a.delta_text(m), f"{m.fill.mean_placed:,.1f}",
                      a.verdict(m))
    console.show(tried)
    console.say("")
    for line in a.reasons:
        console.say(f"- {line}")
    console.say(f"{1 + len(a.tried)} configurations x {n} seeds (FGD's fill-up, seeds {a.seeds[0]}-{a.seeds[-1]}) "
                f"measured in {a.seconds:.0f} s.", style="dim")


def _in_namespace(doc: dict[str, Any], namespace: str | None) -> dict[str, Any]:
    """The advice document with only ``namespace``'s requests in its given configuration and its proposal."""
    if namespace is None:
        return doc
    for side in ("given", "proposal"):
        doc[side]["requests"] = [r for r in doc[side]["requests"] if in_namespace(namespace, r["namespace"])]
    return {**doc, "namespace": namespace}


def _render(ctx: Context, advice: Advice, *, wide: bool, namespace: str | None = None) -> None:
    g, c = advice.given, advice.chosen
    table = console.make_table(f"Objective {advice.objective}: "
                               + ("the proposal" if advice.changed else "the given configuration wins"),
                               "figure", console.Column("given", justify="right"),
                               console.Column("proposal", justify="right"))
    for key, words, _ in KPI_WORDS:
        table.add_row(words, kpi_text(key, g.kpis.get(key)), kpi_text(key, c.kpis.get(key)))
    console.show(table)
    console.say("")
    pools = console.make_table("Nodes", "pool", "model", console.Column("nodes", justify="right"), "configuration",
                               *(["labels"] if wide else []))
    for p in c.proposal.pools:
        extra = [", ".join(f"{k}={v}" for k, v in node_labels(p.config).items())] if wide else []
        pools.add_row(p.pool, p.model, str(len(p.nodes)), p.config.text, *extra)
    console.show(pools)
    console.say("")
    forms = console.make_table("Requests", "class", "namespace", "asks now", "proposal")
    for f in [form for form in c.proposal.forms if in_namespace(namespace, form.namespace)]:
        forms.add_row(f.klass, f.namespace, f.given, f.resource if f.changed else "(as now)")
    console.show(forms)
    if c.proposal.quotas:
        console.say("")
        quotas = console.make_table("ClusterQueue quotas", "ClusterQueue", "flavor", "resource",
                                    console.Column("nominal", justify="right"))
        for q in c.proposal.quotas:
            quotas.add_row(q.cluster_queue, q.flavor, q.resource, str(q.nominal))
        console.show(quotas)
    console.say("")
    for line in advice.reasons:
        console.say(f"- {line}")
    t = advice.timings
    console.say(f"{len(advice.tried)} proposals simulated besides the given configuration in {t.get('total', 0):.0f} s "
                f"(integer program {t.get('program', 0):.1f} s over {t.get('programs', 0):.0f} solves, simulator "
                f"{t.get('simulate', 0):.1f} s).", style="dim")
