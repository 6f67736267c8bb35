"""The queueing configuration a Kueue policy reads, derived once from a Manifests bundle.

ClusterQueue specs with their resource groups, flavors, LocalQueue routing, namespace labels, waitForPodsReady per
ClusterQueue, and the cohort quota tree. A policy that lives on (the live scheduler's kept one) takes some changes
in place (``KueuePolicy.queues_changed``, ``local_queues_changed``, ``namespaces_changed``); a quota change there
resets the flavor-resume state (§1.10) of the workloads it wakes, as Kueue's ``AllocatableResourceGeneration`` does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gpufleet.api.manifests import Manifests
from gpufleet.api.objects import (
    ClusterQueue,
    FlavorFungibility,
    LabelSelector,
    PodsReadyPolicy,
    PreemptionPolicy,
    QueueingStrategy,
    ResourceFlavor,
    ResourceGroup,
    SchedulerConfig,
    Topology,
)
from gpufleet.scheduling.charges import to_quota
from gpufleet.scheduling.quota import FR, QuotaTree, ResourceQuota

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every Namespace
DEFAULT_LOCAL_QUEUE = "default"  # LocalQueueDefaulting (beta, on by default since Kueue 0.12)


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """One resource group of a ClusterQueue: its resources share a flavor per pod set."""

    index: int
    resources: tuple[str, ...]
    flavors: tuple[str, ...]
    # Node label keys of any flavor of the group: the only selector keys flavor matching looks at (§1.1).
    label_keys: frozenset[str]


@dataclass(slots=True)
class CQSpec:
    name: str
    cohort: str | None
    groups: list[GroupSpec]
    group_of: dict[str, GroupSpec]  # resource -> group
    quotas: dict[FR, ResourceQuota]
    namespace_selector: LabelSelector | None
    strategy: QueueingStrategy
    preemption: PreemptionPolicy
    fungibility: FlavorFungibility
    fair_weight: float
    stopped: bool
    pods_ready: PodsReadyPolicy
    reserve_after_s: float | None = None  # gang reservation (kueue.reservation); None: off
    mig_resize_on_oom: bool = False  # a MIG OOM offers the next larger profile (gpufleet.api.mig_resized)
    drain: bool = False  # stopPolicy HoldAndDrain: its admitted workloads are evicted too (kueue.cycle)

    def nominal(self, fr: FR) -> int:
        q = self.quotas.get(fr)
        return 0 if q is None else q.nominal

    def borrowing_limit(self, fr: FR) -> int | None:
        q = self.quotas.get(fr)
        return None if q is None else q.borrowing_limit

    @property
    def covers_pods(self) -> bool:
        return "pods" in self.group_of

    def can_always_reclaim(self) -> bool:
        """Kueue's CanAlwaysReclaim: with reclaimWithinCohort Any, lent quota can always be taken back."""
        return self.preemption.reclaim_within_cohort == "Any"

    def can_borrow_within_cohort(self) -> bool:
        return self.preemption.borrow_within_cohort.policy != "Never"


def _groups(groups: list[ResourceGroup]) -> tuple[list[GroupSpec], dict[str, GroupSpec]]:
    specs: list[GroupSpec] = []
    by_resource: dict[str, GroupSpec] = {}
    for i, g in enumerate(groups):
        spec = GroupSpec(i, tuple(g.covered_resources), tuple(f.name for f in g.flavors), frozenset())
        specs.append(spec)
        for r in g.covered_resources:
            by_resource.setdefault(r, spec)
    return specs, by_resource


def _quotas(groups: list[ResourceGroup]) -> dict[FR, ResourceQuota]:
    """Quotas in quota units (:mod:`gpufleet.scheduling.charges`)."""
    out: dict[FR, ResourceQuota] = {}
    for g in groups:
        for f in g.flavors:
            for r, q in f.resources.items():
                bl, ll = q.borrowing_limit, q.lending_limit
                out[(f.name, r)] = ResourceQuota(to_quota(r, q.nominal), None if bl is None else to_quota(r, bl),
                                                 None if ll is None else to_quota(r, ll))
    return out


@dataclass(slots=True)
class QueueConfig:
    flavors: dict[str, ResourceFlavor]
    cluster_queues: dict[str, CQSpec]
    local_queues: dict[tuple[str, str], str]  # (namespace, name) -> ClusterQueue name
    namespace_labels: dict[str, dict[str, str]]
    topologies: dict[str, Topology]
    scheduler: SchedulerConfig
    cohort_parents: dict[str, str | None] = field(default_factory=dict)
    cohort_weights: dict[str, float] = field(default_factory=dict)
    cohort_quotas: dict[str, dict[FR, ResourceQuota]] = field(default_factory=dict)

    @property
    def fair_sharing(self) -> bool:
        return self.scheduler.fair_sharing

    def namespace_labels_of(self, namespace: str) -> dict[str, str]:
        labels = self.namespace_labels.get(namespace)
        return labels if labels is not None else {NAMESPACE_NAME_LABEL: namespace}

    def pods_ready_for(self, cluster_queue: str | None) -> PodsReadyPolicy:
        """waitForPodsReady of a ClusterQueue (its own override, else the global one)."""
        if cluster_queue is not None and cluster_queue in self.cluster_queues:
            return self.cluster_queues[cluster_queue].pods_ready
        return self.scheduler.pods_ready

    def build_tree(self, factory: Callable[[], QuotaTree] = QuotaTree) -> QuotaTree:
        tree = factory()
        for name, parent in self.cohort_parents.items():
            tree.add_cohort(name, parent, self.cohort_quotas.get(name, {}), self.cohort_weights.get(name, 1.0))
        for cq in self.cluster_queues.values():
            tree.add_cluster_queue(cq.name, cq.cohort, cq.quotas, cq.fair_weight)
        tree.finalize()
        return tree


def _cq_spec(cq: ClusterQueue, flavors: Mapping[str, ResourceFlavor], global_ready: PodsReadyPolicy,
             extensions: bool) -> CQSpec:
    groups, by_resource = _groups(cq.resource_groups)
    with_keys = []
    for g in groups:
        keys = frozenset(k for f in g.flavors if f in flavors for k in flavors[f].node_labels)
        with_keys.append(GroupSpec(g.index, g.resources, g.flavors, keys))
    by_resource = {r: with_keys[g.index] for r, g in by_resource.items()}
    return CQSpec(
        name=cq.name, cohort=cq.cohort, groups=with_keys, group_of=by_resource, quotas=_quotas(cq.resource_groups),
        namespace_selector=cq.namespace_selector, strategy=cq.queueing_strategy, preemption=cq.preemption,
        fungibility=cq.flavor_fungibility, fair_weight=cq.fair_weight, stopped=cq.stop_policy != "None",
        pods_ready=cq.pods_ready if cq.pods_ready is not None else global_ready,
        reserve_after_s=cq.reserve_after_s if extensions else None,
        mig_resize_on_oom=cq.mig_resize_on_oom and extensions, drain=cq.stop_policy == "HoldAndDrain",
    )


def queue_config(manifests: Manifests, *, extensions: bool = True, previous: QueueConfig | None = None,
                 read_from: Mapping[str, ClusterQueue] | None = None) -> QueueConfig:
    """The queues, quotas and cohorts of ``manifests``; ``extensions=False`` leaves out what only gpufleet reads
    on Kueue's objects (the gang reservation, the MIG resize), as Kueue itself would. ``previous`` and
    ``read_from``: a configuration read the same way and the ClusterQueue objects its specs were read from; a
    ClusterQueue that is the very object it was then (a live parse is memoised per resourceVersion) keeps its
    spec, while the flavors and the global waitForPodsReady are the same (thousands of queues, one changed)."""
    scheduler = manifests.config or SchedulerConfig()
    flavors = {f.name: f for f in manifests.flavors}
    same = (previous is not None and read_from is not None and previous.flavors == flavors
            and previous.scheduler.pods_ready == scheduler.pods_ready)
    specs: Mapping[str, CQSpec] = previous.cluster_queues if same and previous is not None else {}
    objects: Mapping[str, ClusterQueue] = read_from if same and read_from is not None else {}
    cqs: dict[str, CQSpec] = {}
    for cq in manifests.cluster_queues:
        known = specs.get(cq.name) if objects.get(cq.name) is cq else None
        cqs[cq.name] = known if known is not None else _cq_spec(cq, flavors, scheduler.pods_ready, extensions)
    lqs = {(lq.meta.namespace or "default", lq.meta.name): lq.cluster_queue for lq in manifests.local_queues}
    ns_labels = {ns.meta.name: {**ns.meta.labels, NAMESPACE_NAME_LABEL: ns.meta.name} for ns in manifests.namespaces}
    config = QueueConfig(flavors, cqs, lqs, ns_labels, {t.meta.name: t for t in manifests.topologies}, scheduler)
    for c in manifests.cohorts:
        config.cohort_parents[c.name] = c.parent
        config.cohort_weights[c.name] = c.fair_weight
        config.cohort_quotas[c.name] = _quotas(c.resource_groups)
    return config
