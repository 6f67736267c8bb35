"""The ``gpufleet`` command line: parse arguments, call one driver, render. Nothing else lives here."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
import yaml
from rich.console import Console
from rich.table import Table

import gpufleet
from gpufleet.api.errors import ManifestError
from gpufleet.api.manifests import Manifests, load_manifests
from gpufleet.api.nodepool import expand_node_pool
from gpufleet.cli.bench import bench_app
from gpufleet.cli.plan import plan
from gpufleet.cli.scheduler import scheduler
from gpufleet.cli.simulate import demo as run_demo
from gpufleet.cli.simulate import simulate
from gpufleet.gpu.catalog import DEFAULT_CATALOG
from gpufleet.gpu.mig import (
    MigError,
    MigGeometry,
    enumerate_maximal_layouts,
    geometry_for,
    layout_mix,
    parse_layout,
    validate_layout,
)

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="gpufleet: GPUs as first-class citizens of Kubernetes.")
nodes_app = typer.Typer(no_args_is_help=True, help="Node views of NodePools.")
mig_app = typer.Typer(no_args_is_help=True, help="MIG geometry: layouts and checks.")
app.add_typer(nodes_app, name="nodes")
app.add_typer(mig_app, name="mig")

out = Console()
err = Console(stderr=True)

Files = Annotated[list[str], typer.Argument(help="Manifest files or folders; - reads stdin.")]


def _print_problems(problems: list[ManifestError]) -> None:
    for p in problems:
        style = "yellow" if p.severity == "warning" else "red"
        err.print(f"[{style}]{p}[/{style}]", highlight=False, soft_wrap=True)


def _load(files: list[str]) -> Manifests:
    return load_manifests(files, stdin=sys.stdin)


@app.command()
def version() -> None:
    """Print gpufleet's version."""
    out.print(f"gpufleet {gpufleet.__version__}")


@app.command()
def validate(files: Files) -> None:
    """Check manifests; print every problem; exit 1 when any is an error."""
    m = _load(files)
    _print_problems(m.problems.all)
    counts = ", ".join(f"{n} {k}" for k, n in m.counts().items()) or "no objects"
    if m.simulation_inputs:
        counts += f" (+{m.simulation_inputs} WorkloadGenerator for `gpufleet simulate`)"
    if m.problems.errors:
        err.print(f"[red]{len(m.problems.errors)} error(s)[/red] in {m.documents} document(s); valid: {counts}")
        raise typer.Exit(1)
    out.print(f"[green]valid[/green]: {counts}" + (f" ({len(m.problems.warnings)} warning(s))"
                                                   if m.problems.warnings else ""))


@nodes_app.command("render")
def nodes_render(files: Files) -> None:
    """Expand NodePools into the Node objects the device plugin and GPU Feature Discovery would publish."""
    m = _load(files)
    errors = m.problems.errors
    _print_problems(m.problems.all)
    if errors:
        raise typer.Exit(1)
    docs = [node for pool in m.node_pools for node in expand_node_pool(pool)]
    sys.stdout.write(yaml.safe_dump_all(docs, sort_keys=False, explicit_start=True))


@mig_app.command("layouts")
def mig_layouts(
    model: Annotated[str, typer.Argument(help="GPU model, e.g. A100-SXM4-40GB")],
    profiles: Annotated[str | None,
                        typer.Option(help="Comma-separated profiles to use (default: all without +me)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False,
) -> None:
    """List every maximal MIG layout of a model."""
    geometry = _geometry(model)
    names = [p.strip() for p in profiles.split(",") if p.strip()] if profiles else None
    try:
        layouts = enumerate_maximal_layouts(geometry, names)
    except MigError as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from exc
    if as_json:
        doc = {"model": geometry.model,
               "layouts": [[{"profile": p.profile, "start": p.start} for p in layout] for layout in layouts]}
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
        return
    mixes = {tuple(sorted(layout_mix(layout).items())) for layout in layouts}
    table = Table(title=f"{geometry.model}: {len(layouts)} maximal layouts, {len(mixes)} distinct mixes")
    table.add_column("#", justify="right")
    table.add_column("layout (profile@start)")
    table.add_column("mix")
    for i, layout in enumerate(layouts, 1):
        mix = ", ".join(f"{n}x {p}" for p, n in sorted(layout_mix(layout).items()))
        table.add_row(str(i), " ".join(str(p) for p in layout), mix)
    out.print(table)


@mig_app.command("check")
def mig_check(
    model: Annotated[str, typer.Argument(help="GPU model")],
    layout: Annotated[str, typer.Argument(help='Layout, e.g. "3g.40gb@0,3g.40gb@4" or "3g.40gb:2,1g.10gb"')],
) -> None:
    """Check a MIG layout for a model; exit 1 with every problem when it is invalid."""
    geometry = _geometry(model)
    try:
        placements = parse_layout(layout, geometry)
    except MigError as exc:
        err.print(f"[red]invalid[/red]: {exc}")
        raise typer.Exit(1) from exc
    problems = validate_layout(geometry, placements)
    if problems:
        for p in problems:
            err.print(f"[red]invalid[/red]: {p}")
        raise typer.Exit(1)
    used = sum(geometry.profile(p.profile).memory_slices for p in placements)
    out.print(f"[green]valid[/green]: {' '.join(str(p) for p in placements)} "
              f"({used}/{geometry.memory_slices} memory slices used)")


def _geometry(model: str) -> MigGeometry:
    found = DEFAULT_CATALOG.find(model)
    geometry = geometry_for(found.key if found else model)
    if geometry is None:
        capable = ", ".join(m.key for m in DEFAULT_CATALOG if m.mig_capable)
        err.print(f"[red]{model} has no MIG geometry[/red]; MIG-capable models: {capable}")
        raise typer.Exit(2)
    return geometry


app.command()(simulate)
app.command()(plan)
app.command()(scheduler)
app.add_typer(bench_app, name="bench")


@app.command()
def demo() -> None:
    """Run the embedded case study: before (kube-default, exclusive GPUs) against after (gpufleet)."""
    run_demo()


def main() -> None:  # pragma: no cover - console entry
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
