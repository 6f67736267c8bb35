"""The bench's reporting path: fragmentation of small nodes, fragmentation rate, curve binning."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from gpufleet.scheduling.fragmentation import FragmentationModel
from gpufleet.sim.fragbench.bench import simulate
from gpufleet.sim.fragbench.placer import PlacerEngine
from gpufleet.sim.fragbench.report import FragTracker, arrive_bins, bin_curve, mean_std
from tests.fragbench.helpers import arrivals, node, pod, typical

# Half-GPU pod with 4 cores (p=0.5), whole-GPU pod with 16 cores (p=0.3), CPU-only pod with 2 cores (p=0.2).
TYPICAL = typical((4000, 500, 1, 5), (16000, 1000, 1, 3), (2000, 0, 0, 2))


def test_hand_computed_fragmentation_of_placed_nodes() -> None:
    # Two 2-GPU nodes, 24 cores each. Placed by BestFit (deterministic), in this order:
    #   a 500 share (4 cores) -> tightest node/GPU: node 0 GPU 0 (first of the tied empty nodes)
    #   a whole GPU (16 cores) -> node 0 (fuller) GPU 1
    fm = FragmentationModel(TYPICAL)
    nodes = [node("a", 2, cpu=24000), node("b", 2, cpu=24000)]
    eng = PlacerEngine(nodes, "bestfit", fm, random.Random(0))
    tracker = FragTracker(fm, eng.frag_view, 2)
    # Empty nodes: SHARE and WHOLE fit (Q3, no GPU below their size) -> 0; CPU_ONLY sees all 2000 idle.
    assert tracker.amount == pytest.approx(2 * 0.2 * 2000)
    assert tracker.idle == 4000
    assert tracker.ratio == pytest.approx(800 / 4000)
    assert eng.place(pod("s", 500, cpu=4000)) == 0
    tracker.update(0)
    # Node a: free [500, 1000], 20 cores. SHARE: Q3, nothing below 500 -> 0. WHOLE: one full GPU, 20000 >=
    # 16000 -> Q3, the 500 GPU is too small -> 500. CPU_ONLY: 1500. F = 0.3*500 + 0.2*1500 = 450.
    assert tracker.node(0) == pytest.approx(450.0)
    assert eng.place(pod("w", 1000, cpu=16000)) == 0
    tracker.update(0)
    # Node a: free [500, 0], 4 cores. SHARE: 500 fits, 4000 cpu fits -> Q3 -> 0 (the 0 GPU adds nothing).
    # WHOLE: no full GPU -> Q1 (4000 < 16000 too) -> all 500 idle. CPU_ONLY: 500. F = 0.3*500 + 0.2*500 = 250.
    assert tracker.node(0) == pytest.approx(250.0)
    assert tracker.amount == pytest.approx(250.0 + 400.0)
    assert tracker.idle == 2500
    assert tracker.ratio == pytest.approx(650 / 2500)


def test_simulate_records_fragmentation_per_arrival() -> None:
    # One 2-GPU node (capacity 2000 milli). After the share (arrived 25%) F = 450 as above: 22.5% of capacity.
    fm_nodes = [node("a", 2, cpu=24000)]
    run = simulate(arrivals(fm_nodes, [pod("s", 500, cpu=4000), pod("w", 1000, cpu=16000)]), TYPICAL, "bestfit")
    assert run.frag_amount_pct[25] == pytest.approx(450 / 2000 * 100)
    assert run.frag_rate_pct[25] == pytest.approx(450 / 1500 * 100)
    assert run.frag_amount_pct[75] == pytest.approx(250 / 2000 * 100)
    assert run.frag_rate_pct[75] == pytest.approx(250 / 500 * 100)
    assert run.unallocated_pct[75] == pytest.approx(25.0)


def test_arrive_bins_round_half_to_even_like_the_reference() -> None:
    # The reference applies Python's round() to arrived / total_gpus / 10: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2.
    cap = 100_000  # 100 GPUs: one percent is 1000 milli
    arrived = np.array([500, 1500, 2500, 2501, 99_499, 100_500], dtype=np.int64)
    assert arrive_bins(arrived, cap).tolist() == [0, 2, 2, 3, 99, 100]


def test_bin_curve_means_rows_and_fills_empty_bins_from_neighbours() -> None:
    cap = 100_000
    arrived = np.array([1000, 1200, 3000, 6000], dtype=np.int64)  # bins 1, 1, 3, 6
    values = np.array([10.0, 20.0, 30.0, 60.0])
    curve = bin_curve(arrived, values, cap, max_bin=8)
    assert curve[1] == pytest.approx(15.0)  # mean of the two rows of bin 1
    assert curve[3] == pytest.approx(30.0)
    # Bin 2 is empty: the rows of bins 1..3 are averaged (10, 20, 30).
    assert curve[2] == pytest.approx(20.0)
    # Bin 0 is empty: bins 0..1 -> (10 + 20) / 2; bin 4: bins 3..5 -> 30.
    assert curve[0] == pytest.approx(15.0)
    assert curve[4] == pytest.approx(30.0)
    # Bins 5 and 7 see the row of bin 6 only; bin 8 has no row within ±1: no value.
    assert curve[5] == pytest.approx(60.0) and curve[7] == pytest.approx(60.0)
    assert math.isnan(curve[8])
    with pytest.raises(ValueError):
        bin_curve(arrived, values[:2], cap)


def test_mean_std_is_the_sample_deviation_and_skips_missing_runs() -> None:
    s = mean_std([1.0, 2.0, 3.0, math.nan])
    assert s.mean == pytest.approx(2.0) and s.std == pytest.approx(1.0) and s.n == 3
    assert mean_std([4.0]).std == 0.0
    assert math.isnan(mean_std([math.nan]).mean)
