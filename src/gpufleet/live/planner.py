"""Runs the scheduling core on one cycle's :class:`~gpufleet.live.world.World`: the same KueuePolicy the
simulator runs, fed from the live cluster.

A fresh policy is built from the world every time, every workload submitted (bound ones become admitted
with their quota), then policy cycles run back to back, as the simulator runs them at one instant, until a
cycle admits nothing (or a cycle or time budget is spent): Kueue admits one head per ClusterQueue per
cycle, so one cycle per rebuild would be a needless bottleneck.

Workloads whose eviction a PodDisruptionBudget refused are *shielded*: they keep their nodes and quota but
are no candidates for preemption, so the next cycle chooses other victims.

Kueue parks a BestEffortFIFO head that does not fit, so the next head gets its turn, and wakes parked
workloads only when capacity or quota is released. A policy rebuilt every cycle would forget that and
re-evaluate the same unfit heads first each time (a backlog deeper than a cycle budget would starve the
workloads behind it), so :class:`ParkedMemory` carries the parked set from one cycle to the next for as long
as nothing was released: no pod that held capacity is gone, and nodes and queue objects are unchanged (the
workload kinds' objects, parsed with the queues, may change: a Job's status releases nothing).
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass, field

from gpufleet.api.objects import PodsReadyPolicy
from gpufleet.live.world import World
from gpufleet.scheduling.kueue import KueuePolicy, engine_placer_factory
from gpufleet.scheduling.kueue.pending import PendingReason
from gpufleet.scheduling.types import AdmittedWorkload, PreemptedWorkload


@dataclass(slots=True)
class Plan:
    policy: KueuePolicy
    admitted: list[AdmittedWorkload] = field(default_factory=list)
    preempted: list[PreemptedWorkload] = field(default_factory=list)
    pending: dict[str, str] = field(default_factory=dict)  # workload -> why it waits
    cycles: int = 0

    def pods_ready_policy(self, workload: str) -> PodsReadyPolicy | None:
        info = self.policy.info(workload)
        if info is None or info.no_quota:
            return self.policy.config.scheduler.pods_ready
        return self.policy.config.pods_ready_for(info.cluster_queue)


def make_policy(world: World, profile: str, shielded: Collection[str], seed: int = 0,
                parked: ParkedMemory | None = None, *, quota_only: bool = False) -> KueuePolicy:
    """The policy for one cycle. It places pods on the world's nodes, even when there is none (pods then wait,
    unschedulable); ``quota_only`` (the ``quotaOnly`` setting) gives it no nodes at all: admission by quota."""
    cluster = None if quota_only else world.cluster
    policy = KueuePolicy(world.manifests(), cluster, placer_factory=engine_placer_factory(profile), seed=seed)
    for w in world.workloads:
        policy.submit(w, world.now)
    shield(policy, shielded)
    if parked is not None:
        parked.apply(world, policy)
    return policy


def shield(policy: KueuePolicy, workloads: Collection[str]) -> None:
    """Take ``workloads`` out of the preemption candidates (their usage and placements stay charged).

    Candidates are read from the admitted-workload tables; quota lives in the quota tree and nodes in the
    ClusterState, so removing the table entries hides the workloads from preemption and nothing else."""
    if not workloads:
        return
    state = policy.state
    for table in state.admitted.values():
        for key in workloads:
            table.pop(key, None)


def run(policy: KueuePolicy, now: float, *, max_cycles: int = 1000, budget_s: float = 2.0) -> Plan:
    """Policy cycles until another would change nothing (``KueuePolicy.settled``: every head left was just
    evaluated and is stuck, or there is none, as the simulator's engine stops), or a budget is spent. (Counting
    the heads was not enough: a cycle that woke parked workloads and parked them again looked stuck while the
    workload behind them had not been tried.)"""
    plan = Plan(policy)
    started = time.perf_counter()
    evicting: set[str] = set()
    while plan.cycles < max_cycles:
        decisions = policy.cycle(now)
        plan.cycles += 1
        plan.admitted.extend(decisions.admitted)
        for p in decisions.preempted:
            if p.workload not in evicting:
                evicting.add(p.workload)
                plan.preempted.append(p)
        if (not decisions.admitted and policy.settled()) or time.perf_counter() - started > budget_s:
            break
    plan.pending = {p.workload: p.reason for p in policy.pending_report()}
    return plan


def _nodes_fingerprint(world: World) -> int:
    return hash(tuple((n.name, tuple(sorted(n.allocatable.items())), n.unschedulable, n.ready, n.taints,
                       tuple(sorted(n.labels.items()))) for n in world.nodes))


class ParkedMemory:
    """Which workloads the last cycle left parked, and whether that still holds (see the module doc)."""

    def __init__(self) -> None:
        # workload -> (ClusterQueue, message, pending reason, for nodes)
        self._parked: dict[str, tuple[str, str, PendingReason, bool]] = {}
        self._queues = 0  # the queue kinds' generation (gpufleet.k8s.parsing): workload objects change it not
        self._nodes = 0
        self._holders: frozenset[str] = frozenset()

    def apply(self, world: World, policy: KueuePolicy) -> int:
        """Park again in ``policy`` what the last cycle parked, if nothing was released since; how many."""
        holders = frozenset(e.key for e in world.pods.values() if e.holds_capacity)
        nodes = _nodes_fingerprint(world)
        valid = world.queue_generation == self._queues != 0 and nodes == self._nodes and self._holders <= holders
        parked = self._parked if valid else {}
        count = 0
        queues = policy.state.queues.queues
        for key, (cq, message, reason, for_nodes) in parked.items():
            info = policy.info(key)
            q = queues.get(cq)
            if info is not None and q is not None and key in q.active:
                q.park(info)
                info.message = message  # why it waits, for its pods' condition and the pending gauge
                info.pending = reason
                if for_nodes:
                    info.placement_parked = True
                    policy.state.placement_parked[key] = info
                count += 1
        self._queues, self._nodes, self._holders = world.queue_generation, nodes, holders
        return count

    def remember(self, policy: KueuePolicy, world: World, admitted: Collection[str] = ()) -> None:
        """What the round just run left parked, and the pods holding capacity as it ends (``world``'s and the
        pods it placed, ``admitted``): a later cycle re-parks only while none of those is gone. (Holders taken at
        the round's start missed the pods it admitted: one of them ending would not have woken what it kept
        out.)"""
        self.remember_parked(policy)
        self.remember_holders(world, admitted)

    def remember_parked(self, policy: KueuePolicy) -> None:
        """:meth:`remember`'s first half: what the round left parked. A cycle that carries on calls
        :meth:`remember_holders` once its Bindings are handed off (every pod of the world is looked at, and the
        pods it places are among ``admitted`` whether or not they are marked on their nodes by then)."""
        self._parked = {key: (name, info.message, info.pending, info.placement_parked)
                        for name, q in policy.state.queues.queues.items() for key, info in q.parked.items()}

    def remember_holders(self, world: World, admitted: Collection[str] = ()) -> None:
        """:meth:`remember`'s second half: the pods holding capacity (PodEntry.holds_capacity, inlined: this
        looks at every pod of the cluster)."""
        self._holders = frozenset([e.key for e in world.pods.values() if e.node is not None and not e.terminal]) \
            | frozenset(admitted)
