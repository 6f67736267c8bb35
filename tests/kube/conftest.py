"""Fixtures: kmock on 127.0.0.1 (random port) per test, over real HTTP, in a background event loop."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import kmock
import pytest
from kmock._internal import parsing as kmock_parsing
from kube_apisim import ApiSim, KmockThread, parse_path_with_namespaces, serving

from gpufleet.k8s import resources as r
from gpufleet.k8s.client import KubeClient

if TYPE_CHECKING:
    from gpufleet.live.scheduler import Scheduler
    from gpufleet.live.settings import SchedulerSettings

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
    with serving(kmock.KubernetesScaffold, *SERVED) as sim:
        yield sim


@pytest.fixture
def client(apisim: ApiSim) -> Iterator[KubeClient]:
    with KubeClient(host=apisim.url, timeout=5.0) as c:
        yield c


@pytest.fixture
def live_scheduler(apisim: ApiSim) -> Iterator[Callable[..., Scheduler]]:
    """Start gpufleet schedulers against ``apisim`` over real HTTP; each has its own client (User-Agent
    ``gpufleet-test/<identity>``, so tests can tell who wrote what). All are stopped at teardown."""
    from live_env import FAST_INFORMERS, fast_settings

    from gpufleet.live.scheduler import Scheduler

    started: list[Scheduler] = []

    def start(identity: str = "s1", *, leader_elect: bool = False, settings: SchedulerSettings | None = None,
              run: bool = True) -> Scheduler:
        client = KubeClient(host=apisim.url, timeout=5.0, user_agent=f"gpufleet-test/{identity}")
        instance = Scheduler(client, settings or fast_settings(), identity=identity, leader_elect=leader_elect,
                             informer_options=FAST_INFORMERS)
        started.append(instance)
        if run:
            instance.start()
        return instance

    yield start
    for instance in started:
        instance.stop()
        instance.client.close()
