"""Fixtures: kmock on 127.0.0.1 (random port) per test, over real HTTP, in a background event loop."""

from __future__ import annotations

from collections.abc import Iterator

import kmock
import pytest
from kmock._internal import parsing as kmock_parsing
from kube_apisim import ApiSim, KmockThread, parse_path_with_namespaces

from gpufleet.kube import resources as r
from gpufleet.kube.client import KubeClient

SERVED = (r.NODES, r.PODS, r.NAMESPACES, r.PRIORITY_CLASSES, r.LEASES, r.EVENTS, r.RESOURCE_FLAVORS,
          r.CLUSTER_QUEUES, r.LOCAL_QUEUES, r.COHORTS, r.WORKLOAD_PRIORITY_CLASSES, r.NODE_POOLS)


@pytest.fixture
def kmock_namespaces_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let kmock route /api/v1/namespaces (see parse_path_with_namespaces; pinned in test_kmock_limits)."""
    monkeypatch.setattr(kmock_parsing, "parse_path", parse_path_with_namespaces)


@pytest.fixture
def kube_emulator(kmock_namespaces_fix: None) -> Iterator[KmockThread]:
    """kmock's own stateful KubernetesEmulator, unmodified (create/get/patch/list/delete, naive watch)."""
    harness = KmockThread(kmock.KubernetesEmulator)
    harness.start()
    try:
        yield harness
    finally:
        harness.stop()


@pytest.fixture
def apisim(kmock_namespaces_fix: None) -> Iterator[ApiSim]:
    """A kmock KubernetesScaffold plus API-server semantics (see kube_apisim) for the scheduler's types."""
    harness = KmockThread(kmock.KubernetesScaffold)
    harness.start()
    sim = ApiSim(harness)
    sim.serve(*SERVED)
    try:
        yield sim
    finally:
        sim.close()
        harness.stop()


@pytest.fixture
def client(apisim: ApiSim) -> Iterator[KubeClient]:
    with KubeClient(host=apisim.url, timeout=5.0) as c:
        yield c
