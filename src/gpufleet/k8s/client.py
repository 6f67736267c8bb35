"""A small, typed Kubernetes API client on httpx, for the verbs a scheduler needs.

Objects travel as raw JSON dicts: the scheduling core reads a few fields of each, and decoding whole
typed models for tens of thousands of pods would cost more than the scheduling itself.

Thread-safe: one :class:`KubeClient` (its keep-alive connections) is shared by all informer threads, the
leader elector and the writers. Watches stream through httpx; every other call goes on a keep-alive
http.client connection of the calling thread's own (:mod:`gpufleet.k8s.direct`; CPU per call in bench/README.md,
"kube_client_calls"). :meth:`KubeClient.limited` gives a view whose calls are rate-limited by a token bucket
(:mod:`gpufleet.k8s.ratelimit`).
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import json
import socket
import ssl
import threading
import time
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote, urlencode

import httpx

from gpufleet import __version__
from gpufleet.k8s.config import ClusterConfig, TokenSource
from gpufleet.k8s.direct import NODELAY, DirectCalls
from gpufleet.k8s.errors import ApiConnectionError, ApiError, ConfigError, error_from_status
from gpufleet.k8s.ratelimit import TokenBucket
from gpufleet.k8s.resources import EVENTS, PODS, ResourceType

JsonDict = dict[str, Any]


class PatchType(StrEnum):
    """The Content-Type of a PATCH body, which selects how the server merges it."""

    MERGE = "application/merge-patch+json"  # RFC 7386: lists replaced whole, null deletes a key
    STRATEGIC = "application/strategic-merge-patch+json"  # built-in kinds only: lists merged by key
    JSON = "application/json-patch+json"  # RFC 6902 operations, e.g. a "test" op as a precondition


@dataclass(frozen=True, slots=True)
class ObjectList:
    items: list[JsonDict]
    resource_version: str  # where a watch continues from without missing anything
    continue_token: str | None = None


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK (ERROR events are raised, never yielded)
    object: JsonDict

    @property
    def resource_version(self) -> str | None:
        rv = (self.object.get("metadata") or {}).get("resourceVersion")
        return str(rv) if rv else None


class WatchStream:
    """The events of one watch request. Iterate it; :meth:`close` from any thread ends the iteration.

    Raises :class:`~gpufleet.k8s.errors.Gone` for an ERROR event with code 410 (or any other ERROR as
    its typed :class:`~gpufleet.k8s.errors.ApiError`), and :class:`ApiConnectionError` when the
    connection breaks mid-stream. A server-side end (``timeoutSeconds`` elapsed) just stops iteration.
    """

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self._lines = response.iter_lines()
        self._lock = threading.Lock()
        self._closed = False
        self._reading = False
        self.events_seen = 0

    def __iter__(self) -> Iterator[WatchEvent]:
        return self

    def __next__(self) -> WatchEvent:
        with self._lock:
            if self._closed:
                self._response.close()
                raise StopIteration
            self._reading = True
        try:
            while True:
                try:
                    line = next(self._lines)
                except StopIteration:
                    self._response.close()  # clean server-side end: hand the connection back
                    raise
                except (httpx.TransportError, httpx.StreamError) as e:
                    if self._closed:
                        raise StopIteration from None
                    raise ApiConnectionError(f"watch stream broke: {e!r}") from e
                if line.strip():
                    break
            event = self._decode(line)
            self.events_seen += 1
            return event
        finally:
            with self._lock:
                self._reading = False
                if self._closed:
                    self._response.close()

    def _decode(self, line: str) -> WatchEvent:
        try:
            raw = json.loads(line)
        except ValueError as e:
            # A half-written line means the stream was cut; resume logic treats it as a broken stream.
            raise ApiConnectionError(f"undecodable watch line: {line[:200]!r}") from e
        if not isinstance(raw, dict) or not isinstance(raw.get("object"), dict):
            raise ApiConnectionError(f"malformed watch event: {line[:200]!r}")
        kind = str(raw.get("type", ""))
        if kind == "ERROR":
            raise error_from_status(500, raw["object"])
        return WatchEvent(kind, raw["object"])

    def close(self) -> None:
        """End the stream now, even if another thread is blocked reading it."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if not self._reading:
                self._response.close()
                return
        # A reader is blocked in recv(): closing the response from here is not thread-safe in httpcore,
        # so shut the socket down instead; the reader wakes with an error, sees _closed and closes.
        stream = self._response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):  # already gone: the reader is waking up anyway
                sock.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class _TokenAuth(httpx.Auth):
    """Adds the bearer token and, on a 401, asks the source for a fresh one and retries once."""

    def __init__(self, source: TokenSource) -> None:
        self.source = source

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        token = self.source.token()
        if token:
            request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code == 401:
            fresh = self.source.token(refresh=True)
            if fresh and fresh != token:
                request.headers["Authorization"] = f"Bearer {fresh}"
                yield request


def _ssl_context(config: ClusterConfig) -> ssl.SSLContext | bool:
    if not config.host.startswith("https://"):
        return True  # unused for plain http
    try:
        if config.insecure_skip_tls_verify:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        else:
            ctx = ssl.create_default_context(cafile=config.ca_file, cadata=config.ca_data)
        if config.client_cert_file and config.client_key_file:
            ctx.load_cert_chain(config.client_cert_file, config.client_key_file)
    except (OSError, ssl.SSLError) as e:  # a missing file or unparseable PEM: a config problem, say which
        raise ConfigError(f"TLS setup for {config.source} failed: {e}") from e
    return ctx


class KubeClient:
    """Blocking API calls. Errors are the typed exceptions of :mod:`gpufleet.k8s.errors`.

    ``max_connections`` bounds the connections of watches (and of every call through a proxy); other calls hold
    one keep-alive connection per calling thread (:mod:`gpufleet.k8s.direct`)."""

    def __init__(
        self,
        config: ClusterConfig | None = None,
        *,
        host: str | None = None,
        timeout: float = 30.0,
        user_agent: str | None = None,
        max_connections: int = 50,
    ) -> None:
        if config is None:
            if host is None:
                raise ValueError("give a ClusterConfig or a host")
            config = ClusterConfig.for_host(host)
        self.config = config
        self.timeout = timeout
        # tls-server-name: the certificate is verified against the SNI name sent (httpcore for watches, and
        # gpufleet.k8s.direct).
        self._extensions = {"sni_hostname": config.tls_server_name} if config.tls_server_name else {}
        agent = user_agent or f"gpufleet/{__version__}"
        tls = _ssl_context(config)
        self._http = httpx.Client(
            base_url=config.host,
            auth=_TokenAuth(config.auth) if config.auth is not None else None,
            timeout=httpx.Timeout(timeout),
            headers={
                "User-Agent": agent,
                "Accept": "application/json",
            },
            transport=httpx.HTTPTransport(
                retries=1,  # connect failures only: safe for any verb
                verify=tls,
                # Informers hold one connection each for their watches.
                limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
                proxy=config.proxy_url,
                socket_options=NODELAY,
            ),
            trust_env=False,  # a scheduler must not pick up HTTP(S)_PROXY meant for workloads
        )
        # Every call but watches on an http.client connection per calling thread (gpufleet.k8s.direct); through a
        # proxy, httpx.
        self._direct: DirectCalls | None = None if config.proxy_url else DirectCalls(
            config.host, ssl_context=tls if isinstance(tls, ssl.SSLContext) else None, auth=config.auth,
            tls_server_name=config.tls_server_name, timeout=timeout, user_agent=agent)
        self._limiter: TokenBucket | None = None
        self._view = False

    # --- plumbing ---------------------------------------------------------------------------------------

    def close(self) -> None:
        if self._view:
            return  # the connections belong to the client this view was made from
        self._http.close()
        if self._direct is not None:
            self._direct.close()

    def limited(self, limiter: TokenBucket) -> KubeClient:
        """A view of this client whose calls (watches excepted) first take a token from ``limiter``; it shares
        this client's connections, and closing it closes nothing."""
        view = copy.copy(self)
        view._limiter = limiter
        view._view = True
        return view

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int | bool | None] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> Any:
        """One API call; returns the decoded JSON answer. Public for verbs this class does not wrap.

        ``timeout`` overrides the client's for this call (the leader elector must not wait past its
        renew deadline).
        """
        headers = {}
        content: bytes | None = None
        if body is not None:
            content = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        if self._limiter is not None:
            self._limiter.wait()
        if self._direct is not None:
            answer = self._direct.call(method, path, urlencode(_params(params), quote_via=quote), content,
                                       content_type, timeout)
            return _decode_answer(answer.status, answer.content, answer.retry_after)
        try:
            response = self._http.request(
                method, path, params=_params(params), content=content, headers=headers,
                extensions=self._extensions, timeout=httpx.Timeout(timeout) if timeout else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.TransportError as e:
            raise ApiConnectionError(f"{method} {path}: {e!r}") from e
        return _decode(response)

    # --- reads ----------------------------------------------------------------------------------------

    def get(
        self, resource: ResourceType, name: str, namespace: str | None = None, *, timeout: float | None = None
    ) -> JsonDict:
        return _as_dict(self.request("GET", resource.path(namespace, name), timeout=timeout))

    def list(
        self,
        resource: ResourceType,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> ObjectList:
        """One page. ``resource_version=None`` reads the latest state (a quorum read)."""
        raw = _as_dict(self.request("GET", resource.path(namespace), params={
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
            "resourceVersion": resource_version,
            "limit": limit,
            "continue": continue_token,
        }))
        meta = raw.get("metadata") or {}
        items = raw.get("items") or []
        # List items omit kind/apiVersion; put them back so cached objects are self-describing.
        for item in items:
            item.setdefault("apiVersion", resource.api_version)
            item.setdefault("kind", resource.kind)
        return ObjectList(items, str(meta.get("resourceVersion") or ""), meta.get("continue") or None)

    def list_all(
        self,
        resource: ResourceType,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
    ) -> ObjectList:
        """Every page of a consistent snapshot. Gone (410) if the snapshot expires between pages."""
        items: list[JsonDict] = []
        token: str | None = None
        first_rv = ""
        while True:
            page = self.list(resource, namespace, label_selector=label_selector, field_selector=field_selector,
                             limit=page_size, continue_token=token)
            items.extend(page.items)
            # Continuation pages all belong to the first page's snapshot; its RV is the one to watch from.
            first_rv = first_rv or page.resource_version
            token = page.continue_token
            if not token:
                return ObjectList(items, first_rv)

    def watch(
        self,
        resource: ResourceType,
        namespace: str | None = None,
        *,
        resource_version: str | None,
        allow_bookmarks: bool = True,
        timeout_seconds: int = 300,
        label_selector: str | None = None,
        field_selector: str | None = None,
        read_timeout: float | None = None,
    ) -> WatchStream:
        """Open a watch. HTTP errors (410 included) raise here; event errors raise while iterating.

        ``timeout_seconds`` asks the server to end the stream cleanly; ``read_timeout`` (default: that
        plus 30 s) is the client's guard against a silently dead connection.
        """
        params = _params({
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true" if allow_bookmarks else None,
            "timeoutSeconds": timeout_seconds,
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
        })
        timeout = httpx.Timeout(self.timeout, read=read_timeout or timeout_seconds + 30.0)
        request = self._http.build_request("GET", resource.path(namespace), params=params, timeout=timeout,
                                           extensions=self._extensions)
        try:
            response = self._http.send(request, stream=True)
        except httpx.TransportError as e:
            raise ApiConnectionError(f"watch {resource.key}: {e!r}") from e
        if response.status_code >= 300:
            try:
                response.read()
            except httpx.TransportError as e:
                raise ApiConnectionError(f"watch {resource.key}: {e!r}") from e
            finally:
                response.close()
            _decode(response)  # raises the typed error
        return WatchStream(response)

    # --- writes -----------------------------------------------------------------------------------------

    def create(
        self,
        resource: ResourceType,
        body: Mapping[str, Any],
        namespace: str | None = None,
        *,
        timeout: float | None = None,
    ) -> JsonDict:
        ns = _namespace_of(resource, body, namespace)
        return _as_dict(self.request("POST", resource.path(ns), body=_with_type(resource, body), timeout=timeout))

    def replace(
        self,
        resource: ResourceType,
        body: Mapping[str, Any],
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        timeout: float | None = None,
    ) -> JsonDict:
        """PUT the whole object. With ``metadata.resourceVersion`` set, a concurrent write gives Conflict."""
        ns = _namespace_of(resource, body, namespace)
        name = str((body.get("metadata") or {}).get("name") or "")
        if not name:
            raise ValueError("replace needs metadata.name")
        return _as_dict(self.request("PUT", resource.path(ns, name, subresource), body=_with_type(resource, body),
                                     timeout=timeout))

    def update_status(
        self, resource: ResourceType, body: Mapping[str, Any], namespace: str | None = None
    ) -> JsonDict:
        """PUT the status subresource (spec changes in ``body`` are ignored by the server)."""
        return self.replace(resource, body, namespace, subresource="status")

    def patch(
        self,
        resource: ResourceType,
        name: str,
        patch: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        namespace: str | None = None,
        *,
        patch_type: PatchType = PatchType.MERGE,
        subresource: str | None = None,
    ) -> JsonDict:
        if patch_type is PatchType.STRATEGIC and resource.group.endswith("gpufleet.io"):
            # The server rejects strategic merge for custom resources (415); fail before the round trip.
            raise ValueError("strategic merge patch is not supported for custom resources; use MERGE")
        if patch_type is PatchType.JSON and isinstance(patch, Mapping):
            raise ValueError("a JSON patch is a list of operations")
        return _as_dict(self.request("PATCH", resource.path(namespace, name, subresource), body=patch,
                                     content_type=patch_type.value))

    def patch_status(
        self,
        resource: ResourceType,
        name: str,
        patch: Mapping[str, Any],
        namespace: str | None = None,
        *,
        patch_type: PatchType = PatchType.MERGE,
    ) -> JsonDict:
        return self.patch(resource, name, patch, namespace, patch_type=patch_type, subresource="status")

    def delete(
        self,
        resource: ResourceType,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> JsonDict:
        options: JsonDict = {"apiVersion": "v1", "kind": "DeleteOptions"}
        preconditions = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
        if preconditions:
            options["preconditions"] = preconditions
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        return _as_dict(self.request("DELETE", resource.path(namespace, name), body=options))

    # --- scheduler verbs ------------------------------------------------------------------------------

    def bind(self, namespace: str, pod_name: str, node_name: str, *, pod_uid: str | None = None,
             annotations: Mapping[str, str] | None = None) -> None:
        """POST a Binding: the one write that places a pod. ``pod_uid`` guards against binding a
        same-named replacement pod (the server answers Conflict if the UID differs). ``annotations`` are
        written onto the pod in the same update that binds it (the API server merges them in)."""
        meta: JsonDict = {"name": pod_name, "namespace": namespace}
        if pod_uid:
            meta["uid"] = pod_uid
        if annotations:
            meta["annotations"] = dict(annotations)
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
        }
        self.request("POST", PODS.path(namespace, pod_name, "binding"), body=body)

    def evict(
        self,
        namespace: str,
        pod_name: str,
        *,
        pod_uid: str | None = None,
        grace_period_seconds: int | None = None,
        dry_run: bool = False,
    ) -> None:
        """POST a policy/v1 Eviction. A PodDisruptionBudget that forbids it gives TooManyRequests (429)."""
        options: JsonDict = {}
        if pod_uid:
            options["preconditions"] = {"uid": pod_uid}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if dry_run:
            options["dryRun"] = ["All"]
        body: JsonDict = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod_name, "namespace": namespace},
        }
        if options:
            body["deleteOptions"] = options
        self.request("POST", PODS.path(namespace, pod_name, "eviction"), body=body)

    def create_event(self, event: Mapping[str, Any]) -> JsonDict:
        """Create an events.k8s.io/v1 Event (see :func:`make_event`)."""
        return self.create(EVENTS, event)


_last_stamp = 0
_stamp_lock = threading.Lock()


def _event_stamp() -> int:
    """Nanoseconds since the epoch, as client-go names events (``<object>.<hex UnixNano>``), never the same twice
    in this process. Not a uuid: reading the system's random source is a system call, and a binding thread
    releasing the GIL for one in each event made the cycle wait for it back."""
    global _last_stamp
    with _stamp_lock:
        _last_stamp = max(time.time_ns(), _last_stamp + 1)
        return _last_stamp


def make_event(
    regarding: Mapping[str, Any],
    *,
    reason: str,
    note: str,
    action: str,
    reporting_controller: str,
    reporting_instance: str,
    type: str = "Normal",
    related: Mapping[str, Any] | None = None,
    now: dt.datetime | None = None,
) -> JsonDict:
    """An events.k8s.io/v1 Event about ``regarding`` (a full object dict), named as client-go names them."""
    if type not in ("Normal", "Warning"):
        raise ValueError("event type is Normal or Warning")
    meta = regarding.get("metadata") or {}
    name = str(meta.get("name") or "")
    namespace = str(meta.get("namespace") or "default")  # events about cluster-scoped objects go to default
    stamp = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    ref: JsonDict = {
        "apiVersion": regarding.get("apiVersion", "v1"),
        "kind": regarding.get("kind", ""),
        "name": name,
    }
    for src, dst in (("namespace", "namespace"), ("uid", "uid"), ("resourceVersion", "resourceVersion")):
        if meta.get(src):
            ref[dst] = meta[src]
    event: JsonDict = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{_event_stamp():x}", "namespace": namespace},
        "eventTime": stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "regarding": ref,
        "reason": reason,
        # The API caps note at 1 kB; longer notes are rejected outright, so cut them here.
        "note": note if len(note) <= 1024 else note[:1021] + "...",
        "type": type,
        "action": action,
        "reportingController": reporting_controller,
        "reportingInstance": reporting_instance,
    }
    if related is not None:
        rmeta = related.get("metadata") or {}
        event["related"] = {
            "apiVersion": related.get("apiVersion", "v1"),
            "kind": related.get("kind", ""),
            "name": rmeta.get("name", ""),
            **({"namespace": rmeta["namespace"]} if rmeta.get("namespace") else {}),
        }
    return event


# --- helpers ----------------------------------------------------------------------------------------------


def _params(params: Mapping[str, str | int | bool | None] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in (params or {}).items():
        if value is None:
            continue
        out[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


def _decode(response: httpx.Response) -> Any:
    return _decode_answer(response.status_code, response.content, response.headers.get("Retry-After"))


def _decode_answer(status: int, content: bytes, retry_after: str | None) -> Any:
    try:
        body: Any = json.loads(content) if content else None
    except ValueError:
        body = content.decode("utf-8", "replace")
    if status >= 300:
        raise error_from_status(status, body, retry_after_header=retry_after)
    return body


def _as_dict(value: Any) -> JsonDict:
    if not isinstance(value, dict):
        raise ApiError(0, "BadResponse", f"expected a JSON object, got {type(value).__name__}")
    return value


def _namespace_of(resource: ResourceType, body: Mapping[str, Any], namespace: str | None) -> str | None:
    if not resource.namespaced:
        return None
    ns = namespace or (body.get("metadata") or {}).get("namespace")
    if not ns:
        raise ValueError(f"{resource.key} is namespaced: give a namespace")
    return str(ns)


def _with_type(resource: ResourceType, body: Mapping[str, Any]) -> JsonDict:
    out = dict(body)
    out.setdefault("apiVersion", resource.api_version)
    out.setdefault("kind", resource.kind)
    return out
