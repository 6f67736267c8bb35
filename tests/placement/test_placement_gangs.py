"""Gangs (all or none), topology-aware placement, and preemption victim search."""

from __future__ import annotations

import random

from gpufleet.api.objects import ObjectMeta, Topology
from gpufleet.cluster.state import ClusterState, NodeState
from gpufleet.scheduling.placement import GpuPlacer, make_placer
from gpufleet.scheduling.types import PodRequest, TopologyRequest
from tests.placement.placement_helpers import gpu_node, placer, pod, snapshot

BLOCK = "topology.gpufleet.io/block"
RACK = "topology.gpufleet.io/rack"
HOST = "kubernetes.io/hostname"
TOPO = Topology(ObjectMeta("dc"), (BLOCK, RACK, HOST))


def racked() -> list[NodeState]:
    """2 blocks × 2 racks × 2 hosts × 4 GPUs: host h<b><r><h> in rack r<b><r>, block b<b>."""
    nodes = []
    for b in range(2):
        for r in range(2):
            for h in range(2):
                nodes.append(gpu_node(f"h{b}{r}{h}", gpus=4, labels={BLOCK: f"b{b}", RACK: f"r{b}{r}"}))
    return nodes


def topo_placer(profile: str = "binpack", seed: int = 0) -> GpuPlacer:
    return make_placer(ClusterState(racked()), profile, random.Random(seed), [TOPO])


def gang(n: int, gpus: int, prefix: str = "g") -> list[PodRequest]:
    return [pod(f"{prefix}-{i}", gpus=gpus) for i in range(n)]


def where(pl: GpuPlacer, keys: list[str], label: str) -> set[str]:
    return {pl.cluster.nodes[pl.cluster.placements[k].node].labels[label] for k in keys}


def test_gang_is_all_or_none() -> None:
    pl = placer([gpu_node("a", gpus=4), gpu_node("b", gpus=4)])
    before = snapshot(pl.cluster)
    assert pl.place(gang(3, 4)) is None
    assert snapshot(pl.cluster) == before
    got = pl.place(gang(2, 4))
    assert got is not None and sorted(p.node for p in got) == ["a", "b"]
    pl.cluster.check_invariants()


def test_gang_places_its_largest_pods_first() -> None:
    pl = placer([gpu_node("big", gpus=4), gpu_node("small", gpus=1)], "spread")
    got = pl.place([pod("one", gpus=1), pod("four", gpus=4)])
    assert got is not None
    assert [p.pod for p in got] == ["one", "four"]  # returned in the caller's order
    assert [p.node for p in got] == ["small", "big"]


def test_required_topology_best_fit_domain() -> None:
    pl = topo_placer()
    assert pl.place([pod("fill", gpus=4, selector={HOST: "h000"})])  # rack r00 keeps 4 free GPUs
    req = TopologyRequest("dc", RACK, required=True)
    got = pl.place(gang(1, 4, "a"), req)
    assert got is not None and got[0].node == "h001"  # r00: the least free capacity that fits
    got = pl.place(gang(2, 4, "b"), req)
    assert got is not None and where(pl, ["b-0", "b-1"], RACK) == {"r01"}  # r01, r10, r11 tie: by name


def test_required_topology_never_outside_one_domain() -> None:
    pl = topo_placer()
    before = snapshot(pl.cluster)
    assert pl.place(gang(3, 4), TopologyRequest("dc", RACK, required=True)) is None  # a rack has 8 GPUs
    assert snapshot(pl.cluster) == before
    got = pl.place(gang(3, 4), TopologyRequest("dc", BLOCK, required=True))
    assert got is not None and len(where(pl, [p.pod for p in got], BLOCK)) == 1
    # Inside the block the gang is kept compact: one full rack plus one host.
    assert len(where(pl, [p.pod for p in got], RACK)) == 2


def test_required_topology_compacts_inside_the_domain() -> None:
    pl = topo_placer("spread")  # spread alone would scatter the pods over hosts
    got = pl.place(gang(2, 2), TopologyRequest("dc", BLOCK, required=True))
    assert got is not None and len({p.node for p in got}) == 1


def test_preferred_topology_smallest_domain_holding_the_gang() -> None:
    pl = topo_placer("spread")
    got = pl.place(gang(2, 1), TopologyRequest("dc", RACK, required=False))
    assert got is not None and len({p.node for p in got}) == 1  # a host holds it: smaller than a rack
    pl = topo_placer()
    assert pl.place([pod("fill", gpus=4, selector={HOST: "h110"})])  # block b1 keeps 12 free
    got = pl.place(gang(3, 4), TopologyRequest("dc", BLOCK, required=False))
    assert got is not None and where(pl, [p.pod for p in got], BLOCK) == {"b1"}  # best fit: 12 < 16


def test_preferred_topology_fewest_domains_when_none_holds_it() -> None:
    pl = topo_placer("spread")
    got = pl.place(gang(3, 4), TopologyRequest("dc", RACK, required=False))
    assert got is not None and len(where(pl, [p.pod for p in got], RACK)) == 2
    # Bigger than any block: still placed, over as few blocks as possible.
    pl = topo_placer("spread")
    got = pl.place(gang(5, 4), TopologyRequest("dc", BLOCK, required=False))
    assert got is not None and len(where(pl, [p.pod for p in got], BLOCK)) == 2


def test_topology_level_missing_from_the_topology_is_a_single_level() -> None:
    pl = topo_placer()
    got = pl.place(gang(2, 4), TopologyRequest("unknown", RACK, required=True))
    assert got is not None and len(where(pl, [p.pod for p in got], RACK)) == 1


def victims_cluster() -> GpuPlacer:
    """a: 4 GPUs with x (1) and w (3); b: 2 GPUs with y and z."""
    pl = placer([gpu_node("a", gpus=4), gpu_node("b", gpus=2)])
    for key, gpus, host in (("w", 3, "a"), ("x", 1, "a"), ("y", 1, "b"), ("z", 1, "b")):
        assert pl.place([pod(key, gpus=gpus, selector={HOST: host})])
    return pl


def test_find_victims_greedy_then_fill_back() -> None:
    pl = victims_cluster()
    before = snapshot(pl.cluster)
    # Greedy removes x, y, z (only then do 2 GPUs free up on b); fill-back puts x back: not needed.
    assert pl.find_victims([pod("p", gpus=2)], ["x", "y", "z"]) == ["y", "z"]
    assert snapshot(pl.cluster) == before
    assert pl.find_victims([pod("p", gpus=4)], ["x", "y", "z", "w"]) == ["x", "w"]  # candidate order
    assert snapshot(pl.cluster) == before


def test_find_victims_none_empty_and_unknown_candidates() -> None:
    pl = victims_cluster()
    before = snapshot(pl.cluster)
    assert pl.find_victims([pod("p", gpus=5)], ["w", "x", "y", "z"]) is None
    assert pl.find_victims([pod("p", gpus=2)], ["ghost", "y", "z"]) == ["y", "z"]
    x = pl.cluster.release("x")
    assert pl.find_victims([pod("p", gpus=1)], ["y"]) == []
    pl.cluster.allocate(x.pod, x.node, x.requests, x.grants)
    assert snapshot(pl.cluster) == before


def test_find_victims_with_required_topology() -> None:
    pl = topo_placer()
    for h in ("h000", "h001", "h010", "h100"):
        assert pl.place([pod(f"v-{h}", gpus=4, selector={HOST: h})])
    req = TopologyRequest("dc", RACK, required=True)
    # 8 GPUs in one rack: r11 is free already.
    assert pl.find_victims(gang(2, 4), ["v-h000"], req) == []
    assert pl.place([pod("v-h110", gpus=4, selector={HOST: "h110"})])
    # Every rack is half full now. Greedy frees h000 (r00 still half full), then h100: r10 is empty and
    # fits; fill-back returns v-h000, which was not needed.
    assert pl.find_victims(gang(2, 4), ["v-h000", "v-h100", "v-h001"], req) == ["v-h100"]
    # Without topology any two free hosts do: nothing to evict.
    assert pl.find_victims(gang(2, 4), ["v-h000"]) == []

