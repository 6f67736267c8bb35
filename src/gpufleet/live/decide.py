"""What a live cycle decides from a cache snapshot, without a single write: the one decide the scheduler's cycle and
the dashboard's live source both call (issue 27), so that what the dashboard shows as planned is what the scheduler
binds next, given the same snapshot and the same memory.

The steps: the world from the snapshot (:func:`gpufleet.live.world.assemble`), pods of set-aside objects held back,
our workloads (:func:`~gpufleet.live.world.finish`), partial gangs repaired (:func:`gpufleet.live.gangs.repair`),
the policy (with the PodDisruptionBudget shields and the parked-workload memory, the core's:
:mod:`gpufleet.scheduling.kueue.shields`, :mod:`gpufleet.scheduling.kueue.parked_memory`), pods come after their
workload's admission joined to it (:func:`gpufleet.live.gangs.join`, over the core's
:mod:`gpufleet.scheduling.kueue.late_members`), the pods' readiness told to the policy (waitForPodsReady:
:func:`gpufleet.live.gangs.tell_readiness`), the policy's round. What the scheduler keeps between cycles (assumed
pods, parked memory, shields, set-aside objects) comes in as arguments: the dashboard passes none of it and sees
what a scheduler that had just started would do.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpufleet.k8s import resources as r
from gpufleet.k8s.informer import CacheSnapshot
from gpufleet.k8s.parsing import ParseCache
from gpufleet.live import gangs, observed_memory, planner
from gpufleet.live.assumed import AssumedPods
from gpufleet.live.gpu_oom import GpuOomMemory
from gpufleet.live.requeues import RequeueMemory
from gpufleet.live.settings import SchedulerSettings
from gpufleet.live.world import World, assemble, finish, hold_pods_of, owners_of
from gpufleet.scheduling.kueue import KueuePolicy
from gpufleet.scheduling.memory import OomLesson
from gpufleet.scheduling.types import AdmittedWorkload

JsonDict = dict[str, Any]


@dataclass(slots=True)
class Decision:
    """One snapshot's decisions: the world, the gang repairs, and (but beside Kueue, where Kueue admits) the
    policy and its plan (in which the workloads whose pods did not get ready in time are evicted: ``preempted``,
    with reason ``PodsReadyTimeout`` and no preemptor)."""

    world: World
    repairs: list[gangs.GangAction]
    due: list[float]  # when a timer the decisions started runs out that needs a rebuild (a gang's repair)
    world_s: float
    policy: KueuePolicy | None = None
    plan: planner.Plan | None = None
    policy_s: float = 0.0
    # Pods whose containers ran out of GPU memory, told to the policy this time, with what it learnt (their events)
    ooms: list[tuple[JsonDict, OomLesson]] = field(default_factory=list)
    # When the policy's own next timer runs out (a requeue backoff, a waitForPodsReady deadline): the policy, kept
    # or rebuilt, acts on it then
    wake: float | None = None
    # Pods to mark as of a workload seen with all its pods Ready (gangs.WAS_READY_CONDITION; no write here)
    ready_marks: list[JsonDict] = field(default_factory=list)


def placed(plan: planner.Plan) -> list[str]:
    """The pods the plan's admissions put on nodes."""
    return [p.pod for a in plan.admitted for p in a.pods if p.node is not None]


def queue_kinds_read(queue_resources: Sequence[r.ResourceType]) -> tuple[r.ResourceType, ...]:
    """What a cycle parses as its queues: the queue source's kinds with the PriorityClasses and Namespaces."""
    return (r.PRIORITY_CLASSES, r.NAMESPACES, *queue_resources)


def decide(snapshot: CacheSnapshot, now: float, settings: SchedulerSettings, *, parse: ParseCache,
           queue_resources: Sequence[r.ResourceType], assumed: AssumedPods | None = None,
           parked: planner.ParkedMemory | None = None, shields: Iterable[str] = (),
           held: Iterable[tuple[r.ResourceType, str, str]] = (),
           on_admitted: Callable[[World, list[AdmittedWorkload]], None] | None = None,
           requeues: RequeueMemory | None = None, ooms: GpuOomMemory | None = None,
           seen_ready: set[str] | None = None) -> Decision:
    """The cycle's decisions on ``snapshot`` (see the module's docstring); ``held``: set-aside objects (resource,
    key, why) whose pods wait; ``on_admitted``: hears the round's admissions as they are made (planner.run), with
    the world they were made in; ``requeues``: what the scheduler remembers of its PodsReadyTimeout evictions
    (gpufleet.live.requeues); ``ooms``: what it learnt of pods that ran out of GPU memory (gpufleet.live.gpu_oom;
    None: a memory of its own, as a scheduler that had just started); ``seen_ready``: the UIDs of the pods it saw
    Ready with all of their workload's (gpufleet.live.gangs.tell_readiness; cut here to those in the snapshot).
    Beside Kueue the policy is not run: the caller plans what Kueue admitted."""
    started = time.perf_counter()
    s = settings
    world = assemble(snapshot, scheduler_name=s.scheduler_name, kueue=s.kueue, parse=parse,
                     assumed=assumed if assumed is not None else AssumedPods(), now=now,
                     require_mutation=s.webhook.require_mutation,
                     queue_kinds=queue_kinds_read(queue_resources))
    hold_pods_of(world, [(res, key, f"is set aside, so its pods wait: {why}") for res, key, why in held])
    due: list[float] = []
    if s.beside_kueue.enabled:
        return Decision(world, gangs.repair(world, s.binding.gang_repair_timeout, due), due,
                        time.perf_counter() - started)
    finish(world)  # workloads first: a gang is a JobSet's pods as much as a pod group's
    repairs = gangs.repair(world, s.binding.gang_repair_timeout, due)
    world_s = time.perf_counter() - started
    policy = planner.make_policy(world, s.placement_profile, set(shields), quota_only=s.quota_only)
    planner.terminating(world, policy)  # (before anything is preempted: what is on its way out is not again)
    observed_memory.tell(world, policy, now)  # what the node agent saw pods use of their GPUs
    ooms = ooms if ooms is not None else GpuOomMemory()
    ooms.apply(policy, world)  # what earlier policies learnt of GPU OOMs, then the terminations not told yet
    oom_lessons = ooms.learn(world, policy, forget_gone=True)
    if requeues is not None:  # the backoffs of workloads evicted for PodsReadyTimeout, as Kueue keeps them
        requeues.forget_gone(world.pods_of.keys(), now)
        requeues.apply(policy, now, functools.partial(owners_of, world))
    if parked is not None:  # (after the backoffs: a workload backing off is parked for that, not again)
        parked.apply(world, policy)
    repairs += gangs.join(world, policy)  # pods come after their workload's admission (a StatefulSet's)
    # waitForPodsReady: what runs and is not Ready yet holds blockAdmission's round back, and times out in it
    if seen_ready is not None:
        seen_ready.intersection_update({e.uid for e in world.pods.values() if e.uid})
    marks = gangs.tell_readiness(world, policy, now, seen_ready=seen_ready)
    plan = planner.run(policy, now, max_cycles=s.max_cycles_per_round, budget_s=s.round_budget,
                       on_admitted=None if on_admitted is None else functools.partial(on_admitted, world))
    if parked is not None:
        parked.remember(policy, world, placed(plan))
    policy_s = time.perf_counter() - started - world_s
    planner.ready_as_bound(policy, plan, now)
    ooms.keep(policy)
    return Decision(world, repairs, due, world_s, policy, plan, policy_s, oom_lessons, policy.next_wakeup(now),
                    marks)
