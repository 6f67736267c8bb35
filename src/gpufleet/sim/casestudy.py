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

import copy
from collections.abc import Callable, Sequence
from dataclasses import replace
from importlib import resources

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


def workload_spec() -> GeneratorSpec:
    errors: list[str] = []
    problems = Problems()
    docs, specs = split_generators(load_text(read_text("workload.yaml"), "casestudy/workload.yaml", problems), errors)
    if errors or problems.errors or len(specs) != 1 or docs:
        raise SimulationError("the embedded case-study workload is broken: "
                              + "; ".join(errors + [str(e) for e in problems.errors]))
    return specs[0]


STUDY_SCENARIOS = tuple(name for name, _ in SCENARIOS)


def is_study(specs: Sequence[GeneratorSpec]) -> bool:
    """Whether a workload names demand forms for ``before`` or ``after``: then its input is a before/after study
    of the cluster it comes with, run as the case study is (:func:`study`)."""
    return any(name in STUDY_SCENARIOS for spec in specs for c in spec.classes for name in c.demand)


def exclusive_documents(docs: Sequence[Document]) -> list[Document]:
    """The documents with every GPU exclusive: MIG layouts and time-slicing removed from NodePools, which are
    labelled ``gpu-mode: exclusive``; other documents unchanged."""
    out: list[Document] = []
    for doc in docs:
        data = doc.data
        if isinstance(data, dict) and data.get("kind") == "NodePool":
            data = copy.deepcopy(data)
            spec = data.setdefault("spec", {})
            if isinstance(spec, dict):
                spec.pop("sharing", None)
                if isinstance(spec.get("gpu"), dict):
                    spec["gpu"].pop("migLayout", None)
                labels = spec.setdefault("labels", {})
                if isinstance(labels, dict):
                    labels["gpu-mode"] = "exclusive"
        out.append(replace(doc, data=data))
    return out


# The jobs' documents for a scenario name, when the caller draws them itself (calibration thins and scales them).
JobDocuments = Callable[[str], list[Document]]


def _scenario(name: str, policy: str, docs: Sequence[Document], specs: Sequence[GeneratorSpec], *,
              seed: int | None, horizon: float | None, workload: JobDocuments | None = None) -> Scenario:
    problems = Problems()
    every = list(exclusive_documents(docs) if name == "before" else docs)
    if workload is not None:
        every += workload(name)
    else:
        for spec in specs:
            every += generated_documents(spec, name, seed=seed, duration_s=horizon)
    manifests = build(every, problems)
    jobs = jobs_from_manifests(manifests, problems)
    if problems.errors:
        raise SimulationError(f"scenario {name}: " + "; ".join(str(e) for e in problems.errors))
    return Scenario(name, manifests, jobs, SimConfig(horizon_s=horizon, drain_s=DRAIN_S), (policy,))


def study(docs: Sequence[Document], specs: Sequence[GeneratorSpec], *, seed: int | None = None,
          duration_s: float | None = None, policies: tuple[str, ...] | None = None,
          workload: JobDocuments | None = None, only: str | None = None) -> list[Scenario]:
    """The case study's two runs of a cluster (``docs``: nodes, NodePools, queues) and workload generators:
    before/kube-default on the cluster with every GPU exclusive and the jobs in their ``before`` (else
    ``default``) demand forms, after/gpufleet on the cluster as written with the ``after`` forms. With
    ``policies``, the after scenario under each of them. The window is the generators' duration unless
    ``duration_s`` is given; a week of drain follows it. ``workload`` gives the jobs' documents per scenario
    instead of the generators' own draw. ``only`` (a scenario's name) builds that one of the pair alone
    (calibration simulates the before run many times and needs no after until the fit is done)."""
    horizon = duration_s if duration_s is not None else max((s.duration_s for s in specs), default=None)
    if policies:
        return [replace(_scenario("after", policies[0], docs, specs, seed=seed, horizon=horizon, workload=workload),
                        policies=policies)]
    return [_scenario(n, p, docs, specs, seed=seed, horizon=horizon, workload=workload) for n, p in SCENARIOS
            if only in (None, n)]


def embedded_documents() -> list[Document]:
    """The embedded case study's cluster and queues, as documents."""
    problems = Problems()
    docs = [d for name in ("cluster.yaml", "queues.yaml") for d in load_text(read_text(name), f"casestudy/{name}",
                                                                              problems)]
    if problems.errors:
        raise SimulationError("the embedded case study is broken: " + "; ".join(str(e) for e in problems.errors))
    return docs


def scenario(name: str, policy: str, *, seed: int | None = None, duration_s: float | None = None) -> Scenario:
    """One of the embedded case study's scenarios (``before`` or ``after``) under ``policy``."""
    spec = workload_spec()
    horizon = duration_s if duration_s is not None else spec.duration_s
    return _scenario(name, policy, embedded_documents(), [spec], seed=seed, horizon=horizon)


def scenarios(*, seed: int | None = None, duration_s: float | None = None,
              policies: tuple[str, ...] | None = None) -> list[Scenario]:
    """before/kube-default and after/gpufleet; with ``policies``, the after cluster under each of them."""
    return study(embedded_documents(), [workload_spec()], seed=seed, duration_s=duration_s, policies=policies)


def default_seed() -> int:
    return workload_spec().seed
