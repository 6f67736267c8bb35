"""Score plugins on hand-computed cases, profile choices, and the cheapest-model rule."""

from __future__ import annotations

import random

import pytest

from gpufleet.api.objects import CPU, GPU, MEMORY
from gpufleet.cluster.devices import DeviceGrant
from gpufleet.cluster.state import ClusterState, NodeState
from gpufleet.gpu.catalog import DEFAULT_CATALOG
from gpufleet.scheduling import gpuscore
from gpufleet.scheduling.fragmentation import FragmentationModel
from gpufleet.scheduling.placement import PROFILE_NAMES, Profile, make_placer, make_profile
from gpufleet.scheduling.placement.need import Interner, compile_need
from gpufleet.scheduling.placement.nodeview import NodeView, TagIndex
from gpufleet.scheduling.placement.profiles import DEFAULT_TYPICAL
from gpufleet.scheduling.placement.scorers import (
    GPU_MILLI,
    UNRANKED,
    BalancedAllocation,
    CheapestModel,
    DemandCost,
    GpuScore,
    LeastAllocated,
    MostAllocated,
)
from gpufleet.scheduling.types import PodRequest
from tests.placement.placement_helpers import GIB, gpu_node, placer, pod

ALLOC = (CPU, MEMORY, GPU_MILLI)


def used_node() -> NodeState:
    """cpu 10 cores, 100 GiB, 4 GPUs; 2 cores, 20 GiB and one whole GPU in use."""
    n = gpu_node("n", gpus=4, cpu=10_000, mem_gib=100)
    ClusterState([n]).allocate("x", "n", {CPU: 2000, MEMORY: 20 * GIB, GPU: 1}, [DeviceGrant("whole", 0)])
    return n


def score(plugin: object, p: PodRequest, n: NodeState) -> int:
    return plugin.score(compile_need(p, Interner()), NodeView(n))  # type: ignore[attr-defined, no-any-return]


def test_most_and_least_allocated_by_hand() -> None:
    n = used_node()
    p = pod("p", cpu=1000, mem_gib=30, gpus=1)
    # cpu 3/10 -> 30, memory 50/100 -> 50, GPUs 2000/4000 thousandths -> 50; integer mean of three.
    assert score(MostAllocated(ALLOC), p, n) == (30 + 50 + 50) // 3
    assert score(LeastAllocated(ALLOC), p, n) == (70 + 50 + 50) // 3
    # A pod without GPUs leaves the GPU resource out (kube skips unrequested extended resources).
    assert score(MostAllocated(ALLOC), pod("q", cpu=1000, mem_gib=30), n) == (30 + 50) // 2
    # A fraction counts its thousandths: 1000 held + 250 of 4000.
    assert score(MostAllocated((GPU_MILLI,)), pod("f", milli=250), n) == 1250 * 100 // 4000


def test_balanced_allocation_by_hand() -> None:
    n = used_node()
    # cpu 0.3, memory 0.5: std = |0.3 - 0.5| / 2 = 0.1 -> 90.
    assert score(BalancedAllocation(), pod("p", cpu=1000, mem_gib=30), n) == 90
    assert score(BalancedAllocation(), pod("p", cpu=3000, mem_gib=30), n) == 100


def test_tiers_price_the_model_and_the_demand() -> None:
    t4 = gpu_node("t4", "T4", 2)
    h100 = gpu_node("h", "H100-SXM5-80GB", 2)
    gpu1 = pod("p", gpus=1)
    assert score(CheapestModel(DEFAULT_CATALOG), gpu1, t4) == -1200
    assert score(CheapestModel(DEFAULT_CATALOG), gpu1, h100) == -7000
    assert score(CheapestModel(DEFAULT_CATALOG), pod("c"), h100) == 0  # CPU pods: no tier
    assert score(DemandCost(DEFAULT_CATALOG), pod("f", milli=500), t4) == -600
    assert score(DemandCost(DEFAULT_CATALOG), pod("g", gpus=2), h100) == -14000


@pytest.mark.parametrize("name", ["dotprod", "gpupacking", "bestfit", "fgd", "gpuclustering"])
def test_paper_scorers_are_gpuscore_functions(name: str) -> None:
    """The plugin returns exactly what gpuscore computes on the same node view."""
    n = gpu_node("n", gpus=4, cpu=32_000)
    cluster = ClusterState([n])
    cluster.allocate("a", "n", {CPU: 4000}, [DeviceGrant("fraction", 1, milli=300, memory_mib=24576)])
    cluster.allocate("b", "n", {CPU: 4000, GPU: 1}, [DeviceGrant("whole", 2)])
    frag = FragmentationModel(DEFAULT_TYPICAL)
    reference = gpuscore.make_scorer(name, fragmentation=frag)
    plugin = GpuScore(gpuscore.make_scorer(name, fragmentation=frag))
    tags = TagIndex(cluster)
    view = NodeView(n, tags)
    assert list(view.gpu_free_milli) == [1000, 700, 0, 1000]
    assert view.gpu_tags == frozenset({"share-gpu", "1-gpu"})
    for p, demand in ((pod("s", cpu=2000, milli=500), gpuscore.GpuPodDemand(2000, 500, 1)),
                      (pod("w", cpu=2000, gpus=2), gpuscore.GpuPodDemand(2000, 1000, 2)),
                      (pod("c", cpu=2000), gpuscore.GpuPodDemand(2000, 0, 0))):
        need = compile_need(p, Interner())
        assert plugin.score(need, view) == reference.score(view, demand)[0]


def test_profiles_choose_as_their_scorers_say() -> None:
    def nodes() -> list[NodeState]:
        busy = gpu_node("busy", gpus=4, cpu=10_000, mem_gib=100)
        idle = gpu_node("idle", gpus=4, cpu=10_000, mem_gib=100)
        ClusterState([busy]).allocate("x", "busy", {CPU: 5000, MEMORY: 50 * GIB, GPU: 2},
                                      [DeviceGrant("whole", 0), DeviceGrant("whole", 1)])
        return [busy, idle]

    for profile, want in (("binpack", "busy"), ("spread", "idle"), ("kube-default", "idle")):
        got = placer(nodes(), profile).place([pod("p", cpu=1000, gpus=1)])
        assert got is not None and got[0].node == want, profile


def test_gpuclustering_follows_tags_of_placed_pods() -> None:
    nodes = [gpu_node(f"n{i}", gpus=8) for i in range(3)]
    pl = placer(nodes, "gpuclustering")
    first = pl.place([pod("a", gpus=2, selector={"kubernetes.io/hostname": "n0"})])
    share = pl.place([pod("b", milli=500, selector={"kubernetes.io/hostname": "n1"})])
    assert first and share
    # n0 holds only 2-GPU pods (75 + fullness) against n1 (other tags: 0 + fullness) and empty n2 (25).
    got = pl.place([pod("c", gpus=2)])
    assert got is not None and got[0].node == "n0"
    got = pl.place([pod("d", milli=300)])
    assert got is not None and got[0].node == "n1"


def test_cheapest_model_first_never_a_dearer_model_with_room_on_a_cheaper_one() -> None:
    """The guide's anti-pattern: inference on an H100 while a T4 would do."""
    t4 = gpu_node("t4", "T4", 2, cpu=16_000)
    a100 = gpu_node("a100", "A100-SXM4-80GB", 2)
    h100 = gpu_node("h100", "H100-SXM5-80GB", 8)
    # Make the H100 node the scorers' favourite: already busy, so binpack and FGD like it.
    ClusterState([h100]).allocate("x", "h100", {CPU: 8000, GPU: 4}, [DeviceGrant("whole", i) for i in range(4)])
    cluster = ClusterState([t4, a100, h100])
    binpack = make_placer(cluster, "binpack", random.Random(0))
    assert binpack.why_not(pod("probe", gpus=1), "t4") is None
    chosen = binpack.place([pod("bp", gpus=1)])
    assert chosen is not None and chosen[0].node == "h100"  # what the rule forbids
    cluster.release("bp")
    binpack.close()

    pl = make_placer(cluster, "gpufleet", random.Random(0))
    order = [pl.place([pod(f"inf-{i}", cpu=1000, gpus=1)]) for i in range(4)]
    assert [o[0].node for o in order if o] == ["t4", "t4", "a100", "a100"]
    # A pod the T4 cannot serve (24 GiB of GPU memory) goes to the A100 tier, not the H100.
    cluster.release("inf-2")
    got = pl.place([pod("big", gpu_memory_mib=24576, gpus=1)])
    assert got is not None and got[0].node == "a100"
    # Fractions follow the same rule.
    cluster.release("inf-0")
    got = pl.place([pod("frac", milli=250)])
    assert got is not None and got[0].node == "t4"


def test_cheapest_model_rule_respects_constraints() -> None:
    t4 = gpu_node("t4", "T4", 2)
    h100 = gpu_node("h100", "H100-SXM5-80GB", 2)
    pl = placer([t4, h100], "gpufleet")
    got = pl.place([pod("p", gpus=1, models=["H100-SXM5-80GB"])])
    assert got is not None and got[0].node == "h100"


def test_cost_profile_prices_the_demand() -> None:
    l4 = gpu_node("l4", "L4", 1)  # 1.45 CHF/h against the L40S's 2.1
    l40s = gpu_node("l40s", "L40S", 1)
    got = placer([l40s, l4], "cost").place([pod("p", milli=500)])
    assert got is not None and got[0].node == "l4"


def test_profile_names_and_validation() -> None:
    for name in PROFILE_NAMES:
        assert make_profile(name).name == name
    with pytest.raises(ValueError, match="unknown placement profile"):
        make_profile("nope")
    with pytest.raises(ValueError, match="only scorer"):
        Profile("mix", (("bestfit", 1), ("most_allocated", 1)))
    with pytest.raises(ValueError, match="unknown scorer"):
        Profile("bad", (("most_allocated", 1),), then=("nope",))
    gpufleet = make_profile("gpufleet")
    assert gpufleet.tier == "model" and gpufleet.then == ("bestfit",)
    assert gpufleet.scorers == (("fgdplus", 1), ("most_allocated", 300))


def test_a_model_without_a_price_is_neither_cheaper_nor_dearer() -> None:
    """An unpriced model (the openb trace's G2) competes with the cheapest priced model that has room, on the
    scorers behind the tier; it is not taken first as if it were free."""
    g2 = gpu_node("g2", "G2", 2, memory_mib=32768)
    t4 = gpu_node("t4", "T4", 2)
    h100 = gpu_node("h100", "H100-SXM5-80GB", 8)
    cluster = ClusterState([g2, t4, h100])
    # A busy T4 is where FGD+ puts the next share (it pairs with the one there); an empty G2 is not.
    cluster.allocate("x", "t4", {CPU: 1000}, [DeviceGrant("fraction", 0, milli=500, memory_mib=7680)])
    pl = make_placer(cluster, "gpufleet", random.Random(0))
    got = pl.place([pod("share", milli=500)])
    assert got is not None and got[0].node == "t4"
    # With both T4 GPUs taken, the H100 (priced, dearer) must still wait for the unpriced G2.
    cluster.release("share")
    cluster.release("x")
    for i in range(2):
        assert pl.place([pod(f"t4-{i}", gpus=1, models=["T4"])]) is not None
    for i in range(2):
        got = pl.place([pod(f"any-{i}", gpus=1)])
        assert got is not None and got[0].node == "g2"
    naive = make_placer(ClusterState([gpu_node("g2", "G2", 2, memory_mib=32768), gpu_node("t4", "T4", 2)]),
                        "gpufleet", random.Random(0), indexed=False, tie_break="name")
    first = naive.place([pod("a", milli=500)])
    assert first is not None
    second = naive.place([pod("b", milli=500)])
    assert second is not None and second[0].node == first[0].node  # pairs, whichever model it started on


@pytest.mark.parametrize("indexed", [True, False])
def test_an_unpriced_node_ties_with_the_cheapest_priced_one(indexed: bool) -> None:
    """Equal scores behind the tier: both nodes are candidates, whichever lane holds them."""
    def nodes() -> list[NodeState]:
        return [gpu_node("a-t4", "T4", 2), gpu_node("b-g2", "G2", 2, memory_mib=15360)]

    by_name = make_placer(ClusterState(nodes()), "gpufleet", random.Random(0), indexed=indexed, tie_break="name")
    got = by_name.place([pod("p", gpus=1)])
    assert got is not None and got[0].node == "a-t4"
    chosen = set()
    for seed in range(40):
        pl = make_placer(ClusterState(nodes()), "gpufleet", random.Random(seed), indexed=indexed)
        got = pl.place([pod("p", gpus=1)])
        assert got is not None
        chosen.add(got[0].node)
    assert chosen == {"a-t4", "b-g2"}


def test_cheapest_model_tier_leaves_reserved_models_to_the_scorers() -> None:
    """A cheap model that restricted workloads need is not free for everyone: with half the expected GPU
    demand allowed only on the T4, unrestricted pods go where FGD+ puts them (the V100), not to the T4."""
    from gpufleet.scheduling.fragmentation import TypicalPod
    from gpufleet.scheduling.placement.profiles import reserved_models

    typical = (TypicalPod(cpu_milli=1000, gpu_milli=1000, num_gpu=1, models=frozenset({"T4"}), weight=0.5),
               TypicalPod(cpu_milli=1000, gpu_milli=1000, num_gpu=1, models=None, weight=0.5))
    # Demand per GPU over the mean: T4 (0.5 + 0.5·2/4) / 2 / (1/4) = 1.5, V100 (0.5·2/4) / 2 / (1/4) = 0.5.
    assert reserved_models(typical, {"T4": 2, "V100-16GB": 2}) == {"T4"}
    assert reserved_models(typical[1:], {"T4": 2, "V100-16GB": 2}) == frozenset()
    t4 = gpu_node("t4", "T4", 2)
    v100 = gpu_node("v100", "V100-16GB", 2)
    assert score(CheapestModel(DEFAULT_CATALOG, {"T4"}), pod("p", gpus=1), t4) == UNRANKED
    assert score(CheapestModel(DEFAULT_CATALOG, {"T4"}), pod("p", gpus=1), v100) == -2550

    def first_node(profile_typical: tuple[TypicalPod, ...]) -> str:
        cluster = ClusterState([gpu_node("t4", "T4", 2), gpu_node("v100", "V100-16GB", 2)])
        pl = make_placer(cluster, make_profile("gpufleet", typical=profile_typical), random.Random(0))
        got = pl.place([pod("anywhere", gpus=1)])
        assert got is not None
        return got[0].node

    assert first_node(typical) == "v100"
    assert first_node(typical[1:]) == "t4"  # nobody needs the T4 in particular: the cheaper model first
