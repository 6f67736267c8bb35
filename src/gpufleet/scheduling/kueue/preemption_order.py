"""Who may be preempted, in which order, and why: the rules every preemption search shares (§1.12).

Kept apart from the searches themselves (:mod:`~gpufleet.scheduling.kueue.preemption`, the straightforward one;
:mod:`~gpufleet.scheduling.kueue.cohort_search`, the one sharing work across a cohort's heads) so that both read
the same rules.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from gpufleet.api.objects import PreemptionPolicy
from gpufleet.scheduling.kueue.info import WorkloadInfo

IN_CLUSTER_QUEUE = "InClusterQueue"
IN_COHORT_RECLAMATION = "InCohortReclamation"
IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"
IN_COHORT_FAIR_SHARING = "InCohortFairSharing"


@dataclass(frozen=True, slots=True)
class Target:
    info: WorkloadInfo
    reason: str


Standing = tuple[int, float, str, str]


def standing(info: WorkloadInfo) -> Standing:
    """A candidate's place among candidates that agree on Kueue's first two keys (both evicted or both not, both
    in the preemptor's ClusterQueue or both elsewhere): lower priority first, then the most recently reserved
    quota, then the UID; the namespace/name key makes the order total even if two UIDs collide."""
    adm = info.admission
    return (info.priority, -(adm.admitted_at if adm else 0.0), info.uid, info.key)


def candidate_order(cand: WorkloadInfo, preemptor_cq: str) -> tuple[int, int, int, float, str, str]:
    """Kueue's CandidatesOrdering (``pkg/scheduler/preemption/common/ordering.go``), first difference wins:

    1. workloads already being evicted (Kueue: the Evicted condition is True) first;
    2. workloads of other ClusterQueues before those of the preemptor's own;
    3. lower priority first;
    4. the most recently admitted first, admission being when the quota was reserved (the QuotaReserved
       condition's lastTransitionTime, not the creation time; unrecorded counts as now);
    5. the UID (the namespace/name key for workloads that have none), for a deterministic order.

    Admission Fair Sharing's LocalQueue usage key (between 2 and 3) does not apply: gpufleet does not model
    AdmissionFairSharing."""
    return (0 if cand.evicting else 1, 1 if cand.cluster_queue == preemptor_cq else 0, *standing(cand))


def priority_allows(policy: str, preemptor: WorkloadInfo, cand: WorkloadInfo) -> bool:
    """Whether a preemption policy lets ``preemptor`` evict ``cand`` on priority grounds."""
    if policy == "Any":
        return True
    if policy == "LowerPriority":
        return cand.priority < preemptor.priority
    if policy == "LowerOrNewerEqualPriority":
        return cand.priority < preemptor.priority or (
            cand.priority == preemptor.priority and preemptor.queue_ts < cand.queue_ts)
    return False


class Variant(enum.IntEnum):
    """How a candidate of another ClusterQueue may be taken (Kueue's hierarchical_preemption.go)."""

    WITHIN_CQ = 1
    HIERARCHICAL_RECLAIM = 2  # the preemptor's side of the tree has unused guaranteed quota the candidate holds
    RECLAIM_WITHOUT_BORROWING = 3  # only if the preemptor would not borrow afterwards
    RECLAIM_WHILE_BORROWING = 4  # borrowWithinCohort allows it even while borrowing

    @property
    def reason(self) -> str:
        if self is Variant.WITHIN_CQ:
            return IN_CLUSTER_QUEUE
        if self is Variant.RECLAIM_WHILE_BORROWING:
            return IN_COHORT_RECLAIM_WHILE_BORROWING
        return IN_COHORT_RECLAMATION


def reclaim_variant(policy: PreemptionPolicy, preemptor_priority: int, cand_priority: int,
                    advantage: bool) -> Variant:
    """The variant of a candidate of another ClusterQueue that the reclaim policy already admits."""
    if advantage:
        return Variant.HIERARCHICAL_RECLAIM
    bwc = policy.borrow_within_cohort
    if bwc.policy == "Never" or cand_priority >= preemptor_priority:
        return Variant.RECLAIM_WITHOUT_BORROWING
    if bwc.max_priority_threshold is not None and cand_priority > bwc.max_priority_threshold:
        return Variant.RECLAIM_WITHOUT_BORROWING
    return Variant.RECLAIM_WHILE_BORROWING
