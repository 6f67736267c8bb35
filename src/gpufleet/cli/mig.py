"""``gpufleet mig``: MIG geometry of a GPU model (``layouts``: every maximal layout; ``check``: is a layout valid)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gpufleet.cli import console
from gpufleet.cli.options import EXIT_FINDINGS, Output, OutputFormat, examples, new_app, output_format, usage_error
from gpufleet.gpu.catalog import DEFAULT_CATALOG, CatalogError
from gpufleet.gpu.mig import (
    MigError,
    MigGeometry,
    MigPlacement,
    enumerate_maximal_layouts,
    geometry_for,
    layout_mix,
    parse_layout,
)

mig_app = new_app("MIG geometry: layouts and checks.", epilog=examples(
    "gpufleet mig layouts A100-SXM4-80GB", "gpufleet mig check A100-SXM4-80GB 3g.40gb:2,1g.10gb"))

def _complete_model(incomplete: str) -> list[str]:
    return [m.key for m in DEFAULT_CATALOG if m.mig_capable and m.key.lower().startswith(incomplete.lower())]


Model = Annotated[str, typer.Argument(help="GPU model, e.g. A100-SXM4-80GB, H100-SXM5-80GB, A30 (a name several "
                                           "models share, such as A100, is refused with the choices).",
                                      show_default=False, autocompletion=_complete_model)]


def geometry(model: str) -> MigGeometry:
    """The MIG geometry of a catalog model (a key, product name or alias: the catalog's one rule,
    :meth:`Catalog.lookup`); a usage error when it has none, or when the name is one several models share (``A100``:
    a 40 GB one has 1g.5gb where an 80 GB one has 1g.10gb, so gpufleet does not pick one)."""
    try:
        found = DEFAULT_CATALOG.lookup(model)
    except CatalogError as exc:
        raise usage_error(str(exc), "MODEL") from None
    geo = geometry_for(found.key if found else model)
    if geo is None:
        capable = ", ".join(m.key for m in DEFAULT_CATALOG if m.mig_capable)
        raise usage_error(f"{model} has no MIG geometry; MIG-capable models: {capable}", "MODEL")
    return geo


def _placements(layout: tuple[MigPlacement, ...] | list[MigPlacement]) -> list[dict[str, Any]]:
    return [{"profile": p.profile, "start": p.start} for p in layout]


def _mix(layout: tuple[MigPlacement, ...]) -> str:
    return ", ".join(f"{n}x {p}" for p, n in sorted(layout_mix(layout).items()))


@mig_app.command("layouts", epilog=examples(
    "# every maximal layout of an A100-80GB, one row each",
    "gpufleet mig layouts A100-SXM4-80GB",
    "# only from these profiles, as YAML",
    "gpufleet mig layouts A100-SXM4-40GB --profiles 1g.5gb,3g.20gb,7g.40gb -o yaml",
))
def mig_layouts(
    model: Model,
    profiles: Annotated[str | None, typer.Option(
        help="Comma-separated profiles to use (default: all without +me).")] = None,
    output: Output = OutputFormat.text,
    as_json: Annotated[bool, typer.Option("--json", help="The same as -o json.")] = False,
) -> None:
    """List every maximal MIG layout of a model: no instance can be added to one without removing another."""
    fmt = output_format(output, as_json)
    geo = geometry(model)
    names = [p.strip() for p in profiles.split(",") if p.strip()] if profiles else None
    try:
        layouts = enumerate_maximal_layouts(geo, names)
    except MigError as exc:
        raise usage_error(str(exc), "--profiles") from None
    if fmt.is_document:
        console.emit({"model": geo.model, "layouts": [_placements(layout) for layout in layouts]}, fmt.value)
        return
    mixes = {tuple(sorted(layout_mix(layout).items())) for layout in layouts}
    columns: list[str | console.Column] = [console.Column("#", justify="right"), "MIX", "LAYOUT (PROFILE@START)"]
    if fmt is OutputFormat.wide:
        columns += [console.Column("COMPUTE SLICES", justify="right"), console.Column("MEMORY SLICES", justify="right")]
    table = console.make_table(f"{geo.model}: {len(layouts)} maximal layouts, {len(mixes)} distinct mixes",
                               *columns)
    for i, layout in enumerate(layouts, 1):
        row = [str(i), _mix(layout), " ".join(str(p) for p in layout)]
        if fmt is OutputFormat.wide:
            compute = sum(geo.profile(p.profile).compute_slices for p in layout)
            memory = sum(geo.profile(p.profile).memory_slices for p in layout)
            row += [f"{compute}/{geo.compute_slices}", f"{memory}/{geo.memory_slices}"]
        table.add_row(*row)
    console.show(table)


@mig_app.command("check", epilog=examples(
    "# two 3g.40gb instances at explicit starts: valid",
    "gpufleet mig check A100-SXM4-80GB 3g.40gb@0,3g.40gb@4",
    "# the guide's '2x 3g.40gb + 1x 1g.10gb': invalid, exit 1",
    "gpufleet mig check A100-SXM4-80GB 3g.40gb:2,1g.10gb",
))
def mig_check(
    model: Model,
    layout: Annotated[str, typer.Argument(
        help='Layout: "3g.40gb@0,3g.40gb@4" (profile@start) or "3g.40gb:2,1g.10gb" (counts).',
        show_default=False)],
    output: Output = OutputFormat.text,
) -> None:
    """Check a MIG layout for a model; exit 1 with every problem when it is invalid."""
    geo = geometry(model)
    placements: tuple[MigPlacement, ...] = ()
    problems: list[str] = []
    try:
        placements = tuple(parse_layout(layout, geo))
    except MigError as exc:
        problems = list(exc.problems) or [str(exc)]
    memory = sum(geo.profile(p.profile).memory_slices for p in placements)
    compute = sum(geo.profile(p.profile).compute_slices for p in placements)
    if output.is_document:
        console.emit({"model": geo.model, "layout": layout, "valid": not problems,
                      "placements": _placements(placements), "problems": problems,
                      "memorySlices": {"used": memory, "total": geo.memory_slices},
                      "computeSlices": {"used": compute, "total": geo.compute_slices}}, output.value)
    elif problems:
        for p in problems:
            console.error(p)
    else:
        console.say(console.styled("valid", "green")
                    + f": {' '.join(str(p) for p in placements)} ({memory}/{geo.memory_slices} memory slices, "
                      f"{compute}/{geo.compute_slices} compute slices used)")
    if problems:
        raise typer.Exit(EXIT_FINDINGS)
