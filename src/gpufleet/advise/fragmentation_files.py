"""What ``gpufleet advise --objective fragmentation`` shows and writes: the ``-o json`` document
(:func:`advice_document`, also ``advice.json``), and with ``-o DIR`` the configuration files (:func:`file_texts`:
``node-labels.sh``, ``cluster.yaml``), the report (``advice.md``, ``advice.html``, through the other objectives'
report blocks) and ``whatif.json`` for the dashboard's what-if page.

``whatif.json`` holds the advice in the what-if page's ``AdviceDocument`` form (:mod:`gpufleet.web.whatif`):
``given`` and ``proposal`` judged with ``score`` = unallocated GPUs, % of capacity, at 100% arrived (the mean over
the paired seeds; lower is better), ``kpis`` the fill-up's figures (:data:`FRAGMENTATION_KPI_WORDS` and the
paired difference), ``pools`` each pool's open nodes and its nodes closed to fractional pods with the label that
closes them. The fill-up figures themselves (per seed) are ``advice.json``'s, beside it under ``fillUp``.

The page shows runs, and a result without runs is refused; the fill-up is not a run (it has no time). So the
runs are the given configuration and the proposal replayed by the simulator on the input's demand, its policy
and seed, as the other objectives' ``whatif.json`` holds them (runs named ``given`` and ``proposal``): what the
closure does to queue waits and allocation over time, which the fill-up does not measure. The advice's score
is the fill-up's, not these runs'.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpufleet.advise.closure import CLOSED, Closure, load_node_pools
from gpufleet.advise.contract import FRAGMENTATION
from gpufleet.advise.files import FILE_USES, FileUse, dump_documents, files_document, files_section
from gpufleet.advise.fragmentation import FragmentationAdvice, Measured
from gpufleet.advise.inputs import AdviseInput
from gpufleet.advise.nvidia import label_script
from gpufleet.advise.reasons import FRAGMENTATION_KPI_WORDS, kpi_text
from gpufleet.api.objects import GPU_FRACTIONS_LABEL
from gpufleet.sim.report.build import BulletsBlock, Report, Section, TableBlock, to_markdown
from gpufleet.sim.scenario import Scenario

# The files ``-o DIR`` writes, in the order they are listed, and what each is for.
ORDER = ("node-labels.sh", "cluster.yaml", "advice.json", "advice.md", "advice.html", "whatif.json")
FILE_USES_FRAGMENTATION: Mapping[str, FileUse] = {
    **FILE_USES,
    "node-labels.sh": FileUse(f"{GPU_FRACTIONS_LABEL}=false on every node of the input the proposal closes to "
                              "fractional GPU pods (nothing is drained: running pods stay)", "sh {path}", True),
    "cluster.yaml": FileUse("the NodePools, each split into its open nodes and <name>-whole, the nodes closed to "
                            "fractional pods, for the simulator", "gpufleet simulate {path} ...", False),
    "advice.json": FileUse("the advice as -o json prints it (the fill-up's figures per seed)", "", False),
}


def _fill_doc(m: Measured) -> dict[str, Any]:
    f = m.fill
    return {
        "name": m.name, "share": m.closure.share,
        "unallocatedGpuPct": {"mean": round(f.mean_unallocated, 4),
                              "perSeed": [round(x, 4) for x in f.unallocated_pct]},
        "benchmarkBin100Pct": [None if math.isnan(x) else round(x, 4) for x in f.binned_pct],
        "podsPlaced": {"mean": f.mean_placed, "perSeed": list(f.placed)},
        "podsArrived": list(f.arrived),
        "pairedDelta": {"mean": round(m.delta[0], 4), "sd": round(m.delta[1], 4)},
        "withinGuard": m.within_guard, "improves": m.improves, **({"whyNot": m.why_not} if m.why_not else {}),
        "nodesClosed": len(m.closure.closed),
        "pools": [{"pool": p.pool, "model": p.model, "gpusPerNode": p.gpus_per_node, "nodes": p.nodes,
                   "givenClosed": p.given_closed, "closed": list(p.closed)} for p in m.closure.pools],
        "seconds": round(f.seconds, 2),
    }


def advice_document(inp: AdviseInput, a: FragmentationAdvice,
                    files: Mapping[str, Path] | None = None) -> dict[str, Any]:
    """The advice as ``-o json`` prints it."""
    return {
        "input": inp.title, "objective": FRAGMENTATION, "seeds": list(a.seeds), "changed": a.changed,
        "measure": "unallocated GPUs, % of capacity, at 100% of the capacity arrived (FGD's fill-up)",
        "podsPlacedTolerance": a.tolerance_pods,
        "given": _fill_doc(a.given), "proposal": _fill_doc(a.chosen), "tried": [_fill_doc(m) for m in a.tried],
        "reasons": list(a.reasons), "notes": list(a.notes), "seconds": round(a.seconds, 2),
        **({"files": _files(files)} if files is not None else {}),
    }


def _files(files: Mapping[str, Path]) -> list[dict[str, Any]]:
    return files_document(files, None, FILE_USES_FRAGMENTATION, ORDER)


def file_texts(c: Closure) -> dict[str, str]:
    """node-labels.sh for the input's nodes the configuration closes; cluster.yaml with the NodePools split."""
    out: dict[str, str] = {}
    if c.labels:
        out["node-labels.sh"] = label_script(
            c.labels, what=f"the nodes closed to fractional GPU pods ({GPU_FRACTIONS_LABEL}=false)")
    if c.node_pools:
        out["cluster.yaml"] = dump_documents(c.node_pools)
    return out


OPEN_TEXT = "open to fractional pods"
CLOSED_TEXT = f"closed to fractional pods ({GPU_FRACTIONS_LABEL}=false)"


def kpis(m: Measured) -> dict[str, float]:
    """A configuration's figures as the advice's ``kpis`` (means over the seeds; the paired difference against the
    given configuration, 0 for itself)."""
    return {"unallocated_gpu_pct": round(m.fill.mean_unallocated, 4), "pods_placed": m.fill.mean_placed,
            "nodes_closed": len(m.closure.closed), "paired_delta_pct": round(m.delta[0], 4),
            "paired_delta_sd": round(m.delta[1], 4)}


def _pools(c: Closure) -> list[dict[str, Any]]:
    out = []
    for p in c.pools:
        closed = set(p.closed)
        for names, text, labels in (([n for n in p.names if n not in closed], OPEN_TEXT, {}),
                                    (sorted(closed), CLOSED_TEXT, dict(CLOSED))):
            if names:
                out.append({"pool": p.pool, "model": p.model, "gpusPerNode": p.gpus_per_node,
                            "config": {"mode": "exclusive", "text": text}, "labels": labels, "nodes": names})
    return out


def _judged(m: Measured, given: bool) -> dict[str, Any]:
    return {"name": m.name, "given": given, "score": round(m.fill.mean_unallocated, 4),
            "withinGuards": m.within_guard, **({"whyNot": m.why_not} if m.why_not else {}),
            "pools": _pools(m.closure), "requests": [], "quotas": [], "kpis": kpis(m), "perQueue": {}}


def whatif_advice(inp: AdviseInput, a: FragmentationAdvice, files: Mapping[str, Path] | None = None,
                    texts: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The advice in the what-if page's ``AdviceDocument`` form (module doc), the files with their texts."""
    fill = advice_document(inp, a)
    return {
        "input": inp.title, "objective": FRAGMENTATION, "budgetPerHour": None, "changed": a.changed,
        "given": _judged(a.given, True), "proposal": _judged(a.chosen, a.chosen is a.given),
        "tried": [{"name": m.name, "score": round(m.fill.mean_unallocated, 4), "withinGuards": m.within_guard,
                   **({"whyNot": m.why_not} if m.why_not else {}), "kpis": kpis(m)} for m in a.tried],
        "reasons": list(a.reasons), "notes": list(a.notes),
        "files": files_document(files or {}, texts if texts is not None else {}, FILE_USES_FRAGMENTATION, ORDER),
        "seeds": list(a.seeds), "measure": fill["measure"], "podsPlacedTolerance": a.tolerance_pods,
        "seconds": fill["seconds"], "fillUp": {k: fill[k] for k in ("given", "proposal", "tried")},
    }


def figures(a: FragmentationAdvice) -> list[tuple[str, str, str, str]]:
    """The advice's figures, given beside proposal, as the report and the CLI show them: (key, words, given,
    proposal)."""
    given, proposal = kpis(a.given), kpis(a.chosen)
    return [(key, words, kpi_text(key, given[key]), kpi_text(key, proposal[key]))
            for key, words, _ in FRAGMENTATION_KPI_WORDS]


def report(inp: AdviseInput, a: FragmentationAdvice, files: Mapping[str, Path]) -> Report:
    """The advice as a report: before and after, why, the nodes closed per pool, the files, every configuration
    measured, the seeds and the time taken."""
    g, c = a.given, a.chosen
    n = len(a.seeds)
    shown = TableBlock.of(["figure", "given", "proposal"],
                          [[f"{words} (mean of {n} seeds)" if key != "nodes_closed" else words, given, proposal]
                           for key, words, given, proposal in figures(a)])
    pools = TableBlock.of(["pool", "model", "GPUs per node", "nodes", "closed (given)", "closed (proposal)"],
                          [[p.pool, p.model, str(p.gpus_per_node), str(p.nodes), str(p.given_closed),
                            str(len(p.closed))] for p in c.closure.pools], 2)
    tried = TableBlock(
        ("configuration", "unallocated GPUs % (mean)", "paired Δ ± sd (points)", "pods placed (mean)",
         "within the guard", "chosen / why not"),
        tuple((m.name, f"{m.fill.mean_unallocated:.3f}", a.delta_text(m), f"{m.fill.mean_placed:,.1f}",
               "yes" if m.within_guard else "no", a.verdict(m))
         for m in [g, *a.tried]), (False, True, True, True, False, False))
    measured = (f"{1 + len(a.tried)} configurations × {n} paired seeds ({', '.join(map(str, a.seeds))}: the same "
                f"arrivals for each) measured in {a.seconds:.0f} s. Within the guard: at most {a.tolerance_pods} "
                "fewer pods placed until 100% arrived than the given configuration.")
    sections = [Section("Before and after, at saturation (FGD's fill-up)", [shown]),
                Section("Why", [BulletsBlock(tuple(a.reasons))]),
                Section("Nodes closed to fractional pods, per pool", [pools]),
                files_section(files_document(files, None, FILE_USES_FRAGMENTATION, ORDER), a.changed),
                Section("Every configuration measured", [tried, measured])]
    if a.notes:
        sections.append(Section("Notes", [BulletsBlock(tuple(a.notes))]))
    intro = [f"Input: {inp.title}; objective {FRAGMENTATION}: unallocated GPUs, % of capacity, at 100% of the "
             "capacity arrived (FGD's fill-up), with as many pods placed. Every figure is the fill-up's, on the same "
             "arrivals for each configuration."]
    return Report("gpufleet advise", intro, sections)


def replay_scenarios(inp: AdviseInput, a: FragmentationAdvice) -> list[Scenario]:
    """The given configuration and the proposal as the simulator runs them: the input's demand, policy and config,
    on the nodes each configuration makes (NodePools split, nodes labelled)."""
    out = []
    for name, m in (("given", a.given), ("proposal", a.chosen)):
        manifests = inp.manifests
        if m.closure.changed:
            pools = load_node_pools(m.closure.node_pools).node_pools
            manifests = dataclasses.replace(manifests, nodes=list(m.closure.nodes), node_pools=list(pools))
        out.append(Scenario(name, manifests, inp.jobs, inp.config, (inp.policy,)))
    return out


def replayed_runs(inp: AdviseInput, a: FragmentationAdvice) -> list[dict[str, Any]]:
    """:func:`replay_scenarios` run, as ``simulate --json`` writes runs (module doc)."""
    from gpufleet.sim.scenario import run_scenario
    from gpufleet.sim.summary import run_summary

    return [run_summary(run_scenario(s, inp.policy, seed=inp.seed)) for s in replay_scenarios(inp, a)]


def write(directory: Path, inp: AdviseInput, a: FragmentationAdvice) -> dict[str, Path]:
    """Everything ``-o DIR`` writes, into ``directory``: the configuration files
    (:func:`file_texts`), the report (advice.md, advice.html), whatif.json and
    advice.json; their paths by name."""
    directory.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    texts = file_texts(a.chosen.closure)
    for name, text in texts.items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        written[name] = path
    written["advice.json"] = directory / "advice.json"
    _write_report(directory, inp, a, texts, written)
    written["advice.json"].write_text(json.dumps(advice_document(inp, a, written), indent=1) + "\n",
                                      encoding="utf-8")
    return written


def _write_report(directory: Path, inp: AdviseInput, a: FragmentationAdvice, texts: Mapping[str, str],
                  written: dict[str, Path]) -> None:
    """advice.md, advice.html and whatif.json into ``directory``, beside the files already ``written``."""
    from gpufleet.sim.report.html import to_html

    for name in ("advice.md", "advice.html", "whatif.json"):
        written[name] = directory / name
    r = report(inp, a, written)
    written["advice.md"].write_text(to_markdown(r), encoding="utf-8")
    written["advice.html"].write_text(to_html(r, {}), encoding="utf-8")
    whatif = {"runs": replayed_runs(inp, a), "advice": whatif_advice(inp, a, written, texts)}
    written["whatif.json"].write_text(json.dumps(whatif, default=str) + "\n", encoding="utf-8")
