"""Classical preemption (kueue.md §1.12) and the cycle's handling of preemptors (§1.8)."""

from __future__ import annotations

from tests.kueue.scenario import Scenario, job, names, preempted
from tests.kueue.test_cohorts import FLAVOR, cq

PRIORITIES = """---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: p1}
value: 1
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: p2}
value: 2
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: p3}
value: 3
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: p50}
value: 50
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: p150}
value: 150
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: p300}
value: 300
"""


def test_in_queue_preemption_together_with_reclaim_from_a_borrower() -> None:
    text = FLAVOR + PRIORITIES + cq("a", 4, spec="\n  preemption: {withinClusterQueue: LowerPriority, "
                                               "reclaimWithinCohort: Any}") + cq("b", 4)
    s = Scenario(text + job("a-low", "a", cpu="2", priority_class="p1", created=1) +
                 job("b-borrow", "b", cpu="6", created=2))
    s.run(2)
    assert s.admitted() == {"a-low", "b-borrow"}
    s.add(job("a-high", "a", cpu="4", priority_class="p300", created=3))
    d = s.cycle()
    assert preempted(d) == {"b-borrow": ("a-high", "InCohortReclamation"), "a-low": ("a-high", "InClusterQueue")}
    assert not d.admitted
    assert "Pending the preemption of 2 workload(s)" in s.pending()["a-high"]
    d = s.cycle()
    assert names(d.admitted) == ["a-high"]


def test_minimal_victim_set_gives_back_what_is_not_needed() -> None:
    text = FLAVOR + PRIORITIES + cq("a", 10, None, spec="\n  preemption: {withinClusterQueue: LowerPriority}")
    s = Scenario(text + job("v1", "a", cpu="1", priority_class="p1", created=1) +
                 job("v2", "a", cpu="5", priority_class="p2", created=2) +
                 job("v3", "a", cpu="4", priority_class="p3", created=3))
    s.run(3)
    s.add(job("big", "a", cpu="5", priority_class="p300", created=4))
    d = s.cycle()
    # v1 (lowest priority) is tried first, but freeing v2 alone suffices: v1 is given back.
    assert preempted(d) == {"v2": ("big", "InClusterQueue")}


def test_lower_priority_policy_never_preempts_equal_priority() -> None:
    text = FLAVOR + cq("a", 1, None, spec="\n  preemption: {withinClusterQueue: LowerPriority}")
    s = Scenario(text + job("first", "a", created=1))
    s.cycle()
    s.add(job("second", "a", created=2))
    d = s.cycle()
    assert not d.preempted and "second" in s.pending()


def test_lower_or_newer_equal_priority_preempts_only_newer_workloads() -> None:
    text = FLAVOR + cq("a", 2, None, spec="\n  preemption: {withinClusterQueue: LowerOrNewerEqualPriority}")
    s = Scenario(text + job("older", "a", created=1) + job("newer", "a", created=5))
    s.run(2)
    assert s.admitted() == {"older", "newer"}
    s.add(job("middle", "a", created=3))  # created between them, submitted last
    d = s.cycle()
    assert preempted(d) == {"newer": ("middle", "InClusterQueue")}
    s.cycle()
    assert s.admitted() == {"older", "middle"}
    s.cycle()
    assert "newer" in s.pending()  # newer cannot preempt the older ones back


def test_reclaim_only_from_queues_above_their_nominal_quota() -> None:
    text = FLAVOR + PRIORITIES + cq("a", 4, spec="\n  preemption: {reclaimWithinCohort: Any}") + cq("b", 4)
    s = Scenario(text + job("b-4", "b", cpu="4", priority_class="p1", created=1))
    s.cycle()
    s.add(job("a-6", "a", cpu="6", priority_class="p300", created=2))
    d = s.cycle()
    assert not d.preempted  # b is within its nominal quota: nothing to reclaim


BORROWING = FLAVOR + PRIORITIES + cq("b", 4) + cq("lender", 2)


def borrow_within(threshold: str) -> str:
    policy = "{reclaimWithinCohort: LowerPriority, borrowWithinCohort: {policy: LowerPriority" + threshold + "}}"
    return cq("a", 2, spec=f"\n  preemption: {policy}")


def borrowing_scenario(a_spec: str) -> Scenario:
    s = Scenario(BORROWING + a_spec + job("b-low", "b", cpu="2", priority_class="p50", created=1) +
                 job("b-mid", "b", cpu="2", priority_class="p150", created=2) +
                 job("b-x", "b", cpu="2", priority_class="p50", created=3) +
                 job("b-hi", "b", cpu="2", priority_class="p150", created=4))
    s.run(4)
    assert s.admitted() == {"b-low", "b-mid", "b-x", "b-hi"}  # b borrows a's 2 and the lender's 2
    s.add(job("a-big", "a", cpu="4", priority_class="p300", created=5))
    return s


def test_borrow_within_cohort_preempts_below_the_threshold_while_borrowing() -> None:
    s = borrowing_scenario(borrow_within(", maxPriorityThreshold: 100"))
    d = s.cycle()
    # a-big must borrow 2 after preemption: only candidates at or below priority 100 qualify, the most
    # recently admitted first; b is left at its nominal quota.
    assert preempted(d) == {"b-x": ("a-big", "InCohortReclaimWhileBorrowing"),
                            "b-low": ("a-big", "InCohortReclaimWhileBorrowing")}
    s.cycle()
    assert s.admitted() == {"a-big", "b-mid", "b-hi"}


def test_reclaim_stops_once_the_borrower_is_back_within_nominal() -> None:
    # a (nominal 2) asks for 4 while b (nominal 4) uses 6: only b's 2 borrowed cpu can be reclaimed, which is
    # not enough; what b holds within its nominal quota is protected.
    text = FLAVOR + PRIORITIES + cq("b", 4) + borrow_within("")
    s = Scenario(text + job("b-1", "b", cpu="2", priority_class="p50", created=1) +
                 job("b-2", "b", cpu="2", priority_class="p50", created=2) +
                 job("b-3", "b", cpu="2", priority_class="p50", created=3))
    s.run(3)
    s.add(job("a-big", "a", cpu="4", priority_class="p300", created=4))
    d = s.cycle()
    assert not d.preempted and "a-big" in s.pending()


def test_borrow_within_cohort_threshold_excludes_higher_priorities() -> None:
    s = borrowing_scenario(borrow_within(", maxPriorityThreshold: 40"))
    d = s.cycle()
    assert not d.preempted and "a-big" in s.pending()


def test_without_borrow_within_cohort_a_borrowing_preemptor_cannot_reclaim() -> None:
    s = borrowing_scenario(cq("a", 2, spec="\n  preemption: {reclaimWithinCohort: LowerPriority}"))
    d = s.cycle()
    assert not d.preempted
    assert "insufficient" in s.pending()["a-big"]


def test_overlapping_preemption_targets_skip_the_second_preemptor() -> None:
    reclaim = "\n  preemption: {reclaimWithinCohort: Any}"
    text = FLAVOR + cq("a", 4, spec=reclaim) + cq("b", 2) + cq("c", 4, spec=reclaim)
    s = Scenario(text + job("b-8", "b", cpu="8", created=1))
    s.cycle()
    s.add(job("a-4", "a", cpu="4", created=2) + job("c-4", "c", cpu="4", created=3))
    d = s.cycle()
    assert preempted(d) == {"b-8": ("a-4", "InCohortReclamation")}
    assert s.pending()["c-4"] == "Workload has overlapping preemption targets with another workload"
    d = s.cycle()
    assert sorted(names(d.admitted)) == ["a-4", "c-4"]


def test_preemptor_without_targets_reserves_its_nominal_quota_for_the_cycle() -> None:
    lower = "\n  preemption: {reclaimWithinCohort: LowerPriority}"
    text = FLAVOR + PRIORITIES + cq("a", 4, spec=lower) + cq("b", 0) + cq("c", 0) + cq("lender", 2)
    s = Scenario(text + job("b-high", "b", cpu="4", priority_class="p300", created=1))
    s.cycle()  # b borrows a's 4 cpu
    s.add(job("a-low", "a", cpu="4", priority_class="p1", created=2) + job("c-2", "c", cpu="2", created=3))
    d = s.cycle()
    # a-low cannot reclaim from the higher-priority borrower, and with reclaimWithinCohort other than Any it
    # holds a's nominal quota back this cycle: c cannot borrow the lender's 2 cpu now.
    assert not d.admitted and not d.preempted
    assert s.pending()["c-2"] == "Workload no longer fits after processing another workload"


def test_without_the_preemptor_the_borrower_gets_the_capacity() -> None:
    lower = "\n  preemption: {reclaimWithinCohort: LowerPriority}"
    text = FLAVOR + PRIORITIES + cq("a", 4, spec=lower) + cq("b", 0) + cq("c", 0) + cq("lender", 2)
    s = Scenario(text + job("b-high", "b", cpu="4", priority_class="p300", created=1))
    s.cycle()
    s.add(job("c-2", "c", cpu="2", created=3))
    assert names(s.cycle().admitted) == ["c-2"]


def test_preempted_workloads_keep_their_quota_until_the_eviction_is_confirmed() -> None:
    text = FLAVOR + PRIORITIES + cq("a", 2, None, spec="\n  preemption: {withinClusterQueue: LowerPriority}")
    s = Scenario(text + job("low", "a", cpu="2", priority_class="p1", created=1))
    s.cycle()
    s.add(job("high", "a", cpu="2", priority_class="p300", created=2))
    d = s.cycle(confirm_evictions=False)
    assert preempted(d) == {"low": ("high", "InClusterQueue")}
    d = s.cycle(confirm_evictions=False)  # still waiting: no new eviction is issued, nothing admitted
    assert not d.preempted and not d.admitted
    assert s.usage("a") == 2000
    s.policy.evicted("default/low", s.now)
    assert names(s.cycle().admitted) == ["high"]
