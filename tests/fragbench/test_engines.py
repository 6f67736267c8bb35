"""The benchmark run end to end: index and plain scan agree, every policy, parallel runs, the JSON document."""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from pathlib import Path

import pytest

from gpufleet.sim.fragbench.bench import (
    POLICIES,
    REPORT_POINTS,
    BenchConfig,
    parse_seeds,
    run_benchmark,
    simulate,
    summarize,
    to_json,
)
from gpufleet.sim.fragbench.trace import build_arrivals, load_trace, trace_typical_pods
from gpufleet.sim.openb import DEFAULT_POD_FILE, GPU_NODE_FILE
from tests.fragbench.helpers import write_trace


def _eq(a: list[float], b: list[float]) -> bool:
    # Curves hold NaN for bins without data; NaN never equals itself.
    return len(a) == len(b) and all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("policy", [p for p in POLICIES if p != "random"])
def test_figures_do_not_depend_on_the_placers_index(tmp_path: Path, policy: str) -> None:
    # The placer's equivalence-class index must place exactly as its plain scan of every node; with the
    # deterministic tie-break every placement, hence every curve point, is then identical.
    nodes_csv, pods_csv = write_trace(tmp_path, nodes=15, pods=150)
    _, pods = load_trace(nodes_csv, pods_csv)
    nodes, _ = load_trace(nodes_csv, pods_csv)
    a = build_arrivals(pods, nodes, 5)
    typ = trace_typical_pods(pods)
    indexed = simulate(a, typ, policy)
    naive = simulate(a, typ, policy, indexed=False)
    assert indexed.failed_pods == naive.failed_pods and indexed.failed_pods > 0
    assert _eq(indexed.unallocated_pct, naive.unallocated_pct)
    assert _eq(indexed.frag_amount_pct, naive.frag_amount_pct)


def test_results_do_not_depend_on_jobs(tmp_path: Path) -> None:
    nodes_csv, pods_csv = write_trace(tmp_path)
    cfg = BenchConfig(nodes_csv, pods_csv, policies=("fgd", "random"), seeds=(1, 2))
    one = run_benchmark(cfg)
    two = run_benchmark(replace(cfg, jobs=2))
    assert [(r.policy, r.seed) for r in one] == [("fgd", 1), ("fgd", 2), ("random", 1), ("random", 2)]
    for a, b in zip(one, two, strict=True):
        assert (a.policy, a.seed, a.failed_pods) == (b.policy, b.seed, b.failed_pods)
        assert _eq(a.unallocated_pct, b.unallocated_pct)


def test_json_document(tmp_path: Path) -> None:
    nodes_csv, pods_csv = write_trace(tmp_path)
    cfg = BenchConfig(nodes_csv, pods_csv, policies=("bestfit",), seeds=(1, 2, 3))
    doc = json.loads(json.dumps(to_json(summarize(run_benchmark(cfg)))))
    (entry,) = doc["results"]
    assert entry["policy"] == "bestfit" and entry["trace"] == "pods" and entry["seeds"] == [1, 2, 3]
    assert set(entry["unallocated_pct"]) == {str(b) for b in REPORT_POINTS}
    assert set(entry["unallocated_pct"]["100"]) == {"mean", "std"}
    assert entry["seconds_per_run"] > 0
    assert len(entry["curve"]["unallocated_mean"]) == 131


def test_parse_seeds() -> None:
    assert parse_seeds("42-51") == list(range(42, 52))
    assert parse_seeds("1,3-4") == [1, 3, 4]
    for bad in ("", "5-3", "a", "1,1"):
        with pytest.raises(ValueError):
            parse_seeds(bad)


def test_config_rejects_unknown_names(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown policy"):
        BenchConfig(tmp_path / "n", tmp_path / "p", policies=("fgdd",))
    with pytest.raises(ValueError, match="unknown tie_break"):
        BenchConfig(tmp_path / "n", tmp_path / "p", tie_break="last")  # type: ignore[arg-type]


def test_smoke_on_the_openb_trace_every_policy(openb: Path) -> None:
    # CI smoke: a few hundred pods of the real trace on 80 of its nodes, every policy, well under 20 s.
    started = time.perf_counter()
    cfg = BenchConfig(openb / GPU_NODE_FILE, openb / DEFAULT_POD_FILE, policies=POLICIES, seeds=(42,),
                      max_nodes=80, max_pods=300)
    results = run_benchmark(cfg)
    assert time.perf_counter() - started < 20
    by_policy = {r.policy: r for r in results}
    assert set(by_policy) == set(POLICIES)
    for r in results:
        # 80 nodes hold ~400 GPUs; the resampled fill reaches 130% of them, so every policy leaves pods out.
        assert r.pods > 300 and r.failed_pods > 0
        assert 0 <= r.unallocated_pct[100] < 40
    # The paper's ordering at this scale: Random leaves the most GPUs unallocated.
    assert by_policy["random"].unallocated_pct[100] > by_policy["fgd"].unallocated_pct[100]
