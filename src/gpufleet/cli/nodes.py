"""``gpufleet nodes``: node views of NodePools (``render``: the Node objects a pool becomes)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
import yaml

from gpufleet.api.nodepool import POOL_LABEL, expand_node_pool
from gpufleet.api.objects import PRODUCT_LABEL
from gpufleet.cli import console
from gpufleet.cli.options import EXIT_FINDINGS, Files, OutputFormat, examples, new_app
from gpufleet.cli.validate import load, print_problems

GPU_PREFIXES = ("nvidia.com/", "gpufleet.io/")

nodes_app = new_app("Node views of NodePools.", epilog=examples(
    "gpufleet nodes render examples/casestudy", "gpufleet nodes render examples/casestudy -o wide"))

RenderOutput = Annotated[OutputFormat, typer.Option(
    "-o", "--output", case_sensitive=False,
    help="Output format: yaml (the default: Node manifests), json (a v1 List), text or wide (a table).")]


def _gpu_resources(node: dict[str, Any]) -> str:
    allocatable: dict[str, str] = node.get("status", {}).get("allocatable", {})
    return ", ".join(f"{k}={v}" for k, v in allocatable.items() if k.startswith(GPU_PREFIXES)) or "-"


def _table(nodes: list[dict[str, Any]], wide: bool) -> console.Table:
    columns: list[str | console.Column] = ["NAME", "POOL", "GPU MODEL", "GPU RESOURCES"]
    if wide:
        columns += [console.Column("CPU", justify="right"), console.Column("MEMORY", justify="right"), "TAINTS"]
    table = console.make_table(None, *columns)
    for node in nodes:
        labels: dict[str, str] = node["metadata"].get("labels", {})
        row = [node["metadata"]["name"], labels.get(POOL_LABEL, "-"), labels.get(PRODUCT_LABEL, "-"),
               _gpu_resources(node)]
        if wide:
            allocatable = node.get("status", {}).get("allocatable", {})
            taints = node.get("spec", {}).get("taints", [])
            row += [str(allocatable.get("cpu", "-")), str(allocatable.get("memory", "-")),
                    ", ".join(f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in taints) or "-"]
        table.add_row(*row)
    return table


@nodes_app.command("render", epilog=examples(
    "# the Node objects GPU Feature Discovery and the device plugin would publish for the case study",
    "gpufleet nodes render examples/casestudy",
    "# one line per node: name, pool, GPU model and GPU resources",
    "gpufleet nodes render examples/casestudy -o text",
))
def nodes_render(files: Files, output: RenderOutput = OutputFormat.yaml) -> None:
    """Expand NodePools into the Node objects the device plugin and GPU Feature Discovery would publish."""
    m = load(files)
    print_problems(m)
    if m.problems.errors:
        raise typer.Exit(EXIT_FINDINGS)
    nodes = [node for pool in m.node_pools for node in expand_node_pool(pool)]
    if output is OutputFormat.yaml:
        # Several Node manifests, as `kubectl apply -f` reads them (not one YAML list).
        console.write(yaml.safe_dump_all(nodes, sort_keys=False, explicit_start=True))
    elif output is OutputFormat.json:
        console.emit_json({"apiVersion": "v1", "kind": "List", "items": nodes})
    else:
        console.show(_table(nodes, wide=output is OutputFormat.wide))
