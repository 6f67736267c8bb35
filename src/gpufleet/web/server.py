"""The dashboard's HTTP server: pages, static files, the JSON API and server-sent events, read-only.

Built on :mod:`gpufleet.kube.serving`'s bounded server (a fixed pool of workers, a deadline on each request), so
a slow or hostile client costs a bounded amount. What it does about safety, each for a reason:

* **read-only**: GET and HEAD only; POST, PUT, PATCH, DELETE and OPTIONS get 405 with ``Allow: GET, HEAD``, and
  no request body is ever read (a GET that announces one gets 400);
* **bounded**: request lines longer than :data:`MAX_TARGET` characters get 414; query values are bounded by the
  API; at most :data:`MAX_STREAMS` event streams are open at once (503 beyond), each for at most
  :data:`STREAM_SECONDS` (the browser reconnects by itself), so streams never take every worker;
* **DNS rebinding**: bound to a loopback address (the default), a request whose ``Host`` is not a loopback name
  gets 403, so a web page elsewhere cannot read the dashboard through a name it points at 127.0.0.1;
* **no markup from data**: the pages are static files that fill themselves from the API with text nodes; JSON
  answers escape ``<``, ``>`` and ``&``; every answer carries a Content-Security-Policy that allows scripts
  from this server only (no inline script, no other origin), ``nosniff`` and ``frame-ancestors 'none'``.
"""

from __future__ import annotations

import email.message
import functools
import gzip
import ipaddress
import json
import logging
import select
import socket
import threading
import time
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

from gpufleet.kube.serving import BoundedHandler, BoundedHTTPServer, ServerThread, ServingLimits
from gpufleet.web import api
from gpufleet.web.contract import DataSource
from gpufleet.web.openapi import document

log = logging.getLogger(__name__)

MAX_TARGET = 4096
MAX_STREAMS = 6
STREAM_SECONDS = 300.0
KEEPALIVE_SECONDS = 15.0
GONE_CHECK_SECONDS = 1.0  # how soon a stream notices its browser went away (a closed socket reads as EOF)
GZIP_MIN_BYTES = 2048
LIMITS = ServingLimits(workers=12, queue=32, queue_wait=5.0, read_timeout=10.0, write_timeout=10.0)

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


class _Streams:
    """How many event streams are open, bounded by :data:`MAX_STREAMS`."""

    def __init__(self) -> None:
        self.open = 0
        self.lock = threading.Lock()

    def take(self) -> bool:
        with self.lock:
            if self.open >= MAX_STREAMS:
                return False
            self.open += 1
            return True

    def give(self) -> None:
        with self.lock:
            self.open -= 1


class DashboardServer(BoundedHTTPServer):
    def __init__(self, address: tuple[str, int], source: DataSource, limits: ServingLimits = LIMITS) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, DashboardHandler, limits, name="dashboard")
        self.source = source
        self.loopback_only = is_loopback(address[0])
        self.streams = _Streams()
        self.stopping = threading.Event()
        self.openapi = json_bytes(document())


class DashboardHandler(BoundedHandler):
    server: DashboardServer
    def version_string(self) -> str:
        return "gpufleet-dashboard"  # not Python's version: a server says no more about itself than it needs

    # ---- methods ------------------------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._serve(head=False)

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def _refuse_write(self) -> None:
        self._send(405, json_bytes({"message": f"{self.command} is refused: the dashboard is read-only (GET, HEAD)"}),
                   "application/json", extra=(("Allow", "GET, HEAD"),))

    do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _refuse_write

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (a malformed request line, too many headers, an unknown method) as JSON,
        with the same headers as every other answer."""
        if not hasattr(self, "headers"):
            self.headers = email.message.Message()  # refused before any header was read
        self._send(code, json_bytes({"message": message or explain or "the request was refused"}),
                   "application/json", head=getattr(self, "command", None) == "HEAD")

    # ---- one request ---------------------------------------------------------------------------------------

    def _serve(self, head: bool) -> None:
        problem = self._problem()
        if problem is not None:
            status, message = problem
            self._send(status, json_bytes({"message": message}), "application/json", head=head)
            return
        parts = urlsplit(self.path)
        path = parts.path
        if path == "/api/events":
            self._events(head)
            return
        if path == "/api/openapi.json":
            self._send(200, self.server.openapi, "application/json", head=head)
            return
        if path.startswith("/api/"):
            try:
                query = parse_qs(parts.query, keep_blank_values=True, max_num_fields=32, strict_parsing=False)
            except ValueError:
                self._send(400, json_bytes({"message": "too many query parameters (at most 32)"}), "application/json",
                           head=head)
                return
            answer = api.answer(self.server.source, path, query)
            self._send(answer.status, json_bytes(answer.doc), "application/json", head=head)
            return
        if path == "/":
            first = "/whatif" if self.server.source.cluster() is None else "/fleet"
            self._send(302, b"", "text/plain", head=head, extra=(("Location", first),))
            return
        if path in PAGES or (path.startswith("/workloads/") and path.count("/") == 3):
            self._send(200, _static(SHELL), "text/html; charset=utf-8", head=head, cache="no-cache")
            return
        static = STATIC.get(path)
        if static is not None:
            self._send(200, _static(static[0]), static[1], head=head, cache="no-cache")
            return
        self._send(404, json_bytes({"message": f"no page {path[:200]!r}; the pages are {', '.join(PAGES)}"}),
                   "application/json", head=head)

    def _problem(self) -> tuple[int, str] | None:
        if len(self.path) > MAX_TARGET:
            return 414, f"the request target is {len(self.path):,} characters long; at most {MAX_TARGET:,}"
        length = (self.headers.get("Content-Length") or "0").strip()
        if self.headers.get("Transfer-Encoding") is not None or length not in ("", "0"):
            return 400, "a GET or HEAD carries no body"
        if self.server.loopback_only:
            host = (self.headers.get("Host") or "").strip()
            name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            if not is_loopback(name):
                return 403, (f"Host {host[:100]!r} is not a loopback name: this dashboard listens on a loopback "
                             "address and answers requests for localhost, 127.0.0.1 or [::1] only (DNS rebinding)")
        return None

    def _send(self, status: int, body: bytes, content_type: str, *, head: bool = False, cache: str = "no-store",
              extra: tuple[tuple[str, str], ...] = ()) -> None:
        encoding = None
        if len(body) >= GZIP_MIN_BYTES and "gzip" in (self.headers.get("Accept-Encoding") or ""):
            body = gzip.compress(body, compresslevel=5)
            encoding = "gzip"
        self.connection.settimeout(self.server.limits.write_timeout)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", cache)
        if encoding:
            self.send_header("Content-Encoding", encoding)
            self.send_header("Vary", "Accept-Encoding")
        for name, value in (*SECURITY_HEADERS, *extra):
            self.send_header(name, value)
        self.close_connection = True
        self.send_header("Connection", "close")
        self.end_headers()
        if not head:
            self.wfile.write(body)

    # ---- server-sent events ---------------------------------------------------------------------------------

    def _events(self, head: bool) -> None:
        if head:
            self._send(200, b"", "text/event-stream", head=True)
            return
        streams = self.server.streams
        if not streams.take():
            self._send(503, json_bytes({"message": f"{MAX_STREAMS} event streams are open already; retry later"}),
                       "application/json", extra=(("Retry-After", "5"),))
            return
        try:
            self._stream()
        except OSError as e:  # the browser went away
            log.debug("dashboard event stream ended: %s", e)
        finally:
            streams.give()

    def _stream(self) -> None:
        source = self.server.source
        self.connection.settimeout(self.server.limits.write_timeout)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-store")
        for name, value in SECURITY_HEADERS:
            self.send_header(name, value)
        self.send_header("Connection", "close")
        self.close_connection = True
        self.end_headers()
        version = source.version
        self._write(f"retry: 2000\nevent: version\ndata: {json.dumps({'version': version})}\n\n")
        ends = time.monotonic() + STREAM_SECONDS
        quiet_since = time.monotonic()
        while not self.server.stopping.is_set() and time.monotonic() < ends and not self._gone():
            now_version = source.wait_for_change(version, GONE_CHECK_SECONDS)
            if self.server.stopping.is_set():
                break
            if now_version != version:
                version = now_version
                self._write(f"event: version\ndata: {json.dumps({'version': version})}\n\n")
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= KEEPALIVE_SECONDS:
                self._write(": still here\n\n")
                quiet_since = time.monotonic()

    def _gone(self) -> bool:
        """Whether the browser closed the stream: it sends nothing more, so a readable socket means EOF (or
        bytes it should not send, which end the stream as well)."""
        readable, _, _ = select.select([self.connection], [], [], 0)
        return bool(readable)

    def _write(self, text: str) -> None:
        self.wfile.write(text.encode())
        self.wfile.flush()


class Dashboard:
    """A dashboard serving ``source`` on ``host:port`` from a daemon thread."""

    def __init__(self, source: DataSource, host: str = "127.0.0.1", port: int = 8080) -> None:
        self.source = source
        self.server = DashboardServer((host, port), source)
        self._thread = ServerThread(self.server, "dashboard")

    @property
    def port(self) -> int:
        return self._thread.port

    @property
    def url(self) -> str:
        host = str(self.server.server_address[0])
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{self.port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.stopping.set()
        self.source.close()  # wakes the event streams' waits
        self._thread.stop()
