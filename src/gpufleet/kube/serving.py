"""HTTP and HTTPS listeners whose cost per client is bounded: the base of the webhook and operations servers.

``http.server.ThreadingHTTPServer`` starts one thread per connection and lets it wait forever for a request
that never comes, so twenty slow clients hold twenty threads for as long as they like. Here instead:

* connections are served by a **fixed pool** of ``workers`` threads; accepted connections wait in a queue of
  ``queue`` places, and a connection arriving when the queue is full is closed at once (the peer retries, or
  the API server applies the webhook's failurePolicy). One that waited longer than ``queue_wait`` is closed
  unserved: its client (the API server gives a webhook 5 seconds) has given up by then;
* the TLS handshake must finish within ``handshake_timeout`` seconds, and the whole request (request line,
  headers and body) must arrive within ``read_timeout`` seconds after it: a deadline, not a per-read
  timeout, so a client trickling one byte at a time is cut off too;
* nothing a client sends ends in a traceback: broken handshakes, resets and timeouts are logged at debug level.
"""

from __future__ import annotations

import io
import logging
import os
import queue
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from socketserver import _SocketWriter  # type: ignore[attr-defined]
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ServingLimits:
    workers: int = 8
    queue: int = 16
    queue_wait: float = 2.0
    handshake_timeout: float = 5.0
    read_timeout: float = 10.0
    write_timeout: float = 10.0


class ClientError(Exception):
    """A request this server answers with ``status`` and ``message`` (then closes the connection)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _DeadlineReader(io.RawIOBase):
    """Reads from the socket until ``deadline`` (monotonic), whatever the pace of the bytes."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self.deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request did not arrive in time")
        self._sock.settimeout(left)
        return self._sock.recv_into(buffer)


_LENGTH = re.compile(r"[0-9]{1,12}")


class BoundedHandler(BaseHTTPRequestHandler):
    """A handler served by :class:`BoundedHTTPServer`: deadlines on the socket, helpers for bodies and JSON."""

    server: BoundedHTTPServer

    def setup(self) -> None:
        sock: socket.socket = self.request
        limits = self.server.limits
        if isinstance(sock, ssl.SSLSocket):
            sock.settimeout(limits.handshake_timeout)
            sock.do_handshake()  # errors end the connection quietly (BoundedHTTPServer._serve)
        self.connection = sock
        self.rfile = io.BufferedReader(_DeadlineReader(sock, time.monotonic() + limits.read_timeout))
        self.wfile = _SocketWriter(sock)

    def read_body(self, max_bytes: int) -> bytes:
        """The request body, exactly Content-Length bytes; :class:`ClientError` for anything else."""
        if self.headers.get("Transfer-Encoding") is not None:
            raise ClientError(400, "Transfer-Encoding is not accepted: send the body with a Content-Length")
        lengths = self.headers.get_all("Content-Length") or []
        if not lengths:
            raise ClientError(400, "a Content-Length header is required")
        if len(set(lengths)) > 1:
            raise ClientError(400, f"conflicting Content-Length headers: {', '.join(v[:20] for v in lengths)}")
        raw = lengths[0].strip()
        if not _LENGTH.fullmatch(raw):
            raise ClientError(400, f"Content-Length {raw[:40]!r} is not a non-negative integer")
        length = int(raw)
        if length == 0:
            raise ClientError(400, "the body is empty")
        if length > max_bytes:
            raise ClientError(400, f"the body of {length:,} bytes is larger than the {max_bytes:,} bytes accepted")
        try:
            body = self.rfile.read(length)
        except TimeoutError:
            raise ClientError(408, f"the body did not arrive within {self.server.limits.read_timeout:g}s") from None
        if len(body) < length:
            raise ClientError(400, f"the body ended after {len(body):,} of the {length:,} bytes of its Content-Length")
        return body

    def require_json_content_type(self) -> None:
        content_type = self.headers.get("Content-Type") or ""
        if content_type.split(";", 1)[0].strip().lower() != "application/json":
            raise ClientError(400, f"Content-Type {content_type[:60]!r} is not accepted: send application/json")

    def send_body(self, code: int, body: bytes, content_type: str) -> None:
        self.connection.settimeout(self.server.limits.write_timeout)
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if code >= 400:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s: " + format, self.server.name, *args)


class BoundedHTTPServer(HTTPServer):
    """Accepts on the serving thread, serves on a fixed pool; ``tls`` (the context current at each accept)
    makes it HTTPS."""

    request_queue_size = 64  # the kernel's listen backlog; the real bound is the queue below

    def __init__(self, address: tuple[str, int], handler: type[BoundedHandler], limits: ServingLimits, *,
                 name: str, tls: Callable[[], ssl.SSLContext] | None = None) -> None:
        super().__init__(address, handler)
        self.limits = limits
        self.name = name
        self.tls = tls
        self.refused = 0  # connections closed because every worker was busy and the queue full
        self._queue: queue.Queue[tuple[Any, Any, float] | None] = queue.Queue(limits.queue)
        self._last_refusal_log = 0.0
        self._workers = [threading.Thread(target=self._work, name=f"{name}-worker-{i}", daemon=True)
                         for i in range(limits.workers)]
        for worker in self._workers:
            worker.start()

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = self.socket.accept()
        if self.tls is None:
            return sock, addr
        try:
            context = self.tls()
        except OSError:
            sock.close()
            raise
        # The handshake runs on a worker (BoundedHandler.setup), under its timeout: accept() never waits on it.
        return context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

    def process_request(self, request: Any, client_address: Any) -> None:
        try:
            self._queue.put_nowait((request, client_address, time.monotonic()))
        except queue.Full:
            self.refused += 1
            now = time.monotonic()
            if now - self._last_refusal_log > 10.0:
                self._last_refusal_log = now
                log.warning("%s: all %d workers busy and %d connections waiting: refusing connections "
                            "(%d so far)", self.name, self.limits.workers, self.limits.queue, self.refused)
            self.shutdown_request(request)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            request, client_address, queued = item
            try:
                if time.monotonic() - queued <= self.limits.queue_wait:
                    self.finish_request(request, client_address)
            except (OSError, ssl.SSLError, ValueError) as e:  # a client's broken handshake, reset or timeout
                log.debug("%s: connection from %s ended: %s", self.name, client_address, e)
            except Exception:
                log.exception("%s: serving %s failed", self.name, client_address)
            finally:
                self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("%s: error serving %s", self.name, client_address, exc_info=True)

    def server_close(self) -> None:
        super().server_close()
        workers = getattr(self, "_workers", ())  # none yet when binding the address failed in __init__
        for _ in workers:
            self._queue.put(None)
        deadline = time.monotonic() + 2.0
        for worker in workers:
            worker.join(max(0.0, deadline - time.monotonic()))


class ReloadingCertificate:
    """A server TLS context that follows its files: cert-manager rotates the certificate in the mounted Secret,
    and each new connection is wrapped with the context current at that moment, so rotation needs no restart."""

    def __init__(self, cert_file: str, key_file: str, what: str) -> None:
        self.cert_file, self.key_file, self.what = cert_file, key_file, what
        self._lock = threading.Lock()
        self._stamp: tuple[float, float] | None = None
        self._context: ssl.SSLContext | None = None
        try:
            self._context = self._load()
        except (OSError, ssl.SSLError) as e:
            # At install time cert-manager may not have written the Secret yet: serve as soon as it has.
            log.info("%s certificate not loaded (%s): connections are refused until it exists", what, e)

    def _load(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.cert_file, self.key_file)
        self._stamp = (os.stat(self.cert_file).st_mtime, os.stat(self.key_file).st_mtime)
        return ctx

    def current(self) -> ssl.SSLContext:
        with self._lock:
            try:
                stamp = (os.stat(self.cert_file).st_mtime, os.stat(self.key_file).st_mtime)
                if stamp != self._stamp:
                    self._context = self._load()
            except (OSError, ssl.SSLError) as e:  # mid-rotation: keep serving the last good pair
                log.warning("%s certificate reload failed: %s", self.what, e)
            if self._context is None:
                raise OSError(f"no {self.what} certificate at {self.cert_file} yet")
            return self._context


class ServerThread:
    """A server serving on a daemon thread, with the start/stop lifecycle the scheduler needs."""

    def __init__(self, server: BoundedHTTPServer, name: str) -> None:
        self.server = server
        self._thread = threading.Thread(target=self.server.serve_forever, name=name, daemon=True)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():  # shutdown() waits for serve_forever, which never ran otherwise
            self.server.shutdown()
        self.server.server_close()
