"""The dashboard's HTTP server: pages, static files, the JSON API and server-sent events, read-only.

Built on :mod:`gpufleet.k8s.serving`'s asynchronous server (aiohttp: a connection is a coroutine, with deadlines
on its headers and its answer; the views are built on a few worker threads), so a slow or hostile client costs a
coroutine, and ordinary requests keep being answered. What it does about safety, each for a reason:

* **read-only**: GET and HEAD only; POST, PUT, PATCH, DELETE and OPTIONS get 405 with ``Allow: GET, HEAD``, and
  no request body is ever read (a GET that announces one gets 400);
* **bounded**: request lines longer than :data:`MAX_TARGET` characters get 414; query values are bounded by the
  API; at most :data:`MAX_STREAMS` event streams are open at once (503 beyond), each for at most
  :data:`STREAM_SECONDS` (the browser reconnects by itself), each waiting for changes on a thread of its own;
* **DNS rebinding**: bound to a loopback address (the default), a request whose ``Host`` is not a loopback name
  gets 403, so a web page elsewhere cannot read the dashboard through a name it points at 127.0.0.1;
* **no markup from data**: the pages are static files that fill themselves from the API with text nodes; JSON
  answers escape ``<``, ``>`` and ``&``; every answer carries a Content-Security-Policy that allows scripts
  from this server only (no inline script, no other origin), ``nosniff`` and ``frame-ancestors 'none'``.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import json
import logging
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

from aiohttp import web

from gpufleet.k8s.serving import HttpServer, ServingLimits
from gpufleet.web import api
from gpufleet.web.contract import DataSource
from gpufleet.web.openapi import document

log = logging.getLogger(__name__)

MAX_TARGET = 4096
MAX_STREAMS = 6
STREAM_SECONDS = 300.0
KEEPALIVE_SECONDS = 15.0
GONE_CHECK_SECONDS = 1.0  # how soon a stream notices its browser went away or the server stopping
GZIP_MIN_BYTES = 2048
LIMITS = ServingLimits(workers=12, queue=32, read_timeout=10.0, write_timeout=10.0)
SERVER = "gpufleet-dashboard"  # not Python's or aiohttp's version: a server says no more about itself than it needs
READ_METHODS = ("GET", "HEAD")
WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE", "OPTIONS")

# The pages: each stable URL serves the one shell page, which renders the page its path names from the API.
PAGES = ("/fleet", "/queues", "/workloads", "/whatif")
STATIC = {"/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
          "/static/app.css": ("app.css", "text/css; charset=utf-8"),
          "/favicon.ico": ("favicon.svg", "image/svg+xml")}
SHELL = "index.html"

SECURITY_HEADERS = (
    ("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                                "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
)


def json_bytes(doc: Any) -> bytes:
    """Compact JSON with ``<``, ``>`` and ``&`` escaped (valid JSON, and inert wherever it lands)."""
    text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()


@functools.cache  # the package's files do not change while it runs; read each once, not on every request
def _static(name: str) -> bytes:
    return resources.files("gpufleet.web").joinpath("static", name).read_bytes()


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class Reply:
    """An answer, made on a worker: the status, the body and its type, and headers beyond the usual."""

    status: int
    body: bytes
    content_type: str
    cache: str = "no-store"
    extra: tuple[tuple[str, str], ...] = ()


def _message(status: int, message: str, extra: tuple[tuple[str, str], ...] = ()) -> Reply:
    return Reply(status, json_bytes({"message": message}), "application/json", extra=extra)


def response(reply: Reply, *, gzip_ok: bool = False) -> web.Response:
    """The HTTP answer of ``reply``, with the security headers every answer carries; gzip where the client
    accepts it and the body is worth it."""
    headers = {"Content-Type": reply.content_type, "Cache-Control": reply.cache, "Server": SERVER,
               **dict(SECURITY_HEADERS), **dict(reply.extra)}
    answer = web.Response(status=reply.status, body=reply.body, headers=headers)
    if gzip_ok and len(reply.body) >= GZIP_MIN_BYTES:
        answer.enable_compression(web.ContentCoding.gzip)
        answer.headers["Vary"] = "Accept-Encoding"
    return answer


def error_response(status: int, message: str) -> web.StreamResponse:
    """aiohttp's refusals (a malformed request line, headers too long) as JSON, with the same headers as every
    other answer."""
    return response(_message(status, message))


class Dashboard:
    """A dashboard serving ``source`` on ``host:port``: bound when constructed (OSError when it cannot), serving
    from :meth:`start` until :meth:`stop`."""

    def __init__(self, source: DataSource, host: str = "127.0.0.1", port: int = 8080,
                 limits: ServingLimits = LIMITS) -> None:
        self.source = source
        self.loopback_only = is_loopback(host)
        self.openapi = json_bytes(document())
        self.stopping = threading.Event()
        self.streams_open = 0  # touched on the server's loop only
        # Each event stream waits for changes on a thread of its own, apart from the workers that build answers.
        self._stream_waits = ThreadPoolExecutor(MAX_STREAMS, thread_name_prefix="dashboard-stream")
        self.server = HttpServer((host, port), self._answer, limits, name="dashboard", errors=error_response)

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def url(self) -> str:
        host = self.server.address[0]
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{self.port}"

    def start(self) -> None:
        self.server.start()

    def stop(self) -> None:
        self.stopping.set()
        self.source.close()  # wakes the event streams' waits
        self.server.stop()
        self._stream_waits.shutdown(wait=False, cancel_futures=True)

    # ---- one request ---------------------------------------------------------------------------------------

    async def _answer(self, request: web.BaseRequest, server: HttpServer) -> web.StreamResponse:
        method = request.method
        if method in WRITE_METHODS:  # refused before anything is read: no request body is ever read
            return response(_message(405, f"{method} is refused: the dashboard is read-only (GET, HEAD)",
                                     extra=(("Allow", "GET, HEAD"),)))
        if method not in READ_METHODS:
            return response(_message(501, f"Unsupported method ({method[:40]!r})"))
        target = request.raw_path
        problem = self._problem(target, request.headers)
        if problem is not None:
            return response(problem)
        if urlsplit(target).path == "/api/events":
            return await self._events(request, server)
        reply = await server.blocking(self._reply, target)
        return response(reply, gzip_ok="gzip" in (request.headers.get("Accept-Encoding") or ""))

    def _problem(self, target: str, headers: Mapping[str, str]) -> Reply | None:
        if len(target) > MAX_TARGET:
            return _message(414, f"the request target is {len(target):,} characters long; at most {MAX_TARGET:,}")
        length = (headers.get("Content-Length") or "0").strip()
        if headers.get("Transfer-Encoding") is not None or length not in ("", "0"):
            return _message(400, "a GET or HEAD carries no body")
        if self.loopback_only:
            host = (headers.get("Host") or "").strip()
            name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            if not is_loopback(name):
                return _message(403, f"Host {host[:100]!r} is not a loopback name: this dashboard listens on a "
                                     "loopback address and answers requests for localhost, 127.0.0.1 or [::1] only "
                                     "(DNS rebinding)")
        return None

    def _reply(self, target: str) -> Reply:
        """The answer to a GET of ``target``, built on a worker: the views may be large."""
        parts = urlsplit(target)
        path = parts.path
        if path == "/api/openapi.json":
            return Reply(200, self.openapi, "application/json")
        if path.startswith("/api/"):
            try:
                query = parse_qs(parts.query, keep_blank_values=True, max_num_fields=32, strict_parsing=False)
            except ValueError:
                return _message(400, "too many query parameters (at most 32)")
            answer = api.answer(self.source, path, query)
            return Reply(answer.status, json_bytes(answer.doc), "application/json")
        if path == "/":
            first = "/whatif" if self.source.cluster() is None else "/fleet"
            return Reply(302, b"", "text/plain", extra=(("Location", first),))
        if path in PAGES or (path.startswith("/workloads/") and path.count("/") == 3):
            return Reply(200, _static(SHELL), "text/html; charset=utf-8", cache="no-cache")
        static = STATIC.get(path)
        if static is not None:
            return Reply(200, _static(static[0]), static[1], cache="no-cache")
        return _message(404, f"no page {path[:200]!r}; the pages are {', '.join(PAGES)}")

    # ---- server-sent events ---------------------------------------------------------------------------------

    async def _events(self, request: web.BaseRequest, server: HttpServer) -> web.StreamResponse:
        if request.method == "HEAD":
            return response(Reply(200, b"", "text/event-stream"))
        if self.streams_open >= MAX_STREAMS:
            return response(_message(503, f"{MAX_STREAMS} event streams are open already; retry later",
                                     extra=(("Retry-After", "5"),)))
        self.streams_open += 1
        stream = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8",
                                             "Cache-Control": "no-store", "Server": SERVER, **dict(SECURITY_HEADERS)})
        stream.force_close()
        try:
            await self._stream(request, stream, server.limits.write_timeout)
        except (OSError, TimeoutError) as e:  # the browser went away, or stopped reading
            log.debug("dashboard event stream ended: %s", e)
        finally:
            self.streams_open -= 1
        return stream

    async def _stream(self, request: web.BaseRequest, stream: web.StreamResponse, write_timeout: float) -> None:
        async def send(text: str) -> None:
            async with asyncio.timeout(write_timeout):
                await stream.write(text.encode())

        async with asyncio.timeout(write_timeout):
            await stream.prepare(request)
        version = self.source.version
        await send(f"retry: 2000\nevent: version\ndata: {json.dumps({'version': version})}\n\n")
        loop = asyncio.get_running_loop()
        ends = time.monotonic() + STREAM_SECONDS
        quiet_since = time.monotonic()
        while not self.stopping.is_set() and time.monotonic() < ends and _connected(request):
            now_version = await loop.run_in_executor(self._stream_waits, self.source.wait_for_change, version,
                                                     GONE_CHECK_SECONDS)
            if self.stopping.is_set():
                break
            if now_version != version:
                version = now_version
                await send(f"event: version\ndata: {json.dumps({'version': version})}\n\n")
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= KEEPALIVE_SECONDS:
                await send(": still here\n\n")
                quiet_since = time.monotonic()
        await stream.write_eof()


def _connected(request: web.BaseRequest) -> bool:
    """Whether the browser still holds the stream (aiohttp drops the transport when it closes)."""
    return request.transport is not None and not request.transport.is_closing()
