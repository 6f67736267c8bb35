from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.scheduling.fragmentation import (
    FragCategory,
    FragmentationModel,
    TypicalPod,
    classify,
    node_fragmentation,
    typical_pods,
)
from gpufleet.sim.openb import DEFAULT_POD_FILE, OPENB_DIR_ENV, default_openb_dir, read_pods


def tp(cpu: int, milli: int, num: int, weight: float, models: set[str] | None = None, count: int = 0) -> TypicalPod:
    return TypicalPod(cpu, milli, num, frozenset(models) if models is not None else None, weight, count)


# Half-GPU pod with 4 cores (p=0.5), whole-GPU pod with 16 cores (p=0.3), CPU-only pod with 2 cores (p=0.2).
SHARE = tp(4000, 500, 1, 0.5)
WHOLE = tp(16000, 1000, 1, 0.3)
CPU_ONLY = tp(2000, 0, 0, 0.2)
TYPICAL = [SHARE, WHOLE, CPU_ONLY]


def test_hand_computed_node() -> None:
    # Node free [1000, 500, 200] (idle 1700), 8 free cores:
    #   SHARE: two GPUs have >= 500 and 8000 >= 4000 cpu -> Q3; only the 200 GPU is too small -> 200
    #   WHOLE: one fully free GPU but 8000 < 16000 cpu -> Q4 -> all 1700 idle
    #   CPU_ONLY: cpu-only pods see all idle GPU milli as fragment -> 1700
    # F = 0.5*200 + 0.3*1700 + 0.2*1700 = 100 + 510 + 340 = 950
    assert node_fragmentation([1000, 500, 200], 8000, "T4", TYPICAL) == pytest.approx(950.0)
    assert FragmentationModel(TYPICAL).node([1000, 500, 200], 8000, "T4") == pytest.approx(950.0)


def test_hand_computed_node_with_enough_cpu() -> None:
    # Same GPUs, 16 cores: WHOLE becomes Q3 and only the partial GPUs (500 + 200) are fragment.
    # F = 0.5*200 + 0.3*700 + 0.2*1700 = 100 + 210 + 340 = 650
    assert FragmentationModel(TYPICAL).node([200, 1000, 500], 16000, "T4") == pytest.approx(650.0)


def test_every_category() -> None:
    # Q1: the only GPU (200) is too small and 1000 < 4000 cpu.
    assert classify([200], 1000, "T4", SHARE) is FragCategory.Q1_LACK_BOTH
    # Q2: CPU is fine, GPU is not.
    assert classify([200], 8000, "T4", SHARE) is FragCategory.Q2_LACK_GPU
    # Q3: free == milli is usable, not fragment.
    assert classify([500], 4000, "T4", SHARE) is FragCategory.Q3_SATISFIED
    # Q4: GPU fits, CPU lacking.
    assert classify([500], 3999, "T4", SHARE) is FragCategory.Q4_LACK_CPU
    assert classify([0], 2000, "T4", CPU_ONLY) is FragCategory.XL_SATISFIED
    assert classify([0], 1999, "T4", CPU_ONLY) is FragCategory.XR_LACK_CPU
    v100 = tp(1000, 500, 1, 1.0, {"V100M16", "V100M32"})
    assert classify([1000], 64000, "T4", v100) is FragCategory.NO_ACCESS
    assert classify([1000], 64000, "V100M32", v100) is FragCategory.Q3_SATISFIED
    # Whole-GPU pods need fully free GPUs: 999 free on each does not count.
    assert classify([999, 999], 64000, "T4", WHOLE) is FragCategory.Q2_LACK_GPU


@pytest.mark.parametrize(
    ("free", "cpu", "expected"),
    [
        ([200], 1000, 200.0),  # Q1 -> all idle
        ([200], 8000, 200.0),  # Q2 -> all idle
        ([500, 300, 0], 4000, 300.0),  # Q3 -> only the 300 GPU (< 500) counts
        ([500, 300], 3999, 800.0),  # Q4 -> all idle
        ([0, 0], 64000, 0.0),  # nothing idle, nothing fragmented
    ],
)
def test_amount_per_category(free: list[int], cpu: int, expected: float) -> None:
    only_share = [tp(4000, 500, 1, 1.0)]
    assert node_fragmentation(free, cpu, "T4", only_share) == pytest.approx(expected)
    assert FragmentationModel(only_share).node(free, cpu, "T4") == pytest.approx(expected)


def test_cpu_only_and_no_access_count_all_idle_even_on_an_empty_node() -> None:
    # An empty 2-GPU node with plenty of CPU is perfect for a 1-GPU pod but all fragment for
    # a CPU-only pod and for a pod that may not use this model.
    typical = [tp(1000, 0, 0, 0.25), tp(1000, 1000, 1, 0.25, {"A100"}), tp(1000, 1000, 1, 0.5)]
    # F = 0.25*2000 + 0.25*2000 + 0.5*0 = 1000
    assert FragmentationModel(typical).node([1000, 1000], 64000, "T4") == pytest.approx(1000.0)
    # On an A100 node the constrained pod fits: F = 0.25*2000 = 500
    assert FragmentationModel(typical).node([1000, 1000], 64000, "A100") == pytest.approx(500.0)


def test_multi_gpu_pods_need_k_fully_free_gpus() -> None:
    two = [tp(8000, 1000, 2, 1.0)]
    four = [tp(8000, 1000, 4, 1.0)]
    # Two fully free GPUs exist -> Q3; the 300 and 999 GPUs are fragment for this pod.
    assert node_fragmentation([1000, 999, 1000, 300], 64000, "G2", two) == pytest.approx(1299.0)
    # Only two fully free GPUs for a 4-GPU pod -> Q2 -> all 3299 idle.
    assert node_fragmentation([1000, 999, 1000, 300], 64000, "G2", four) == pytest.approx(3299.0)
    assert FragmentationModel(four).node([1000, 999, 1000, 300], 64000, "G2") == pytest.approx(3299.0)


def test_model_memo_is_order_insensitive_and_counts_hits() -> None:
    m = FragmentationModel(TYPICAL)
    a = m.node([1000, 500, 200], 8000, "T4")
    b = m.node([200, 1000, 500], 8000, "T4")
    # 9000 cpu crosses no typical threshold (2000, 4000, 16000) -> same memo entry.
    c = m.node([500, 200, 1000], 9000, "T4")
    assert a == b == c
    assert (m.misses, m.hits) == (1, 2)
    # Models with the same access pattern share entries too.
    m.node([1000, 500, 200], 8000, "P100")
    assert m.misses == 1


def test_model_memo_distinguishes_cpu_thresholds_and_models() -> None:
    typical = [tp(4000, 500, 1, 0.5, {"T4"}), tp(1000, 1000, 1, 0.5)]
    m = FragmentationModel(typical)
    # 3999 vs 4000 cpu: the first pod flips between Q4 and Q3.
    assert m.node([500, 200], 3999, "T4") == pytest.approx(0.5 * 700 + 0.5 * 700)
    assert m.node([500, 200], 4000, "T4") == pytest.approx(0.5 * 200 + 0.5 * 700)
    # On P100 the first pod is NoAccess.
    assert m.node([500, 200], 4000, "P100") == pytest.approx(0.5 * 700 + 0.5 * 700)


def test_model_cache_bound() -> None:
    m = FragmentationModel(TYPICAL, max_entries=2)
    for f in range(10):
        m.node([f * 10], 8000, "T4")
    assert m.cache_size() <= 2


def test_exact_weights_make_equal_fragmentation_bit_identical() -> None:
    # Weights 1/3 and 2/3 are inexact in binary; with counts the sum is done in integers, so
    # two states with the same fragmentation give the same float and FGD sees Δ exactly 0.
    typical = typical_pods([(1000, 300, 1, ())] + [(1000, 1000, 1, ())] * 2)
    assert [p.count for p in typical] == [2, 1]
    m = FragmentationModel(typical)
    x = m.node([700, 100], 64000, "T4")  # 1000-pod: 800 all idle; 300-pod: Q3, frag 100
    y = m.node([600, 200], 64000, "T4")  # 1000-pod: 800; 300-pod: frag 200
    assert x == pytest.approx(2 / 3 * 800 + 1 / 3 * 100)
    assert y - x == pytest.approx(100 / 3)
    z = m.node([800, 0], 64000, "T4")  # 300-pod: frag 0 -> F = 2/3*800
    w = m.node([0, 800], 64000, "T4")
    assert z == w == 2 * 800 / 3


# ---- typical pod selection ----------------------------------------------------------------------


def _specs(counts: dict[tuple[int, int, int, tuple[str, ...]], int]) -> list[tuple[int, int, int, tuple[str, ...]]]:
    out: list[tuple[int, int, int, tuple[str, ...]]] = []
    for spec, n in counts.items():
        out.extend([spec] * n)
    random.Random(7).shuffle(out)
    return out


def test_typical_pods_95_percent_cutoff() -> None:
    a, b, c, d, e, f = (
        (4000, 500, 1, ()),
        (16000, 1000, 1, ()),
        (2000, 0, 0, ()),
        (8000, 1000, 8, ()),
        (1000, 250, 1, ("T4",)),
        (3000, 1000, 2, ()),
    )
    specs = _specs({a: 50, b: 30, c: 10, d: 5, e: 3, f: 2})
    chosen = typical_pods(specs)
    # Cumulative 50, 80, 90, 95: exactly 95% is enough, so 4 specs, renormalised by 95.
    assert [(p.cpu_milli, p.gpu_milli, p.num_gpu) for p in chosen] == [a[:3], b[:3], c[:3], d[:3]]
    assert [p.weight for p in chosen] == pytest.approx([50 / 95, 30 / 95, 10 / 95, 5 / 95])
    assert sum(p.weight for p in chosen) == pytest.approx(1.0)
    assert [p.count for p in chosen] == [50, 30, 10, 5]
    assert chosen[2].models is None
    assert len(typical_pods(specs, cutoff=0.96)) == 5
    full = typical_pods(specs, cutoff=1.0)
    assert len(full) == 6 and full[4].models == frozenset({"T4"})


def test_typical_pods_tie_order_is_deterministic() -> None:
    # Two specs with the same count straddle the cutoff: the smaller key wins.
    big, x, y = (1000, 1000, 1, ()), (3000, 500, 1, ()), (2000, 500, 1, ())
    specs = _specs({big: 8, x: 1, y: 1})
    chosen = typical_pods(specs, cutoff=0.85)
    assert [(p.cpu_milli, p.gpu_milli) for p in chosen] == [(1000, 1000), (2000, 500)]
    assert typical_pods(list(reversed(specs)), cutoff=0.85) == chosen


def test_typical_pods_keeps_gpu_spec_as_written() -> None:
    # Like the reference (which keys on the raw annotation), equivalent lists stay separate specs.
    chosen = typical_pods([(1000, 500, 1, ("T4", "P100")), (1000, 500, 1, ("P100", "T4", "T4"))], cutoff=1.0)
    assert [p.count for p in chosen] == [1, 1]
    assert chosen[0].models == chosen[1].models == frozenset({"T4", "P100"})


def test_typical_pods_rejects_bad_input() -> None:
    assert typical_pods([]) == []
    with pytest.raises(ValueError):
        typical_pods([(1000, 500, 1, ())], cutoff=0.0)
    with pytest.raises(ValueError):
        typical_pods([(1000, 500, 2, ())])
    with pytest.raises(ValueError):
        typical_pods([(1000, 0, 1, ())])


OPENB = default_openb_dir()


@pytest.mark.skipif(
    OPENB is None or not (OPENB / DEFAULT_POD_FILE).is_file(),
    reason=f"openb trace not found (set {OPENB_DIR_ENV} or provide ../shared/data/openb)",
)
@pytest.mark.parametrize(
    ("file", "expected"),
    [
        (DEFAULT_POD_FILE, 35),
        ("openb_pod_list_gpushare100.csv", 21),
        ("openb_pod_list_multigpu50.csv", 43),
        ("openb_pod_list_gpuspec33.csv", 127),
        ("openb_pod_list_cpu250.csv", 34),
    ],
)
def test_trace_typical_pod_counts_match_reference(file: str, expected: int) -> None:
    assert OPENB is not None
    pods, report = read_pods(OPENB / file)
    assert report.ok
    chosen = typical_pods((p.cpu_milli, p.gpu_milli, p.num_gpu, p.gpu_spec) for p in pods)
    assert len(chosen) == expected
    if file == DEFAULT_POD_FILE:
        assert sum(p.count for p in chosen) / len(pods) == pytest.approx(0.9526, abs=5e-5)
        top = chosen[0]
        assert (top.cpu_milli, top.gpu_milli, top.num_gpu, top.count) == (3152, 810, 1, 1047)
        # CPU-only pods are part of the target workload (isInvolvedCpuPods in the reference).
        assert Counter(p.num_gpu for p in chosen)[0] == 5


# ---- properties --------------------------------------------------------------------------------

MODELS = ["T4", "G2", "P100"]
typical_st = st.lists(
    st.one_of(
        st.builds(lambda c: (c, 0, 0, ()), st.integers(0, 64).map(lambda x: x * 1000)),
        st.builds(
            lambda c, m, s: (c, m, 1, s),
            st.integers(0, 64).map(lambda x: x * 1000),
            st.integers(1, 999),
            st.sampled_from([(), ("T4",), ("G2", "P100")]),
        ),
        st.builds(
            lambda c, k: (c, 1000, k, ()),
            st.integers(0, 64).map(lambda x: x * 1000),
            st.sampled_from([1, 2, 4, 8]),
        ),
    ),
    min_size=1,
    max_size=40,
)
node_st = st.tuples(
    st.lists(st.integers(0, 1000), min_size=0, max_size=8),
    st.integers(0, 96000),
    st.sampled_from(MODELS),
)


@settings(max_examples=300, deadline=None)
@given(specs=typical_st, node=node_st)
def test_fragmentation_bounded_and_model_matches_reference(
    specs: list[tuple[int, int, int, tuple[str, ...]]], node: tuple[list[int], int, str]
) -> None:
    free, cpu, model = node
    typical = typical_pods(specs, cutoff=1.0)
    ref = node_fragmentation(free, cpu, model, typical)
    fast = FragmentationModel(typical).node(free, cpu, model)
    idle = sum(free)
    assert -1e-9 <= ref <= idle * (1 + 1e-9)
    assert fast == pytest.approx(ref, rel=1e-12, abs=1e-9)


@settings(max_examples=200, deadline=None)
@given(
    n_gpus=st.sampled_from([1, 2, 4, 8]),
    cpu_free=st.integers(0, 128000),
    pods=st.lists(st.tuples(st.integers(0, 128000), st.sampled_from([1, 2, 4, 8])), min_size=1, max_size=10),
)
def test_empty_node_has_no_fragment_for_whole_gpu_pods_that_fit(
    n_gpus: int, cpu_free: int, pods: list[tuple[int, int]]
) -> None:
    fitting = [(cpu, k) for cpu, k in pods if k <= n_gpus and cpu <= cpu_free]
    if not fitting:
        return
    typical = [tp(cpu, 1000, k, 1 / len(fitting)) for cpu, k in fitting]
    assert node_fragmentation([1000] * n_gpus, cpu_free, "G2", typical) == 0.0
    assert FragmentationModel(typical).node([1000] * n_gpus, cpu_free, "G2") == 0.0
