"""One decide (issue 27): the live scheduler's cycle and the dashboard's live source call the same function on the
same snapshot, so the placements the dashboard marks as planned are the Bindings the scheduler sends next. Held to
that on generated clusters: queues with quotas, gangs, bound pods, pending pods of several sizes.

The plan core (``gpufleet plan``, the files dashboard: ``scheduling.snapshot_plan``) and the simulator drive the
same policy core (``KueuePolicy``: submit, then cycles) from manifests and a trace instead of a cache: on the same
objects they place the same pods on the same nodes (the plan core on the same devices too). The simulator starts
from an empty cluster (its input is arrivals), so its clusters have no pod bound beforehand."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live_env import cluster_queue, flavor, local_queue, node, pod

from gpufleet.api.manifests import load_manifest_text
from gpufleet.cluster.build import build_workloads
from gpufleet.cluster.state import ClusterState
from gpufleet.k8s import resources as r
from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.informer import CacheSnapshot, ObjectCache
from gpufleet.k8s.parsing import ParseCache
from gpufleet.live import planner
from gpufleet.live.assumed import AssumedPods
from gpufleet.live.cycle import CycleRunner
from gpufleet.live.queuesource import QueueChooser
from gpufleet.live.settings import SchedulerSettings
from gpufleet.scheduler_metrics import SchedulerMetrics
from gpufleet.scheduling.kueue import KueuePolicy
from gpufleet.scheduling.snapshot_plan import run_cycles
from gpufleet.sim.engine import Simulator
from gpufleet.sim.model import SimConfig, SimJob
from gpufleet.web.source_live import LiveSource

JsonDict = dict[str, Any]


def _snapshot(objects: list[tuple[r.ResourceType, JsonDict]]) -> CacheSnapshot:
    out: dict[str, dict[str, JsonDict]] = {}
    for i, (res, obj) in enumerate(objects):
        obj = json.loads(json.dumps(obj))
        obj["metadata"]["resourceVersion"] = str(i + 1)
        obj["metadata"].setdefault("uid", f"uid-{i}")
        out.setdefault(res.key, {})[res.object_key(obj)] = obj
    return CacheSnapshot(1, out)


def _scheduler_binds(snapshot: CacheSnapshot, now: float) -> set[tuple[str, str, tuple[str, ...]]]:
    """What the scheduler's cycle would bind: (pod, node, devices)."""
    client = KubeClient(host="http://127.0.0.1:9")  # never called: deciding writes nothing
    cycle = CycleRunner(client, ObjectCache(), SchedulerSettings(), identity="test", metrics=SchedulerMetrics(),
                  may_write=lambda: False)
    try:
        d = cycle._decide(snapshot, now, AssumedPods(), planner.ParkedMemory())
        return {(p.key, p.node, tuple(p.devices)) for job in d.jobs for p in job.pods}
    finally:
        cycle.close()
        client.close()


def _dashboard_plans(snapshot: CacheSnapshot, now: float) -> set[tuple[str, str, tuple[str, ...]]]:
    """What the dashboard's live source marks as planned: (pod, node, devices)."""
    source = object.__new__(LiveSource)  # its informers are not needed to build a view of a given snapshot
    source.title, source.settings, source.parse = "test", SchedulerSettings(), ParseCache()
    source.queues = QueueChooser(list(r.SCHEDULER_RESOURCES))
    source.events = SimpleNamespace(synced=True)
    view = source._build(snapshot, now)
    devices: dict[tuple[str, str], list[str]] = {}
    for n in view.nodes:
        for g in n.gpus:
            for s in g.slices:
                if s.state == "planned" and s.holder is not None:
                    devices.setdefault((s.holder, n.name), []).append(s.id)
    return {(pod_key, node_name, tuple(ids)) for (pod_key, node_name), ids in devices.items()}


def _manifests(objects: list[tuple[r.ResourceType, JsonDict]]) -> Any:
    loaded = load_manifest_text("\n---\n".join(yaml.safe_dump(obj) for _, obj in objects))
    assert not loaded.problems.errors, loaded.problems.errors
    return loaded


def _plan_places(objects: list[tuple[r.ResourceType, JsonDict]]) -> set[tuple[str, str, tuple[str, ...]]]:
    """What ``gpufleet plan`` admits, until stable: (pod, node, devices) of the pods it places."""
    result = run_cycles(_manifests(objects), 1, until_stable=True)
    return {(p.pod, p.node, tuple(p.devices)) for c in result.cycles for a in c.decisions.admitted for p in a.pods
            if p.node is not None}


def _simulator_starts(objects: list[tuple[r.ResourceType, JsonDict]]) -> set[tuple[str, str | None]]:
    """The pods the simulator starts at its first instant, every workload arriving then: (pod, node)."""
    manifests = _manifests(objects)
    jobs = [SimJob(workload=w, arrival=0.0, duration=1e6, gang=w.gang, backoff_limit=0)
            for w in build_workloads(manifests)]
    result = Simulator(KueuePolicy(manifests, ClusterState.from_nodes(manifests.nodes)), jobs,
                       SimConfig(horizon_s=10.0)).run()
    return {(span.pod, span.node) for span in result.spans if span.held_from == 0.0}


def _generated(nodes: int, bound: list[int], pending: list[tuple[int, bool, int]],
               quota: int) -> list[tuple[r.ResourceType, JsonDict]]:
    objects: list[tuple[r.ResourceType, JsonDict]] = [(r.NODES, node(f"n{i}", gpus=8)) for i in range(nodes)]
    objects += [(r.RESOURCE_FLAVORS, flavor()), (r.CLUSTER_QUEUES, cluster_queue("team", quota)),
                (r.LOCAL_QUEUES, local_queue("team", "team"))]
    objects += [(r.PODS, pod(f"running-{i}", gpus, queue="team", node_name=f"n{i % nodes}")) for i, gpus in
                enumerate(bound)]
    for i, (gpus, queued, gang) in enumerate(pending):
        created = f"2026-01-01T00:{i:02d}:00Z"
        if gang:  # a pod group of gang+1 pods
            objects += [(r.PODS, pod(f"g{i}-{k}", gpus, queue="team" if queued else None, group=f"g{i}",
                                     group_size=gang + 1, created=created)) for k in range(gang + 1)]
        else:
            objects.append((r.PODS, pod(f"p{i}", gpus, queue="team" if queued else None, created=created)))
    return objects


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.integers(min_value=1, max_value=3),
       pending=st.lists(st.tuples(st.integers(min_value=1, max_value=8), st.just(True), st.integers(0, 2)),
                        min_size=1, max_size=8),
       quota=st.integers(min_value=4, max_value=24))
def test_plan_and_the_simulator_place_what_the_scheduler_binds(nodes: int, pending: list[tuple[int, bool, int]],
                                                               quota: int) -> None:
    # No pod bound beforehand: the simulator starts from an empty cluster, and plan admits a bound pod's workload
    # in its first cycle (where it is), which draws on the tie-breaking stream the live cycle does not draw on, so
    # equal nodes could then be chosen apart.
    objects = _generated(nodes, [], pending, quota)
    scheduler = _scheduler_binds(_snapshot(objects), time.time())
    assert _plan_places(objects) == scheduler
    assert _simulator_starts(objects) == {(key, where) for key, where, _ in scheduler}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.integers(min_value=1, max_value=3),
       bound=st.lists(st.integers(min_value=1, max_value=4), max_size=3),
       pending=st.lists(st.tuples(st.integers(min_value=1, max_value=8), st.booleans(), st.integers(0, 2)),
                        min_size=1, max_size=8),
       quota=st.integers(min_value=4, max_value=24))
def test_the_dashboard_plans_exactly_what_the_scheduler_binds(nodes: int, bound: list[int],
                                                              pending: list[tuple[int, bool, int]],
                                                              quota: int) -> None:
    snapshot = _snapshot(_generated(nodes, bound, pending, quota))
    now = time.time()
    scheduler = _scheduler_binds(snapshot, now)
    assert _dashboard_plans(snapshot, now) == scheduler


def test_a_fixed_cluster_is_planned_alike_and_not_trivially() -> None:
    objects: list[tuple[r.ResourceType, JsonDict]] = [(r.NODES, node("n0", gpus=8)), (r.NODES, node("n1", gpus=8))]
    objects += [(r.RESOURCE_FLAVORS, flavor()), (r.CLUSTER_QUEUES, cluster_queue("team", 12)),
                (r.LOCAL_QUEUES, local_queue("team", "team")), (r.PODS, pod("running", 4, node_name="n0"))]
    objects += [(r.PODS, pod(f"g-{k}", 4, queue="team", group="g", group_size=2)) for k in range(2)]
    objects += [(r.PODS, pod("small", 1, queue="team", created="2026-01-01T00:05:00Z")),
                (r.PODS, pod("big", 8, queue="team", created="2026-01-01T00:06:00Z"))]  # beyond the quota left
    snapshot = _snapshot(objects)
    now = time.time()
    scheduler = _scheduler_binds(snapshot, now)
    assert {key for key, _, _ in scheduler} == {"ml/g-0", "ml/g-1", "ml/small"}
    assert _dashboard_plans(snapshot, now) == scheduler
