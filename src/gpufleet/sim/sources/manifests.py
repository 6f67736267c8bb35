"""Manifests → simulated jobs: Pods, pod groups, the workload kinds (Jobs, JobSets, Kubeflow and Ray jobs...) and
Kueue Workloads (through ``build_workloads``) with
the ``sim.gpufleet.io/*`` annotations that say what the API objects cannot.

* ``sim.gpufleet.io/arrival``: offset from the start ("2h30m"); without it the creationTimestamp relative to
  the earliest creationTimestamp of the input; without either, 0;
* ``sim.gpufleet.io/duration``: run time once every pod runs; without it the job runs until the end;
* ``sim.gpufleet.io/gpu-utilization``: busy share of what the pod holds, as DCGM's GPU_UTIL shows (0..1);
* ``sim.gpufleet.io/gpu-demand``: alternatively, busy whole-GPU equivalents of the pod (what it would show on
  exclusive whole GPUs, summed); on a MIG instance with less compute the work slows down;
* ``sim.gpufleet.io/gpu-memory-used``: GPU memory the pod uses on each device it holds, a quantity ("20Gi");
* ``sim.gpufleet.io/gang``: "true"/"false", whether every pod must run before any works (default: true for
  workloads of several pods, which is what distributed training needs);
* ``sim.gpufleet.io/backoff-limit``: retries of a Pod or pod group (a Job's own ``spec.backoffLimit`` counts
  for Jobs);
* labels ``sim.gpufleet.io/class`` and ``sim.gpufleet.io/role`` (``inference`` feeds the inference-cost KPI).

Pod-level annotations win over the workload's (pod groups can mix). The simulated cluster starts empty: a
pod's ``spec.nodeName`` and phase and a Workload's ``status.admission`` are not carried into the run.
A malformed value is an error naming the file, line, object and annotation; the job is then left out,
never silently changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

from gpufleet.api.errors import Problems, shown
from gpufleet.api.kinds import parse_duration
from gpufleet.api.manifests import Manifests
from gpufleet.api.objects import POD_GROUP_LABEL, ObjectMeta
from gpufleet.api.quantity import QuantityError, parse_quantity
from gpufleet.api.reader import parse_int_text
from gpufleet.cluster.build import build_workloads
from gpufleet.cluster.workloads import Workload
from gpufleet.sim.model import (
    ARRIVAL_ANNOTATION,
    BACKOFF_ANNOTATION,
    CLASS_LABEL,
    DEMAND_ANNOTATION,
    DURATION_ANNOTATION,
    GANG_ANNOTATION,
    MEMORY_ANNOTATION,
    ROLE_LABEL,
    UTILIZATION_ANNOTATION,
    PodProfile,
    SimJob,
)


class _Bad(ValueError):
    def __init__(self, key: str, message: str, fix: str) -> None:
        super().__init__(message)
        self.key = key
        self.fix = fix


def _metas(workloads: list[Workload]) -> dict[str, ObjectMeta]:
    """The object each workload was built from (a pod group: its first member), for creation times and lines."""
    return {w.key: w.origin for w in workloads if w.origin is not None}


def _created(m: Manifests, w: Workload, metas: Mapping[str, ObjectMeta]) -> float | None:
    if w.kind == "PodGroup" and POD_GROUP_LABEL in w.labels:  # a Kueue pod group: its earliest member
        stamps = [p.meta.creation_timestamp for p in m.pods
                  if p.meta.labels.get(POD_GROUP_LABEL) == w.name and (p.meta.namespace or "default") == w.namespace
                  and p.meta.creation_timestamp is not None]
        return min(stamps) if stamps else None
    meta = metas.get(w.key)
    return meta.creation_timestamp if meta is not None else None


def _duration(a: Mapping[str, str], key: str) -> float | None:
    text = a.get(key)
    if text is None:
        return None
    value = parse_duration(text)
    if value is None:
        raise _Bad(key, f"{text!r} is not a duration", 'write a duration such as "2h30m", "45m" or "90s"')
    return value


def _share(a: Mapping[str, str], key: str, *, upper: float | None) -> float | None:
    text = a.get(key)
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or (upper is not None and value > upper):
        bound = f"between 0 and {upper:g}" if upper is not None else "0 or more"
        raise _Bad(key, f"{text!r} is not a number {bound}", f'write it like {key}: "0.35"')
    return value


def _memory(a: Mapping[str, str], key: str) -> int | None:
    text = a.get(key)
    if text is None:
        return None
    try:
        q = parse_quantity(text)
    except QuantityError:
        q = Fraction(-1)
    if q <= 0:
        raise _Bad(key, f"{text!r} is not a positive quantity of memory", f'write it like {key}: "20Gi"')
    return -(-q.numerator // (q.denominator * 2**20))  # bytes -> MiB, rounded up


def _flag(a: Mapping[str, str], key: str, default: bool) -> bool:
    text = a.get(key)
    if text is None:
        return default
    if text.lower() not in ("true", "false"):
        raise _Bad(key, f"{text!r} is not true or false", f'write {key}: "true" or "false"')
    return text.lower() == "true"


def _count(a: Mapping[str, str], key: str, default: int) -> int:
    text = a.get(key)
    if text is None:
        return default
    count = parse_int_text(text)
    if count is None or count < 0:
        raise _Bad(key, f"{shown(text)} is not a count", f'write it like {key}: "3"')
    return count


def _profile(a: Mapping[str, str]) -> PodProfile:
    return PodProfile(gpu_util=_share(a, UTILIZATION_ANNOTATION, upper=1.0),
                      gpu_demand=_share(a, DEMAND_ANNOTATION, upper=None),
                      memory_mib=_memory(a, MEMORY_ANNOTATION))


def jobs_from_workloads(m: Manifests, workloads: list[Workload], problems: Problems) -> list[SimJob]:
    metas = _metas(workloads)
    teams = {ns.meta.name: ns.meta.labels.get("team", ns.meta.name) for ns in m.namespaces}
    created = {w.key: _created(m, w, metas) for w in workloads}
    stamps = [c for c in created.values() if c is not None]
    earliest = min(stamps) if stamps else 0.0
    jobs: list[SimJob] = []
    for w in workloads:
        a = w.annotations
        try:
            arrival = _duration(a, ARRIVAL_ANNOTATION)
            if arrival is None:
                stamp = created[w.key]
                arrival = stamp - earliest if stamp is not None else 0.0
            default = _profile(a)
            profiles: dict[str, PodProfile] = {}
            for pod in w.pods:
                own = {**a, **pod.template.annotations}
                if own != a:
                    profiles[pod.key] = _profile(own)
            job = SimJob(
                workload=w, arrival=arrival, duration=_duration(a, DURATION_ANNOTATION),
                gang=_flag(a, GANG_ANNOTATION, w.gang and len(w.pods) > 1),
                backoff_limit=_count(a, BACKOFF_ANNOTATION, w.backoff_limit),
                profiles=profiles, default_profile=default, team=teams.get(w.namespace, w.namespace),
                klass=w.labels.get(CLASS_LABEL), role=w.labels.get(ROLE_LABEL))
            # In the simulation the object is created when it arrives; queues order by that time. The cluster
            # starts empty: a bound node, a phase or an admission written in the manifest belong to another
            # cluster's history, not to this run.
            w.created = arrival
            w.admission = None
            for pod in w.pods:
                pod.node_name = None
                pod.phase = "Pending"
        except _Bad as bad:
            meta = metas.get(w.key)
            src = meta.source if meta is not None else None
            # An error, not a left-out warning: a bad value is a mistake in the input (unlike a kind or field
            # gpufleet does not read), and a run missing one job would report KPIs of another workload; every
            # caller (simulate, the case study, calibration) stops on errors.
            problems.error(f"{bad}; nothing is simulated until it is fixed", file=src.file if src else None,
                           line=src.line if src else None, kind=w.kind, name=w.key,
                           field=f"metadata.annotations.{bad.key}", fix=bad.fix)
            continue
        jobs.append(job)
    return jobs


def jobs_from_manifests(m: Manifests, problems: Problems | None = None) -> list[SimJob]:
    """Every workload of the manifests as a simulated job; problems go to ``problems`` (else the manifests')."""
    problems = problems if problems is not None else m.problems
    return jobs_from_workloads(m, build_workloads(m, problems), problems)
