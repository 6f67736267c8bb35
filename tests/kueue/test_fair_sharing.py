"""Fair sharing (kueue.md §1.13): admission order by dominant resource share, and fair-sharing preemption."""

from __future__ import annotations

from tests.kueue.scenario import Scenario, job, names, preempted
from tests.kueue.test_cohorts import FLAVOR, cq

FAIR = """---
apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
fairSharing:
  enable: true
"""


def order_scenario(fair: bool) -> Scenario:
    text = FLAVOR + (FAIR if fair else "") + cq("a", 4) + cq("b", 4) + cq("lender", 4)
    s = Scenario(text + job("a-6", "a", cpu="6", created=1) + job("b-4", "b", cpu="4", created=2))
    s.run(1)
    assert s.admitted() == {"a-6", "b-4"}  # a borrows 2; 2 cpu remain free in the cohort
    s.add(job("a-next", "a", cpu="2", created=3) + job("b-next", "b", cpu="2", created=4))
    return s


def test_classical_order_takes_the_older_borrower() -> None:
    s = order_scenario(fair=False)
    assert names(s.cycle().admitted) == ["a-next"]


def test_fair_sharing_takes_the_queue_with_the_lower_share_after_admission() -> None:
    # After admission a would borrow 4 of the 12 lendable cpu, b only 2: b goes first although younger.
    s = order_scenario(fair=True)
    assert names(s.cycle().admitted) == ["b-next"]
    assert s.pending()["a-next"] == "Workload no longer fits after processing another workload"


def test_fair_sharing_weight_zero_queue_goes_last() -> None:
    text = FLAVOR + FAIR + cq("a", 0, spec="\n  fairSharing: {weight: 0}") + cq("b", 0) + cq("lender", 2)
    s = Scenario(text + job("a-1", "a", cpu="2", created=1) + job("b-1", "b", cpu="2", created=2))
    assert names(s.cycle().admitted) == ["b-1"]


def fs_preemption(b_cpu: str, strategies: str = "") -> Scenario:
    reclaim = "\n  preemption: {reclaimWithinCohort: Any}"
    text = FLAVOR + FAIR.replace("enable: true", "enable: true" + strategies) + cq("a", 4, spec=reclaim) + cq(
        "b", 4, spec=reclaim) + cq("lender", 4)
    workloads = "".join(job(f"a-{i}", "a", cpu="2", created=i) for i in range(4)) + job("b-1", "b", cpu="2",
                                                                                            created=5)
    s = Scenario(text + workloads)
    s.until_stable()
    assert s.usage("a") == 8000 and s.usage("b") == 2000  # a borrows 4 of the lender's and b's spare quota
    s.add(job("b-big", "b", cpu=b_cpu, created=6))
    return s


def test_fair_sharing_preempts_the_queue_with_the_highest_share() -> None:
    # b would borrow 2 (share 2/12) and a keeps borrowing 2 after losing one workload (2/12): rule S2-a holds.
    s = fs_preemption("4")
    d = s.cycle()
    victims = preempted(d)
    assert len(victims) == 1
    (victim, (by, reason)), = victims.items()
    assert victim.startswith("a-") and by == "b-big" and reason == "InCohortFairSharing"
    s.cycle()
    assert "b-big" in s.admitted()


def test_fair_sharing_does_not_preempt_to_become_the_larger_borrower() -> None:
    # b would borrow 4 (share 4/12) while a would drop to 2/12: neither strategy allows it.
    s = fs_preemption("6")
    d = s.cycle()
    assert not d.preempted and "b-big" in s.pending()


def test_fair_sharing_within_nominal_always_reclaims() -> None:
    reclaim = "\n  preemption: {reclaimWithinCohort: Any}"
    text = FLAVOR + FAIR + cq("a", 4, spec=reclaim) + cq("b", 4, spec=reclaim)
    s = Scenario(text + job("a-8", "a", cpu="8", created=1))
    s.cycle()
    s.add(job("b-4", "b", cpu="4", created=2))
    d = s.cycle()
    assert preempted(d) == {"a-8": ("b-4", "InCohortFairSharing")}


def test_hierarchical_fair_sharing_compares_the_subtrees_below_the_common_cohort() -> None:
    cohorts = """---
apiVersion: kueue.x-k8s.io/v1beta1
kind: Cohort
metadata: {name: left}
spec: {parentName: org}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: Cohort
metadata: {name: right}
spec: {parentName: org}
"""
    reclaim = "\n  preemption: {reclaimWithinCohort: Any}"
    text = FLAVOR + FAIR + cohorts + cq("l1", 4, "left", spec=reclaim) + cq("r1", 4, "right", spec=reclaim)
    s = Scenario(text + job("l-a", "l1", cpu="4", created=1) + job("l-b", "l1", cpu="4", created=2))
    s.run(2)
    assert s.admitted() == {"l-a", "l-b"}  # the left subtree borrows all of the right's quota
    s.add(job("r-4", "r1", cpu="4", created=3))
    d = s.cycle()
    assert preempted(d) == {"l-b": ("r-4", "InCohortFairSharing")}  # the most recently admitted
    s.cycle()
    assert s.admitted() == {"l-a", "r-4"}
