"""Informers against kmock over real HTTP: list-then-watch, bookmarks, and recovery without loss or repeats."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import kmock
import pytest
from kube_apisim import ApiSim, status

from gpufleet.k8s import resources as r
from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.informer import Backoff, CacheChange, Informer, InformerSet, ObjectCache
from gpufleet.k8s.resources import ResourceType


def fast() -> Backoff:
    return Backoff(initial=0.05, maximum=0.2, jitter=0.0)


def wait_until(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


class Recorder:
    """Every cache change, as (type, key, resourceVersion)."""

    def __init__(self, cache: ObjectCache) -> None:
        self.changes: list[CacheChange] = []
        self._lock = threading.Lock()
        cache.add_listener(self._on)

    def _on(self, change: CacheChange) -> None:
        with self._lock:
            self.changes.append(change)

    def log(self) -> list[tuple[str, str]]:
        with self._lock:
            return [(c.type, c.key) for c in self.changes]


def pod(name: str, ns: str = "ml") -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": ns, "labels": {}}, "spec": {"schedulerName": "gpufleet"}}


@pytest.fixture
def informers(client: KubeClient) -> Iterator[Callable[..., Informer]]:
    started: list[Informer] = []

    def make(resource: ResourceType, cache: ObjectCache | None = None, **options: object) -> Informer:
        opts: dict[str, object] = {"backoff": fast(), "min_watch_seconds": 0.0}
        opts.update(options)
        informer = Informer(client, resource, cache, **opts)  # type: ignore[arg-type]
        informer.start()
        started.append(informer)
        return informer

    yield make
    for informer in started:
        informer.stop()


def test_lists_then_follows_the_watch(apisim: ApiSim, client: KubeClient) -> None:
    apisim.create(r.PODS, pod("a"))
    apisim.create(r.PODS, pod("b"))
    apisim.create(r.NODES, {"metadata": {"name": "gpu-1"}})
    infs = InformerSet(client, [r.PODS, r.NODES], backoff=fast())
    recorder = Recorder(infs.cache)
    with infs:
        assert infs.wait_for_sync(5.0)
        assert infs.cache.keys(r.PODS) == {"ml/a", "ml/b"}
        assert infs.cache.get(r.NODES, "gpu-1") is not None
        list_rv = infs[r.PODS].resource_version
        wait_until(lambda: apisim.open_watches(r.PODS) == 1)

        apisim.create(r.PODS, pod("c"))
        apisim.modify(r.PODS, "ml", "a", {"metadata": {"labels": {"team": "x"}}})
        apisim.delete(r.PODS, "ml", "b")
        wait_until(lambda: infs.cache.keys(r.PODS) == {"ml/a", "ml/c"})

        initial = sorted(recorder.log()[:3])
        assert initial == [("ADDED", "gpu-1"), ("ADDED", "ml/a"), ("ADDED", "ml/b")]
        assert recorder.log()[3:] == [("ADDED", "ml/c"), ("MODIFIED", "ml/a"), ("DELETED", "ml/b")]
        assert infs.cache.get(r.PODS, "ml/a")["metadata"]["labels"] == {"team": "x"}  # type: ignore[index]
        assert infs[r.PODS].resource_version == str(apisim.rv)
        assert len(apisim.requests(r.PODS, "LIST")) == 1
        [watch] = apisim.requests(r.PODS, "WATCH")
        assert watch.params["resourceVersion"] == list_rv
        assert watch.params["allowWatchBookmarks"] == "true"
        assert len(apisim.requests(r.NODES, "LIST")) == 1


def test_scheduler_loop_wakes_on_change(apisim: ApiSim, client: KubeClient,
                                        informers: Callable[..., Informer]) -> None:
    cache = ObjectCache()
    informer = informers(r.PODS, cache)
    assert informer.wait_for_sync(5.0)
    wait_until(lambda: apisim.open_watches(r.PODS) == 1)
    seen = cache.version
    woke: list[int] = []
    waiter = threading.Thread(target=lambda: woke.append(cache.wait_for_change(seen, timeout=5.0)))
    waiter.start()
    time.sleep(0.1)
    assert not woke  # nothing changed yet: the loop sleeps
    apisim.create(r.PODS, pod("new"))
    waiter.join(5.0)
    assert woke == [seen + 1]
    assert cache.wait_for_change(woke[0], timeout=0.05) == woke[0]  # times out, no change


def test_bookmark_and_clean_end_resume_without_relisting(apisim: ApiSim, informers: Callable[..., Informer]) -> None:
    apisim.create(r.PODS, pod("a"))
    informer = informers(r.PODS)
    assert informer.wait_for_sync(5.0)
    wait_until(lambda: apisim.open_watches(r.PODS) == 1)
    version = informer.cache.version
    apisim.create(r.NODES, {"metadata": {"name": "n"}})  # moves the global clock; pods see only a bookmark
    assert apisim.bookmark(r.PODS) == 1
    bookmark_rv = str(apisim.rv)
    wait_until(lambda: informer.resource_version == bookmark_rv)
    assert informer.cache.version == version  # a bookmark is not a change
    apisim.end_watches(r.PODS)  # the server's timeoutSeconds elapsed
    wait_until(lambda: len(apisim.requests(r.PODS, "WATCH")) == 2 and apisim.open_watches(r.PODS) == 1)
    second = apisim.requests(r.PODS, "WATCH")[1]
    assert second.params["resourceVersion"] == bookmark_rv
    assert len(apisim.requests(r.PODS, "LIST")) == 1
    assert (informer.stats.relists_gone, informer.stats.relists_error, informer.stats.bookmarks) == (0, 0, 1)
    apisim.create(r.PODS, pod("b"))
    wait_until(lambda: informer.cache.keys(r.PODS) == {"ml/a", "ml/b"})


def test_dropped_stream_relists_once_after_backoff_without_missing_or_repeating(
    apisim: ApiSim, informers: Callable[..., Informer]
) -> None:
    apisim.create(r.PODS, pod("a"))
    apisim.create(r.PODS, pod("b"))
    cache = ObjectCache()
    recorder = Recorder(cache)
    informer = informers(r.PODS, cache, backoff=Backoff(initial=0.3, maximum=1.0, jitter=0.0))
    assert informer.wait_for_sync(5.0)
    wait_until(lambda: apisim.open_watches(r.PODS) == 1)
    apisim.create(r.PODS, pod("c"))
    wait_until(lambda: "ml/c" in cache.keys(r.PODS))

    def break_and_change(sim: ApiSim) -> None:
        # The stream dies, then the cluster changes while the informer is away: these changes can only
        # come back through the relist.
        assert sim._drop(r.PODS) == 1
        sim._create(r.PODS, pod("d"), None)
        sim._patch(r.PODS, "ml", "a", {"metadata": {"labels": {"v": "2"}}})
        sim._delete(r.PODS, "ml", "b")

    dropped_at = time.monotonic()
    apisim.atomically(break_and_change)
    wait_until(lambda: cache.keys(r.PODS) == {"ml/a", "ml/c", "ml/d"})
    relisted_after = time.monotonic() - dropped_at
    relist_rv = str(apisim.rv)

    assert recorder.log() == [
        ("ADDED", "ml/a"), ("ADDED", "ml/b"),  # first list
        ("ADDED", "ml/c"),  # watch
        ("DELETED", "ml/b"), ("MODIFIED", "ml/a"), ("ADDED", "ml/d"),  # relist diff: c unchanged, not repeated
    ]
    assert relisted_after >= 0.3  # backoff before relisting
    assert len(apisim.requests(r.PODS, "LIST")) == 2
    assert (informer.stats.relists_error, informer.stats.relists_gone) == (1, 0)
    wait_until(lambda: len(apisim.requests(r.PODS, "WATCH")) == 2)
    assert apisim.requests(r.PODS, "WATCH")[1].params["resourceVersion"] == relist_rv

    apisim.create(r.PODS, pod("e"))  # and the new watch carries on
    wait_until(lambda: "ml/e" in cache.keys(r.PODS))
    assert recorder.log()[-1] == ("ADDED", "ml/e")
    assert len(recorder.log()) == 7


def test_gone_on_resume_relists_immediately_and_delivers_once(
    apisim: ApiSim, informers: Callable[..., Informer]
) -> None:
    apisim.create(r.PODS, pod("a"))
    cache = ObjectCache()
    recorder = Recorder(cache)
    # A backoff this long would time the test out: proves a 410 relists without backing off.
    informer = informers(r.PODS, cache, backoff=Backoff(initial=30.0, maximum=30.0, jitter=0.0))
    assert informer.wait_for_sync(5.0)
    wait_until(lambda: apisim.open_watches(r.PODS) == 1)
    stale_rv = informer.resource_version

    def expire(sim: ApiSim) -> None:
        sim._signal(r.PODS, "end", None)  # the stream ends cleanly...
        sim._create(r.PODS, pod("b"), None)  # ...something happens...
        sim._compact(r.PODS)  # ...and history is compacted past it: resuming from stale_rv is 410

    apisim.atomically(expire)
    wait_until(lambda: "ml/b" in cache.keys(r.PODS))
    wait_until(lambda: len(apisim.requests(r.PODS, "WATCH")) == 3)
    watches = apisim.requests(r.PODS, "WATCH")
    assert [w.params["resourceVersion"] for w in watches] == [stale_rv, stale_rv, str(apisim.rv)]
    assert len(apisim.requests(r.PODS, "LIST")) == 2
    assert (informer.stats.relists_gone, informer.stats.relists_error) == (1, 0)
    assert recorder.log() == [("ADDED", "ml/a"), ("ADDED", "ml/b")]


def test_http_410_on_watch_open_also_relists(apisim: ApiSim, informers: Callable[..., Informer]) -> None:
    apisim.create(r.NODES, {"metadata": {"name": "n1"}})
    watches = apisim.kmock[kmock.action.WATCH, kmock.resource("v1/nodes")]
    apisim.harness.call(lambda: watches[1:2] << 410 << status(410, "Gone", "too old resource version"))
    informer = informers(r.NODES)
    assert informer.wait_for_sync(5.0)
    wait_until(lambda: apisim.open_watches(r.NODES) == 1)
    apisim.end_watches(r.NODES)  # the resume request is the one kmock answers 410
    wait_until(lambda: len(apisim.requests(r.NODES, "LIST")) == 2 and apisim.open_watches(r.NODES) == 1)
    assert informer.stats.relists_gone == 1
    assert len(apisim.requests(r.NODES, "WATCH")) == 3


def test_list_failures_back_off_exponentially_then_sync(
    apisim: ApiSim, informers: Callable[..., Informer]
) -> None:
    apisim.create(r.PODS, pod("a"))
    lists = apisim.kmock[kmock.action.LIST, kmock.resource("v1/pods")]
    apisim.harness.call(lambda: lists[:2] << 503 << status(503, "ServiceUnavailable", "apiserver restarting"))
    started = time.monotonic()
    informer = informers(r.PODS, backoff=Backoff(initial=0.1, maximum=1.0, factor=2.0, jitter=0.0))
    assert informer.wait_for_sync(5.0)
    assert time.monotonic() - started >= 0.1 + 0.2
    assert len(apisim.requests(r.PODS, "LIST")) == 3
    assert len(informer.stats.errors) == 2 and "ServerError" in informer.stats.errors[0]
    assert informer.cache.keys(r.PODS) == {"ml/a"}


def test_very_short_empty_watch_counts_as_failure(apisim: ApiSim, informers: Callable[..., Informer]) -> None:
    informer = informers(r.PODS, min_watch_seconds=5.0)
    assert informer.wait_for_sync(5.0)
    wait_until(lambda: apisim.open_watches(r.PODS) == 1)
    apisim.end_watches(r.PODS)  # ends at once with no events: a server-side problem, not a timeout
    wait_until(lambda: len(apisim.requests(r.PODS, "LIST")) == 2)
    assert informer.stats.relists_error == 1


def test_missing_crd_keeps_the_set_unsynced(apisim: ApiSim, client: KubeClient) -> None:
    unknown = ResourceType("example.com", "v1", "widgets", "Widget", namespaced=False)
    with InformerSet(client, [r.NODES, unknown], backoff=fast()) as infs:
        assert not infs.wait_for_sync(0.5)
        assert infs.unsynced() == ["widgets.example.com"]
        assert any("NotFound" in e for e in infs[unknown].stats.errors)


def test_stop_returns_promptly_while_watching(apisim: ApiSim, client: KubeClient) -> None:
    informer = Informer(client, r.PODS, backoff=fast(), watch_timeout_seconds=600)
    informer.start()
    assert informer.wait_for_sync(5.0)
    wait_until(lambda: apisim.open_watches(r.PODS) == 1)
    started = time.monotonic()
    informer.stop(timeout=3.0)
    assert not informer.alive
    assert time.monotonic() - started < 1.0


def test_namespace_scoped_informer_sees_only_its_namespace(
    apisim: ApiSim, informers: Callable[..., Informer]
) -> None:
    apisim.create(r.PODS, pod("a", "ml"))
    apisim.create(r.PODS, pod("b", "web"))
    informer = informers(r.PODS, namespace="ml")
    assert informer.wait_for_sync(5.0)
    wait_until(lambda: apisim.open_watches(r.PODS) == 1)
    apisim.create(r.PODS, pod("c", "web"))
    apisim.create(r.PODS, pod("d", "ml"))
    wait_until(lambda: "ml/d" in informer.cache.keys(r.PODS))
    assert informer.cache.keys(r.PODS) == {"ml/a", "ml/d"}
    assert apisim.requests(r.PODS, "LIST")[0].url.path == "/api/v1/namespaces/ml/pods"


def test_cache_ignores_replayed_versions_and_unknown_deletes() -> None:
    cache = ObjectCache()
    obj = {"metadata": {"name": "a", "namespace": "ml", "resourceVersion": "5"}}
    assert cache.apply(r.PODS, "ADDED", obj) is not None
    assert cache.apply(r.PODS, "MODIFIED", dict(obj)) is None  # same resourceVersion
    assert cache.apply(r.PODS, "DELETED", {"metadata": {"name": "zz", "namespace": "ml"}}) is None
    assert cache.version == 1
    snap = cache.snapshot()
    cache.apply(r.PODS, "DELETED", obj)
    assert "ml/a" in snap.of(r.PODS) and cache.keys(r.PODS) == set()  # snapshots do not move


def test_backoff_grows_caps_and_resets() -> None:
    b = Backoff(initial=1.0, maximum=5.0, factor=2.0, jitter=0.0)
    assert [b.next() for _ in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    b.reset()
    assert b.next() == 1.0
    jittered = Backoff(initial=1.0, jitter=0.2, rng=lambda: 1.0)
    assert jittered.next() == pytest.approx(1.2)
