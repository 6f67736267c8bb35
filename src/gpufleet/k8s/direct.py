"""Unary API calls on a keep-alive HTTP/1.1 connection per calling thread, through the standard library's
:mod:`http.client`: no httpx, no httpcore, no connection pool.

``httpx.Client`` parses the URL three times and runs its header merge, cookie jar and auth flow on every
call: against the API emulator, 16 threads binding pods, a Binding through it costs 0.7-1.1 ms of CPU on the
2-core development machine, through httpcore's pool 0.45 ms (bench/kube_client_calls.py, bench/README.md). A
scheduler binding hundreds of pods a second makes a Binding and an Event per pod: that is a good part of a
CPU core.

The pool itself then cost more than the call: under its lock, twice per request, it walks every connection and,
for each idle one, lists the idle ones again (``ConnectionPool._assign_requests_to_connections`` in httpcore
1.0): with 16 binding threads, profiled, 2.7 million ``is_idle`` calls and 3,000 Python calls in all per
Binding. So each calling thread keeps one keep-alive connection of its own (:meth:`DirectCalls._connection`):
a scheduler's callers are a fixed set of threads (binding workers, the event writer, the cycle), and a thread
that ends has its connection closed when the next one is opened.

Then httpcore's HTTP/1.1 (h11's state machine, its event objects and header validation) was most of what was
left of a call's CPU; :class:`http.client.HTTPConnection` writes the same request and reads the same answers
(``Content-Length``, chunked, or ended by the connection; ``Connection: close``; ``100 Continue`` skipped) for
about half of it: a Binding from 16 threads to the emulator, ~0.3 ms of the client's CPU through httpcore,
~0.16 ms here. Most of what is left is http.client's own: its header parsing goes through :mod:`email.parser`
(bench/README.md, "kube_client_calls"). ``endheaders`` sends a request's head and body in two sends; held back
and sent as one, the CPU per call did not change measurably, so they go as http.client sends them.

What httpx did for these calls is done here: the bearer token (and one retry with a fresh token after a
401, as client-go), the TLS context and server name (the certificate verified against ``tls-server-name`` when
it is set), the timeouts, one retry of a failed TCP connect (httpx's transport had ``retries=1``), keep-alive
connections (closed after 90 s idle, as Go's transport does, and not reused once the server closed its end,
which an idle connection shows by being readable) and TCP_NODELAY (Go sets it on every connection and so does
http.client; without it a request's headers and body wait on each other's acknowledgement). Watches, which
stream, and every call through a proxy (``proxy-url``) still go through httpx.
"""

from __future__ import annotations

import http.client
import select
import socket
import ssl
import threading
import time
from typing import Any
from urllib.parse import quote

import httpx

from gpufleet.k8s.config import TokenSource
from gpufleet.k8s.errors import ApiConnectionError

# Every failure of the connection, as opposed to an answer from the server: OSError (refused, reset, timeouts,
# TLS: ssl.SSLError), HTTPException (closed without an answer, a cut or non-HTTP answer), ValueError (a header
# value http.client refuses to write, a malformed chunk size).
_NO_ANSWER = (OSError, http.client.HTTPException, ValueError)
NODELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]  # httpx's, for watches; http.client sets it itself
KEEPALIVE_EXPIRY_S = 90.0  # Go's http.Transport IdleConnTimeout
_PATH_SAFE = "/:@!$&'()*+,;=-._~"


class Answer:
    """Status, body and the one header the client reads."""

    __slots__ = ("content", "retry_after", "status")

    def __init__(self, status: int, content: bytes, retry_after: str | None) -> None:
        self.status = status
        self.content = content
        self.retry_after = retry_after


class _Plain(http.client.HTTPConnection):
    """http.client's connection, with one retry of a failed connect and what :class:`DirectCalls` reads of it:
    whether a call is using it and since when it has been idle."""

    busy = False  # a call is using it (read by another thread deciding whether it may close it)
    idle_since = 0.0

    def connect(self) -> None:
        try:
            super().connect()
        except OSError:  # refused, unreachable, timed out: tried once more (httpx's transport did: retries=1)
            super().connect()

    def _send_output(self, message_body: Any = None, encode_chunked: bool = False) -> None:
        """The request's head and a bytes body in one write (http.client writes them apart): one system call, and
        so one release of the GIL, fewer; a call's bodies are always whole bytes here."""
        if isinstance(message_body, bytes) and not encode_chunked:
            self._buffer.extend((b"", message_body))  # type: ignore[attr-defined]
            data = b"\r\n".join(self._buffer)  # type: ignore[attr-defined]
            del self._buffer[:]  # type: ignore[attr-defined]
            self.send(data)
            return
        super()._send_output(message_body, encode_chunked)  # type: ignore[misc]


class _TLS(_Plain):
    """TLS over :class:`_Plain`'s connect: the certificate verified against ``server_name`` (tls-server-name, or
    the host), which is also the name sent (SNI). A failed handshake is not retried."""

    def __init__(self, host: str, port: int, *, timeout: float, context: ssl.SSLContext,
                 server_name: str) -> None:
        super().__init__(host, port, timeout=timeout)
        self._context = context
        self._server_name = server_name

    def connect(self) -> None:
        super().connect()
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self._server_name)


def _reusable(connection: _Plain) -> bool:
    """Open, not idle past :data:`KEEPALIVE_EXPIRY_S`, and not readable: an idle connection with something to
    read has been closed by the server (or carries what no request asked for)."""
    sock = connection.sock
    if sock is None or time.monotonic() - connection.idle_since >= KEEPALIVE_EXPIRY_S:
        return False
    try:
        # poll, not select: a scheduler process may hold more than select's 1,024 descriptors (watches, webhook
        # and metrics clients), and select refuses any above that, which would make every call reconnect.
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return not poller.poll(0)
    except (OSError, ValueError):  # closed under us
        return False


class DirectCalls:
    def __init__(self, host: str, *, ssl_context: ssl.SSLContext | None, auth: TokenSource | None,
                 tls_server_name: str | None, timeout: float, user_agent: str) -> None:
        url = httpx.URL(host)
        tls = url.scheme == "https"
        self._host = url.host
        self._port = url.port or (443 if tls else 80)  # the scheme's default port when none is written
        self._prefix = url.raw_path.decode("ascii").rstrip("/")  # a server URL may carry a path (a gateway's)
        # httpx's netloc has an IPv6 literal's brackets, as the Host header must.
        self._host_header = url.netloc.decode("ascii")
        self._user_agent = user_agent
        self._auth = auth
        self._timeout = timeout
        # The certificate is verified against the name sent: tls-server-name, else the server's host.
        self._server_name = tls_server_name or url.host
        self._ssl_context = (ssl_context or ssl.create_default_context()) if tls else None
        self._local = threading.local()  # .connection: this thread's
        self._lock = threading.Lock()
        self._held: dict[int, _Plain] = {}  # thread ident -> its connection
        self._closed = False

    def close(self) -> None:
        with self._lock:
            self._closed = True
            held, self._held = list(self._held.values()), {}
        for connection in held:
            connection.close()

    def _open(self, timeout: float) -> _Plain:
        connection = _Plain(self._host, self._port, timeout=timeout) if self._ssl_context is None else _TLS(
            self._host, self._port, timeout=timeout, context=self._ssl_context, server_name=self._server_name)
        try:
            connection.connect()
        except BaseException:
            connection.close()
            raise
        return connection

    def _connection(self, timeout: float) -> _Plain:
        """This thread's connection: kept while the server keeps it open and it has not been idle for
        :data:`KEEPALIVE_EXPIRY_S` (:func:`_reusable`); else a new one, and the idle connections of threads that
        ended are closed. Refused once the client is closed."""
        held: _Plain | None = getattr(self._local, "connection", None)
        if held is not None and not self._closed and _reusable(held):
            return held
        if self._closed:
            raise ApiConnectionError("the client is closed")
        fresh = self._open(timeout)
        ident = threading.get_ident()
        gone = [] if held is None else [held]
        with self._lock:
            if self._closed:
                for connection in [*gone, fresh]:  # one opened while close() ran, say
                    connection.close()
                raise ApiConnectionError("the client is closed")
            alive = {t.ident for t in threading.enumerate()}
            # Idle ones only: a thread the threading module does not list (started by _thread or by C code) may
            # still be using its connection, and an idle one closed under it is only reopened.
            for other in [i for i, c in self._held.items() if i not in alive and not c.busy]:
                gone.append(self._held.pop(other))
            previous = self._held.get(ident)  # a thread that ended, whose ident this one reuses
            if previous is not None and previous is not held:
                gone.append(previous)
            self._held[ident] = fresh
        for connection in gone:
            connection.close()
        self._local.connection = fresh
        return fresh

    def call(self, method: str, path: str, query: str, content: bytes | None, content_type: str,
             timeout: float | None) -> Answer:
        """One call; raises :class:`ApiConnectionError` when no answer came (``path`` and ``query`` unquoted
        and encoded respectively)."""
        target = self._prefix + quote(path, safe=_PATH_SAFE)
        if query:
            target += "?" + query
        seconds = timeout or self._timeout
        token = self._auth.token() if self._auth is not None else None
        try:
            answer = self._send(method, target, content, content_type, token, seconds)
            if answer.status == 401 and self._auth is not None:
                fresh = self._auth.token(refresh=True)
                if fresh and fresh != token:
                    answer = self._send(method, target, content, content_type, fresh, seconds)
        except _NO_ANSWER as e:
            raise ApiConnectionError(f"{method} {path}: {e!r}") from e
        return answer

    def _send(self, method: str, target: str, content: bytes | None, content_type: str, token: str | None,
              timeout: float) -> Answer:
        connection = self._connection(timeout)
        connection.busy = True
        try:
            connection.timeout = timeout  # for a reconnect
            assert connection.sock is not None
            if connection.sock.gettimeout() != timeout:  # a system call (and a GIL release) saved when it is set
                connection.sock.settimeout(timeout)
            # putrequest and its skips: exactly the headers below (no Accept-Encoding: identity added).
            connection.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
            connection.putheader("Host", self._host_header)
            connection.putheader("User-Agent", self._user_agent)
            connection.putheader("Accept", "application/json")
            if content is not None:
                connection.putheader("Content-Type", content_type)
                connection.putheader("Content-Length", str(len(content)))
            if token:
                connection.putheader("Authorization", "Bearer " + token)
            connection.endheaders(content)
            response = connection.getresponse()
            body = response.read()  # whole: Content-Length, chunked, or until the connection ends
            answer = Answer(response.status, body, response.getheader("Retry-After"))
        except BaseException:
            # Its state is unknown (a request half written, an answer half read): closed, the next call opens one.
            connection.close()
            raise
        finally:
            connection.busy = False
        # An answer that ends the connection (Connection: close, HTTP/1.0, read until the end) leaves no socket:
        # _reusable says so on the next call.
        connection.idle_since = time.monotonic()
        return answer
