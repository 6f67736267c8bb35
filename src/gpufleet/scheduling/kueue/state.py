"""The policy's working state and the bookkeeping every path shares: admit, release, requeue.

Quota usage lives in one :class:`QuotaTree` holding admitted usage only; a cycle mutates it inside a
checkpoint as its snapshot and rolls back at the end (§1.8). Node capacity lives in the ClusterState when
nodes are known; placements are real as soon as they are decided.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

from gpufleet.cluster.state import ClusterState
from gpufleet.scheduling.kueue.admitted import AdmittedQueue
from gpufleet.scheduling.kueue.config import CQSpec, QueueConfig
from gpufleet.scheduling.kueue.flavors import FlavorAssigner
from gpufleet.scheduling.kueue.gangs import GangPlacer
from gpufleet.scheduling.kueue.info import ADMITTED, AdmissionRecord, AdmissionShape, WorkloadInfo
from gpufleet.scheduling.kueue.memo import NominationMemo
from gpufleet.scheduling.kueue.pending import PendingReason
from gpufleet.scheduling.kueue.preemption import Preemptor
from gpufleet.scheduling.kueue.queues import QueueManager
from gpufleet.scheduling.quota import FR, QuotaNode, QuotaTree, ResourceQuota
from gpufleet.scheduling.types import AdmittedWorkload, PodAssignment

if TYPE_CHECKING:
    from gpufleet.scheduling.kueue.room import Nomination

PODS_READY_TIMEOUT = "PodsReadyTimeout"
# Kueue's eviction reason for an admitted workload of a ClusterQueue stopped with stopPolicy HoldAndDrain.
CLUSTER_QUEUE_STOPPED = "ClusterQueueStopped"
_V = TypeVar("_V")


class SchedulerState:
    def __init__(self, config: QueueConfig, cluster: ClusterState | None, gangs: GangPlacer | None,
                 tree_factory: Callable[[], QuotaTree] = QuotaTree) -> None:
        self.config = config
        self.tree = config.build_tree(tree_factory)
        roots = {name: _tree_key(self.tree.cluster_queue(name)) for name in config.cluster_queues}
        self.queues = QueueManager({n: cq.strategy for n, cq in config.cluster_queues.items()}, roots)
        self.cluster = cluster
        self.gangs = gangs
        self.infos: dict[str, WorkloadInfo] = {}
        self.admitted: dict[str, AdmittedQueue] = {name: AdmittedQueue() for name in config.cluster_queues}
        self.running_free: dict[str, WorkloadInfo] = {}  # admitted without quota (no queue)
        self.no_quota: dict[str, WorkloadInfo] = {}  # pending without quota: only placement gates them
        self.unqueued: dict[str, WorkloadInfo] = {}  # pending with a problem that keeps them out of any queue
        self.placement_parked: dict[str, WorkloadInfo] = {}
        self.waiting_ready: dict[str, WorkloadInfo] = {}  # admitted, waitForPodsReady on, not ready yet
        # The same for workloads without a queue, under the scheduler-wide waitForPodsReady: timed out as Kueue's
        # are (gpufleet admits them; a gang of them stuck half started wastes as much), never holding an admission
        # back (blockAdmission is about Kueue's workloads).
        self.free_waiting: dict[str, WorkloadInfo] = {}
        self.backoff: dict[str, WorkloadInfo] = {}  # parked until requeue_at
        self.preemptor = Preemptor(self.tree, config.cluster_queues, self.admitted, config.fair_sharing,
                                   config.scheduler.fair_sharing_strategies)
        # The last cycle: whether it admitted or preempted anything, and the heads it evaluated (see settled()).
        self.last_decided = True
        self.last_evaluated: frozenset[str] = frozenset()
        # What depends on the static configuration only, worked out when first needed.
        self._assigners: dict[str, FlavorAssigner] = {}
        # ClusterQueue -> namespace -> whether its namespace selector matches (two lookups, no key tuple per head)
        self.namespace_matches: dict[str, dict[str, bool]] = {name: {} for name in config.cluster_queues}
        for (namespace, _), cq in config.local_queues.items():  # the namespaces known to use each queue, up front
            if cq in config.cluster_queues:
                self.namespace_match(config.cluster_queues[cq], namespace)
        # Nominations remembered while their cohort tree is unchanged (kueue.memo); None nominates every head
        # afresh (the reference the memo is tested against).
        self.memo: NominationMemo | None = NominationMemo(self.tree, config.cluster_queues, self.admitted,
                                                          config.fair_sharing)
        # Room on nodes the last cycle's preemptions made, held for their preemptors in the next (kueue.room).
        self.nominations: dict[str, Nomination] = {}
        # Gang reservations (kueue.reservation): ClusterQueue -> the workload reserving its quota.
        self.reservations: dict[str, str] = {}
        self.reserve = self.block_admission = False
        self.draining: list[str] = []
        self._note_specs()

    def _note_specs(self) -> None:
        """What is read of every ClusterQueue's spec at each cycle, worked out once per configuration: whether some
        queue reserves for gangs or blocks admission (waitForPodsReady), and the queues stopped with HoldAndDrain,
        whose admitted workloads each cycle evicts (kueue.cycle)."""
        cqs = self.config.cluster_queues.values()
        self.reserve = any(cq.reserve_after_s is not None for cq in cqs)
        self.block_admission = any(cq.pods_ready.block_admission for cq in cqs)
        self.draining = [cq.name for cq in cqs if cq.drain]

    def add_cluster_queues(self, queues: Mapping[str, CQSpec], order: Sequence[str]) -> None:
        """ClusterQueues added (their cohorts' parents as they were): in the quota tree, with a heap, an admitted
        list and namespace matches of their own, as a new state makes them, every table keyed by queue in
        ``order`` (the new configuration's) as a new state's are (:meth:`queues_changed` then makes again what is
        derived from every queue)."""
        config, tree = self.config, self.tree
        for name, spec in queues.items():
            config.cluster_queues[name] = spec
            tree.add_cluster_queue(name, spec.cohort, spec.quotas, spec.fair_weight)
            self.admitted[name] = AdmittedQueue()
            self.namespace_matches[name] = {}
        # A parent's children as a new tree lists them (its child cohorts, then its ClusterQueues in the
        # configuration's order), not the new ones last: fair sharing ranks queues of equal share by that order (a
        # review found another victim chosen).
        rank = {name: i for i, name in enumerate(order)}
        parents = {id(p): p for name in queues if (p := tree.cluster_queue(name).parent) is not None}
        for parent in parents.values():
            parent.children.sort(key=lambda child: (child.is_cluster_queue,
                                                    rank.get(child.name, -1) if child.is_cluster_queue else 0))
        tree.finalize()
        for name, spec in queues.items():
            self.queues.add_queue(name, spec.strategy, _tree_key(tree.cluster_queue(name)))
            self.queues.release_in_tree(name)  # (its quota is the cohort's to lend: what is parked there may fit)
        # The waiting workloads of the trees joined search their flavors afresh, as on a quota change
        # (:meth:`queues_changed`): the new queue's quota is theirs to borrow.
        self._search_afresh({self.queues.tree_of[name] for name in queues}, release=False)
        _reorder(config.cluster_queues, rank)
        _reorder(self.admitted, rank)
        _reorder(self.namespace_matches, rank)
        _reorder(self.queues.queues, rank)
        self._note_specs()

    def queues_changed(self, queues: Mapping[str, CQSpec],
                       cohorts: Mapping[str, tuple[dict[FR, ResourceQuota], float] | None]) -> None:
        """New specs for ``queues`` (the same cohort, resource groups and readiness rules: what the policy reads at
        each cycle changed, and the queueing strategy, which the queue's heap takes) and new quotas and fair-sharing
        weights for ``cohorts`` (None: its Cohort object deleted, the cohort left implicit; one not known yet: its
        object created, with no parent): the tree takes them, usage kept; what was worked out from the old ones is
        worked out again (flavor assigners, namespace matches, the nomination memo, the preemptor's searches), and
        the workloads parked in their cohort trees are woken."""
        config, tree = self.config, self.tree
        for name, change in cohorts.items():
            quotas: dict[FR, ResourceQuota]
            if change is None:
                for table in (config.cohort_parents, config.cohort_quotas, config.cohort_weights):
                    table.pop(name, None)
                quotas, weight = {}, 1.0
            else:
                quotas, weight = change
                config.cohort_parents.setdefault(name, None)
                config.cohort_quotas[name] = quotas
                config.cohort_weights[name] = weight
            tree.add_cohort(name, config.cohort_parents.get(name), quotas, weight)
        for name, spec in queues.items():
            if spec.strategy != config.cluster_queues[name].strategy:
                self.queues.queues[name].set_strategy(spec.strategy, keep_sticky=name in self.reservations)
            config.cluster_queues[name] = spec
            tree.add_cluster_queue(name, spec.cohort, spec.quotas, spec.fair_weight)
            self._assigners.pop(name, None)
            self.namespace_matches[name] = {}
        tree.finalize()
        self._note_specs()
        self.preemptor = Preemptor(tree, config.cluster_queues, self.admitted, config.fair_sharing,
                                   config.scheduler.fair_sharing_strategies)
        if self.memo is not None and not self.memo.specs_changed(config.cluster_queues, list(queues)):
            # (made again with its interner: the workloads keep the shape ids it gave them)
            self.memo = NominationMemo(tree, config.cluster_queues, self.admitted, config.fair_sharing,
                                       self.memo.shapes)
        self._search_afresh({self.queues.tree_of.get(name, name) for name in queues}
                            | {_tree_key(tree.cohort(name)) for name in cohorts}, release=True)

    def _search_afresh(self, roots: set[str], *, release: bool) -> None:
        """The pending workloads of every ClusterQueue in the cohort trees ``roots`` search their flavors from the
        first again (Kueue resets where a flavor search resumes when a tree's quotas change), the workloads parked
        there woken first when ``release``."""
        for name in self.config.cluster_queues:
            if self.queues.tree_of.get(name, name) in roots:
                if release:
                    self.queues.release_in_tree(name)
                for info in self.queues.queues[name].pending():
                    info.last_tried = None

    def assigner(self, cluster_queue: str) -> FlavorAssigner:
        """The flavor assigner of a ClusterQueue (one per queue, kept until the queue's spec changes)."""
        found = self._assigners.get(cluster_queue)
        if found is None:
            config = self.config
            found = self._assigners[cluster_queue] = FlavorAssigner(
                self.tree, config.cluster_queues[cluster_queue], config.flavors, config.topologies,
                config.fair_sharing)
        return found

    def namespace_match(self, cq: CQSpec, namespace: str) -> bool:
        """Whether the ClusterQueue's namespace selector matches the namespace, worked out and remembered in
        ``namespace_matches`` (the cycle reads that first)."""
        selector = cq.namespace_selector
        found = self.namespace_matches[cq.name][namespace] = selector is not None and selector.matches(
            self.config.namespace_labels_of(namespace))
        return found

    @property
    def placer(self) -> GangPlacer | None:
        """The gang placer when the policy places pods: it was given a ClusterState, even one without any node
        (pods then wait for nodes, as kube-scheduler's do, and a cluster autoscaler can scale up from zero).
        None in quota-only mode, where no ClusterState was given and admission is decided by quota alone."""
        if self.gangs is None or self.cluster is None:
            return None
        return self.gangs

    # ---- admission ---------------------------------------------------------------------------------------------
    def commit_admission(self, info: WorkloadInfo, cq: str | None, shape: AdmissionShape,
                         pods: list[PodAssignment], now: float, admitted_at: float | None = None, ready: bool = False,
                         charged: bool = False) -> AdmittedWorkload:
        """Record an admission and charge its quota (the caller has placed its pods already; ``charged``: the
        caller has charged the quota too, with :meth:`QuotaTree.add_lasting_usage`)."""
        usage = shape.usage
        record = AdmissionRecord(cq, shape.podsets, usage, now if admitted_at is None else admitted_at, pods)
        info.state = ADMITTED
        info.admission = record
        info.evicting = None
        info.last_tried = None
        info.message = ""
        info.pending = PendingReason.QUEUED
        info.requeue_at = None
        if self.backoff:  # (mostly empty: a lookup in an empty table still costs a call)
            self.backoff.pop(info.key, None)
        if self.placement_parked:
            self.placement_parked.pop(info.key, None)
        info.placement_parked = False
        times_out = False
        policy = self.config.scheduler.pods_ready  # (a workload without a queue: the scheduler-wide setting)
        if cq is not None:
            if self.reservations and self.reservations.get(cq) == info.key:
                del self.reservations[cq]  # admitted: its reservation is over
            if not charged:
                self.tree.add_usage(cq, usage)
            self.admitted[cq][info.key] = info
            self.queues.clear_sticky(info)
            policy = self.config.pods_ready_for(cq)
            times_out = policy.enable and not ready
        else:
            self.running_free[info.key] = info
            times_out = policy.enable and not ready
        if times_out:
            info.ready = False
            info.ready_deadline = record.admitted_at + policy.timeout_s
            (self.waiting_ready if cq is not None else self.free_waiting)[info.key] = info
        else:
            info.ready = True
            info.ready_deadline = None
        # The decision gets its own copies: the shape is shared (AdmissionShape).
        return AdmittedWorkload(info.key, cq, dict(shape.flavors), list(pods), dict(shape.per_resource))

    def begin_eviction(self, info: WorkloadInfo, reason: str | None) -> None:
        """An admitted workload is (or stops being) on its way out: preemption searches in its cohort tree read
        it differently from now on."""
        info.evicting = reason
        if info.cluster_queue is not None and info.cluster_queue in self.admitted:
            self.admitted[info.cluster_queue].evicting_changed(info.key)  # its value as a candidate (kueue.memo)
            self.tree.note_change(info.cluster_queue)

    def release(self, info: WorkloadInfo, now: float) -> None:
        """Give back the workload's quota and node capacity; parked workloads that may now fit return."""
        record = info.admission
        if record is None:
            return
        cq = record.cluster_queue
        if cq is not None:
            self.tree.remove_usage(cq, record.usage)
            self.admitted[cq].discard(info.key)
        else:
            self.running_free.pop(info.key, None)
        released = False
        if self.cluster is not None:
            for p in record.pods:
                if p.node is not None and p.pod in self.cluster.placements:
                    self.cluster.release(p.pod)
                    released = True
        info.admission = None
        info.evicting = None
        info.ready = False
        info.ready_deadline = None
        if self.waiting_ready:
            self.waiting_ready.pop(info.key, None)
        if self.free_waiting:
            self.free_waiting.pop(info.key, None)
        if cq is not None:
            self.queues.release_in_tree(cq)
        if released:
            # Node capacity is shared by every queue: whoever waited for nodes may fit now.
            self.unpark_placement(now)

    def unpark_placement(self, now: float) -> None:
        """Wake the workloads parked for nodes, but those with a pod larger than any node (more GPUs than a node
        has, say): capacity freed on nodes cannot help them, and trying every one of them again at each release
        cost most of a cycle beside a backlog of such workloads (kube-scheduler's queueing hints skip the same)."""
        if not self.placement_parked:
            return
        largest = self._largest_node()
        waiting = [i for i in self.placement_parked.values() if not _larger_than_any_node(i, largest)]
        for info in waiting:
            del self.placement_parked[info.key]
            info.placement_parked = False
        self.queues.unpark_where(waiting, now)

    def unpark_nodes_changed(self, now: float) -> None:
        """Nodes joined or changed (labels, taints, cordon, readiness): wake the workloads parked for nodes
        (:meth:`unpark_placement`), and those parked for quota too, at the next cycle (a release in every cohort
        tree): a flavor search passes over a flavor whose nodes cannot take the workload, so a workload parked
        for the quota of the flavors after it may fit under that flavor now (found by a hypothesis test against
        rebuilds: a pool's node back, a pending pod left parked for the other pool's quota)."""
        self.unpark_placement(now)
        for name in self.config.cluster_queues:
            self.queues.release_in_tree(name)

    def beyond_any_node(self) -> frozenset[str]:
        """The workloads parked for nodes with a pod larger than any node: quota released in their cohort tree cannot
        help them either, so a release leaves them parked (:meth:`ClusterQueues.heads`), as a node release does
        (:meth:`unpark_placement`); a node joining or changing wakes them (``unpark_placement`` judges again)."""
        if not self.placement_parked:
            return frozenset()
        largest = self._largest_node()
        return frozenset(k for k, i in self.placement_parked.items() if _larger_than_any_node(i, largest))

    def _largest_node(self) -> dict[str, int]:
        """Per resource, the most any node has allocatable (the resources no node has are left out)."""
        largest: dict[str, int] = {}
        if self.cluster is not None:
            for ns in self.cluster.nodes.values():
                for resource, amount in ns.allocatable.items():
                    if amount > largest.get(resource, 0):
                        largest[resource] = amount
        return largest

    def settled(self) -> bool:
        """Whether another cycle would change nothing: the last one admitted and preempted nothing, no quota was
        released since, and each ClusterQueue's next head is one that cycle already evaluated, with no flavor
        left to try. A BestEffortFIFO head that does not fit is parked and the next workload becomes the head,
        so a cycle that decided nothing is not settled while such workloads are still untried.

        Timers are not rounds: a requeue backoff or a waitForPodsReady timeout that ends later can still
        change things."""
        if self.last_decided or self.queues.releases_pending:
            return False
        return all(head.key in self.last_evaluated and not head.pending_flavors()
                   for head in self.queues.next_heads())

    # ---- views -------------------------------------------------------------------------------------------------
    def admitted_infos(self) -> Iterator[WorkloadInfo]:
        for by_key in self.admitted.values():
            yield from by_key.values()
        yield from self.running_free.values()

    def pending_infos(self) -> Iterator[WorkloadInfo]:
        for q in self.queues.queues.values():
            yield from q.pending()
        yield from self.no_quota.values()
        yield from self.unqueued.values()


def _larger_than_any_node(info: WorkloadInfo, largest: Mapping[str, int]) -> bool:
    """Whether one of the workload's pods asks more of a resource than any node has allocatable (only resources
    some node has are judged: the others are for placement's own checks)."""
    for ps in info.podsets:
        for resource, amount in ps.template.requests.items():
            most = largest.get(resource)
            if most is not None and amount > most:
                return True
    return False


def _tree_key(node: QuotaNode) -> str:
    """The QueueManager's name for the cohort tree ``node`` is in: its root cohort's, or a ClusterQueue's own."""
    while node.parent is not None:
        node = node.parent
    return node.name if node.is_cluster_queue else "cohort:" + node.name


def _reorder(table: dict[str, _V], rank: Mapping[str, int]) -> None:
    """``table``'s keys in ``rank``'s order, in place (others hold the same dict)."""
    in_order = sorted(table.items(), key=lambda item: rank.get(item[0], len(rank)))
    table.clear()
    table.update(in_order)
