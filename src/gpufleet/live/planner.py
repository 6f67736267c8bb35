"""Runs the scheduling core on one cycle's :class:`~gpufleet.live.world.World`: the same KueuePolicy the
simulator runs, fed from the live cluster.

A fresh policy is built from the world every time, every workload submitted (bound ones become admitted
with their quota), then policy cycles run back to back, as the simulator runs them at one instant, until a
cycle admits nothing (or a cycle or time budget is spent): Kueue admits one head per ClusterQueue per
cycle, so one cycle per rebuild would be a needless bottleneck.

What carries over from one rebuilt policy to the next is the core's state, and its rules are the core's: workloads
whose eviction a PodDisruptionBudget refused are *shielded* (:mod:`gpufleet.scheduling.kueue.shields`: they keep
their nodes and quota but are no candidates for preemption, so the next cycle chooses other victims), and the
workloads the last cycle left parked are parked again while nothing was released
(:mod:`gpufleet.scheduling.kueue.parked_memory`). This module only reads off the world what that rule is judged on
(:func:`releases`: no pod that held capacity is gone, and nodes and queue objects are unchanged; the workload
kinds' objects, parsed with the queues, may change: a Job's status releases nothing).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from gpufleet.api.objects import PodsReadyPolicy
from gpufleet.live.world import World
from gpufleet.scheduling.kueue import KueuePolicy, engine_placer_factory
from gpufleet.scheduling.kueue.parked_memory import ParkedMemory as CoreParkedMemory
from gpufleet.scheduling.kueue.parked_memory import Releases
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
    # (the policy does not resize a workload after a MIG OOM itself: a Job's next pod asks what its template asks;
    # the resize is written on the Job for the webhook to rewrite its next pods, gpufleet.live.mig_resize)
    policy = KueuePolicy(world.manifests(), cluster, placer_factory=engine_placer_factory(profile), seed=seed,
                         mig_resize=False)
    for w in world.workloads:
        policy.submit(w, world.now)
    policy.shield(shielded)
    if parked is not None:
        parked.apply(world, policy)
    return policy


def terminating(world: World, policy: KueuePolicy, only: Iterable[str] | None = None) -> None:
    """Tell ``policy`` the workloads of ours whose pods holding a node are all being deleted (``only``: among the
    workloads of those pods): a preemption's victims whose eviction was accepted, or work whose owner was deleted.
    They keep their quota and nodes until their pods are gone, as Kueue keeps an evicted workload's, but are never
    chosen as victims again (``KueuePolicy.terminating``): a full cycle, which knows nothing of the last one's
    evictions, reads it off the pods, and a cycle that carries on from the one that evicted them knows it already
    (the core marked them when it chose them)."""
    keys = only if only is not None else [e.key for e in world.pods.values()
                                          if e.deleting and e.ours and e.holds_capacity]
    seen: set[str] = set()
    for key in keys:
        workload = world.workload_of.get(key)
        if workload is None or workload in seen:
            continue
        seen.add(workload)
        holding = [e for k in world.pods_of.get(workload, ()) if (e := world.pods.get(k)) is not None
                   and e.holds_capacity]
        if holding and all(e.deleting for e in holding):
            policy.terminating(workload)


def run(policy: KueuePolicy, now: float, *, max_cycles: int = 1000, budget_s: float = 2.0,
        on_admitted: Callable[[list[AdmittedWorkload]], None] | None = None) -> Plan:
    """Policy cycles until another would change nothing (``KueuePolicy.settled``: every head left was just
    evaluated and is stuck, or there is none, as the simulator's engine stops), or a budget is spent. (Counting
    the heads was not enough: a cycle that woke parked workloads and parked them again looked stuck while the
    workload behind them had not been tried.)

    ``on_admitted`` hears each policy cycle's admissions as they are made, until the round's first preemption
    (the live cycle starts their Bindings while the round goes on; a waitForPodsReady timeout's eviction does not
    stop it: nothing admitted waits for it); they are in the plan all the same."""
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
        if on_admitted is not None and decisions.admitted and not any(p.preemptor for p in plan.preempted):
            on_admitted(decisions.admitted)
        if (not decisions.admitted and policy.settled()) or time.perf_counter() - started > budget_s:
            break
    plan.pending = {p.workload: p.reason for p in policy.pending_report()}
    return plan


def ready_as_bound(policy: KueuePolicy, plan: Plan, now: float) -> None:
    """What the round admitted gets no readiness deadline from its admission: live, waitForPodsReady's clock starts
    when its pods are bound (``gpufleet.live.gangs.tell_readiness`` gives the deadline once their Bindings land, as
    a rebuild reads it off the pods). Where a ClusterQueue blocks admission (blockAdmission), what the round
    admitted keeps waiting in the core, without a deadline, until its pods are Ready: in Kueue every admitted
    workload not PodsReady yet holds those queues back, whichever queue admitted it. Where no queue blocks, nothing
    waits for it meanwhile. Called after every round."""
    state, blocking = policy.state, policy.blocks_admission()
    for a in plan.admitted:
        if a.workload in state.free_waiting:  # (workloads without a queue hold no admission back)
            policy.pods_ready(a.workload, now)
        elif (info := state.waiting_ready.get(a.workload)) is not None:
            if blocking:
                info.ready_deadline = None
            else:
                policy.pods_ready(a.workload, now)


def _nodes_fingerprint(world: World) -> int:
    return hash(tuple((n.name, tuple(sorted(n.allocatable.items())), n.unschedulable, n.ready, n.taints,
                       tuple(sorted(n.labels.items()))) for n in world.nodes))


def releases(world: World) -> Releases:
    """What the parked memory is judged against, as the world shows it: the queue kinds' generation
    (gpufleet.k8s.parsing: workload objects change it not), the nodes, the pods holding capacity."""
    return Releases(world.queue_generation, _nodes_fingerprint(world),
                    frozenset(e.key for e in world.pods.values() if e.holds_capacity))


class ParkedMemory(CoreParkedMemory):
    """The core's parked memory (:mod:`gpufleet.scheduling.kueue.parked_memory`), read off the live world."""

    def apply(self, world: World, policy: KueuePolicy) -> int:
        """Park again in ``policy`` what the last cycle parked, if nothing was released since; how many."""
        return self.carry(policy, releases(world))

    def remember(self, policy: KueuePolicy, world: World, admitted: Collection[str] = ()) -> None:
        """What the round just run left parked, and the pods holding capacity as it ends (``world``'s and the
        pods it placed, ``admitted``)."""
        self.remember_parked(policy)
        self.remember_holders(world, admitted)

    def remember_holders(self, world: World, admitted: Collection[str] = ()) -> None:
        """:meth:`remember`'s second half, which a cycle that carries on calls once its Bindings are handed off
        (every pod of the world is looked at, and the pods it places are among ``admitted`` whether or not they
        are marked on their nodes by then). PodEntry.holds_capacity, inlined: this looks at every pod."""
        self.note_holders(frozenset([e.key for e in world.pods.values() if e.node is not None and not e.terminal])
                          | frozenset(admitted))
