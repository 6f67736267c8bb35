"""The contracts between the scheduling core and its drivers: decisions, pod requests, placers, policies.

A scheduling cycle is ``policy.cycle(now) -> Decisions``. The policy owns its working state (queues, quota
usage, and the :class:`~gpufleet.cluster.state.ClusterState` when nodes are known) and applies what it decides
to that state as it goes, so one cycle's later decisions see its earlier ones. The returned
:class:`Decisions` tell the driver what to carry out: the simulator starts pods and timers, the live driver
writes Bindings and Evictions. Workloads that the driver finishes, evicts or times out are reported back
through the policy's ``finish``/``evicted`` methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from gpufleet.api.dra_need import DistinctValues
from gpufleet.api.objects import PodTemplate, Taint, Toleration
from gpufleet.cluster.state import ClusterState, Placement
from gpufleet.cluster.workloads import Workload
from gpufleet.scheduling.charges import format_quota

# ---- decisions ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodAssignment:
    pod: str  # namespace/name
    node: str | None  # None in quota-only mode
    devices: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"pod": self.pod, "node": self.node, "devices": list(self.devices)}


@dataclass(slots=True)
class AdmittedWorkload:
    workload: str
    cluster_queue: str | None  # None when the workload runs without quota (no queue)
    flavors: dict[str, str] = field(default_factory=dict)  # resource -> flavor
    pods: list[PodAssignment] = field(default_factory=list)
    # Quota charged per resource, in quota units (gpufleet.scheduling.charges): which resource a GPU fraction
    # was charged on shows here (gpufleet.io/gpu-milli, or nvidia.com/gpu where the queue covers only that).
    usage: dict[str, int] = field(default_factory=dict)
    # What the policy changed in the workload as submitted, said in words ("nvidia.com/mig-1g.10gb →
    # nvidia.com/mig-2g.20gb (OOM-killed on nvidia.com/mig-1g.10gb)"); empty for most admissions.
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "workload": self.workload, "clusterQueue": self.cluster_queue, "flavors": dict(self.flavors),
            "resourceUsage": {r: format_quota(r, v) for r, v in sorted(self.usage.items())},
            "pods": [p.to_json() for p in self.pods]}
        if self.notes:
            out["notes"] = list(self.notes)
        return out

    def flavor_summary(self) -> str:
        """Each charged resource with its flavor and amount: "cpu=default (2), nvidia.com/gpu=default (500m)"."""
        return ", ".join(f"{r}={f}" + (f" ({format_quota(r, self.usage[r])})" if r in self.usage else "")
                         for r, f in sorted(self.flavors.items()))


@dataclass(frozen=True, slots=True)
class PreemptedWorkload:
    workload: str
    preemptor: str
    reason: str  # InClusterQueue | InCohortReclamation | InCohortReclaimWhileBorrowing | InCohortFairSharing

    def to_json(self) -> dict[str, Any]:
        return {"workload": self.workload, "preemptor": self.preemptor, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class PendingWorkload:
    workload: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"workload": self.workload, "reason": self.reason}


@dataclass(slots=True)
class Decisions:
    admitted: list[AdmittedWorkload] = field(default_factory=list)
    preempted: list[PreemptedWorkload] = field(default_factory=list)
    pending: list[PendingWorkload] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"admitted": [a.to_json() for a in self.admitted],
                "preempted": [p.to_json() for p in self.preempted],
                "pending": [p.to_json() for p in self.pending]}

    def __bool__(self) -> bool:
        return bool(self.admitted or self.preempted)


# ---- placement ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodRequest:
    """One pod to place, with what its admission adds: the flavor's node labels, taints and tolerations."""

    key: str
    template: PodTemplate
    node_labels: tuple[tuple[str, str], ...] = ()  # ResourceFlavor nodeLabels the node must carry
    flavor_taints: tuple[Taint, ...] = ()  # ResourceFlavor nodeTaints (informational for placement)
    extra_tolerations: tuple[Toleration, ...] = ()  # ResourceFlavor tolerations added to the pod
    # What the policy knows of the pod's GPU memory on a time-sliced GPU (declared, or what its class is known to
    # use; 0: nothing known), and the GPUs ("node/index") it must not share again (one OOM-killed it there).
    memory_hint: int = 0
    avoid_gpus: frozenset[str] = frozenset()
    # DRA: the devices ("driver", "pool", "device") its claims allow, in groups (its devices all come from one);
    # empty: no claims (gpufleet.cluster.dra_claims).
    dra_groups: tuple[frozenset[tuple[str, str, str]], ...] = ()
    dra_distinct: DistinctValues | None = None  # distinctAttribute: its devices must differ in it


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    """Kueue TAS: keep a gang inside one domain of ``level`` (required) or as few as possible (preferred)."""

    topology: str  # Topology object name
    level: str  # node label of the level
    required: bool


class Placer(Protocol):
    """Puts pods on nodes and devices of a ClusterState, all or none."""

    cluster: ClusterState

    def place(self, pods: Sequence[PodRequest], topology: TopologyRequest | None = None) -> list[Placement] | None:
        """Place every pod (allocating in the cluster) or none of them (the cluster unchanged)."""
        ...

    def explain(self, pod: PodRequest) -> str:
        """Why the pod fits no node, kube-scheduler style ("0/18 nodes are available: ...")."""
        ...

    def find_victims(self, pods: Sequence[PodRequest], candidates: Sequence[str],
                     topology: TopologyRequest | None = None) -> list[str] | None:
        """A smallest prefix-then-fill-back subset of ``candidates`` (placed pod keys, in preference order)
        whose removal lets ``pods`` be placed; None when even all of them are not enough. The cluster is left
        unchanged."""
        ...


# ---- policies -------------------------------------------------------------------------------------------------


@runtime_checkable
class MemoryFeedback(Protocol):
    """A policy that learns from GPU memory: the driver reports what running pods use (the node agent's per-pod
    ``DCGM_FI_DEV_FB_USED``; the simulator's model) and which pod an OOM killed, while its devices are still
    held (gpufleet.scheduling.memory)."""

    def observe_memory(self, workload: str, pod: str, mib: int, now: float) -> None:
        ...

    def oom_killed(self, workload: str, pod: str, now: float) -> None:
        ...


@dataclass(frozen=True, slots=True)
class Joining:
    """What a policy decided for the pods that came after their workload was admitted (a replacement for a failed
    pod, a StatefulSet's next ordinal): where they go, all of them, or why they wait."""

    workload: str
    placed: tuple[PodAssignment, ...] = ()  # every pod asked for, or none
    waiting: str | None = None  # why they do not fit (the placer's reason); None when placed

    def message(self, kind: str) -> str:
        """What a waiting pod is told (its condition); ``kind`` names the workload's kind."""
        return (f"{kind} {self.workload} is admitted; this pod, created after it, waits for room next to its "
                f"pods: {self.waiting}")


@runtime_checkable
class LateMembers(Protocol):
    """A policy that lets an admitted workload's pods come and go while it stays admitted, as Kueue leaves a Job's,
    a JobSet's or a StatefulSet's pods to their controller once admitted (gpufleet.scheduling.kueue.late_members):
    the driver reports a pod gone (``leave``: its node is free, its quota stays the workload's) and asks to place
    the pods that came later (``join``: before any new admission)."""

    def join(self, workload: str, pods: Sequence[str], now: float) -> Joining | None:
        ...

    def leave(self, workload: str, pod: str, now: float) -> bool:
        ...


class Policy(Protocol):
    """A scheduler the simulator or the live driver runs, cycle after cycle."""

    name: str
    cluster: ClusterState | None

    def submit(self, workload: Workload, now: float) -> None:
        """A new workload arrives (pending)."""
        ...

    def finish(self, workload: str, now: float) -> None:
        """The workload is over (succeeded, failed for good, or deleted): release its pods and quota."""
        ...

    def evicted(self, workload: str, now: float, *, requeue: bool = True, reason: str = "Preempted") -> None:
        """The driver has stopped the workload's pods (after a preemption or a timeout): release them and,
        when ``requeue``, put the workload back in its queue (with Kueue's backoff after a PodsReadyTimeout)."""
        ...

    def cycle(self, now: float) -> Decisions:
        """One scheduling cycle; admissions are applied to the policy's state before it returns."""
        ...

    def pending_count(self) -> int:
        ...

    def next_wakeup(self, now: float) -> float | None:
        """The next time something becomes possible without an event (a backoff ends), if any."""
        ...
