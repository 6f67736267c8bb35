"""Runs the scheduling core on one cycle's :class:`~gpufleet.kube.world.World`: the same KueuePolicy the
simulator runs, fed from the live cluster.

A fresh policy is built from the world every time, every workload submitted (bound ones become admitted
with their quota), then policy cycles run back to back, as the simulator runs them at one instant, until a
cycle admits nothing (or a cycle or time budget is spent): Kueue admits one head per ClusterQueue per
cycle, so one cycle per rebuild would be a needless bottleneck.

Workloads whose eviction a PodDisruptionBudget refused are *shielded*: they keep their nodes and quota but
are no candidates for preemption, so the next cycle chooses other victims.
"""

from __future__ import annotations

import random
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from gpufleet.api.objects import PodsReadyPolicy, Topology
from gpufleet.cluster.state import ClusterState
from gpufleet.kube.world import World
from gpufleet.scheduling.kueue import KueuePolicy, PlacerFactory, first_fit_factory
from gpufleet.scheduling.types import AdmittedWorkload, Placer, PreemptedWorkload


def placer_factory(profile: str) -> PlacerFactory:
    """The placement engine's placer for ``profile`` (first-fit when the engine is not installed)."""
    try:
        from gpufleet.scheduling.placement import make_placer
    except ImportError:  # pragma: no cover - the engine ships with gpufleet
        return first_fit_factory

    def factory(cluster: ClusterState, rng: random.Random, topologies: Sequence[Topology]) -> Placer:
        return make_placer(cluster, profile, rng, topologies)

    return factory


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


def make_policy(world: World, profile: str, shielded: Collection[str], seed: int = 0) -> KueuePolicy:
    factory = placer_factory(profile)
    policy = KueuePolicy(world.manifests(), world.cluster, placer_factory=factory, seed=seed)
    for w in world.workloads:
        policy.submit(w, world.now)
    shield(policy, shielded)
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
        if not decisions.admitted or time.perf_counter() - started > budget_s:
            break
    plan.pending = {p.workload: p.reason for p in policy.pending_report()}
    return plan
