"""Cluster state invariants: examples and hypothesis properties, including rollback exactness."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.cluster.devices import DeviceGrant, InvariantError, fraction_need
from gpufleet.cluster.state import ClusterState
from tests.conftest import manifests

CLUSTER = """apiVersion: gpufleet.io/v1alpha1
kind: NodePool
metadata: {name: whole}
spec: {count: 1, namePrefix: w, cpu: "16", memory: 128Gi, pods: 6, gpu: {model: A100-SXM4-80GB, count: 2}}
---
apiVersion: gpufleet.io/v1alpha1
kind: NodePool
metadata: {name: ts}
spec:
  count: 1
  namePrefix: t
  cpu: "16"
  memory: 128Gi
  gpu: {model: T4, count: 1}
  sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 3}]}}
---
apiVersion: gpufleet.io/v1alpha1
kind: NodePool
metadata: {name: mig}
spec:
  count: 1
  namePrefix: m
  cpu: "16"
  memory: 128Gi
  gpu: {model: A100-SXM4-80GB, count: 1, migLayout: "3g.40gb,2g.20gb,1g.10gb:2"}
  sharing: {migStrategy: mixed}
"""


def cluster() -> ClusterState:
    m = manifests(CLUSTER)
    assert not m.problems.errors
    return ClusterState.from_nodes(m.nodes)


def snapshot(state: ClusterState) -> Any:
    return (
        {n.name: (dict(n.used), sorted(n.pods)) for n in state},
        {n.name: [(g.holder, dict(g.fractions), list(g.replica_holders), [s.holder for s in g.mig]) for g in n.gpus]
         for n in state},
        sorted(state.placements),
    )


def test_whole_gpu_is_held_by_one_pod() -> None:
    s = cluster()
    s.allocate("a", "w-0", {"cpu": 1000, "nvidia.com/gpu": 1}, [DeviceGrant("whole", 0)])
    with pytest.raises(InvariantError, match="not a free whole GPU"):
        s.allocate("b", "w-0", {"cpu": 1000, "nvidia.com/gpu": 1}, [DeviceGrant("whole", 0)])
    assert "b" not in s.placements and s.nodes["w-0"].used["cpu"] == 1000
    with pytest.raises(InvariantError, match="cannot take a fraction"):
        s.allocate("c", "w-0", {"cpu": 1000}, [DeviceGrant("fraction", 0, milli=100, memory_mib=100)])
    s.check_invariants()


def test_fractions_sum_to_one_gpu_and_its_memory() -> None:
    s = cluster()
    s.allocate("a", "w-0", {}, [DeviceGrant("fraction", 1, milli=600, memory_mib=40000)])
    with pytest.raises(InvariantError, match="exceed one GPU"):
        s.allocate("b", "w-0", {}, [DeviceGrant("fraction", 1, milli=500, memory_mib=1000)])
    with pytest.raises(InvariantError, match="memory would exceed"):
        s.allocate("c", "w-0", {}, [DeviceGrant("fraction", 1, milli=300, memory_mib=50000)])
    s.allocate("d", "w-0", {}, [DeviceGrant("fraction", 1, milli=400, memory_mib=41000)])
    assert s.nodes["w-0"].gpus[1].free_milli == 0
    with pytest.raises(InvariantError, match="not a free whole GPU"):
        s.allocate("e", "w-0", {"nvidia.com/gpu": 1}, [DeviceGrant("whole", 1)])
    assert s.gpu_allocated() == 1.0


def test_replicas_and_mig_instances_hold_one_pod_each() -> None:
    s = cluster()
    for i in range(3):
        s.allocate(f"r{i}", "t-0", {"nvidia.com/gpu": 1}, [DeviceGrant("replica", 0, i)])
    with pytest.raises(InvariantError):
        s.allocate("r3", "t-0", {"nvidia.com/gpu": 1}, [DeviceGrant("replica", 0, 0)])
    assert s.placements["r1"].device_ids[0].endswith("::1")
    s.allocate("m0", "m-0", {"nvidia.com/mig-3g.40gb": 1}, [DeviceGrant("mig", 0, 0)])
    with pytest.raises(InvariantError, match="is held"):
        s.allocate("m1", "m-0", {}, [DeviceGrant("mig", 0, 0)])
    assert s.placements["m0"].device_ids[0].startswith("MIG-")


def test_capacity_is_checked_and_nothing_leaks_on_failure() -> None:
    s = cluster()
    before = snapshot(s)
    with pytest.raises(InvariantError, match="exceeds allocatable"):
        s.allocate("big", "w-0", {"cpu": 17000}, [])
    with pytest.raises(InvariantError, match=r"nvidia\.com/gpu"):
        s.allocate("g", "w-0", {"nvidia.com/gpu": 3}, [DeviceGrant("whole", 0)])
    # A grant list failing half-way leaves the first grant undone.
    with pytest.raises(InvariantError):
        s.allocate("two", "w-0", {"nvidia.com/gpu": 2}, [DeviceGrant("whole", 0), DeviceGrant("whole", 0)])
    assert snapshot(s) == before
    for i in range(6):
        s.allocate(f"p{i}", "w-0", {"cpu": 10}, [])
    with pytest.raises(InvariantError, match=r"maximum of pods"):
        s.allocate("p6", "w-0", {"cpu": 10}, [])


def test_fraction_need_follows_share_and_memory() -> None:
    assert fraction_need(500, None, 80000) == (500, 40000)
    assert fraction_need(0, 20000, 80000) == (250, 20000)
    assert fraction_need(100, 40000, 80000) == (500, 40000)


def test_nested_checkpoints() -> None:
    s = cluster()
    s.allocate("keep", "w-0", {"cpu": 1}, [])
    outer = s.checkpoint()
    s.allocate("a", "w-0", {"cpu": 1}, [DeviceGrant("whole", 0)])
    inner = s.checkpoint()
    s.release("keep")
    s.allocate("b", "t-0", {}, [DeviceGrant("replica", 0, 2)])
    s.rollback(inner)
    assert set(s.placements) == {"keep", "a"}
    s.rollback(outer)
    assert set(s.placements) == {"keep"}
    mark = s.checkpoint()
    s.allocate("c", "w-0", {}, [])
    s.commit(mark)
    assert "c" in s.placements


# ---- properties ---------------------------------------------------------------------------------------------

GRANTS = st.one_of(
    st.builds(lambda g: ("w-0", {"nvidia.com/gpu": 1}, [DeviceGrant("whole", g)]), st.integers(0, 2)),
    st.builds(lambda g, milli, mem: ("w-0", {}, [DeviceGrant("fraction", g, milli=milli, memory_mib=mem)]),
              st.integers(0, 1), st.integers(1, 1000), st.integers(0, 90000)),
    st.builds(lambda r: ("t-0", {"nvidia.com/gpu": 1}, [DeviceGrant("replica", 0, r)]), st.integers(0, 3)),
    st.builds(lambda i: ("m-0", {}, [DeviceGrant("mig", 0, i)]), st.integers(0, 4)),
    st.builds(lambda cpu: ("w-0", {"cpu": cpu}, []), st.integers(0, 20000)),
)
OPS = st.lists(st.one_of(
    st.tuples(st.just("alloc"), GRANTS),
    st.tuples(st.just("release"), st.integers(0, 50)),
    st.tuples(st.just("checkpoint"), st.none()),
    st.tuples(st.just("rollback"), st.none()),
), max_size=40)


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_random_operations_keep_every_invariant_and_rollback_is_exact(ops: list[tuple[str, Any]]) -> None:
    s = cluster()
    marks: list[tuple[int, Any]] = []
    counter = 0
    for op, arg in ops:
        if op == "alloc":
            node, requests, grants = arg
            before = snapshot(s)
            try:
                s.allocate(f"pod-{counter}", node, requests, grants)
            except InvariantError:
                assert snapshot(s) == before  # a refused allocation changes nothing
            counter += 1
        elif op == "release" and s.placements:
            pods = sorted(s.placements)
            s.release(pods[arg % len(pods)])
        elif op == "checkpoint":
            marks.append((s.checkpoint(), snapshot(s)))
        elif op == "rollback" and marks:
            mark, snap = marks.pop()
            s.rollback(mark)
            assert snapshot(s) == snap
        s.check_invariants()
        for node in s:
            for gpu in node.gpus:
                assert 0 <= gpu.used_milli <= 1000
                assert gpu.used_memory_mib <= gpu.memory_mib
                if gpu.mode == "replicas":
                    assert len(gpu.replica_holders) == gpu.replicas
