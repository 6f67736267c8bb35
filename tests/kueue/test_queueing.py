"""Routing and queueing (kueue.md §1.2, §1.5, §1.7, §1.9): LocalQueues, namespace selectors, workloads
without queue, priority order, StrictFIFO and BestEffortFIFO, and requeueing on quota release."""

from __future__ import annotations

from tests.kueue.scenario import Scenario, job, load, names
from tests.kueue.test_cohorts import FLAVOR, cq


def strategy(name: str, nominal: int, how: str) -> str:
    return cq(name, nominal, None, spec=f"\n  queueingStrategy: {how}")


def head_of_line(how: str) -> Scenario:
    s = Scenario(FLAVOR + strategy("a", 4, how) + job("first", "a", cpu="3", created=1) +
                 job("big", "a", cpu="4", created=2) + job("small", "a", cpu="1", created=3))
    s.run(3)
    return s


def test_strict_fifo_keeps_a_head_that_does_not_fit_and_blocks_the_queue() -> None:
    s = head_of_line("StrictFIFO")
    assert s.admitted() == {"first"}
    assert "insufficient unused quota" in s.pending()["big"]
    assert not s.history[-1].admitted and names(s.history[-1].pending) == ["big"]


def test_best_effort_fifo_parks_a_head_that_does_not_fit() -> None:
    s = head_of_line("BestEffortFIFO")
    assert s.admitted() == {"first", "small"}
    # big is parked: not evaluated again until quota is released in its cohort tree.
    assert names(s.history[-1].pending) == []
    s.policy.finish("default/first", s.now)
    s.cycle()
    assert s.admitted() == {"small"}  # big was evaluated again; 1 + 4 > 4 still
    s.policy.finish("default/small", s.now)
    assert names(s.cycle().admitted) == ["big"]


def test_parked_workloads_wake_only_for_releases_in_their_cohort_tree() -> None:
    text = FLAVOR + cq("a", 2, "left") + cq("b", 2, "right")
    s = Scenario(text + job("a-1", "a", cpu="2", created=1) + job("a-2", "a", cpu="2", created=2) +
                 job("b-1", "b", cpu="2", created=3))
    s.run(2)
    assert s.admitted() == {"a-1", "b-1"} and "a-2" in s.pending()
    s.policy.finish("default/b-1", s.now)
    assert names(s.cycle().pending) == []  # a-2 stayed parked
    s.policy.finish("default/a-1", s.now)
    assert names(s.cycle().admitted) == ["a-2"]


def test_higher_priority_first_then_older_first() -> None:
    text = FLAVOR + strategy("a", 1, "StrictFIFO") + """---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: high}
value: 10
"""
    s = Scenario(text + job("old", "a", created=1) + job("new-high", "a", priority_class="high", created=3) +
                 job("older-high", "a", priority_class="high", created=2))
    assert names(s.cycle().admitted) == ["older-high"]
    s.policy.finish("default/older-high", s.now)
    assert names(s.cycle().admitted) == ["new-high"]


SELECTIVE = FLAVOR + """---
apiVersion: v1
kind: Namespace
metadata: {name: ml, labels: {team: ml}}
---
apiVersion: v1
kind: Namespace
metadata: {name: web}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: ml}
spec:
  queueingStrategy: StrictFIFO
  namespaceSelector: {matchLabels: {team: ml}}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 10}]}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: ml}
spec: {clusterQueue: ml}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: web}
spec: {clusterQueue: ml}
"""


def test_namespace_selector_mismatch_is_parked_even_under_strict_fifo() -> None:
    s = Scenario(SELECTIVE + job("intruder", "q", ns="web", created=1) + job("member", "q", ns="ml", created=2))
    d = s.cycle()
    assert not d.admitted
    assert s.pending()["web/intruder"] == "Workload namespace doesn't match ClusterQueue selector"
    assert names(s.cycle().admitted) == ["ml/member"]  # the mismatch did not block the StrictFIFO queue


def test_a_cluster_queue_without_namespace_selector_admits_nothing() -> None:
    text = FLAVOR + """---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: closed}
spec:
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 10}]}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: default}
spec: {clusterQueue: closed}
"""
    s = Scenario(text + job("w", "q"))
    s.cycle()
    assert s.pending()["w"] == "Workload namespace doesn't match ClusterQueue selector"


def test_default_local_queue_and_workloads_without_any_queue() -> None:
    text = FLAVOR + cq("team", 1, None) + """---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: default, namespace: team-ns}
spec: {clusterQueue: team}
"""
    s = Scenario(text + job("defaulted", None, ns="team-ns", created=1) +
                 job("defaulted-2", None, ns="team-ns", created=2) + job("free", None, ns="elsewhere", cpu="50"))
    d = s.cycle()
    by = {a.workload: a.cluster_queue for a in d.admitted}
    assert by == {"team-ns/defaulted": "team", "elsewhere/free": None}  # free runs without quota
    assert "team-ns/defaulted-2" in s.pending()
    assert s.usage("team") == 1000


def test_missing_local_queue_keeps_the_workload_pending() -> None:
    s = Scenario(FLAVOR + cq("team", 1, None) + job("lost", "nope"))
    s.cycle()
    assert s.pending()["lost"] == "LocalQueue nope doesn't exist"


def test_a_pod_group_waits_for_all_its_pods() -> None:
    pod = """---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels: {{kueue.x-k8s.io/queue-name: team, kueue.x-k8s.io/pod-group-name: g}}
  annotations: {{kueue.x-k8s.io/pod-group-total-count: "3"}}
spec:
  containers: [{{name: c, image: x, resources: {{requests: {{cpu: 1}}}}}}]
"""
    s = Scenario(FLAVOR + cq("team", 10, None) + pod.format(name="g-0") + pod.format(name="g-1"))
    s.cycle()
    assert s.pending()["g"] == "pod group has 2 of 3 pods; Kueue waits for all of them before creating the Workload"
    s2 = Scenario(FLAVOR + cq("team", 10, None) + "".join(pod.format(name=f"g-{i}") for i in range(3)))
    d = s2.cycle()
    assert names(d.admitted) == ["g"] and s2.usage("team") == 3000


def test_stopped_cluster_queue_admits_nothing() -> None:
    s = Scenario(FLAVOR + cq("held", 4, None, spec="\n  stopPolicy: Hold") + job("w", "held"))
    s.cycle()
    assert s.pending()["w"] == "ClusterQueue held is inactive"


def test_hold_and_drain_evicts_what_the_stopped_queue_admitted_and_hold_keeps_it() -> None:
    # Kueue's stopPolicy: Hold admits nothing new and lets what runs run on; HoldAndDrain also evicts every workload
    # the queue admitted (reason ClusterQueueStopped), which then waits there, held, until the queue is resumed (it
    # was read as Hold, its admitted workloads left running, without a word).
    def text(stop: str = "") -> str:
        return (FLAVOR + cq("team", 4, None, spec=stop) + cq("other", 4, None) + job("w", "team", cpu="2", created=1)
                + job("x", "other", cpu="2", created=2))

    for policy in ("Hold", "HoldAndDrain"):
        s = Scenario(text())
        assert names(s.cycle().admitted) == ["w", "x"]
        s.policy.queues_changed(load(text(f"\n  stopPolicy: {policy}")), s.now)
        d = s.cycle()
        if policy == "Hold":
            assert not d.preempted and s.admitted() == {"w", "x"}
            continue
        assert [(p.workload, p.preemptor, p.reason) for p in d.preempted] == [("default/w", "", "ClusterQueueStopped")]
        assert s.admitted() == {"x"}
        assert not s.cycle().preempted and s.admitted() == {"x"}  # (held, not admitted again)
        assert s.pending()["w"] == "ClusterQueue team is inactive"
        s.policy.queues_changed(load(text()), s.now)  # resumed
        assert names(s.cycle().admitted) == ["w"]


def test_partial_admission_shrinks_a_job_to_what_fits() -> None:
    s = Scenario(FLAVOR + cq("team", 3, None) + job("elastic", "team", count=5, min_parallelism=2))
    d = s.cycle()
    assert names(d.admitted) == ["elastic"] and s.usage("team") == 3000
    info = s.policy.info("default/elastic")
    assert info is not None and info.admission is not None and info.admission.podsets[0].count == 3
