"""Files → a scenario: manifests (nodes, NodePools, queues, Pods, Jobs, pod groups, Kueue Workloads),
WorkloadGenerator documents, and openb CSVs, in any mix.

YAML documents of ``kind: WorkloadGenerator`` are read by the generator and replaced by the Jobs they
generate (demand forms of scenario ``default``); every other document goes through the manifest loader.
A ``.csv`` is an openb node list when its header starts with ``sn,``, else an openb pod list. Every problem
is reported with its file and line; an input with errors is refused rather than simulated smaller. The CSVs
share the run's limits with the YAML files (docs/limits.md): 32 MiB in all, 5,000 nodes, 150,000 pods.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpufleet.api.errors import LEFT_OUT, Problems
from gpufleet.api.limits import MAX_NODES, MAX_PODS
from gpufleet.api.manifests import Manifests, build
from gpufleet.api.objects import PRODUCT_LABEL
from gpufleet.api.source import Document, InputBudget, load_paths
from gpufleet.gpu.catalog import DEFAULT_CATALOG
from gpufleet.sim.model import SimJob
from gpufleet.sim.openb import read_trace
from gpufleet.sim.sources.generator import GeneratorError, GeneratorSpec, generate, is_generator, parse_generator
from gpufleet.sim.sources.manifests import jobs_from_manifests
from gpufleet.sim.sources.openbtrace import openb_jobs, openb_nodes


@dataclass(slots=True)
class Inputs:
    manifests: Manifests
    jobs: list[SimJob]
    generators: list[GeneratorSpec] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # errors: the input must not be simulated
    notes: list[str] = field(default_factory=list)  # worth saying, not wrong
    # The YAML documents as read, WorkloadGenerators among them: what a caller that builds its own scenarios
    # from the files (a before/after study, calibration, advise) starts from, without reading them again.
    documents: list[Document] = field(default_factory=list)

    def given_documents(self) -> list[Document]:
        """The documents as read, less the WorkloadGenerators (:attr:`generators` holds them parsed)."""
        return [d for d in self.documents if not is_generator(d.data)]


def generated_documents(spec: GeneratorSpec, scenario: str, *, seed: int | None = None,
                        duration_s: float | None = None) -> list[Document]:
    where = f"<generator {spec.name}>"
    return [Document(data=d, file=where, line=0, index=i)
            for i, d in enumerate(generate(spec, scenario, seed=seed, duration_s=duration_s))]


def split_generators(docs: Sequence[Document], problems: list[str]) -> tuple[list[Document], list[GeneratorSpec]]:
    rest: list[Document] = []
    specs: list[GeneratorSpec] = []
    for doc in docs:
        if not is_generator(doc.data):
            rest.append(doc)
            continue
        try:
            specs.append(parse_generator(doc.data, doc.file, doc.line_of))
        except GeneratorError as exc:
            problems.append(str(exc))
    return rest, specs


def load_inputs(files: Sequence[str], *, scenario: str = "default", seed: int | None = None, strict: bool = False,
                duration_s: float | None = None) -> Inputs:
    problems = Problems()
    errors: list[str] = []
    notes: list[str] = []
    csvs = [f for f in files if f.lower().endswith(".csv")]
    yamls = [f for f in files if not f.lower().endswith(".csv")]
    budget = InputBudget()  # one run's bytes, YAML and CSV together (docs/limits.md)
    read = load_paths(yamls, problems, stdin=sys.stdin, budget=budget) if yamls else []
    docs, specs = split_generators(read, errors)
    for spec in specs:
        try:
            docs.extend(generated_documents(spec, scenario, seed=seed, duration_s=duration_s))
        except GeneratorError as exc:
            errors.append(str(exc))
    manifests = build(docs, problems)
    jobs = jobs_from_manifests(manifests, problems)
    for path in csvs:
        # The run's limits hold across files: nodes and pods already read leave less room to a CSV.
        pods_so_far = sum(len(j.workload.pods) for j in jobs)
        rows, pods, report = read_trace(path, budget=budget, node_room=max(0, MAX_NODES - len(manifests.nodes)),
                                        pod_room=max(0, MAX_PODS - pods_so_far))
        manifests.nodes.extend(openb_nodes(rows))
        jobs.extend(openb_jobs(pods, report, notes=notes))
        errors.extend(report.problems)
        if report.rows_rejected:
            errors.append(f"{path}: {report.rows_rejected} of {report.rows_read} row(s) rejected")
    unpriced = sorted({n.labels.get(PRODUCT_LABEL, "?") for n in manifests.nodes
                       if PRODUCT_LABEL in n.labels and DEFAULT_CATALOG.price(n.labels[PRODUCT_LABEL]) == 0})
    if unpriced:
        notes.append(f"GPU model(s) without a catalog price: {', '.join(unpriced)}; their GPU-hours cost 0 "
                     "and the cheapest-model placement tier ranks them neither above nor below a priced model")
    if strict:  # what the input has that gpufleet leaves out is an error (--strict)
        problems.escalate(LEFT_OUT)
    errors[:0] = [str(e) for e in problems.errors]
    notes.extend(str(w) for w in problems.warnings)
    return Inputs(manifests, jobs, specs, errors, notes, read)


def describe(inputs: Inputs) -> dict[str, Any]:
    return {"nodes": len(inputs.manifests.nodes), "jobs": len(inputs.jobs),
            "generators": [g.name for g in inputs.generators]}
