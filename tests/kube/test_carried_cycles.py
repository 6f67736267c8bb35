"""Cycles that carry on from the last one (gpufleet.live.increment) decide what a full rebuild decides.

In process, no API server: an ObjectCache filled by hand, a CycleRunner whose writes are never carried out. A
first cycle is a full one; pods created after it are decided by carrying on from it, and, on the same snapshot,
by a second runner that rebuilds everything. Placements may differ where nodes tie (each keeps its own random
tie-breaking), so the comparison is on what users see: which workloads are admitted, which wait and why, and
that no node or GPU is handed out twice."""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live_env import NS, cluster_queue, fast_settings, flavor, local_queue, node, pod, priority_class, stamp
from workload_env import job as job_object
from workload_env import job_pods

from gpufleet.api.objects import PodsReadyPolicy, SchedulerConfig
from gpufleet.k8s import resources as r
from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.informer import ObjectCache
from gpufleet.live import gangs
from gpufleet.live.cycle import CycleRunner, _Decided
from gpufleet.live.increment import UNJOINED_WAIT
from gpufleet.live.queuestatus import QueueCounts
from gpufleet.live.recorder import Recorder
from gpufleet.scheduler_metrics import SchedulerMetrics

JsonDict = dict[str, Any]
JOBS = next(res for res in r.WORKLOAD_RESOURCES if (res.group, res.kind) == ("batch", "Job"))


class Cluster:
    def __init__(self) -> None:
        self.cache = ObjectCache()
        self._rv = itertools.count(1)
        self.put(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        self.put(r.RESOURCE_FLAVORS, flavor())
        self.put(r.CLUSTER_QUEUES, cluster_queue("cq", 10_000, cpu="100000"))
        self.put(r.LOCAL_QUEUES, local_queue("lq", "cq"))

    def put(self, res: r.ResourceType, obj: JsonDict, event: str = "ADDED") -> None:
        meta = obj["metadata"]
        meta["resourceVersion"] = str(next(self._rv))
        meta.setdefault("uid", f"uid-{meta.get('namespace', '')}-{meta['name']}")
        self.cache.apply(res, event, obj)


def runner(cluster: Cluster, settings: Any = None) -> CycleRunner:
    # Never started and never asked to write: the client points nowhere.
    return CycleRunner(KubeClient(host="http://127.0.0.1:9"), cluster.cache,
                       settings if settings is not None else fast_settings(cycle_period=3600.0),
                       identity="t", metrics=SchedulerMetrics(), may_write=lambda: False)


def started(gpus_per_node: list[int], held: list[int], backlog: int) -> tuple[Cluster, CycleRunner, float]:
    """:func:`build`'s cluster, a runner on it, and its first (full) cycle run and kept: when it ran."""
    c = build(gpus_per_node, held, backlog)
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    return c, run, now


def first_cycle(run: CycleRunner, now: float) -> _Decided:
    """A full cycle, kept as run() keeps it (its admissions assumed as run() assumes them)."""
    snapshot = run.cache.snapshot()
    assert run._carry_on(snapshot, now) is None  # nothing kept yet
    return _finish_cycle(run, snapshot, None, now)


def step(run: CycleRunner, now: float) -> tuple[_Decided, bool]:
    """One cycle as run() decides and keeps it, without its writes: (decisions, carried on)."""
    snapshot = run.cache.snapshot()
    carried = run._carry_on(snapshot, now)
    return _finish_cycle(run, snapshot, carried, now), carried is not None


def _finish_cycle(run: CycleRunner, snapshot: Any, d: _Decided | None, now: float) -> _Decided:
    if d is None:
        run._last_full = run._statuses_at = now
        d = run._decide_isolating(snapshot, now)
    run._assume(d.world, d.jobs, now)
    run._after_hand_off(d)
    run._keep(d, snapshot, run._keepable(d, d.victims, None))
    return d


def land(c: Cluster, name: str, node_name: str) -> None:
    """The Binding of ``name`` lands: the cache shows it on ``node_name``."""
    obj = json.loads(json.dumps(c.cache.get(r.PODS, f"{NS}/{name}")))
    obj["spec"]["nodeName"] = node_name
    c.put(r.PODS, obj, "MODIFIED")


def _nonzero(counts: QueueCounts) -> dict[str, Any]:
    def clean(values: dict[Any, Any]) -> dict[Any, Any]:
        cleaned = {k: (clean(v) if isinstance(v, dict) else v) for k, v in values.items()}
        return {k: v for k, v in cleaned.items() if v}
    return {name: clean(getattr(counts, name)) for name in ("cq_pending", "cq_admitted", "lq_pending",
                                                             "lq_admitted", "lq_usage")}


def outcome(d: _Decided) -> tuple[set[str], dict[str, str]]:
    return {a.workload for a in d.plan.admitted}, dict(d.plan.pending)


def build(gpus_per_node: list[int], held: list[int], backlog: int) -> Cluster:
    """Nodes with ``held`` GPUs each taken by one-GPU pods, ours and, every third, another scheduler's."""
    c = Cluster()
    for i, (gpus, busy) in enumerate(zip(gpus_per_node, held, strict=True)):
        c.put(r.NODES, node(f"n{i}", gpus=gpus))
        for j in range(min(busy, gpus)):
            scheduler = "default-scheduler" if j % 3 == 2 else "gpufleet"
            c.put(r.PODS, pod(f"run-{i}-{j}", queue="lq", node_name=f"n{i}", scheduler=scheduler))
    for k in range(backlog):
        c.put(r.PODS, pod(f"big-{k}", gpus=16, queue="lq", created=f"2026-01-01T00:00:{k:02d}Z"))
    return c


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gpus_per_node=st.lists(st.integers(1, 8), min_size=1, max_size=5),
       held=st.lists(st.integers(0, 8), min_size=5, max_size=5),
       backlog=st.integers(0, 4), arrivals=st.integers(1, 12),
       ends=st.lists(st.sampled_from(["deleted", "Succeeded", "Failed", "terminating"]), max_size=6),
       gangs=st.lists(st.integers(2, 4), max_size=3),
       foreign=st.lists(st.tuples(st.integers(0, 4), st.booleans()), max_size=4))
def test_new_pods_beside_a_backlog_are_decided_as_a_full_rebuild_decides_them(
        gpus_per_node: list[int], held: list[int], backlog: int, arrivals: int, ends: list[str],
        gangs: list[int], foreign: list[tuple[int, bool]]) -> None:
    c = build(gpus_per_node, held[:len(gpus_per_node)], backlog)
    kept = runner(c)
    now = time.time()
    first_cycle(kept, now)
    assert kept.kept is not None
    # Running pods end (ours and another scheduler's): deleted, finished, or being deleted and still running.
    running = sorted(k for k, o in c.cache.snapshot().of(r.PODS).items() if (o.get("spec") or {}).get("nodeName"))
    for key, how in zip(running, ends, strict=False):
        obj = json.loads(json.dumps(c.cache.get(r.PODS, key)))
        if how == "deleted":
            c.put(r.PODS, obj, "DELETED")
            continue
        if how == "terminating":
            obj["metadata"]["deletionTimestamp"] = "2026-01-03T00:00:00Z"
        else:
            obj["status"]["phase"] = how
        c.put(r.PODS, obj, "MODIFIED")
    for f, (at, created_bound) in enumerate(foreign):  # another scheduler's CPU pods, a DaemonSet's or bound
        on = f"n{at % len(gpus_per_node)}"
        if created_bound:
            c.put(r.PODS, pod(f"ds-{f}", gpus=0, scheduler="default-scheduler", node_name=on))
        else:
            c.put(r.PODS, pod(f"web-{f}", gpus=0, scheduler="default-scheduler"))
            land(c, f"web-{f}", on)
    for k in range(arrivals):
        c.put(r.PODS, pod(f"new-{k}", queue="lq", created=f"2026-01-02T00:00:{k:02d}Z"))
    for g, size in enumerate(gangs):  # pod groups arriving whole, between the plain pods in time
        for m in range(size):
            c.put(r.PODS, pod(f"gang{g}-{m}", queue="lq", group=f"gang{g}", group_size=size,
                              created=f"2026-01-02T00:00:{2 * g + 1:02d}Z"))
    snapshot = c.cache.snapshot()
    carried = kept._carry_on(snapshot, now + 1)
    assert carried is not None, "new plain pods and whole gangs are carried on from the kept cycle"
    fresh = runner(c)
    fresh.assumed = kept.assumed.copy()  # what the kept cycle admitted is being bound: both see it held
    rebuilt = fresh._decide_isolating(snapshot, now + 1)
    assert outcome(carried) == outcome(rebuilt)
    free = sum(g - min(h, g) for g, h in zip(gpus_per_node, held, strict=False))
    freed = sum(1 for how in ends[:len(running)] if how != "terminating")
    if not gangs:
        assert len(carried.plan.admitted) == min(arrivals, free + freed)
    carried.world.cluster.check_invariants()
    # The queue counts carried on are what counting every workload again gives.
    assert carried.counts is not None
    assert _nonzero(carried.counts) == _nonzero(QueueCounts(carried.plan.policy))
    devices = [d for job in carried.jobs for p in job.pods for d in p.devices]
    assert len(devices) == len(set(devices)) == sum(len(a.pods) for a in carried.plan.admitted)
    # A gang is handed to the binder whole, as one job (its Bindings carry its plan).
    assert {job.workload: len(job.pods) for job in carried.jobs} == {a.workload: len(a.pods)
                                                                       for a in carried.plan.admitted}


def test_another_schedulers_pods_taking_gpus_are_charged_where_they_went() -> None:
    c, run, now = started([2, 2], [0, 0], backlog=0)
    c.put(r.PODS, pod("ds", gpus=1, scheduler="default-scheduler", node_name="n0"))  # created on its node
    c.put(r.PODS, pod("web", gpus=2, scheduler="default-scheduler"))
    land(c, "web", "n1")  # bound by kube-scheduler
    for k in range(3):
        c.put(r.PODS, pod(f"new-{k}", queue="lq", created=f"2026-01-02T00:00:{k:02d}Z"))
    snapshot = c.cache.snapshot()
    carried = run._carry_on(snapshot, now + 1)
    assert carried is not None
    assert [p.node for j in carried.jobs for p in j.pods] == ["n0"]  # one GPU left in all: n0's second
    fresh = runner(c)
    fresh.assumed = run.assumed.copy()
    assert outcome(fresh._decide_isolating(snapshot, now + 1)) == outcome(carried)
    carried.world.cluster.check_invariants()
    _finish_cycle(run, snapshot, carried, now + 1)
    assert run.kept is not None

    c.put(r.PODS, pod("late", gpus=1, scheduler="default-scheduler"))
    land(c, "late", "n0")  # n0 is full now: it cannot be charged there, and a full cycle says so
    assert run._carry_on(c.cache.snapshot(), now + 2) is None


def test_a_change_it_cannot_carry_makes_the_cycle_a_full_one() -> None:
    c, run, now = started([4, 4], [2, 2], backlog=1)
    c.put(r.NODES, node("n1", gpus=8), "MODIFIED")  # its GPUs changed: capacity the kept world does not have
    c.put(r.PODS, pod("new", queue="lq"))
    assert run._carry_on(c.cache.snapshot(), now + 1) is None
    assert run.kept is None  # taken: the full cycle that follows keeps its own


def test_a_gang_arriving_in_parts_waits_off_the_books_for_the_rest_then_is_carried_whole() -> None:
    c, run, now = started([8], [0], backlog=0)
    c.put(r.PODS, pod("g0", queue="lq", group="trio", group_size=3))
    c.put(r.PODS, pod("g1", queue="lq", group="trio", group_size=3))
    d, was_carried = step(run, now + 1)  # two of three: held back, no rebuild
    assert was_carried and not d.plan.admitted and set(d.world.unjoined) == {f"{NS}/g0", f"{NS}/g1"}
    assert d.world.unjoined_since == now + 1  # they wait for the third until now + 1 + UNJOINED_WAIT
    c.put(r.PODS, pod("g2", queue="lq", group="trio", group_size=3))
    snapshot = c.cache.snapshot()
    carried = run._carry_on(snapshot, now + 1.5)
    assert carried is not None and outcome(carried)[0] == {f"{NS}/trio"} and not carried.world.unjoined
    fresh = runner(c)
    assert outcome(fresh._decide_isolating(snapshot, now + 1.5)) == outcome(carried)
    # Whole now, the gang leaves no timer behind: a pod arriving after the wait would have ended is carried too.
    _finish_cycle(run, snapshot, carried, now + 1.5)
    assert run.kept is not None and all(t < now + 1 + UNJOINED_WAIT for t in run.kept.due)
    c.put(r.PODS, pod("solo", queue="lq"))
    assert run._carry_on(c.cache.snapshot(), now + 2 + UNJOINED_WAIT) is not None


def test_each_gang_held_back_waits_from_its_own_arrival() -> None:
    c, run, now = started([8], [0], backlog=0)
    c.put(r.PODS, pod("a0", queue="lq", group="a", group_size=2))
    assert step(run, now + 1)[1]
    c.put(r.PODS, pod("a1", queue="lq", group="a", group_size=2))  # a is whole...
    c.put(r.PODS, pod("b0", queue="lq", group="b", group_size=2))  # ...as b arrives in part
    d, was_carried = step(run, now + 1 + 0.9 * UNJOINED_WAIT)
    assert was_carried and outcome(d)[0] == {f"{NS}/a"}
    assert set(d.world.unjoined) == {f"{NS}/b0"} and d.world.unjoined_since == now + 1 + 0.9 * UNJOINED_WAIT


def test_a_gang_short_of_members_past_the_wait_or_a_late_member_takes_a_full_cycle() -> None:
    c, run, now = started([8], [0], backlog=0)
    c.put(r.PODS, pod("h0", queue="lq", group="pair", group_size=2))
    assert step(run, now + 1)[1]
    assert run._carry_on(c.cache.snapshot(), now + 1 + UNJOINED_WAIT) is None  # the wait is over: built as it is

    c = build([8], [0], backlog=0)
    run = runner(c)
    c.put(r.PODS, pod("g0", queue="lq", group="trio", group_size=3))
    c.put(r.PODS, pod("g1", queue="lq", group="trio", group_size=3))
    first_cycle(run, now + 1)  # a full cycle knows the trio, two of three
    c.put(r.PODS, pod("g2", queue="lq", group="trio", group_size=3))
    assert run._carry_on(c.cache.snapshot(), now + 2) is None  # the third joins a workload the world knows



def test_a_gang_arrived_whole_is_carried_and_bound_as_one_job() -> None:
    c = build([8], [0], backlog=0)
    run = runner(c)
    now = time.time()
    first_cycle(run, now + 2)
    for i in range(2):
        c.put(r.PODS, pod(f"p{i}", gpus=2, queue="lq", group="pair", group_size=2))
    snapshot = c.cache.snapshot()
    carried = run._carry_on(snapshot, now + 3)
    assert carried is not None  # the pair arrived whole: no rebuild
    assert outcome(carried)[0] == {f"{NS}/pair"}
    [job] = carried.jobs
    assert sorted(p.key for p in job.pods) == [f"{NS}/p0", f"{NS}/p1"]  # one job: the gang is bound together
    assert len({d for p in job.pods for d in p.devices}) == 4
    fresh = runner(c)
    fresh.assumed = run.assumed.copy()
    assert outcome(fresh._decide_isolating(snapshot, now + 3)) == outcome(carried)


@pytest.mark.parametrize("job_first", [True, False], ids=["job-before-the-kept-cycle", "job-created-since"])
def test_the_pods_of_a_job_are_carried_as_one_workload(job_first: bool) -> None:
    c = build([4, 4], [0, 0], backlog=0)
    owner = job_object("train", pods=3, gpus=2, queue="lq")
    if job_first:
        c.put(JOBS, owner)
    run = runner(c)
    now = time.time()
    first_cycle(run, now)  # no pod of the Job yet
    if not job_first:
        c.put(JOBS, owner)
        theirs = job_object("web", pods=2)
        theirs["spec"]["template"]["spec"]["schedulerName"] = "default-scheduler"
        c.put(JOBS, theirs)  # another scheduler's: passed over
        d, was_carried = step(run, now + 0.5)  # the Jobs alone: read, nothing to decide yet
        assert was_carried and not d.plan.admitted
    for p in job_pods(owner):
        c.put(r.PODS, p)
    snapshot = c.cache.snapshot()
    carried = run._carry_on(snapshot, now + 1)
    assert carried is not None
    fresh = runner(c)
    fresh.assumed = run.assumed.copy()
    rebuilt = fresh._decide_isolating(snapshot, now + 1)
    assert outcome(carried) == outcome(rebuilt)
    assert len(outcome(carried)[0]) == 1  # the Job's three pods: one workload, admitted
    assert [len(j.pods) for j in carried.jobs] == [len(j.pods) for j in rebuilt.jobs] == [3]


def test_a_job_whose_pods_came_first_takes_a_full_cycle_that_groups_them() -> None:
    c = build([4], [4], backlog=0)  # every GPU held: the Job's pods wait
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    owner = job_object("train", pods=3, queue="lq")
    for p in job_pods(owner)[:2]:  # their watch is ahead of the Jobs' watch
        c.put(r.PODS, p)
    d, was_carried = step(run, now + 1)
    assert was_carried and not d.plan.admitted  # pods of their own for now, as a rebuild would read them too
    c.put(JOBS, owner)
    snapshot = c.cache.snapshot()
    assert run._carry_on(snapshot, now + 2) is None  # the Job takes pods the world knows: rebuilt, grouped
    rebuilt = runner(c)._decide_isolating(snapshot, now + 2)
    assert f"{NS}/train" in rebuilt.plan.pending  # a gang of 3 with 2 pods: it waits for the third


def test_a_job_that_does_not_parse_takes_a_full_cycle_and_one_changed_is_judged_by_its_pods() -> None:
    c, run, now = started([4], [0], backlog=0)
    broken = job_object("broken", pods=2, queue="lq")
    broken["spec"]["parallelism"] = "many"  # the full cycle sets it aside and says why
    c.put(JOBS, broken)
    assert run._carry_on(c.cache.snapshot(), now + 1) is None

    c = build([4], [0], backlog=0)  # (a cycle with an invalid object keeps nothing to carry on from)
    run = runner(c)
    first_cycle(run, now + 1)
    owner = job_object("train", pods=2, queue="lq")
    c.put(JOBS, owner)
    assert step(run, now + 2)[1]
    changed = json.loads(json.dumps(owner))
    changed["spec"]["parallelism"] = 1
    c.put(JOBS, changed, "MODIFIED")
    # No pod of it yet, so no workload: a rebuild groups nothing otherwise (gpufleet.live.owner_changes).
    _carried_as_rebuilt(run, c, now + 3)
    [first] = job_pods(changed)
    c.put(r.PODS, first)
    _carried_as_rebuilt(run, c, now + 4)
    # Its one pod placed, the Job asks two again: the workload a rebuild groups asks two pods' quota.
    again = json.loads(json.dumps(c.cache.get(JOBS, f"{NS}/train")))
    again["spec"]["parallelism"] = 2
    c.put(JOBS, again, "MODIFIED")
    assert run._carry_on(c.cache.snapshot(), now + 5) is None


def test_a_timer_due_or_the_resync_makes_the_cycle_a_full_one() -> None:
    c, run, now = started([4], [0], backlog=0)
    assert run.kept is not None
    run.kept.due.append(now + 5)
    c.put(r.PODS, pod("a", queue="lq"))
    assert run._carry_on(c.cache.snapshot(), now + 6) is None  # the timer fell due
    first_cycle(run, now + 6)
    c.put(r.PODS, pod("b", queue="lq"))
    assert run._carry_on(c.cache.snapshot(), now + 6 + 3600) is None  # an hour since the last full cycle
    first_cycle(run, now + 7)
    run.shields.add(f"{NS}/victim", now + 8)
    c.put(r.PODS, pod("c", queue="lq"))
    assert run._carry_on(c.cache.snapshot(), now + 9) is None  # a shield lapsed: the victim is a candidate again


def test_queue_statuses_are_worked_out_at_most_once_a_second_and_a_timer_brings_the_last() -> None:
    c, run, now = started([8], [0], backlog=0)
    c.put(r.PODS, pod("a", queue="lq"))
    soon = run._carry_on(c.cache.snapshot(), now + 0.5)
    assert soon is not None and soon.plan.admitted and soon.statuses == []
    assert run._next_due(soon.due, now + 0.5) == now + 1.0  # the status it left out is due then
    run._keep(soon, c.cache.snapshot(), run._keepable(soon, [], None))
    later = run._carry_on(c.cache.snapshot(), now + 1.0)  # the timer's cycle: no change, statuses written
    assert later is not None and {res.kind for res, _, _ in later.statuses} == {"ClusterQueue", "LocalQueue"}


def test_a_node_heartbeat_is_carried_a_node_that_changes_is_not() -> None:
    c, run, now = started([4, 4], [1, 1], backlog=0)
    beat = node("n0", gpus=4)
    beat["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-12-06T10:00:00Z"}]
    c.put(r.NODES, beat, "MODIFIED")
    c.put(r.PODS, pod("a", queue="lq"))
    carried = run._carry_on(c.cache.snapshot(), now + 1)
    assert carried is not None and [a.workload for a in carried.plan.admitted] == [f"{NS}/a"]
    run._keep(carried, c.cache.snapshot(), run._keepable(carried, [], None))
    more = node("n1", gpus=8)  # its GPUs changed: the kept cluster state cannot take it in place
    c.put(r.NODES, more, "MODIFIED")
    c.put(r.PODS, pod("b", queue="lq"))
    assert run._carry_on(c.cache.snapshot(), now + 2) is None


def _node_changed(c: Cluster, name: str, gpus: int, *, cordoned: bool = False, tainted: bool = False,
                  zone: str | None = None, ready: bool = True) -> None:
    raw = node(name, gpus=gpus, labels={"zone": zone} if zone else None)
    raw["spec"] = {"unschedulable": cordoned,
                   **({"taints": [{"key": "maintenance", "effect": "NoSchedule"}]} if tainted else {})}
    raw["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    c.put(r.NODES, raw, "MODIFIED")


def test_a_node_cordoned_then_uncordoned_is_taken_in_place_as_a_rebuild_takes_it() -> None:
    c, run, now = started([2, 2], [0, 0], backlog=0)
    _node_changed(c, "n0", 2, cordoned=True)
    for k in range(3):
        c.put(r.PODS, pod(f"a{k}", queue="lq", created=f"2026-01-02T00:00:0{k}Z"))
    d = _carried_as_rebuilt(run, c, now + 1)
    assert {p.node for job in d.jobs for p in job.pods} == {"n1"}  # two fit on n1; the cordoned n0 takes none
    assert len(d.plan.admitted) == 2 and len(d.plan.pending) == 1
    _node_changed(c, "n0", 2)  # uncordoned: the pod parked for want of nodes is placed there
    d = _carried_as_rebuilt(run, c, now + 2)
    assert [(job.workload, job.pods[0].node) for job in d.jobs] == [(f"{NS}/a2", "n0")]


def _gpu_health(c: Cluster, name: str, gpus: int, unhealthy: set[int]) -> None:
    raw = node(name, gpus=gpus)
    inventory = json.loads(raw["metadata"]["annotations"]["gpufleet.io/gpus"])
    for g in inventory["gpus"]:
        if g["index"] in unhealthy:
            g["health"] = "Unhealthy"
    raw["metadata"]["annotations"]["gpufleet.io/gpus"] = json.dumps(inventory)
    c.put(r.NODES, raw, "MODIFIED")


def test_a_gpu_turning_unhealthy_and_back_is_taken_in_place_as_a_rebuild_takes_it() -> None:
    c, run, now = started([2], [0], backlog=0)
    _gpu_health(c, "n0", 2, {0})  # the node agent reports GPU 0 broken
    for k in range(2):
        c.put(r.PODS, pod(f"a{k}", queue="lq", created=f"2026-01-02T00:00:0{k}Z"))
    d = _carried_as_rebuilt(run, c, now + 1)
    assert len(d.plan.admitted) == 1 and len(d.plan.pending) == 1
    assert [g.healthy for g in d.world.cluster.nodes["n0"].gpus] == [False, True]
    _gpu_health(c, "n0", 2, set())  # repaired: the pod that waited for a GPU gets it
    d = _carried_as_rebuilt(run, c, now + 2)
    assert [job.workload for job in d.jobs] == [f"{NS}/a1"]


def test_a_node_added_is_carried_and_wakes_what_waited_for_nodes_a_node_removed_is_not() -> None:
    c, run, now = started([2], [0], backlog=0)
    for k in range(3):
        c.put(r.PODS, pod(f"a{k}", queue="lq", created=f"2026-01-02T00:00:0{k}Z"))
    d = _carried_as_rebuilt(run, c, now + 1)
    assert len(d.plan.admitted) == 2 and len(d.plan.pending) == 1
    c.put(r.NODES, node("n1", gpus=2))  # the cluster scales up: the pod parked for want of nodes goes there
    d = _carried_as_rebuilt(run, c, now + 2)
    assert [(job.workload, job.pods[0].node) for job in d.jobs] == [(f"{NS}/a2", "n1")]
    assert [n.name for n in d.world.nodes] == ["n0", "n1"]
    c.put(r.NODES, node("n1", gpus=2), "DELETED")  # a pod is on its way there: not drained
    assert run._carry_on(c.cache.snapshot(), now + 3) is None


def test_a_drained_node_removed_is_carried() -> None:
    c, run, now = started([2, 2, 2], [0, 0, 0], backlog=0)
    c.put(r.PODS, pod("a", gpus=2, queue="lq"))
    d = _carried_as_rebuilt(run, c, now + 1)
    [used] = {p.node for job in d.jobs for p in job.pods}
    empty = sorted({"n0", "n1", "n2"} - {used})
    c.put(r.NODES, node(empty[0], gpus=2), "DELETED")  # drained, then deleted: the cluster scaling down
    for k in range(2):
        c.put(r.PODS, pod(f"b{k}", gpus=2, queue="lq", created=f"2026-01-02T00:00:0{k}Z"))
    d = _carried_as_rebuilt(run, c, now + 2)
    assert [n.name for n in d.world.nodes] == sorted({"n0", "n1", "n2"} - {empty[0]})
    assert empty[0] not in d.world.cluster.nodes
    assert len(d.plan.admitted) == 1 and len(d.plan.pending) == 1  # one node left for two 2-GPU pods
    assert {p.node for job in d.jobs for p in job.pods} == {empty[1]}
    c.put(r.NODES, node(used, gpus=2), "DELETED")  # under a running pod: a full cycle sorts it out
    assert run._carry_on(c.cache.snapshot(), now + 3) is None


def test_a_full_cycle_after_nodes_changed_carried_evaluates_what_was_parked_afresh() -> None:
    # The parked memory's picture of the nodes is a full cycle's: a node cordoned in a carried cycle, then
    # uncordoned when a full cycle (the resync) falls due, must not leave the workload parked under the cordon.
    c, run, now = started([2, 2], [2, 0], backlog=0)
    _node_changed(c, "n1", 2, cordoned=True)
    c.put(r.PODS, pod("w", gpus=2, queue="lq", created="2026-01-02T00:00:00Z"))
    d = _carried_as_rebuilt(run, c, now + 1)
    assert f"{NS}/w" in d.plan.pending
    _node_changed(c, "n1", 2)
    fresh = runner(c)
    fresh.assumed = run.assumed.copy()
    rebuilt = fresh._decide_isolating(c.cache.snapshot(), now + 3601)
    d, was_carried = step(run, now + 3601)  # the resync: a full cycle
    assert not was_carried and outcome(d)[0] == outcome(rebuilt)[0] == {f"{NS}/w"}


def test_without_a_placer_nodes_joining_or_leaving_take_a_full_cycle() -> None:
    # quotaOnly: the policy has no cluster state to take them, and the world's would not follow.
    c = build([2, 2], [0, 0], backlog=0)
    run = CycleRunner(KubeClient(host="http://127.0.0.1:9"), c.cache, fast_settings(cycle_period=3600.0,
                                                                                     quota_only=True),
                      identity="t", metrics=SchedulerMetrics(), may_write=lambda: False)
    now = time.time()
    first_cycle(run, now)
    c.put(r.NODES, node("n2", gpus=2))
    assert run._carry_on(c.cache.snapshot(), now + 1) is None
    first_cycle(run, now + 2)
    c.put(r.NODES, node("n1", gpus=2), "DELETED")
    assert run._carry_on(c.cache.snapshot(), now + 3) is None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gpus_per_node=st.lists(st.integers(1, 4), min_size=2, max_size=4),
       held=st.lists(st.integers(0, 2), min_size=4, max_size=4),
       rounds=st.lists(st.tuples(st.lists(st.tuples(st.integers(0, 3), st.booleans(), st.booleans(),
                                                    st.sampled_from([None, "a", "b"]), st.booleans()),
                                          min_size=1, max_size=3),
                                 st.integers(1, 4), st.sampled_from([None, "a", "b"])), min_size=1, max_size=3))
def test_nodes_changing_beside_their_devices_or_joining_are_decided_as_a_rebuild_decides_them(
        gpus_per_node: list[int], held: list[int],
        rounds: list[tuple[list[tuple[int, bool, bool, str | None, bool]], int, str | None]]) -> None:
    # Cordons, taints, zone labels and readiness flip between cycles, nodes join, while pods arrive, some asking
    # for a zone: each carried cycle admits and parks what a rebuild on the same snapshot does.
    c = build(gpus_per_node, held[:len(gpus_per_node)], backlog=0)
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    made = 0
    for step_no, (changes, arrivals, zone) in enumerate(rounds, start=1):
        for at, cordoned, tainted, node_zone, ready in changes:
            if at == 3 and len(gpus_per_node) < 9:  # a node joins (named to sort last, as a rebuild orders them)
                gpus_per_node.append(2)
                c.put(r.NODES, node(f"n{len(gpus_per_node) - 1}", gpus=2,
                                    labels={"zone": node_zone} if node_zone else None))
                continue
            i = at % len(gpus_per_node)
            _node_changed(c, f"n{i}", gpus_per_node[i], cordoned=cordoned, tainted=tainted, zone=node_zone,
                          ready=ready)
        for _ in range(arrivals):
            new = pod(f"new-{made}", queue="lq", created=f"2026-01-02T00:{made // 60:02d}:{made % 60:02d}Z")
            if zone is not None:
                new["spec"]["nodeSelector"] = {"zone": zone}
            c.put(r.PODS, new)
            made += 1
        _carried_as_rebuilt(run, c, now + step_no)


def test_a_pod_that_already_says_why_it_waits_costs_no_write_task() -> None:
    # Thousands of pods wait with the same message cycle after cycle: the cycle asks the recorder first and hands a
    # writer thread only the pods whose condition would change.
    recorder = Recorder(KubeClient(host="http://127.0.0.1:9"), "gpufleet", "t")
    waiting = pod("w", queue="lq")
    waiting["metadata"]["resourceVersion"] = "7"
    assert recorder.unschedulable_is_new(waiting, "0/3 nodes are available")
    waiting["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                        "message": "0/3 nodes are available"}]
    assert not recorder.unschedulable_is_new(waiting, "0/3 nodes are available")  # already said
    assert recorder.unschedulable_is_new(waiting, "0/4 nodes are available")  # a new reason is written



# Found by a review's differential fuzzing of carried cycles against rebuilds (2026-12-06), one test each.

def test_a_pod_admitted_by_a_carried_cycle_can_be_a_victim_before_its_binding_lands() -> None:
    c = Cluster()
    preemption = {"withinClusterQueue": "LowerPriority"}
    c.put(r.CLUSTER_QUEUES, cluster_queue("cq", 10_000, cpu="100000", preemption=preemption), "MODIFIED")
    c.put(r.PRIORITY_CLASSES, priority_class("low", 1))
    c.put(r.PRIORITY_CLASSES, priority_class("high", 100))
    c.put(r.NODES, node("n0", gpus=2))
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    c.put(r.PODS, pod("low", gpus=2, queue="lq", priority_class="low", created=stamp(now)))
    d, carried = step(run, now + 1)
    assert carried and [a.workload for a in d.plan.admitted] == [f"{NS}/low"]
    c.put(r.PODS, pod("hi", gpus=2, queue="lq", priority_class="high", created=stamp(now + 1.5)))
    d, _ = step(run, now + 2)  # "low" is assumed on n0, its Binding in flight: it is the victim, evicted
    assert [(v.workload, len(v.pods)) for v in d.victims] == [(f"{NS}/low", 1)]
    assert run.kept is None  # a preemption: the next cycle rebuilds


def test_a_workload_a_carried_cycle_kept_out_is_woken_when_what_kept_it_out_ends() -> None:
    c = Cluster()
    c.put(r.NODES, node("n0", gpus=4))
    c.put(r.NODES, node("n1", gpus=1))
    c.put(r.PODS, pod("other", gpus=1, scheduler="default-scheduler", node_name="n1", created=stamp()))
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    c.put(r.PODS, pod("a", gpus=4, queue="lq", created=stamp(now)))
    c.put(r.PODS, pod("b", gpus=2, queue="lq", created=stamp(now + 0.5)))
    d, carried = step(run, now + 1)
    assert carried and outcome(d)[0] == {f"{NS}/a"} and f"{NS}/b" in outcome(d)[1]
    land(c, "a", "n0")
    c.put(r.PODS, c.cache.get(r.PODS, f"{NS}/a"), "DELETED")  # "a" ends: n0 is empty again...
    other = json.loads(json.dumps(c.cache.get(r.PODS, f"{NS}/other")))
    other["metadata"]["labels"]["x"] = "y"
    c.put(r.PODS, other, "MODIFIED")  # ... in the same batch as a change that takes a full cycle
    d, carried = step(run, now + 2)
    assert not carried and outcome(d)[0] == {f"{NS}/b"}  # the parked memory knew "a" held n0: "b" is tried


def test_a_pod_a_full_cycle_could_not_charge_keeps_its_claim_on_the_capacity_freed() -> None:
    c = Cluster()
    c.put(r.NODES, node("n0", gpus=4))
    for name in ("other-a", "other-b"):  # another scheduler over-committed n0
        c.put(r.PODS, pod(name, gpus=4, scheduler="default-scheduler", node_name="n0", created=stamp()))
    run = runner(c)
    now = time.time()
    d = first_cycle(run, now)
    assert d.world.unaccounted == [f"{NS}/other-b"] and run.kept is None
    c.put(r.PODS, c.cache.get(r.PODS, f"{NS}/other-a"), "DELETED")
    c.put(r.PODS, pod("mine", gpus=4, queue="lq", created=stamp()))
    d, carried = step(run, now + 1)
    assert not carried and outcome(d)[0] == set()  # "other-b" is charged in the room "other-a" left


def test_block_admission_holds_later_rounds_until_the_admitted_pods_are_ready_carried_as_rebuilt() -> None:
    # Kueue's blockAdmission: nothing more is admitted while an admitted workload's pods are not all Ready, in the
    # rounds after its own too; a carried cycle and a rebuild both see it from the pods' conditions.
    kueue = SchedulerConfig(pods_ready=PodsReadyPolicy(enable=True, timeout_s=300, block_admission=True))
    c = Cluster()
    c.put(r.NODES, node("n0", gpus=8))
    c.put(r.PODS, pod("a", queue="lq", created=stamp()))
    run = CycleRunner(KubeClient(host="http://127.0.0.1:9"), c.cache, fast_settings(cycle_period=3600.0, kueue=kueue),
                      identity="t", metrics=SchedulerMetrics(), may_write=lambda: False)
    now = time.time()
    d = first_cycle(run, now)
    land(c, "a", d.world.cluster.placements[f"{NS}/a"].node)
    c.put(r.PODS, pod("b", queue="lq", created=stamp()))
    d = _carried_as_rebuilt(run, c, now + 1)
    assert not d.plan.admitted and f"{NS}/b" in d.plan.pending  # a is bound, not Ready yet
    _ready(c, "a")
    d = _carried_as_rebuilt(run, c, now + 2)
    assert outcome(d)[0] == {f"{NS}/b"}
    # a is Ready: no deadline; b, just admitted, none until its Binding lands (its clock starts from the bind)
    assert d.plan.policy.next_wakeup(now + 2) is None


def test_a_bound_pod_starting_to_run_is_carried() -> None:
    # The kubelet's Pending -> Running (and readiness) on every pod it starts: a status change a full cycle charges
    # the same, so it must not make every cycle a full one on a real cluster.
    c, run, now = started([4], [1], backlog=0)
    starting = json.loads(json.dumps(c.cache.get(r.PODS, f"{NS}/run-0-0")))
    starting["status"] = {"phase": "Pending"}  # bound, its containers being created
    c.put(r.PODS, starting, "MODIFIED")
    running = json.loads(json.dumps(starting))
    running["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    c.put(r.PODS, running, "MODIFIED")
    c.put(r.PODS, pod("a", queue="lq"))
    d, carried = step(run, now + 1)
    assert carried and outcome(d)[0] == {f"{NS}/a"}



def test_a_change_log_cleared_by_a_follower_makes_the_next_cycle_a_full_one() -> None:
    c, run, now = started([4], [0], backlog=0)
    c.put(r.PODS, pod("a", queue="lq"))
    run.changes.clear()  # what a follower does with the changes it will never carry on with
    assert run._carry_on(c.cache.snapshot(), now + 1) is None  # the changes since are not all known: rebuild


def _pods_ready_runner(c: Cluster) -> CycleRunner:
    kueue = SchedulerConfig(pods_ready=PodsReadyPolicy(enable=True, timeout_s=300))
    return CycleRunner(KubeClient(host="http://127.0.0.1:9"), c.cache, fast_settings(cycle_period=3600.0, kueue=kueue),
                       identity="t", metrics=SchedulerMetrics(), may_write=lambda: False)


def _one_pod_admitted() -> tuple[Cluster, CycleRunner, _Decided, float]:
    """One pod ``a`` admitted by a first cycle with waitForPodsReady on (300 s), its Binding not landed yet."""
    c = Cluster()
    c.put(r.NODES, node("n0", gpus=8))
    c.put(r.PODS, pod("a", queue="lq", created=stamp()))
    run = _pods_ready_runner(c)
    now = time.time()
    return c, run, first_cycle(run, now), now


def _deadline(run: CycleRunner, name: str) -> float | None:
    """The kept policy's waitForPodsReady deadline for the workload of pod ``name``."""
    assert run.kept is not None
    info = run.kept.policy.info(f"{NS}/{name}")
    assert info is not None
    return info.ready_deadline


def _ready(c: Cluster, name: str) -> None:
    obj = json.loads(json.dumps(c.cache.get(r.PODS, f"{NS}/{name}")))
    obj["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    c.put(r.PODS, obj, "MODIFIED")


def test_an_admission_leaves_no_timer_that_takes_a_rebuild_and_its_pods_ready_deadline_is_judged_carried_on() -> None:
    # With waitForPodsReady on, every admission used to leave the core's readiness deadline among the timers that
    # take a full cycle: a rebuild five minutes after every admission, for a rule the pods themselves decide.
    c, run, d, now = _one_pod_admitted()
    assert outcome(d)[0] == {f"{NS}/a"}
    assert run.kept is not None and run.kept.due == []
    land(c, "a", d.world.cluster.placements[f"{NS}/a"].node)
    d, carried = step(run, now + 1)
    assert carried and run.kept is not None and run.kept.due == []
    # its clock started when it was sent to its node: the core's deadline, which wakes the loop then
    assert _deadline(run, "a") == pytest.approx(now + 300, abs=1e-3) and d.wake == _deadline(run, "a")
    _ready(c, "a")
    d, carried = step(run, now + 2)
    assert carried and _deadline(run, "a") is None and d.wake is None
    late = run._carry_on(c.cache.snapshot(), now + 301)  # the deadline, the pod ready since: nothing to evict
    assert late is not None and not late.victims


def test_a_pods_ready_deadline_with_pods_not_ready_is_evicted_by_the_cycle_that_carries_on() -> None:
    # (carried on through the pods' deletion: tests/kube/test_carried_evictions.py)
    c, run, d, now = _one_pod_admitted()
    land(c, "a", d.world.cluster.placements[f"{NS}/a"].node)
    d, carried = step(run, now + 1)
    assert carried
    d, carried = step(run, now + 299)
    assert carried and not d.victims  # not yet
    d, carried = step(run, now + 301)
    assert carried
    assert [(v.workload, v.reason) for v in d.victims] == [(f"{NS}/a", gangs.PODS_READY_TIMEOUT)]


def test_a_deadline_falling_due_evicts_its_own_workload_and_keeps_the_others_deadlines() -> None:
    # A deadline used to make the carried cycle judge every workload's pods (0.8 s at 5,000 nodes and 25,000 pods);
    # the deadlines are the core's now, each workload's its own.
    c, run, d, now = _one_pod_admitted()
    land(c, "a", d.world.cluster.placements[f"{NS}/a"].node)
    step(run, now + 1)
    c.put(r.PODS, pod("b", queue="lq", created=stamp()))
    d, _ = step(run, now + 2)
    land(c, "b", d.world.cluster.placements[f"{NS}/b"].node)
    step(run, now + 3)
    assert _deadline(run, "a") == pytest.approx(now + 300, abs=1e-3)
    assert _deadline(run, "b") == pytest.approx(now + 302, abs=1e-3)  # (sent to its node at now + 2)
    late = run._carry_on(c.cache.snapshot(), now + 301)
    assert late is not None and [v.workload for v in late.victims] == [f"{NS}/a"]
    assert late.wake == pytest.approx(now + 302, abs=1e-3)  # b's


def _finish_pod(c: Cluster, name: str, phase: str = "Succeeded", ns: str = NS) -> None:
    obj = json.loads(json.dumps(c.cache.get(r.PODS, f"{ns}/{name}")))
    obj["status"] = {"phase": phase}
    c.put(r.PODS, obj, "MODIFIED")


def _repairs(d: _Decided) -> set[tuple[str, str, tuple[str, ...]]]:
    return {(a.kind, a.workload, a.pods) for a in d.repairs}


def carried_beside_rebuilt(run: CycleRunner, c: Cluster, now: float) -> tuple[_Decided, _Decided]:
    """The next cycle, which must carry on, and what a fresh runner (the runner's assumptions copied) decides on the
    same snapshot; neither is kept."""
    snapshot = c.cache.snapshot()
    carried = run._carry_on(snapshot, now)
    assert carried is not None, "carried on"
    fresh = runner(c, run.settings)
    fresh.assumed = run.assumed.copy()
    return carried, fresh._decide_isolating(snapshot, now)


def _carried_as_rebuilt(run: CycleRunner, c: Cluster, now: float) -> _Decided:
    """The next cycle carried on, deciding what a rebuild on the same snapshot decides; kept as run() keeps it."""
    snapshot = c.cache.snapshot()
    carried = run._carry_on(snapshot, now)
    assert carried is not None, "carried on"
    fresh = runner(c, run.settings)
    fresh.assumed = run.assumed.copy()
    fresh.seen_ready = set(run.seen_ready)
    rebuilt = fresh._decide_isolating(snapshot, now)
    # Which workloads are admitted and which wait; not the waiting ones' messages: a workload parked by an earlier
    # cycle keeps the message of its last evaluation until something is released, as Kueue keeps its condition
    # (the scheduler's own rebuilds park it again with it: ParkedMemory), where this fresh runner evaluates anew.
    assert outcome(carried)[0] == outcome(rebuilt)[0]
    assert set(outcome(carried)[1]) == set(outcome(rebuilt)[1])
    assert _repairs(carried) == _repairs(rebuilt)  # late members placed, none twice, none left out
    assert carried.counts is not None
    assert _nonzero(carried.counts) == _nonzero(QueueCounts(carried.plan.policy))
    assert _nonzero(carried.counts) == _nonzero(QueueCounts(rebuilt.plan.policy))
    carried.world.cluster.check_invariants()
    return _finish_cycle(run, snapshot, carried, now)


def test_a_gangs_members_finishing_one_by_one_free_their_nodes_and_the_last_ends_it_carried_on() -> None:
    # Every training job's end used to rebuild everything: a member of a workload of several pods finishing took a
    # full cycle. A full cycle keeps the workload admitted on its running pods, quota whole, the finished pod on no
    # node; the last one finishing ends it. Carried on, the kept policy is told the same (leave, then finish).
    c = Cluster()
    c.put(r.CLUSTER_QUEUES, cluster_queue("cq", 8, cpu="100"), "MODIFIED")  # quota: 8 GPUs in all
    for n in range(3):
        c.put(r.NODES, node(f"n{n}", gpus=4))
    for m in range(3):  # a gang of three 4-GPU pods running, one per node
        c.put(r.PODS, pod(f"gang-{m}", gpus=4, queue="lq", group="gang", group_size=3, node_name=f"n{m}"))
    c.put(r.PODS, pod("quota-bound", gpus=4, queue="lq", created=stamp()))  # over quota while the gang runs
    run = runner(c)
    now = time.time()
    d = first_cycle(run, now)
    assert outcome(d)[0] == set() and run.kept is not None
    _finish_pod(c, "gang-0")  # its node is free, the gang's quota is not: the waiting pod still waits
    d = _carried_as_rebuilt(run, c, now + 1)
    assert outcome(d)[0] == set() and f"{NS}/quota-bound" in outcome(d)[1]
    placements = d.world.cluster.placements
    assert f"{NS}/gang-0" not in placements and {f"{NS}/gang-1", f"{NS}/gang-2"} <= set(placements)
    _finish_pod(c, "gang-1", "Failed")
    _finish_pod(c, "gang-2")  # the last: the gang ends, its quota is free
    d = _carried_as_rebuilt(run, c, now + 2)
    assert outcome(d)[0] == {f"{NS}/quota-bound"}
    for m in range(3):  # the finished pods cleaned up afterwards (a Job's TTL)
        c.put(r.PODS, c.cache.get(r.PODS, f"{NS}/gang-{m}"), "DELETED")
    c.put(r.PODS, pod("after", gpus=4, queue="lq", created=stamp()))
    d = _carried_as_rebuilt(run, c, now + 3)
    assert outcome(d)[0] == {f"{NS}/after"}


def test_a_gang_member_deleted_while_the_gang_runs_takes_a_full_cycle() -> None:
    c = Cluster()
    for n in range(2):
        c.put(r.NODES, node(f"n{n}", gpus=4))
    for m in range(2):
        c.put(r.PODS, pod(f"gang-{m}", gpus=4, queue="lq", group="gang", group_size=2, node_name=f"n{m}"))
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    _finish_pod(c, "gang-0")
    _carried_as_rebuilt(run, c, now + 1)
    # The finished member deleted while the other runs: a rebuild sees a workload of one pod, asking less quota.
    c.put(r.PODS, c.cache.get(r.PODS, f"{NS}/gang-0"), "DELETED")
    assert run._carry_on(c.cache.snapshot(), now + 2) is None


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gangs=st.lists(st.lists(st.sampled_from(["running", "Succeeded", "Failed"]), min_size=2, max_size=4),
                      min_size=1, max_size=3),
       arrivals=st.lists(st.integers(1, 4), max_size=5), quota=st.integers(4, 24))
def test_gangs_finishing_in_part_or_whole_are_decided_as_a_rebuild_decides_them(
        gangs: list[list[str]], arrivals: list[int], quota: int) -> None:
    c = Cluster()
    c.put(r.CLUSTER_QUEUES, cluster_queue("cq", quota, cpu="100"), "MODIFIED")
    for n in range(3):
        c.put(r.NODES, node(f"n{n}", gpus=8))
    slot = itertools.count()
    for g, members in enumerate(gangs):
        for m in range(len(members)):
            c.put(r.PODS, pod(f"gang{g}-{m}", queue="lq", group=f"gang{g}", group_size=len(members),
                              node_name=f"n{next(slot) % 3}"))
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    for g, members in enumerate(gangs):
        for m, how in enumerate(members):
            if how != "running":
                _finish_pod(c, f"gang{g}-{m}", how)
    for k, gpus in enumerate(arrivals):
        c.put(r.PODS, pod(f"new-{k}", gpus=gpus, queue="lq", created=f"2026-01-02T00:00:{k:02d}Z"))
    _carried_as_rebuilt(run, c, now + 1)
    # The gangs that finished whole are cleaned up; one pod more arrives.
    for g, members in enumerate(gangs):
        if "running" not in members:
            for m in range(len(members)):
                c.put(r.PODS, c.cache.get(r.PODS, f"{NS}/gang{g}-{m}"), "DELETED")
    c.put(r.PODS, pod("late", gpus=2, queue="lq", created="2026-01-03T00:00:00Z"))
    _carried_as_rebuilt(run, c, now + 2)


def _job_with_late_pods(c: Cluster, gpus_per_pod: int = 2, parallelism: int = 2,
                        completions: int = 4) -> tuple[JsonDict, list[JsonDict]]:
    """A Job of ``parallelism`` running pods on n0."""
    owner = job_object("train", pods=parallelism, gpus=gpus_per_pod, queue="lq")
    owner["spec"]["completions"] = completions
    c.put(JOBS, owner)
    pods = job_pods(owner)
    for p in pods:
        p["spec"]["nodeName"] = "n0"
        p["status"] = {"phase": "Running"}
        c.put(r.PODS, p)
    return owner, pods


def _running_job(node_gpus: int) -> tuple[Cluster, list[JsonDict], CycleRunner, float]:
    """The Job of :func:`_job_with_late_pods` on a node of ``node_gpus``, after a first cycle."""
    c = Cluster()
    c.put(r.NODES, node("n0", gpus=node_gpus))
    _, pods = _job_with_late_pods(c)
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    return c, pods, run, now


def _next_pod(c: Cluster, template: JsonDict, name: str) -> None:
    """The Job controller's next pod (a completion done, or a replacement)."""
    new = json.loads(json.dumps(template))
    new["metadata"] = {k: v for k, v in new["metadata"].items() if k not in ("uid", "resourceVersion")}
    new["metadata"]["name"] = name
    new["spec"].pop("nodeName", None)
    new["status"] = {"phase": "Pending"}
    c.put(r.PODS, new)


def test_a_jobs_next_pod_joins_it_carried_on_as_a_rebuild_places_it() -> None:
    # A Job whose completions exceed its parallelism creates a pod as each one ends: each used to rebuild everything.
    c, pods, run, now = _running_job(8)
    _finish_pod(c, "train-p0x")
    _next_pod(c, pods[0], "train-p2x")
    d = _carried_as_rebuilt(run, c, now + 1)
    assert _repairs(d) == {("complete", f"{NS}/train", (f"{NS}/train-p2x",))}
    assert [(j.workload, [p.key for p in j.pods], [p.node for p in j.pods]) for j in d.jobs] == [
        (f"{NS}/train", [f"{NS}/train-p2x"], ["n0"])]
    assert not d.world.late


def test_a_late_pod_that_does_not_fit_waits_and_is_placed_carried_on_when_room_comes() -> None:
    c, pods, run, now = _running_job(4)  # all 4 of n0's GPUs
    _finish_pod(c, "train-p0x")
    _carried_as_rebuilt(run, c, now + 1)
    c.put(r.PODS, pod("web", gpus=2, scheduler="default-scheduler", node_name="n0"))  # takes the room it left
    _next_pod(c, pods[0], "train-p2x")
    d = _carried_as_rebuilt(run, c, now + 2)
    assert not d.jobs and d.world.late == {f"{NS}/train"} and d.world.pods[f"{NS}/train-p2x"].waiting
    c.put(r.PODS, c.cache.get(r.PODS, f"{NS}/web"), "DELETED")  # room again: the waiting pod is placed, carried on
    d = _carried_as_rebuilt(run, c, now + 3)
    assert _repairs(d) == {("complete", f"{NS}/train", (f"{NS}/train-p2x",))} and not d.world.late


def test_a_replacement_that_makes_a_pod_set_grow_takes_a_full_cycle() -> None:
    # The replacement arrives before the pod it replaces has finished: a full cycle counts three live pods where
    # two were planned, and charges them; the admission kept on does not hold that quota.
    c, pods, run, now = _running_job(8)
    _next_pod(c, pods[0], "train-p2x")
    assert run._carry_on(c.cache.snapshot(), now + 1) is None


def test_a_late_member_of_a_pod_group_takes_a_full_cycle() -> None:
    c = Cluster()
    c.put(r.NODES, node("n0", gpus=8))
    for m in range(2):
        c.put(r.PODS, pod(f"gang-{m}", queue="lq", group="gang", group_size=2, node_name="n0"))
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    c.put(r.PODS, pod("gang-2", queue="lq", group="gang", group_size=2))  # a gang left incomplete: its repair
    assert run._carry_on(c.cache.snapshot(), now + 1) is None


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parallelism=st.integers(1, 3), ends=st.lists(st.sampled_from(["running", "Succeeded", "Failed"]), max_size=3),
       new_pods=st.integers(1, 3), node_gpus=st.integers(2, 8), others=st.lists(st.integers(1, 2), max_size=3))
def test_a_jobs_pods_created_after_its_admission_are_decided_as_a_rebuild_decides_them(
        parallelism: int, ends: list[str], new_pods: int, node_gpus: int, others: list[int]) -> None:
    c = Cluster()
    c.put(r.NODES, node("n0", gpus=8))
    c.put(r.NODES, node("n1", gpus=node_gpus))
    _, pods = _job_with_late_pods(c, gpus_per_pod=1, parallelism=parallelism, completions=10)
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    for p, how in zip(pods, ends, strict=False):
        if how != "running":
            _finish_pod(c, p["metadata"]["name"], how)
    for k in range(new_pods):
        _next_pod(c, pods[0], f"train-n{k}x")
    for k, gpus in enumerate(others):
        c.put(r.PODS, pod(f"other-{k}", gpus=gpus, queue="lq", created=f"2026-01-02T00:00:{k:02d}Z"))
    snapshot = c.cache.snapshot()
    running = sum(1 for how in (ends + ["running"] * parallelism)[:parallelism] if how == "running")
    if not running or running + new_pods > parallelism:
        # None running: the workload ended here, and a full cycle groups its finished pods with the next ones. More
        # live pods than planned while it runs: a full cycle charges them all, more than the admission holds.
        assert run._carry_on(snapshot, now + 1) is None
        return
    _carried_as_rebuilt(run, c, now + 1)


def test_the_last_running_member_finishing_while_a_late_pod_waits_takes_a_full_cycle() -> None:
    # Nothing of the Job on a node any more: a rebuild queues it anew as a gang of what is left, not as admitted.
    c, pods, run, now = _running_job(4)
    _finish_pod(c, "train-p0x")
    _carried_as_rebuilt(run, c, now + 1)
    c.put(r.PODS, pod("web", gpus=2, scheduler="default-scheduler", node_name="n0"))
    _next_pod(c, pods[0], "train-p2x")
    d = _carried_as_rebuilt(run, c, now + 2)
    assert d.world.late == {f"{NS}/train"}
    _finish_pod(c, "train-p1x")
    assert run._carry_on(c.cache.snapshot(), now + 3) is None


def _ready_job(c: Cluster) -> list[JsonDict]:
    """The Job of :func:`_job_with_late_pods`, its pods Ready (bound long ago)."""
    _, pods = _job_with_late_pods(c)
    for p in pods:
        _ready(c, p["metadata"]["name"])
    return pods


def test_a_healthy_jobs_next_pod_placed_by_a_full_cycle_does_not_time_the_job_out() -> None:
    # waitForPodsReady judged the workload from its first pod's bind: the next pod, placed in this very cycle and
    # not ready yet, made a Job that had run for days late at once, and the full cycle evicted it.
    c = Cluster()
    c.put(r.NODES, node("n0", gpus=8))
    pods = _ready_job(c)
    _finish_pod(c, "train-p0x")
    _next_pod(c, pods[0], "train-p2x")
    run = _pods_ready_runner(c)
    d = first_cycle(run, time.time())
    assert _repairs(d) == {("complete", f"{NS}/train", (f"{NS}/train-p2x",))} and not d.victims
    land(c, "train-p2x", "n0")
    d, carried = step(run, time.time() + 1)
    assert carried and not d.victims  # its clock starts at its own bind
    d, carried = step(run, time.time() + 301)
    assert carried and [v.workload for v in d.victims] == [f"{NS}/train"]  # never ready: late now


def test_a_pod_not_ready_any_more_after_its_deadline_is_judged_as_a_rebuild_judges_it() -> None:
    # A Job seen with all its pods Ready, one of which stops being Ready long after its bind: not timed out (Kueue
    # without recoveryTimeout), carried on as by the scheduler's own rebuild; a scheduler just started, which has not
    # seen it Ready, judges it from its pods' binds and evicts it.
    c = Cluster()
    c.put(r.NODES, node("n0", gpus=8))
    _ready_job(c)
    run = _pods_ready_runner(c)
    now = time.time()
    d = first_cycle(run, now)
    assert not d.victims and run.kept is not None
    obj = json.loads(json.dumps(c.cache.get(r.PODS, f"{NS}/train-p1x")))
    obj["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    c.put(r.PODS, obj, "MODIFIED")
    snapshot = c.cache.snapshot()
    carried = run._carry_on(snapshot, now + 1)
    rebuilt = runner(c, run.settings)
    rebuilt.seen_ready = set(run.seen_ready)
    started = runner(c, run.settings)
    assert carried is not None and not carried.victims
    assert not rebuilt._decide_isolating(snapshot, now + 1).victims
    assert [(v.workload, v.reason) for v in started._decide_isolating(snapshot, now + 1).victims] == [
        (f"{NS}/train", gangs.PODS_READY_TIMEOUT)]


def test_a_finished_pod_that_fills_a_place_of_a_job_queued_anew_is_placed_nowhere() -> None:
    # A Job with no pod left on a node is queued anew by a full cycle, its finished pod filling a place of its pod
    # set: the gang's placement took a node for that finished pod too, and the world kept on from that cycle
    # counted the phantom until the next rebuild.
    c, pods, run, now = _running_job(8)
    c.put(r.PODS, c.cache.get(r.PODS, f"{NS}/train-p1x"), "DELETED")
    step(run, now + 1)
    _finish_pod(c, "train-p0x")
    _next_pod(c, pods[0], "train-p2x")
    d, carried = step(run, now + 2)
    assert not carried and outcome(d)[0] == {f"{NS}/train"}
    assert set(d.world.cluster.placements) == {f"{NS}/train-p2x"}
    c.put(r.PODS, pod("after", gpus=6, queue="lq", created=stamp()))  # the room the phantom took
    assert outcome(_carried_as_rebuilt(run, c, now + 3))[0] == {f"{NS}/after"}


def test_a_workloads_deadline_is_kept_once_however_often_its_pods_change() -> None:
    c, run, d, now = _one_pod_admitted()
    land(c, "a", d.world.cluster.placements[f"{NS}/a"].node)
    step(run, now + 1)
    for k in range(5):  # the kubelet's status updates while the pod starts, none of them Ready
        obj = json.loads(json.dumps(c.cache.get(r.PODS, f"{NS}/a")))
        obj["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True",
                                                             "lastTransitionTime": f"2026-01-01T00:00:0{k}Z"}]}
        c.put(r.PODS, obj, "MODIFIED")
        d, carried = step(run, now + 2 + k)
        assert carried
    assert _deadline(run, "a") == pytest.approx(now + 300, abs=1e-3)


# ---- blockAdmission across rounds: every carried change that moves a workload's readiness, as a rebuild reads it
BLOCKING = SchedulerConfig(pods_ready=PodsReadyPolicy(enable=True, timeout_s=300, block_admission=True))


def _blocking_runner(c: Cluster) -> CycleRunner:
    return runner(c, fast_settings(cycle_period=3600.0, kueue=BLOCKING))


def _set_ready(c: Cluster, name: str, ready: bool = True) -> None:
    obj = json.loads(json.dumps(c.cache.get(r.PODS, f"{NS}/{name}")))
    obj["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    c.put(r.PODS, obj, "MODIFIED")


def test_block_admission_lifts_when_the_unready_member_of_a_gang_finishes() -> None:
    c = Cluster()
    for n in range(2):
        c.put(r.NODES, node(f"n{n}", gpus=8))
    for m in range(2):
        c.put(r.PODS, pod(f"gang-{m}", gpus=4, queue="lq", group="gang", group_size=2, node_name=f"n{m}",
                          created=stamp()))
    _set_ready(c, "gang-0")
    run = _blocking_runner(c)
    now = time.time()
    first_cycle(run, now)
    _finish_pod(c, "gang-1")  # the member not Ready finishes: the rest are Ready (Kueue counts succeeded pods)
    c.put(r.PODS, pod("x", queue="lq", created=stamp()))
    assert outcome(_carried_as_rebuilt(run, c, now + 1))[0] == {f"{NS}/x"}


def test_block_admission_holds_behind_a_pod_being_deleted() -> None:
    c = Cluster()
    c.put(r.NODES, node("n0", gpus=8))
    c.put(r.PODS, pod("a", queue="lq", node_name="n0", created=stamp()))
    _set_ready(c, "a")
    run = _blocking_runner(c)
    now = time.time()
    first_cycle(run, now)
    obj = json.loads(json.dumps(c.cache.get(r.PODS, f"{NS}/a")))
    obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    c.put(r.PODS, obj, "MODIFIED")
    c.put(r.PODS, pod("x", queue="lq", created=stamp()))
    assert outcome(_carried_as_rebuilt(run, c, now + 1))[0] == set()


def test_block_admission_holds_behind_a_late_member_placed() -> None:
    c = Cluster()
    c.put(r.NODES, node("n0", gpus=8))
    _, pods = _job_with_late_pods(c)
    for p in pods:
        _set_ready(c, p["metadata"]["name"])
    run = _blocking_runner(c)
    now = time.time()
    first_cycle(run, now)
    _finish_pod(c, pods[0]["metadata"]["name"])
    _next_pod(c, pods[0], "train-next")  # joins the running Job, placed and not Ready: it holds the queue
    c.put(r.PODS, pod("x", queue="lq", created=stamp()))
    assert outcome(_carried_as_rebuilt(run, c, now + 1))[0] == set()


def test_block_admission_holds_behind_a_workload_of_a_queue_that_does_not_block() -> None:
    # Kueue's blockAdmission: every admitted workload not PodsReady holds the blocking queues back, whichever queue
    # admitted it.
    c = Cluster()
    relaxed = cluster_queue("cqa", 100, cpu="1000")
    relaxed["spec"]["waitForPodsReady"] = {"enable": True, "timeout": "300s", "blockAdmission": False}
    c.put(r.CLUSTER_QUEUES, relaxed)
    c.put(r.LOCAL_QUEUES, local_queue("lqa", "cqa"))
    c.put(r.NODES, node("n0", gpus=8))
    c.put(r.PODS, pod("w", queue="lqa", created=stamp()))
    run = _blocking_runner(c)
    now = time.time()
    assert outcome(first_cycle(run, now))[0] == {f"{NS}/w"}
    c.put(r.PODS, pod("x", queue="lq", created=stamp()))
    assert outcome(_carried_as_rebuilt(run, c, now + 1))[0] == set()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.lists(st.tuples(st.sampled_from(["new", "gang", "land", "ready", "unready", "finish"]),
                                         st.integers(0, 20)), min_size=1, max_size=4), min_size=1, max_size=6))
def test_block_admission_carried_on_decides_as_a_rebuild_decides(steps: list[list[tuple[str, int]]]) -> None:
    # Pods and gangs arrive, Bindings land, pods turn Ready or not and finish: whenever a cycle carries on, it admits
    # and leaves waiting what a rebuild on the same snapshot does.
    c = Cluster()
    for n in range(3):
        c.put(r.NODES, node(f"n{n}", gpus=4))
    names: list[str] = []
    run = _blocking_runner(c)
    now = time.time()
    first_cycle(run, now)
    for i, ops in enumerate(steps):
        for op, k in ops:
            if op in ("new", "gang"):
                group = f"g{len(names)}" if op == "gang" else None
                for _ in range(2 if group else 1):
                    names.append(f"p{len(names)}")
                    c.put(r.PODS, pod(names[-1], queue="lq", created=stamp(), group=group,
                                      group_size=2 if group else None))
                continue
            if not names:
                continue
            name = names[k % len(names)]
            obj = c.cache.get(r.PODS, f"{NS}/{name}")
            if obj is None or (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            bound = (obj.get("spec") or {}).get("nodeName")
            placements = run.kept.world.cluster.placements if run.kept is not None else {}
            if op == "land" and not bound and f"{NS}/{name}" in placements:
                land(c, name, placements[f"{NS}/{name}"].node)
            elif bound and op in ("ready", "unready"):
                _set_ready(c, name, op == "ready")
            elif bound and op == "finish":
                _finish_pod(c, name)
        t = now + 1 + i
        snapshot = c.cache.snapshot()
        carried = run._carry_on(snapshot, t)
        if carried is None:
            step(run, t)
            continue
        fresh = runner(c, run.settings)
        fresh.assumed = run.assumed.copy()
        rebuilt = fresh._decide_isolating(snapshot, t)
        assert outcome(carried)[0] == outcome(rebuilt)[0]
        assert set(outcome(carried)[1]) == set(outcome(rebuilt)[1])
        _finish_cycle(run, snapshot, carried, t)


def test_another_schedulers_objects_changing_or_going_are_carried_and_wake_no_cycle() -> None:
    """Every Deployment and ReplicaSet (and Job...) of the cluster is watched; their rollouts, scaling and deletions
    concern the scheduler only where their templates name it. Before, each took a full cycle (seconds at 5,000
    nodes), and woke one."""
    from gpufleet.live.assumed import AssumedPods
    from gpufleet.live.wakeup import Wakeup

    c, run, now = started([4, 4], [1, 0], backlog=1)
    wakeup = Wakeup(c.cache, AssumedPods(30.0), scheduler_name="gpufleet")
    theirs = job_object("web", pods=2)
    theirs["spec"]["template"]["spec"]["schedulerName"] = "default-scheduler"
    c.put(JOBS, theirs)
    scaled = json.loads(json.dumps(theirs))
    scaled["spec"]["parallelism"] = 5
    scaled["metadata"]["labels"]["rolled"] = "yes"
    c.put(JOBS, scaled, "MODIFIED")
    c.put(JOBS, scaled, "DELETED")
    assert wakeup.version == 0  # nothing to decide: no cycle
    c.put(r.PODS, pod("new", queue="lq"))
    assert wakeup.version == 1
    d = _carried_as_rebuilt(run, c, now + 1)
    assert f"{NS}/new" in outcome(d)[0]
    # Ours turning another's (its template's scheduler changed): what the world read of it no longer holds.
    owner = job_object("train", pods=1, queue="lq")
    c.put(JOBS, owner)
    step(run, now + 2)
    moved = json.loads(json.dumps(owner))
    moved["spec"]["template"]["spec"]["schedulerName"] = "default-scheduler"
    version = wakeup.version
    c.put(JOBS, moved, "MODIFIED")
    assert wakeup.version == version + 1
    assert run._carry_on(c.cache.snapshot(), now + 3) is None
    wakeup.close()


def test_a_finished_job_deleted_after_its_pods_is_carried_and_forgotten() -> None:
    """ttlSecondsAfterFinished deletes a finished Job with foreground propagation: the Job marked for deletion,
    its pods deleted, then the Job gone; each step carried on, the Job read out of the world's owners."""
    c, run, now = started([4], [0], backlog=0)
    owner = job_object("train", pods=1, queue="lq")
    c.put(JOBS, owner)
    [first] = job_pods(owner)
    c.put(r.PODS, first)
    d, carried = step(run, now + 1)
    assert carried and outcome(d)[0] == {f"{NS}/train"}
    name = first["metadata"]["name"]
    land(c, name, "n0")
    _finish_pod(c, name)
    step(run, now + 2)
    marked = json.loads(json.dumps(c.cache.get(JOBS, f"{NS}/train")))
    marked["metadata"]["deletionTimestamp"] = stamp()
    marked["metadata"]["finalizers"] = ["foregroundDeletion"]
    c.put(JOBS, marked, "MODIFIED")
    _carried_as_rebuilt(run, c, now + 3)
    # While its pod is still there, the Job's deletion would group the pod otherwise: a full cycle.
    snapshot_before = json.loads(json.dumps(c.cache.get(r.PODS, f"{NS}/{name}")))
    c.put(r.PODS, snapshot_before, "DELETED")
    _carried_as_rebuilt(run, c, now + 4)
    c.put(JOBS, marked, "DELETED")
    _carried_as_rebuilt(run, c, now + 5)
    assert not [o for o in run.kept.world.queues.controllers.owners if o.meta.name == "train"]  # type: ignore[union-attr]
    # A pod naming the deleted Job by its labels (its controller is gone: nothing makes one, but a user might) is a
    # workload of its own, as a rebuild reads it.
    stray = json.loads(json.dumps(first))
    stray["metadata"]["name"] = "stray"
    stray["metadata"].pop("uid", None)
    c.put(r.PODS, stray)
    _carried_as_rebuilt(run, c, now + 6)


def test_a_job_deleted_while_its_pods_remain_takes_a_full_cycle() -> None:
    c, run, now = started([4], [0], backlog=0)
    owner = job_object("train", pods=2, queue="lq")
    c.put(JOBS, owner)
    for p in job_pods(owner):
        c.put(r.PODS, p)
    assert step(run, now + 1)[1]
    c.put(JOBS, json.loads(json.dumps(c.cache.get(JOBS, f"{NS}/train"))), "DELETED")  # (background propagation)
    assert run._carry_on(c.cache.snapshot(), now + 2) is None


def test_namespaces_created_relabelled_or_deleted_are_carried_as_a_rebuild_judges_them() -> None:
    """A Namespace is a queue kind (ClusterQueues select namespaces by label): created (a team onboarded, a CI run's
    namespace), relabelled or deleted, it used to take a full cycle. Now the kept policy judges it anew, and the
    workloads of it that wait are tried again."""
    c = build([4], [0], backlog=0)
    selective = cluster_queue("sel", 8)
    selective["spec"]["namespaceSelector"] = {"matchLabels": {"team": "a"}}
    c.put(r.CLUSTER_QUEUES, selective)
    c.put(r.LOCAL_QUEUES, local_queue("lq-sel", "sel"))
    c.put(r.PODS, pod("picky", queue="lq-sel"))
    run = runner(c)
    now = time.time()
    d = first_cycle(run, now)
    assert f"{NS}/picky" in outcome(d)[1]  # the namespace has no team label: it waits
    ns = json.loads(json.dumps(c.cache.get(r.NAMESPACES, NS)))
    ns["metadata"]["labels"] = {"team": "a"}
    c.put(r.NAMESPACES, ns, "MODIFIED")
    d = _carried_as_rebuilt(run, c, now + 1)
    assert f"{NS}/picky" in outcome(d)[0]
    # What the carried round left parked holds against the queue objects it read: the next full cycle parks it
    # again instead of trying the whole backlog afresh, and decides as a rebuild with no memory does.
    assert run.parked.seen is not None and run.kept is not None
    assert run.parked.seen.queues == run.kept.world.queue_generation
    c.put(r.PODS, pod("big", gpus=16, queue="lq"))  # (parked for nodes, as no node has 16 GPUs)
    _carried_as_rebuilt(run, c, now + 1.2)
    snapshot = c.cache.snapshot()
    full = _finish_cycle(run, snapshot, None, now + 1.5)
    fresh = runner(c)
    fresh.assumed = run.assumed.copy()
    assert outcome(full)[0] == outcome(fresh._decide_isolating(snapshot, now + 1.5))[0]
    # A namespace created (no pod yet), then a pod in it naming a queue there: judged with its labels.
    c.put(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ci", "labels": {"team": "b"}}})
    _carried_as_rebuilt(run, c, now + 2)
    # The same queue's namespace relabelled away: the admitted workload stays admitted (as in Kueue), a new one waits.
    ns = json.loads(json.dumps(c.cache.get(r.NAMESPACES, NS)))
    ns["metadata"]["labels"] = {"team": "b"}
    c.put(r.NAMESPACES, ns, "MODIFIED")
    c.put(r.PODS, pod("picky-2", queue="lq-sel"))
    d = _carried_as_rebuilt(run, c, now + 3)
    assert f"{NS}/picky-2" in outcome(d)[1]
    c.put(r.NAMESPACES, c.cache.get(r.NAMESPACES, "ci"), "DELETED")
    _carried_as_rebuilt(run, c, now + 4)
    # The ClusterQueue's selector changed to select every namespace (KueuePolicy.queues_changed): what waited goes.
    selective = json.loads(json.dumps(c.cache.get(r.CLUSTER_QUEUES, "sel")))
    selective["spec"]["namespaceSelector"] = {}
    c.put(r.CLUSTER_QUEUES, selective, "MODIFIED")
    d = _carried_as_rebuilt(run, c, now + 5)
    assert f"{NS}/picky-2" in outcome(d)[0]
