"""Admission decisions for a snapshot of manifests, cycle by cycle: what ``gpufleet plan`` prints and the
dashboard shows for files.

The snapshot (queues, quotas, workloads, and nodes when there are any) is loaded, every workload is submitted,
and scheduling cycles run. Between cycles the pods of preempted workloads are taken as gone, so a preemptor
can be admitted in the next cycle, as it would be once the evictions complete. No I/O: the caller loads the
manifests and renders the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet.api.manifests import Manifests
from gpufleet.cluster.build import build_workloads
from gpufleet.cluster.dra_claims import bound_claims, unheld_allocations
from gpufleet.cluster.state import ClusterState
from gpufleet.cluster.workloads import Workload
from gpufleet.scheduling.charges import format_quota
from gpufleet.scheduling.kueue import KueuePolicy
from gpufleet.scheduling.placement.dra import hold_claims
from gpufleet.scheduling.types import Decisions, PendingWorkload

STABLE_CAP = 1000  # until_stable never runs more cycles than this


@dataclass(slots=True)
class Cycle:
    decisions: Decisions
    pending: list[PendingWorkload]  # after the cycle


@dataclass(slots=True)
class PlanResult:
    cycles: list[Cycle]
    usage: dict[str, dict[str, dict[str, str]]]  # ClusterQueue -> flavor -> resource -> amount
    # The policy after the last cycle (its queues, quota tree and, with nodes, its ClusterState) and the
    # workloads it was given: what a view of the planned cluster reads. None for a filtered copy's readers
    # that only print decisions.
    policy: KueuePolicy | None = None
    workloads: list[Workload] = field(default_factory=list)


def run_cycles(manifests: Manifests, cycles: int, until_stable: bool) -> PlanResult:
    """Submit every workload of the snapshot and run ``cycles`` cycles (or, ``until_stable``, until another cycle
    would change nothing: :meth:`KueuePolicy.settled`)."""
    workloads = build_workloads(manifests)
    cluster = ClusterState.from_nodes(manifests.nodes) if manifests.nodes else None
    if cluster is not None and manifests.resource_claims:
        # allocated claims no running pod holds keep their devices, as kube-scheduler counts them
        hold_claims(cluster, unheld_allocations(manifests.resource_claims, bound_claims(workloads)))
    policy = KueuePolicy(manifests, cluster)
    now = max((w.created for w in workloads), default=0.0) + 1.0
    for w in workloads:
        policy.submit(w, now)
    results: list[Cycle] = []
    for _ in range(STABLE_CAP if until_stable else cycles):
        decisions = policy.cycle(now)
        results.append(Cycle(decisions, policy.pending_report()))
        for victim in decisions.preempted:
            policy.evicted(victim.workload, now, requeue=True, reason=victim.reason)
        now += 1.0
        if until_stable and policy.settled():
            break
    usage = {cq: {flavor: {r: format_quota(r, v) for r, v in resources.items()} for flavor, resources in per.items()}
             for cq, per in policy.usage().items()}
    return PlanResult(results, usage, policy, workloads)


def settled(result: PlanResult) -> PlanResult:
    """The cycles of ``--until-stable`` without the last one when it changed nothing (it only showed that another
    cycle would change nothing): the cycle before it ends with the same pending workloads, given the last
    cycle's reasons. What ``plan`` prints and the dashboard counts."""
    if len(result.cycles) < 2:
        return result
    last = result.cycles[-1]
    if last.decisions.admitted or last.decisions.preempted:
        return result
    before = result.cycles[-2]
    cycles = [*result.cycles[:-2], Cycle(before.decisions, last.pending)]
    return PlanResult(cycles, result.usage, result.policy, result.workloads)
