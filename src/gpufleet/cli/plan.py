"""``gpufleet plan``: what Kueue's admission would decide for a snapshot of manifests, cycle by cycle.

The cycles are run by :mod:`gpufleet.scheduling.snapshot_plan` (the dashboard shows the same result); this
module parses the options and renders the decisions.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gpufleet.api.dra_need import DraNeed
from gpufleet.cli import console
from gpufleet.cli.options import (
    EXIT_FINDINGS,
    Files,
    Namespace,
    Output,
    OutputFormat,
    Strict,
    examples,
    in_namespace,
    namespace_of,
    output_format,
)
from gpufleet.cli.validate import load, print_problems
from gpufleet.cluster.dra_devices import DraNodeSummary, dra_summary
from gpufleet.cluster.dra_quota import charge_lines
from gpufleet.cluster.workloads import Workload
from gpufleet.scheduling.placement.dra_results import assignment_claims, pod_needs
from gpufleet.scheduling.snapshot_plan import STABLE_CAP, Cycle, PlanResult, run_cycles, settled
from gpufleet.scheduling.types import AdmittedWorkload, Decisions, PreemptedWorkload
from gpufleet.web.source_files import QUOTA_ONLY  # the dashboard says it in the same words

EPILOG = examples(
    "# one cycle on the case study's cluster and a snapshot of running and waiting work",
    "gpufleet plan examples/casestudy examples/plan/snapshot.yaml",
    "# every cycle until nothing changes, pods with their nodes and devices, one namespace",
    "gpufleet plan examples/casestudy examples/plan/snapshot.yaml --until-stable -o wide -n research",
    "# in CI: exit 1 when a workload would stay pending",
    "gpufleet plan examples/casestudy examples/plan/snapshot.yaml --until-stable --fail-on-pending -o json",
)


def _in(namespace: str | None, workload: str) -> bool:
    return in_namespace(namespace, namespace_of(workload))


def filtered(result: PlanResult, namespace: str | None) -> PlanResult:
    """The decisions about workloads in ``namespace`` (ClusterQueue usage is cluster-wide and kept whole)."""
    if namespace is None:
        return result
    cycles = [Cycle(Decisions([a for a in c.decisions.admitted if _in(namespace, a.workload)],
                              [p for p in c.decisions.preempted if _in(namespace, p.workload)],
                              [p for p in c.decisions.pending if _in(namespace, p.workload)]),
                    [p for p in c.pending if _in(namespace, p.workload)]) for c in result.cycles]
    return PlanResult(cycles, result.usage, result.policy, result.workloads)


def quota_only(result: PlanResult) -> bool:
    """The plan had no nodes: admission checked quota only, no pod was placed."""
    return result.policy is not None and result.policy.cluster is None


def dra_nodes(result: PlanResult) -> list[DraNodeSummary]:
    """The nodes whose GPUs the input's DRA ResourceSlices publish (none without slices)."""
    cluster = result.policy.cluster if result.policy is not None else None
    return dra_summary((n.name, n.gpus) for n in cluster) if cluster is not None else []


def plan_document(result: PlanResult) -> dict[str, Any]:
    charged = _claim_charges(result)
    needs = pod_needs((p.key, p.template.dra) for w in result.workloads for p in w.pods)
    doc: dict[str, Any] = {"quotaOnly": quota_only(result),
                           "cycles": [{"admitted": [_with_claim_quota(_admitted_json(a, result, needs), charged)
                                                    for a in c.decisions.admitted],
                                       "preempted": [p.to_json() for p in c.decisions.preempted],
                                       "pending": [p.to_json() for p in c.pending]} for c in result.cycles],
                           "usage": result.usage}
    dra = dra_nodes(result)
    if dra:  # only with DRA input: a plan of device-plugin nodes keeps the document it always had
        doc["draNodes"] = [{"node": d.node, "driver": d.driver, "pools": list(d.pools), "model": d.model,
                            "gpus": d.gpus, "wholeGpus": d.whole, "migDevices": dict(d.mig),
                            "dynamicMigGpus": d.dynamic} for d in dra]
    return doc


def _admitted_json(a: AdmittedWorkload, result: PlanResult, needs: dict[str, DraNeed]) -> dict[str, Any]:
    """An admission as JSON; a pod placed through DRA claims lists its claims' allocation results (``claims``)."""
    out = a.to_json()
    if not needs:
        return out
    cluster = result.policy.cluster if result.policy is not None else None
    for entry, p in zip(out["pods"], a.pods, strict=True):
        claims = assignment_claims(needs, cluster, p.pod, p.node, p.devices)
        if claims:
            entry["claims"] = [c.to_json() for c in claims]
    return out


def _claim_charges(result: PlanResult) -> dict[str, Workload]:
    """The workloads whose DRA claims quota charges through deviceClassMappings, or says it charges them nothing."""
    return {w.key: w for w in result.workloads
            if w.claim_quota_note is not None or any(ps.claim_charges for ps in w.pod_sets)}


def _with_claim_quota(out: dict[str, Any], charged: dict[str, Workload]) -> dict[str, Any]:
    """An admission's JSON with what its claims were charged (``draQuota``, one entry per pod set and request) and
    the same in words among its ``notes``."""
    w = charged.get(out["workload"])
    if w is None:
        return out
    entries = [{"podSet": ps.name, **c.to_json(ps.count)} for ps in w.pod_sets for c in ps.claim_charges]
    if entries:
        out["draQuota"] = entries
    out["notes"] = [*out.get("notes", []), *charge_lines(w)]
    return out


def _claim_quota_table(result: PlanResult) -> console.Table | None:
    """What the admitted workloads' DRA claims were charged, and through which mapping."""
    charged = _claim_charges(result)
    admitted = dict.fromkeys(a.workload for c in result.cycles for a in c.decisions.admitted if a.workload in charged)
    if not admitted:
        return None
    table = console.make_table("DRA claims and ClusterQueue quota (Kueue's deviceClassMappings)", "WORKLOAD", "CHARGED")
    for key in admitted:
        for line in charge_lines(charged[key]):
            table.add_row(key, line)
    return table


def _pods(a: AdmittedWorkload) -> str:
    return ", ".join(f"{p.pod}→{p.node}" + (f" ({', '.join(p.devices)})" if p.devices else "")
                     for p in a.pods if p.node)


def _cycle_table(index: int, c: Cycle, wide: bool, quota: bool) -> console.Table:
    d = c.decisions
    columns = ["WORKLOAD", "DECISION", "CLUSTERQUEUE / PREEMPTOR", "FLAVORS / REASON"] + (["PODS → NODES"] if wide
                                                                                          else [])
    table = console.make_table(f"cycle {index}: {len(d.admitted)} admitted{' by quota only' if quota else ''}, "
                               f"{len(d.preempted)} preempted, {len(c.pending)} pending", *columns)
    rows: list[list[str | console.Text]] = []
    for a in d.admitted:
        flavors = a.flavor_summary()  # resource=flavor (amount charged)
        rows.append([a.workload, console.styled("admitted", "green"), a.cluster_queue or "(no queue: no quota)",
                     flavors, _pods(a)])
    p: PreemptedWorkload
    for p in d.preempted:
        rows.append([p.workload, console.styled("preempted", "red"), p.preemptor or "-", p.reason, ""])
    for w in c.pending:
        rows.append([w.workload, console.styled("pending", "yellow"), "", w.reason, ""])
    for row in rows:
        table.add_row(*(row if wide else row[:4]))
    return table


def _dra_table(nodes: list[DraNodeSummary]) -> console.Table:
    table = console.make_table("GPUs from DRA ResourceSlices", "NODE",
                               "DRIVER", "MODEL", console.Column("GPUS", justify="right"),
                               console.Column("WHOLE", justify="right"), "MIG DEVICES")
    for d in nodes:
        table.add_row(d.node, d.driver, d.model, str(d.gpus), str(d.whole), d.mig_text())
    return table


def _usage_table(usage: dict[str, dict[str, dict[str, str]]]) -> console.Table:
    table = console.make_table("ClusterQueue usage", "CLUSTERQUEUE", "FLAVOR", "RESOURCE",
                               console.Column("USAGE", justify="right"))
    for cq, per in usage.items():
        for flavor, resources in per.items():
            for r, v in resources.items():
                table.add_row(cq, flavor, r, v)
    return table


def plan(
    files: Files,
    cycles: Annotated[int, typer.Option("--cycles", min=1, help="Scheduling cycles to run.")] = 1,
    until_stable: Annotated[bool, typer.Option(
        "--until-stable", help="Run until another cycle would change nothing: nothing admitted or preempted, and "
        f"no queue head left untried (at most {STABLE_CAP} cycles).")] = False,
    namespace: Namespace = None,
    output: Output = OutputFormat.text,
    as_json: Annotated[bool, typer.Option("--json", help="The same as -o json.")] = False,
    fail_on_pending: Annotated[bool, typer.Option(
        "--fail-on-pending", help="Exit 1 when a workload (in --namespace, if given) is still pending after the "
        "last cycle: a CI step that fails when the quota or the cluster is too small.")] = False,
    strict: Strict = False,
) -> None:
    """Show the admission decisions Kueue's semantics give for a snapshot: admitted (ClusterQueue, flavors, pods
    on nodes), preempted (by whom, why) and pending (why), cycle by cycle."""
    fmt = output_format(output, as_json)
    manifests = load(files, strict)
    print_problems(manifests)
    if manifests.problems.errors:
        console.error(f"{len(manifests.problems.errors)} error(s) in the input: nothing planned")
        raise typer.Exit(EXIT_FINDINGS)
    ran = run_cycles(manifests, cycles, until_stable)
    result = filtered(settled(ran) if until_stable else ran, namespace)
    if fmt.is_document:
        console.emit(plan_document(result), fmt.value)
    else:
        if quota_only(result):
            console.say(QUOTA_ONLY, style="yellow")
            console.say("")
        for i, c in enumerate(result.cycles, 1):
            console.show(_cycle_table(i, c, wide=fmt is OutputFormat.wide, quota=quota_only(result)))
            console.say("")
        console.show(_usage_table(result.usage))
        claim_quota = _claim_quota_table(result)
        if claim_quota is not None:
            console.say("")
            console.show(claim_quota)
        dra = dra_nodes(result)
        if dra:
            console.say("")
            console.show(_dra_table(dra))
    pending = result.cycles[-1].pending if result.cycles else []
    if fail_on_pending and pending:
        where = f" in namespace {namespace}" if namespace else ""
        console.error(f"{len(pending)} workload(s){where} still pending after cycle {len(result.cycles)}: "
                      + "; ".join(f"{p.workload} ({p.reason})" for p in pending))
        raise typer.Exit(EXIT_FINDINGS)
