"""The Makefile says what it does before it does something slow, and builds the image the manifests name."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO


def _dry_run(tmp_path: Path, target: str) -> list[str]:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy2(REPO / name, tmp_path / name)  # a fresh checkout: no .venv yet
    done = subprocess.run(["make", "-n", target], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def _index(lines: list[str], text: str) -> int:
    return next(i for i, line in enumerate(lines) if text in line)


def test_demo_says_what_it_installs_before_installing(tmp_path: Path) -> None:
    lines = _dry_run(tmp_path, "demo")
    assert _index(lines, "creating the virtual environment") < _index(lines, "-m venv")
    assert _index(lines, "installing gpufleet") < _index(lines, "pip install -q --progress-bar off -e")
    assert _index(lines, "gpufleet demo (") < _index(lines, "bin/gpufleet demo")


def test_bench_says_how_long_it_takes(tmp_path: Path) -> None:
    lines = _dry_run(tmp_path, "bench")
    assert _index(lines, "about 40 minutes") < _index(lines, "bench/run_all.py")


def test_image_is_the_one_the_manifests_run(tmp_path: Path) -> None:
    (build,) = [line for line in _dry_run(tmp_path, "image") if line.startswith("docker build")]
    deployment = yaml.safe_load((REPO / "deploy" / "deployment.yaml").read_text())
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert build.endswith(f"-t {image} .")
