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
from collections.abc import Callable, Mapping, Sequence
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

# What can be observed: the name on the command line -> (the KPI it is, how it is said).
TARGETS: Mapping[str, tuple[str, str]] = {
    "utilization": ("gpu_utilization_pct", "GPU utilization %"),
    "success": ("job_success_pct", "job success %"),
    "wait_p95": ("wait_p95_s", "p95 queue wait"),
}
# A fit is accepted when every target is met within its tolerance: points for percentages, a share for waits.
TOLERANCE: Mapping[str, float] = {"utilization": 1.5, "success": 1.5, "wait_p95": 0.15}
WAIT_FLOOR_S = 60.0  # waits are compared in log terms; a minute keeps "0 s" comparable

KNOBS = ("load_scale", "busy_scale", "failure_rate")
BOUNDS: Mapping[str, tuple[float, float]] = {"load_scale": (0.25, 4.0), "busy_scale": (0.25, 4.0),
                                             "failure_rate": (0.0, 0.8)}
KNOB_TEXT: Mapping[str, str] = {
    "load_scale": "load scale (arrival rates ×)",
    "busy_scale": "busy scale (each class's busy share ×, at most 1)",
    "failure_rate": "failure rate (an attempt fails on its own)",
}
ATTEMPTS_DRAWN = 32  # per job: more than any backoff limit plus preemptions a run sees in practice
REGULARISATION = 0.1  # weight of the pull towards the workload as written, against a residual of 1 tolerance
MAX_EVALUATIONS = 30  # simulations of the observed run
FIRST_STEP = 0.15  # the first probe along each knob, as a share of its range (in the fit's coordinates)
MIN_RADIUS = 0.01  # the trust radius below which the search gives up
POLISH_STEPS = 3  # simulations spent improving a fit that already meets every target


class CalibrationError(SimulationError):
    """Targets that cannot be read, an input that cannot be calibrated, or targets out of reach."""


# ---- targets ------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Targets:
    values: Mapping[str, float]  # target name -> value (percent, or seconds for wait_p95)

    def text(self) -> str:
        return ", ".join(f"{k}={_show(k, v)}" for k, v in self.values.items())


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
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        name, sep, raw = item.partition("=")
        name, raw = name.strip(), raw.strip()
        if not sep or not raw:
            raise CalibrationError(f"--calibrate: {item!r} is not NAME=VALUE; write e.g. utilization=35,success=62")
        if name not in TARGETS:
            raise CalibrationError(f"--calibrate: unknown target {name!r}; expected some of {', '.join(TARGETS)}")
        if name in values:
            raise CalibrationError(f"--calibrate: {name} is given twice")
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
    failure_rate: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {k: round(float(getattr(self, k)), 4) for k in KNOBS}


AS_WRITTEN = Knobs()


def _stream(seed: int, *names: str) -> np.random.Generator:
    return np.random.default_rng([seed, *(zlib.crc32(n.encode()) for n in names)])


class CalibratedWorkload:
    """The generators' jobs drawn once at the highest load scale, each with the uniform that decides from which
    scale on it exists; :meth:`documents` renders those a :class:`Knobs` keeps, :meth:`crashes` draws the
    attempts' own failures."""

    def __init__(self, specs: Sequence[GeneratorSpec], *, seed: int | None = None,
                 duration_s: float | None = None) -> None:
        self.seed = seed if seed is not None else (specs[0].seed if specs else 0)
        self._entries: list[tuple[Draw, float, str]] = []
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
            for name, ds in by_class.items():
                u = _stream(used, "calibration-thinning", name).uniform(0.0, 1.0, len(ds))
                for d, x in zip(sorted(ds, key=lambda d: d.index), u, strict=True):
                    keep[(name, d.index)] = float(x) * top
            self._entries += [(d, keep[(d.klass.name, d.index)], f"<generator {spec.name}>") for d in draws]

    def documents(self, knobs: Knobs, scenario: str) -> list[Document]:
        """The kept jobs as Job documents in ``scenario``'s demand forms, their busy shares scaled."""
        out: list[Document] = []
        for d, threshold, where in self._entries:
            if threshold >= knobs.load_scale:
                continue
            busy = replace(d, utilization=min(1.0, d.utilization * knobs.busy_scale))
            out.append(Document(data=render(busy, scenario), file=where, line=0, index=len(out)))
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
            sc.config = replace(sc.config, failures=models)
        return workload.with_crashes(knobs, out)

    return Subject(scenarios, "before", used, what)


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
        config = SimConfig(horizon_s=horizon, drain_s=horizon / 2, failures=models)
        sc = Scenario("input", manifests, jobs, config, policies or (DEFAULT_POLICY,))
        return workload.with_crashes(knobs, [sc])

    return Subject(scenarios, "input", used, "the input's run")


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
        }

    def target_rows(self) -> list[tuple[str, str, str, str, str]]:
        """(target, observed, simulated, residual, tolerance) for tables."""
        rows = []
        for name, target in self.targets.values.items():
            got = self.achieved.get(name)
            res = self.residual(name)
            if name == "wait_p95":
                rows.append((TARGETS[name][1], _duration(target), "n/a" if got is None else _duration(got),
                             "n/a" if res is None else f"{res:+.0f} s", f"±{TOLERANCE[name]:.0%}"))
            else:
                rows.append((TARGETS[name][1], f"{target:g}", "n/a" if got is None else f"{got:.1f}",
                             "n/a" if res is None else f"{res:+.1f}", f"±{TOLERANCE[name]:g} pts"))
        return rows

    def knob_rows(self) -> list[tuple[str, str, str, str]]:
        """(unknown, fitted value, bounds, how) for tables."""
        return [(KNOB_TEXT[k], f"{getattr(self.knobs, k):.3g}", f"{BOUNDS[k][0]:g} to {BOUNDS[k][1]:g}",
                 "fitted" if k in self.free else "as written") for k in KNOBS]


def free_knobs(targets: Targets) -> tuple[str, ...]:
    """The knobs the targets can tell apart: success needs the failure rate; utilization load and busy share;
    a wait, load."""
    names = set(targets.values)
    free = []
    if names & {"utilization", "wait_p95"}:
        free.append("load_scale")
    if "utilization" in names:
        free.append("busy_scale")
    if "success" in names:
        free.append("failure_rate")
    return tuple(k for k in KNOBS if k in free)


def _to_knobs(free: Sequence[str], x: Sequence[float]) -> Knobs:
    values = dict(zip(free, x, strict=True))
    return Knobs(load_scale=math.exp(values.get("load_scale", 0.0)),
                 busy_scale=math.exp(values.get("busy_scale", 0.0)),
                 failure_rate=float(values.get("failure_rate", 0.0)))


Vector = np.ndarray[Any, np.dtype[np.float64]]
Progress = Callable[[int, Knobs, dict[str, float | None]], None]


def _internal_bounds(free: Sequence[str]) -> tuple[Vector, Vector]:
    """The fit's coordinates: the log of each scale, the failure rate itself."""
    lo = [math.log(BOUNDS[k][0]) if k != "failure_rate" else BOUNDS[k][0] for k in free]
    hi = [math.log(BOUNDS[k][1]) if k != "failure_rate" else BOUNDS[k][1] for k in free]
    return np.array(lo, dtype=np.float64), np.array(hi, dtype=np.float64)


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


def _pull(free: Sequence[str]) -> Vector:
    """Weights of the pull towards the workload as written, per coordinate (a rate of 0.25 weighs as e)."""
    return np.array([REGULARISATION / 0.25 if k == "failure_rate" else REGULARISATION for k in free])


def fit(subject: Subject, targets: Targets, *, progress: Progress | None = None,
        max_evaluations: int = MAX_EVALUATIONS) -> Calibration:
    """Fit the free knobs to ``targets`` on the subject's observed run; raise :class:`CalibrationError` when the
    best fit misses a target by more than its tolerance.

    A derivative-free trust-region search for noisy runs: the observed run is simulated at the workload as
    written and one step along each free knob; each figure gets a linear model fitted to every run so far
    (weighted towards the current centre, so that it averages the jumps of single runs); a bounded linear
    least-squares step (``scipy.optimize.lsq_linear``) within the trust radius is simulated next; a better
    point becomes the centre and widens the radius, a worse one halves it. It stops when every target is met, or
    the radius or the budget of simulations is spent (once every target is met, a few more steps tighten
    the fit). The best simulated point is the answer: nothing is
    claimed that was not simulated."""
    started = time.perf_counter()
    free = free_knobs(targets)
    lo, hi = _internal_bounds(free)
    span = hi - lo
    pull = _pull(free)
    zs: list[Vector] = []  # points in [0, 1]^d (lo + z * span in the fit's coordinates)
    got_at: list[dict[str, float | None]] = []

    def x_of(z: Vector) -> Vector:
        out: Vector = lo + z * span
        return out

    def evaluate(z: Vector) -> int:
        knobs = _to_knobs(free, list(x_of(z)))
        observed = subject.observed_scenario(knobs)
        k = kpis(run_scenario(observed, observed.policies[0], seed=subject.seed))
        got = {name: k.get(TARGETS[name][0]) for name in targets.values}
        zs.append(np.array(z, dtype=np.float64))
        got_at.append(got)
        if progress is not None:
            progress(len(zs), knobs, got)
        return len(zs) - 1

    def objective(i: int) -> float:
        return float(np.sum(np.square(_residuals(targets, got_at[i])))
                     + np.sum(np.square(pull * x_of(zs[i]))))

    def met(i: int) -> bool:
        return bool(np.all(np.abs(_residuals(targets, got_at[i])) <= 1.0))

    centre = evaluate((0.0 - lo) / span)  # the workload as written: log 1 = 0, no failures of its own
    for j in range(len(free)):
        if len(zs) >= max_evaluations:
            break
        z = zs[centre].copy()
        z[j] = z[j] + FIRST_STEP if z[j] + FIRST_STEP <= 1 else z[j] - FIRST_STEP
        evaluate(z)
    radius = 0.25
    polish = 0  # steps taken once the targets are met: they tighten the fit towards the middle of the tolerance
    while len(zs) < max_evaluations and radius >= MIN_RADIUS:
        if met(centre):
            polish += 1
            if polish > POLISH_STEPS:
                break
        c = zs[centre]
        data = np.stack(zs)
        weights = np.exp(-np.sum(np.square(data - c), axis=1) / (2 * max(radius, 0.1) ** 2)) + 1e-3
        design = np.concatenate([np.ones((len(zs), 1)), data - c], axis=1) * weights[:, None]
        values = np.stack([_residuals(targets, g) for g in got_at]) * weights[:, None]
        coef, *_ = np.linalg.lstsq(design, values, rcond=None)
        here, slope = coef[0], coef[1:].T  # residuals at the centre, and their slope per coordinate
        a = np.concatenate([slope, np.diag(pull * span)])
        b = -np.concatenate([here, pull * x_of(c)])
        step = lsq_linear(a, b, bounds=(np.maximum(-c, -radius), np.minimum(1 - c, radius))).x
        if float(np.max(np.abs(step))) < 1e-4:
            radius /= 2
            continue
        trial = evaluate(np.clip(c + step, 0.0, 1.0))
        if objective(trial) < objective(centre):
            centre, radius = trial, min(1.0, radius * 1.5)
        else:
            radius /= 2
    best = min(range(len(zs)), key=objective)
    knobs = _to_knobs(free, list(x_of(zs[best])))
    cal = Calibration(targets, knobs, dict(got_at[best]), free, len(zs), time.perf_counter() - started, False)
    cal.within = met(best)
    if not cal.within:
        raise CalibrationError(out_of_reach(cal, subject))
    cal.scenarios = subject.scenarios(knobs)
    return cal


def out_of_reach(cal: Calibration, subject: Subject) -> str:
    """Why a fit is refused: each missed target, the closest figure reached, and the knobs at their bounds."""
    missed = []
    for name, target, got, _, tol in cal.target_rows():
        key = next(k for k, v in TARGETS.items() if v[1] == name)
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
    return text + (". Check the targets (percentages of the whole cluster's GPUs and of the jobs that ended), or "
                   "the workload: no setting of load, busy share and failure rate within their bounds "
                   "reproduces them")


def calibrated_plan(p: Plan, subject: Subject, cal: Calibration) -> Plan:
    """``p`` (the uncalibrated plan, for its title and introduction) with the calibrated scenarios."""
    knobs = cal.knobs
    intro = [*p.intro, f"Calibrated to {cal.targets.text()} observed on {subject.what}: load scale "
             f"{knobs.load_scale:.3g}, busy scale {knobs.busy_scale:.3g}, failure rate {knobs.failure_rate:.3g} "
             f"({cal.evaluations} simulations, {cal.wall_s:.0f} s); every run below uses that workload."]
    return Plan(p.title + " (calibrated)", cal.scenarios, subject.seed, p.is_casestudy, intro)
