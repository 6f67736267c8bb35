"""Device assignment: NVLink best set, time-slice replicas, MIG instances, fractions."""

from __future__ import annotations

import random

from gpufleet.api.objects import CPU, GPU
from gpufleet.cluster.devices import DeviceGrant
from gpufleet.cluster.state import ClusterState
from gpufleet.scheduling.placement import make_placer
from gpufleet.scheduling.placement.devices import best_nvlink_set, set_score
from tests.placement.placement_helpers import all_pairs, casestudy, gpu_node, placer, pod


def test_best_nvlink_set_maximises_pair_score_lowest_indices_on_ties() -> None:
    links = {(0, 1): 2, (2, 3): 2, (4, 5): 2, (6, 7): 2}
    links.update({(i, j): 1 for i in range(8) for j in range(i + 1, 8) if (i, j) not in links})
    assert best_nvlink_set([1, 3, 5, 6, 7], 2, links) == (6, 7)  # 200 beats every 100
    assert set_score(links, (6, 7)) == 200
    # Any third GPU adds 100 + 100 to the 200 of (6, 7): the tie goes to the lowest, GPU 1.
    assert best_nvlink_set([1, 3, 5, 6, 7], 3, links) == (1, 6, 7)
    assert best_nvlink_set([1, 3, 5, 6, 7], 2, {}) == (1, 3)  # no NVLink: lowest indices
    assert best_nvlink_set([0, 1, 2, 3], 4, links) == (0, 1, 2, 3)
    equal = all_pairs(8, 12)
    assert best_nvlink_set([2, 4, 5, 7], 2, equal) == (2, 4)


def test_best_nvlink_set_greedy_on_large_boards() -> None:
    # 16 GPUs, two NVLink islands of 8; choose 8: the exhaustive search is skipped, the island still found.
    links = {(i, j): 4 for i in range(8, 16) for j in range(i + 1, 16)}
    links.update({(i, j): 1 for i in range(8) for j in range(i + 1, 8)})
    assert best_nvlink_set(list(range(16)), 8, links) == tuple(range(8, 16))


def test_multi_gpu_pod_gets_the_nvlink_set_and_kube_default_does_not() -> None:
    links = {(0, 1): 1, (2, 3): 1, (1, 2): 0, (0, 3): 6}

    def node() -> ClusterState:
        cluster = ClusterState([gpu_node("n", gpus=4, nvlinks=links)])
        return cluster

    cluster = node()
    got = make_placer(cluster, "binpack", random.Random(0)).place([pod("p", gpus=2)])
    assert got is not None and {g.gpu for g in got[0].grants} == {0, 3}
    assert got[0].device_ids == ("n/gpu-0", "n/gpu-3")
    cluster = node()
    got = make_placer(cluster, "kube-default", random.Random(0)).place([pod("p", gpus=2)])
    assert got is not None and [g.gpu for g in got[0].grants] == [0, 1]


def test_replicas_distributed_fewest_held_first() -> None:
    n = gpu_node("n", "L40S", 2, mode="replicas", replicas=4)
    pl = placer([n])
    gpus = []
    for i in range(4):
        got = pl.place([pod(f"r{i}", shared=1)])
        assert got is not None
        gpus.append(got[0].grants[0].gpu)
    assert gpus == [0, 1, 0, 1]
    # Two replicas in one request spread over both GPUs (fewest held, then fewest picked this round).
    got = pl.place([pod("two", shared=2)])
    assert got is not None and sorted(g.gpu for g in got[0].grants) == [0, 1]
    assert got[0].device_ids[0].endswith("::2")


def test_mig_instance_assignment_and_ids() -> None:
    cluster = casestudy()
    pl = make_placer(cluster, "binpack", random.Random(0))
    sel = {"kubernetes.io/hostname": "a100-b-0"}
    a = pl.place([pod("a", mig="1g.10gb", selector=sel)])
    b = pl.place([pod("b", mig="1g.10gb", selector=sel)])
    assert a is not None and b is not None
    slots = cluster.nodes["a100-b-0"].gpus[0].mig
    assert [s.holder for s in slots if s.resource == "nvidia.com/mig-1g.10gb"] == ["a", "b"]
    assert a[0].device_ids[0].startswith("MIG-") and a[0].device_ids != b[0].device_ids
    assert pl.place([pod("c", mig="1g.10gb", selector=sel)]) is None
    cluster.check_invariants()


def fraction_node() -> ClusterState:
    """Four A100s with 0 / 300 / 600 / 0 thousandths held."""
    cluster = ClusterState([gpu_node("n", gpus=4)])
    cluster.allocate("x", "n", {CPU: 1}, [DeviceGrant("fraction", 1, milli=300, memory_mib=24576)])
    cluster.allocate("y", "n", {CPU: 1}, [DeviceGrant("fraction", 2, milli=600, memory_mib=49152)])
    return cluster


def test_fraction_gpu_choice_follows_the_profile() -> None:
    for profile, want in (("binpack", 2), ("spread", 0), ("kube-default", 0), ("bestfit", 2)):
        cluster = fraction_node()
        got = make_placer(cluster, profile, random.Random(0)).place([pod("f", milli=400)])
        assert got is not None, profile
        g = got[0].grants[0]
        assert (g.kind, g.gpu, g.milli) == ("fraction", want, 400), profile
        assert g.memory_mib == 400 * 81920 // 1000
    # FGD picks the GPU whose use raises fragmentation least, as its gpuscore scorer says.
    cluster = fraction_node()
    pl = make_placer(cluster, "fgd", random.Random(0))
    got = pl.place([pod("f", milli=400)])
    assert got is not None and got[0].grants[0].gpu in (1, 2)


def test_whole_gpu_pod_never_lands_on_a_shared_gpu() -> None:
    cluster = fraction_node()
    got = make_placer(cluster, "binpack", random.Random(0)).place([pod("w", gpus=2)])
    assert got is not None and sorted(g.gpu for g in got[0].grants) == [0, 3]
    assert make_placer(cluster, "binpack", random.Random(0)).place([pod("w2", gpus=1)]) is None
    cluster.check_invariants()
    assert cluster.nodes["n"].used[GPU] == 2
