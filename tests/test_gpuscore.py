from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.scheduling.fragmentation import FragCategory, FragmentationModel, TypicalPod, classify
from gpufleet.scheduling.gpuscore import (
    MAX_SPEC_CPU,
    MAX_SPEC_GPU,
    SCORER_NAMES,
    GpuNodeView,
    GpuPodDemand,
    choose_gpus_best_fit,
    choose_gpus_random,
    fits,
    gpu_tag,
    make_scorer,
    min_max_normalize,
    select_host,
)


@dataclass(frozen=True)
class Node:
    model: str
    cpu_free_milli: int
    gpu_free_milli: Sequence[int]
    gpu_tags: frozenset[str] = field(default_factory=frozenset)


def node(free: Sequence[int], cpu: int = 64000, model: str = "T4", tags: Sequence[str] = ()) -> GpuNodeView:
    return Node(model, cpu, tuple(free), frozenset(tags))


SHARE_500 = GpuPodDemand(cpu_milli=8000, gpu_milli=500, num_gpu=1)
WHOLE_1 = GpuPodDemand(cpu_milli=1000, gpu_milli=1000, num_gpu=1)
WHOLE_2 = GpuPodDemand(cpu_milli=1000, gpu_milli=1000, num_gpu=2)
CPU_ONLY = GpuPodDemand(cpu_milli=1000, gpu_milli=0, num_gpu=0)


def test_constants() -> None:
    assert (MAX_SPEC_CPU, MAX_SPEC_GPU) == (128000, 8000)


def test_demand_validation_and_tags() -> None:
    with pytest.raises(ValueError):
        GpuPodDemand(1000, 500, 2)
    with pytest.raises(ValueError):
        GpuPodDemand(1000, 1001, 1)
    with pytest.raises(ValueError):
        GpuPodDemand(1000, 0, 1)
    assert gpu_tag(CPU_ONLY) is None
    assert gpu_tag(SHARE_500) == "share-gpu"
    assert gpu_tag(WHOLE_1) == "1-gpu"
    assert gpu_tag(GpuPodDemand(1000, 1000, 8)) == "8-gpu"


def test_fits_and_gpu_choice() -> None:
    n = node([600, 1000, 500, 1000])
    assert fits(n, SHARE_500) and fits(n, WHOLE_2) and fits(n, CPU_ONLY)
    assert not fits(n, GpuPodDemand(1000, 1000, 3))
    assert fits(node([499, 999]), SHARE_500)
    assert not fits(node([499, 999]), WHOLE_1)
    # Tightest GPU for a sharing pod: 500 (index 2) beats 600 and the full ones.
    assert choose_gpus_best_fit(n, SHARE_500) == (2,)
    # Whole-GPU pods: lowest-index fully free GPUs.
    assert choose_gpus_best_fit(n, WHOLE_2) == (1, 3)
    assert choose_gpus_best_fit(n, CPU_ONLY) == ()
    # Ties on the tightest value go to the lowest index.
    assert choose_gpus_best_fit(node([700, 600, 600]), SHARE_500) == (1,)
    with pytest.raises(ValueError):
        choose_gpus_best_fit(node([400]), SHARE_500)


def test_choose_gpus_random_is_uniform_over_fitting_gpus() -> None:
    n = node([600, 100, 500, 1000])
    rng = random.Random(3)
    picks = Counter(choose_gpus_random(n, SHARE_500, rng) for _ in range(3000))
    assert set(picks) == {(0,), (2,), (3,)}
    assert all(900 < c < 1100 for c in picks.values())
    assert choose_gpus_random(node([1000, 300, 1000, 1000]), WHOLE_2, rng) == (0, 2)


def test_select_host_uniform_among_ties() -> None:
    rng = random.Random(5)
    assert select_host([3, 9, 1], rng) == 1
    picks = Counter(select_host([7, 2, 7, 7], rng) for _ in range(3000))
    assert set(picks) == {0, 2, 3}
    assert all(900 < c < 1100 for c in picks.values())


def test_random_scorer_gives_every_feasible_node_the_same_score() -> None:
    s = make_scorer("random", rng=random.Random(1))
    assert s.name == "random"
    scores = [s.score(n, SHARE_500)[0] for n in (node([1000]), node([600, 500]), node([900] * 8))]
    assert len(set(scores)) == 1
    assert s.normalize(scores) == scores
    with pytest.raises(ValueError):
        make_scorer("random")


def test_dotprod() -> None:
    s = make_scorer("dotprod")
    # node (64000/128000, 1500/8000) · pod (8000/128000, 500/8000) = 0.5*0.0625 + 0.1875*0.0625
    #   = 0.04296875; 100 * (1 - 0.04296875/2) = 97.85 -> 97; GPU: tightest fit, index 1.
    assert s.score(node([1000, 500], cpu=64000), SHARE_500) == (97, (1,))
    # Empty 8-GPU node, 96 cores: 0.75*0.0625 + 1*0.0625 = 0.109375 -> 100*(1-0.0546875) = 94.5 -> 94.
    # The emptier node scores lower: DotProd as run in the benchmark favours *less* alignment.
    assert s.score(node([1000] * 8, cpu=96000), SHARE_500) == (94, (0,))


def test_gpuclustering() -> None:
    s = make_scorer("gpuclustering")
    free = [0, 0, 1000, 1000, 1000, 1000, 1000, 1000]  # 6000 free -> U = 25*2000/8000 = 6 (6.25 truncated)
    assert s.score(node(free, tags=["share-gpu"]), SHARE_500) == (81, (2,))  # only this tag: 75 + 6
    assert s.score(node(free, tags=["share-gpu", "1-gpu"]), SHARE_500)[0] == 56  # tag plus others: 50 + 6
    assert s.score(node(free), SHARE_500)[0] == 31  # no GPU pods: 25 + 6
    assert s.score(node(free, tags=["1-gpu"]), SHARE_500)[0] == 6  # only other tags: U
    # A small empty node looks "fuller": 2000 free -> U = 25*6000/8000 = 18 (18.75) -> 25 + 18.
    assert s.score(node([1000, 1000]), WHOLE_1) == (43, (0,))
    assert s.score(node(free, tags=["1-gpu"]), CPU_ONLY) == (0, ())


def test_gpupacking() -> None:
    s = make_scorer("gpupacking")
    # Empty nodes: max(33 - free GPUs, free GPUs); smaller empty nodes score higher.
    assert s.score(node([1000] * 8), SHARE_500)[0] == 25
    assert s.score(node([1000] * 2), SHARE_500)[0] == 31
    partly = node([1000, 1000, 300, 0])
    # Sharing 200 fits the already-shared 300 GPU: 100 - (300*100/1000)/10 = 100 - 3 = 97.
    assert s.score(partly, GpuPodDemand(1000, 200, 1)) == (97, (2,))
    # Sharing 500 must open a fully free GPU: max(50 - 1, 33) = 49.
    assert s.score(partly, SHARE_500) == (49, (0,))
    # Two whole GPUs on a used node: 50 - 2 = 48.
    assert s.score(partly, WHOLE_2) == (48, (0, 1))
    # Least free first: the 750 GPU is used; 75 // 10 = 7 -> 93.
    assert s.score(node([800, 750]), GpuPodDemand(1000, 700, 1)) == (93, (1,))
    assert s.score(partly, CPU_ONLY)[0] == 0


def test_bestfit_with_min_max_normalisation() -> None:
    s = make_scorer("bestfit")
    # (1 - [0.5*56000/128000 + 0.5*1000/8000]) * 100 = (1 - 0.28125) * 100 = 71.875 -> 71
    a = s.score(node([1000, 500], cpu=64000), SHARE_500)
    # (1 - [0.5*88000/128000 + 0.5*7500/8000]) * 100 = (1 - 0.8125) * 100 = 18.75 -> 18
    b = s.score(node([1000] * 8, cpu=96000), SHARE_500)
    # (1 - [0.5*8000/128000 + 0]) * 100 = 96.875 -> 96
    c = s.score(node([500], cpu=16000), SHARE_500)
    assert (a, b, c) == ((71, (1,)), (18, (0,)), (96, (0,)))
    # (71-18)*100//78 = 67, (18-18) -> 0, (96-18) -> 100
    assert s.normalize([71, 18, 96]) == [67, 0, 100]
    assert s.normalize([40, 40]) == [0, 0]
    assert min_max_normalize([]) == []


# FGD with a two-spec target workload: half-GPU pods (1 core, p=0.5) and whole-GPU pods (1 core, p=0.5).
FGD_TYPICAL = [
    TypicalPod(cpu_milli=1000, gpu_milli=500, num_gpu=1, models=None, weight=0.5),
    TypicalPod(cpu_milli=1000, gpu_milli=1000, num_gpu=1, models=None, weight=0.5),
]


def test_fgd_sharing_pod_picks_the_gpu_that_fragments_least() -> None:
    s = make_scorer("fgd", fragmentation=FragmentationModel(FGD_TYPICAL))
    n = node([1000, 600], cpu=32000)
    # before: half pod Q3 with no small GPU -> 0; whole pod Q3, 600 too small -> 600. F = 300.
    # on GPU 0 -> [500, 600]: half 0; whole Q2 -> 1100 idle.      F = 550, Δ = -250 -> σ(-0.25) = .4378 -> 43
    # on GPU 1 -> [1000, 100]: half 100; whole 100.               F = 100, Δ = +200 -> σ(0.2) = .5498 -> 54
    assert s.score(n, GpuPodDemand(1000, 500, 1)) == (54, (1,))


def test_fgd_sharing_pod_first_gpu_attaining_the_best_score() -> None:
    s = make_scorer("fgd", fragmentation=FragmentationModel(FGD_TYPICAL))
    # before [600, 600, 1000]: half 0; whole frag 1200 -> F = 600.
    # GPU 0 or 1 -> [100, 600, 1000]: half 100, whole 700 -> F = 400, Δ = 200 -> 54
    # GPU 2 -> [600, 600, 500]: half 0, whole Q2 1700 -> F = 850, Δ = -250 -> 43
    assert s.score(node([600, 600, 1000]), GpuPodDemand(1000, 500, 1)) == (54, (0,))


def test_fgd_whole_and_cpu_only_pods() -> None:
    s = make_scorer("fgd", fragmentation=FragmentationModel(FGD_TYPICAL))
    n = node([1000, 600], cpu=32000)
    # [0, 600]: half fits the 600 -> 0; whole Q2 -> 600. F = 300 = before, Δ = 0 -> σ(0)*100 = 50
    assert s.score(n, WHOLE_1) == (50, (0,))
    # 31500 cores taken leaves 500 < 1000: both typical pods Q4 -> F = 1600, Δ = -1300 -> σ(-1.3) = .2142 -> 21
    assert s.score(n, GpuPodDemand(31500, 0, 0)) == (21, ())
    # A CPU-only pod that crosses no CPU threshold changes nothing: exactly 50.
    assert s.score(n, CPU_ONLY) == (50, ())


def test_fgd_prefers_the_node_where_fragmentation_grows_least() -> None:
    s = make_scorer("fgd", fragmentation=FragmentationModel(FGD_TYPICAL))
    pod = GpuPodDemand(1000, 500, 1)
    # Partly used node [500, 0]: before half 0, whole Q2 500 -> F = 250; after [0, 0] F = 0, Δ = 250 -> 56.
    # Empty node [1000, 1000]: before F = 0; after [500, 1000]: half 0, whole 500 -> F = 250, Δ = -250 -> 43.
    scores = [s.score(node([500, 0]), pod)[0], s.score(node([1000, 1000]), pod)[0]]
    assert scores == [56, 43]
    assert select_host(scores, random.Random(0)) == 0


def test_make_scorer_names() -> None:
    fm = FragmentationModel(FGD_TYPICAL)
    for name in SCORER_NAMES:
        s = make_scorer(name, fragmentation=fm, rng=random.Random(0))
        assert s.name == name
        score, gpus = s.score(node([1000, 300]), SHARE_500)
        assert 0 <= score <= 100 and gpus == (0,)
    with pytest.raises(ValueError):
        make_scorer("fgd")
    with pytest.raises(ValueError):
        make_scorer("tetris")


def test_fgd_memo_hit_follows_the_actual_gpu_order() -> None:
    s = make_scorer("fgd", fragmentation=FragmentationModel(FGD_TYPICAL))
    pod = GpuPodDemand(1000, 500, 1)
    assert s.score(node([1000, 600], cpu=32000), pod) == (54, (1,))
    # Same multiset of free GPUs, so the memoised score is reused, but the 600 GPU is now index 0.
    assert s.score(node([600, 1000], cpu=32000), pod) == (54, (0,))
    assert s.score(node([300, 1000, 1000]), WHOLE_1)[1] == (1,)


def _brute_force_fgd(n: GpuNodeView, d: GpuPodDemand, typical: list[TypicalPod]) -> tuple[int, tuple[int, ...]]:
    # Straight from the definition, with exact rational weights so that Δ = 0 is exactly 0.
    total = sum(p.count for p in typical)

    def f(free: list[int], cpu: int) -> Fraction:
        idle = sum(free)
        out = Fraction(0)
        for p in typical:
            q3 = classify(free, cpu, n.model, p) is FragCategory.Q3_SATISFIED
            out += Fraction(p.count, total) * (sum(g for g in free if g < p.gpu_milli) if q3 else idle)
        return out

    def sc(before: Fraction, after: Fraction) -> int:
        return int(100 / (1 + math.exp(-float(before - after) / 1000)))

    free = list(n.gpu_free_milli)
    before = f(free, n.cpu_free_milli)
    cpu_after = n.cpu_free_milli - d.cpu_milli
    if d.num_gpu == 1 and d.gpu_milli < 1000:
        best: tuple[int, tuple[int, ...]] = (-1, ())
        for i, g in enumerate(free):
            if g >= d.gpu_milli:
                after = free.copy()
                after[i] -= d.gpu_milli
                s = sc(before, f(after, cpu_after))
                if s > best[0]:
                    best = (s, (i,))
        return best
    ids = tuple(i for i, g in enumerate(free) if g >= d.gpu_milli)[: d.num_gpu] if d.num_gpu else ()
    after = [g - d.gpu_milli if i in ids else g for i, g in enumerate(free)]
    return sc(before, f(after, cpu_after)), ids


@settings(max_examples=300, deadline=None)
@given(
    states=st.lists(
        st.tuples(
            st.lists(st.sampled_from([0, 100, 250, 500, 600, 750, 1000]), min_size=1, max_size=8),
            st.integers(0, 64).map(lambda x: x * 1000),
            st.sampled_from(["T4", "G2"]),
        ),
        min_size=1,
        max_size=6,
    ),
    demand=st.one_of(
        st.builds(lambda c: GpuPodDemand(c, 0, 0), st.integers(0, 32).map(lambda x: x * 1000)),
        st.builds(
            lambda c, m: GpuPodDemand(c, m, 1),
            st.integers(0, 32).map(lambda x: x * 1000),
            st.sampled_from([100, 250, 500, 750]),
        ),
        st.builds(
            lambda c, k: GpuPodDemand(c, 1000, k),
            st.integers(0, 32).map(lambda x: x * 1000),
            st.sampled_from([1, 2, 4]),
        ),
    ),
)
def test_fgd_memoised_scores_equal_brute_force(states: list[tuple[list[int], int, str]], demand: GpuPodDemand) -> None:
    typical = [
        TypicalPod(4000, 500, 1, None, 3 / 11, count=3),
        TypicalPod(8000, 1000, 1, None, 3 / 11, count=3),
        TypicalPod(16000, 1000, 2, frozenset({"G2"}), 1 / 11, count=1),
        TypicalPod(2000, 250, 1, frozenset({"T4"}), 3 / 11, count=3),
        TypicalPod(12000, 0, 0, None, 1 / 11, count=1),
    ]
    s = make_scorer("fgd", fragmentation=FragmentationModel(typical))
    for free, cpu, model in states:
        n = node(free, cpu=cpu, model=model)
        if not fits(n, demand):
            continue
        assert s.score(n, demand) == _brute_force_fgd(n, demand, typical)
