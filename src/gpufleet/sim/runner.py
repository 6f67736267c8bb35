"""From what the user asked (files or the case study, policies, duration, seed) to finished runs.

This is the simulator's entry point for drivers such as the CLI: :func:`plan` decides the scenarios and
policies, :func:`run_plan` runs them and summarises each run as ``--json`` shows it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from gpufleet.api.source import Document
from gpufleet.sim import casestudy
from gpufleet.sim.claims import claim_rows, explain
from gpufleet.sim.engine import Progress
from gpufleet.sim.inputs import load_inputs
from gpufleet.sim.model import FailureModels, SimConfig, SimulationError
from gpufleet.sim.policies import POLICY_NAMES
from gpufleet.sim.report.build import RunOutput, duration_text
from gpufleet.sim.scenario import Scenario, run_scenario
from gpufleet.sim.sources.distributions import DistributionError, seconds
from gpufleet.sim.sources.generator import GeneratorSpec
from gpufleet.sim.summary import run_summary

DEFAULT_POLICY = "gpufleet"


@dataclass(slots=True)
class Plan:
    title: str
    scenarios: list[Scenario]
    seed: int
    is_casestudy: bool
    intro: list[str] = field(default_factory=list)


def parse_policies(policy: str | None, compare: str | None) -> tuple[str, ...] | None:
    names = [p.strip() for p in compare.split(",") if p.strip()] if compare else []
    if policy and policy not in names:
        names.insert(0, policy)
    unknown = [n for n in names if n not in POLICY_NAMES]
    if unknown:
        raise SimulationError(f"unknown policy {', '.join(unknown)}; expected one of {', '.join(POLICY_NAMES)}")
    return tuple(names) or None


def parse_duration_option(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = seconds(text)
    except DistributionError as exc:
        raise SimulationError(f"--duration: {exc}") from exc
    if value <= 0:
        raise SimulationError("--duration must be positive")
    return value


FAILURE_MODELS = ("rendezvous", "oom", "retries")
# Models only applied when named: replace-pods changes what a failed pod does (FailureModels.replace_pods).
OPT_IN_FAILURE_MODELS = ("replace-pods",)


def parse_failures(text: str | None) -> FailureModels:
    """``rendezvous,oom,retries`` (the default: all), any subset, or ``none``; ``replace-pods`` added to a list
    replaces a failed pod of a Job or a StatefulSet while the job runs on, instead of ending its attempt."""
    if text is None:
        return FailureModels()
    names = {n.strip() for n in text.split(",") if n.strip()} - {"none"}
    unknown = sorted(names - set(FAILURE_MODELS) - set(OPT_IN_FAILURE_MODELS))
    if unknown:
        raise SimulationError(f"--failures: unknown model(s) {', '.join(unknown)}; "
                              f"expected some of {', '.join(FAILURE_MODELS + OPT_IN_FAILURE_MODELS)} or none")
    return FailureModels(rendezvous="rendezvous" in names, oom="oom" in names, retries="retries" in names,
                         replace_pods="replace-pods" in names)


def no_nodes_error(notes: Sequence[str]) -> SimulationError:
    """The input has no nodes: said with the input's warnings, which may say why (a folder without manifests)."""
    return SimulationError("\n".join(["no nodes in the input: give Nodes, NodePools or an openb node list", *notes]))


def plan(files: Sequence[str], *, policy: str | None = None, compare: str | None = None,
         duration: str | None = None, seed: int | None = None, failures: str | None = None,
         strict: bool = False) -> Plan:
    policies = parse_policies(policy, compare)
    duration_s = parse_duration_option(duration)
    models = parse_failures(failures)
    if not files:
        used_seed = seed if seed is not None else casestudy.default_seed()
        scenarios = casestudy.scenarios(seed=used_seed, duration_s=duration_s, policies=policies)
        for sc in scenarios:
            sc.config = replace(sc.config, failures=models)
        intro = ["The guide's case study: three teams (research, production, data science) on 16 H100, 8 A100 "
                 "and 6 L40S. *before*: every GPU exclusive, pods asking whole GPUs, kube-default. *after*: MIG "
                 "on production, time-slicing on dev, Kueue queues and quotas, the gpufleet policy. Same "
                 f"synthetic jobs in both (workload.yaml, seed {used_seed}), "
                 f"{duration_text(scenarios[0].config.horizon_s or 0)} of arrivals plus a drain."]
        return Plan("gpufleet simulate: the case study", scenarios, used_seed, True, intro)
    inputs = load_inputs(files, seed=seed, duration_s=duration_s, strict=strict)
    if inputs.problems:
        raise SimulationError("the input has problems:\n" + "\n".join(inputs.problems))
    if casestudy.is_study(inputs.generators):
        return _study_plan(files, inputs.given_documents(), inputs.generators, policies=policies,
                           duration_s=duration_s, seed=seed, models=models)
    if not inputs.manifests.nodes:
        raise no_nodes_error(inputs.notes)
    horizon = duration_s
    if horizon is None and inputs.generators:
        horizon = max(g.duration_s for g in inputs.generators)
    config = SimConfig(horizon_s=horizon, drain_s=horizon / 2 if horizon is not None else 0.0, failures=models)
    scenario = Scenario("input", inputs.manifests, inputs.jobs, config, policies or (DEFAULT_POLICY,),
                        notes=inputs.notes)
    used_seed = seed if seed is not None else (inputs.generators[0].seed if inputs.generators else 0)
    intro = [f"Input: {', '.join(files)}: {len(inputs.manifests.nodes)} nodes, {len(inputs.jobs)} jobs."]
    return Plan("gpufleet simulate", [scenario], used_seed, False, intro)


def _study_plan(files: Sequence[str], docs: Sequence[Document], specs: Sequence[GeneratorSpec], *,
                policies: tuple[str, ...] | None, duration_s: float | None, seed: int | None,
                models: FailureModels) -> Plan:
    """Files whose workload names ``before``/``after`` demand forms: run as the case study runs its own files."""
    if any(f.lower().endswith(".csv") for f in files) or "-" in files:
        raise SimulationError("a before/after study (a WorkloadGenerator with 'before' or 'after' demand forms) "
                              "is read from YAML files only, not from openb CSVs or stdin; give its files")
    used_seed = seed if seed is not None else specs[0].seed
    scenarios = casestudy.study(docs, specs, seed=used_seed, duration_s=duration_s, policies=policies)
    for sc in scenarios:
        sc.config = replace(sc.config, failures=models)
    embedded = list(specs) == [casestudy.workload_spec()]
    names = ", ".join(s.name for s in specs)
    intro = [f"Input: {', '.join(files)}: a before/after study of WorkloadGenerator {names} "
             f"({len(scenarios[0].manifests.nodes)} nodes, {len(scenarios[0].jobs)} jobs). *before*: every GPU "
             "exclusive, the jobs in their before (else default) demand forms, kube-default. *after*: the cluster "
             f"as written, the after forms, gpufleet. Seed {used_seed}"
             + (": the embedded case study's files." if embedded else ".")]
    return Plan("gpufleet simulate: a before/after study", scenarios, used_seed, embedded, intro)


def run_plan(p: Plan, progress: Callable[[str], Progress | None] | None = None) -> list[RunOutput]:
    """Every (scenario, policy) of the plan; ``progress(label)`` may give a callback for that run."""
    out: list[RunOutput] = []
    for scenario in p.scenarios:
        for policy in scenario.policies:
            label = f"{scenario.name} ({policy})"
            result = run_scenario(scenario, policy, seed=p.seed, progress=progress(label) if progress else None)
            out.append(RunOutput(run_summary(result), result))
    return out


def casestudy_claims(runs: Sequence[RunOutput], *, calibrated: bool = False,
                     success_key: str = "job_success_pct") -> tuple[list[tuple[str, str, str, str]], list[str]]:
    """The published claims beside ours and the explanation, when the runs are the case study's pair."""
    by = {r.summary["scenario"]: r.summary for r in runs}
    if "before" not in by or "after" not in by:
        return [], []
    return (claim_rows(by["before"], by["after"], success_key=success_key),
            explain(by["before"], by["after"], calibrated=calibrated))
