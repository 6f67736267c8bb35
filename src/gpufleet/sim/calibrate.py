"""Calibration: fit a workload's unknowns so that the *before* run reproduces what a team observed.

A WorkloadGenerator is written from a description (rates, busy shares, memory); what a team knows of its own
cluster is a few measured figures: GPU utilization, job success, perhaps a p95 queue wait. ``gpufleet simulate
--calibrate utilization=35,success=62[,wait_p95=4h]`` fits three unknowns of the workload, each within stated
bounds, so that the observed run (a study's *before*, else the input's only run) shows those figures, then
runs every scenario (a study's *after* too) on the same calibrated workload:

* **load scale** (0.25 to 4): every class's arrival rate times this factor. Jobs are drawn once at the
  highest scale and kept with probability ``scale / 4`` (a thinned Poisson process is a Poisson process of
  the thinned rate), so a higher scale only adds jobs: the fit moves smoothly, with common random numbers;
* **busy scale** (0.25 to 4): every class's busy share (``gpuUtilization``, the work of a job) times this
  factor, clipped to 1; the classes keep their proportions to one another;
* **failure rate** (0 to 0.8): the probability that an attempt fails on its own (an application error, cause
  ``Error``) at a uniform point of its run, whatever the scheduler does (:attr:`SimJob.crashes`); a failed
  attempt is retried within the job's backoff limit like any failure. Each attempt's draw is fixed by the
  seed and the job's name, so a run at a higher rate fails a superset of the attempts.

With fewer targets than unknowns the split is decided by the smallest change to the workload as written:
the fit minimises the targets' residuals (in units of their tolerance) plus a small penalty on
``log(load scale)``, ``log(busy scale)`` and the failure rate. With ``utilization`` and ``success`` alone,
load and busy share are split by that pull; a ``wait_p95`` target separates them (load makes queues, busy
share does not). The search (:func:`fit`) is a derivative-free trust-region method built for noisy runs,
every point a full simulation of the observed run; the best simulated point is kept. A target the bounds
cannot reach is refused with the closest figure reached.

Calibration needs a WorkloadGenerator: a trace, or manifests of Jobs, are already what happened.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np
from scipy.optimize import lsq_linear

from gpufleet.api.errors import Problems
from gpufleet.api.manifests import build
from gpufleet.api.source import Document
from gpufleet.sim import casestudy
from gpufleet.sim.inputs import load_inputs
from gpufleet.sim.metrics import kpis
from gpufleet.sim.model import FailureModels, SimConfig, SimJob, SimulationError
from gpufleet.sim.runner import DEFAULT_POLICY, Plan, parse_duration_option, parse_failures, parse_policies
from gpufleet.sim.scenario import Scenario, run_scenario
from gpufleet.sim.sources.distributions import DistributionError, number, seconds
from gpufleet.sim.sources.generator import Draw, GeneratorError, GeneratorSpec, draw, render
from gpufleet.sim.sources.manifests import jobs_from_manifests
from gpufleet.sim.yardsticks import TRAINING_ROLE

# What can be observed: the name on the command line -> (the KPI it is, how it is said).
TARGETS: Mapping[str, tuple[str, str]] = {
    "utilization": ("gpu_utilization_pct", "GPU utilization %"),
    "success": ("job_success_pct", "job success %"),
    "training_success": ("training_success_pct", "training-job success %"),
    "wait_p95": ("wait_p95_s", "p95 queue wait"),
}
# What a team may say of its failures (--attribute gang=0.8,oom=0.1): the share of the observed run's failed
# attempts by cause, fitted as targets beside the others. name -> (failure cause, how it is said).
ATTRIBUTIONS: Mapping[str, tuple[str, str]] = {
    "gang": ("RendezvousTimeout", "partial gangs (rendezvous timeouts)"),
    "oom": ("OOMKilled", "out of GPU memory"),
    "error": ("Error", "the jobs' own errors"),
}
# A fit is accepted when every target is met within its tolerance: points for percentages, a share for waits.
# Two points: the mean of three replications still moves by about that much between neighbouring points (a run's
# job success by five and more, as gangs get their pods in time or not).
TOLERANCE: Mapping[str, float] = {"utilization": 2.0, "success": 2.0, "training_success": 2.0, "wait_p95": 0.15,
                                  "gang": 5.0, "oom": 5.0, "error": 5.0}
WAIT_FLOOR_S = 60.0  # waits are compared in log terms; a minute keeps "0 s" comparable

# The scheduler-attributable mechanisms first, the exogenous failure rate last: it is fitted only in a second
# stage, for what they cannot explain (fit).
KNOBS = ("load_scale", "busy_scale", "gang_share", "rendezvous_timeout_s", "memory_scale", "failure_rate")
BOUNDS: Mapping[str, tuple[float, float]] = {"load_scale": (0.25, 4.0), "busy_scale": (0.25, 4.0),
                                             "gang_share": (0.0, 1.0), "rendezvous_timeout_s": (600.0, 3600.0),
                                             "memory_scale": (0.5, 2.0), "failure_rate": (0.0, 0.8)}
KNOB_TEXT: Mapping[str, str] = {
    "load_scale": "load scale (arrival rates ×)",
    "busy_scale": "busy scale (each class's busy share ×, at most 1)",
    "gang_share": "gang share (one-pod training jobs run distributed)",
    "rendezvous_timeout_s": "rendezvous timeout (how long a partial gang holds its GPUs)",
    "memory_scale": "memory scale (each class's GPU memory ×)",
    "failure_rate": "failure rate (an attempt fails on its own)",
}
LOG_KNOBS = frozenset({"load_scale", "busy_scale", "rendezvous_timeout_s", "memory_scale"})  # fitted as logs
ATTEMPTS_DRAWN = 32  # per job: more than any backoff limit plus preemptions a run sees in practice
REGULARISATION = 0.1  # weight of the pull towards the workload as written, against a residual of 1 tolerance
MAX_EVALUATIONS = 30  # points of the fit, both stages, each simulated REPLICATIONS times
# The observed run at each point, with the scheduler's seed varied (the jobs are the same): a gang that gets its
# pods in time or not swings a run's figures by points, so a fit to a single run would fit that luck.
REPLICATIONS = 3
FIRST_STEP = 0.15  # the first probe along each knob, as a share of its range (in the fit's coordinates)
MIN_RADIUS = 0.01  # the trust radius below which the search gives up
POLISH_STEPS = 3  # simulations spent improving a fit that already meets every target


class CalibrationError(SimulationError):
    """Targets that cannot be read, an input that cannot be calibrated, or targets out of reach."""


# ---- targets ------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Targets:
    values: Mapping[str, float]  # target name -> value (percent, or seconds for wait_p95; attributions in percent)

    def text(self) -> str:
        return ", ".join(f"{k}={_show(k, v)}" for k, v in self.values.items() if k in TARGETS)

    def attribution_text(self) -> str:
        return ", ".join(f"{k}={v / 100:g}" for k, v in self.values.items() if k in ATTRIBUTIONS)

    def with_attribution(self, text: str | None) -> Targets:
        """These targets plus what ``--attribute`` says of the failures."""
        return self if not text else Targets({**self.values, **parse_attribution(text)})


def _named(text: str, option: str, known: Collection[str], what: str, value: str,
           example: str) -> list[tuple[str, str]]:
    """The ``NAME=VALUE`` items of an option (``option`` as the user wrote it, ``what`` a name's kind, ``value``
    what its values are called), each name known and given once; the values still as written."""
    out: list[tuple[str, str]] = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        name, sep, raw = item.partition("=")
        name, raw = name.strip(), raw.strip()
        if not sep or not raw:
            raise CalibrationError(f"{option}: {item!r} is not NAME={value}; write e.g. {example}")
        if name not in known:
            raise CalibrationError(f"{option}: unknown {what} {name!r}; expected some of {', '.join(known)}")
        if any(name == seen for seen, _ in out):
            raise CalibrationError(f"{option}: {name} is given twice")
        out.append((name, raw))
    return out


def parse_attribution(text: str) -> dict[str, float]:
    """``gang=0.8,oom=0.1``: shares of the observed run's failed attempts by cause, fractions summing to at most 1
    (the rest is left to the fit); returned in percent."""
    values: dict[str, float] = {}
    for name, raw in _named(text, "--attribute", ATTRIBUTIONS, "cause", "SHARE", "gang=0.8,oom=0.1"):
        try:
            share = number(raw.removesuffix("%")) / (100.0 if raw.endswith("%") else 1.0)
        except DistributionError as exc:
            raise CalibrationError(f"--attribute: {name}: {exc}") from exc
        if not 0 <= share <= 1:
            raise CalibrationError(f"--attribute: {name}={raw} is not a share from 0 to 1 (or a percentage)")
        values[name] = 100.0 * share
    if not values:
        raise CalibrationError("--attribute: give at least one share, e.g. gang=0.8")
    if sum(values.values()) > 100.0 + 1e-9:
        raise CalibrationError(f"--attribute: the shares add up to {sum(values.values()) / 100:g}, more than 1")
    return values


def _show(name: str, value: float) -> str:
    return _duration(value) if name == "wait_p95" else f"{value:g}"


def _duration(s: float) -> str:
    if s < 90:
        return f"{s:.0f}s"
    if s < 90 * 60:
        return f"{s / 60:.0f}m"
    return f"{s / 3600:.1f}h"


def parse_targets(text: str) -> Targets:
    """``utilization=35,success=62[,wait_p95=4h]``: percentages of the observed run, a wait as a duration."""
    values: dict[str, float] = {}
    for name, raw in _named(text, "--calibrate", TARGETS, "target", "VALUE", "utilization=35,success=62"):
        try:
            value = seconds(raw) if name == "wait_p95" else number(raw.removesuffix("%"))
        except DistributionError as exc:
            raise CalibrationError(f"--calibrate: {name}: {exc}") from exc
        if name != "wait_p95" and not 0 <= value <= 100:
            raise CalibrationError(f"--calibrate: {name}={raw} is not a percentage from 0 to 100")
        values[name] = value
    if not values:
        raise CalibrationError("--calibrate: give at least one target, e.g. utilization=35,success=62")
    return Targets(values)


# ---- the knobs and the workload they change -----------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Knobs:
    load_scale: float = 1.0
    busy_scale: float = 1.0
    gang_share: float = 0.0
    rendezvous_timeout_s: float = FailureModels().rendezvous_timeout_s
    memory_scale: float = 1.0
    failure_rate: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {k: round(float(getattr(self, k)), 4) for k in KNOBS}


AS_WRITTEN = Knobs()


def _stream(seed: int, *names: str) -> np.random.Generator:
    return np.random.default_rng([seed, *(zlib.crc32(n.encode()) for n in names)])


class CalibratedWorkload:
    """The generators' jobs drawn once at the highest load scale, each with the uniform that decides from which
    scale on it exists and the one that decides from which gang share on it runs distributed; :meth:`documents`
    renders those a :class:`Knobs` keeps, :meth:`crashes` draws the attempts' own failures."""

    def __init__(self, specs: Sequence[GeneratorSpec], *, seed: int | None = None,
                 duration_s: float | None = None) -> None:
        self.seed = seed if seed is not None else (specs[0].seed if specs else 0)
        self._entries: list[tuple[Draw, float, str, float]] = []
        top = BOUNDS["load_scale"][1]
        for spec in specs:
            used = spec.seed if seed is None else seed
            fast = replace(spec, classes=tuple(
                replace(c, arrival=replace(c.arrival, rate_per_hour=c.arrival.rate_per_hour * top))
                for c in spec.classes))
            try:
                draws = draw(fast, seed=used, duration_s=duration_s)
            except GeneratorError as exc:
                raise CalibrationError(f"WorkloadGenerator {spec.name} at the highest load scale ({top:g}x): "
                                       f"{exc}") from exc
            by_class: dict[str, list[Draw]] = {}
            for d in draws:
                by_class.setdefault(d.klass.name, []).append(d)
            keep: dict[tuple[str, int], float] = {}
            spread: dict[tuple[str, int], float] = {}
            for name, ds in by_class.items():
                u = _stream(used, "calibration-thinning", name).uniform(0.0, 1.0, len(ds))
                g = _stream(used, "calibration-gang", name).uniform(0.0, 1.0, len(ds))
                for d, x, y in zip(sorted(ds, key=lambda d: d.index), u, g, strict=True):
                    keep[(name, d.index)] = float(x) * top
                    spread[(name, d.index)] = float(y)
            self._entries += [(d, keep[(d.klass.name, d.index)], f"<generator {spec.name}>",
                               spread[(d.klass.name, d.index)]) for d in draws]

    @property
    def has_gangable(self) -> bool:
        """Whether some job could be run distributed (a one-pod training job): the gang share can matter."""
        return any(_gangable(d) for d, _, _, _ in self._entries)

    @property
    def has_gangs(self) -> bool:
        return any(d.pods > 1 for d, _, _, _ in self._entries) or self.has_gangable

    @property
    def has_memory(self) -> bool:
        return any(d.memory_mib is not None for d, _, _, _ in self._entries)

    def documents(self, knobs: Knobs, scenario: str) -> list[Document]:
        """The kept jobs as Job documents in ``scenario``'s demand forms: busy shares and memory scaled, and the
        one-pod training jobs that the gang share reaches run as gangs of two pods, the same work in half the
        time."""
        out: list[Document] = []
        for d, threshold, where, spread in self._entries:
            if threshold >= knobs.load_scale:
                continue
            job = replace(d, utilization=min(1.0, d.utilization * knobs.busy_scale))
            if job.memory_mib is not None and knobs.memory_scale != 1.0:
                job = replace(job, memory_mib=math.ceil(job.memory_mib * knobs.memory_scale))
            if spread < knobs.gang_share and _gangable(job):
                job = replace(job, pods=2, duration=job.duration / 2)
            out.append(Document(data=render(job, scenario), file=where, line=0, index=len(out)))
        return out

    def crashes(self, knobs: Knobs, job: SimJob) -> tuple[float | None, ...]:
        if knobs.failure_rate <= 0:
            return ()
        rng = _stream(self.seed, "calibration-crash", job.key)
        fails = rng.uniform(0.0, 1.0, ATTEMPTS_DRAWN) < knobs.failure_rate
        at = rng.uniform(0.0, 1.0, ATTEMPTS_DRAWN)
        return tuple(float(a) if f else None for f, a in zip(fails, at, strict=True))

    def with_crashes(self, knobs: Knobs, scenarios: list[Scenario]) -> list[Scenario]:
        for sc in scenarios:
            sc.jobs = [replace(j, crashes=self.crashes(knobs, j)) for j in sc.jobs]
        return scenarios


def _gangable(d: Draw) -> bool:
    return d.klass.role == TRAINING_ROLE and d.pods == 1 and d.klass.gang is not False


class ScenarioMaker(Protocol):
    def __call__(self, knobs: Knobs, only: str | None = None) -> list[Scenario]:
        """The scenarios at ``knobs``; with ``only``, just the one of that name."""


@dataclass(slots=True)
class Subject:
    """What is calibrated: the scenarios for given knobs, and which of them was observed."""

    scenarios: ScenarioMaker
    observed: str  # "before" for a study, "input" otherwise
    seed: int
    what: str  # for messages: "the case study's before run"
    mechanisms: frozenset[str] = frozenset()  # the scheduler-attributable knobs its workload can feel

    def observed_scenario(self, knobs: Knobs) -> Scenario:
        """The observed run alone: what every step of the fit simulates."""
        [observed] = self.scenarios(knobs, only=self.observed)
        return observed


def subject_for(files: Sequence[str], *, seed: int | None = None, duration: str | None = None,
                failures: str | None = None, policy: str | None = None, compare: str | None = None,
                strict: bool = False) -> Subject:
    """The calibration subject of ``gpufleet simulate``'s input (none: the embedded case study)."""
    policies = parse_policies(policy, compare)
    duration_s = parse_duration_option(duration)
    models = parse_failures(failures)
    if not files:
        return _study(casestudy.embedded_documents(), [casestudy.workload_spec()], seed, duration_s, models,
                      policies, "the case study's before run")
    if "-" in files or any(f.lower().endswith(".csv") for f in files):
        raise CalibrationError("--calibrate fits a WorkloadGenerator's unknowns; a trace (CSV) or standard input "
                               "is what happened already and has none: give YAML files with a WorkloadGenerator")
    inputs = load_inputs(files, seed=seed, duration_s=duration_s, strict=strict)
    if inputs.problems:
        raise SimulationError("the input has problems:\n" + "\n".join(inputs.problems))
    if not inputs.generators:
        raise CalibrationError("--calibrate fits a WorkloadGenerator's unknowns (load, busy share, failure rate); "
                               "the input has none: its jobs are what happened, there is nothing to fit")
    docs, specs = inputs.given_documents(), inputs.generators
    if casestudy.is_study(specs):
        return _study(docs, specs, seed, duration_s, models, policies, "the study's before run")
    return _plain(docs, specs, seed, duration_s, models, policies)


def _mechanisms(workload: CalibratedWorkload, models: FailureModels) -> frozenset[str]:
    """The mechanism knobs that can change anything for this workload under these failure models."""
    out = set()
    if workload.has_gangable:
        out.add("gang_share")
    if workload.has_gangs and models.rendezvous:
        out.add("rendezvous_timeout_s")
    if workload.has_memory and models.oom:
        out.add("memory_scale")
    return frozenset(out)


def _failures(models: FailureModels, knobs: Knobs) -> FailureModels:
    return replace(models, rendezvous_timeout_s=knobs.rendezvous_timeout_s)


def _study(docs: Sequence[Document], specs: Sequence[GeneratorSpec], seed: int | None, duration_s: float | None,
           models: FailureModels, policies: tuple[str, ...] | None, what: str) -> Subject:
    if policies:
        raise CalibrationError("--calibrate fits a study's before run and then runs its after: give it without "
                               "--policy or --compare")
    used = seed if seed is not None else specs[0].seed
    workload = CalibratedWorkload(specs, seed=used, duration_s=duration_s)

    def scenarios(knobs: Knobs, only: str | None = None) -> list[Scenario]:
        out = casestudy.study(docs, specs, seed=used, duration_s=duration_s,
                              workload=lambda name: workload.documents(knobs, name), only=only)
        for sc in out:
            sc.config = replace(sc.config, failures=_failures(models, knobs))
        return workload.with_crashes(knobs, out)

    return Subject(scenarios, "before", used, what, _mechanisms(workload, models))


def _plain(docs: Sequence[Document], specs: Sequence[GeneratorSpec], seed: int | None, duration_s: float | None,
           models: FailureModels, policies: tuple[str, ...] | None) -> Subject:
    used = seed if seed is not None else specs[0].seed
    workload = CalibratedWorkload(specs, seed=used, duration_s=duration_s)
    horizon = duration_s if duration_s is not None else max(s.duration_s for s in specs)

    def scenarios(knobs: Knobs, only: str | None = None) -> list[Scenario]:
        if only not in (None, "input"):
            return []
        problems = Problems()
        manifests = build([*docs, *workload.documents(knobs, "default")], problems)
        jobs = jobs_from_manifests(manifests, problems)
        if problems.errors:
            raise SimulationError("the calibrated input has problems: "
                                  + "; ".join(str(e) for e in problems.errors))
        config = SimConfig(horizon_s=horizon, drain_s=horizon / 2, failures=_failures(models, knobs))
        sc = Scenario("input", manifests, jobs, config, policies or (DEFAULT_POLICY,))
        return workload.with_crashes(knobs, [sc])

    return Subject(scenarios, "input", used, "the input's run", _mechanisms(workload, models))


# ---- the fit ------------------------------------------------------------------------------------------------

@dataclass(slots=True)
class Calibration:
    targets: Targets
    knobs: Knobs
    achieved: dict[str, float | None]  # target name -> the observed run's figure at the fitted knobs
    free: tuple[str, ...]  # the knobs that were fitted (the others stay as written)
    evaluations: int
    wall_s: float
    within: bool
    scenarios: list[Scenario] = field(default_factory=list)  # every scenario, at the fitted knobs
    failures: dict[str, int] = field(default_factory=dict)  # the observed runs' failed attempts by cause, fitted
    seed: int = 0  # the scheduler's seed of the runs shown (the replication nearest the targets)
    shown: dict[str, float | None] = field(default_factory=dict)  # that run's own figures

    def split(self) -> list[tuple[str, float]]:
        """(cause in words, share %) of the observed run's failed attempts at the fitted knobs."""
        return failure_split({"failures": self.failures})

    def split_text(self) -> str:
        parts = self.split()
        if not parts:
            return "no attempt fails"
        return ", ".join(f"{share:.0f}% {words}" for words, share in parts)

    def residual(self, name: str) -> float | None:
        got = self.achieved.get(name)
        return None if got is None else got - self.targets.values[name]

    def met(self, name: str) -> bool:
        got = self.achieved.get(name)
        target = self.targets.values[name]
        if got is None:
            return False
        if name == "wait_p95":
            return abs(math.log((got + WAIT_FLOOR_S) / (target + WAIT_FLOOR_S))) <= TOLERANCE[name]
        return abs(got - target) <= TOLERANCE[name]

    def summary(self) -> dict[str, Any]:
        """What ``--json`` and the report say about the fit."""
        return {
            "targets": dict(self.targets.values),
            "achieved": {k: v for k, v in self.achieved.items()},
            "residuals": {k: self.residual(k) for k in self.targets.values},
            "tolerance": {k: TOLERANCE[k] for k in self.targets.values},
            "knobs": self.knobs.as_dict(), "fitted": list(self.free),
            "bounds": {k: list(BOUNDS[k]) for k in KNOBS},
            "evaluations": self.evaluations, "wall_s": round(self.wall_s, 2), "within_tolerance": self.within,
            "failure_split": {words: round(share, 1) for words, share in self.split()},
            "replications": REPLICATIONS, "seed": self.seed, "shown": dict(self.shown),
        }

    def target_rows(self) -> list[tuple[str, str, str, str, str, str]]:
        """(target, observed, simulated (the replications' mean), residual, tolerance, the run shown) for
        tables."""
        rows = []
        for name, target in self.targets.values.items():
            got = self.achieved.get(name)
            res = self.residual(name)
            shown = self.shown.get(name)
            if name == "wait_p95":
                rows.append((TARGETS[name][1], _duration(target), "n/a" if got is None else _duration(got),
                             "n/a" if res is None else f"{res:+.0f} s", f"±{TOLERANCE[name]:.0%}",
                             "n/a" if shown is None else _duration(shown)))
            else:
                words = TARGETS[name][1] if name in TARGETS else f"failures from {ATTRIBUTIONS[name][1]} %"
                rows.append((words, f"{target:g}", "n/a" if got is None else f"{got:.1f}",
                             "n/a" if res is None else f"{res:+.1f}", f"±{TOLERANCE[name]:g} pts",
                             "n/a" if shown is None else f"{shown:.1f}"))
        return rows

    def knob_rows(self) -> list[tuple[str, str, str, str]]:
        """(unknown, fitted value, bounds, how) for tables."""
        def shown(k: str, v: float) -> str:
            return f"{v / 60:.0f} min" if k == "rendezvous_timeout_s" else f"{v:.3g}" if v >= 5e-4 else "0"

        return [(KNOB_TEXT[k], shown(k, getattr(self.knobs, k)),
                 f"{shown(k, BOUNDS[k][0])} to {shown(k, BOUNDS[k][1])}", "fitted" if k in self.free else "as written")
                for k in KNOBS]


MECHANISMS = ("gang_share", "rendezvous_timeout_s", "memory_scale")


def free_knobs(targets: Targets, mechanisms: Collection[str] = ()) -> tuple[str, ...]:
    """The knobs the targets can tell apart, of those the workload can feel (``mechanisms``: the scheduler-
    attributable ones it has, :attr:`Subject.mechanisms`). Utilization: load and busy share; a wait: load; a job
    success: the mechanisms, then the failure rate; an attribution: the mechanisms of its cause (gang: the gang
    share and the rendezvous timeout; oom: the memory scale; error: the failure rate)."""
    names = set(targets.values)
    free: set[str] = set()
    if names & {"utilization", "wait_p95"}:
        free.add("load_scale")
    if "utilization" in names:
        free.add("busy_scale")
    attributed = names & set(ATTRIBUTIONS)
    if names & {"success", "training_success"}:
        if not attributed:  # nothing said of the causes: every mechanism the workload has may explain them
            free.update(m for m in MECHANISMS if m in mechanisms)
        free.add("failure_rate")
    if "gang" in names:
        free.update(m for m in ("gang_share", "rendezvous_timeout_s") if m in mechanisms)
    if "oom" in names and "memory_scale" in mechanisms:
        free.add("memory_scale")
    if "error" in names:
        free.add("failure_rate")
    return tuple(k for k in KNOBS if k in free)


def _coordinate(knob: str, value: float) -> float:
    return math.log(value) if knob in LOG_KNOBS else value


def _to_knobs(free: Sequence[str], x: Sequence[float], base: Knobs = AS_WRITTEN) -> Knobs:
    values = {k: (math.exp(v) if k in LOG_KNOBS else float(v)) for k, v in zip(free, x, strict=True)}
    return replace(base, **values)


Vector = np.ndarray[Any, np.dtype[np.float64]]
Progress = Callable[[int, Knobs, dict[str, float | None]], None]


def _internal_bounds(free: Sequence[str]) -> tuple[Vector, Vector]:
    """The fit's coordinates: the log of each scale and of the timeout, the shares and the failure rate
    themselves."""
    lo = [_coordinate(k, BOUNDS[k][0]) for k in free]
    hi = [_coordinate(k, BOUNDS[k][1]) for k in free]
    return np.array(lo, dtype=np.float64), np.array(hi, dtype=np.float64)


def figure(name: str, k: Mapping[str, Any]) -> float | None:
    """The observed run's figure for target ``name``: a KPI, or the share (%) of its failed attempts with the
    attribution's cause."""
    if name in ATTRIBUTIONS:
        failures: Mapping[str, int] = k.get("failures") or {}
        total = sum(failures.values())
        return 100.0 * failures.get(ATTRIBUTIONS[name][0], 0) / total if total else 0.0  # no failure: no share
    value = k.get(TARGETS[name][0])
    return None if value is None else float(value)


def failure_split(k: Mapping[str, Any]) -> list[tuple[str, float]]:
    """(cause in words, share %) of a run's failed attempts, largest first."""
    failures: Mapping[str, int] = k.get("failures") or {}
    total = sum(failures.values())
    if not total:
        return []
    words = {cause: text for cause, text in ATTRIBUTIONS.values()}
    return sorted(((words.get(c, c), 100.0 * n / total) for c, n in failures.items()), key=lambda x: -x[1])


def _residuals(targets: Targets, got: Mapping[str, float | None]) -> Vector:
    """Each target's miss in units of its tolerance (a wait's in log terms)."""
    out = []
    for name, target in targets.values.items():
        value = got.get(name)
        if value is None:
            out.append(10.0)  # the run has no such figure (no job ended): far from any target
        elif name == "wait_p95":
            out.append(math.log((value + WAIT_FLOOR_S) / (target + WAIT_FLOOR_S)) / TOLERANCE[name])
        else:
            out.append((value - target) / TOLERANCE[name])
    return np.array(out, dtype=np.float64)


# Per unit of each coordinate: a scale's log, the timeout's log, the shares themselves.
_PULL: Mapping[str, float] = {"gang_share": REGULARISATION / 0.5, "failure_rate": REGULARISATION / 0.25}


def _pull(free: Sequence[str]) -> Vector:
    """Weights of the pull towards the workload as written, per coordinate (a rate of 0.25 weighs as e)."""
    return np.array([_PULL.get(k, REGULARISATION) for k in free])


@dataclass(slots=True)
class _Point:
    knobs: Knobs
    got: dict[str, float | None]
    objective: float
    met: bool
    failures: dict[str, int]
    each: list[dict[str, float | None]]  # per replication


class _Search:
    """Simulations of the observed run, every one remembered; each stage a trust-region search over some knobs."""

    def __init__(self, subject: Subject, targets: Targets, progress: Progress | None, budget: int) -> None:
        self.subject, self.targets, self.progress, self.budget = subject, targets, progress, budget
        self.points: list[_Point] = []

    def simulate(self, knobs: Knobs) -> tuple[dict[str, float | None], dict[str, int], list[dict[str, float | None]]]:
        """The observed run at ``knobs``, once per replication (the scheduler's seed varies, the jobs do not):
        the targets' means, the failures summed, and each replication's figures."""
        observed = self.subject.observed_scenario(knobs)
        each: list[dict[str, float | None]] = []
        failures: dict[str, int] = {}
        for i in range(REPLICATIONS):
            k = kpis(run_scenario(observed, observed.policies[0], seed=self.subject.seed + i))
            each.append({name: figure(name, k) for name in self.targets.values})
            for cause, n in (k.get("failures") or {}).items():
                failures[cause] = failures.get(cause, 0) + n
        got: dict[str, float | None] = {}
        for name in self.targets.values:
            values = [v for e in each if (v := e[name]) is not None]
            got[name] = sum(values) / len(values) if values else None
        if self.progress is not None:
            self.progress(len(self.points) + 1, knobs, got)
        return got, failures, each

    def stage(self, free: Sequence[str], start: Knobs, budget: int, prior: Sequence[_Point] = ()) -> _Point:
        """A derivative-free trust-region search over ``free`` from ``start`` (the other knobs as ``start``
        has them), until the search's points number ``budget``; its best point. ``prior``: points an earlier
        stage simulated (``start`` among them), taken as they are: only the knobs they never moved are probed."""
        lo, hi = _internal_bounds(free)
        span = hi - lo
        pull = _pull(free)
        written = np.array([_coordinate(k, getattr(AS_WRITTEN, k)) for k in free], dtype=np.float64)
        zs: list[Vector] = []
        mine: list[_Point] = []

        def x_of(z: Vector) -> Vector:
            out: Vector = lo + z * span
            return out

        def objective(z: Vector, got: Mapping[str, float | None]) -> float:
            """The targets' misses and this stage's pull towards the workload as written, squared."""
            return float(np.sum(np.square(_residuals(self.targets, got)))
                         + np.sum(np.square(pull * (x_of(z) - written))))

        def evaluate(z: Vector) -> int:
            knobs = _to_knobs(free, list(x_of(z)), start)
            got, failures, each = self.simulate(knobs)
            met = bool(np.all(np.abs(_residuals(self.targets, got)) <= 1.0))
            point = _Point(knobs, got, objective(z, got), met, failures, each)
            self.points.append(point)
            zs.append(np.array(z, dtype=np.float64))
            mine.append(point)
            return len(zs) - 1

        def z_of(knobs: Knobs) -> Vector:
            x = np.array([_coordinate(k, getattr(knobs, k)) for k in free], dtype=np.float64)
            out: Vector = np.clip((x - lo) / span, 0.0, 1.0)
            return out

        moved: set[int] = set()
        for point in prior:  # re-scored for this stage's pull (its knobs' distance from the workload as written)
            z = z_of(point.knobs)
            zs.append(z)
            mine.append(replace(point, objective=objective(z, point.got)))
            moved.update(j for j in range(len(free)) if abs(z[j] - zs[0][j]) > 1e-9)
        centre = min(range(len(mine)), key=lambda i: mine[i].objective) if mine else evaluate(z_of(start))
        for j in range(len(free)):
            if j in moved:
                continue  # the earlier stage's points already vary it
            if len(self.points) >= budget:
                break
            z = zs[centre].copy()
            z[j] = z[j] + FIRST_STEP if z[j] + FIRST_STEP <= 1 else z[j] - FIRST_STEP
            evaluate(z)
        radius = 0.25
        polish = 0  # steps taken once the targets are met: they tighten the fit towards the middle of the tolerance
        while len(self.points) < budget and radius >= MIN_RADIUS:
            if mine[centre].met:
                polish += 1
                if polish > POLISH_STEPS:
                    break
            c = zs[centre]
            data = np.stack(zs)
            weights = np.exp(-np.sum(np.square(data - c), axis=1) / (2 * max(radius, 0.1) ** 2)) + 1e-3
            design = np.concatenate([np.ones((len(zs), 1)), data - c], axis=1) * weights[:, None]
            values = np.stack([_residuals(self.targets, m.got) for m in mine]) * weights[:, None]
            coef, *_ = np.linalg.lstsq(design, values, rcond=None)
            here, slope = coef[0], coef[1:].T  # residuals at the centre, and their slope per coordinate
            a = np.concatenate([slope, np.diag(pull * span)])
            b = -np.concatenate([here, pull * (x_of(c) - written)])
            step = lsq_linear(a, b, bounds=(np.maximum(-c, -radius), np.minimum(1 - c, radius))).x
            if float(np.max(np.abs(step))) < 1e-4:
                radius /= 2
                continue
            trial = evaluate(np.clip(c + step, 0.0, 1.0))
            if mine[trial].objective < mine[centre].objective:
                centre, radius = trial, min(1.0, radius * 1.5)
            else:
                radius /= 2
        return min(mine, key=lambda m: (not m.met, m.objective))


def fit(subject: Subject, targets: Targets, *, progress: Progress | None = None,
        max_evaluations: int = MAX_EVALUATIONS) -> Calibration:
    """Fit the free knobs to ``targets`` on the subject's observed run; raise :class:`CalibrationError` when the
    best fit misses a target by more than its tolerance.

    Scheduler-attributable mechanisms first: a first stage fits every free knob but the failure rate (load,
    busy share, the share of training work in gangs and the rendezvous timeout, memory), and only when it cannot
    meet the targets does a second stage add the failure rate, the jobs' own errors, for what they cannot
    explain (from the first stage's best point). Each stage is a derivative-free trust-region search for noisy
    runs, every point a full simulation of the observed run: the run is simulated at the stage's start and one
    step along each free knob; each figure gets a linear model fitted to every run of the stage (weighted towards
    the current centre, so that it averages the jumps of single runs); a bounded linear least-squares step
    (``scipy.optimize.lsq_linear``) within the trust radius is simulated next; a better point becomes the centre
    and widens the radius, a worse one halves it. A stage stops when every target is met (after a few steps that
    tighten the fit), or when the radius or the budget of simulations is spent. The best simulated point is the
    answer: nothing is claimed that was not simulated."""
    started = time.perf_counter()
    free = free_knobs(targets, subject.mechanisms)
    search = _Search(subject, targets, progress, max_evaluations)
    first = tuple(k for k in free if k != "failure_rate")
    best: _Point | None = None
    if first != free and any(k in MECHANISMS for k in first):
        # Mechanisms first, on half the budget at most; the failure rate for what they leave.
        best = search.stage(first, AS_WRITTEN, max(len(first) + 3, max_evaluations // 2))
    if best is None or (not best.met and len(search.points) < max_evaluations):
        earlier = list(search.points)
        later = search.stage(free, best.knobs if best is not None else AS_WRITTEN, max_evaluations, earlier)
        best = later if best is None else min((best, later), key=lambda m: (not m.met, m.objective))
    assert best is not None
    # The runs shown use the replication whose observed run is nearest the targets: the one a reader can check.
    nearest = min(range(len(best.each)), key=lambda i: float(np.sum(np.square(_residuals(targets, best.each[i])))))
    cal = Calibration(targets, best.knobs, dict(best.got), free, len(search.points), time.perf_counter() - started,
                      best.met, failures=best.failures, seed=subject.seed + nearest, shown=dict(best.each[nearest]))
    if not cal.within:
        raise CalibrationError(out_of_reach(cal, subject))
    cal.scenarios = subject.scenarios(best.knobs)
    return cal


def out_of_reach(cal: Calibration, subject: Subject) -> str:
    """Why a fit is refused: each missed target, the closest figure reached, and the knobs at their bounds."""
    missed = []
    for key, (name, target, got, _, tol, _) in zip(cal.targets.values, cal.target_rows(), strict=True):
        if not cal.met(key):
            missed.append(f"{name} {target} (closest reached: {got}, tolerance {tol})")
    at_bound = []
    for k in cal.free:
        value = getattr(cal.knobs, k)
        for side, bound in zip(("lower", "upper"), BOUNDS[k], strict=True):
            if math.isclose(value, bound, rel_tol=0.02, abs_tol=1e-3):
                at_bound.append(f"{KNOB_TEXT[k]} at its {side} bound {bound:g}")
    text = (f"the targets are out of reach for {subject.what}: " + "; ".join(missed)
            + f", after {cal.evaluations} simulations")
    if at_bound:
        text += "; the fit stopped at " + ", ".join(at_bound)
    knobs = ", ".join(KNOB_TEXT[k].split(" (")[0] for k in cal.free)
    return text + (". Check the targets (percentages of the whole cluster's GPUs and of the jobs that ended), or "
                   f"the workload: no setting of {knobs} within their bounds reproduces them")


def calibrated_plan(p: Plan, subject: Subject, cal: Calibration) -> Plan:
    """``p`` (the uncalibrated plan, for its title and introduction) with the calibrated scenarios."""
    knobs = cal.knobs
    said = f", failures attributed {cal.targets.attribution_text()}" if cal.targets.attribution_text() else ""
    intro = [*p.intro, f"Calibrated to {cal.targets.text()}{said} observed on {subject.what}: load scale "
             f"{knobs.load_scale:.3g}, busy scale {knobs.busy_scale:.3g}, gang share {knobs.gang_share:.3g}, "
             f"rendezvous timeout {knobs.rendezvous_timeout_s / 60:.0f} min, memory scale {knobs.memory_scale:.3g}, "
             f"failure rate {knobs.failure_rate:.3g} ({cal.evaluations} points of {REPLICATIONS} simulations each, "
             f"{cal.wall_s:.0f} s); every run below uses that workload, with the scheduler seed of the replication "
             f"nearest the targets ({cal.seed}). Of the observed run's failed attempts: {cal.split_text()}."]
    return Plan(p.title + " (calibrated)", cal.scenarios, cal.seed, p.is_casestudy, intro)
