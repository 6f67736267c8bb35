"""Observability tests: alert rules, dashboards and the simulator's OpenMetrics, checked with Prometheus's own
tools (tests/kube/prom_tools.py) and against the metrics the real exporters serve.

tests/kube (the API double, object builders, Prometheus helpers, the chart renderer) and tests/node (the fake
kubelet and the node agent's harness) are put on the path rather than copied.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "node"))
sys.path.insert(0, str(TESTS / "kube"))

import kmock  # noqa: E402
from kmock._internal import parsing as kmock_parsing  # noqa: E402
from kube_apisim import ApiSim, KmockThread, parse_path_with_namespaces  # noqa: E402

from gpufleet.k8s import resources as r  # noqa: E402


@pytest.fixture(scope="module")
def module_apisim() -> Iterator[ApiSim]:
    """ApiSim (kmock over real HTTP with API-server semantics) shared by one module's tests."""
    patch = pytest.MonkeyPatch()
    patch.setattr(kmock_parsing, "parse_path", parse_path_with_namespaces)
    harness = KmockThread(kmock.KubernetesScaffold)
    harness.start()
    sim = ApiSim(harness)
    sim.serve(r.NODES, r.PODS, r.NAMESPACES, r.PRIORITY_CLASSES, r.LEASES, r.EVENTS, r.RESOURCE_FLAVORS,
              r.CLUSTER_QUEUES, r.LOCAL_QUEUES, r.COHORTS, r.WORKLOAD_PRIORITY_CLASSES, r.NODE_POOLS)
    try:
        yield sim
    finally:
        sim.close()
        harness.stop()
        patch.undo()


@pytest.fixture(scope="module")
def module_sockdir() -> Iterator[Path]:
    """A short directory for unix sockets (AF_UNIX paths hold at most 107 bytes; the checkout may be deep)."""
    path = Path(tempfile.mkdtemp(prefix="gfo", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
