"""Memory-aware time-slicing: the gpufleet profile keeps pods off time-sliced GPUs whose known memory cannot hold
them, spreads replicas over empty GPUs before stacking, and never puts a pod back on a GPU that OOM-killed it."""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.cluster.devices import DeviceGrant
from gpufleet.cluster.state import ClusterState
from gpufleet.scheduling.placement import make_placer
from gpufleet.scheduling.placement.filters import gpu_key
from gpufleet.scheduling.types import PodRequest
from tests.placement.placement_helpers import gpu_node, pod

GIB_MIB = 1024
L40S_MIB = 46068  # the catalog's L40S


def _cluster(nodes: int = 3, gpus: int = 1, replicas: int = 8) -> ClusterState:
    return ClusterState([gpu_node(f"l{i}", "L40S", gpus, mode="replicas", replicas=replicas, fail_gt1=True)
                         for i in range(nodes)])


def _replica(key: str, hint: int = 0, avoid: frozenset[str] = frozenset()) -> PodRequest:
    return replace(pod(key, shared=1), memory_hint=hint, avoid_gpus=avoid)


def _gpu_of(cluster: ClusterState, key: str) -> str:
    p = cluster.placements[key]
    return gpu_key(p.node, p.grants[0].gpu)


def test_replicas_spread_over_empty_gpus_before_stacking() -> None:
    cluster = _cluster(3)
    placer = make_placer(cluster, "gpufleet", random.Random(0))
    for i in range(3):
        placer.place([_replica(f"ns/p{i}")])
    assert len({cluster.placements[f"ns/p{i}"].node for i in range(3)}) == 3
    # kube-default's profile (LeastAllocated on cpu and memory) also spreads these; gpufleet's packing scorers
    # alone would have stacked them (the case study's OOMs): binpack shows what memory-awareness overrules.
    packed = _cluster(3)
    binpack = make_placer(packed, "binpack", random.Random(0))
    for i in range(3):
        binpack.place([_replica(f"ns/p{i}")])
    assert len({packed.placements[f"ns/p{i}"].node for i in range(3)}) == 1


def test_observed_memory_steers_the_next_pod_and_refuses_what_cannot_fit() -> None:
    cluster = _cluster(2)
    placer = make_placer(cluster, "gpufleet", random.Random(0))
    placer.place([_replica("ns/big")])
    placer.place([_replica("ns/small")])
    big_node = cluster.placements["ns/big"].node
    assert cluster.observe_memory("ns/big", 40 * GIB_MIB)
    assert cluster.observe_memory("ns/small", 2 * GIB_MIB)
    # 10 GiB fits only beside the small one; 44 GiB fits nowhere and the pod waits, saying why.
    assert placer.place([_replica("ns/next", 10 * GIB_MIB)]) is not None
    assert cluster.placements["ns/next"].node != big_node
    assert placer.place([_replica("ns/huge", 44 * GIB_MIB)]) is None
    assert "MiB free beside what its co-tenants use" in placer.explain(_replica("ns/huge", 44 * GIB_MIB))
    # Without a hint nothing is refused: the pod goes where most memory is left.
    assert placer.place([_replica("ns/unknown")]) is not None
    assert cluster.placements["ns/unknown"].node != big_node


def test_a_pod_is_never_placed_again_on_the_gpu_that_killed_it() -> None:
    cluster = _cluster(2)
    placer = make_placer(cluster, "gpufleet", random.Random(0))
    avoid = frozenset({"l0/0"})
    for i in range(8):
        assert placer.place([_replica(f"ns/r{i}", avoid=avoid)]) is not None
        assert cluster.placements[f"ns/r{i}"].node == "l1"
    # l1 is full: l0 has 8 free replicas, but only on the GPU the pod must avoid.
    assert placer.place([_replica("ns/r8", avoid=avoid)]) is None
    assert "OOM-killed" in placer.explain(_replica("ns/r8", avoid=avoid))


def test_observations_survive_a_what_if_release_and_its_rollback() -> None:
    cluster = _cluster(1)
    placer = make_placer(cluster, "gpufleet", random.Random(0))
    placer.place([_replica("ns/a", 1 * GIB_MIB)])
    cluster.observe_memory("ns/a", 30 * GIB_MIB)
    mark = cluster.checkpoint()
    cluster.release("ns/a")
    cluster.rollback(mark)
    assert cluster.nodes["l0"].gpus[0].replica_memory == {"ns/a": 30 * GIB_MIB}
    cluster.release("ns/a")
    cluster.forget_memory("ns/a")
    placer.place([_replica("ns/a", 3 * GIB_MIB)])  # a later pod of the same name starts from its hint
    assert cluster.nodes["l0"].gpus[0].replica_memory == {"ns/a": 3 * GIB_MIB}


@st.composite
def _steps(draw: st.DrawFn) -> list[tuple[str, int, int]]:
    """(op, pod number, MiB): place with a hint, observe, release."""
    return draw(st.lists(st.tuples(st.sampled_from(["place", "place", "observe", "release"]), st.integers(0, 11),
                                   st.integers(0, 30).map(lambda g: g * 2 * GIB_MIB)), max_size=40))


@given(_steps(), st.sets(st.sampled_from(["l0/0", "l0/1", "l1/0", "l1/1"]), max_size=2), st.booleans())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_known_memory_never_overflows_and_avoided_gpus_stay_avoided(steps: list[tuple[str, int, int]],
                                                                     avoid: set[str], indexed: bool) -> None:
    cluster = ClusterState([gpu_node(f"l{i}", "L40S", 2, mode="replicas", replicas=4, fail_gt1=True)
                            for i in range(2)])
    placer = make_placer(cluster, "gpufleet", random.Random(1), indexed=indexed)
    naive = make_placer(cluster, "gpufleet", random.Random(1), indexed=not indexed)
    for op, n, mib in steps:
        key = f"ns/p{n}"
        if op == "place" and key not in cluster.placements:
            req = _replica(key, mib, frozenset(avoid))
            # The index and the naive placer agree on whether the pod fits at all.
            fits = naive.why_not(req, "l0") is None or naive.why_not(req, "l1") is None
            got = placer.place([req])
            assert (got is not None) == fits
            if got is not None:
                gpu = _gpu_of(cluster, key)
                assert gpu not in avoid
                slot = cluster.nodes[got[0].node].gpus[got[0].grants[0].gpu]
                if mib > 0:  # a hint is placed only where it fits beside what is known of the co-tenants
                    assert slot.shared_memory_mib <= L40S_MIB
        elif op == "observe" and key in cluster.placements:
            cluster.observe_memory(key, mib)
        elif op == "release" and key in cluster.placements:
            cluster.release(key)
            cluster.forget_memory(key)
        for node in cluster.nodes.values():
            for g in node.gpus:
                assert set(g.replica_memory) <= {h for h in g.replica_holders if h is not None}
    cluster.check_invariants()


def test_a_two_replica_pod_counts_only_gpus_with_room_and_never_crashes() -> None:
    # GPU 0: one tenant known at 40 GiB, 3 free replicas; GPU 1: three small tenants, 1 free replica. A pod of two
    # replicas expected at 10 GiB fits only on GPU 1's single free replica: it must be refused, not crash.
    def setup() -> ClusterState:
        c = ClusterState([gpu_node("l0", "L40S", 2, mode="replicas", replicas=4, fail_gt1=False)])
        c.allocate("ns/a", "l0", {}, [DeviceGrant("replica", 0, 0, memory_mib=40 * GIB_MIB)])
        for i in range(3):
            c.allocate(f"ns/s{i}", "l0", {}, [DeviceGrant("replica", 1, i, memory_mib=GIB_MIB)])
        return c

    two = replace(pod("ns/b", shared=2), memory_hint=10 * GIB_MIB)
    cluster = setup()
    placer = make_placer(cluster, "gpufleet", random.Random(0))
    assert placer.why_not(two, "l0") is not None and placer.place([two]) is None
    # A profile without the memory-aware filters ignores what the policy knows (avoided GPUs, hints) instead of
    # choosing devices the filters never checked.
    avoiding = replace(pod("ns/b", shared=2), avoid_gpus=frozenset({"l0/0"}))
    for profile in ("kube-default", "gpufleet"):
        cluster = setup()
        got = make_placer(cluster, profile, random.Random(0)).place([avoiding])
        if profile == "gpufleet":
            assert got is None  # GPU 1 has one free replica, GPU 0 is avoided
        else:
            assert got is not None and {g.gpu for g in got[0].grants} == {0}


def test_spreading_never_moves_a_pod_off_an_exclusive_gpu() -> None:
    # A whole-GPU L40S node and a time-sliced one that also serves nvidia.com/gpu (renameByDefault false): a pod
    # asking one nvidia.com/gpu gets the exclusive GPU, whatever the seed.
    from gpufleet.api.objects import CPU, MEMORY, PODS
    from gpufleet.cluster.devices import GpuSlot
    from gpufleet.cluster.state import NodeState

    def shared_node() -> NodeState:
        slots = [GpuSlot(0, "shared/gpu-0", "L40S", L40S_MIB, "replicas", "nvidia.com/gpu", 4,
                         replica_holders=[None] * 4)]
        alloc = {CPU: 64000, MEMORY: 512 * 2**30, PODS: 110, "nvidia.com/gpu": 4}
        return NodeState(name="shared", labels={"kubernetes.io/hostname": "shared"}, taints=(), allocatable=alloc,
                         used={}, gpus=slots, gpu_model="L40S")

    for seed in range(10):
        cluster = ClusterState([gpu_node("whole", "L40S", 1), shared_node()])
        make_placer(cluster, "gpufleet", random.Random(seed)).place([pod("ns/a", gpus=1)])
        assert cluster.placements["ns/a"].node == "whole", seed


def test_topology_capacity_of_a_pod_avoiding_gpus_is_the_nodes_own() -> None:
    from gpufleet.scheduling.placement.need import compile_need

    for avoided, empty in (("a", "b"), ("b", "a")):
        cluster = ClusterState([gpu_node(n, "L40S", 1, mode="replicas", replicas=4) for n in ("a", "b")])
        placer = make_placer(cluster, "gpufleet", random.Random(0))
        need = compile_need(replace(pod("ns/x", shared=1), avoid_gpus=frozenset({f"{avoided}/0"})), placer._intern)
        assert placer.capacity(need, cluster.nodes[empty]) == 4
        assert placer.capacity(need, cluster.nodes[avoided]) == 0
