"""What ``gpufleet advise -o DIR`` writes, and the advice as a document (``-o json``) and a report.

Files, each complete and applied as GPU Operator and Kueue users apply them:

* ``mig-parted-config.yaml``: mig-parted's ConfigMap (``version: v1``, ``mig-configs``);
* ``device-plugin-config.yaml``: the device plugin's ConfigMap (``version: v1``, ``sharing.timeSlicing``);
* ``cluster-policy-patch.yaml``: the ClusterPolicy merge patch that points the operator at both;
* ``node-labels.sh``: ``kubectl label node`` for every node of the input (``nvidia.com/mig.config``,
  ``nvidia.com/device-plugin.config``, ``gpu-mode``); written when the input has Nodes (a snapshot);
* ``cluster.yaml``: the cluster as the proposal has it (NodePools and Nodes), for ``gpufleet simulate``;
* ``workload.yaml``: the input's WorkloadGenerators with each class asking for its proposed device (manifests
  of the input's own jobs are the user's to change: the advice names each class's new request);
* ``kueue.yaml``: ResourceFlavors, the rewritten ClusterQueues and the Cohorts (without their own quota);
* ``advice.json``: the advice as ``-o json`` prints it; ``advice.md`` and ``advice.html``: the report;
* ``whatif.json``: the given configuration and the proposal run again as ``simulate --json`` writes runs
  (timelines included), with the advice document beside them (the files' texts included, up to
  :data:`MAX_SHOWN_TEXT` each), for the dashboard's what-if page: ``gpufleet dashboard --simulation
  DIR/whatif.json``.

The advice document lists every file written with what it is and the command that uses it (:data:`FILE_USES`),
and says which of them change the cluster when applied.

When the given configuration wins, the files describe it (its queues as written): applying them changes
nothing, and they are NVIDIA's form of what a NodePool said.
"""

from __future__ import annotations

import copy
import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gpufleet.advise.contract import Advice, Judged, NodeConfig, Proposal
from gpufleet.advise.fleet import MODE_LABEL
from gpufleet.advise.nvidia import (
    cluster_policy_patch,
    device_plugin_config_map,
    label_script,
    mig_parted_config_map,
    node_labels,
)
from gpufleet.advise.realise import Realised, realise
from gpufleet.advise.reasons import KPI_WORDS, kpi_text
from gpufleet.sim.report.build import BulletsBlock, Report, Section, TableBlock, duration_text, to_markdown

if TYPE_CHECKING:
    from gpufleet.advise.search import Context

FILES = ("mig-parted-config.yaml", "device-plugin-config.yaml", "cluster-policy-patch.yaml", "node-labels.sh",
         "cluster.yaml", "workload.yaml", "kueue.yaml", "advice.json", "advice.md", "advice.html", "whatif.json")


@dataclass(frozen=True, slots=True)
class FileUse:
    what: str  # what the file is
    command: str  # how it is used ({path}: where it was written); empty for a file only read
    applies: bool  # applying it changes the cluster (the others are for gpufleet and for people)


FILE_USES: Mapping[str, FileUse] = {
    "mig-parted-config.yaml": FileUse(
        "mig-parted's ConfigMap: one MIG configuration per mix (version v1, mig-configs)", "kubectl apply -f {path}",
        True),
    "device-plugin-config.yaml": FileUse(
        "the NVIDIA device plugin's ConfigMap: the default configuration and one per time-slicing replica count",
        "kubectl apply -f {path}", True),
    "cluster-policy-patch.yaml": FileUse(
        "the GPU Operator's ClusterPolicy patch: mixed MIG strategy, the device plugin and mig-manager pointed at "
        "both ConfigMaps", "kubectl patch clusterpolicy cluster-policy --type merge --patch-file {path}", True),
    "node-labels.sh": FileUse(
        "nvidia.com/mig.config, nvidia.com/device-plugin.config and gpu-mode for every node (mig-manager drains a "
        "node whose nvidia.com/mig.config changes)", "sh {path}", True),
    "kueue.yaml": FileUse("ResourceFlavors, the ClusterQueues with their GPU quotas rewritten, and the Cohorts",
                          "kubectl apply -f {path}", True),
    "cluster.yaml": FileUse("the cluster as proposed (NodePools and Nodes), for the simulator",
                            "gpufleet simulate {path} ...", False),
    "workload.yaml": FileUse("the input's WorkloadGenerators with each class asking for its proposed device",
                             "gpufleet simulate {path} ...", False),
    "advice.json": FileUse("the advice as -o json prints it", "", False),
    "advice.md": FileUse("the report, in Markdown", "", False),
    "advice.html": FileUse("the report, as one self-contained HTML page (open it in a browser)", "", False),
    "whatif.json": FileUse("the given configuration and the proposal as simulate --json runs, with the advice",
                           "gpufleet dashboard --simulation {path}", False),
}
MAX_SHOWN_TEXT = 64 * 1024  # characters of a file's text whatif.json carries for the page; longer ones: open it


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (a ConfigMap's embedded files) as literal blocks, the way people write them."""


def _text(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|" if "\n" in data else None)


_Dumper.add_representer(str, _text)


def dump_documents(docs: Sequence[Mapping[str, Any]]) -> str:
    """YAML documents as the advice writes them (strings that YAML would misread are quoted; no line wrapping)."""
    return yaml.dump_all(list(docs), Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1 << 20)


def configs_of(proposal: Proposal) -> list[NodeConfig]:
    return sorted({g.config for g in proposal.pools})


@dataclass(slots=True)
class Written:
    files: dict[str, Path]  # name -> path


def queue_documents(ctx: Context, chosen: Proposal, realised: Realised) -> list[dict[str, Any]]:
    """The Kueue objects to apply: the proposal's, or the given configuration's as written."""
    if not chosen.given:
        return [*realised.flavors, *realised.cluster_queues, *realised.cohorts]
    kinds = ("ResourceFlavor", "ClusterQueue", "Cohort")
    return [d.data for d in ctx.inp.docs if isinstance(d.data, dict) and d.data.get("kind") in kinds]


def file_texts(ctx: Context, advice: Advice) -> dict[str, str]:
    """Every file's text but the report's and the JSON's (module doc)."""
    chosen = advice.chosen.proposal
    realised = realise(ctx.inp, ctx.pools, chosen, ctx.classes)
    configs = configs_of(chosen)
    out = {
        "mig-parted-config.yaml": dump_documents([mig_parted_config_map(configs)]),
        "device-plugin-config.yaml": dump_documents([device_plugin_config_map(configs)]),
        "cluster-policy-patch.yaml": dump_documents([cluster_policy_patch()]),
        "cluster.yaml": dump_documents(realised.cluster),
        "kueue.yaml": dump_documents(queue_documents(ctx, chosen, realised)),
    }
    if ctx.inp.generators:
        out["workload.yaml"] = dump_documents(workload_documents(ctx, chosen))
    labels = {node: node_labels(g.config) for g in chosen.pools for node in g.nodes
              if not ctx.by_name[g.pool].node_pools}
    if labels:
        out["node-labels.sh"] = label_script(labels)
    return out


def workload_documents(ctx: Context, proposal: Proposal) -> list[dict[str, Any]]:
    """The input's WorkloadGenerators with each class's demand form (for the forms' scenario) asking for the
    proposal's device; a ``gpu-mode`` node selector is dropped (the proposal's flavors select nodes)."""
    forms = {(ctx.classes[k].jobs[0].klass, f.namespace): f for k, f in enumerate(proposal.forms)
             if ctx.classes[k].jobs}
    out = []
    for doc in ctx.inp.generators:
        data = copy.deepcopy(doc.data)
        for c in (data.get("spec") or {}).get("classes") or []:
            form = forms.get((c.get("name"), c.get("namespace", c.get("name"))))
            if form is None or not form.changed:
                continue
            demand = c.setdefault("demand", {})
            old = demand.get(ctx.inp.scenario) or demand.get("default") or {}
            selector = {k: v for k, v in (old.get("nodeSelector") or {}).items() if k != MODE_LABEL}
            demand[ctx.inp.scenario] = {"resource": form.resource, "count": form.count,
                                        **({"nodeSelector": selector} if selector else {})}
        out.append(data)
    return out


def _config_doc(config: NodeConfig) -> dict[str, Any]:
    doc: dict[str, Any] = {"mode": config.mode, "text": config.text}
    if config.mode == "time-sliced":
        doc["replicas"] = config.replicas
    if config.mode == "mig":
        doc["mig"] = {p: n for p, n in config.mig}
    return doc


def _judged_doc(j: Judged) -> dict[str, Any]:
    p = j.proposal
    return {
        "name": p.name, "given": p.given, "score": round(j.score, 4), "withinGuards": j.feasible,
        **({"whyNot": j.why_not} if j.why_not else {}),
        "pools": [{"pool": g.pool, "model": g.model, "gpusPerNode": g.gpus_per_node, "config": _config_doc(g.config),
                   "labels": node_labels(g.config), "nodes": list(g.nodes)} for g in p.pools],
        "requests": [{"class": f.klass, "namespace": f.namespace, "queue": f.queue, "resource": f.resource,
                      "count": f.count, "given": f.given} for f in p.forms],
        "quotas": [{"clusterQueue": q.cluster_queue, "flavor": q.flavor, "resource": q.resource,
                    "nominalQuota": q.nominal} for q in p.quotas],
        "kpis": dict(j.kpis), "perQueue": dict(j.per_queue), "simulatedSeconds": round(j.wall_s, 2),
    }


def files_document(files: Mapping[str, Path], texts: Mapping[str, str] | None = None,
                   uses: Mapping[str, FileUse] = FILE_USES, order: Sequence[str] = FILES) -> list[dict[str, Any]]:
    """Every file written, in ``order``: its name, path, what it is, the command that uses it and whether
    applying it changes the cluster (``uses``: an objective's own words for its files); with ``texts``, each
    file's text (None when longer than :data:`MAX_SHOWN_TEXT`, or not given)."""
    out = []
    for name in order:
        if name not in files:
            continue
        use = uses[name]
        entry: dict[str, Any] = {"file": name, "path": str(files[name]), "what": use.what,
                                 "command": use.command.format(path=shlex.quote(str(files[name]))),
                                 "applies": use.applies}
        if texts is not None:
            text = texts.get(name)
            entry["text"] = text if text is not None and len(text) <= MAX_SHOWN_TEXT else None
        out.append(entry)
    return out


def advice_document(ctx: Context, advice: Advice, files: Mapping[str, Path] | None = None,
                    texts: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The advice as ``-o json`` prints it; ``files``: what was written (:func:`files_document`)."""
    return {
        "input": ctx.inp.title, "seed": ctx.inp.seed, "windowSeconds": ctx.inp.window_s,
        "objective": advice.objective, "budgetPerHour": advice.budget, "changed": advice.changed,
        "given": _judged_doc(advice.given), "proposal": _judged_doc(advice.chosen),
        "tried": [{"name": j.proposal.name, "score": round(j.score, 4), "withinGuards": j.feasible,
                   **({"whyNot": j.why_not} if j.why_not else {}),
                   "kpis": {k: j.kpis.get(k) for k, _, _ in KPI_WORDS}} for j in advice.tried],
        "reasons": list(advice.reasons), "notes": list(advice.notes),
        "timings": {k: round(v, 3) if isinstance(v, float) else v for k, v in advice.timings.items()},
        **({"files": files_document(files, texts)} if files is not None else {}),
    }


def files_section(entries: Sequence[Mapping[str, Any]], changed: bool) -> Section:
    """The report's section on the files written (:func:`files_document`'s entries): those that change the
    cluster, in the order to apply them, then the others."""
    applied = [[e["file"], e["what"], e["command"]] for e in entries if e["applies"]]
    return Section("The files", [
        ("Applied in this order, they make the cluster what the proposal says"
         + ("" if changed else " (the given configuration: applying them changes nothing)") + ":")
        if applied else "None of them changes the cluster when applied:",
        *([TableBlock.of(["file", "what it is", "apply with"], applied, 3)] if applied else []),
        "Also written:",
        TableBlock.of(["file", "what it is", "use"],
                      [[e["file"], e["what"], e["command"] or "—"] for e in entries if not e["applies"]], 3)])


def report(ctx: Context, advice: Advice, files: Mapping[str, Path] | None = None) -> Report:
    """The advice as a report (``advice.md``, ``advice.html``; the simulation report's blocks); with ``files``,
    a section on the files written and how to apply them."""
    g, c = advice.given, advice.chosen
    kpis = TableBlock.of(["figure", "given", "proposal"],
                         [[words, kpi_text(key, g.kpis.get(key)), kpi_text(key, c.kpis.get(key))]
                          for key, words, _ in KPI_WORDS])
    queues = TableBlock.of(["queue", "p95 wait (given)", "p95 wait (proposal)", "success (given)",
                            "success (proposal)"],
                           [[q, duration_text(g.per_queue.get(q, {}).get("wait_p95_s")),
                             duration_text(c.per_queue.get(q, {}).get("wait_p95_s")),
                             kpi_text("job_success_pct", g.per_queue.get(q, {}).get("job_success_pct")),
                             kpi_text("job_success_pct", c.per_queue.get(q, {}).get("job_success_pct"))]
                            for q in sorted(set(g.per_queue) | set(c.per_queue))])
    pools = TableBlock.of(["pool", "model", "nodes", "configuration"],
                          [[p.pool, p.model, str(len(p.nodes)), p.config.text] for p in c.proposal.pools], 3)
    requests = TableBlock.of(["class", "namespace", "asks now", "proposal"],
                             [[f.klass, f.namespace, f.given, f.resource] for f in c.proposal.forms], 4)
    tried = TableBlock.of(["proposal", "score", "within guards"],
                          [[j.proposal.name, f"{j.score:,.3f}", "yes" if j.feasible else (j.why_not or "no")]
                           for j in [advice.given, *advice.tried]], 1)
    t = advice.timings
    timing = (f"{len(advice.tried)} proposals simulated besides the given configuration in {t.get('total', 0):.0f} s: "
              f"the integer program {t.get('program', 0):.1f} s ({t.get('programs', 0):.0f} solves), the simulator "
              f"{t.get('simulate', 0):.1f} s, writing proposals {t.get('realise', 0):.1f} s.")
    sections = [Section("Before and after, on the same demand", [kpis, queues]),
                Section("Why", [BulletsBlock(tuple(advice.reasons))]),
                Section("The proposal", [pools, requests]),
                Section("Every proposal the simulator judged", [tried, timing])]
    if files is not None:
        sections.insert(3, files_section(files_document(files), advice.changed))
    if advice.notes:
        sections.append(Section("Notes", [BulletsBlock(tuple(advice.notes))]))
    intro = [f"Input: {ctx.inp.title}; objective {advice.objective}"
             + (f", budget {advice.budget:g} CHF/h" if advice.budget is not None else "")
             + f"; seed {ctx.inp.seed}. Every figure is the simulator's, on the same jobs."]
    return Report("gpufleet advise", intro, sections)


def whatif_document(ctx: Context, advice: Advice, files: Mapping[str, Path] | None = None,
                    texts: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The given configuration and the proposal as a ``simulate --json`` document (runs named ``given`` and
    ``proposal``, with their timelines), and the advice document beside them (the files' texts included)."""
    from gpufleet.advise.search import scenario_of
    from gpufleet.sim.scenario import run_scenario
    from gpufleet.sim.summary import run_summary

    runs = []
    for name, judged in (("given", advice.given), ("proposal", advice.chosen)):
        scenario = scenario_of(ctx, judged.proposal)
        scenario.name = name
        runs.append(run_summary(run_scenario(scenario, ctx.inp.policy, seed=ctx.inp.seed)))
    return {"runs": runs, "advice": advice_document(ctx, advice, files, texts if texts is not None else {})}


def write(directory: Path, ctx: Context, advice: Advice) -> Written:
    """Write every file (module doc) into ``directory``."""
    from gpufleet.sim.report.html import to_html

    directory.mkdir(parents=True, exist_ok=True)
    texts = file_texts(ctx, advice)
    own = ("advice.json", "advice.md", "advice.html", "whatif.json")
    written = {name: directory / name for name in FILES if name in texts or name in own}
    for name, text in texts.items():
        written[name].write_text(text, encoding="utf-8")
    r = report(ctx, advice, written)
    written["advice.md"].write_text(to_markdown(r), encoding="utf-8")
    written["advice.html"].write_text(to_html(r, {}), encoding="utf-8")
    whatif = whatif_document(ctx, advice, written, texts)
    written["whatif.json"].write_text(json.dumps(whatif, default=str) + "\n", encoding="utf-8")
    doc = advice_document(ctx, advice, written)
    written["advice.json"].write_text(json.dumps(doc, indent=1, default=str) + "\n", encoding="utf-8")
    return Written(written)
