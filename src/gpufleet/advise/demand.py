"""The demand side: the jobs to schedule, grouped into classes that ask for one kind of device.

A **class** is the jobs of one workload class (the generator's class, the ``sim.gpufleet.io/class`` label,
the openb ``qos``), in one namespace and queue, whose pods ask for the same device form (whole GPUs and their
count, a MIG profile, a replica, a fraction). For each class the search needs:

* how many devices it holds at once if nothing waits: the mean over the window and the 95th percentile
  (time-weighted) of the devices its running jobs would hold, arrivals and durations as given;
* its pods' GPU memory use (per device) and busy share (whole-GPU equivalents of work per device), as
  samples, to judge which devices it fits (:mod:`gpufleet.advise.fit`);
* which GPU models it accepts (``gpufleet.io/gpu-model``, a node selector on the product label).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpufleet.api.objects import PRODUCT_LABEL, GpuDemand
from gpufleet.gpu.catalog import DEFAULT_CATALOG
from gpufleet.gpu.constants import FRACTION_RESOURCE, MILLI
from gpufleet.gpu.mig import geometry_for
from gpufleet.sim.model import SimJob


@dataclass(slots=True)
class DemandClass:
    name: str
    namespace: str
    queue: str | None  # LocalQueue name
    role: str | None
    form: GpuDemand  # as written (the first GPU pod set's)
    jobs: list[SimJob] = field(default_factory=list)
    memory_mib: list[int] = field(default_factory=list)  # per pod, per device held (known ones only)
    need: list[float] = field(default_factory=list)  # per pod: busy whole-GPU equivalents per device
    milli: list[int] = field(default_factory=list)  # per pod, for fractions
    mean: float = 0.0  # devices held at once on average, nothing waiting
    peak: float = 0.0  # their time-weighted 95th percentile
    models: tuple[str, ...] = ()  # accepted GPU models; empty: any

    @property
    def resource(self) -> str:
        """The resource its pods ask as written."""
        if self.form.kind == "fraction":
            return FRACTION_RESOURCE
        return self.form.resource or ""

    @property
    def count(self) -> int:
        return max(1, self.form.count)

    @property
    def single_device(self) -> bool:
        """A pod of one device: it may move between whole GPUs, MIG instances and replicas."""
        return self.form.kind in ("gpu", "mig", "shared") and self.form.count == 1

    @property
    def memory_known(self) -> bool:
        return len(self.memory_mib) >= max(1, len(self.pods_total()) // 2)

    def pods_total(self) -> list[int]:
        return [len(j.workload.pods) for j in self.jobs]

    def accepts(self, model: str) -> bool:
        return not self.models or model in self.models


def _gpu_template_demand(job: SimJob) -> GpuDemand | None:
    for ps in job.workload.pod_sets:
        if ps.template.gpu.wants_gpu:
            return ps.template.gpu
    return None


def _signature(d: GpuDemand) -> str:
    if d.kind == "fraction":
        return "fraction"
    return f"{d.count}x {d.resource}"


def _models(job: SimJob, demand: GpuDemand) -> tuple[str, ...]:
    models = set(demand.models)
    for ps in job.workload.pod_sets:
        product = ps.template.node_selector.get(PRODUCT_LABEL)
        if product:
            found = DEFAULT_CATALOG.find(product)
            models.add(found.key if found else product)
    return tuple(sorted(models))


def _held_compute(demand: GpuDemand, model_hint: str | None) -> float:
    """Whole-GPU equivalents of compute one device of ``demand`` gives (for a utilization read off it)."""
    if demand.kind == "mig" and demand.mig_profile:
        for geometry in ([geometry_for(model_hint)] if model_hint else []) + [None]:
            if geometry is not None and geometry.has_profile(demand.mig_profile):
                return geometry.profile(demand.mig_profile).compute_slices / geometry.compute_slices
        slices = int(demand.mig_profile.split("g.", 1)[0].split(".")[-1] or 1)
        return slices / 7
    if demand.kind == "fraction":
        return demand.milli / MILLI
    return 1.0


def classify(jobs: Iterable[SimJob], *, window_s: float, default_util: float = 1.0) -> list[DemandClass]:
    """The jobs that want GPUs, grouped into classes (module doc), in order of first appearance."""
    classes: dict[tuple[str, str, str | None, str], DemandClass] = {}
    for job in jobs:
        demand = _gpu_template_demand(job)
        if demand is None:
            continue
        base = job.klass or job.workload.queue or job.workload.namespace
        key = (base, job.workload.namespace, job.workload.queue, _signature(demand))
        c = classes.get(key)
        if c is None:
            c = DemandClass(base, job.workload.namespace, job.workload.queue, job.role, demand,
                            models=_models(job, demand))
            classes[key] = c
        c.jobs.append(job)
        for pod in job.workload.pods:
            d = pod.template.gpu
            if not d.wants_gpu:
                continue
            profile = job.profile(pod.key)
            if profile.memory_mib is not None:
                c.memory_mib.append(profile.memory_mib)
            devices = max(1, d.count)
            if profile.gpu_demand is not None:
                c.need.append(profile.gpu_demand / devices)
            else:
                util = profile.gpu_util if profile.gpu_util is not None else default_util
                c.need.append(util * _held_compute(d, c.models[0] if c.models else None))
            if d.kind == "fraction":
                c.milli.append(d.milli)
    out = list(classes.values())
    # Same base name for different forms: say the form in the name, so that every class has its own.
    names = [c.name for c in out]
    for c in out:
        if names.count(c.name) > 1:
            c.name = f"{c.name} ({_signature(c.form)})"
    for c in out:
        c.mean, c.peak = concurrency(c.jobs, window_s)
    return out


def concurrency(jobs: Sequence[SimJob], window_s: float, quantile: float = 95.0) -> tuple[float, float]:
    """(mean, time-weighted ``quantile``) of the devices the jobs hold at once over [0, window], had none of
    them waited: each job from its arrival for its duration (a service until the end)."""
    if window_s <= 0 or not jobs:
        return 0.0, 0.0
    times: list[float] = []
    deltas: list[float] = []
    for job in jobs:
        d = _gpu_template_demand(job)
        devices = sum(max(1, p.template.gpu.count) for p in job.workload.pods if p.template.gpu.wants_gpu)
        if d is None or devices == 0:
            continue
        start = min(max(job.arrival, 0.0), window_s)
        end = window_s if job.duration is None else min(job.arrival + job.duration, window_s)
        if end <= start:
            continue
        times += [start, end]
        deltas += [float(devices), -float(devices)]
    if not times:
        return 0.0, 0.0
    order = np.lexsort((np.array(deltas), np.array(times)))
    t = np.array(times)[order]
    level = np.cumsum(np.array(deltas)[order])
    edges = np.append(t, window_s)
    widths = np.diff(edges)
    before = float(t[0])  # nothing held before the first arrival
    values = np.append(level, 0.0)[: len(widths)]
    total = float(np.sum(widths)) + before
    mean = float(np.sum(values * widths)) / window_s
    weights = np.append(widths, before)
    levels = np.append(values, 0.0)
    idx = np.argsort(levels, kind="stable")
    cum = np.cumsum(weights[idx])
    cut = quantile / 100.0 * total
    peak = float(levels[idx][min(int(np.searchsorted(cum, cut)), len(idx) - 1)])
    return mean, peak
