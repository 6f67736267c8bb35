"""bench/fragmentation.py's variant table: which of our policies break the issue's "never more than 0.3 points
worse than FGD" rule (the script's exit status)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from gpufleet.sim.fragbench.bench import PolicySummary
from gpufleet.sim.fragbench.report import MeanStd

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "fragmentation.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_fragmentation", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def summary(policy: str, trace: str, at100: float, at130: float) -> PolicySummary:
    points = {b: MeanStd(at130 if b == 130 else at100, 0.1, 10) for b in (100, 110, 120, 130)}
    return PolicySummary(policy=policy, trace=trace, seeds=list(range(42, 52)), unallocated=points,
                         frag_amount=points, frag_rate=points, curve_mean=[], curve_std=[], frag_amount_curve=[],
                         frag_rate_curve=[], seconds_per_run=1.0, seconds_std=0.0, failed_pods=0.0)


def test_variant_table_flags_each_policy_beyond_the_tolerance() -> None:
    bench = _script()
    rows = [summary("fgd", "openb_pod_list_a", 5.0, 4.9), summary("fgdplus", "openb_pod_list_a", 4.0, 3.9),
            summary("gpufleet", "openb_pod_list_a", 5.31, 5.2),
            summary("fgd", "openb_pod_list_b", 3.0, 2.9), summary("fgdplus", "openb_pod_list_b", 3.29, 3.2),
            summary("gpufleet", "openb_pod_list_b", 2.5, 2.4),
            summary("fgd", "openb_pod_list_c", 3.0, 2.9)]  # no runs of ours: no row, no verdict
    table, worse = bench.variant_table(rows, ("fgdplus", "gpufleet"))
    assert worse == ["openb_pod_list_a (gpufleet)"]  # +0.31; fgdplus' +0.29 on b is within the rule
    lines = table.splitlines()
    assert len(lines) == 4
    assert lines[2] == ("| a | 5.00 ± 0.10 | 4.00 ± 0.10 | -1.00 | 5.31 ± 0.10 | +0.31 | 4.90 | 3.90 | 5.20 |")
    assert bench.OURS == ("fgdplus", "gpufleet")
