"""HTTP and HTTPS listeners that slow clients cannot starve: the base of the webhook, the operations endpoints
and the dashboard.

Each listener is an aiohttp server (its low-level :class:`aiohttp.web.Server`) on an event loop of its own, run
by one daemon thread. A connection is a coroutine, not a thread, so a client that sends its request a byte at a
time, or nothing at all, holds a few kilobytes and nothing that ordinary requests wait for. The deadlines:

* the TLS handshake must finish within ``handshake_timeout`` seconds (asyncio's ``ssl_handshake_timeout``);
* a request's line and headers must arrive within ``read_timeout`` seconds of the connection (or of the previous
  answer on it): aiohttp's keep-alive timer, which closes a connection whose next request has not been parsed
  by then, however its bytes trickle in; and its body within ``read_timeout`` seconds of its headers
  (:meth:`HttpServer.read_body`, a 408 otherwise);
* an answer must be written within ``write_timeout`` seconds, or the connection is dropped.

Handlers do their blocking work (JSON of megabytes, the API server's reviews, the dashboard's views) on a pool
of ``workers`` threads (:meth:`HttpServer.blocking`); at most ``queue`` complete requests wait for one, and more
are answered 503 at once. Nothing a client sends ends in a traceback: aiohttp's answers to malformed requests go
through the server's ``errors`` function, and are logged at debug level.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import re
import socket
import ssl
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMethod
from aiohttp.web_protocol import RequestHandler

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ServingLimits:
    workers: int = 8  # threads for handlers' blocking work; connections cost none
    queue: int = 16  # complete requests that may wait for a worker; more are answered 503
    handshake_timeout: float = 5.0
    read_timeout: float = 10.0  # for the headers (from the connection or the last answer), then for the body
    write_timeout: float = 10.0
    shutdown_timeout: float = 5.0  # how long stop() lets requests in progress finish


class ClientError(Exception):
    """A request this server answers with ``status`` and ``message`` (then closes the connection)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


Endpoint = Callable[[web.BaseRequest, "HttpServer"], Awaitable[web.StreamResponse]]
ErrorAnswer = Callable[[int, str], web.StreamResponse]


def json_error(status: int, message: str) -> web.StreamResponse:
    """``{"message": ...}`` with ``status``: how the webhook answers what it refuses."""
    return web.Response(status=status, body=json.dumps({"message": message}, separators=(",", ":")).encode(),
                        content_type="application/json")


def text_error(status: int, message: str) -> web.StreamResponse:
    return web.Response(status=status, text=message + "\n")


_LENGTH = re.compile(r"[0-9]{1,12}")


def require_json_content_type(request: web.BaseRequest) -> None:
    content_type = request.headers.get("Content-Type") or ""
    if content_type.split(";", 1)[0].strip().lower() != "application/json":
        raise ClientError(400, f"Content-Type {content_type[:60]!r} is not accepted: send application/json")


def body_length(request: web.BaseRequest, max_bytes: int) -> int:
    """The request's Content-Length, which must be there, be 1 to ``max_bytes``, and be the only framing."""
    if request.headers.get("Transfer-Encoding") is not None:
        raise ClientError(400, "Transfer-Encoding is not accepted: send the body with a Content-Length")
    lengths = request.headers.getall("Content-Length", [])
    if not lengths:
        raise ClientError(400, "a Content-Length header is required")
    raw = lengths[0].strip()
    if not _LENGTH.fullmatch(raw):  # aiohttp refuses most of these before; this says so for the rest
        raise ClientError(400, f"Content-Length {raw[:40]!r} is not a non-negative integer")
    length = int(raw)
    if length == 0:
        raise ClientError(400, "the body is empty")
    if length > max_bytes:
        raise ClientError(400, f"the body of {length:,} bytes is larger than the {max_bytes:,} bytes accepted")
    return length


class _Protocol(RequestHandler):
    """aiohttp's connection handler, with its answers to malformed requests made by the server's ``errors``
    (JSON for the webhook and the dashboard) and logged at debug level, not as tracebacks."""

    __slots__ = ("_answer_error",)

    def __init__(self, manager: web.Server, errors: ErrorAnswer, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._answer_error = errors

    def handle_error(self, request: web.BaseRequest, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if status >= 500:
            log.error("error answering %s", request.remote, exc_info=exc)
        else:
            log.debug("refused a malformed request from %s: %s", request.remote, exc)
        if request.writer.output_size > 0:  # the answer is on its way already: only the connection can end
            raise ConnectionError("the answer was partly sent when it failed")
        # aiohttp's parser says what it refused, then quotes the bytes and points at the one it stopped on: the
        # words and the quote (cut short) say enough.
        lines = [line.strip() for line in str(getattr(exc, "message", None) or message or "").splitlines()]
        said = ": ".join(line.rstrip(":")[:120] for line in lines[:3] if line and not line.startswith("^"))
        if isinstance(exc, BadHttpMethod):  # a method nobody serves is 501, as http.server answered it
            status, said = 501, f"Unsupported method ({said})"
        response = self._answer_error(status, f"bad request: {said or 'malformed'}" if status == 400 else said)
        response.force_close()
        return response


class _Server(web.Server):
    """aiohttp's low-level server making :class:`_Protocol` connections."""

    def __init__(self, handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]], errors: ErrorAnswer,
                 **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self._answer_error = errors

    def __call__(self) -> RequestHandler:
        return _Protocol(self, self._answer_error, loop=self._loop, **self._kwargs)


class _SocketSite(web.BaseSite):
    """A site on a socket bound beforehand (so a busy port fails the constructor, not the serving thread), with
    a deadline on the TLS handshake, which aiohttp's own sites leave at asyncio's 60 seconds."""

    __slots__ = ("_handshake_timeout", "_sock")

    def __init__(self, runner: web.BaseRunner, sock: socket.socket, ssl_context: ssl.SSLContext | None,
                 handshake_timeout: float) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=128)
        self._sock = sock
        self._handshake_timeout = handshake_timeout

    @property
    def name(self) -> str:
        host, port = self._sock.getsockname()[:2]
        return f"{'https' if self._ssl_context else 'http'}://{host}:{port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            server, sock=self._sock, ssl=self._ssl_context, backlog=self._backlog,
            ssl_handshake_timeout=self._handshake_timeout if self._ssl_context else None)


class HttpServer:
    """One listener: bound when constructed, serving from :meth:`start` on a thread of its own until :meth:`stop`.
    ``endpoint`` answers each request; ``errors`` makes the answers to requests aiohttp itself refuses;
    ``tls`` makes it HTTPS with a certificate that follows its files."""

    def __init__(self, address: tuple[str, int], endpoint: Endpoint, limits: ServingLimits, *, name: str,
                 tls: ReloadingCertificate | None = None, errors: ErrorAnswer = text_error) -> None:
        host, port = address
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.create_server((host, port), family=family, backlog=128)
        self.sock.setblocking(False)
        self.limits = limits
        self.name = name
        self._endpoint = endpoint
        self._errors = errors
        self._tls = tls
        self._loop = asyncio.new_event_loop()
        self._executor = ThreadPoolExecutor(limits.workers, thread_name_prefix=f"{name}-worker")
        self._waiting = 0  # requests handed to the workers and not done yet (touched on the loop only)
        self._runner: web.BaseRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.sock.getsockname()[:2]
        return str(host), int(port)

    @property
    def port(self) -> int:
        return self.address[1]

    # ---- lifecycle ----------------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._open(), self._loop).result(timeout=30.0)

    def stop(self) -> None:
        """Stop accepting, let requests in progress finish (``shutdown_timeout`` at most), close the rest."""
        if self._thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(
                    timeout=self.limits.shutdown_timeout + 10.0)
            except Exception:  # stopping must not fail; what is left dies with the thread
                log.exception("%s: stopping the server failed", self.name)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10.0)
        if not self._loop.is_running():
            self._loop.close()
        self.sock.close()
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def _open(self) -> None:
        server = _Server(self._serve, self._errors, keepalive_timeout=self.limits.read_timeout,
                         lingering_time=0, access_log=None)
        self._runner = web.ServerRunner(server, handle_signals=False, shutdown_timeout=self.limits.shutdown_timeout)
        await self._runner.setup()
        context = self._tls.server_context() if self._tls is not None else None
        await _SocketSite(self._runner, self.sock, context, self.limits.handshake_timeout).start()

    async def _close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    # ---- one request --------------------------------------------------------------------------------------

    async def _serve(self, request: web.BaseRequest) -> web.StreamResponse:
        try:
            response = await self._endpoint(request, self)
        except ClientError as e:
            response = self._errors(e.status, e.message)
        if not response.prepared:
            # Every answer closes its connection (as http.server's HTTP/1.0 did): a connection is one request.
            response.force_close()
            try:
                async with asyncio.timeout(self.limits.write_timeout):
                    await response.prepare(request)
                    await response.write_eof()
            except TimeoutError:  # the client does not read its answer: drop it
                log.debug("%s: %s did not read its answer within %gs", self.name, request.remote,
                          self.limits.write_timeout)
                if request.transport is not None:
                    request.transport.abort()
        return response

    async def read_body(self, request: web.BaseRequest, max_bytes: int) -> bytes:
        """The request body, exactly Content-Length bytes, within ``read_timeout``; :class:`ClientError` for
        anything else."""
        length = body_length(request, max_bytes)
        try:
            async with asyncio.timeout(self.limits.read_timeout):
                return await request.content.readexactly(length)
        except TimeoutError:
            raise ClientError(408, f"the body did not arrive within {self.limits.read_timeout:g}s") from None
        except asyncio.IncompleteReadError as e:
            raise ClientError(400, f"the body ended after {len(e.partial):,} of the {length:,} bytes of its "
                                   "Content-Length") from None
        except ConnectionResetError:
            # The client went away mid-body: nobody to answer, and nothing wrong with the server.
            raise ClientError(400, "the connection was lost before the body arrived") from None

    async def blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a worker thread; a 503 when ``queue`` requests are already waiting for one."""
        if self._waiting >= self.limits.workers + self.limits.queue:
            raise ClientError(503, f"{self.name} is busy: {self._waiting} requests are being answered or waiting; "
                                   "retry")
        self._waiting += 1
        try:
            return await self._loop.run_in_executor(self._executor, functools.partial(fn, *args))
        finally:
            self._waiting -= 1


class ReloadingCertificate:
    """A server TLS context that follows its files: cert-manager rotates the certificate in the mounted Secret,
    and each handshake is made with the pair current at that moment, so rotation needs no restart."""

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

    @staticmethod
    def _new() -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        return ctx

    def _load(self) -> ssl.SSLContext:
        ctx = self._new()
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

    def server_context(self) -> ssl.SSLContext:
        """The context a listener is made with: OpenSSL calls its server-name callback on every ClientHello
        (with or without SNI), which hands the handshake to :meth:`current`'s context."""
        ctx = self._new()

        def choose(sslobj: ssl.SSLObject, server_name: str | None, _: ssl.SSLContext) -> int | None:
            try:
                sslobj.context = self.current()
            except OSError as e:
                log.debug("%s: refusing a handshake: %s", self.what, e)
                return ssl.ALERT_DESCRIPTION_INTERNAL_ERROR
            return None

        ctx.sni_callback = choose
        return ctx


def parse_address(text: str) -> tuple[str, int] | None:
    """``host:port`` or ``:port`` (all interfaces); None when malformed."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isascii() or not port.isdigit() or len(port) > 5 or not 0 <= int(port) <= 65535:
        return None
    return host.strip("[]"), int(port)
