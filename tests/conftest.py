"""Shared test helpers: build manifests from YAML text, locate the openb trace."""

from __future__ import annotations

import os
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
