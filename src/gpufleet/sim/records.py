"""What a run leaves behind: one span per pod placement, one record per job attempt, and the run's facts.

Metrics are computed from these records after the run (:mod:`gpufleet.sim.metrics`), so the engine stays a
loop of events and a new KPI never needs a new run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Outcome = Literal["succeeded", "failed", "preempted", "running", "pending"]
JobOutcome = Literal["succeeded", "failed", "unfinished"]


@dataclass(slots=True)
class PodSpan:
    """One pod holding devices from ``held_from`` to ``held_to``, busy from ``busy_from`` to ``busy_to``."""

    job: str
    pod: str
    node: str | None
    pool: str | None
    model: str | None
    share: float  # physical GPUs held (a 3g.40gb half of an A100 is 0.5, a replica of 8 is 0.125)
    price: float  # per GPU-hour of the model
    held_from: float
    held_to: float = float("nan")
    busy_from: float | None = None
    busy_to: float | None = None
    demand: float = 0.0  # busy whole-GPU equivalents while working
    shared_gpus: tuple[str, ...] = ()  # software-shared GPUs (replicas, fractions): busy is capped per GPU
    attempt: int = 0  # index of the job's attempt that placed it (JobRecord.attempts)
    # Whole-GPU equivalents held (holdings.Holding.equivalent: a MIG instance by its compute slices over the
    # GPU's); None: the same as ``share`` (spans written by hand, traces without MIG)
    equivalent: float | None = None
    # Seconds of work done while busy, at the pod's own pace: shorter than its busy time when it shared a GPU
    # that its co-tenants kept more than busy (sim/contention.py); None: the busy time itself.
    work_s: float | None = None
    # Why the pod failed alone while its job ran on (FailureModels.replace_pods: a replacement took its place);
    # None: it ended with its attempt. What such a pod held is never useful.
    failed: str | None = None

    @property
    def equivalents(self) -> float:
        return self.share if self.equivalent is None else self.equivalent


@dataclass(slots=True)
class Attempt:
    submitted: float
    started: float | None = None  # every pod running: the work begins
    ended: float | None = None
    outcome: Outcome = "pending"
    cause: str | None = None  # failure or eviction reason

    def wait(self, end: float) -> float:
        """Queue wait: until the work began, else until the attempt ended, else until ``end`` (censored)."""
        stop = self.started if self.started is not None else self.ended if self.ended is not None else end
        return max(0.0, stop - self.submitted)


@dataclass(slots=True)
class JobRecord:
    key: str
    namespace: str
    team: str
    queue: str
    klass: str | None
    role: str | None
    pods: int
    gpus: float  # GPU equivalents asked (a MIG instance by its compute share)
    arrival: float
    attempts: list[Attempt] = field(default_factory=list)
    outcome: JobOutcome = "unfinished"
    ended: float | None = None


@dataclass(slots=True)
class PoolInfo:
    name: str
    gpus: int
    models: tuple[str, ...]


@dataclass(slots=True)
class SimResult:
    scenario: str
    policy: str
    window_s: float  # measurement window [0, window_s]
    run_end: float  # virtual time the run stopped
    capacity: float  # physical GPUs
    pools: list[PoolInfo]
    jobs: list[JobRecord]
    spans: list[PodSpan]
    # (time, GPUs stranded (scheduling/placement/stranded.py), idle GPUs, pods pending)
    stranded: list[tuple[float, float, float, int]]
    events: int = 0
    cycles: int = 0
    wall_s: float = 0.0
    not_simulated: int = 0  # jobs arriving after the horizon
    notes: list[str] = field(default_factory=list)
    gpus: dict[tuple[str, str], int] = field(default_factory=dict)  # physical GPUs per (pool, model)
    prices: dict[str, float] = field(default_factory=dict)  # per GPU-hour, per model of the cluster
    # Per stranded sample: (time, idle GPUs stranded per (pool, model)); same times as ``stranded``.
    stranded_by: list[tuple[float, dict[tuple[str, str], float]]] = field(default_factory=list)
    # Every node with GPUs: (pool, GPU model, GPUs), for the dashboard's replay of the fleet (sim/timeline.py).
    gpu_nodes: dict[str, tuple[str, str | None, int]] = field(default_factory=dict)
