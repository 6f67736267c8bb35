"""bench/kueue_cycles.py compares the shared preemption search with today's straightforward one in one process
and refuses to report figures when their decisions differ (issue 15, item 7)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "kueue_cycles.py"
SMALL = ["--cohorts", "2", "--queues-per-cohort", "5", "--per-queue", "50", "--baseline-cycles", "30",
         "--naive-cycles", "2"]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_kueue_cycles", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_a_small_run_with_preemptions_decides_as_todays_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert _script().main(SMALL) == 0
    out = capsys.readouterr().out
    # The compared window holds preemption cycles, whose victims, preemptors and reasons must all agree.
    assert "first 30 cycles (50 admissions, 4 preemptions), identical decisions:" in out
    assert "500 finished, 0 still pending" in out


def test_a_search_that_decides_differently_is_reported_and_fails(capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from gpufleet.scheduling.kueue.cohort_search import CohortSearch

    def no_victims(self: CohortSearch, *args: object) -> list[object]:
        return []

    monkeypatch.setattr(CohortSearch, "classical_targets", no_victims)
    assert _script().main(SMALL) == 1
    assert "MISMATCH: today's code decided differently" in capsys.readouterr().err
