"""ClusterQueues' and Cohorts' quotas changed (an administrator giving a team more, or less), a queue put on hold
and released, its preemption policies or namespace selector changed, taken by a cycle that carries on
(KueuePolicy.queues_changed): each cycle decides what a rebuild on the same snapshot decides. Anything else of a
ClusterQueue or Cohort changed (a ClusterQueue deleted, a Cohort object that joins trees or names a cohort nothing
else makes, a queue's cohort, flavors, queueing strategy) takes a full cycle; a Cohort object created for a cohort
its ClusterQueues make, or deleted from it, is taken in place.

In process, as tests/kube/test_carried_cycles.py."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live_env import NS, cluster_queue, local_queue, node, pod, priority_class, stamp
from test_carried_cycles import Cluster, _carried_as_rebuilt, first_cycle, outcome, runner
from test_carried_evictions import _rebuilt, _step, preempting
from test_carried_references import _land_assumed, decided_as_rebuilt
from workload_env import admission_check

from gpufleet.k8s import resources as r
from gpufleet.live.cycle import CycleRunner
from gpufleet.scheduling.kueue.memo import head_key

JsonDict = dict[str, Any]


def _gpu_quota(cq: JsonDict) -> JsonDict:
    [gpu] = [q for q in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"] if q["name"] == "nvidia.com/gpu"]
    return dict(gpu)


def _set_gpu_quota(c: Cluster, name: str, **fields: Any) -> None:
    """The ClusterQueue ``name``'s GPU quota given ``fields`` (nominalQuota, borrowingLimit, lendingLimit; None
    removes one)."""
    cq = json.loads(json.dumps(c.cache.get(r.CLUSTER_QUEUES, name)))
    for q in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]:
        if q["name"] == "nvidia.com/gpu":
            for k, v in fields.items():
                if v is None:
                    q.pop(k, None)
                else:
                    q[k] = v
    c.put(r.CLUSTER_QUEUES, cq, "MODIFIED")


def _set_spec(c: Cluster, name: str, **fields: Any) -> None:
    """The ClusterQueue ``name``'s spec given ``fields`` (``queueingStrategy="StrictFIFO"``...)."""
    cq = json.loads(json.dumps(c.cache.get(r.CLUSTER_QUEUES, name)))
    cq["spec"].update(fields)
    c.put(r.CLUSTER_QUEUES, cq, "MODIFIED")


def _cohort(name: str, gpus: int) -> JsonDict:
    return {"apiVersion": "gpufleet.io/v1alpha1", "kind": "Cohort", "metadata": {"name": name},
            "spec": {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                {"name": "gpu", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}]}}


def _two_teams(c: Cluster, gpus: int, gpus2: int, cohort_gpus: int) -> None:
    """``cq`` and ``cq2`` (its LocalQueue ``lq2``) in cohort ``company``, which has a Cohort object of its own."""
    c.put(r.CLUSTER_QUEUES, cluster_queue("cq", gpus, cpu="100000", cohort="company"), "MODIFIED")
    c.put(r.CLUSTER_QUEUES, cluster_queue("cq2", gpus2, cpu="100000", cohort="company"))
    c.put(r.LOCAL_QUEUES, local_queue("lq2", "cq2"))
    c.put(r.COHORTS, _cohort("company", cohort_gpus))


def _set_cohort_quota(c: Cluster, gpus: int) -> None:
    """The Cohort object ``company`` given ``gpus`` of quota; created if it is not there."""
    cohort = _cohort("company", gpus)
    was = c.cache.get(r.COHORTS, "company")
    if was is None:
        c.put(r.COHORTS, cohort)
        return
    cohort["metadata"]["uid"] = was["metadata"]["uid"]
    c.put(r.COHORTS, cohort, "MODIFIED")


def _toggle_cohort_object(c: Cluster, gpus: int) -> None:
    """The Cohort object ``company`` deleted (its cohort left implicit), or created with ``gpus`` of quota."""
    was = c.cache.get(r.COHORTS, "company")
    if was is None:
        _set_cohort_quota(c, gpus)
    else:
        c.put(r.COHORTS, was, "DELETED")


def _one_queue_full() -> tuple[Cluster, CycleRunner, float]:
    """``cq`` has 4 GPUs of quota, held by ``run``; ``wait`` asks 4 more, on an 8-GPU node."""
    c = Cluster()
    c.put(r.CLUSTER_QUEUES, cluster_queue("cq", 4, cpu="100000"), "MODIFIED")
    c.put(r.NODES, node("n0", gpus=8))
    c.put(r.PODS, pod("run", gpus=4, queue="lq", node_name="n0"))
    c.put(r.PODS, pod("wait", gpus=4, queue="lq"))
    run = runner(c)
    now = time.time()
    first = first_cycle(run, now)
    assert f"{NS}/wait" in outcome(first)[1]
    return c, run, now


def test_a_quota_raised_admits_what_waited_for_it_carried_on() -> None:
    c, run, now = _one_queue_full()
    _set_gpu_quota(c, "cq", nominalQuota=8)
    d = _carried_as_rebuilt(run, c, now + 1)
    assert outcome(d)[0] == {f"{NS}/wait"}


def test_a_quota_lowered_keeps_what_runs_and_holds_back_what_comes() -> None:
    """Kueue keeps a workload admitted over a lowered quota; a new one waits for the usage to come down."""
    c, run, now = _one_queue_full()
    _set_gpu_quota(c, "cq", nominalQuota=2)
    c.put(r.PODS, pod("small", gpus=1, queue="lq"))
    d = _carried_as_rebuilt(run, c, now + 1)
    assert not outcome(d)[0] and f"{NS}/small" in outcome(d)[1]
    kept = run.kept
    assert kept is not None and kept.policy.info(f"{NS}/run") is not None
    assert kept.policy.info(f"{NS}/run").admission is not None  # type: ignore[union-attr]


@pytest.mark.parametrize("change", ["flavor", "deleted", "cohort"])
def test_anything_else_of_the_queues_takes_a_full_cycle(change: str) -> None:
    c, run, now = _one_queue_full()
    cq = json.loads(json.dumps(c.cache.get(r.CLUSTER_QUEUES, "cq")))
    if change == "flavor":
        c.put(r.RESOURCE_FLAVORS, {**json.loads(json.dumps(c.cache.get(r.RESOURCE_FLAVORS, "gpu"))),
                                   "spec": {"nodeLabels": {"pool": "a"}}}, "MODIFIED")
    elif change == "deleted":
        c.put(r.CLUSTER_QUEUES, cq, "DELETED")
    else:
        cq["spec"]["cohort"] = "company"
        c.put(r.CLUSTER_QUEUES, cq, "MODIFIED")
    assert not decided_as_rebuilt(run, c, now + 1)


def test_a_team_onboarded_carried_on() -> None:
    """A namespace, its ClusterQueue (in the cohort of the others) and LocalQueue, and the team's first pods, in one
    batch, then more pods: each cycle carries on and decides as a rebuild does."""
    c = Cluster()
    c.put(r.CLUSTER_QUEUES, cluster_queue("cq", 4, cpu="100000", cohort="company"), "MODIFIED")
    c.put(r.NODES, node("n0", gpus=8))
    c.put(r.PODS, pod("run", gpus=4, queue="lq", node_name="n0"))
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    c.put(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"}})
    c.put(r.CLUSTER_QUEUES, cluster_queue("cq-b", 2, cpu="100000", cohort="company"))
    c.put(r.LOCAL_QUEUES, local_queue("lq-b", "cq-b", ns="team-b"))
    c.put(r.PODS, pod("first", gpus=2, queue="lq-b", ns="team-b"))
    d = _carried_as_rebuilt(run, c, now + 1)
    assert outcome(d)[0] == {"team-b/first"}
    c.put(r.PODS, pod("second", gpus=2, queue="lq-b", ns="team-b"))  # over its quota, the cohort lends none
    d = _carried_as_rebuilt(run, c, now + 2)
    assert not outcome(d)[0] and "team-b/second" in outcome(d)[1]


def test_a_queue_held_then_released_carried_on() -> None:
    """``stopPolicy: Hold`` (Kueue's ``kubectl kueue stop clusterqueue``): what runs runs on, nothing new is
    admitted; back to ``None``, what waited is admitted."""
    c, run, now = _one_queue_full()
    _set_gpu_quota(c, "cq", nominalQuota=8)
    _set_spec(c, "cq", stopPolicy="Hold")
    d = _carried_as_rebuilt(run, c, now + 1)
    assert not outcome(d)[0] and "inactive" in outcome(d)[1][f"{NS}/wait"]
    _set_spec(c, "cq", stopPolicy="None")
    d = _carried_as_rebuilt(run, c, now + 2)
    assert outcome(d)[0] == {f"{NS}/wait"}


def test_a_queue_held_and_drained_evicts_what_it_admitted_carried_on_as_rebuilt() -> None:
    """``stopPolicy: HoldAndDrain``: what the queue admitted is evicted (Kueue's ClusterQueueStopped), carried on as a
    rebuild evicts it; nothing is admitted there until the queue is resumed."""
    c, run, now = _one_queue_full()
    _set_gpu_quota(c, "cq", nominalQuota=8)
    _set_spec(c, "cq", stopPolicy="HoldAndDrain")
    d = _carried_as_rebuilt(run, c, now + 1)
    assert not outcome(d)[0]
    assert [(v.workload, v.preemptor, v.reason) for v in d.victims] == [(f"{NS}/run", "", "ClusterQueueStopped")]
    assert "ClusterQueue cq is stopped" in d.victims[0].message
    fresh = runner(c, run.settings)
    fresh.assumed = run.assumed.copy()
    rebuilt = fresh._decide_isolating(c.cache.snapshot(), now + 1)
    assert [(v.workload, v.reason) for v in rebuilt.victims] == [(f"{NS}/run", "ClusterQueueStopped")]


def test_a_status_write_and_a_label_change_change_nothing() -> None:
    c, run, now = _one_queue_full()
    cq = json.loads(json.dumps(c.cache.get(r.CLUSTER_QUEUES, "cq")))
    cq["metadata"]["labels"] = {"team": "ml"}
    cq["status"] = {"pendingWorkloads": 1}
    c.put(r.CLUSTER_QUEUES, cq, "MODIFIED")
    d = _carried_as_rebuilt(run, c, now + 1)
    assert not outcome(d)[0]


def _borrowing_teams(cohort_object: bool) -> tuple[Cluster, CycleRunner, float]:
    """``cq`` (4 GPUs, all held by ``run``) and ``cq2`` (none) in cohort ``company``, which has a Cohort object of no
    quota or none at all; ``wait`` asks 4 GPUs of ``cq2``."""
    c = Cluster()
    _two_teams(c, 4, 0, 0)
    if not cohort_object:
        c.put(r.COHORTS, c.cache.get(r.COHORTS, "company"), "DELETED")  # type: ignore[arg-type]
    c.put(r.NODES, node("n0", gpus=8))
    c.put(r.PODS, pod("run", gpus=4, queue="lq", node_name="n0"))
    c.put(r.PODS, pod("wait", gpus=4, queue="lq2"))
    run = runner(c)
    now = time.time()
    assert f"{NS}/wait" in outcome(first_cycle(run, now))[1]
    return c, run, now


def test_a_cohorts_quota_raised_lets_its_members_borrow_carried_on() -> None:
    """Two teams in cohort ``company``, whose own Cohort object lends 4 GPUs more once raised."""
    c, run, now = _borrowing_teams(cohort_object=True)
    _set_cohort_quota(c, 4)
    d = _carried_as_rebuilt(run, c, now + 1)
    assert outcome(d)[0] == {f"{NS}/wait"}


QUOTA = st.sampled_from([0, 1, 2, 4, 8])
LIMIT = st.one_of(st.none(), st.sampled_from([0, 1, 2, 4]))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions=st.lists(st.one_of(
    st.tuples(st.just("quota"), st.tuples(st.sampled_from(["cq", "cq2"]), QUOTA, LIMIT, LIMIT)),
    st.tuples(st.just("cohort"), QUOTA),
    st.tuples(st.just("cohortobj"), QUOTA),
    st.tuples(st.just("preemption"), st.sampled_from(["cq", "cq2"])),
    st.tuples(st.just("hold"), st.sampled_from(["cq", "cq2"])),
    st.tuples(st.just("strategy"), st.sampled_from(["cq", "cq2"])),
    st.tuples(st.just("add"), st.sampled_from([None, "company"])),  # a third ClusterQueue and its LocalQueue
    st.tuples(st.just("pod3"), st.integers(1, 4)),
    st.tuples(st.just("selector"), st.sampled_from(["cq", "cq2"])),
    st.tuples(st.just("pod"), st.tuples(st.sampled_from(["lq", "lq2"]), st.integers(1, 4))),
    st.tuples(st.just("finish"), st.integers(0, 9))), min_size=1, max_size=10))
def test_quotas_changing_among_pods_arriving_and_ending_are_decided_as_rebuilt(
        actions: list[tuple[str, Any]]) -> None:
    """Two ClusterQueues in a cohort with a Cohort object of its own, their quotas, borrowing and lending limits, the
    cohort's quota (its object deleted and created again), the queues' preemption policies, holds, queueing
    strategies and namespace selectors changed in any order among pods arriving and ending; each cycle decides
    what a rebuild decides, carried on or not."""
    c = Cluster()
    _two_teams(c, 4, 2, 2)
    c.put(r.NODES, node("n0", gpus=8))
    c.put(r.NODES, node("n1", gpus=4))
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    made = 0
    for step_no, (kind, arg) in enumerate(actions, 1):
        if kind == "quota":
            name, nominal, borrowing, lending = arg
            _set_gpu_quota(c, name, nominalQuota=nominal, borrowingLimit=borrowing, lendingLimit=lending)
        elif kind == "cohort":
            _set_cohort_quota(c, arg)
        elif kind == "cohortobj":
            _toggle_cohort_object(c, arg)
        elif kind == "preemption":
            cq = json.loads(json.dumps(c.cache.get(r.CLUSTER_QUEUES, arg)))
            was = (cq["spec"].get("preemption") or {}).get("reclaimWithinCohort")
            cq["spec"]["preemption"] = {"reclaimWithinCohort": "Never" if was == "Any" else "Any"}
            c.put(r.CLUSTER_QUEUES, cq, "MODIFIED")
        elif kind == "add":
            if c.cache.get(r.CLUSTER_QUEUES, "cq3") is None:
                c.put(r.CLUSTER_QUEUES, cluster_queue("cq3", 2, cpu="100000", cohort=arg))
                c.put(r.LOCAL_QUEUES, local_queue("lq3", "cq3"))
        elif kind == "pod3":
            if c.cache.get(r.LOCAL_QUEUES, f"{NS}/lq3") is not None:
                c.put(r.PODS, pod(f"p{made}", gpus=arg, queue="lq3"))
                made += 1
        elif kind in ("hold", "selector", "strategy"):
            cq = json.loads(json.dumps(c.cache.get(r.CLUSTER_QUEUES, arg)))
            if kind == "strategy":
                cq["spec"]["queueingStrategy"] = ("BestEffortFIFO" if cq["spec"].get("queueingStrategy")
                                                  == "StrictFIFO" else "StrictFIFO")
            elif kind == "hold":
                following = {"Hold": "HoldAndDrain", "HoldAndDrain": "None"}  # (None -> Hold -> drained -> None)
                cq["spec"]["stopPolicy"] = following.get(cq["spec"].get("stopPolicy", "None"), "Hold")
            else:
                cq["spec"]["namespaceSelector"] = {} if cq["spec"]["namespaceSelector"] else {
                    "matchLabels": {"team": "elsewhere"}}
            c.put(r.CLUSTER_QUEUES, cq, "MODIFIED")
        elif kind == "pod":
            queue, gpus = arg
            c.put(r.PODS, pod(f"p{made}", gpus=gpus, queue=queue))
            made += 1
        else:
            running = [k for k in sorted(c.cache.keys(r.PODS))
                       if (o := c.cache.get(r.PODS, k)) is not None and (o.get("status") or {}).get("phase")
                       == "Running"]
            if running:
                obj = json.loads(json.dumps(c.cache.get(r.PODS, running[arg % len(running)])))
                obj["status"] = {"phase": "Succeeded"}
                c.put(r.PODS, obj, "MODIFIED")
        decided_as_rebuilt(run, c, now + step_no)
        _land_assumed(run, c)


def test_a_queue_created_in_a_cohort_lends_to_what_waits_there_carried_on() -> None:
    """Its nominal quota is the cohort's to lend: what waits in the cohort's other queues may fit now (a review
    found it left parked until something else was released)."""
    c2 = Cluster()
    c2.put(r.CLUSTER_QUEUES, cluster_queue("cq", 4, cpu="100000", cohort="company"), "MODIFIED")
    c2.put(r.NODES, node("n0", gpus=8))
    c2.put(r.PODS, pod("run", gpus=4, queue="lq", node_name="n0"))
    c2.put(r.PODS, pod("wait", gpus=4, queue="lq"))
    run2 = runner(c2)
    now = time.time()
    first_cycle(run2, now)
    assert decided_as_rebuilt(run2, c2, now + 0.5)  # parked again by the carried round
    c2.put(r.CLUSTER_QUEUES, cluster_queue("cq-b", 4, cpu="100000", cohort="company"))
    d = _carried_as_rebuilt(run2, c2, now + 1)
    assert outcome(d)[0] == {f"{NS}/wait"}


def test_a_workload_moved_twice_in_one_batch_is_counted_once() -> None:
    """Its LocalQueue named a ClusterQueue not there yet; the queue created and the LocalQueue pointed elsewhere in
    one batch (a review found the counts off by one in both queues, for good)."""
    c = Cluster()
    c.put(r.NODES, node("n0", gpus=8))
    c.put(r.CLUSTER_QUEUES, cluster_queue("cq", 0, cpu="100000"), "MODIFIED")
    c.put(r.CLUSTER_QUEUES, cluster_queue("cq2", 4, cpu="100000"))
    c.put(r.LOCAL_QUEUES, local_queue("lq-b", "cq-b"))
    c.put(r.PODS, pod("w", gpus=1, queue="lq-b"))
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    c.put(r.CLUSTER_QUEUES, cluster_queue("cq-b", 0, cpu="100000"))
    lq = json.loads(json.dumps(c.cache.get(r.LOCAL_QUEUES, f"{NS}/lq-b")))
    lq["spec"]["clusterQueue"] = "cq2"
    c.put(r.LOCAL_QUEUES, lq, "MODIFIED")
    d = _carried_as_rebuilt(run, c, now + 1)
    assert outcome(d)[0] == {f"{NS}/w"}


def test_a_quota_raised_with_an_admission_check_added_holds_as_rebuilt() -> None:
    """Kueue admits nothing of a ClusterQueue whose admission checks are not Ready; a check added in the same
    change as a quota raised must hold ``wait`` back as a rebuild does (a review found the carried cycle admitting
    it, the checks ignored)."""
    c, run, now = _one_queue_full()
    c.put(r.KUEUE_ADMISSION_CHECKS, admission_check("provisioning", "kueue.x-k8s.io/provisioning-request"))
    assert not decided_as_rebuilt(run, c, now + 0.5)  # (a check nothing names yet: a full cycle reads it)
    cq = json.loads(json.dumps(c.cache.get(r.CLUSTER_QUEUES, "cq")))
    cq["spec"]["admissionChecks"] = ["provisioning"]
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"] = [
        {**q, "nominalQuota": 8} if q["name"] == "nvidia.com/gpu" else q
        for q in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]]
    c.put(r.CLUSTER_QUEUES, cq, "MODIFIED")
    assert not decided_as_rebuilt(run, c, now + 1)  # a full cycle, which reads the checks
    assert run.kept is not None and run.kept.policy.info(f"{NS}/wait").admission is None  # type: ignore[union-attr]


def test_the_memo_made_again_keeps_the_shape_ids_its_workloads_hold() -> None:
    """A quota change makes the nomination memo again; the waiting workloads keep the shape ids the old one gave
    them, so the new one must give the same ids to the same shapes and never one of them to another shape (a
    review found ids counted from 1 again: a workload recalled another's nomination)."""
    c, run, now = _one_queue_full()
    c.put(r.PODS, pod("other", gpus=2, queue="lq"))  # a second shape waiting
    d = _carried_as_rebuilt(run, c, now + 1)
    assert {f"{NS}/wait", f"{NS}/other"} <= set(outcome(d)[1])
    kept = run.kept
    assert kept is not None
    held = {key: info.shape for key in (f"{NS}/wait", f"{NS}/other")
            if (info := kept.policy.info(key)) is not None and info.shape is not None}
    assert len(held) == 2 and len(set(held.values())) == 2  # the memo gave both an id
    _set_gpu_quota(c, "cq", nominalQuota=5)  # one GPU more, which none of the waiting fits in
    c.put(r.PODS, pod("third", gpus=3, queue="lq"))  # a new shape, interned by the new memo
    _carried_as_rebuilt(run, c, now + 2)
    memo = kept.policy.state.memo
    assert memo is not None
    for key, shape in held.items():
        info = kept.policy.info(key)
        assert info is not None and memo.shapes.id_of(head_key(info)) == shape
    third = kept.policy.info(f"{NS}/third")
    assert third is not None and memo.shapes.id_of(head_key(third)) not in held.values()


def test_a_cohort_object_created_and_deleted_carried_on() -> None:
    """Kueue's Cohort object given to a cohort its ClusterQueues made (to give it quota of its own), and deleted
    again: the quota tree takes it in place. What borrowed it runs on once it is gone, as Kueue keeps what it
    admitted; what comes next waits."""
    c, run, now = _borrowing_teams(cohort_object=False)
    c.put(r.COHORTS, _cohort("company", 4))
    d = _carried_as_rebuilt(run, c, now + 1)
    assert outcome(d)[0] == {f"{NS}/wait"}
    _land_assumed(run, c)
    c.put(r.COHORTS, c.cache.get(r.COHORTS, "company"), "DELETED")  # type: ignore[arg-type]
    c.put(r.PODS, pod("more", gpus=1, queue="lq2"))
    d = _carried_as_rebuilt(run, c, now + 2)
    assert not outcome(d)[0] and f"{NS}/more" in outcome(d)[1]
    kept = run.kept
    assert kept is not None and kept.policy.info(f"{NS}/wait").admission is not None  # type: ignore[union-attr]


@pytest.mark.parametrize("change", ["parent", "unused", "parent-deleted"])
def test_a_cohort_object_that_changes_the_trees_takes_a_full_cycle(change: str) -> None:
    """A Cohort object with a parent joins trees; one naming a cohort nothing uses adds a node: a new policy."""
    c, run, now = _borrowing_teams(cohort_object=False)
    if change == "parent":
        cohort = _cohort("company", 4)
        cohort["spec"]["parentName"] = "org"
        c.put(r.COHORTS, cohort)
    elif change == "unused":
        c.put(r.COHORTS, _cohort("elsewhere", 4))
    else:
        cohort = _cohort("company", 4)
        cohort["spec"]["parentName"] = "org"
        c.put(r.COHORTS, cohort)
        assert not decided_as_rebuilt(run, c, now + 0.5)
        c.put(r.COHORTS, c.cache.get(r.COHORTS, "company"), "DELETED")  # type: ignore[arg-type]
    assert not decided_as_rebuilt(run, c, now + 1)


def test_a_queueing_strategy_changed_carried_on() -> None:
    """StrictFIFO: a head that does not fit blocks the queue; BestEffortFIFO lets what fits behind it in; and back."""
    c, run, now = _one_queue_full()  # (``wait``, 4 GPUs, waits for ``run``'s)
    _set_spec(c, "cq", queueingStrategy="StrictFIFO")
    _set_gpu_quota(c, "cq", nominalQuota=6)
    c.put(r.PODS, pod("small", gpus=1, queue="lq", created="2026-01-02T00:00:00Z"))
    d = _carried_as_rebuilt(run, c, now + 1)
    assert not outcome(d)[0], "behind a head that does not fit, under StrictFIFO"
    _set_spec(c, "cq", queueingStrategy="BestEffortFIFO")
    d = _carried_as_rebuilt(run, c, now + 2)
    assert outcome(d)[0] == {f"{NS}/small"}


def test_a_head_waiting_for_its_preemptions_is_not_first_any_more_under_strictfifo() -> None:
    """Under BestEffortFIFO a head waiting for its victims to go stays first (Kueue's sticky workload); its queue
    turned StrictFIFO, it ranks by priority again, as in a queue made anew: the higher priority that came since
    takes the room (without that, the kept policy admitted the sticky one, which the other then preempted)."""
    c = Cluster()
    c.put(r.CLUSTER_QUEUES, cluster_queue("cq", 4, cpu="100000", preemption={"withinClusterQueue": "LowerPriority"}),
          "MODIFIED")
    for name, value in (("low", 1), ("mid", 50), ("high", 100)):
        c.put(r.PRIORITY_CLASSES, priority_class(name, value))
    c.put(r.NODES, node("n0", gpus=8))
    c.put(r.PODS, pod("lo", gpus=4, queue="lq", priority_class="low", node_name="n0", created=stamp(100.0)))
    run, now = preempting(c, "p", "lo", gpus=4, priority_class="mid")
    _set_spec(c, "cq", queueingStrategy="StrictFIFO")
    c.put(r.PODS, pod("h", gpus=4, queue="lq", priority_class="high", created=stamp(now + 1)))
    for step_no in (2, 3):
        rebuilt = _rebuilt(c, run, now + step_no)
        d, carried = _step(run, now + step_no)
        assert carried and outcome(d)[0] == outcome(rebuilt)[0]
        if step_no == 2:  # the victim's pod gone
            c.put(r.PODS, c.cache.get(r.PODS, f"{NS}/lo"), "DELETED")  # type: ignore[arg-type]
    assert outcome(d)[0] == {f"{NS}/h"}
