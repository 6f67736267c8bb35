"""Quota through the cohort tree (kueue.md §1.3, §1.4, §1.8): lending and borrowing limits, Cohort objects
with their own quota and parents, and several heads of one cohort in one cycle."""

from __future__ import annotations

from tests.kueue.scenario import Scenario, job, names, preempted

FLAVOR = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default}
"""


def cq(name: str, nominal: int | str, cohort: str | None = "pool", *, limits: str = "", spec: str = "") -> str:
    cohort_line = f"\n  cohort: {cohort}" if cohort else ""
    return f"""---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {{name: {name}}}
spec:
  namespaceSelector: {{}}{cohort_line}{spec}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{{name: default, resources: [{{name: cpu, nominalQuota: {nominal}{limits}}}]}}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {{name: {name}, namespace: default}}
spec: {{clusterQueue: {name}}}
"""


def test_lending_limit_docs_example() -> None:
    # concepts/cluster_queue.md: A(9) and B(12, lendingLimit 1): A reaches at most 10, B up to 21.
    base = FLAVOR + cq("a", 9) + cq("b", 12, limits=", lendingLimit: 1")
    s = Scenario(base + job("a-10", "a", cpu="10", created=1) + job("b-11", "b", cpu="11", created=2))
    s.run(2)
    assert s.admitted() == {"a-10", "b-11"}
    assert s.usage("a") == 10_000 and s.usage("b") == 11_000
    s.add(job("a-more", "a", cpu="1", created=3))
    s.cycle()
    assert "insufficient unused quota for cpu in flavor default" in s.pending()["a-more"]

    s2 = Scenario(base + job("b-21", "b", cpu="21"))
    s2.cycle()
    assert s2.admitted() == {"b-21"}
    s3 = Scenario(base + job("a-11", "a", cpu="11"))
    s3.cycle()
    assert "maximum capacity (10)" in s3.pending()["a-11"]


def test_borrowing_limit_caps_what_a_queue_can_hold() -> None:
    base = FLAVOR + cq("a", 2, limits=", borrowingLimit: 1") + cq("b", 10)
    s = Scenario(base + job("four", "a", cpu="4", created=1) + job("three", "a", cpu="3", created=2))
    s.run(2)
    assert s.admitted() == {"three"}
    assert "maximum capacity (3)" in s.pending()["four"]


def test_cohort_object_quota_is_extra_capacity_for_members_that_declare_it() -> None:
    cohort = """---
apiVersion: kueue.x-k8s.io/v1beta1
kind: Cohort
metadata: {name: pool}
spec:
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 6}]}]
"""
    s = Scenario(FLAVOR + cohort + cq("a", 0) + job("w", "a", cpu="6"))
    s.cycle()
    assert s.admitted() == {"w"}


def test_two_heads_of_one_cohort_in_one_cycle_the_non_borrowing_one_goes_first() -> None:
    base = FLAVOR + cq("a", 4) + cq("b", 4)
    # b-6 was created first, but it must borrow; a-4 fits in its nominal quota and is processed first.
    s = Scenario(base + job("b-6", "b", cpu="6", created=1) + job("a-4", "a", cpu="4", created=2))
    d = s.cycle()
    assert names(d.admitted) == ["a-4"]
    assert s.pending()["b-6"] == "Workload no longer fits after processing another workload"
    d = s.cycle()  # failed after nomination: retried at once, now without room
    assert not d.admitted
    assert "insufficient unused quota" in s.pending()["b-6"]


def test_two_heads_that_both_fit_are_admitted_in_the_same_cycle() -> None:
    s = Scenario(FLAVOR + cq("a", 4) + cq("b", 4) + job("a-5", "a", cpu="5", created=1) +
                 job("b-3", "b", cpu="3", created=2))
    d = s.cycle()
    assert sorted(names(d.admitted)) == ["a-5", "b-3"]


def test_among_borrowers_priority_then_age_decides() -> None:
    text = FLAVOR + """---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: urgent}
value: 100
""" + cq("a", 1) + cq("b", 1) + cq("lender", 2)
    late_urgent = job("urgent", "b", cpu="3", created=5).replace(
        "    spec:\n", "    spec:\n      priorityClassName: urgent\n", 1)
    s = Scenario(text + job("early", "a", cpu="3", created=1) + late_urgent)
    d = s.cycle()
    assert names(d.admitted) == ["urgent"]
    assert s.pending()["early"] == "Workload no longer fits after processing another workload"


HIERARCHY = FLAVOR + """---
apiVersion: kueue.x-k8s.io/v1beta1
kind: Cohort
metadata: {name: org}
spec:
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 2}]}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: Cohort
metadata: {name: research}
spec:
  parentName: org
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 0, borrowingLimit: 2}]}]
""" + cq("r1", 2, "research", spec="\n  preemption: {reclaimWithinCohort: Any}") + cq(
    "r2", 2, "research", spec="\n  preemption: {reclaimWithinCohort: Any}") + cq("prod", 4, "org")


def test_hierarchical_cohort_borrowing_limit() -> None:
    # research holds 2+2 of its own and may borrow 2 more from org: r1 reaches 6, not 7.
    s = Scenario(HIERARCHY + job("seven", "r1", cpu="7", created=1) + job("six", "r1", cpu="6", created=2))
    s.run(2)
    assert s.admitted() == {"six"}
    assert "maximum capacity (6)" in s.pending()["seven"]


def test_hierarchical_reclaim_of_a_sibling_borrowing_within_the_subtree() -> None:
    s = Scenario(HIERARCHY + job("r1-big", "r1", cpu="6", created=1) + job("prod-4", "prod", cpu="4", created=2))
    s.run(2)
    assert s.admitted() == {"r1-big", "prod-4"}
    # r2's own 2 cpu are used by r1: r2 reclaims them, whatever the priorities.
    s.add(job("r2-2", "r2", cpu="2", created=3))
    d = s.cycle()
    assert preempted(d) == {"r1-big": ("r2-2", "InCohortReclamation")}
    s.cycle()
    assert "r2-2" in s.admitted()


def test_queue_without_cohort_only_uses_its_own_quota() -> None:
    s = Scenario(FLAVOR + cq("solo", 2, None) + cq("rich", 100) + job("three", "solo", cpu="3"))
    s.cycle()
    assert "maximum capacity (2)" in s.pending()["three"]
