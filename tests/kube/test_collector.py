"""gpufleet.live.collector: the garbage collector of a process the scheduler owns (young collections far apart, the
synced cache frozen), and only of such a process."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from kube_apisim import ApiSim
from live_env import FAST_INFORMERS, fast_settings, node, wait_until

from gpufleet.k8s import resources as r
from gpufleet.k8s.client import KubeClient
from gpufleet.live import collector
from gpufleet.live.scheduler import Scheduler


@pytest.fixture
def restored_gc() -> Iterator[None]:
    """The test process's collector as it was, whatever the test set."""
    threshold = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


def test_tune_spaces_young_collections_and_never_brings_them_closer(restored_gc: None) -> None:
    gc.set_threshold(700, 10, 10)
    collector.tune()
    assert gc.get_threshold() == (collector.YOUNG_THRESHOLD, 10, 10)
    gc.set_threshold(10 * collector.YOUNG_THRESHOLD, 5, 7)
    collector.tune()
    assert gc.get_threshold() == (10 * collector.YOUNG_THRESHOLD, 5, 7)


def test_freeze_synced_takes_what_is_alive_out_of_collections(restored_gc: None) -> None:
    gc.unfreeze()
    cache = [{"metadata": {"name": f"p{i}"}} for i in range(1000)]
    collector.freeze_synced()
    assert gc.get_freeze_count() >= len(cache)


def _scheduler(apisim_url: str, *, own_process: bool) -> Scheduler:
    client = KubeClient(host=apisim_url, timeout=5.0)
    return Scheduler(client, fast_settings(), identity="gc", leader_elect=False, serve=False,
                     informer_options=FAST_INFORMERS, own_process=own_process)


@pytest.mark.parametrize("own_process", [True, False])
def test_scheduler_sets_the_collector_only_when_it_owns_the_process(
        apisim: ApiSim, restored_gc: None, monkeypatch: pytest.MonkeyPatch, own_process: bool) -> None:
    apisim.create(r.NODES, node("n1", gpus=8))
    calls: list[str] = []
    monkeypatch.setattr(collector, "tune", lambda: calls.append("tune"))
    monkeypatch.setattr(collector, "freeze_synced", lambda: calls.append("freeze"))
    sched = _scheduler(apisim.url, own_process=own_process)
    sched.start()
    try:
        # the loop's first cycle runs once the informers synced, after the point where it freezes the cache
        wait_until(lambda: bool(sched.reports), what="the first cycle")
    finally:
        sched.stop()
        sched.client.close()
    assert calls == (["tune", "freeze"] if own_process else [])
