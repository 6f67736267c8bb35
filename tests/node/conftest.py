"""Fixtures for the node agent's tests: kmock + ApiSim (the live scheduler's API double) and short socket dirs.

tests/kube holds the API double (kube_apisim.py) and the object builders (live_env.py); they are put on the
path here rather than copied.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kube"))

import kmock
from kmock._internal import parsing as kmock_parsing
from kube_apisim import ApiSim, KmockThread, parse_path_with_namespaces

from gpufleet.k8s import resources as r


@pytest.fixture
def apisim(monkeypatch: pytest.MonkeyPatch) -> Iterator[ApiSim]:
    monkeypatch.setattr(kmock_parsing, "parse_path", parse_path_with_namespaces)
    harness = KmockThread(kmock.KubernetesScaffold)
    harness.start()
    sim = ApiSim(harness)
    sim.serve(r.NODES, r.PODS, r.NAMESPACES, r.PRIORITY_CLASSES, r.LEASES, r.EVENTS, r.RESOURCE_FLAVORS,
              r.CLUSTER_QUEUES, r.LOCAL_QUEUES, r.COHORTS, r.WORKLOAD_PRIORITY_CLASSES)
    try:
        yield sim
    finally:
        sim.close()
        harness.stop()


@pytest.fixture
def sockdir() -> Iterator[Path]:
    """A short directory for unix sockets: AF_UNIX paths hold at most 107 bytes, and the checkout (hence
    pytest's tmp_path) may be deep."""
    path = Path(tempfile.mkdtemp(prefix="gfn", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
