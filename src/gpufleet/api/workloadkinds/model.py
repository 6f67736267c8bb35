"""What the workload kinds parse into: plans of the pods their controllers would create, grouped the way
Kueue's integration for the kind groups them into workloads.

A :class:`WorkloadOwner` is one object of a workload kind (a Job, a JobSet, a PyTorchJob, a Deployment...). It
holds :class:`WorkloadPlan` s, one per unit of admission its kind defines (one for most kinds, one per group for
a LeaderWorkerSet); each plan holds :class:`PodSetPlan` s with a count, a template and the names the controller
gives the pods. Pods are named lazily (``PodSetPlan.pod_name``): a plan of 10,000 pods costs one template until
``gpufleet.cluster.grouping`` turns it into workloads, inside the input's pod budget.

The rule that says what the kind means for scheduling (:class:`KindRule`) lives in
:mod:`gpufleet.api.workloadkinds.table`, once per kind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from gpufleet.api.errors import Problems
from gpufleet.api.objects import LabelSelector, ObjectMeta, PodTemplate, ResourceList

# How a kind's pods become workloads:
# * gang: one workload holds all its pods, admitted together (Kueue's integrations for Job, JobSet, Kubeflow, Ray,
#   StatefulSet);
# * per-group: one workload per group of pods (LeaderWorkerSet: each leader with its workers);
# * per-pod: every pod is a workload of its own (serving kinds under Kueue's pod integration: Deployment,
#   ReplicaSet);
# * pod-group: an object that names no pods itself; the pods that reference it form its workload (Volcano's and
#   KAI's PodGroup).
Grouping = Literal["gang", "per-group", "per-pod", "pod-group"]

# Whose queue a queue name refers to: a Kueue LocalQueue, a Volcano Queue or a KAI Queue.
QueueSystem = Literal["kueue", "volcano", "kai"]


@dataclass(frozen=True, slots=True)
class OwnerLabels:
    """The pod labels (or annotations) by which a live pod names the object that owns it."""

    name: str  # label carrying the owner's name
    pod_set: str | None = None  # label carrying the pod set (replica type, replicated job, task, group)
    index: str | None = None  # label carrying the pod's index within its pod set
    group_index: str | None = None  # label carrying the group of a per-group kind
    annotation: bool = False  # ``name`` is an annotation, not a label
    extra: tuple[tuple[str, str], ...] = ()  # labels that must also hold these values


@dataclass(frozen=True, slots=True)
class KindRule:
    """What one workload kind means for scheduling: the single place every part of gpufleet reads it from."""

    group: str
    kind: str
    versions: tuple[str, ...]
    grouping: Grouping
    pod_names: str  # how the controller names the pods it creates (as gpufleet names them)
    queue: str  # where the queue comes from
    suspend: str | None  # the field that suspends it (None: the kind cannot be suspended)
    priority: str  # where the priority class comes from
    kueue: str | None  # Kueue's integration for the kind; None when Kueue has none
    owner_labels: tuple[OwnerLabels, ...] = ()  # how a live pod says it belongs to an object of this kind
    queue_system: QueueSystem = "kueue"
    # Kueue admits the group before all its pods exist (its pod-group fast admission): a StatefulSet creates its
    # pods one after another, each once the one before is ready, so waiting for all of them would never end.
    fast_admission: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.kind)

    @property
    def label(self) -> str:
        """The kind as people tell it from others of the same name (``Job (Volcano)``, ``PodGroup (KAI)``)."""
        if self.queue_system == "kueue":
            return self.kind
        return f"{self.kind} ({'Volcano' if self.queue_system == 'volcano' else 'KAI'})"

    @property
    def gang(self) -> bool:
        """Whether the pods of one workload are admitted and placed all together."""
        return self.grouping != "per-pod"


PodName = Callable[[int], str]


@dataclass(slots=True)
class PodSetPlan:
    """``count`` pods of one template, the i-th named ``pod_name(i)``."""

    name: str
    count: int
    template: PodTemplate
    pod_name: PodName
    min_count: int | None = None  # partial admission (Kueue's PodSet.minCount)
    # Kueue's slice size when the pod set's template asks TAS slices without one (a JobSet: its Job's parallelism,
    # each Job one slice); None: the size must be given (gpufleet.api.workloadkinds.tas)
    slice_default: int | None = None


@dataclass(slots=True)
class WorkloadPlan:
    """One unit of admission of an owner."""

    name: str
    pod_sets: list[PodSetPlan]
    group_index: int | None = None  # per-group kinds: which group
    created: float | None = None  # when its object is created, if not when the owner is (a CronJob's next Job)

    @property
    def total(self) -> int:
        return sum(ps.count for ps in self.pod_sets)


@dataclass(slots=True)
class WorkloadOwner:
    """One object of a workload kind, with the workloads its controller's pods form."""

    meta: ObjectMeta
    rule: KindRule
    workloads: list[WorkloadPlan] = field(default_factory=list)
    queue: str | None = None
    priority_class: str | None = None  # a class named by a field of the kind (runPolicy, spec.priorityClassName)
    suspended: bool = False
    backoff_limit: int = 0
    labels: dict[str, str] = field(default_factory=dict)  # the workload's labels (queue, priority class)
    annotations: dict[str, str] = field(default_factory=dict)
    hold: str | None = None  # why it is never admitted as it stands (said as its pending reason)
    selector: LabelSelector | None = None  # apps kinds: which pods it owns
    min_member: int | None = None  # pod-group kinds: pods needed to start
    notes: list[str] = field(default_factory=list)  # what gpufleet decided about it, said once with the input

    @property
    def key(self) -> str:
        return self.meta.key

    @property
    def kind(self) -> str:
        return self.rule.kind

    @property
    def namespace(self) -> str:
        return self.meta.namespace or "default"

    @property
    def total_pods(self) -> int:
        return sum(w.total for w in self.workloads)


@dataclass(slots=True)
class ForeignQueue:
    """A Volcano or KAI Queue, read so that the workloads naming it can be admitted against its quota.

    Amounts are in gpufleet's canonical units. ``nominal``: what the queue is entitled to (Volcano's
    ``deserved``, else its ``capability``; KAI's ``quota``); ``limit``: the most it may use, borrowing (Volcano's
    ``capability``, KAI's ``limit``); a resource absent from both is not limited."""

    meta: ObjectMeta
    system: QueueSystem
    nominal: ResourceList
    limit: ResourceList
    parent: str | None = None
    weight: float | None = None  # KAI's overQuotaWeight (of gpu, else the first resource giving one)

    @property
    def name(self) -> str:
        return self.meta.name


@dataclass(slots=True)
class AdmissionCheck:
    """A Kueue AdmissionCheck: a gate a ClusterQueue's workloads pass after their quota is reserved."""

    meta: ObjectMeta
    controller: str

    @property
    def name(self) -> str:
        return self.meta.name


@dataclass(slots=True)
class TrainingRuntime:
    """A Kubeflow Trainer TrainingRuntime or ClusterTrainingRuntime: the JobSet template TrainJobs run on."""

    meta: ObjectMeta
    kind: str  # TrainingRuntime (namespaced) or ClusterTrainingRuntime
    data: dict[str, Any]  # the document as written; a TrainJob's overrides are applied to a copy
    num_nodes: int | None = None  # spec.mlPolicy.numNodes


@dataclass(slots=True)
class ControllerObjects:
    """Everything the workload kinds add to a set of manifests."""

    owners: list[WorkloadOwner] = field(default_factory=list)
    queues: list[ForeignQueue] = field(default_factory=list)
    admission_checks: list[AdmissionCheck] = field(default_factory=list)
    runtimes: list[TrainingRuntime] = field(default_factory=list)
    # ClusterQueue name -> the admission checks it names (spec.admissionChecks, admissionChecksStrategy)
    cluster_queue_checks: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Kueue Workload key -> its status.admissionChecks (name -> state)
    workload_checks: dict[str, dict[str, str]] = field(default_factory=dict)
    generated_names: dict[tuple[str, str, str], int] = field(default_factory=dict)  # generateName uses
    # Kueue objects added to stand for Volcano's and KAI's queues (kind -> how many): not counted as input
    translated: dict[str, int] = field(default_factory=dict)
    # What KAI's top-level queues deserve together (resource -> amount): the cluster's capacity beyond it is the
    # pool their over-quota use borrows from (gpufleet.api.workloadkinds.queues.size_kai_pool)
    kai_deserved: dict[str, int] = field(default_factory=dict)
    # Steps that need the whole input (a TrainJob needs its runtime), run once every document is read.
    linkers: list[Callable[[ControllerObjects, Problems], None]] = field(default_factory=list, repr=False)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for o in self.owners:
            out[o.rule.label] = out.get(o.rule.label, 0) + 1
        for q in self.queues:
            name = "Queue (Volcano)" if q.system == "volcano" else "Queue (KAI)"
            out[name] = out.get(name, 0) + 1
        if self.admission_checks:
            out["AdmissionCheck"] = len(self.admission_checks)
        for rt in self.runtimes:
            out[rt.kind] = out.get(rt.kind, 0) + 1
        return out
