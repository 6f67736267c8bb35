"""bench/kueue_cycles.py compares the shared preemption search with the straightforward one in one process, and the
current code with another git revision's in a subprocess, and refuses to report figures when their decisions
differ (issue 15, item 7)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "kueue_cycles.py"
SMALL = ["--cohorts", "2", "--queues-per-cohort", "5", "--per-queue", "50", "--baseline-cycles", "30",
         "--naive-cycles", "2", "--baseline", "none"]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_kueue_cycles", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_a_small_run_with_preemptions_decides_as_the_straightforward_search(capsys: pytest.CaptureFixture[str]) -> None:
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
    assert "MISMATCH: the straightforward search decided differently" in capsys.readouterr().err


def _in_git_checkout() -> bool:
    try:
        subprocess.run(["git", "-C", str(SCRIPT.parent), "rev-parse", "HEAD"], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return False
    return True


GIT = pytest.mark.skipif(not _in_git_checkout(), reason="the baseline is another git revision: needs a git checkout")
WHOLE = ["--cohorts", "2", "--queues-per-cohort", "5", "--per-queue", "50", "--baseline-cycles", "0",
         "--naive-cycles", "0", "--baseline", "HEAD"]


@GIT
def test_todays_code_runs_whole_in_a_subprocess_and_decides_the_same(capsys: pytest.CaptureFixture[str]) -> None:
    assert _script().main(WHOLE) == 0
    out = capsys.readouterr().out
    assert "today's code (HEAD), whole run:" in out
    assert "against today's code (HEAD), medians of 1 run(s) each, identical decisions: p99 cycle" in out


@GIT
def test_a_run_that_decides_unlike_todays_code_is_reported_and_fails(capsys: pytest.CaptureFixture[str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from gpufleet.scheduling.kueue.cohort_search import CohortSearch

    def no_victims(self: CohortSearch, *args: object) -> list[object]:
        return []

    monkeypatch.setattr(CohortSearch, "classical_targets", no_victims)  # here, not in the subprocess
    assert _script().main(WHOLE) == 1
    assert "MISMATCH: today's code (HEAD) decided differently" in capsys.readouterr().err
