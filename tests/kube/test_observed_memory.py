"""The node agent's observation of a pod's GPU memory (gpufleet.io/gpu-memory-used) reaches the live scheduler's
memory book: full cycles and cycles that carry on place the next pod of a time-sliced GPU by it, as a rebuild
does.

In process, as tests/kube/test_carried_cycles.py: an ObjectCache filled by hand, runners that never write."""

from __future__ import annotations

import json
import time
from typing import Any

from live_env import NS, gpu_uuid, node, pod
from test_carried_cycles import Cluster, first_cycle, outcome, runner, step

from gpufleet.api.objects import GPU_MEMORY_USED_ANNOTATION
from gpufleet.k8s import resources as r
from gpufleet.k8s.annotations import intent_annotations

JsonDict = dict[str, Any]
NODE = "ts"


def _sliced_node() -> JsonDict:
    """Two L40S (45 GiB) time-sliced four ways: eight replicas."""
    obj = node(NODE, gpus=2, model="L40S")
    notes = obj["metadata"]["annotations"]
    inventory = json.loads(notes["gpufleet.io/gpus"])
    inventory["sharing"]["timeSlicing"] = {"nvidia.com/gpu": 4}
    notes["gpufleet.io/gpus"] = json.dumps(inventory)
    for field in ("capacity", "allocatable"):
        obj["status"][field]["nvidia.com/gpu"] = "8"
    return obj


def _running(name: str, gpu: int, replica: int, used: str | None = None) -> JsonDict:
    notes = intent_annotations(NODE, (f"{gpu_uuid(NODE, gpu)}::{replica}",), 1_700_000_000.0, None)
    if used is not None:
        notes[GPU_MEMORY_USED_ANNOTATION] = used
    return pod(name, queue="lq", node_name=NODE, annotations=notes)


def _cluster(a_used: str | None) -> Cluster:
    """GPU 0 holds ``a`` alone; GPU 1 holds ``c`` and ``d``, whose memory nobody knows."""
    c = Cluster()
    c.put(r.NODES, _sliced_node())
    c.put(r.PODS, _running("a", 0, 0, a_used))
    c.put(r.PODS, _running("c", 1, 0))
    c.put(r.PODS, _running("d", 1, 1))
    return c


def _newcomer() -> JsonDict:
    return pod("b", queue="lq", annotations={"gpufleet.io/gpu-memory": "10Gi"}, created="2026-01-02T00:00:00Z")


def _gpu_of(d: Any, key: str) -> str:
    [device] = [dev for job in d.jobs for p in job.pods if p.key == key for dev in p.devices]
    return str(device).partition("::")[0]


def test_a_full_cycle_keeps_the_newcomer_off_the_gpu_the_agent_saw_nearly_full() -> None:
    seen = _cluster("40Gi")
    seen.put(r.PODS, _newcomer())
    blind = _cluster(None)
    blind.put(r.PODS, _newcomer())
    now = time.time()
    # Unknown memory: the emptier GPU (one tenant) takes it; known to hold 40 of 45 GiB: the other one does.
    assert _gpu_of(first_cycle(runner(blind), now), f"{NS}/b") == gpu_uuid(NODE, 0)
    assert _gpu_of(first_cycle(runner(seen), now), f"{NS}/b") == gpu_uuid(NODE, 1)


def test_an_observation_arriving_is_carried_on_and_decides_as_a_rebuild() -> None:
    c = _cluster(None)
    kept = runner(c)
    now = time.time()
    first_cycle(kept, now)
    assert kept.kept is not None
    a = json.loads(json.dumps(c.cache.get(r.PODS, f"{NS}/a")))
    a["metadata"]["annotations"][GPU_MEMORY_USED_ANNOTATION] = "40Gi"  # the node agent's patch
    c.put(r.PODS, a, "MODIFIED")
    c.put(r.PODS, _newcomer())
    snapshot = c.cache.snapshot()
    carried = kept._carry_on(snapshot, now + 1)
    assert carried is not None, "an observation written on a running pod is carried on"
    assert _gpu_of(carried, f"{NS}/b") == gpu_uuid(NODE, 1)
    assert carried.world.cluster.observed_memory == {f"{NS}/a": 40 * 1024}
    fresh = runner(c)
    fresh.assumed = kept.assumed.copy()
    rebuilt = fresh._decide_isolating(snapshot, now + 1)
    assert outcome(carried) == outcome(rebuilt)
    assert _gpu_of(rebuilt, f"{NS}/b") == gpu_uuid(NODE, 1)


def test_another_change_to_the_pod_beside_the_observation_still_takes_a_full_cycle() -> None:
    c = _cluster(None)
    kept = runner(c)
    now = time.time()
    first_cycle(kept, now)
    a = json.loads(json.dumps(c.cache.get(r.PODS, f"{NS}/a")))
    a["metadata"]["annotations"][GPU_MEMORY_USED_ANNOTATION] = "40Gi"
    a["metadata"]["labels"]["team"] = "vision"  # read by selectors, queues: not something to carry
    c.put(r.PODS, a, "MODIFIED")
    assert kept._carry_on(c.cache.snapshot(), now + 1) is None


def _observe(c: Cluster, name: str, used: str) -> None:
    obj = json.loads(json.dumps(c.cache.get(r.PODS, f"{NS}/{name}")))
    obj["metadata"]["annotations"][GPU_MEMORY_USED_ANNOTATION] = used
    c.put(r.PODS, obj, "MODIFIED")


def test_a_peak_reported_as_it_grows_counts_once_for_its_class() -> None:
    """Each pod weighs once in its class's figures however often its peak is written (a rebuild reads each pod
    once): two pods seen are not enough to expect anything of a third that declares nothing."""
    c = Cluster()
    c.put(r.NODES, _sliced_node())
    for name, gpu, replica in (("a", 0, 0), ("c", 1, 0)):
        obj = _running(name, gpu, replica, "10Gi" if name == "c" else None)
        obj["metadata"]["labels"]["gpufleet.io/workload-class"] = "llm"
        c.put(r.PODS, obj)
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    for k, used in enumerate(("30Gi", "35Gi", "40Gi")):
        _observe(c, "a", used)
        _, carried = step(run, now + 1 + k)
        assert carried
    newcomer = pod("b", queue="lq", created="2026-01-02T00:00:00Z")
    newcomer["metadata"]["labels"]["gpufleet.io/workload-class"] = "llm"
    c.put(r.PODS, newcomer)
    snapshot = c.cache.snapshot()
    fresh = runner(c)
    fresh.assumed = run.assumed.copy()
    rebuilt = fresh._decide_isolating(snapshot, now + 5)
    carried_on = run._carry_on(snapshot, now + 5)
    assert carried_on is not None
    assert outcome(carried_on) == outcome(rebuilt) and f"{NS}/b" in outcome(rebuilt)[0]


def test_an_observation_removed_or_unreadable_takes_a_full_cycle_and_none_past_the_gpu_is_believed() -> None:
    for after in ("garbage", None):
        c = _cluster("40Gi")
        run = runner(c)
        now = time.time()
        first_cycle(run, now)
        a = json.loads(json.dumps(c.cache.get(r.PODS, f"{NS}/a")))
        if after is None:
            del a["metadata"]["annotations"][GPU_MEMORY_USED_ANNOTATION]
        else:
            a["metadata"]["annotations"][GPU_MEMORY_USED_ANNOTATION] = after
        c.put(r.PODS, a, "MODIFIED")
        assert run._carry_on(c.cache.snapshot(), now + 1) is None, after
    d = first_cycle(runner(_cluster("9Ei")), time.time())
    assert d.world.cluster.observed_memory == {f"{NS}/a": 46068}  # an L40S's memory, not 9 EiB
