"""Module-wide dashboards: the case study planned from files, a one-day simulation result, a small advice
(``gpufleet advise -o DIR``'s whatif.json) and a small calibrated simulation (``simulate --calibrate --json``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.web.server import Dashboard
from gpufleet.web.source_simulation import SimulationSource, load_result
from tests.web.helpers import CALIBRATE, CALIBRATION_TARGETS, HOSTILE, SMALL_ADVICE, files_source, serving


@pytest.fixture(scope="module")
def files_dashboard() -> Iterator[Dashboard]:
    with serving(files_source(HOSTILE)) as dashboard:
        yield dashboard


@pytest.fixture(scope="session")
def sim_result(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim") / "result.json"
    result = CliRunner().invoke(app, ["simulate", "--duration", "1d", "--json", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def sim_dashboard(sim_result: Path) -> Iterator[Dashboard]:
    with serving(SimulationSource(load_result(sim_result))) as dashboard:
        yield dashboard


@pytest.fixture(scope="session")
def advice_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What ``gpufleet advise`` writes for the advisor's small cluster (three proposals judged: seconds)."""
    out = tmp_path_factory.mktemp("advice")
    result = CliRunner().invoke(app, ["advise", SMALL_ADVICE, "--evaluations", "3", "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="session")
def calibrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with ``result.json`` and ``report/`` of ``simulate --calibrate`` on a small input (a few
    seconds: tens of four-day runs of three nodes)."""
    out = tmp_path_factory.mktemp("calibrated")
    result = CliRunner().invoke(app, ["simulate", CALIBRATE, "--calibrate", CALIBRATION_TARGETS, "--json",
                                      str(out / "result.json"), "--report", str(out / "report")])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def advice_dashboard(advice_dir: Path) -> Iterator[Dashboard]:
    with serving(SimulationSource(load_result(advice_dir / "whatif.json"))) as dashboard:
        yield dashboard


@pytest.fixture(scope="module")
def calibrated_dashboard(calibrated: Path) -> Iterator[Dashboard]:
    with serving(SimulationSource(load_result(calibrated / "result.json"))) as dashboard:
        yield dashboard
