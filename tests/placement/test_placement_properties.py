"""Invariants under random clusters and random place/release sequences (hypothesis), and the index against
the naive placer."""

from __future__ import annotations

import random
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.api.objects import ObjectMeta, Taint, Toleration, Topology
from gpufleet.cluster.state import ClusterState, NodeState
from gpufleet.scheduling.placement import GpuPlacer, make_placer
from gpufleet.scheduling.placement.index import ClassIndex
from gpufleet.scheduling.types import PodRequest, TopologyRequest
from tests.placement.placement_helpers import gpu_node, pod, snapshot

RACK = "rack"
UNPRICED = "G2"  # a model the catalog does not know: no price (like the openb trace's)
TOPO = Topology(ObjectMeta("t"), ("zone", RACK, "kubernetes.io/hostname"))
DETERMINISTIC = ("binpack", "spread", "cost", "kube-default", "gpufleet", "fgd", "bestfit", "dotprod",
                 "gpupacking", "gpuclustering")


@dataclass(frozen=True)
class NodeSpec:
    kind: str  # whole | replicas | cpu
    model: str
    gpus: int
    replicas: int
    fail_gt1: bool
    cpu: int
    zone: str
    rack: int
    tainted: bool


@dataclass(frozen=True)
class PodSpec:
    kind: str  # none | gpu | shared | fraction
    count: int
    milli: int
    cpu: int
    mem: int
    zone: str | None
    tolerate: bool
    models: tuple[str, ...]


node_specs = st.builds(
    NodeSpec,
    kind=st.sampled_from(["whole", "whole", "replicas", "cpu"]),
    model=st.sampled_from(["T4", "A100-SXM4-80GB", "H100-SXM5-80GB", UNPRICED]),
    gpus=st.integers(1, 4),
    replicas=st.integers(2, 4),
    fail_gt1=st.booleans(),
    cpu=st.sampled_from([8000, 16000, 32000]),
    zone=st.sampled_from(["a", "b"]),
    rack=st.integers(0, 2),
    tainted=st.booleans(),
)
pod_specs = st.builds(
    PodSpec,
    kind=st.sampled_from(["none", "gpu", "gpu", "shared", "fraction", "fraction"]),
    count=st.integers(1, 3),
    milli=st.sampled_from([100, 250, 300, 500, 700, 900]),
    cpu=st.sampled_from([500, 1000, 4000, 8000]),
    mem=st.integers(1, 32),
    zone=st.sampled_from([None, None, "a", "b"]),
    tolerate=st.booleans(),
    models=st.sampled_from([(), (), ("T4",), ("A100-SXM4-80GB", "H100-SXM5-80GB"), ("H100-SXM5-80GB", UNPRICED)]),
)
ops = st.lists(st.one_of(
    st.tuples(st.just("place"), st.lists(pod_specs, min_size=1, max_size=3),
              st.sampled_from([None, (RACK, True), ("zone", True), (RACK, False)])),
    st.tuples(st.just("release"), st.integers(0, 1000), st.none()),
), min_size=1, max_size=25)


def build(specs: list[NodeSpec]) -> ClusterState:
    nodes: list[NodeState] = []
    for i, s in enumerate(specs):
        labels = {"zone": s.zone, RACK: f"{s.zone}-{s.rack}"}
        taints = [Taint("dedicated", "x")] if s.tainted else []
        if s.kind == "cpu":
            n = gpu_node(f"n{i:02d}", gpus=0, cpu=s.cpu, labels=labels, taints=taints)
        elif s.kind == "replicas":
            n = gpu_node(f"n{i:02d}", "L40S", s.gpus, mode="replicas", replicas=s.replicas, fail_gt1=s.fail_gt1,
                         cpu=s.cpu, labels=labels, taints=taints)
        else:
            n = gpu_node(f"n{i:02d}", s.model, s.gpus, cpu=s.cpu, labels=labels, taints=taints,
                         nvlinks={(0, 1): 2, (2, 3): 2, (0, 3): 1},
                         memory_mib=32768 if s.model == UNPRICED else None)
        nodes.append(n)
    return ClusterState(nodes)


def make_pod(key: str, s: PodSpec) -> PodRequest:
    common = {"cpu": s.cpu, "mem_gib": s.mem, "selector": {"zone": s.zone} if s.zone else None,
              "tolerations": [Toleration("dedicated", "Exists")] if s.tolerate else [], "models": s.models}
    if s.kind == "gpu":
        return pod(key, gpus=s.count, **common)  # type: ignore[arg-type]
    if s.kind == "shared":
        return pod(key, shared=s.count, **common)  # type: ignore[arg-type]
    if s.kind == "fraction":
        return pod(key, milli=s.milli, **common)  # type: ignore[arg-type]
    return pod(key, **{**common, "models": ()})  # type: ignore[arg-type]


def index_shape(index: ClassIndex) -> set[tuple[object, ...]]:
    return {(g.key, c.key, frozenset(n.name for n in c.nodes)) for g in index.groups.values()
            for c in g.classes.values()}


def check_filters_hold(pl: GpuPlacer, placed: list[str], pods: dict[str, PodRequest]) -> None:
    """Each placed pod would pass every filter on its node, with everything else in place."""
    cluster = pl.cluster
    for key in placed:
        p = cluster.placements[key]
        cluster.release(key)
        assert pl.why_not(pods[key], p.node) is None, (key, p.node)
        cluster.allocate(p.pod, p.node, p.requests, p.grants)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(node_specs, min_size=1, max_size=8), sequence=ops, seed=st.integers(0, 2**16),
       profile=st.sampled_from(["gpufleet", "binpack", "spread", "random", "kube-default", "gpuclustering"]))
def test_random_sequences_keep_every_invariant(specs: list[NodeSpec], sequence: list[tuple[object, ...]],
                                               seed: int, profile: str) -> None:
    cluster = build(specs)
    pl = make_placer(cluster, profile, random.Random(seed), [TOPO])
    pods: dict[str, PodRequest] = {}
    n = 0
    for op, arg, topo in sequence:
        if op == "release":
            if cluster.placements:
                keys = sorted(cluster.placements)
                cluster.release(keys[int(arg) % len(keys)])  # type: ignore[call-overload]
        else:
            gang = []
            for s in arg:  # type: ignore[attr-defined]
                key = f"p{n}"
                n += 1
                pods[key] = make_pod(key, s)
                gang.append(pods[key])
            req = TopologyRequest("t", topo[0], topo[1]) if topo else None  # type: ignore[index]
            before = snapshot(cluster)
            got = pl.place(gang, req)
            if got is None:
                assert snapshot(cluster) == before  # gangs are never partial
            else:
                assert [p.pod for p in got] == [g.key for g in gang]
                assert all(g.key in cluster.placements for g in gang)
                check_filters_hold(pl, [g.key for g in gang], pods)
                if req is not None and req.required:
                    domains = {cluster.nodes[p.node].labels[req.level] for p in got}
                    assert len(domains) == 1, domains  # required topology never violated
        cluster.check_invariants()  # no device, no resource over-committed
        assert pl.index is not None
        assert index_shape(pl.index) == index_shape(ClassIndex(cluster, pl.tags))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(node_specs, min_size=1, max_size=10), pod_list=st.lists(pod_specs, min_size=1, max_size=30),
       profile=st.sampled_from(DETERMINISTIC), releases=st.lists(st.integers(0, 100), max_size=5))
def test_index_chooses_as_the_naive_placer(specs: list[NodeSpec], pod_list: list[PodSpec], profile: str,
                                           releases: list[int]) -> None:
    """With deterministic scorers and the name tie-break, classes change nothing: same nodes, same devices."""
    results = []
    for indexed in (True, False):
        cluster = build(specs)
        pl = make_placer(cluster, profile, random.Random(0), indexed=indexed, tie_break="name")
        out = []
        for i, s in enumerate(pod_list):
            got = pl.place([make_pod(f"p{i}", s)])
            out.append(None if got is None else (got[0].node, got[0].grants))
            if releases and i % 7 == 6 and cluster.placements:
                keys = sorted(cluster.placements)
                cluster.release(keys[releases[i % len(releases)] % len(keys)])
        results.append(out)
    assert results[0] == results[1]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(node_specs, min_size=1, max_size=10), pod_list=st.lists(pod_specs, min_size=1, max_size=30),
       seed=st.integers(0, 2**16), releases=st.lists(st.integers(0, 100), max_size=5))
def test_gpufleet_never_takes_a_dearer_model_while_a_cheaper_one_has_room(
        specs: list[NodeSpec], pod_list: list[PodSpec], seed: int, releases: list[int]) -> None:
    """The cost rule of the default profile, for single pods: when the chosen node's model has a price, no
    node of a cheaper priced model could have taken the pod. Models without a price are never compared."""
    cluster = build(specs)
    pl = make_placer(cluster, "gpufleet", random.Random(seed))
    catalog = cluster.catalog
    for i, s in enumerate(pod_list):
        p = make_pod(f"p{i}", s)
        got = pl.place([p])
        if got is not None and s.kind != "none":
            chosen = cluster.nodes[got[0].node]
            price = catalog.known_price(chosen.gpu_model) if chosen.gpu_model else None
            cluster.release(p.key)
            if price is not None:
                cheaper = [n.name for n in cluster if n.gpu_model and (q := catalog.known_price(n.gpu_model))
                           is not None and q < price and pl.why_not(p, n.name) is None]
                assert not cheaper, (p.key, chosen.name, cheaper)
            assert pl.place([p]) is not None  # back on some node: it fitted a moment ago
        if releases and i % 7 == 6 and cluster.placements:
            keys = sorted(cluster.placements)
            cluster.release(keys[releases[i % len(releases)] % len(keys)])


def test_random_tie_break_is_uniform_over_nodes_not_classes() -> None:
    """Nine identical empty nodes form one class, a tenth with a CPU pod another; the random profile ties all
    ten. Each node must get ~1/10 of the pods (class-uniform drawing would give the lone node 1/2)."""
    hits = 0
    trials = 2000
    for seed in range(trials):
        cluster = ClusterState([gpu_node(f"n{i}", gpus=1) for i in range(10)])
        cluster.allocate("cpu", "n0", {"cpu": 1000}, [])
        pl = make_placer(cluster, "random", random.Random(seed))
        assert pl.index is not None and pl.index.class_count() == 2
        got = pl.place([pod("p", gpus=1)])
        assert got is not None
        hits += got[0].node == "n0"
    # Binomial(2000, 0.1): mean 200, sd 13.4; the bounds are ±4.5 sd.
    assert 140 < hits < 260


def test_same_seed_same_choices() -> None:
    def run(seed: int) -> list[str]:
        cluster = ClusterState([gpu_node(f"n{i}", gpus=2) for i in range(20)])
        pl = make_placer(cluster, "gpufleet", random.Random(seed))
        out = []
        for i in range(30):
            got = pl.place([pod(f"p{i}", milli=300 + 100 * (i % 5))])
            assert got is not None
            out.append(got[0].node)
        return out

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_index_follows_rollbacks_and_refresh() -> None:
    cluster = ClusterState([gpu_node(f"n{i}", gpus=2) for i in range(4)])
    pl = make_placer(cluster, "binpack", random.Random(0))
    assert pl.index is not None
    mark = cluster.checkpoint()
    assert pl.place([pod("a", gpus=1)]) and pl.place([pod("b", milli=500)])
    cluster.rollback(mark)
    assert index_shape(pl.index) == index_shape(ClassIndex(cluster))
    assert pl.index.class_count() == 1
    # A node cordoned in place is seen after refresh(); a node added later is picked up by place().
    cluster.nodes["n0"].unschedulable = True
    pl.refresh(["n0"])
    cluster.add_node(gpu_node("late", gpus=8))
    for i in range(4):
        got = pl.place([pod(f"q{i}", gpus=1)])
        assert got is not None and got[0].node != "n0"
    assert index_shape(pl.index) == index_shape(ClassIndex(cluster))
    pl.close()
    assert pl.index.on_change not in cluster.listeners
