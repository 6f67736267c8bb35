"""Module-wide dashboards: the case study planned from files, and a one-day simulation result."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.web.server import Dashboard
from gpufleet.web.source_simulation import SimulationSource, load_result
from tests.web.helpers import HOSTILE, files_source, serving


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
