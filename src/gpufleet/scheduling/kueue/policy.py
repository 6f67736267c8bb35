"""``KueuePolicy``: Kueue v0.14 admission as a :class:`~gpufleet.scheduling.types.Policy`.

Lifecycle of a workload, driven by the simulator or the live driver:

* ``submit``: it is routed LocalQueue → ClusterQueue (the ``kueue.x-k8s.io/queue-name`` label, else the
  namespace's LocalQueue named ``default``, else no queue at all: it then runs without quota, gated only by
  node capacity). A Kueue Workload with ``status.admission`` holds its quota from the start; pods the
  manifests already bound to nodes hold their node's capacity and count as usage.
* ``cycle``: one scheduling cycle (:mod:`~gpufleet.scheduling.kueue.cycle`).
* ``pods_ready``: the driver reports that every pod of an admitted workload is ready (waitForPodsReady);
  until then the workload is evicted with ``PodsReadyTimeout`` once its timeout has passed.
* ``evicted``: the driver has stopped the pods of a preempted or timed-out workload; it is requeued (after a
  ``PodsReadyTimeout``, with Kueue's exponential backoff, and deactivated past ``backoffLimitCount``).
* ``finish``: the workload is over; its quota and nodes are released.
* ``join`` / ``leave``: a pod created after its workload was admitted joins it (a StatefulSet's next ordinal, a
  Job's replacement for a failed pod), and a pod of an admitted workload is gone while the workload stays
  (:mod:`~gpufleet.scheduling.kueue.late_members`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from gpufleet.api.manifests import Manifests
from gpufleet.api.mig_resized import RESIZED_ANNOTATION, Resize
from gpufleet.api.objects import Topology
from gpufleet.cluster.devices import DeviceGrant
from gpufleet.cluster.state import ClusterState, NodeState
from gpufleet.cluster.workloads import Workload
from gpufleet.scheduling.charges import charge, quota_amounts
from gpufleet.scheduling.kueue.config import (
    DEFAULT_LOCAL_QUEUE,
    NAMESPACE_NAME_LABEL,
    CQSpec,
    QueueConfig,
    queue_config,
)
from gpufleet.scheduling.kueue.cycle import Cycle
from gpufleet.scheduling.kueue.firstfit import FirstFitPlacer
from gpufleet.scheduling.kueue.gangs import GangPlacer
from gpufleet.scheduling.kueue.info import (
    ADMITTED,
    FINISHED,
    PENDING,
    AdmissionShape,
    PodSetAdmission,
    State,
    WorkloadInfo,
)
from gpufleet.scheduling.kueue.late_members import join, leave
from gpufleet.scheduling.kueue.pending import PendingReason
from gpufleet.scheduling.kueue.selection import matches_affinity
from gpufleet.scheduling.kueue.shields import shield
from gpufleet.scheduling.kueue.state import PODS_READY_TIMEOUT, SchedulerState
from gpufleet.scheduling.memory import MemoryBook, OomLesson, next_larger_profile, resized
from gpufleet.scheduling.placement import make_placer
from gpufleet.scheduling.placement.filters import gpu_key
from gpufleet.scheduling.quota import FR, QuotaTree
from gpufleet.scheduling.types import Decisions, Joining, PendingWorkload, Placer, PodAssignment

PlacerFactory = Callable[[ClusterState, random.Random, Sequence[Topology]], Placer]

DEACTIVATED_MESSAGE = "The workload is deactivated due to exceeding the maximum number of re-queuing retries"
_TERMINAL = ("Succeeded", "Failed")
TERMINATING = "Terminating"  # why a workload whose pods are being deleted is on its way out (terminating())


def engine_placer_factory(profile: str = "gpufleet") -> PlacerFactory:
    """The placement engine with a named profile (``gpufleet.scheduling.placement``)."""

    def factory(cluster: ClusterState, rng: random.Random, topologies: Sequence[Topology]) -> Placer:
        return make_placer(cluster, profile, rng, topologies)

    return factory


def first_fit_factory(cluster: ClusterState, rng: random.Random, topologies: Sequence[Topology]) -> Placer:
    """A deliberately simple reference placer (first node that fits), for tests that check the queueing
    core's gang logic independently of the placement engine's scoring. Never used unless asked for."""
    return FirstFitPlacer(cluster)


# What of a ClusterQueue's spec the policy reads afresh at each cycle (or keeps in its quota tree, which takes it in
# place): a change to these alone is taken by a kept policy (KueuePolicy.queues_changed).
_READ_EACH_CYCLE = ("quotas", "stopped", "drain", "preemption", "namespace_selector", "fungibility", "fair_weight",
                    "mig_resize_on_oom", "strategy")


class KueuePolicy:
    """Kueue's admission (queues, quotas, fair sharing, preemption) plus gang placement on nodes."""

    name = "gpufleet"

    def __init__(self, manifests: Manifests, cluster: ClusterState | None = None, *,
                 placer_factory: PlacerFactory | None = None, seed: int = 0,
                 quota_tree_factory: Callable[[], QuotaTree] = QuotaTree, memory_aware: bool = True,
                 name: str | None = None, extensions: bool = True, mig_resize: bool = True) -> None:
        """``memory_aware``: learn pods' GPU memory (:class:`MemoryBook`: hints and avoided GPUs for placement,
        a larger MIG profile after an OOM on one); False is Kueue as it is, which learns nothing of it.
        ``mig_resize``: where a workload OOM-killed on a MIG instance is offered the next larger profile (its
        ClusterQueue opts in: ``gpufleet.io/mig-resize-on-oom``), the policy resizes its next attempt itself; False
        leaves that to the driver (live: a Job's next pod asks what its template asks, so the scheduler writes the
        resize on the Job and the webhook rewrites its next pods, :mod:`gpufleet.api.mig_resized`).
        ``extensions``: honour gpufleet's additions to Kueue's objects (the gang reservation,
        ``gpufleet.io/reserve-after``); False reads them as Kueue does, which ignores unknown annotations."""
        if name is not None:
            self.name = name
        self.config: QueueConfig = queue_config(manifests, extensions=extensions)
        self._extensions = extensions
        # The ClusterQueue objects the configuration's specs were read from (queues_changed reads only those that
        # are not these very objects again)
        self._read_from = {cq.name: cq for cq in manifests.cluster_queues}
        self.cluster = cluster
        self.rng = random.Random(seed)
        self.memory = MemoryBook(cluster) if memory_aware else None
        self.mig_resize = mig_resize
        gangs: GangPlacer | None = None
        self._placer_factory = placer_factory or engine_placer_factory()
        if cluster is not None:
            gangs = self._gang_placer(cluster)
        self.state = SchedulerState(self.config, cluster, gangs, quota_tree_factory)
        # Whether any workload was ever deactivated here: pending_report looks for them among every workload only
        # then (a live policy kept between cycles holds every running workload, and reports after each cycle).
        self._deactivated = False

    def _gang_placer(self, cluster: ClusterState) -> GangPlacer:
        return GangPlacer(self._placer_factory(cluster, self.rng, list(self.config.topologies.values())),
                          self.config.flavors, self.memory)

    def local_queues_changed(self, changed: Mapping[tuple[str, str], str | None],
                             now: float) -> list[WorkloadInfo] | None:
        """LocalQueues created, pointed at another ClusterQueue, or deleted (None) under the policy, (namespace, name)
        -> ClusterQueue: the workloads that name one (or, for a ``default`` one, name none) are routed again, as a
        new policy routes them, each submitted again (to a queue deleted: it waits, "LocalQueue ... doesn't exist",
        as in Kueue; the ``default`` one deleted: it runs without quota); their records as they were before. None,
        changing nothing, when a workload admitted names one: a new policy charges it where the queue now says,
        which this one cannot do to a workload in place."""
        state, config = self.state, self.config
        moved = self._naming(lambda key: key in changed)
        if moved is None:
            return None
        for key, cq in changed.items():
            if cq is None:
                config.local_queues.pop(key, None)
            else:
                config.local_queues[key] = cq
                if cq in config.cluster_queues:
                    state.namespace_matches.setdefault(cq, {}).pop(key[0], None)
        for info in moved:
            self.submit(info.workload, now)
        return moved

    def _naming(self, local_queue: Callable[[tuple[str, str]], bool]) -> list[WorkloadInfo] | None:
        """The workloads not finished whose LocalQueue, (namespace, name) (``default`` for those naming none), is one
        ``local_queue`` takes; None when one of them is admitted."""
        out = []
        for info in self.state.infos.values():
            wl = info.workload
            if info.state is FINISHED or not local_queue(
                    (wl.namespace, wl.queue if wl.queue is not None else DEFAULT_LOCAL_QUEUE)):
                continue
            if info.state is ADMITTED:
                return None
            out.append(info)
        return out

    def namespaces_changed(self, changed: Mapping[str, Mapping[str, str] | None]) -> None:
        """Namespaces created, relabelled (their labels) or deleted (None) under the policy: the ClusterQueues'
        namespace selectors judge them anew, and the workloads of them that wait are tried again at the next cycle
        (a release in their queues' cohort trees), as Kueue requeues a namespace's inadmissible workloads when its
        labels change. The workloads admitted stay admitted, as in Kueue."""
        config = self.config
        for namespace, labels in changed.items():
            if labels is None:
                config.namespace_labels.pop(namespace, None)
            else:
                config.namespace_labels[namespace] = {**labels, NAMESPACE_NAME_LABEL: namespace}
        state = self.state
        for matches in state.namespace_matches.values():
            for namespace in changed:
                matches.pop(namespace, None)
        for info in state.infos.values():
            if info.namespace in changed and info.state is PENDING and info.cluster_queue is not None:
                state.queues.release_in_tree(info.cluster_queue)

    def queues_changed(self, manifests: Manifests, now: float) -> list[WorkloadInfo] | None:
        """The ClusterQueues and Cohorts of ``manifests`` as they are now, under the policy. ClusterQueues added (a
        team onboarded) join the quota tree, and the workloads whose LocalQueue names one are routed to it, as a new
        policy routes them. Where only what the policy reads of a queue at each cycle changed (quotas: nominal,
        borrowing and lending limits; ``stopPolicy``; the preemption policies; the namespace selector; flavor
        fungibility; fair-sharing weights; the MIG resize opt-in; the queueing strategy), it is taken in place: the
        quota tree takes the new quotas and weights, usage kept, and a queue's heap its strategy. The workloads of
        the trees changed are tried again at the next cycle, as Kueue requeues a ClusterQueue's inadmissible
        workloads when the queue is updated; workloads admitted stay admitted (over a lowered quota, in a queue put
        on hold), as in Kueue, and as a new policy re-admits them from their pods. A Cohort object created for a
        cohort the ClusterQueues make, or deleted from one, gives it or takes away its own quota and weight
        (:func:`_cohort_objects_in_place`). Returns the workloads routed again, their records as they were before.
        None, changing nothing, when anything else differs (a queue deleted, a cohort's parent, a queue's cohort,
        resource groups and flavors, waitForPodsReady, gang reservation; a workload admitted that a queue added
        would take): a new policy is made then."""
        new, old = queue_config(manifests, extensions=self._extensions, previous=self.config,
                                read_from=self._read_from), self.config
        added = {name: spec for name, spec in new.cluster_queues.items() if name not in old.cluster_queues}
        if set(old.cluster_queues) - set(new.cluster_queues) or not _cohort_objects_in_place(old, new):
            return None
        queues: dict[str, CQSpec] = {}
        for name, was in old.cluster_queues.items():
            spec = new.cluster_queues[name]
            if spec is was or spec == was:
                continue
            if replace(spec, **{f: getattr(was, f) for f in _READ_EACH_CYCLE}) != was:
                return None
            queues[name] = spec
        # (a Cohort object deleted leaves its cohort implicit: no quota of its own, weight 1)
        cohorts = {name for name in {*new.cohort_parents, *old.cohort_parents}
                   if new.cohort_quotas.get(name, {}) != old.cohort_quotas.get(name, {})
                   or new.cohort_weights.get(name, 1.0) != old.cohort_weights.get(name, 1.0)
                   or (name in new.cohort_parents) != (name in old.cohort_parents)}
        moved = self._naming(lambda key: old.local_queues.get(key) in added) if added else []
        if moved is None:
            return None
        if added:
            self.state.add_cluster_queues(added, list(new.cluster_queues))
        if queues or cohorts or added:
            self.state.queues_changed(queues, {name: (new.cohort_quotas[name], new.cohort_weights[name])
                                               if name in new.cohort_parents else None for name in cohorts})
        self._read_from = {cq.name: cq for cq in manifests.cluster_queues}
        for info in moved:
            self.submit(info.workload, now)
        return moved

    def add_nodes(self, nodes: Sequence[NodeState], now: float) -> None:
        """Nodes join the cluster under the policy (a live cluster scaling up): added to its cluster state, the
        placer made again over it as a new policy makes its placer (its packing scorers count the cluster's GPUs
        per model, which the new nodes change), and the parked workloads woken (``unpark_nodes_changed``). The
        workloads admitted and their pods stay as they are."""
        cluster = self.cluster
        if cluster is None or not nodes:
            return
        for ns in nodes:
            cluster.add_node(ns)
        self._new_placer()
        self.state.unpark_nodes_changed(now)

    def remove_nodes(self, names: Sequence[str]) -> None:
        """Nodes that hold no pod leave the cluster under the policy (drained, then deleted, as a cluster scaling
        down removes them): out of its cluster state, and the placer made again (its GPUs per model)."""
        cluster = self.cluster
        if cluster is None or not names:
            return
        for name in names:
            cluster.remove_node(name)  # (refused for a node that still holds pods: the caller checks first)
        self._new_placer()

    def _new_placer(self) -> None:
        old = self.state.placer
        if old is not None and self.cluster is not None:
            close = getattr(old.placer, "close", None)
            if close is not None:
                close()  # it follows the cluster's changes no longer
            self.state.gangs = self._gang_placer(self.cluster)

    # ---- Policy ----------------------------------------------------------------------------------------------
    def submit(self, workload: Workload, now: float) -> None:
        state = self.state
        if self.memory is not None:
            workload = resized(workload, self.memory.resizes(workload.key))
        old = state.infos.get(workload.key)
        if old is not None:
            if old.state is State.ADMITTED:
                return  # already running; an update to a running workload changes nothing here
            self._forget(old)
        info = WorkloadInfo(workload, queue_ts=workload.created)  # its pod sets are read when first needed
        state.infos[info.key] = info
        self._route(info)
        live = bound = False  # one pass over the pods: every workload submitted comes through here
        for p in workload.pods:
            if p.phase not in _TERMINAL:
                live = True
                if p.node_name:
                    bound = True
                    break
        if workload.pods and not live and workload.admission is None:
            info.state = State.FINISHED
            return
        if workload.admission is not None and workload.admission.cluster_queue in self.config.cluster_queues:
            self._admit_preadmitted(info, now)
            return
        if not workload.active:
            self._deactivated = True
            info.state = State.DEACTIVATED
            info.message = "The workload is inactive (spec.active: false); set it to true to queue it"
            info.pending = PendingReason.OTHER
            return
        if bound:
            self._admit_bound(info, now)
            return
        if info.problem is not None:
            info.message = info.problem
            state.unqueued[info.key] = info
        elif info.no_quota:
            state.no_quota[info.key] = info
        else:
            state.queues.add(info, now)  # a new WorkloadInfo has no requeue backoff to note

    def finish(self, workload: str, now: float) -> None:
        info = self.state.infos.get(workload)
        if info is None:
            return
        if self.cluster is not None:
            for pod in info.workload.pods:  # its pods are gone: what was observed of them goes too
                self.cluster.forget_memory(pod.key)
        if info.state is ADMITTED:
            # An admitted workload is in no queue and no pending table (it was popped as a head, or admitted on
            # submit, and admission took it out of backoff and placement_parked), so releasing it is all there is
            # to do (tests/kueue/test_properties.py checks this after every step).
            self.state.release(info, now)
        else:
            self._forget(info)
        info.state = FINISHED

    def evicted(self, workload: str, now: float, *, requeue: bool = True, reason: str = "Preempted") -> None:
        state = self.state
        info = state.infos.get(workload)
        if info is None or info.state is not State.ADMITTED:
            return
        cq = info.admission.cluster_queue if info.admission else None
        state.release(info, now)
        if not requeue:
            info.state = State.FINISHED
            return
        info.state = State.PENDING
        if reason == PODS_READY_TIMEOUT:
            policy = self.config.pods_ready_for(cq)
            if policy.backoff_limit_count is not None and info.requeue_count + 1 > policy.backoff_limit_count:
                self._deactivated = True
                info.state = State.DEACTIVATED
                info.message = DEACTIVATED_MESSAGE
                info.pending = PendingReason.OTHER
                return
            info.requeue_count += 1
            delay = min(policy.backoff_base_s * 2 ** (info.requeue_count - 1), policy.backoff_max_s)
            info.requeue_at = now + delay
            if policy.requeue_timestamp == "Eviction":
                info.queue_ts = now
        if info.no_quota or cq is None:
            state.no_quota[info.key] = info
            self._note_backoff(info, now)  # (its backoff's end wakes the driver: next_wakeup)
            return
        state.queues.add(info, now)
        self._note_backoff(info, now)

    def terminating(self, workload: str, reason: str = TERMINATING) -> bool:
        """An admitted workload is on its way out (its pods are being deleted: a preemption's eviction the driver
        issued, or its owner deleted): it keeps its quota and nodes until :meth:`finish`, is never chosen as a
        victim again, and preemption searches count it as going (Kueue's evicted-but-not-yet-gone workloads).
        Whether it was not known so already."""
        info = self.state.infos.get(workload)
        if info is None or info.state is not State.ADMITTED or info.evicting is not None:
            return False
        self.state.begin_eviction(info, reason)
        return True

    def requeued(self, workload: str, count: int, requeue_at: float | None, evicted_at: float, now: float, *,
                 deactivated: bool = False) -> None:
        """A workload evicted for ``PodsReadyTimeout`` before this policy was built, as a driver that rebuilds its
        policy (the live scheduler's full cycle) remembers it, the way Kueue keeps ``status.requeueState``: its
        requeue count, its place in its queue (the eviction's time under ``requeuingStrategy.timestamp:
        Eviction``), its backoff until ``requeue_at``; ``deactivated`` past the backoff limit. What :meth:`evicted`
        does to a workload of a policy that lives on. Only a workload pending here is touched; call it before
        anything parks the workload (a parked memory), which then finds it where it belongs."""
        state = self.state
        info = state.infos.get(workload)
        if info is None or info.state is not State.PENDING:
            return
        info.requeue_count = count
        if deactivated:
            self._forget(info)
            self._deactivated = True
            info.state = State.DEACTIVATED
            info.message = DEACTIVATED_MESSAGE
            info.pending = PendingReason.OTHER
            return
        backing_off = requeue_at is not None and requeue_at > now
        queued = not info.no_quota and info.cluster_queue is not None and info.key not in state.unqueued
        if queued:
            q = state.queues.queues.get(info.cluster_queue or "")
            if q is not None and info.key in q.parked and not backing_off:
                return  # parked already, for what it waits on now: it stays so
            state.queues.remove(info)
        info.requeue_at = requeue_at if backing_off else None
        if self.config.pods_ready_for(info.cluster_queue).requeue_timestamp == "Eviction":
            info.queue_ts = evicted_at
        if queued:
            state.queues.add(info, now)
        self._note_backoff(info, now)

    def pods_not_ready(self, workload: str, deadline: float | None = None) -> None:
        """The admitted workload's pods are not all ready, as the driver sees them (a rebuilt policy admits what holds
        nodes as ready): it waits for them in the core, so that a ClusterQueue with blockAdmission admits nothing
        meanwhile, as Kueue's blockAdmission holds every admission behind workloads not PodsReady yet, and is
        evicted with ``PodsReadyTimeout`` once ``deadline`` has passed (the core's own rule, as for what it
        admits; None: no deadline yet, its pods still being bound). ``pods_ready`` ends the wait."""
        info = self.state.infos.get(workload)
        if info is None or info.state is not State.ADMITTED or info.admission is None:
            return
        cq = info.admission.cluster_queue
        if not self.config.pods_ready_for(cq).enable:
            return
        info.ready = False
        info.ready_deadline = deadline
        # (a workload without a queue holds no admission back: it only times out)
        (self.state.waiting_ready if cq is not None else self.state.free_waiting)[info.key] = info

    def blocks_admission(self) -> bool:
        """Whether some ClusterQueue's waitForPodsReady holds admissions behind workloads not ready yet (the cycle's
        own test reads ``block_admission`` alone)."""
        return self.state.block_admission  # (the queues are fixed for the policy's life: worked out once)

    def pods_ready(self, workload: str, now: float) -> None:
        """Every pod of the admitted workload is ready (the driver saw PodsReady): its waitForPodsReady
        timeout no longer applies, and admission blocked on it (blockAdmission) may proceed."""
        info = self.state.infos.get(workload)
        if info is None or info.state is not State.ADMITTED:
            return
        info.ready = True
        info.ready_deadline = None
        self.state.waiting_ready.pop(info.key, None)
        self.state.free_waiting.pop(info.key, None)

    def join(self, workload: str, pods: Sequence[str], now: float) -> Joining | None:
        """Place ``pods``, created after the admitted ``workload`` was admitted, next to its pods with its flavors,
        before any new admission (:func:`~gpufleet.scheduling.kueue.late_members.join`): where they went, or why they
        wait; None when the workload is not admitted or the policy places no pods."""
        info = self.state.infos.get(workload)
        return join(self.state, info, pods) if info is not None else None

    def leave(self, workload: str, pod: str, now: float) -> bool:
        """One pod of the admitted ``workload`` is gone and the workload runs on: its node capacity is free, its
        quota stays charged (:func:`~gpufleet.scheduling.kueue.late_members.leave`)."""
        info = self.state.infos.get(workload)
        return info is not None and leave(self.state, info, pod, now)

    def shield(self, workloads: Collection[str]) -> None:
        """Take ``workloads`` out of the preemption candidates while they keep their nodes and quota (a
        PodDisruptionBudget refused their eviction: :mod:`~gpufleet.scheduling.kueue.shields`)."""
        shield(self.state, workloads)

    def cycle(self, now: float) -> Decisions:
        decisions = Cycle(self.state, now).run()
        infos = self.state.infos
        for a in decisions.admitted:
            if self.memory is not None:
                a.notes.extend(r.text() for r in self.memory.resizes(a.workload))
            info = infos.get(a.workload)
            if info is not None and RESIZED_ANNOTATION in info.workload.annotations:  # (read resized: intake)
                a.notes.append(f"its pods ask the MIG profiles its {info.workload.kind} names after an out-of-memory "
                               f"({RESIZED_ANNOTATION}: {info.workload.annotations[RESIZED_ANNOTATION]})")
        return decisions

    # ---- MemoryFeedback ------------------------------------------------------------------------------------------
    def observe_memory(self, workload: str, pod: str, mib: int, now: float) -> None:
        info = self.state.infos.get(workload)
        if self.memory is not None and info is not None:
            self.memory.observed(info.workload, pod, mib)

    def oom_killed(self, workload: str, pod: str, now: float) -> None:
        """One of the workload's pods was OOM-killed where it is placed: on a time-sliced GPU, keep the workload
        off that GPU and expect more memory of it; on a MIG instance, offer it the next larger profile its
        ClusterQueue covers."""
        cluster = self.cluster
        if cluster is not None and pod in cluster.placements:
            placement = cluster.placements[pod]
            self.oom_at(workload, pod, placement.node, placement.grants)

    def oom_at(self, workload: str, pod: str, node_name: str, grants: Sequence[DeviceGrant]) -> OomLesson | None:
        """:meth:`oom_killed` for a pod that held ``grants`` on ``node_name`` (live, a pod whose failure is read
        after its devices were released: the devices its Binding recorded); what it taught, None when nothing
        (no such workload or node, no GPU memory to learn about)."""
        info = self.state.infos.get(workload)
        cluster = self.cluster
        if self.memory is None or info is None or cluster is None or node_name not in cluster.nodes:
            return None
        node = cluster.nodes[node_name]
        shared: dict[str, int] = {}  # time-sliced GPU -> what was free there beside its co-tenants' known memory
        for g in grants:
            if g.gpu >= len(node.gpus):
                continue
            gpu = node.gpus[g.gpu]
            if g.kind == "replica":
                # What was free beside its co-tenants, when each one's memory is known; else nothing is (0): the
                # GPU is avoided, and no memory is expected of the workload for it.
                others = {h for h in gpu.replica_holders if h is not None and h != pod}  # (a pod per slot it holds)
                known = all(h in gpu.replica_memory for h in others)
                shared[gpu_key(node.name, gpu.index)] = gpu.memory_mib - sum(
                    gpu.replica_memory[h] for h in others) if known else 0
            elif g.kind == "mig" and g.slot < len(gpu.mig):
                old = gpu.mig[g.slot].resource
                cq = self.config.cluster_queues.get(info.cluster_queue or "")
                covered = set(cq.group_of) if cq is not None else set()
                new = next_larger_profile(old, gpu.model, covered)
                resize = Resize(old, new) if new is not None else None
                offered = resize is not None and cq is not None and cq.mig_resize_on_oom
                self.memory.oom_on_mig(info.workload, resize if offered and self.mig_resize else None)
                return OomLesson(workload, mig=resize, mig_from=old, offered=offered)
        if not shared:
            return None
        # Which of its GPUs ran out is not reported: the least free one bounds what it needed from below.
        floor = max(0, min(shared.values()))
        self.memory.oom_on_shared(info.workload, list(shared), floor)
        return OomLesson(workload, gpus=tuple(sorted(shared)), needs_more_than=floor)

    def settled(self) -> bool:
        """Whether the next cycle would change nothing (see :meth:`SchedulerState.settled`): where ``gpufleet plan
        --until-stable`` stops."""
        return self.state.settled()

    def pending_count(self) -> int:
        s = self.state
        return s.queues.pending_count() + len(s.no_quota) + len(s.unqueued)

    def next_wakeup(self, now: float) -> float | None:
        times = [i.ready_deadline for i in [*self.state.waiting_ready.values(), *self.state.free_waiting.values()]
                 if i.ready_deadline is not None and i.evicting is None]
        times += [i.requeue_at for i in self.state.backoff.values() if i.requeue_at is not None]
        return min(times) if times else None

    # ---- reports ---------------------------------------------------------------------------------------------
    def usage(self) -> dict[str, dict[str, dict[str, int]]]:
        """Admitted usage per ClusterQueue, flavor and resource (every declared flavor-resource), in quota units
        (``gpufleet.scheduling.charges.format_quota`` writes them)."""
        out: dict[str, dict[str, dict[str, int]]] = {}
        tree = self.state.tree
        for name, cq in self.config.cluster_queues.items():
            per: dict[str, dict[str, int]] = {}
            for flavor, resource in cq.quotas:
                per.setdefault(flavor, {})[resource] = tree.usage(name, (flavor, resource))
            out[name] = per
        return out

    def pending_report(self) -> list[PendingWorkload]:
        """Every pending workload with why it waits, in queue order."""
        out: list[PendingWorkload] = []
        for q in self.state.queues.queues.values():
            for pos, info in enumerate(q.ordered()):
                reason = info.message or (f"Waiting in ClusterQueue {q.name} behind {pos} workload(s)" if pos
                                          else f"Next in ClusterQueue {q.name}, not evaluated yet")
                out.append(PendingWorkload(info.key, reason))
        for info in self.state.no_quota.values():
            out.append(PendingWorkload(info.key, info.message or "Waiting for nodes (no queue, no quota)"))
        for info in self.state.unqueued.values():
            out.append(PendingWorkload(info.key, info.message))
        for info in self.state.infos.values() if self._deactivated else ():
            if info.state is State.DEACTIVATED:
                out.append(PendingWorkload(info.key, info.message))
        return out

    def info(self, workload: str) -> WorkloadInfo | None:
        return self.state.infos.get(workload)

    # ---- internals -------------------------------------------------------------------------------------------
    def _route(self, info: WorkloadInfo) -> None:
        """LocalQueue → ClusterQueue; no queue label and no ``default`` LocalQueue → no quota at all."""
        wl, lqs = info.workload, self.config.local_queues
        if wl.hold is not None:
            info.problem = wl.hold  # Kueue would not admit it as it stands (admission checks, suspension...)
        elif wl.expected_pods is not None and not wl.complete:  # most workloads declare no pod count
            if wl.kind == "PodGroup":
                info.problem = (f"pod group has {len(wl.pods)} of {wl.expected_pods} pods; Kueue waits for all of "
                                "them before creating the Workload")
            else:  # a gang kind's pods, as its controller creates them (the live scheduler)
                info.problem = (f"{wl.kind} {wl.key} has {len(wl.pods)} of its {wl.expected_pods} pods; its pods "
                                "are placed together once its controller has created all of them")
        name = wl.queue
        if name is None and (wl.namespace, DEFAULT_LOCAL_QUEUE) in lqs:
            name = DEFAULT_LOCAL_QUEUE
        if name is None:
            info.no_quota = True
            return
        info.local_queue = name
        cq = lqs.get((wl.namespace, name))
        if cq is None:
            info.problem = info.problem or f"LocalQueue {name} doesn't exist"
        elif cq not in self.config.cluster_queues:
            info.problem = info.problem or f"ClusterQueue {cq} doesn't exist"
        else:
            info.cluster_queue = cq

    def _note_backoff(self, info: WorkloadInfo, now: float) -> None:
        if info.requeue_at is not None and info.requeue_at > now:
            self.state.backoff[info.key] = info

    def _forget(self, info: WorkloadInfo) -> None:
        """Take a workload that is not admitted out of every queue and pending table (admitted ones are released:
        ``finish``; ``submit`` keeps them)."""
        s = self.state
        assert info.state is not State.ADMITTED, f"{info.key}: an admitted workload is released, not forgotten"
        s.queues.remove(info)
        if info.cluster_queue is not None and s.reservations.get(info.cluster_queue) == info.key:
            del s.reservations[info.cluster_queue]  # it left its queue: its reservation is over
        for table in (s.no_quota, s.unqueued, s.placement_parked, s.backoff, s.waiting_ready, s.free_waiting):
            table.pop(info.key, None)

    def _admit_preadmitted(self, info: WorkloadInfo, now: float) -> None:
        adm = info.workload.admission
        assert adm is not None
        cq = adm.cluster_queue
        info.cluster_queue = cq
        info.problem = None
        usage: dict[FR, int] = {}
        podsets: list[PodSetAdmission] = []
        by_name = {ps.name: ps for ps in info.podsets}
        for psa in adm.pod_set_assignments:
            ps = by_name.get(psa.name)
            count = psa.count or (ps.count if ps else 0)
            covered = self.config.cluster_queues[cq].group_of
            amounts = quota_amounts(psa.resource_usage) or (charge(ps.total(count), covered) if ps else {})
            for r, v in amounts.items():
                flavor = psa.flavors.get(r)
                if flavor is not None and v > 0:
                    usage[(flavor, r)] = usage.get((flavor, r), 0) + v
            podsets.append(PodSetAdmission(psa.name, count, dict(psa.flavors)))
        # Kueue orders preemption candidates by when their quota was reserved; a status that does not say counts
        # as reserved now, after every recorded reservation.
        reserved_at = adm.quota_reserved_at if adm.quota_reserved_at is not None else math.inf
        pods, _ = self._bound_pods(info)  # its pods already running (a snapshot) hold their nodes and devices
        self.state.commit_admission(info, cq, AdmissionShape.of(podsets, usage), pods, now,
                                    admitted_at=reserved_at, ready=True)
        self.state.begin_eviction(info, adm.evicted)  # an eviction under way keeps the quota until the pods are gone

    def _bound_pods(self, info: WorkloadInfo) -> tuple[list[PodAssignment], dict[str, dict[str, str]]]:
        """The workload's pods already on nodes, charged there (their recorded devices when they have them), and
        the labels of a node of each pod set."""
        state = self.state
        pods: list[PodAssignment] = []
        node_labels: dict[str, dict[str, str]] = {}
        for p in info.workload.pods:
            if not p.node_name or p.phase in _TERMINAL:
                continue
            placement = state.gangs.bind(p, p.node_name) if state.gangs is not None else None
            devices = placement.device_ids if placement is not None else ()
            pods.append(PodAssignment(p.key, p.node_name, devices))
            if state.cluster is not None and p.node_name in state.cluster.nodes:
                node_labels.setdefault(p.pod_set, state.cluster.nodes[p.node_name].labels)
        return pods, node_labels

    def _admit_bound(self, info: WorkloadInfo, now: float) -> None:
        """Pods already on nodes: they hold node capacity, and their quota (flavors inferred from the node)."""
        state = self.state
        pods, node_labels = self._bound_pods(info)
        cq_name = info.cluster_queue if info.problem is None else None
        usage: dict[FR, int] = {}
        podsets: list[PodSetAdmission] = []
        cq = self.config.cluster_queues.get(cq_name) if cq_name else None
        for ps in info.podsets:
            flavors: dict[str, str] = {}
            if cq is not None:
                requests = charge(ps.total(), cq.group_of)
                if cq.covers_pods:
                    requests["pods"] = ps.count
                labels = node_labels.get(ps.name, {})
                for r, v in requests.items():
                    group = cq.group_of.get(r)
                    if group is None:
                        continue
                    flavor = self._flavor_on_node(group.flavors, group.label_keys, ps, labels)
                    flavors[r] = flavor
                    usage[(flavor, r)] = usage.get((flavor, r), 0) + v
            podsets.append(PodSetAdmission(ps.name, ps.count, flavors))
        info.no_quota = cq is None
        state.commit_admission(info, cq_name if cq is not None else None, AdmissionShape.of(podsets, usage), pods,
                               now, ready=True, admitted_at=info.workload.created if info.workload.bound_at is None
                               else info.workload.bound_at)

    def _flavor_on_node(self, flavors: tuple[str, ...], keys: frozenset[str], ps: Any,
                        labels: dict[str, str]) -> str:
        """The flavor a running pod set most plausibly got: the first whose node labels the node carries."""
        for name in flavors:
            f = self.config.flavors.get(name)
            if f is not None and all(labels.get(k) == v for k, v in f.node_labels.items()) and matches_affinity(
                    ps.template, f, keys):
                return name
        return flavors[0]


def _cohort_objects_in_place(old: QueueConfig, new: QueueConfig) -> bool:
    """Whether the Cohort objects of ``new`` can be taken by the quota tree of ``old`` in place: each keeps its
    parent, and one created or deleted names a cohort of no parent that ClusterQueues or other cohorts make
    before and after (a cohort turned explicit to give it quota, or back): the tree's shape stays. A cohort that
    comes or goes with its object, or one whose parent is set, changes the trees: a new policy is made."""
    def in_use(config: QueueConfig, name: str) -> bool:
        return (any(cq.cohort == name for cq in config.cluster_queues.values())
                or any(parent == name for parent in config.cohort_parents.values()))

    for name in {*old.cohort_parents, *new.cohort_parents}:
        if name in old.cohort_parents and name in new.cohort_parents:
            if old.cohort_parents[name] != new.cohort_parents[name]:
                return False
        elif (old.cohort_parents.get(name) or new.cohort_parents.get(name)) is not None \
                or not (in_use(old, name) and in_use(new, name)):
            return False
    return True
