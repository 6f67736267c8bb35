"""Workload construction: shuffle, inflation to 130% by resampling, node order; arrived-demand arithmetic."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from gpufleet.sim.fragbench.bench import simulate
from gpufleet.sim.fragbench.trace import (
    BenchPod,
    TraceError,
    bench_catalog,
    build_arrivals,
    build_cluster,
    load_trace,
    model_key,
    pod_request_template,
    trace_typical_pods,
)
from tests.fragbench.helpers import arrivals, node, pod, typical, write_trace

NODES = [node(f"n{i}", 2 if i % 2 else 8) for i in range(6)]  # 3 × 2 + 3 × 8 = 30 GPUs
CAPACITY = 30_000
PODS = ([pod(f"s{i:02d}", 500) for i in range(20)] + [pod(f"w{i:02d}", 1000) for i in range(10)]
        + [pod(f"m{i}", 1000, num=4) for i in range(2)] + [pod(f"c{i}", 0) for i in range(5)])
ORIGINAL_DEMAND = 20 * 500 + 10 * 1000 + 2 * 4000  # 28,000 milli: 93% of capacity


def _key(p: BenchPod) -> tuple[int, int, int, int, tuple[str, ...]]:
    return (p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, p.models)


def test_originals_are_shuffled_then_resampled_copies_appended() -> None:
    a = build_arrivals(PODS, NODES, seed=7)
    assert a.capacity_milli == CAPACITY
    head, tail = a.pods[: a.originals], a.pods[a.originals:]
    assert a.originals == len(PODS)
    assert sorted(p.name for p in head) == sorted(p.name for p in PODS)
    assert [p.name for p in head] != sorted(p.name for p in PODS)  # shuffled
    by_name = {p.name: p for p in PODS}
    for i, p in enumerate(tail):
        base, _, k = p.name.rpartition("-tuned-")
        assert int(k) == i and _key(p) == _key(by_name[base])
    assert tail, "93% of capacity must be inflated"


def test_inflation_stops_at_130_percent_with_the_reference_check() -> None:
    target = 1.3 * CAPACITY
    for seed in range(20):
        a = build_arrivals(PODS, NODES, seed)
        total = a.total_gpu_milli
        # The reference checks the next pod's per-GPU milli (≤ 1000 here), yet adds its total (≤ 4000): it
        # can overshoot by at most one pod's total minus its per-GPU share, and stops less than 1000 short.
        assert target - 1000 < total <= target + 3000
        strict = build_arrivals(PODS, NODES, seed, reference_stop=False)
        assert target - 4000 < strict.total_gpu_milli <= target
        # Both draw the same resampled pods up to where they stop.
        n = min(len(a.pods), len(strict.pods))
        assert [p.name for p in a.pods[:n]] == [p.name for p in strict.pods[:n]]


def test_deterministic_per_seed_and_different_across_seeds() -> None:
    a, b = build_arrivals(PODS, NODES, 3), build_arrivals(PODS, NODES, 3)
    assert a == b
    c = build_arrivals(PODS, NODES, 4)
    assert [p.name for p in c.pods] != [p.name for p in a.pods]
    # Node order is a permutation, shuffled by the seed.
    assert sorted(n.name for n in a.nodes) == sorted(n.name for n in NODES)
    assert [n.name for n in a.nodes] != [n.name for n in c.nodes]
    assert [n.name for n in build_arrivals(PODS, NODES, 3, shuffle_nodes=False).nodes] == sorted(
        n.name for n in NODES)


def test_a_trace_above_the_target_loses_random_pods() -> None:
    big = PODS + [pod(f"x{i:02d}", 1000) for i in range(20)]  # 48,000 milli > 39,000
    a = build_arrivals(big, NODES, 1)
    assert a.total_gpu_milli <= 1.3 * CAPACITY
    assert a.originals == len(a.pods) < len(big)
    assert not any("-tuned-" in p.name for p in a.pods)
    kept = build_arrivals(big, NODES, 1, ratio=0)
    assert len(kept.pods) == len(big)


def test_arrived_demand_counts_failed_pods() -> None:
    # One 1-GPU node. 500 fits (arrived 50%, used 50%); 600 fails (arrived 110%, used still 50%); 500 fits on
    # what is left (arrived 160%, beyond the curve). Unallocated = 100 − used, against arrived demand.
    run = simulate(arrivals([node("a", 1)], [pod("p1", 500), pod("p2", 600), pod("p3", 500)]),
                   typical((4000, 500, 1, 1)), "fgd")
    assert (run.failed_pods, run.failed_gpu_milli) == (1, 600)
    assert run.unallocated_pct[50] == pytest.approx(50.0)
    assert run.unallocated_pct[110] == pytest.approx(50.0)
    assert run.final_unallocated_pct == pytest.approx(0.0)
    # Bin 100 has no row and neither have 99 and 101: no value there.
    assert run.unallocated_pct[100] != run.unallocated_pct[100]


def test_typical_pods_come_from_the_original_trace_with_cpu_only_pods() -> None:
    # 37 pods: shares 20, whole 10, CPU-only 5, 4-GPU 2. The three popular specs cover 35 pods: 94.6% < 95%,
    # so the 4-GPU spec is taken too; at a 90% cutoff it is cut and the weights renormalise over 35 pods.
    assert len(trace_typical_pods(PODS, 0.95)) == 4
    typ = trace_typical_pods(PODS, 0.90)
    counts = Counter((t.cpu_milli, t.gpu_milli, t.num_gpu) for t in typ)
    assert counts == Counter({(4000, 500, 1): 1, (4000, 1000, 1): 1, (4000, 0, 0): 1})
    assert sum(t.count for t in typ) == 35
    assert [t.weight for t in typ] == pytest.approx([20 / 35, 10 / 35, 5 / 35])
    # Resampled copies never change the set: run_one builds it from the trace before inflating.
    inflated = build_arrivals(PODS, NODES, 1)
    assert trace_typical_pods(inflated.pods[: inflated.originals], 0.90) == typ


def test_models_use_catalog_keys_everywhere(tmp_path: Path) -> None:
    assert model_key("V100M32") == "V100-32GB" and model_key("G2") == "G2"
    catalog = bench_catalog(["G2", "T4", "G3"])
    assert catalog.get("G2").memory_mib > 0 and catalog.get("T4").key == "T4"
    nodes_csv, pods_csv = write_trace(tmp_path)
    nodes, _ = load_trace(nodes_csv, pods_csv)
    assert {n.model for n in nodes} == {"G2", "T4"}
    cluster = build_cluster(nodes)
    g2 = next(n for n in cluster if n.gpu_model == "G2")
    assert len(g2.gpus) == 8 and all(g.mode == "whole" for g in g2.gpus)
    assert g2.allocatable["cpu"] == 96000 and g2.allocatable["memory"] == 393216 * 2**20


def test_pod_templates_carry_the_gpu_demand() -> None:
    share = pod_request_template(pod("s", 470, cpu=8000, models=("T4",)))
    assert (share.gpu.kind, share.gpu.milli, share.gpu.models) == ("fraction", 470, ("T4",))
    assert share.requests["cpu"] == 8000 and share.requests["memory"] == 1024 * 2**20
    whole = pod_request_template(pod("w", 1000, num=4))
    assert (whole.gpu.kind, whole.gpu.count) == ("gpu", 4) and whole.requests["nvidia.com/gpu"] == 4
    assert pod_request_template(pod("c", 0)).gpu.kind == "none"


def test_a_damaged_trace_is_refused(tmp_path: Path) -> None:
    nodes_csv, pods_csv = write_trace(tmp_path)
    pods_csv.write_text(pods_csv.read_text() + "bad,12x,1,1,1000,,LS,Running,0,1,0\n")
    with pytest.raises(TraceError, match="1 of 121 rows rejected"):
        load_trace(nodes_csv, pods_csv)
