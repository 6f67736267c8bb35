"""List-then-watch informers feeding a thread-safe cache of raw objects.

Threads, not asyncio: the scheduling core is a plain synchronous function, the client is blocking
httpx, and there are only about ten long-lived watches, so one thread per resource type costs nothing and
keeps the scheduler loop free of an event loop. A thread blocked in a read is woken by
:meth:`~gpufleet.k8s.client.WatchStream.close`, so :meth:`Informer.stop` returns promptly.

Recovery follows client-go's reflector:

* the stream ends cleanly (the server's ``timeoutSeconds``): watch again from the last resourceVersion,
  no relist, nothing lost;
* ``410 Gone`` (our resourceVersion fell out of the server's window): relist at once;
* anything else (connection broken, 5xx, an ERROR event, a watch that ends instantly with no events):
  wait with exponential backoff, then relist.

A relist replaces the cache contents by diffing against what is cached, so consumers see one change per
object that really changed while we were away, and none for objects that did not.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Self

from gpufleet.k8s.client import KubeClient, WatchEvent, WatchStream
from gpufleet.k8s.errors import ApiConnectionError, Gone, KubeError, TooManyRequests
from gpufleet.k8s.resources import SCHEDULER_RESOURCES, ResourceType

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]
ChangeType = Literal["ADDED", "MODIFIED", "DELETED"]


class Backoff:
    """Exponential backoff with jitter, so many schedulers restarting together do not relist in lockstep."""

    def __init__(
        self,
        initial: float = 0.8,
        maximum: float = 30.0,
        factor: float = 2.0,
        jitter: float = 0.2,
        rng: Callable[[], float] = random.random,
    ) -> None:
        if initial <= 0 or maximum < initial or factor < 1 or not 0 <= jitter < 1:
            raise ValueError("need 0 < initial <= maximum, factor >= 1, 0 <= jitter < 1")
        self.initial, self.maximum, self.factor, self.jitter = initial, maximum, factor, jitter
        self._rng = rng
        self._next = initial

    def next(self) -> float:
        base = self._next
        self._next = min(self.maximum, self._next * self.factor)
        return base * (1 - self.jitter + 2 * self.jitter * self._rng())

    def reset(self) -> None:
        self._next = self.initial


@dataclass(frozen=True, slots=True)
class CacheChange:
    resource: str  # ResourceType.key
    type: ChangeType
    key: str
    old: JsonDict | None
    new: JsonDict | None
    version: int  # the cache version this change produced


@dataclass(frozen=True, slots=True)
class CacheSnapshot:
    version: int
    objects: Mapping[str, Mapping[str, JsonDict]]  # resource key -> object key -> object

    def of(self, resource: ResourceType) -> Mapping[str, JsonDict]:
        return self.objects.get(resource.key, {})


def _same(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    old_rv = (old.get("metadata") or {}).get("resourceVersion")
    new_rv = (new.get("metadata") or {}).get("resourceVersion")
    if old_rv and new_rv:
        return bool(old_rv == new_rv)
    return old == new


class ObjectCache:
    """Objects by resource type and ``namespace/name``, with a version counter bumped on every change.

    Objects are stored as received and replaced whole, never mutated, so a snapshot may share them;
    callers must treat them as read-only.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._objects: dict[str, dict[str, JsonDict]] = {}
        self._version = 0
        self._listeners: list[Callable[[CacheChange], None]] = []

    @property
    def version(self) -> int:
        with self._lock:
            return self._version

    def get(self, resource: ResourceType, key: str) -> JsonDict | None:
        with self._lock:
            return self._objects.get(resource.key, {}).get(key)

    def objects(self, resource: ResourceType) -> list[JsonDict]:
        with self._lock:
            return list(self._objects.get(resource.key, {}).values())

    def keys(self, resource: ResourceType) -> set[str]:
        with self._lock:
            return set(self._objects.get(resource.key, {}))

    def snapshot(self) -> CacheSnapshot:
        """A consistent view across all resource types for one scheduling cycle."""
        with self._lock:
            return CacheSnapshot(self._version, {k: dict(v) for k, v in self._objects.items()})

    def wait_for_change(self, since: int, timeout: float | None = None) -> int:
        """Block until the version exceeds ``since`` (or the timeout passes); returns the version."""
        with self._changed:
            self._changed.wait_for(lambda: self._version > since, timeout)
            return self._version

    def add_listener(self, listener: Callable[[CacheChange], None]) -> Callable[[], None]:
        """Call ``listener`` for each change, in order, on the informer thread (keep it quick).
        Returns a function that removes the listener."""
        with self._lock:
            self._listeners.append(listener)

        def remove() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return remove

    def apply(self, resource: ResourceType, event_type: str, obj: JsonDict) -> CacheChange | None:
        """One watch event. Replays of an already cached resourceVersion are not changes."""
        key = resource.object_key(obj)
        with self._lock:
            bucket = self._objects.setdefault(resource.key, {})
            old = bucket.get(key)
            if event_type == "DELETED":
                if old is None:
                    return None
                del bucket[key]
                return self._emit(resource, "DELETED", key, old, None)
            if old is not None and _same(old, obj):
                return None
            bucket[key] = obj
            return self._emit(resource, "ADDED" if old is None else "MODIFIED", key, old, obj)

    def replace(self, resource: ResourceType, objects: Iterable[JsonDict]) -> list[CacheChange]:
        """A full list: the cache for ``resource`` becomes exactly ``objects``."""
        fresh = {resource.object_key(o): o for o in objects}
        changes: list[CacheChange] = []
        with self._lock:
            bucket = self._objects.setdefault(resource.key, {})
            for key in sorted(set(bucket) - set(fresh)):
                gone = bucket.pop(key)
                changes.append(self._emit(resource, "DELETED", key, gone, None))
            for key, obj in fresh.items():
                old = bucket.get(key)
                if old is not None and _same(old, obj):
                    continue
                bucket[key] = obj
                changes.append(self._emit(resource, "ADDED" if old is None else "MODIFIED", key, old, obj))
        return changes

    def _emit(
        self, resource: ResourceType, kind: ChangeType, key: str, old: JsonDict | None, new: JsonDict | None
    ) -> CacheChange:
        # Called with the lock held: listeners see changes in exactly the order the cache applied them.
        self._version += 1
        change = CacheChange(resource.key, kind, key, old, new, self._version)
        for listener in list(self._listeners):
            try:
                listener(change)
            except Exception:
                log.exception("cache listener failed on %s %s %s", kind, resource.key, key)
        self._changed.notify_all()
        return change


@dataclass(slots=True)
class InformerStats:
    lists: int = 0
    watches: int = 0
    events: int = 0
    bookmarks: int = 0
    relists_gone: int = 0  # relists caused by 410 Gone
    relists_error: int = 0  # relists caused by a broken stream or an error
    errors: list[str] = field(default_factory=list)  # the last few, newest last

    def note_error(self, error: BaseException) -> None:
        self.errors.append(f"{type(error).__name__}: {error}")
        del self.errors[:-10]


class Informer:
    """Keeps one resource type of ``cache`` equal to the server's state."""

    def __init__(
        self,
        client: KubeClient,
        resource: ResourceType,
        cache: ObjectCache | None = None,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        watch_timeout_seconds: int = 300,
        min_watch_seconds: float = 1.0,
        backoff: Backoff | None = None,
    ) -> None:
        if namespace is not None and not resource.namespaced:
            raise ValueError(f"{resource.key} is cluster-scoped; an informer for it cannot take a namespace")
        self.client = client
        self.resource = resource
        self.cache = cache if cache is not None else ObjectCache()
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.page_size = page_size
        self.watch_timeout_seconds = watch_timeout_seconds
        self.min_watch_seconds = min_watch_seconds
        self.backoff = backoff or Backoff()
        self.stats = InformerStats()
        self._resource_version: str | None = None
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._stream_lock = threading.Lock()
        self._stream: WatchStream | None = None
        self._thread: threading.Thread | None = None

    @property
    def resource_version(self) -> str | None:
        """Where the next watch resumes: the last list's, event's or bookmark's resourceVersion."""
        return self._resource_version

    @property
    def synced(self) -> bool:
        """True once the first list landed in the cache (it stays true through later relists)."""
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("an informer starts once")
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.resource.key}", daemon=True)
        self._thread.start()

    def request_stop(self) -> None:
        """Ask the thread to end and wake it; returns without waiting."""
        self._stop.set()
        with self._stream_lock:
            stream = self._stream
        if stream is not None:
            stream.close()

    def stop(self, timeout: float = 5.0) -> None:
        self.request_stop()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # --- the loop -------------------------------------------------------------------------------------

    def _run(self) -> None:
        need_list = True
        while not self._stop.is_set():
            phase = "list"
            try:
                if need_list:
                    self._list()
                    need_list = False
                phase = "watch"
                self._watch()
            except Gone as e:
                need_list = True
                self.stats.note_error(e)
                if phase == "watch":
                    # The remedy for an expired resourceVersion is a relist, so do it at once.
                    self.stats.relists_gone += 1
                    log.info("%s: watch from %s expired (410), relisting", self.resource.key,
                             self._resource_version)
                    continue
                self._sleep(self.backoff.next())  # a list page expired: back off before listing again
            except KubeError as e:
                if self._stop.is_set():
                    break
                if phase == "watch":
                    self.stats.relists_error += 1
                need_list = True
                self.stats.note_error(e)
                delay = e.retry_after if isinstance(e, TooManyRequests) and e.retry_after else self.backoff.next()
                log.warning("%s: %s failed (%s), relisting in %.1fs", self.resource.key, phase, e, delay)
                self._sleep(delay)
            except Exception as e:  # a bug must not kill the thread and freeze the cache silently
                if self._stop.is_set():
                    break
                need_list = True
                self.stats.note_error(e)
                log.exception("%s: unexpected error, relisting", self.resource.key)
                self._sleep(self.backoff.next())

    def _sleep(self, seconds: float) -> None:
        self._stop.wait(seconds)

    def _list(self) -> None:
        result = self.client.list_all(self.resource, self.namespace, label_selector=self.label_selector,
                                      field_selector=self.field_selector, page_size=self.page_size)
        self.stats.lists += 1
        self.cache.replace(self.resource, result.items)
        self._resource_version = result.resource_version or None
        self._synced.set()

    def _watch(self) -> None:
        # Spread reconnects like client-go: between 1x and 2x the configured timeout.
        timeout = int(self.watch_timeout_seconds * (1 + random.random()))
        started = time.monotonic()
        stream = self.client.watch(
            self.resource, self.namespace, resource_version=self._resource_version, allow_bookmarks=True,
            timeout_seconds=timeout, label_selector=self.label_selector, field_selector=self.field_selector,
        )
        self.stats.watches += 1
        with self._stream_lock:
            self._stream = stream
        if self._stop.is_set():  # stop() ran while the request was in flight and saw no stream
            stream.close()
        try:
            for event in stream:
                self._handle(event)
        finally:
            with self._stream_lock:
                self._stream = None
            stream.close()
        if self._stop.is_set():
            return
        lasted = time.monotonic() - started
        if stream.events_seen or lasted >= self.min_watch_seconds:
            self.backoff.reset()
            return
        # client-go's "very short watch": a server closing every watch at once would otherwise be
        # re-watched in a hot loop.
        raise ApiConnectionError(f"watch closed after {lasted:.2f}s with no events")

    def _handle(self, event: WatchEvent) -> None:
        if event.type == "BOOKMARK":
            self.stats.bookmarks += 1
        elif event.type in ("ADDED", "MODIFIED", "DELETED"):
            self.stats.events += 1
            self.cache.apply(self.resource, event.type, event.object)
        else:
            log.warning("%s: ignoring watch event of type %r", self.resource.key, event.type)
            return
        rv = event.resource_version
        if rv:
            self._resource_version = rv


class InformerSet:
    """Informers for several resource types sharing one cache: what a scheduler loop reads from."""

    def __init__(
        self,
        client: KubeClient,
        resources: Iterable[ResourceType] = SCHEDULER_RESOURCES,
        *,
        cache: ObjectCache | None = None,
        **informer_options: Any,
    ) -> None:
        self.cache = cache if cache is not None else ObjectCache()
        self.informers: dict[str, Informer] = {}
        for resource in resources:
            if resource.key in self.informers:
                # Two informers replacing the same bucket on relist would delete each other's objects.
                raise ValueError(f"{resource.key} listed twice")
            self.informers[resource.key] = Informer(client, resource, self.cache, **informer_options)

    def __iter__(self) -> Iterator[Informer]:
        return iter(self.informers.values())

    def __getitem__(self, resource: ResourceType) -> Informer:
        return self.informers[resource.key]

    def start(self) -> None:
        for informer in self:
            informer.start()

    def stop(self, timeout: float = 5.0) -> None:
        for informer in self:  # wake every thread first, then wait, so shutdown takes one timeout
            informer.request_stop()
        deadline = time.monotonic() + timeout
        for informer in self:
            informer.stop(max(0.0, deadline - time.monotonic()))

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        for informer in self:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not informer.wait_for_sync(left):
                return False
        return True

    @property
    def synced(self) -> bool:
        return all(informer.synced for informer in self)

    def unsynced(self) -> list[str]:
        """Resource types not listed yet, for a /readyz message (a missing CRD shows up here)."""
        return [key for key, informer in self.informers.items() if not informer.synced]

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
