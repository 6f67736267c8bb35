"""Test support: kmock served over real HTTP from a background thread, and API-server semantics on top.

Why a background thread: gpufleet's kube layer is blocking (httpx, threads), so the mock server needs an
event loop of its own; every interaction with kmock's objects goes through that loop (:meth:`KmockThread.call`).

Why :class:`ApiSim` and not just ``kmock.KubernetesEmulator``: the emulator keeps objects but has no
resourceVersions (lists report ``"..."``), replays every object as ADDED on each watch whatever
resourceVersion is asked, sends no bookmarks, never answers 410, has no PUT and so no optimistic
concurrency, and answers 404 for subresources such as ``pods/binding``. Those are exactly the behaviours an
informer and a leader elector depend on, so ApiSim implements them as kmock reactions (kmock's documented
extension point) over a kmock ``KubernetesScaffold``; the requests still land in kmock's request log for
assertions, and tests still inject faults with kmock's own DSL at a higher priority than ApiSim.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp.web
import kmock
from kmock._internal import parsing as _kmock_parsing

from gpufleet.k8s.resources import ResourceType

# aiohttp logs every request kmock serves at INFO; a server thread still answering after its test ended then writes
# to a stream pytest has closed ("--- Logging error ---" in CI's output). Requests are asserted on, not logged.
logging.getLogger("aiohttp.access").setLevel(logging.WARNING)

T = TypeVar("T")
JsonDict = dict[str, Any]


_original_parse_path = _kmock_parsing.parse_path


def parse_path_with_namespaces(path: str) -> _kmock_parsing.ParsedPath:
    """kmock 0.8 reads ``/namespaces/`` as a namespace scope only: ``/api/v1/namespaces`` (the Namespace
    collection) crashes its parser (500) and ``/api/v1/namespaces/x`` parses as "no resource". Installed
    by the fixtures in place of ``kmock._internal.parsing.parse_path`` (looked up at call time)."""
    parts = path.strip("/").split("/")
    if parts[:3] == ["api", "v1", "namespaces"] and len(parts) <= 5 and (len(parts) < 5 or parts[4] in (
            "status", "finalize")):
        name = parts[3] if len(parts) > 3 else None
        sub = parts[4] if len(parts) > 4 else None
        return _kmock_parsing.ParsedPath("", "v1", "namespaces", None, name, sub)
    return _original_parse_path(path)


class DirectWrites(kmock.KubernetesScaffold):  # type: ignore[misc]
    """kmock's scaffold, but the writes of a scheduling burst (``POST`` of a pod's Binding, ``POST`` creating an
    object: Events) go straight to the :class:`ApiSim` that serves their resource, past kmock's request log and
    reaction matching. For benchmarks only: a request served so is neither recorded nor open to the faults a test
    injects with kmock's DSL; with the plain scaffold, every request goes through kmock.

    Why: kmock parses each request into its own model and tries it against every reaction by priority, each
    filter check a runtime ``Protocol`` isinstance; profiled in bench/kube_binding.py at 5,000 nodes, that was
    most of the emulator's CPU per Binding, which a real API server does not spend (its routing is a table
    look-up). What the Binding does is ApiSim's as before: validated, refused when the pod is bound already or is
    another pod by its UID, written with one resourceVersion and sent to every watch."""

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        sim: ApiSim | None = getattr(self, "direct_sim", None)
        if sim is not None and raw_request.method == "POST":
            target = sim.direct_target(raw_request.path)
            if target is not None:
                return await sim.serve_direct(target, raw_request)
        return await super().__call__(raw_request)


class KmockThread:
    """A kmock handler and its HTTP server on 127.0.0.1 (random port), run by a private event loop."""

    def __init__(self, handler_factory: Callable[[], kmock.RawHandler]) -> None:
        self._factory = handler_factory
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="kmock", daemon=True)
        self.handler: kmock.RawHandler
        self.server: kmock.Server

    def start(self) -> None:
        self._thread.start()

        async def enter() -> tuple[kmock.RawHandler, kmock.Server]:
            handler = self._factory()
            await handler.__aenter__()
            server = kmock.Server(handler, host="127.0.0.1")
            await server.__aenter__()
            return handler, server

        self.handler, self.server = self.run(enter())

    @property
    def url(self) -> str:
        return str(self.server.url).rstrip("/")

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 10.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn: Callable[[], T], timeout: float = 10.0) -> T:
        """Run ``fn`` on the loop thread: kmock's DSL and state are not thread-safe."""

        async def wrapper() -> T:
            return fn()

        return self.run(wrapper(), timeout)

    def stop(self) -> None:
        async def leave() -> None:
            await self.server.__aexit__(None, None, None)
            await self.handler.__aexit__(None, None, None)

        try:
            self.run(leave(), timeout=15.0)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(5.0)
            self.loop.close()


def status(code: int, reason: str, message: str) -> JsonDict:
    return {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
            "code": code, "reason": reason, "message": message}


class Failure(kmock.KubernetesError):
    """An error answer from ApiSim. Raised, never returned as ``kmock.Response``: kmock 0.8 copies the status
    of a Response returned by a callback onto the reaction itself, so every later answer of that reaction
    would carry the same error status (pinned in test_kmock_limits)."""


def failure(code: int, reason: str, message: str) -> Failure:
    return Failure(status=code, reason=reason, message=message, details={"causes": []})


def json_copy(value: Any) -> Any:
    """A deep copy of JSON data (dicts, lists, scalars), four times faster than ``copy.deepcopy``."""
    if type(value) is dict:
        return {k: json_copy(v) for k, v in value.items()}
    if type(value) is list:
        return [json_copy(v) for v in value]
    return value


def _merge_patch(target: Any, patch: Any) -> Any:
    # RFC 7386; for the maps a scheduler patches (annotations, labels, status) strategic merge is identical, but for
    # a status's conditions, which strategic merge merges by type (the kubelet's Ready stays beside the scheduler's).
    if not isinstance(patch, dict):
        return json_copy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif key == "conditions" and isinstance(value, list) and isinstance(out.get(key), list):
            merged = {c.get("type"): c for c in out[key] if isinstance(c, dict)}
            merged.update({c.get("type"): json_copy(c) for c in value if isinstance(c, dict)})
            out[key] = list(merged.values())
        else:
            out[key] = _merge_patch(out.get(key), value)
    return out


@dataclass
class _Watcher:
    resource: str
    namespace: str | None
    bookmarks: bool
    request: kmock.Request
    queue: asyncio.Queue[tuple[str, Any]] = field(default_factory=asyncio.Queue)


class ApiSim:
    """resourceVersions, list+watch with replay from a resourceVersion, bookmarks, 410 after compaction,
    PUT with optimistic concurrency, status subresources, pods/binding, and pods/eviction with PodDisruptionBudget
    refusals (:meth:`protect`) — for the resource types it serves.

    Mutating methods are called from the test thread and run atomically on the loop thread.
    """

    def __init__(self, harness: KmockThread, *, record_requests: bool = True) -> None:
        self.harness = harness
        self.kmock = harness.handler
        # kmock matches each request against its whole request log (quadratic over a run): a benchmark of
        # thousands of requests turns recording off, which drops the log as each request is dispatched.
        self.record_requests = record_requests
        self.rv = 100
        self.types: dict[str, ResourceType] = {}
        self.objects: dict[str, dict[tuple[str | None, str], JsonDict]] = {}
        self.history: dict[str, list[tuple[int, str, JsonDict]]] = {}
        self.compacted: dict[str, int] = {}
        self.watchers: list[_Watcher] = []
        self.closed = False
        # Pods a PodDisruptionBudget protects: their eviction is refused with 429, dry run or not.
        self.disruption_protected: set[tuple[str | None, str]] = set()
        # While set and not open: eviction requests wait for it (an API server slow to answer them)
        self.eviction_gate: asyncio.Event | None = None
        self.evictions_waiting = 0
        # (group, version, plural) -> the type served there, for the writes DirectWrites hands over.
        self._by_path: dict[tuple[str, str, str], ResourceType] = {}
        if isinstance(self.kmock, DirectWrites):
            self.kmock.direct_sim = self

    @property
    def url(self) -> str:
        return self.harness.url

    # --- setup ----------------------------------------------------------------------------------------

    def serve(self, *resources: ResourceType) -> None:
        def register() -> None:
            for res in resources:
                self.types[res.key] = res
                self._by_path[(res.group, res.version, res.plural)] = res
                self.objects.setdefault(res.key, {})
                self.history.setdefault(res.key, [])
                self.compacted.setdefault(res.key, 0)
                selector = kmock.resource(res.group, res.version, res.plural)
                # Declared so that discovery (/apis/GROUP/VERSION) names the kind and scope as a real server.
                self.kmock.resources[f"{res.group}/{res.version}/{res.plural}"] = kmock.ResourceInfo(
                    kind=res.kind, namespaced=res.namespaced, verbs=["get", "list", "watch"])
                # Priority -1: below any reaction a test adds to inject faults, above kmock's 404 fallbacks.
                (self.kmock ** -1)[selector] << self._dispatcher(res)

        self.harness.call(register)

    # --- test-side operations (thread-safe) --------------------------------------------------------------

    def create(self, res: ResourceType, obj: JsonDict) -> JsonDict:
        return self.harness.call(lambda: self._create(res, json_copy(obj), None))

    def modify(self, res: ResourceType, namespace: str | None, name: str, patch: JsonDict) -> JsonDict:
        return self.harness.call(lambda: self._patch(res, namespace, name, patch))

    def delete(self, res: ResourceType, namespace: str | None, name: str) -> JsonDict:
        return self.harness.call(lambda: self._delete(res, namespace, name))

    def get(self, res: ResourceType, namespace: str | None, name: str) -> JsonDict | None:
        return self.harness.call(lambda: json_copy(self.objects[res.key].get((namespace, name))))

    def atomically(self, fn: Callable[[ApiSim], T]) -> T:
        """Run several operations with no HTTP request served in between."""
        return self.harness.call(lambda: fn(self))

    def bookmark(self, res: ResourceType) -> int:
        return self.harness.call(lambda: self._bookmark(res))

    def end_watches(self, res: ResourceType | None = None) -> int:
        """End streams cleanly, as the server does when timeoutSeconds elapses."""
        return self.harness.call(lambda: self._signal(res, "end", None))

    def drop_watches(self, res: ResourceType | None = None) -> int:
        """Abort the TCP connections of open watches mid-stream (a broken stream, not a clean end)."""
        return self.harness.call(lambda: self._drop(res))

    def compact(self, res: ResourceType) -> int:
        """Forget history up to now: a watch from an older resourceVersion gets 410 Gone."""
        return self.harness.call(lambda: self._compact(res))

    def protect(self, namespace: str, name: str, protected: bool = True) -> None:
        """Make a PodDisruptionBudget forbid (or again allow) evicting this pod."""
        key = (namespace, name)
        self.harness.call(lambda: self.disruption_protected.add(key) if protected
                          else self.disruption_protected.discard(key))

    def hold_evictions(self) -> None:
        """Eviction requests wait, unanswered, until :meth:`release_evictions`."""
        def hold() -> None:
            self.eviction_gate = asyncio.Event()
        self.harness.call(hold)

    def release_evictions(self) -> None:
        def release() -> None:
            if self.eviction_gate is not None:
                self.eviction_gate.set()
            self.eviction_gate = None
        self.harness.call(release)

    def waiting_evictions(self) -> int:
        """Eviction requests waiting at the gate now."""
        return self.harness.call(lambda: self.evictions_waiting)

    def open_watches(self, res: ResourceType) -> int:
        return self.harness.call(lambda: sum(1 for w in self.watchers if w.resource == res.key))

    def requests(self, res: ResourceType, action: kmock.action | str) -> list[kmock.Request]:
        """The requests kmock recorded for one resource type and action (LIST, WATCH, CREATE, ...)."""
        view = self.kmock[kmock.resource(res.group, res.version, res.plural)]
        return self.harness.call(lambda: [r for r in view if r.action == kmock.action(action)])

    def writes(self, res: ResourceType, method: str, subresource: str | None = None) -> list[kmock.Request]:
        view = self.kmock[kmock.resource(res.group, res.version, res.plural)]
        return self.harness.call(lambda: [r for r in view
                                          if str(r.method.value) == method and r.subresource == subresource])

    def close(self) -> None:
        def shut() -> None:
            self.closed = True
            self._signal(None, "end", None)

        self.harness.call(shut)

    # --- state machine (loop thread only) ------------------------------------------------------------------

    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def _record(self, res: ResourceType, kind: str, obj: JsonDict) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        # One copy for the history and every watcher: neither changes it (a replay copies it again, a watch
        # only serializes it); copying per watcher was most of the emulator's CPU under many writes.
        snapshot = json_copy(obj)
        self.history[res.key].append((rv, kind, snapshot))
        for w in self.watchers:
            if w.resource == res.key and (w.namespace is None or w.namespace == obj["metadata"].get("namespace")):
                w.queue.put_nowait(("event", {"type": kind, "object": snapshot}))

    def _create(self, res: ResourceType, obj: JsonDict, namespace: str | None) -> JsonDict:
        meta = obj.setdefault("metadata", {})
        ns = (namespace or meta.get("namespace") or "default") if res.namespaced else None
        name = meta.get("name")
        if not name:
            raise ValueError("no name")
        if (ns, name) in self.objects[res.key]:
            raise KeyError("exists")
        if ns is not None:
            meta["namespace"] = ns
        meta["uid"] = str(uuid.uuid4())
        meta["resourceVersion"] = self._next_rv()
        meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        obj.setdefault("apiVersion", res.api_version)
        obj.setdefault("kind", res.kind)
        self.objects[res.key][(ns, name)] = obj
        self._record(res, "ADDED", obj)
        return json_copy(obj)

    def _patch(self, res: ResourceType, namespace: str | None, name: str, patch: JsonDict) -> JsonDict:
        return json_copy(self._patched(res, namespace, name, patch))

    def _patched(self, res: ResourceType, namespace: str | None, name: str, patch: JsonDict) -> JsonDict:
        """The stored object after the patch, not a copy: for callers that answer something else (a Binding)."""
        old = self.objects[res.key][(namespace, name)]
        new = _merge_patch(old, patch)
        new["metadata"]["resourceVersion"] = self._next_rv()
        self.objects[res.key][(namespace, name)] = new
        self._record(res, "MODIFIED", new)
        return new

    def _replace(self, res: ResourceType, namespace: str | None, name: str, body: JsonDict,
                 subresource: str | None) -> JsonDict:
        old = self.objects[res.key][(namespace, name)]
        new = json_copy(old)
        if subresource == "status":
            new["status"] = json_copy(body.get("status"))
        else:
            new = json_copy(body)
            new.setdefault("metadata", {})
            for keep in ("uid", "creationTimestamp", "namespace"):
                if keep in old["metadata"]:
                    new["metadata"][keep] = old["metadata"][keep]
            if "status" in old:
                new["status"] = old["status"]  # the main resource ignores status, as with a status subresource
        new["metadata"]["resourceVersion"] = self._next_rv()
        self.objects[res.key][(namespace, name)] = new
        self._record(res, "MODIFIED", new)
        return json_copy(new)

    def _delete(self, res: ResourceType, namespace: str | None, name: str) -> JsonDict:
        obj = self.objects[res.key].pop((namespace, name))
        obj = json_copy(obj)
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self._record(res, "DELETED", obj)
        return obj

    def _bookmark(self, res: ResourceType) -> int:
        rv = self._next_rv()  # bookmarks may carry a version no object has (other types moved the clock)
        n = 0
        for w in self.watchers:
            if w.resource == res.key and w.bookmarks:
                w.queue.put_nowait(("bookmark", rv))
                n += 1
        return n

    def _signal(self, res: ResourceType | None, kind: str, payload: Any) -> int:
        targets = [w for w in self.watchers if res is None or w.resource == res.key]
        for w in targets:
            w.queue.put_nowait((kind, payload))
        return len(targets)

    def _drop(self, res: ResourceType | None) -> int:
        targets = [w for w in self.watchers if res is None or w.resource == res.key]
        for w in targets:
            self.watchers.remove(w)  # nothing more reaches this watcher, even what is queued
            raw = w.request._raw_request
            if raw is not None and raw.transport is not None:
                raw.transport.abort()
            w.queue.put_nowait(("gone", None))
        return len(targets)

    def _compact(self, res: ResourceType) -> int:
        self.compacted[res.key] = self.rv
        self.history[res.key] = [h for h in self.history[res.key] if h[0] >= self.rv]
        return self.rv

    # --- HTTP side --------------------------------------------------------------------------------------

    def _dispatcher(self, res: ResourceType) -> Callable[[kmock.Request], Any]:
        async def dispatch(request: kmock.Request) -> Any:
            if not self.record_requests:
                self.kmock._requests.clear()
            ns, sub = request.namespace, request.subresource
            name = request.name or ""
            method = str(request.method.value)
            try:
                if method == "GET" and request.params.get("watch") in ("true", "1"):
                    return self._watch(res, request)
                if method == "GET" and not name:
                    return self._list(res, ns, request)
                if method == "GET":
                    obj = self.objects[res.key].get((ns, name))
                    if obj is None:
                        raise failure(404, "NotFound", f"{res.plural} {name!r} not found")
                    return json_copy(obj)
                if method == "POST" and not name:
                    try:
                        return self._create(res, dict(request.data), ns)  # 200, not 201: see Failure
                    except KeyError:
                        raise failure(409, "AlreadyExists", f"{res.plural} already exists") from None
                if method == "POST" and sub == "binding":
                    return self._bind(res, ns, name, request.data)
                if method == "POST" and sub == "eviction":
                    if (gate := self.eviction_gate) is not None:
                        self.evictions_waiting += 1
                        try:
                            await gate.wait()
                        finally:
                            self.evictions_waiting -= 1
                    return self._evict(res, ns, name, request.data)
                if (ns, name) not in self.objects[res.key]:
                    raise failure(404, "NotFound", f"{res.plural} {name!r} not found")
                if method in ("PUT", "PATCH"):
                    # A resourceVersion in the body is a precondition, for a merge patch as for a replace.
                    meta = request.data.get("metadata") if isinstance(request.data, dict) else None
                    sent = meta.get("resourceVersion") if isinstance(meta, dict) else None
                    current = self.objects[res.key][(ns, name)]["metadata"]["resourceVersion"]
                    if sent and sent != current:
                        raise failure(409, "Conflict", "the object has been modified; please apply your "
                                                        "changes to the latest version and try again")
                if method == "PUT":
                    return self._replace(res, ns, name, request.data, sub)
                if method == "PATCH":
                    return self._patch(res, ns, name, request.data)
                if method == "DELETE":
                    return self._delete(res, ns, name)
            except kmock.KubernetesError:
                raise
            except Exception as e:  # a bug in the simulator must be visible in the test, not a hang
                raise failure(500, "SimulatorBug", repr(e)) from e
            raise failure(405, "MethodNotAllowed", f"{method} {request.url}")

        return dispatch

    def direct_target(self, path: str) -> tuple[ResourceType, str | None, str | None, str | None] | None:
        """The resource, namespace, name and subresource of a write :class:`DirectWrites` hands over: a pod's
        Binding, or a create of a type served here; None for every other path (kmock serves it)."""
        parts = path.strip("/").split("/")
        if parts[0] == "api" and len(parts) >= 3:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis" and len(parts) >= 4:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        ns: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            ns, rest = rest[1], rest[2:]
        res = self._by_path.get((group, version, rest[0]))
        if res is None or res.namespaced != (ns is not None):
            return None
        if len(rest) == 1:
            return res, ns, None, None
        if len(rest) == 3 and res.key == "pods" and rest[2] == "binding":
            return res, ns, rest[1], "binding"
        return None

    async def serve_direct(self, target: tuple[ResourceType, str | None, str | None, str | None],
                           raw: aiohttp.web.BaseRequest) -> aiohttp.web.Response:
        """Answer a write :meth:`direct_target` named, as :meth:`_dispatcher` would (201 for a create, as a real
        API server; the kmock path answers 200, see Failure)."""
        res, ns, name, sub = target
        try:
            try:
                body = json.loads(await raw.read())
            except ValueError:
                raise failure(400, "BadRequest", "the body is not JSON") from None
            if sub == "binding":
                out = self._bind(res, ns, name or "", body)
            else:
                try:
                    out = self._create(res, dict(body), ns)
                except KeyError:
                    raise failure(409, "AlreadyExists", f"{res.plural} already exists") from None
            return aiohttp.web.json_response(out, status=201)
        except kmock.KubernetesError as e:
            return aiohttp.web.json_response(status(e.status, e.reason or "", e.message or ""), status=e.status)
        except Exception as e:  # a bug in the simulator must be visible, not a hang
            return aiohttp.web.json_response(status(500, "SimulatorBug", repr(e)), status=500)

    def _list(self, res: ResourceType, ns: str | None, request: kmock.Request) -> JsonDict:
        chosen = [o for (ons, _), o in sorted(self.objects[res.key].items(), key=lambda kv: str(kv[0]))
                  if ns is None or ons == ns]
        limit = int(request.params.get("limit") or 0)
        start = int(request.params.get("continue") or 0)
        meta: JsonDict = {"resourceVersion": str(self.rv)}
        if limit and start + limit < len(chosen):
            meta["continue"] = str(start + limit)
        # Only the page's objects are copied: copying all of them for each page made a paged list of N objects
        # cost N²/limit copies (20,000 pods in pages of 500: 800,000), where a real server reads just the page.
        page = [json_copy(o) for o in (chosen[start:start + limit] if limit else chosen)]
        for item in page:  # like the real server: items carry no kind/apiVersion
            item.pop("kind", None)
            item.pop("apiVersion", None)
        return {"apiVersion": res.api_version, "kind": f"{res.kind}List", "metadata": meta, "items": page}

    def _bind(self, res: ResourceType, ns: str | None, name: str, body: JsonDict) -> Any:
        pod = self.objects[res.key].get((ns, name))
        if pod is None:
            raise failure(404, "NotFound", f"pods {name!r} not found")
        uid = (body.get("metadata") or {}).get("uid")
        if uid and uid != pod["metadata"]["uid"]:
            raise failure(409, "Conflict", "Precondition failed: UID in precondition")
        if (pod.get("spec") or {}).get("nodeName"):
            raise failure(409, "Conflict", f"pod {name} is already assigned to node {pod['spec']['nodeName']!r}")
        # As BindingREST.setPodHostAndAnnotations: the Binding's annotations are merged onto the pod in the
        # same update that sets spec.nodeName.
        notes = (body.get("metadata") or {}).get("annotations") or {}
        self._patched(res, ns, name, {"metadata": {"annotations": dict(notes)},
                                      "spec": {"nodeName": body["target"]["name"]}})
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def _evict(self, res: ResourceType, ns: str | None, name: str, body: JsonDict) -> Any:
        # The Eviction API: a PodDisruptionBudget that would be violated gives 429 (also in dry run, which
        # checks everything and deletes nothing); otherwise the pod is deleted (no kubelet here to wait for).
        pod = self.objects[res.key].get((ns, name))
        if pod is None:
            raise failure(404, "NotFound", f"pods {name!r} not found")
        options = body.get("deleteOptions") or {}
        uid = (options.get("preconditions") or {}).get("uid")
        if uid and uid != pod["metadata"]["uid"]:
            raise failure(409, "Conflict", "Precondition failed: UID in precondition")
        if (ns, name) in self.disruption_protected:
            raise failure(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.")
        if "All" not in (options.get("dryRun") or []):
            self._delete(res, ns, name)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def _watch(self, res: ResourceType, request: kmock.Request) -> AsyncIterator[Any]:
        # Returning the generator (not awaiting it) makes kmock stream it as chunked JSON lines.
        rv_param = request.params.get("resourceVersion") or ""
        timeout = float(request.params.get("timeoutSeconds") or 3600)
        ns = request.namespace

        async def stream() -> AsyncIterator[Any]:
            yield b""  # send the headers now, as the API server does, even before any event
            if rv_param and rv_param != "0" and int(rv_param) < self.compacted[res.key]:
                yield {"type": "ERROR", "object": status(410, "Expired",
                                                          f"too old resource version: {rv_param} ({self.rv})")}
                return
            if not rv_param or rv_param == "0":
                replay = [{"type": "ADDED", "object": json_copy(o)}
                          for (ons, _), o in self.objects[res.key].items() if ns is None or ons == ns]
            else:
                replay = [{"type": kind, "object": json_copy(obj)} for rv, kind, obj in self.history[res.key]
                          if rv > int(rv_param) and (ns is None or obj["metadata"].get("namespace") == ns)]
            watcher = _Watcher(res.key, ns, request.params.get("allowWatchBookmarks") == "true", request)
            if self.closed:
                return
            self.watchers.append(watcher)  # same loop step as the replay snapshot: nothing slips between
            try:
                for event in replay:
                    yield event
                deadline = asyncio.get_running_loop().time() + timeout
                while True:
                    left = deadline - asyncio.get_running_loop().time()
                    try:
                        kind, payload = await asyncio.wait_for(watcher.queue.get(), max(left, 0))
                    except TimeoutError:
                        return
                    if kind == "event":
                        yield payload
                    elif kind == "bookmark":
                        yield {"type": "BOOKMARK", "object": {"apiVersion": res.api_version, "kind": res.kind,
                                                              "metadata": {"resourceVersion": payload}}}
                    elif kind == "error":
                        yield {"type": "ERROR", "object": payload}
                        return
                    else:  # "end" or "gone"
                        return
            finally:
                if watcher in self.watchers:
                    self.watchers.remove(watcher)

        return stream()


@contextmanager
def serving(handler: Callable[[], kmock.RawHandler], *resources: ResourceType) -> Iterator[ApiSim]:
    """An ApiSim serving ``resources`` on a kmock handler of its own (``handler``), in a background loop."""
    harness = KmockThread(handler)
    harness.start()
    sim = ApiSim(harness)
    sim.serve(*resources)
    try:
        yield sim
    finally:
        sim.close()
        harness.stop()
