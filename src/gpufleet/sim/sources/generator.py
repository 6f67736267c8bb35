"""The synthetic workload generator: ``kind: WorkloadGenerator`` (gpufleet.io/v1alpha1) → Job manifests.

Schema, with defaults::

    apiVersion: gpufleet.io/v1alpha1
    kind: WorkloadGenerator
    metadata: {name: NAME}
    spec:
      seed: 0                  # every draw follows from it (and the class name); gpufleet simulate --seed wins
      duration: 7d             # arrivals in [0, duration); time 0 is a Monday 00:00; --duration wins
      classes:
      - name: CLASS            # required, unique; also the label sim.gpufleet.io/class
        namespace: CLASS       # the team's namespace
        queue: null            # LocalQueue name (label kueue.x-k8s.io/queue-name)
        priorityClass: null    # WorkloadPriorityClass (label kueue.x-k8s.io/priority-class)
        role: batch            # training | inference | interactive | batch (label sim.gpufleet.io/role)
        arrival:               # a Poisson process
          ratePerHour: R       # required: mean arrivals per hour (before the modulations below)
          diurnal: {amplitude: 0, peakHour: 14}   # rate × (1 + amplitude·cos(2π(hour − peakHour)/24))
          weekendFactor: 1     # rate × weekendFactor on Saturdays and Sundays
        duration: 1h           # run time once every pod runs: a distribution (see distributions.py)
        pods: 1                # pods per job (a distribution, rounded); several pods form a gang
        gpusPerPod: 1          # GPUs per pod in the whole-GPU form (a distribution, rounded)
        gang: null             # default: true when the job has several pods
        backoffLimit: 0        # retries after a failure (the Job's spec.backoffLimit)
        cpu: "1"               # per pod
        memory: 4Gi            # per pod
        gpuUtilization: 1      # busy share of a whole, exclusive GPU (per GPU); the job's work
        gpuMemoryUsed: null    # GPU memory used per device (a distribution of quantities); null = unknown
        demand:                # how a pod asks for GPUs, per scenario; "default" for unlisted scenarios
          default: {resource: nvidia.com/gpu}             # count defaults to gpusPerPod
          after: {resource: nvidia.com/mig-3g.40gb, count: 1, nodeSelector: {gpu-mode: mig}}
          # or {fraction: "0.5", memory: 20Gi}: a KAI-style share of one GPU

A job's work is ``gpuUtilization × gpusPerPod`` whole-GPU equivalents per pod (annotation
``sim.gpufleet.io/gpu-demand``): the same work whatever a scenario's demand form is, which is what makes
scenarios comparable; a MIG instance with less compute than that runs it slower.

Every class draws from its own random stream (seeded by the seed and its name) in a fixed order, so one
scenario's demand forms never change another's jobs, and adding a class leaves the others' jobs as they were.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpufleet.api.limits import MAX_GPUS_PER_NODE, MAX_PODS, MAX_PODS_PER_WORKLOAD, MAX_RATE_PER_HOUR
from gpufleet.api.objects import GPU, KUEUE_PRIORITY_LABEL, KUEUE_QUEUE_LABEL
from gpufleet.sim.model import (
    ARRIVAL_ANNOTATION,
    CLASS_LABEL,
    DEMAND_ANNOTATION,
    DURATION_ANNOTATION,
    GANG_ANNOTATION,
    MEMORY_ANNOTATION,
    ROLE_LABEL,
)
from gpufleet.sim.sources.distributions import (
    Distribution,
    DistributionError,
    Unit,
    mebibytes,
    number,
    parse_distribution,
    seconds,
)

KIND = "WorkloadGenerator"
API_GROUP = "gpufleet.io"
DEFAULT_DURATION_S = 7 * 86400.0
ROLES = ("training", "inference", "interactive", "batch")
LineOf = Callable[..., int]


class GeneratorError(ValueError):
    """A WorkloadGenerator that cannot be read: file, line and field are in the message."""


@dataclass(frozen=True, slots=True)
class Arrival:
    rate_per_hour: float
    amplitude: float = 0.0
    peak_hour: float = 14.0
    weekend_factor: float = 1.0

    def rate_at(self, t: np.ndarray[Any, np.dtype[np.float64]]) -> np.ndarray[Any, np.dtype[np.float64]]:
        hour = (t % 86400.0) / 3600.0
        weekend = ((t // 86400.0) % 7) >= 5
        rate = self.rate_per_hour * (1 + self.amplitude * np.cos(2 * np.pi * (hour - self.peak_hour) / 24))
        out: np.ndarray[Any, np.dtype[np.float64]] = np.where(weekend, rate * self.weekend_factor, rate)
        return out

    @property
    def rate_max(self) -> float:
        return self.rate_per_hour * (1 + self.amplitude) * max(1.0, self.weekend_factor)


@dataclass(frozen=True, slots=True)
class DemandForm:
    resource: str | None = GPU
    count: int | None = None  # None: gpusPerPod
    fraction: str | None = None
    memory: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClassSpec:
    name: str
    namespace: str
    queue: str | None
    priority_class: str | None
    role: str
    arrival: Arrival
    duration: Distribution
    pods: Distribution
    gpus_per_pod: Distribution
    gang: bool | None
    backoff_limit: int
    cpu: str
    memory: str
    utilization: Distribution
    memory_used: Distribution | None
    demand: Mapping[str, DemandForm]

    def form(self, scenario: str) -> DemandForm:
        return self.demand.get(scenario) or self.demand.get("default") or DemandForm()


@dataclass(frozen=True, slots=True)
class GeneratorSpec:
    name: str
    seed: int
    duration_s: float
    classes: tuple[ClassSpec, ...]


# ---- reading -------------------------------------------------------------------------------------------------

class _Reader:
    def __init__(self, where: str, line_of: LineOf | None) -> None:
        self.where = where
        self.line_of = line_of

    def fail(self, path: tuple[str | int, ...], message: str) -> GeneratorError:
        line = f":{self.line_of(*path)}" if self.line_of is not None else ""
        dotted = ".".join(str(p) if isinstance(p, str) else f"[{p}]" for p in path).replace(".[", "[")
        return GeneratorError(f"{self.where}{line}: {KIND} {dotted}: {message}")

    def dist(self, data: Mapping[str, Any], key: str, unit: Unit, default: Any,
             path: tuple[str | int, ...]) -> Distribution:
        try:
            return parse_distribution(data.get(key, default), unit, key)
        except DistributionError as exc:
            raise self.fail((*path, key), str(exc)) from exc


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _form(r: _Reader, data: Any, path: tuple[str | int, ...]) -> DemandForm:
    if not isinstance(data, Mapping):
        raise r.fail(path, "a demand form is a mapping such as {resource: nvidia.com/gpu}")
    selector = data.get("nodeSelector", {}) or {}
    if not isinstance(selector, Mapping):
        raise r.fail((*path, "nodeSelector"), "a mapping of label: value")
    count = data.get("count")
    if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count < 1):
        raise r.fail((*path, "count"), "a whole number of devices, at least 1")
    if "fraction" in data:
        return DemandForm(None, None, str(data["fraction"]), str(data["memory"]) if "memory" in data else None,
                          {str(k): str(v) for k, v in selector.items()})
    resource = str(data.get("resource", GPU))
    if not resource.startswith("nvidia.com/"):
        raise r.fail((*path, "resource"), f"{resource!r} is not an nvidia.com/ GPU resource")
    return DemandForm(resource, count, None, None, {str(k): str(v) for k, v in selector.items()})


def _class(r: _Reader, data: Any, i: int) -> ClassSpec:
    path: tuple[str | int, ...] = ("spec", "classes", i)
    if not isinstance(data, Mapping) or not data.get("name"):
        raise r.fail(path, "each class needs at least a name and an arrival rate")
    name = str(data["name"])
    arrival = _mapping(data.get("arrival"))
    if "ratePerHour" not in arrival:
        raise r.fail((*path, "arrival"), "give arrival.ratePerHour (mean arrivals per hour)")
    try:
        rate = number(arrival["ratePerHour"])
        diurnal = _mapping(arrival.get("diurnal"))
        amplitude = number(diurnal.get("amplitude", 0.0))
        peak = number(diurnal.get("peakHour", 14.0))
        weekend = number(arrival.get("weekendFactor", 1.0))
    except DistributionError as exc:
        raise r.fail((*path, "arrival"), str(exc)) from exc
    if not 0 <= rate <= MAX_RATE_PER_HOUR or not 0 <= amplitude <= 1 or not 0 <= weekend <= 100:
        raise r.fail((*path, "arrival"), f"ratePerHour in [0, {MAX_RATE_PER_HOUR:,.0f}] (gpufleet's limit, see "
                     "docs/limits.md), diurnal.amplitude in [0, 1], weekendFactor in [0, 100]")
    role = str(data.get("role", "batch"))
    if role not in ROLES:
        raise r.fail((*path, "role"), f"{role!r} is not one of {', '.join(ROLES)}")
    demand_raw = _mapping(data.get("demand"))
    demand = {str(k): _form(r, v, (*path, "demand", str(k))) for k, v in demand_raw.items()}
    gang = data.get("gang")
    backoff = data.get("backoffLimit", 0)
    if not isinstance(backoff, int) or isinstance(backoff, bool) or not 0 <= backoff <= 1000:
        raise r.fail((*path, "backoffLimit"), "a whole number from 0 to 1000")
    mem = data.get("gpuMemoryUsed")
    return ClassSpec(
        name=name, namespace=str(data.get("namespace", name)),
        queue=str(data["queue"]) if data.get("queue") else None,
        priority_class=str(data["priorityClass"]) if data.get("priorityClass") else None,
        role=role, arrival=Arrival(rate, amplitude, peak, weekend),
        duration=r.dist(data, "duration", seconds, "1h", path),
        pods=r.dist(data, "pods", number, 1, path),
        gpus_per_pod=r.dist(data, "gpusPerPod", number, 1, path),
        gang=bool(gang) if gang is not None else None, backoff_limit=backoff,
        cpu=str(data.get("cpu", "1")), memory=str(data.get("memory", "4Gi")),
        utilization=r.dist(data, "gpuUtilization", number, 1, path),
        memory_used=r.dist(data, "gpuMemoryUsed", mebibytes, None, path) if mem is not None else None,
        demand=demand)


def parse_generator(data: Mapping[str, Any], where: str = "<generator>",
                    line_of: LineOf | None = None) -> GeneratorSpec:
    """Read a WorkloadGenerator document (already loaded as data)."""
    r = _Reader(where, line_of)
    spec = data.get("spec")
    if not isinstance(spec, Mapping):
        raise r.fail(("spec",), "missing; give spec.classes")
    classes_raw = spec.get("classes")
    if not isinstance(classes_raw, list) or not classes_raw:
        raise r.fail(("spec", "classes"), "give at least one class")
    classes = tuple(_class(r, c, i) for i, c in enumerate(classes_raw))
    names = [c.name for c in classes]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise r.fail(("spec", "classes"), f"class names must be unique: {', '.join(dup)}")
    seed = spec.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63:
        raise r.fail(("spec", "seed"), "a whole number from 0 to 2**63-1")
    try:
        duration = seconds(spec.get("duration", DEFAULT_DURATION_S))
    except DistributionError as exc:
        raise r.fail(("spec", "duration"), str(exc)) from exc
    meta = _mapping(data.get("metadata"))
    return GeneratorSpec(str(meta.get("name", "workload")), seed, duration, classes)


def is_generator(data: Any) -> bool:
    return (isinstance(data, Mapping) and data.get("kind") == KIND
            and str(data.get("apiVersion", "")).split("/", 1)[0] == API_GROUP)


# ---- drawing ------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Draw:
    """One generated job, before a scenario gives it a demand form."""

    klass: ClassSpec
    index: int
    arrival: float
    duration: float
    pods: int
    gpus_per_pod: int
    utilization: float
    memory_mib: int | None

    @property
    def name(self) -> str:
        return f"{self.klass.name}-{self.index:04d}"


def _stream(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def draw(spec: GeneratorSpec, *, seed: int | None = None, duration_s: float | None = None) -> list[Draw]:
    """Every job of the spec over [0, duration), sorted by arrival; identical for identical inputs."""
    seed = spec.seed if seed is None else seed
    horizon = spec.duration_s if duration_s is None else duration_s
    out: list[Draw] = []
    for c in spec.classes:
        rng = _stream(seed, c.name)
        # Non-homogeneous Poisson by thinning: candidates at the peak rate, each kept with rate(t)/peak.
        peak = c.arrival.rate_max
        expected = peak * horizon / 3600.0
        if expected > MAX_PODS:
            raise GeneratorError(f"class {c.name}: {expected:,.0f} arrivals expected over the run, more than "
                                 f"{MAX_PODS:,} (gpufleet's limit per input, docs/limits.md); lower ratePerHour "
                                 "or the duration")
        n = int(rng.poisson(expected)) if peak > 0 else 0
        times = np.sort(rng.uniform(0.0, horizon, n))
        keep = rng.uniform(0.0, 1.0, n) * peak < c.arrival.rate_at(times)
        times = times[keep]
        m = len(times)
        durations = c.duration.sample(rng, m)
        # Drawn sizes are clipped to what one workload and one node may hold (docs/limits.md): a heavy-tailed
        # distribution must not produce a million-pod job.
        pods = np.clip(np.rint(c.pods.sample(rng, m)), 1, MAX_PODS_PER_WORKLOAD).astype(int)
        gpus = np.clip(np.rint(c.gpus_per_pod.sample(rng, m)), 1, MAX_GPUS_PER_NODE).astype(int)
        util = np.clip(c.utilization.sample(rng, m), 0.0, 1.0)
        memory = c.memory_used.sample(rng, m) if c.memory_used is not None else None
        for i in range(m):
            out.append(Draw(c, i, float(times[i]), max(float(durations[i]), 1.0), int(pods[i]), int(gpus[i]),
                            float(util[i]), math.ceil(memory[i]) if memory is not None else None))
    out.sort(key=lambda d: (d.arrival, d.klass.name, d.index))
    return out


# ---- rendering ----------------------------------------------------------------------------------------------

def _limits(d: Draw, form: DemandForm) -> dict[str, Any]:
    limits: dict[str, Any] = {"cpu": d.klass.cpu, "memory": d.klass.memory}
    if form.fraction is None and form.resource is not None:
        limits[form.resource] = form.count if form.count is not None else d.gpus_per_pod
    return limits


def render(d: Draw, scenario: str) -> dict[str, Any]:
    """The job as a batch/v1 Job manifest, in the demand form of ``scenario``."""
    c = d.klass
    form = c.form(scenario)
    labels = {CLASS_LABEL: c.name, ROLE_LABEL: c.role}
    if c.queue:
        labels[KUEUE_QUEUE_LABEL] = c.queue
    if c.priority_class:
        labels[KUEUE_PRIORITY_LABEL] = c.priority_class
    annotations = {
        ARRIVAL_ANNOTATION: f"{d.arrival:.0f}s",
        DURATION_ANNOTATION: f"{d.duration:.0f}s",
        DEMAND_ANNOTATION: f"{d.utilization * d.gpus_per_pod:.4f}",
        GANG_ANNOTATION: "true" if (c.gang if c.gang is not None else d.pods > 1) else "false",
    }
    if d.memory_mib is not None:
        annotations[MEMORY_ANNOTATION] = f"{d.memory_mib}Mi"
    pod_annotations: dict[str, str] = {}
    if form.fraction is not None:
        pod_annotations["gpufleet.io/gpu-fraction"] = form.fraction
        if form.memory is not None:
            pod_annotations["gpufleet.io/gpu-memory"] = form.memory
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": f"sim/{c.name}", "resources": {"limits": _limits(d, form)}}],
    }
    if form.node_selector:
        pod_spec["nodeSelector"] = dict(form.node_selector)
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": d.name, "namespace": c.namespace, "labels": labels, "annotations": annotations},
        "spec": {"parallelism": d.pods, "completions": d.pods, "backoffLimit": c.backoff_limit,
                 "template": {"metadata": {"labels": dict(labels), "annotations": pod_annotations},
                              "spec": pod_spec}},
    }


def generate(spec: GeneratorSpec, scenario: str, *, seed: int | None = None,
             duration_s: float | None = None) -> list[dict[str, Any]]:
    """The spec's jobs as Job manifests in ``scenario``'s demand forms."""
    return [render(d, scenario) for d in draw(spec, seed=seed, duration_s=duration_s)]
