"""The guide's case study, embedded in the package: "before" against "after" over two simulated weeks.

* before: every GPU exclusive (the cluster rendered without MIG and time-slicing, nodes labelled
  ``gpu-mode: exclusive``), every pod asking whole ``nvidia.com/gpu`` with no node selector, under
  ``kube-default``: what the guide calls Kubernetes standard, with its anti-patterns 1 and 5;
* after: MIG on the production A100s, time-slicing on the dev L40S, Kueue queues and quotas, under the
  ``gpufleet`` policy.

Both run the same synthetic jobs (``workload.yaml``: same arrivals, durations, work and memory use); only
the demand forms differ by scenario. Files are read with importlib.resources, so this runs from a plain
``pip install``.
"""

from __future__ import annotations

from dataclasses import replace
from importlib import resources
from typing import Any

import yaml

from gpufleet.api.errors import Problems
from gpufleet.api.manifests import Manifests, build
from gpufleet.api.source import Document, load_text
from gpufleet.sim.inputs import generated_documents, split_generators
from gpufleet.sim.model import SimConfig, SimulationError
from gpufleet.sim.scenario import Scenario
from gpufleet.sim.sources.generator import GeneratorSpec
from gpufleet.sim.sources.manifests import jobs_from_manifests

PACKAGE = "gpufleet"
FOLDER = ("data", "casestudy")
SCENARIOS = (("before", "kube-default"), ("after", "gpufleet"))
DRAIN_S = 7 * 86400.0  # after the two weeks, time for started work to end (success rates need the ends)

# The guide's published results for the case study (3 months, measured), quoted as they are published.
PUBLISHED_CLAIMS: dict[str, tuple[float, float]] = {
    "gpu_utilization_pct": (35.0, 72.0),
    "job_success_pct": (62.0, 94.0),
}
PUBLISHED_INFERENCE_COST_CHANGE_PCT = -58.0


def read_text(name: str) -> str:
    return resources.files(PACKAGE).joinpath(*FOLDER, name).read_text(encoding="utf-8")


def load_casestudy() -> Manifests:
    """The case study's cluster and queues as a validated bundle (what `gpufleet validate` would load)."""
    problems = Problems()
    docs = [d for name in ("cluster.yaml", "queues.yaml") for d in load_text(read_text(name), name, problems)]
    return build(docs, problems)


def exclusive_variant(cluster_yaml: str) -> str:
    """The cluster with every GPU exclusive: MIG layouts and time-slicing removed, nodes ``gpu-mode: exclusive``."""
    docs: list[Any] = []
    for doc in yaml.safe_load_all(cluster_yaml):
        if isinstance(doc, dict) and doc.get("kind") == "NodePool":
            spec = doc.setdefault("spec", {})
            spec.pop("sharing", None)
            if isinstance(spec.get("gpu"), dict):
                spec["gpu"].pop("migLayout", None)
            labels = spec.setdefault("labels", {})
            labels["gpu-mode"] = "exclusive"
        if doc is not None:
            docs.append(doc)
    return yaml.safe_dump_all(docs, sort_keys=False)


def workload_spec() -> GeneratorSpec:
    errors: list[str] = []
    problems = Problems()
    docs, specs = split_generators(load_text(read_text("workload.yaml"), "casestudy/workload.yaml", problems), errors)
    if errors or problems.errors or len(specs) != 1 or docs:
        raise SimulationError("the embedded case-study workload is broken: "
                              + "; ".join(errors + [str(e) for e in problems.errors]))
    return specs[0]


def scenario(name: str, policy: str, *, seed: int | None = None, duration_s: float | None = None) -> Scenario:
    spec = workload_spec()
    horizon = duration_s if duration_s is not None else spec.duration_s
    problems = Problems()
    cluster = read_text("cluster.yaml")
    if name == "before":
        cluster = exclusive_variant(cluster)
    docs: list[Document] = load_text(cluster, f"casestudy/cluster.yaml ({name})", problems)
    docs += load_text(read_text("queues.yaml"), "casestudy/queues.yaml", problems)
    docs += generated_documents(spec, name, seed=seed, duration_s=horizon)
    manifests = build(docs, problems)
    jobs = jobs_from_manifests(manifests, problems)
    if problems.errors:
        raise SimulationError(f"case study, scenario {name}: " + "; ".join(str(e) for e in problems.errors))
    config = SimConfig(horizon_s=horizon, drain_s=DRAIN_S)
    return Scenario(name, manifests, jobs, config, (policy,))


def scenarios(*, seed: int | None = None, duration_s: float | None = None,
              policies: tuple[str, ...] | None = None) -> list[Scenario]:
    """before/kube-default and after/gpufleet; with ``policies``, the after cluster under each of them."""
    if policies:
        base = scenario("after", policies[0], seed=seed, duration_s=duration_s)
        return [replace(base, policies=policies)]
    return [scenario(n, p, seed=seed, duration_s=duration_s) for n, p in SCENARIOS]


def default_seed() -> int:
    return workload_spec().seed
