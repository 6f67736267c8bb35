"""Which admitted workload preemption takes first (issue 15, item 2).

Kueue orders preemption candidates with ``CandidatesOrdering`` (``pkg/scheduler/preemption/common/ordering.go``):
already evicted first, other ClusterQueues before the preemptor's own, lower priority first, the most recently
*admitted* first, admission being when the quota was reserved (the ``QuotaReserved`` condition's
``lastTransitionTime``, the current time when the status does not record it), then the UID. The cases below are
re-derived from Kueue's ``TestCandidatesOrdering`` and ``TestPreemption`` ("preempt newer workloads with the same
priority"), with creation times, names and document order chosen so that ordering by any of them instead of the
reservation time gives a different answer.
"""

from __future__ import annotations

from gpufleet.scheduling.kueue.preemption import candidate_order
from tests.conftest import manifests
from tests.kueue.scenario import Scenario, job, preempted
from tests.kueue.test_cohorts import FLAVOR, cq
from tests.kueue.test_fair_sharing import FAIR

RECLAIM_ANY = "\n  preemption: {reclaimWithinCohort: Any}"
PRIORITY_ONE = """---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: one}
value: 1
"""


def at(second: int) -> str:
    return f"2024-01-01T00:{second // 60:02d}:{second % 60:02d}Z"


def admitted(name: str, cluster_queue: str, *, cpu: int = 2, priority: int = 0, created: int = 0,
             reserved: int | None = None, evicted: str | None = None, uid: str | None = None,
             conditions: str = "") -> str:
    """A Kueue Workload holding quota in ``cluster_queue`` (its LocalQueue has the same name), as a snapshot of
    the API shows it: ``reserved`` is the QuotaReserved condition's lastTransitionTime (None: no condition)."""
    uid_field = f", uid: {uid}" if uid else ""
    conds = []
    if reserved is not None:
        conds.append(f'  - {{type: QuotaReserved, status: "True", reason: QuotaReserved, message: "", '
                     f'lastTransitionTime: "{at(reserved)}"}}')
    if evicted is not None:
        conds.append(f'  - {{type: Evicted, status: "True", reason: {evicted}, message: "", '
                     f'lastTransitionTime: "{at(0)}"}}')
    cond_block = ("\n  conditions:\n" + "\n".join(conds)) if conds else ""
    return f"""---
apiVersion: kueue.x-k8s.io/v1beta1
kind: Workload
metadata: {{name: {name}, namespace: default, creationTimestamp: "{at(created)}"{uid_field}}}
spec:
  queueName: {cluster_queue}
  priority: {priority}
  podSets:
  - name: main
    count: 1
    template:
      spec:
        containers:
        - name: c
          image: x
          resources: {{requests: {{cpu: "{cpu}"}}}}
status:
  admission:
    clusterQueue: {cluster_queue}
    podSetAssignments:
    - name: main
      flavors: {{cpu: default}}
      resourceUsage: {{cpu: "{cpu}"}}
      count: 1{cond_block}{conditions}
"""


def ordered(s: Scenario, preemptor_cq: str) -> list[str]:
    infos = [i for by_key in s.policy.state.admitted.values() for i in by_key.values()]
    return [i.workload.name for i in sorted(infos, key=lambda i: candidate_order(i, preemptor_cq))]


def test_candidates_are_ordered_by_every_kueue_key_in_turn() -> None:
    # TestCandidatesOrdering: evicted, then the other queue's, then lower priority, then the most recently
    # reserved (an unrecorded reservation counts as now), then the UID.
    text = FLAVOR + cq("self", 100) + cq("other", 100)
    text += admitted("high", "self", priority=10, reserved=10)
    text += admitted("low", "self", priority=-10, reserved=10)
    text += admitted("other", "other", priority=10, reserved=10)
    text += admitted("evicted", "self", priority=10, reserved=10, evicted="Preempted")
    # Same reservation time: the UID decides, not the name nor the creation time nor the document order.
    text += admitted("old-a", "self", reserved=10, created=1, uid="uid-2")
    text += admitted("old-b", "self", reserved=10, created=2, uid="uid-1")
    # Created first, reserved last: the reservation counts.
    text += admitted("current", "self", reserved=11, created=0)
    text += admitted("unrecorded", "self", created=0)
    s = Scenario(text)
    assert ordered(s, "self") == ["evicted", "other", "low", "unrecorded", "current", "old-b", "old-a", "high"]
    # Seen from the other queue, its own workload goes last of the non-evicted ones.
    assert ordered(s, "other") == ["evicted", "low", "unrecorded", "current", "old-b", "old-a", "high", "other"]


def test_a_quota_reserved_condition_that_is_not_true_records_no_reservation() -> None:
    text = FLAVOR + cq("self", 100)
    text += admitted("recorded", "self", reserved=30)
    text += admitted("pending-condition", "self", conditions=(
        '\n  conditions:\n  - {type: QuotaReserved, status: "False", reason: Pending, message: "", '
        f'lastTransitionTime: "{at(50)}"}}'))
    s = Scenario(text)
    # A False condition says nothing about when the quota was reserved: Kueue takes the current time.
    assert ordered(s, "self") == ["pending-condition", "recorded"]


def test_an_unreadable_reservation_time_is_an_error_that_names_the_field() -> None:
    text = FLAVOR + cq("self", 100) + admitted("wl", "self", reserved=10).replace(at(10), "yesterday")
    errors = manifests(text).problems.errors
    assert len(errors) == 1
    err = errors[0]
    assert err.field is not None and err.field.endswith("status.conditions[0].lastTransitionTime")
    assert "'yesterday' is not an RFC 3339 time" in err.message and err.name == "default/wl"
    assert err.fix and "lastTransitionTime" in err.fix


def test_preempt_newer_workloads_with_the_same_priority_by_reservation_time() -> None:
    # TestPreemption "preempt newer workloads with the same priority": both candidates were created at the same
    # time, after the preemptor; the one whose quota was reserved last goes. It comes first in the input and
    # its name sorts last, so neither input order nor names could have chosen it.
    starve = cq("starve", 6, None, spec="\n  preemption: {withinClusterQueue: LowerOrNewerEqualPriority}")
    text = FLAVOR + starve
    text += admitted("wl1", "starve", priority=2, created=20, reserved=20)
    text += admitted("wl3", "starve", priority=1, created=20, reserved=21)
    text += admitted("wl2", "starve", priority=1, created=20, reserved=20)
    s = Scenario(text + PRIORITY_ONE)
    s.add(job("incoming", "starve", cpu="2", created=5, priority_class="one"))
    d = s.cycle()
    assert preempted(d) == {"wl3": ("incoming", "InClusterQueue")}


def reclaim_scenario(extra: str = "") -> Scenario:
    # b borrows 4 of a's quota with two equal-priority workloads; b-early was created first but its quota was
    # reserved last (it was requeued after an eviction, say), b-late the other way round.
    text = FLAVOR + extra + cq("a", 4, spec=RECLAIM_ANY) + cq("b", 2, spec=RECLAIM_ANY)
    text += admitted("b-base", "b", cpu=2, created=0, reserved=1)
    text += admitted("b-early", "b", cpu=2, created=1, reserved=40)
    text += admitted("b-late", "b", cpu=2, created=30, reserved=35)
    s = Scenario(text)
    assert s.usage("b") == 6000
    s.add(job("a-2", "a", cpu="2", created=50))
    return s


def test_classical_reclaim_takes_the_most_recently_reserved_borrower_workload() -> None:
    s = reclaim_scenario()
    d = s.cycle()
    assert preempted(d) == {"b-early": ("a-2", "InCohortReclamation")}


def test_fair_sharing_takes_the_most_recently_reserved_workload_of_the_target_queue() -> None:
    s = reclaim_scenario(FAIR)
    d = s.cycle()
    assert preempted(d) == {"b-early": ("a-2", "InCohortFairSharing")}


def test_a_workload_being_evicted_is_taken_first_even_at_a_higher_priority() -> None:
    text = FLAVOR + cq("a", 4, spec=RECLAIM_ANY) + cq("b", 0, spec=RECLAIM_ANY)
    text += admitted("b-running", "b", priority=0, created=0, reserved=30)
    text += admitted("b-leaving", "b", priority=5, created=0, reserved=1, evicted="PodsReadyTimeout")
    s = Scenario(text)
    s.add(job("a-2", "a", cpu="2", created=50))
    d = s.cycle()
    # Its eviction is already under way: no new one is issued, the preemptor waits for it.
    assert not d.preempted
    assert "Pending the preemption of 1 workload(s)" in s.pending()["a-2"]
    assert s.policy.info("default/b-leaving").evicting == "PodsReadyTimeout"  # type: ignore[union-attr]
    assert s.policy.info("default/b-running").evicting is None  # type: ignore[union-attr]
