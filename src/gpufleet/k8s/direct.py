"""Unary API calls straight on httpcore (the engine under httpx), without httpx.Client's per-call machinery and
without httpcore's connection pool.

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

What httpx did for these calls is done here: the bearer token (and one retry with a fresh token after a
401, as client-go), the TLS context and server name, the timeouts, keep-alive connections (closed after 90 s
idle, as Go's transport does) and TCP_NODELAY (Go sets it on every connection; without it a request's headers
and body wait on each other's acknowledgement). Watches, which stream, and every call through a proxy
(``proxy-url``) still go through httpx.
"""

from __future__ import annotations

import socket
import ssl
import threading
from typing import Any
from urllib.parse import quote

import httpcore
import httpx

from gpufleet.k8s.config import TokenSource
from gpufleet.k8s.errors import ApiConnectionError

# Every failure of the connection, as opposed to an answer from the server.
_NO_ANSWER = (httpcore.TimeoutException, httpcore.NetworkError, httpcore.ProtocolError, httpcore.ProxyError,
              httpcore.UnsupportedProtocol)
NODELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
KEEPALIVE_EXPIRY_S = 90.0  # Go's http.Transport IdleConnTimeout
_PATH_SAFE = "/:@!$&'()*+,;=-._~"


class Answer:
    """Status, body and the one header the client reads."""

    __slots__ = ("content", "retry_after", "status")

    def __init__(self, status: int, content: bytes, retry_after: str | None) -> None:
        self.status = status
        self.content = content
        self.retry_after = retry_after


class DirectCalls:
    def __init__(self, host: str, *, ssl_context: ssl.SSLContext | None, auth: TokenSource | None,
                 tls_server_name: str | None, timeout: float, user_agent: str) -> None:
        url = httpx.URL(host)
        self._scheme = url.raw_scheme
        self._host = url.raw_host
        self._port = url.port
        self._prefix = url.raw_path.rstrip(b"/")  # a server URL may carry a path (an API gateway's prefix)
        # httpcore would write an IPv6 literal without its brackets; httpx's netloc has them.
        self._headers = [(b"Host", url.netloc), (b"User-Agent", user_agent.encode()),
                         (b"Accept", b"application/json")]
        self._auth = auth
        self._timeout = timeout
        self._sni = tls_server_name
        self._ssl_context = ssl_context
        # As every request's URL gives it (the scheme's default port when none is written).
        self._origin = httpcore.URL(scheme=self._scheme, host=self._host, port=self._port, target=b"/").origin
        self._local = threading.local()  # .connection: this thread's
        self._lock = threading.Lock()
        self._held: dict[int, httpcore.HTTPConnection] = {}  # thread ident -> its connection
        self._closed = False

    def close(self) -> None:
        with self._lock:
            self._closed = True
            held, self._held = list(self._held.values()), {}
        for connection in held:
            connection.close()

    def _connection(self) -> httpcore.HTTPConnection:
        """This thread's connection: kept while the server keeps it open and it has not been idle for
        :data:`KEEPALIVE_EXPIRY_S` (``has_expired``, which the pool asked too); else a new one, and the idle
        connections of threads that ended are closed. Refused once the client is closed."""
        held: httpcore.HTTPConnection | None = getattr(self._local, "connection", None)
        if held is not None and not self._closed and not held.is_closed() and not held.has_expired():
            return held
        fresh = httpcore.HTTPConnection(self._origin, ssl_context=self._ssl_context,
                                        keepalive_expiry=KEEPALIVE_EXPIRY_S, retries=1, socket_options=NODELAY)
        ident = threading.get_ident()
        gone = [] if held is None else [held]
        with self._lock:
            if self._closed:
                for connection in gone:  # one opened while close() ran, say
                    connection.close()
                raise ApiConnectionError("the client is closed")
            alive = {t.ident for t in threading.enumerate()}
            # Idle ones only: a thread the threading module does not list (started by _thread or by C code) may
            # still be using its connection, and an idle one closed under it is only reopened.
            for other in [i for i, c in self._held.items() if i not in alive and c.is_idle()]:
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
        target = self._prefix + quote(path, safe=_PATH_SAFE).encode()
        if query:
            target += b"?" + query.encode()
        url = httpcore.URL(scheme=self._scheme, host=self._host, port=self._port, target=target)
        headers = list(self._headers)
        if content is not None:
            headers.append((b"Content-Type", content_type.encode()))
        seconds = timeout or self._timeout
        extensions: dict[str, Any] = {"timeout": {"connect": seconds, "read": seconds, "write": seconds}}
        if self._sni:
            extensions["sni_hostname"] = self._sni
        token = self._auth.token() if self._auth is not None else None
        try:
            response = self._send(method, url, headers, token, content, extensions)
            if response.status == 401 and self._auth is not None:
                fresh = self._auth.token(refresh=True)
                if fresh and fresh != token:
                    response = self._send(method, url, headers, fresh, content, extensions)
        except _NO_ANSWER as e:
            raise ApiConnectionError(f"{method} {path}: {e!r}") from e
        retry_after = next((v.decode("latin-1") for k, v in response.headers if k.lower() == b"retry-after"), None)
        return Answer(response.status, response.content, retry_after)

    def _send(self, method: str, url: httpcore.URL, headers: list[tuple[bytes, bytes]], token: str | None,
              content: bytes | None, extensions: dict[str, Any]) -> httpcore.Response:
        if token:
            headers = [*headers, (b"Authorization", b"Bearer " + token.encode())]
        try:
            return self._connection().request(method, url, headers=headers, content=content, extensions=extensions)
        except httpcore.ConnectionNotAvailable:
            # It closed between the check and the request (the pool retries on another connection then): a fresh one.
            self._local.connection = None
            return self._connection().request(method, url, headers=headers, content=content, extensions=extensions)
