"""FGD+: its measure by hand, and the decisions where it departs from FGD."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from gpufleet.scheduling.fgdplus import FgdPlusScorer, cpu_per_gpu, fill_waste_table, settled_waste_table
from gpufleet.scheduling.fragmentation import FragmentationModel
from gpufleet.scheduling.gpuscore import FgdScorer, GpuNodeView, GpuPodDemand
from gpufleet.sim.fragbench.placer import PlacerEngine
from tests.fragbench.helpers import node, pod, typical


@dataclass(frozen=True)
class View:
    model: str
    cpu_free_milli: int
    gpu_free_milli: Sequence[int]
    gpu_tags: frozenset[str] = field(default_factory=frozenset)


def view(free: Sequence[int], cpu: int, model: str = "T4") -> GpuNodeView:
    return View(model, cpu, tuple(free))


def test_fill_waste_table_by_hand() -> None:
    # One share size, 500: a GPU ends with L mod 500 when L >= 500, else L stays unused.
    t = fill_waste_table(typical((4000, 500, 1, 1)), "T4")
    assert (t[0], t[499], t[500], t[700], t[1000]) == (0.0, 499.0, 0.0, 200.0, 0.0)
    # Sizes 300 and 500, equally popular: w[300] = w[0] = 0; w[500] = (w[200] + w[0]) / 2 = 100 (a 300 may
    # come first and strand 200); w[600] = (w[300] + w[100]) / 2 = 50; w[800] = (w[500] + w[300]) / 2 = 50.
    t2 = fill_waste_table(typical((4000, 300, 1, 1), (4000, 500, 1, 1)), "T4")
    assert (t2[200], t2[300], t2[500], t2[600], t2[800]) == pytest.approx((200.0, 0.0, 100.0, 50.0, 50.0))
    # Multi-GPU and CPU-only pods never land on a GPU's remainder; a model constraint excludes a size.
    assert fill_waste_table(typical((4000, 1000, 2, 5), (2000, 0, 0, 5)), "T4")[1000] == 1000.0


def test_settled_waste_table() -> None:
    # Only 300 and 500 shares: 500 free ends at 0 (a 500 pairs it) whichever way, so does a fresh GPU; 200
    # free (500 + 300 on one GPU) is filled by nothing and stays 200. Deterministic (fixed seed).
    typ = typical((4000, 300, 1, 1), (4000, 500, 1, 1))
    t = settled_waste_table(typ, "T4", gpus=256, rounds=2)
    assert t == settled_waste_table(typ, "T4", gpus=256, rounds=2)
    assert t[200] == 200.0 and t[0] == 0.0
    assert 0.0 <= t[1000] <= 200.0
    # No GPU pod may use the model: the random-fill table (everything stays).
    only_cpu = typical((2000, 0, 0, 5))
    assert settled_waste_table(only_cpu, "T4") == fill_waste_table(only_cpu, "T4")


def test_cpu_per_gpu_and_strand() -> None:
    typ = typical((8000, 1000, 1, 1), (2000, 500, 1, 1), (9000, 0, 0, 2))  # (8000 + 2000) / 1.5 GPUs
    assert cpu_per_gpu(typ) == pytest.approx(10000 / 1.5)
    s = FgdPlusScorer(FragmentationModel(typ))
    # 8 idle GPUs, 20 cores feed 3 of them at 6.67 cores per GPU: 5000 milli stranded.
    assert s.strand([1000] * 8, 20000) == pytest.approx(8000 - 20000 * 1.5 / 10)
    assert s.strand([1000] * 2, 64000) == 0.0
    assert cpu_per_gpu(typical((9000, 0, 0, 1))) is None


def test_measure_is_fgd_plus_weighted_terms() -> None:
    typ = typical((4000, 500, 1, 1), (16000, 1000, 1, 1))
    fm = FragmentationModel(typ)
    s = FgdPlusScorer(fm, strand_weight=2.0, waste_weight=0.5)
    free, cpu = [700, 1000], 18000
    table = settled_waste_table(typ, "T4")
    expected = fm.node(free, cpu, "T4") + 2.0 * s.strand(free, cpu) + 0.5 * (table[700] + table[1000])
    assert s.measure(free, cpu, "T4") == pytest.approx(expected)
    d = GpuPodDemand(4000, 500, 1)
    score, _ = s.score(view(free, cpu), d)
    best = max(round((expected - s.measure(after, cpu - 4000, "T4")) * 1000) for after in ([200, 1000], [700, 500]))
    assert score == best


def test_cpu_only_pods_go_where_cpu_is_plentiful() -> None:
    # The trace's situation: an 8-GPU node with 12 cores per GPU and a 2-GPU node with 52. A CPU-only pod
    # leaves every typical pod able to run on either, so FGD scores both alike; FGD+ sees that the 83.5 cores
    # left on the 8-GPU node no longer feed its 8 GPUs at ~10.6 cores each, and prefers the 2-GPU node.
    typ = typical((12000, 1000, 1, 8), (3152, 810, 1, 2), (12500, 0, 0, 2))
    fm = FragmentationModel(typ)
    g2, t4 = view([1000] * 8, 96000, "G2"), view([1000] * 2, 104000, "T4")
    cpu_pod = GpuPodDemand(12500, 0, 0)
    fgd = FgdScorer(fm)
    assert fgd.score(g2, cpu_pod)[0] == fgd.score(t4, cpu_pod)[0]
    plus = FgdPlusScorer(fm)
    assert plus.score(t4, cpu_pod)[0] > plus.score(g2, cpu_pod)[0]


def test_share_goes_where_its_remainder_can_be_filled() -> None:
    # Free [530, 350]: a 320 share leaves 210 (on 530) or 30 (on 350). With 470 and 320 shares popular, the
    # 530 GPU is worth keeping for a 470 (ending at 60): FGD+ takes the 350 GPU.
    typ = typical((8000, 470, 1, 5), (4000, 320, 1, 3), (11300, 1000, 1, 2))
    plus = FgdPlusScorer(FragmentationModel(typ))
    _, gpus = plus.score(view([530, 350], 64000), GpuPodDemand(4000, 320, 1))
    assert gpus == (1,)
    # Whole-GPU pods take the lowest-index free GPUs; CPU-only pods none.
    assert plus.score(view([1000, 200, 1000], 64000), GpuPodDemand(8000, 1000, 2))[1] == (0, 2)
    assert plus.score(view([1000], 64000), GpuPodDemand(8000, 0, 0))[1] == ()
    with pytest.raises(ValueError):
        plus.score(view([300], 64000), GpuPodDemand(8000, 1000, 1))


def test_scores_are_memoised_without_going_stale() -> None:
    typ = typical((11300, 1000, 1, 6), (3152, 810, 1, 4))
    plus = FgdPlusScorer(FragmentationModel(typ))
    d = GpuPodDemand(3152, 810, 1)
    # Same GPUs, different free CPU: the strand term differs, so the scores must too.
    a = plus.score(view([1000] * 8, 90000, "G2"), d)[0]
    b = plus.score(view([1000] * 8, 40000, "G2"), d)[0]
    assert a != b
    assert plus.score(view([1000] * 8, 90000, "G2"), d)[0] == a
    with pytest.raises(ValueError):
        FgdPlusScorer(FragmentationModel(typ), strand_weight=-1)


def test_fgdplus_runs_through_the_placer() -> None:
    typ = typical((12000, 1000, 1, 8), (3152, 810, 1, 2), (12500, 0, 0, 2))
    nodes = [node("g2", 8, cpu=96000, model="G2"), node("t4", 2, cpu=104000)]
    eng = PlacerEngine(nodes, "fgdplus", FragmentationModel(typ), random.Random(0))
    assert eng.place(pod("c", 0, cpu=12500)) == 1  # CPU-only pod on the CPU-rich node
    assert eng.place(pod("s", 810, cpu=3152)) is not None
    eng.cluster.check_invariants()


def test_the_fleet_s_waste_tables_are_worked_out_with_the_scorer() -> None:
    # The live scheduler builds its scorer in a full cycle; its first placement may come in a cycle that carries
    # on with a new pod waiting, which must not be the one that works the table out.
    typ = typical((4000, 300, 1, 1), (4000, 500, 1, 1))
    frag = FragmentationModel(typ)
    s = FgdPlusScorer(frag, model_gpus={"T4": 8, "A100-SXM4-80GB": 0})
    assert set(s._tables) == {frag.model_class("T4")}
    assert s._tables[frag.model_class("T4")] == settled_waste_table(typ, "T4")
    assert not FgdPlusScorer(frag)._tables  # no fleet known: worked out when first needed
