"""The dashboard's contract: what a data source is, and the views it fills.

A :class:`DataSource` is what the server reads; three are built on it (:mod:`gpufleet.web.sources`): manifests
as ``gpufleet plan`` sees them, the live informer cache as the scheduler sees it, and a simulation result. A
source answers with immutable views: a :class:`ClusterView` (fleet, queues, workloads) and/or a
:class:`SimulationView` (the what-if runs and their timelines), and a version that moves when they change, which
the server turns into server-sent events.

Views hold names exactly as the cluster has them; nothing here is markup, and every page writes them as text.
Every view has ``to_json``: the JSON API is these documents (``gpufleet/web/openapi.py`` describes them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

SourceKind = Literal["files", "live", "simulation"]
SliceKind = Literal["whole", "mig", "replica", "fraction"]
# free: nobody holds it; running: its holder runs; idle: allocated, but its pod does not run (bound and not
# Running, or not Ready): a GPU paid for and doing nothing; planned: placed by the planner, not bound yet.
SliceState = Literal["free", "running", "idle", "planned"]
WorkloadStatus = Literal["admitted", "pending", "finished", "deactivated"]


@dataclass(frozen=True, slots=True)
class SliceView:
    """One device a pod can hold on a GPU: the whole GPU, a MIG instance, a time-slice replica or a fraction."""

    kind: SliceKind
    id: str
    holder: str | None = None  # pod namespace/name
    workload: str | None = None
    queue: str | None = None  # the ClusterQueue of the holder's workload
    state: SliceState = "free"
    start: int = 0  # mig: first memory slice; replica: its index; fraction: thousandths before it on the GPU
    size: int = 1  # mig: memory slices; fraction: thousandths of the GPU
    profile: str | None = None  # mig: 3g.40gb
    memory_mib: int = 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "id": self.id, "state": self.state, "start": self.start,
                               "size": self.size}
        if self.holder is not None:
            out.update(holder=self.holder, workload=self.workload, queue=self.queue)
        if self.profile is not None:
            out["profile"] = self.profile
        if self.memory_mib:
            out["memoryMiB"] = self.memory_mib
        return out


@dataclass(frozen=True, slots=True)
class GpuView:
    index: int
    id: str
    model: str
    memory_mib: int
    mode: Literal["whole", "replicas", "mig"]
    healthy: bool
    # What ``start`` and ``size`` of its slices count in: memory slices (mig), replicas, or 1000 thousandths.
    units: int
    slices: tuple[SliceView, ...]

    @property
    def held(self) -> bool:
        return any(s.holder is not None for s in self.slices)

    @property
    def idle(self) -> bool:
        """Allocated, and none of its holders runs."""
        held = [s for s in self.slices if s.holder is not None]
        return bool(held) and all(s.state == "idle" for s in held)

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "id": self.id, "model": self.model, "memoryMiB": self.memory_mib,
                "mode": self.mode, "healthy": self.healthy, "units": self.units, "idle": self.idle,
                "slices": [s.to_json() for s in self.slices]}


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    pool: str
    model: str | None
    ready: bool
    unschedulable: bool
    gpus: tuple[GpuView, ...]
    pods: int
    cpu: tuple[int, int]  # (used, allocatable) millicores
    memory: tuple[int, int]  # (used, allocatable) bytes

    def queues(self) -> set[str]:
        return {s.queue for g in self.gpus for s in g.slices if s.queue}

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "pool": self.pool, "model": self.model, "ready": self.ready,
                "unschedulable": self.unschedulable, "pods": self.pods,
                "cpu": {"used": self.cpu[0], "allocatable": self.cpu[1]},
                "memory": {"used": self.memory[0], "allocatable": self.memory[1]},
                "gpus": [g.to_json() for g in self.gpus]}


@dataclass(frozen=True, slots=True)
class PoolView:
    name: str
    models: tuple[str, ...]
    nodes: int
    gpus: int
    held: float  # GPU equivalents held (a replica of 4 is 0.25)
    idle: int  # GPUs allocated whose holders do not run
    unhealthy: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "models": list(self.models), "nodes": self.nodes, "gpus": self.gpus,
                "held": round(self.held, 3), "idle": self.idle, "unhealthy": self.unhealthy}


@dataclass(frozen=True, slots=True)
class QuotaView:
    """One flavor-resource of a ClusterQueue or Cohort: amounts as Kubernetes writes them and in quota units
    (integers: thousandths of a GPU for nvidia.com/gpu) for bars."""

    flavor: str
    resource: str
    nominal: str
    usage: str
    borrowed: str
    borrowing_limit: str | None  # None: unlimited
    lending_limit: str | None  # None: everything lendable
    units: tuple[int, int, int | None, int | None]  # nominal, usage, borrowing limit, lending limit

    def to_json(self) -> dict[str, Any]:
        nominal, usage, borrowing, lending = self.units
        return {"flavor": self.flavor, "resource": self.resource, "nominal": self.nominal, "usage": self.usage,
                "borrowed": self.borrowed, "borrowingLimit": self.borrowing_limit, "lendingLimit": self.lending_limit,
                "units": {"nominal": nominal, "usage": usage, "borrowingLimit": borrowing, "lendingLimit": lending}}


@dataclass(frozen=True, slots=True)
class ClusterQueueView:
    name: str
    cohort: str | None
    strategy: str
    fair_weight: float
    fair_share: int  # Kueue's weightedShare: borrowed over what the cohort can lend, by weight (0: not borrowing)
    pending: int
    admitted: int
    stopped: bool
    quotas: tuple[QuotaView, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "cohort": self.cohort, "strategy": self.strategy, "fairWeight": self.fair_weight,
                "fairShare": self.fair_share, "pending": self.pending, "admitted": self.admitted,
                "stopped": self.stopped, "quotas": [q.to_json() for q in self.quotas]}


@dataclass(frozen=True, slots=True)
class CohortView:
    name: str
    parent: str | None
    fair_weight: float
    fair_share: int
    cohorts: tuple[str, ...]  # child cohorts
    cluster_queues: tuple[str, ...]
    quotas: tuple[QuotaView, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "parent": self.parent, "fairWeight": self.fair_weight,
                "fairShare": self.fair_share, "cohorts": list(self.cohorts), "clusterQueues": list(self.cluster_queues),
                "quotas": [q.to_json() for q in self.quotas]}


@dataclass(frozen=True, slots=True)
class PodView:
    key: str
    node: str | None
    devices: tuple[str, ...]
    phase: str
    state: SliceState  # running, idle (bound, not running), planned, or free (not placed)

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "node": self.node, "devices": list(self.devices), "phase": self.phase,
                "state": self.state}


@dataclass(frozen=True, slots=True)
class PreemptionView:
    when: str  # "cycle 2" (files) or an RFC 3339 time (live)
    preemptor: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"when": self.when, "preemptor": self.preemptor, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class WorkloadView:
    key: str
    namespace: str
    name: str
    kind: str
    local_queue: str | None
    cluster_queue: str | None
    priority: int
    status: WorkloadStatus
    reason: str  # why it waits (the plan's words); empty when admitted
    gpus: float
    pods: tuple[PodView, ...]
    flavors: tuple[tuple[str, str], ...] = ()  # (resource, flavor)
    preemptions: tuple[PreemptionView, ...] = ()
    device: str = ""  # what each pod holds, in words: "1g.10gb", "1/8 replica", "0.5 GPU", "2 GPUs"; "" for none

    def summary_json(self) -> dict[str, Any]:
        return {"key": self.key, "namespace": self.namespace, "name": self.name, "kind": self.kind,
                "localQueue": self.local_queue, "clusterQueue": self.cluster_queue, "priority": self.priority,
                "status": self.status, "reason": self.reason, "gpus": round(self.gpus, 3), "device": self.device,
                "pods": len(self.pods)}

    def to_json(self) -> dict[str, Any]:
        return {**self.summary_json(), "pods": [p.to_json() for p in self.pods],
                "flavors": {r: f for r, f in self.flavors},
                "preemptions": [p.to_json() for p in self.preemptions]}


@dataclass(frozen=True, slots=True)
class ClusterView:
    """The cluster as one source sees it at one moment."""

    source: SourceKind
    title: str
    generated: float  # wall clock, seconds
    nodes: tuple[NodeView, ...]
    pools: tuple[PoolView, ...]
    cluster_queues: tuple[ClusterQueueView, ...]
    cohorts: tuple[CohortView, ...]
    workloads: tuple[WorkloadView, ...]
    notes: tuple[str, ...] = ()  # what the source says about itself: problems in the input, objects left out
    _by_key: dict[str, WorkloadView] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._by_key.update((w.key, w) for w in self.workloads)

    def workload(self, key: str) -> WorkloadView | None:
        return self._by_key.get(key)


@dataclass(frozen=True, slots=True)
class SimulationView:
    """A ``simulate --json`` document, checked: its runs, each as ``simulate`` wrote it (KPIs, per queue, team,
    pool, the series and the timeline), and the before/after pair when it has one; beside the runs, the advice
    of ``gpufleet advise -o DIR`` (its ``whatif.json``) or the fit of ``simulate --calibrate``, as written."""

    title: str
    runs: tuple[dict[str, Any], ...]
    advice: dict[str, Any] | None = None
    calibration: dict[str, Any] | None = None

    def pair(self) -> tuple[int, int] | None:
        names = [r["scenario"] for r in self.runs]
        if "before" in names and "after" in names:
            return names.index("before"), names.index("after")
        return (0, 1) if len(self.runs) >= 2 else None


class DataSource(Protocol):
    """What the dashboard's server reads. Implementations are thread-safe: the server's workers call them
    concurrently."""

    kind: SourceKind
    title: str

    def cluster(self) -> ClusterView | None:
        """The current cluster view; None for a source that has none (a simulation result)."""
        ...

    def simulation(self) -> SimulationView | None:
        """The simulation result; None for a source that has none."""
        ...

    @property
    def version(self) -> int:
        """Moves whenever the views change (only a live source's ever does)."""
        ...

    def wait_for_change(self, since: int, timeout: float) -> int:
        """Block until :attr:`version` exceeds ``since`` or ``timeout`` passes; the version then."""
        ...

    def close(self) -> None:
        ...
