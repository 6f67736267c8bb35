"""``gpufleet plan``: what Kueue's admission would decide for a snapshot of manifests, cycle by cycle.

The snapshot (queues, quotas, workloads, and nodes when there are any) is loaded, every workload is submitted,
and scheduling cycles run. Between cycles the pods of preempted workloads are taken as gone, so a preemptor
can be admitted in the next cycle, as it would be once the evictions complete.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from gpufleet.api.kinds import format_amount
from gpufleet.api.manifests import load_manifests
from gpufleet.cluster.state import ClusterState
from gpufleet.cluster.workloads import build_workloads
from gpufleet.scheduling.kueue import KueuePolicy
from gpufleet.scheduling.types import Decisions, PendingWorkload

STABLE_CAP = 1000  # --until-stable never runs more cycles than this

_out = Console()
_err = Console(stderr=True)


def _usage_json(policy: KueuePolicy) -> dict[str, dict[str, dict[str, str]]]:
    return {cq: {flavor: {r: format_amount(r, v) for r, v in resources.items()} for flavor, resources in per.items()}
            for cq, per in policy.usage().items()}


def _cycle_json(d: Decisions, pending: list[PendingWorkload]) -> dict[str, Any]:
    return {"admitted": [a.to_json() for a in d.admitted], "preempted": [p.to_json() for p in d.preempted],
            "pending": [p.to_json() for p in pending]}


def _render(index: int, d: Decisions, pending: list[PendingWorkload]) -> None:
    table = Table(title=f"cycle {index}: {len(d.admitted)} admitted, {len(d.preempted)} preempted, "
                        f"{len(pending)} pending")
    table.add_column("workload")
    table.add_column("decision")
    table.add_column("ClusterQueue / preemptor")
    table.add_column("flavors / reason", overflow="fold")
    table.add_column("pods", overflow="fold")
    for a in d.admitted:
        flavors = ", ".join(f"{r}={f}" for r, f in sorted(a.flavors.items()))
        pods = ", ".join(f"{p.pod}→{p.node}" + (f" ({len(p.devices)} device(s))" if p.devices else "")
                         for p in a.pods if p.node)
        table.add_row(a.workload, "[green]admitted[/green]", a.cluster_queue or "(no queue: no quota)", flavors, pods)
    for p in d.preempted:
        table.add_row(p.workload, "[red]preempted[/red]", p.preemptor or "-", p.reason, "")
    for w in pending:
        table.add_row(w.workload, "[yellow]pending[/yellow]", "", w.reason, "")
    _out.print(table)


def _render_usage(usage: dict[str, dict[str, dict[str, str]]]) -> None:
    table = Table(title="ClusterQueue usage")
    for column in ("ClusterQueue", "flavor", "resource", "usage"):
        table.add_column(column)
    for cq, per in usage.items():
        for flavor, resources in per.items():
            for r, v in resources.items():
                table.add_row(cq, flavor, r, v)
    _out.print(table)


def plan(
    files: Annotated[list[str], typer.Argument(help="Manifest files or folders; - reads stdin.")],
    cycles: Annotated[int, typer.Option("--cycles", min=1, help="Scheduling cycles to run.")] = 1,
    until_stable: Annotated[bool, typer.Option(
        "--until-stable", help="Run until another cycle would change nothing: nothing admitted or preempted, and "
        f"no queue head left untried (at most {STABLE_CAP} cycles).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the decisions as JSON.")] = False,
) -> None:
    """Show the admission decisions Kueue's semantics give for a snapshot: admitted (ClusterQueue, flavors,
    pods on nodes), preempted (by whom, why) and pending (why), cycle by cycle."""
    manifests = load_manifests(files, stdin=sys.stdin)
    workloads = build_workloads(manifests)
    problems = manifests.problems
    for p in problems.all:
        style = "yellow" if p.severity == "warning" else "red"
        _err.print(f"[{style}]{p}[/{style}]", highlight=False, soft_wrap=True)
    if problems.errors:
        _err.print(f"[red]{len(problems.errors)} error(s)[/red]: nothing planned")
        raise typer.Exit(1)
    cluster = ClusterState.from_nodes(manifests.nodes) if manifests.nodes else None
    policy = KueuePolicy(manifests, cluster)
    now = max((w.created for w in workloads), default=0.0) + 1.0
    for w in workloads:
        policy.submit(w, now)
    limit = STABLE_CAP if until_stable else cycles
    results: list[tuple[Decisions, list[PendingWorkload]]] = []
    for _ in range(limit):
        decisions = policy.cycle(now)
        results.append((decisions, policy.pending_report()))
        for victim in decisions.preempted:
            policy.evicted(victim.workload, now, requeue=True, reason=victim.reason)
        now += 1.0
        if until_stable and policy.settled():
            break
    usage = _usage_json(policy)
    if as_json:
        doc = {"cycles": [_cycle_json(d, pending) for d, pending in results], "usage": usage}
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
        return
    for i, (d, pending) in enumerate(results, 1):
        _render(i, d, pending)
    _render_usage(usage)
