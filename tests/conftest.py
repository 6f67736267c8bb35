"""Shared test helpers: build manifests from YAML text, locate the openb trace."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.api.manifests import Manifests, load_manifest_text

REPO = Path(__file__).resolve().parents[1]


def manifests(text: str, file: str = "test.yaml") -> Manifests:
    return load_manifest_text(text, file)


def openb_dir() -> Path | None:
    env = os.environ.get("GPUFLEET_OPENB_DIR")
    candidate = Path(env) if env else REPO.parent / "shared" / "data" / "openb"
    return candidate if (candidate / "openb_node_list_gpu_node.csv").exists() else None


@pytest.fixture
def openb() -> Path:
    folder = openb_dir()
    if folder is None:
        pytest.skip("the openb trace is not present (set GPUFLEET_OPENB_DIR or put it in ../shared/data/openb)")
    return folder


@pytest.fixture(autouse=True)
def _no_json_log_handler_outlives_its_test() -> Iterator[None]:
    """A command run in-process (`gpufleet scheduler` or `node agent` through CliRunner) routes the root logger to
    stderr as JSON lines with ``setup_logging``, replacing the handlers there; the handler follows stderr as it is at
    each record (so threads of the command logging after it returned do not write to the runner's closed stream),
    and it goes with its test, so that later tests log as pytest set them up."""
    from gpufleet.k8s.logs import JsonFormatter

    yield
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler.formatter, JsonFormatter):
            root.removeHandler(handler)
