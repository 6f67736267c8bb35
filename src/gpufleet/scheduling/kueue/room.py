"""Room on nodes for a preemptor: evictions that make both quota and placement fit (DESIGN.md, the cycle's step 5).

A target search (:mod:`~gpufleet.scheduling.kueue.preemption`) answers for quota alone. With nodes known, Kueue's
preemption asks more (``workloadFits`` with topology-aware scheduling): the preemptor must also find nodes once its
targets are gone, else the evictions free nothing it can use. Issued anyway, such a preemption lets the victims be
admitted again in the same instant while the preemptor still waits, and the next cycle evicts them again, without
end. So before a cycle issues a preemption, :func:`make_room` checks placement with the targets gone and, when it
does not fit:

1. takes more victims, in Kueue's candidate order, among the placed workloads the preemptor's rules allow it to
   evict (:func:`room_candidates`), until its pods can be placed (the gang placer's victim search);
2. gives back, last first, every quota target the placement victims made unnecessary: one whose return still leaves
   the preemptor fitting in quota (borrowing no more than with the targets alone) and on nodes;
3. finds no room when even every allowed candidate is not enough: then nothing is evicted, and the preemptor waits
   for nodes (Kueue: no preemption candidates).

The same search serves a preemptor that fits in quota but not on nodes (no quota targets).

Workloads already chosen as targets this cycle count as gone for quota, as in the cycle's own fit check, but their
nodes stay theirs: the room they leave is their own preemptor's.

Two more things keep a preemption from freeing nothing its preemptor uses:

* the room is held (:class:`HeldRooms`): what the preemptor's pods would take beyond what their targets free is
  taken by placeholder pods for the rest of the cycle and again in the next one until the preemptor is processed,
  so that nothing processed in between, its victims coming back included, is placed there; in the next cycle
  workloads of higher priority, its victims excepted, ignore it (Kueue adds a preemptor's topology usage to the
  cycle's snapshot; kube-scheduler keeps a preemptor's nominated node for it against pods of lower or equal
  priority);
* the cycle makes the preemptor's next flavor search start at the flavors it made room in
  (``FlavorAssigner.resume_at``), and keeps it there when the preemptor, processed with its room held, is skipped
  (no longer fits, overlapping targets): Kueue starts over after a preemption and after a skip, but its flavor
  search knows nodes, and ours knows quota only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpufleet.api.kinds import FRACTION_RESOURCE
from gpufleet.cluster.devices import DeviceGrant, InvariantError
from gpufleet.cluster.state import ClusterState, Placement
from gpufleet.gpu.constants import DEFAULT_MAX_PODS, MILLI, PODS
from gpufleet.scheduling.kueue.config import CQSpec
from gpufleet.scheduling.kueue.gangs import Group
from gpufleet.scheduling.kueue.info import WorkloadInfo
from gpufleet.scheduling.kueue.preemption_order import (
    IN_CLUSTER_QUEUE,
    IN_COHORT_RECLAIM_WHILE_BORROWING,
    IN_COHORT_RECLAMATION,
    Target,
    Variant,
    candidate_order,
    priority_allows,
    reclaim_variant,
)
from gpufleet.scheduling.kueue.state import SchedulerState
from gpufleet.scheduling.quota import FR


@dataclass(frozen=True, slots=True)
class Room:
    """What :func:`make_room` found: the targets to evict (the quota targets first), or ``targets`` None with the
    reason the preemptor's pods find no nodes even then."""

    targets: list[Target] | None
    why: str = ""
    # Where the preemptor's pods would go with the targets gone, and the targets' placements that frees: what the
    # cycle holds for it (:func:`hold_room`). Empty when nothing needs holding (no placer, or no room).
    plan: Sequence[Placement] = ()
    freed: Sequence[Placement] = ()


class _Gone:
    """Workloads taken out of the quota tree and off their nodes, inside the caller's checkpoints."""

    def __init__(self, state: SchedulerState, cluster: ClusterState) -> None:
        self.state = state
        self.cluster = cluster
        self.pods: dict[str, list[Placement]] = {}

    def remove(self, info: WorkloadInfo) -> None:
        assert info.cluster_queue is not None
        self.state.tree.remove_usage(info.cluster_queue, info.usage)
        released = []
        for p in info.admission.pods if info.admission else []:
            if p.pod in self.cluster.placements:
                released.append(self.cluster.release(p.pod))
        self.pods[info.key] = released

    def placements(self) -> list[Placement]:
        return [p for released in self.pods.values() for p in released]

    def restore(self, info: WorkloadInfo) -> None:
        assert info.cluster_queue is not None
        self.state.tree.add_usage(info.cluster_queue, info.usage)
        for p in self.pods.pop(info.key, []):
            self.cluster.allocate(p.pod, p.node, p.requests, p.grants)


def room_candidates(state: SchedulerState, info: WorkloadInfo, cq: CQSpec, borrows: bool,
                    exclude: Iterable[str] = ()) -> list[Target]:
    """Admitted, placed workloads the preemptor's rules let it evict to make room on nodes, in Kueue's candidate
    order, each with its preemption reason: lower priority ones of its own ClusterQueue (withinClusterQueue), and
    those of its cohort tree's ClusterQueues that borrow what they use (reclaimWithinCohort); while the preemptor
    itself borrows, only those borrowWithinCohort lets it take (lower priority, within the threshold), as for quota
    targets, so that a victim never comes back ahead of it. Read against the quota tree as it stands."""
    p = cq.preemption
    if p.within_cluster_queue == "Never" and p.reclaim_within_cohort == "Never":
        return []  # no rule lets it evict anything: no need to walk every admitted workload to find that out
    skip = set(exclude)
    root = state.queues.tree_of.get(cq.name)
    tree = state.tree
    out: list[tuple[WorkloadInfo, str]] = []
    for cand in state.admitted_infos():
        if cand.key in skip or not cand.admission or not any(x.node for x in cand.admission.pods):
            continue
        other = cand.cluster_queue
        if other == cq.name:
            if priority_allows(p.within_cluster_queue, info, cand):
                out.append((cand, IN_CLUSTER_QUEUE))
            continue
        if other is None or other == root or state.queues.tree_of.get(other) != root:
            continue
        if not priority_allows(p.reclaim_within_cohort, info, cand):
            continue
        if not any(tree.is_borrowing(other, fr) for fr in cand.usage):
            continue
        reason = IN_COHORT_RECLAMATION
        if borrows and not state.config.fair_sharing:
            variant = reclaim_variant(p, info.priority, cand.priority, False)
            if variant is not Variant.RECLAIM_WHILE_BORROWING:
                continue
            reason = IN_COHORT_RECLAIM_WHILE_BORROWING
        out.append((cand, reason))
    out.sort(key=lambda c: candidate_order(c[0], cq.name))
    return [Target(c, reason) for c, reason in out]


def make_room(state: SchedulerState, info: WorkloadInfo, cq: CQSpec, usage: Mapping[FR, int],
              groups: Sequence[Group], targets: Sequence[Target], held: Iterable[WorkloadInfo],
              unfit: str | None = None) -> Room:
    """The evictions that let ``info`` (charged ``usage`` in ``cq``, its pods in ``groups``) fit in quota and on
    nodes: ``targets`` (its quota targets) with the placement victims they need, fewer if those make some
    unnecessary; ``held``: this cycle's earlier targets (module doc); ``unfit``: why the pods do not fit, when the
    caller has just found that they do not even with the targets gone. Quota tree and cluster are left unchanged."""
    gangs = state.placer
    if gangs is None:
        return Room(list(targets))
    cluster, tree, preemptor = gangs.cluster, state.tree, state.preemptor
    tree_mark = tree.checkpoint()
    cluster_mark = cluster.checkpoint()
    try:
        for victim in held:
            assert victim.cluster_queue is not None
            tree.remove_usage(victim.cluster_queue, victim.usage)
        gone = _Gone(state, cluster)
        for t in targets:
            gone.remove(t.info)
        why = unfit
        if why is None:
            plan, failed = gangs.plan(groups)
            if plan is not None:
                return Room(list(targets), plan=plan, freed=gone.placements())
            assert failed is not None
            why = gangs.explain(failed, sum(len(g[1]) for g in groups))
        # Borrowing no more than the quota targets let it: the reclaim rules they were chosen under stay valid.
        borrows = not preemptor.fits(cq.name, usage, False)
        skip = {t.info.key for t in targets} | {v.key for v in held}
        candidates = room_candidates(state, info, cq, borrows, skip)
        if not candidates:
            return Room(None, why)  # nothing it may evict: the victim search could only fail
        found = gangs.victims(groups, [c.info for c in candidates])
        if not found:
            return Room(None, why)
        chosen = {v.key for v in found}
        extra = [c for c in candidates if c.info.key in chosen]
        for c in extra:
            gone.remove(c.info)
        kept = list(targets)
        for t in reversed(targets):
            gone.restore(t.info)
            if preemptor.fits(cq.name, usage, borrows) and gangs.fits(groups) is None:
                kept.remove(t)
            else:
                gone.remove(t.info)
        plan, failed = gangs.plan(groups)
        if plan is None:
            # The victim search placed the pods with these workloads gone: a placer that answers otherwise now is
            # inconsistent, and evicting on its word could free nothing (the livelock this module prevents).
            assert failed is not None
            return Room(None, gangs.explain(failed, sum(len(g[1]) for g in groups)))
        return Room(kept + extra, plan=plan, freed=gone.placements())
    finally:
        cluster.rollback(cluster_mark)
        tree.rollback(tree_mark)


# ---- holding the room ---------------------------------------------------------------------------------------

HOLD_PREFIX = "gpufleet.io/room-held-for:"


@dataclass(frozen=True, slots=True)
class Nomination:
    """Room a preemption made, kept for the next cycle (kube-scheduler's nominated node): its preemptor, whose
    priority decides who may ignore it, the room, and its victims, which never may."""

    preemptor: str
    priority: int
    room: Room
    victims: frozenset[str]


class HeldRooms:
    """The rooms held in a cluster during one cycle, each by placeholder pods (:func:`hold_room`).

    A room is held from the preemption that makes it until its preemptor is processed in the next cycle, so that
    nothing processed in between, its own victims coming back included, is placed in it; in that next cycle,
    workloads of higher priority than its preemptor, other than its victims, ignore it, as kube-scheduler's
    nominated pods bind only those of lower or equal priority. A room something else took meanwhile (a pod placed
    outside the cycle, a workload of higher priority) is dropped: its preemptor decides afresh when processed."""

    def __init__(self, cluster: ClusterState) -> None:
        self.cluster = cluster
        self.nominations: dict[str, Nomination] = {}
        self.issued: list[Nomination] = []  # this cycle's, kept for the next (:meth:`carried`)
        self._placeholders: dict[str, list[str]] = {}

    def hold(self, nomination: Nomination) -> None:
        """Hold a room again: all of it that is still free, or nothing and forget it when part is taken."""
        cluster = self.cluster
        mark = cluster.checkpoint()
        try:
            placeholders = hold_room(cluster, nomination.preemptor, nomination.room)
        except InvariantError:
            cluster.rollback(mark)
            self.nominations.pop(nomination.preemptor, None)
            return
        cluster.commit(mark)
        self.nominations[nomination.preemptor] = nomination
        self._placeholders[nomination.preemptor] = placeholders

    def issue(self, nomination: Nomination) -> None:
        """A preemption made this room this cycle: held now (it was just found free: failing to hold it is a
        defect, raised) and through the next cycle."""
        self.drop(nomination.preemptor)
        self._placeholders[nomination.preemptor] = hold_room(self.cluster, nomination.preemptor, nomination.room)
        self.nominations[nomination.preemptor] = nomination
        self.issued.append(nomination)

    def drop(self, preemptor: str) -> None:
        self._release(preemptor)
        self.nominations.pop(preemptor, None)

    def below(self, workload: str, priority: int) -> list[Nomination]:
        """Let go, until :meth:`restore`, of the rooms earlier cycles made for preemptors of lower priority than
        ``priority`` (that of ``workload``, about to be processed), unless ``workload`` was evicted to make them:
        a victim let back into its room would make its eviction for nothing. A room made in this cycle binds
        everything processed after its preemptor, as the cycle's order had it first (Kueue counts a preemptor's
        topology usage in the cycle's snapshot)."""
        issued = {n.preemptor for n in self.issued}
        out = [n for n in self.nominations.values()
               if n.priority < priority and n.preemptor not in issued and workload not in n.victims]
        for n in out:
            self._release(n.preemptor)
        return out

    def restore(self, nominations: list[Nomination]) -> None:
        for n in nominations:
            if self.nominations.get(n.preemptor) is n:
                self.hold(n)

    def release_all(self) -> None:
        for preemptor in list(self._placeholders):
            self._release(preemptor)

    def carried(self) -> dict[str, Nomination]:
        """What the next cycle holds: the rooms issued in this one and still held."""
        return {n.preemptor: n for n in self.issued if self.nominations.get(n.preemptor) is n}

    def _release(self, preemptor: str) -> None:
        release_holds(self.cluster, self._placeholders.pop(preemptor, []))


def hold_room(cluster: ClusterState, preemptor: str, room: Room) -> list[str]:
    """Take with placeholder pods what ``room`` plans for ``preemptor``'s pods beyond what their targets' pods,
    still on their nodes until their eviction completes, give back. Without it, another workload could be placed in
    capacity the preemptor counted on, and the evictions free nothing the preemptor can use. Kueue does the same
    with topology-aware scheduling: a preemptor's topology usage is added to the cycle's snapshot.

    One placeholder per node, named ``HOLD_PREFIX + preemptor + "@" + node``, released by :func:`release_holds`.
    A node without a free pod slot gets none: no other pod can be placed there either. :class:`InvariantError`
    when part of the room is taken (the placeholders allocated before are the caller's to roll back)."""
    freed = [p for p in room.freed if (now := cluster.placements.get(p.pod)) is not None and now.node == p.node]
    placeholders: list[str] = []
    for node, (requests, grants) in _unfreed(cluster, room.plan, freed).items():
        ns = cluster.nodes.get(node)
        if ns is None:
            raise InvariantError(f"node {node} of the room held for {preemptor} is gone")
        if (not requests and not grants) or ns.used.get(PODS, 0) + 1 > ns.allocatable.get(PODS, DEFAULT_MAX_PODS):
            continue
        key = f"{HOLD_PREFIX}{preemptor}@{node}"
        cluster.allocate(key, node, requests, grants)
        placeholders.append(key)
    return placeholders


def release_holds(cluster: ClusterState, placeholders: Iterable[str]) -> None:
    for key in placeholders:
        cluster.release(key)


def _unfreed(cluster: ClusterState, plan: Sequence[Placement],
             freed: Sequence[Placement]) -> dict[str, tuple[dict[str, int], list[DeviceGrant]]]:
    """Per node, what ``plan`` takes that ``freed`` does not give back: resources (less what the freed pods charge
    there) and device grants (a whole GPU, replica or MIG instance no freed pod holds; of a GPU shared in fractions,
    the thousandths and memory beyond the freed pods' fractions; nothing of a dynamic MIG GPU freed pods hold part
    of)."""
    out: dict[str, tuple[dict[str, int], list[DeviceGrant]]] = {}
    for node in dict.fromkeys(p.node for p in plan):
        requests: dict[str, int] = {}
        for p in plan:
            if p.node == node:
                for r, v in p.requests.items():
                    requests[r] = requests.get(r, 0) + v
        whole: set[int] = set()
        units: set[tuple[str, int, int]] = set()
        fractions: dict[int, tuple[int, int]] = {}
        carved: set[int] = set()  # dynamic MIG GPUs the freed pods hold some of (whole or carved)
        gpus = cluster.nodes[node].gpus if node in cluster.nodes else []
        for p in freed:
            if p.node != node:
                continue
            for r, v in p.requests.items():
                requests[r] = requests.get(r, 0) - v
            for g in p.grants:
                if g.kind in ("whole", "partition") and g.gpu < len(gpus) and gpus[g.gpu].partitions:
                    carved.add(g.gpu)
                if g.kind == "whole":
                    whole.add(g.gpu)
                elif g.kind == "fraction":
                    m, mem = fractions.get(g.gpu, (0, 0))
                    fractions[g.gpu] = (m + g.milli, mem + g.memory_mib)
                else:
                    units.add((g.kind, g.gpu, g.slot))
        grants: list[DeviceGrant] = []
        wanted: dict[int, tuple[int, int]] = {}  # per GPU: thousandths and memory the plan takes in fractions
        for p in plan:
            if p.node != node:
                continue
            for g in p.grants:
                if g.gpu in carved and g.kind in ("whole", "partition"):
                    # The whole GPU and its carved devices are one piece of hardware: what the freed pods give
                    # back there is what the plan counted on (the counters, not device by device).
                    continue
                if g.kind == "whole":
                    if g.gpu in fractions:  # freed fractions: hold what they leave of the GPU
                        wanted[g.gpu] = (MILLI, cluster.nodes[node].gpus[g.gpu].memory_mib)
                    elif g.gpu not in whole:
                        grants.append(g)
                elif g.kind == "fraction":
                    if g.gpu not in whole:
                        m, mem = wanted.get(g.gpu, (0, 0))
                        wanted[g.gpu] = (m + g.milli, mem + g.memory_mib)
                elif (g.kind, g.gpu, g.slot) not in units:
                    grants.append(g)
        out[node] = ({r: v for r, v in requests.items() if v > 0 and r not in (PODS, FRACTION_RESOURCE)},
                     grants)
        for gpu, (milli, memory) in wanted.items():
            freed_milli, freed_memory = fractions.get(gpu, (0, 0))
            if milli > freed_milli:
                grants.append(DeviceGrant("fraction", gpu, milli=milli - freed_milli,
                                          memory_mib=max(0, memory - freed_memory)))
    return out
