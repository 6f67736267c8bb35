"""What the policy knows about each workload: its requests per pod set, where it queues, and its state.

A :class:`WorkloadInfo` wraps a :class:`~gpufleet.cluster.workloads.Workload` with the scheduling state Kueue
keeps in the Workload's status: admission (ClusterQueue, flavors, usage, admission time), eviction in
progress, requeue backoff (``requeueState``), PodsReady, and the last flavor assignment state used to resume
the flavor search (§1.10).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from gpufleet.api.objects import PREFERRED_TOPOLOGY_ANNOTATION, REQUIRED_TOPOLOGY_ANNOTATION, PodTemplate
from gpufleet.cluster.workloads import Workload
from gpufleet.scheduling.charges import quota_amounts
from gpufleet.scheduling.kueue.pending import PendingReason
from gpufleet.scheduling.quota import FR
from gpufleet.scheduling.types import PodAssignment


class State(enum.Enum):
    PENDING = "pending"  # waiting in a ClusterQueue (active or parked), or unable to queue (see problem)
    ADMITTED = "admitted"  # holds quota (and node capacity when placed)
    FINISHED = "finished"
    DEACTIVATED = "deactivated"  # requeue limit exceeded (Kueue sets spec.active=false)


# The members as module names, for code that reads them per workload: under CPython 3.11 reading a member off its
# enum class (`State.PENDING`) costs ~130 ns, a module name ~10 ns.
PENDING, ADMITTED, FINISHED = State.PENDING, State.ADMITTED, State.FINISHED


@dataclass(frozen=True, slots=True)
class TopologyAsk:
    """A pod set's Kueue TAS annotation: keep its pods within one domain of ``level``."""

    level: str
    required: bool


@dataclass(slots=True)
class PodSetRequest:
    index: int
    name: str
    count: int
    min_count: int | None
    per_pod: dict[str, int]  # positive requests of one pod, in quota units (gpufleet.scheduling.charges)
    template: PodTemplate
    topology: TopologyAsk | None

    def total(self, count: int | None = None) -> dict[str, int]:
        n = self.count if count is None else count
        return {r: v * n for r, v in self.per_pod.items()}


@dataclass(slots=True)
class PodSetAdmission:
    name: str
    count: int
    flavors: dict[str, str]  # resource -> flavor


@dataclass(frozen=True, slots=True)
class AdmissionShape:
    """What an admission records of its flavor assignment: each pod set's count and flavors, the quota charged per
    flavor-resource, and what the decision reports (the flavor of each resource, the charge per resource).

    Admissions made from one assignment share one shape (the nomination memo hands an assignment to many heads of
    alike queues, and an admission is recorded for each), worked out once per assignment instead of once per
    admission. Read only, its lists and dicts included: ``usage`` is the assignment's own dict, which the memo
    keeps, and every admission record made from it holds it too."""

    podsets: list[PodSetAdmission]
    usage: dict[FR, int]
    flavors: dict[str, str]  # resource -> flavor, the first pod set naming a resource wins
    per_resource: dict[str, int]  # quota charged per resource, over every flavor

    @classmethod
    def of(cls, podsets: list[PodSetAdmission], usage: dict[FR, int]) -> AdmissionShape:
        per_resource: dict[str, int] = {}
        for (_, resource), amount in usage.items():
            per_resource[resource] = per_resource.get(resource, 0) + amount
        return cls(podsets, usage, merged_flavors(podsets), per_resource)


@dataclass(slots=True)
class AdmissionRecord:
    cluster_queue: str | None  # None: admitted without quota (no queue)
    podsets: list[PodSetAdmission]
    usage: dict[FR, int]
    # When the quota was reserved (Kueue's QuotaReserved lastTransitionTime): the most recent is preempted first
    # among equals. math.inf for a snapshot's admission that does not record it: Kueue then takes the current
    # time, later than every recorded reservation.
    admitted_at: float
    pods: list[PodAssignment] = field(default_factory=list)

    def flavors(self) -> dict[str, str]:
        return merged_flavors(self.podsets)


def merged_flavors(podsets: list[PodSetAdmission]) -> dict[str, str]:
    """The flavor of each resource over the pod sets (the first pod set naming a resource wins)."""
    out: dict[str, str] = {}
    for ps in podsets:
        for r, f in ps.flavors.items():
            out.setdefault(r, f)
    return out


def topology_ask(template: PodTemplate) -> TopologyAsk | None:
    annotations = template.annotations
    if not annotations:  # most templates have none: every pod set nominated comes through here
        return None
    required = annotations.get(REQUIRED_TOPOLOGY_ANNOTATION)
    if required:
        return TopologyAsk(required, True)
    preferred = annotations.get(PREFERRED_TOPOLOGY_ANNOTATION)
    if preferred:
        return TopologyAsk(preferred, False)
    return None


def pod_set_requests(workload: Workload) -> list[PodSetRequest]:
    out = []
    for i, ps in enumerate(workload.pod_sets):
        t = ps.template
        # Zero requests carry no quota and need no flavor (Kueue skips them too). A pod set's DRA claims are
        # charged beside its requests (quota_requests: the resources Kueue's deviceClassMappings name).
        out.append(PodSetRequest(i, ps.name, ps.count, ps.min_count, quota_amounts(ps.quota_requests), t,
                                 topology_ask(t) if t.annotations else None))
    return out


class WorkloadInfo:
    """The policy's record of one workload (identity semantics: one object per workload, compared by identity).

    Its pod sets' requests (:attr:`podsets`) are worked out from the workload when first read, not when it is
    submitted: a workload waits in its queue until it is a head, and a live scheduler's policy, built afresh each
    cycle, takes every pending workload in while nominating only the heads."""

    __slots__ = ("_podsets", "admission", "cluster_queue", "evicting", "key", "last_tried", "local_queue", "message",
                 "namespace", "no_quota", "order", "pending", "placement_parked", "priority", "problem", "queue_ts",
                 "ready", "ready_deadline", "requeue_at", "requeue_count", "shape", "state", "uid", "workload")

    def __init__(self, workload: Workload, podsets: list[PodSetRequest] | None = None, *,
                 local_queue: str | None = None, cluster_queue: str | None = None, queue_ts: float = 0.0) -> None:
        self.workload = workload
        self._podsets = podsets  # None until first read (podsets)
        self.local_queue = local_queue
        self.cluster_queue = cluster_queue
        self.no_quota = False  # no LocalQueue at all: runs without Kueue, only placement applies
        self.problem: str | None = None  # why it cannot even be queued (missing LocalQueue, incomplete pod group)
        self.state = PENDING
        self.admission: AdmissionRecord | None = None
        self.evicting: str | None = None  # eviction reason once decided, until the driver confirms it
        self.queue_ts = queue_ts  # Kueue's queue-order timestamp
        self.requeue_count = 0
        self.requeue_at: float | None = None
        self.ready = False
        self.ready_deadline: float | None = None
        # Flavor-search resume state (Kueue's LastAssignment): per pod set, group index -> last tried flavor
        # index, -1 when every flavor was tried.
        self.last_tried: list[dict[int, int]] | None = None
        self.message = ""
        self.pending = PendingReason.QUEUED  # why it waits (with the message), as the core decided it
        self.placement_parked = False  # parked because nodes, not quota, were short
        # What nomination reads of its pod sets (kueue.memo.head_key) as an id interned by the memo, when first
        # needed.
        self.shape: int | None = None
        # The workload's identity and ordering fields, copied once: every cycle reads them for each head and
        # candidate.
        self.key = workload.key
        self.namespace = workload.namespace
        self.priority = workload.priority
        self.order = workload.order
        self.uid = workload.uid or workload.key  # the Workload object's UID when known (Kueue's tie-breaker)

    def __repr__(self) -> str:
        return f"WorkloadInfo({self.key!r}, {self.state.value}, queue={self.cluster_queue!r})"

    @property
    def podsets(self) -> list[PodSetRequest]:
        """Each pod set's requests (:func:`pod_set_requests`), worked out on first reading."""
        found = self._podsets
        if found is None:
            found = self._podsets = pod_set_requests(self.workload)
        return found

    @property
    def usage(self) -> dict[FR, int]:
        return self.admission.usage if self.admission is not None else {}

    def uses_any(self, frs: set[FR] | frozenset[FR]) -> bool:
        return self.admission is not None and not frs.isdisjoint(self.admission.usage)

    def pending_flavors(self) -> bool:
        """Kueue's PendingFlavors: the last flavor search stopped before trying every flavor."""
        if self.last_tried is None:
            return False
        for tried in self.last_tried:  # plain loops, no generator: every head requeued after a cycle asks
            for idx in tried.values():
                if idx != -1:
                    return True
        return False

    def next_flavor(self, podset: int, group: int) -> int:
        if self.last_tried is None or podset >= len(self.last_tried):
            return 0
        return self.last_tried[podset].get(group, -1) + 1
