"""Unary API calls on httpcore's connection pool (the engine under httpx), without httpx.Client's per-call
machinery.

``httpx.Client`` parses the URL three times and runs its header merge, cookie jar and auth flow on every
call: against the API emulator, 16 threads binding pods, a Binding through it costs 0.7-1.1 ms of CPU on the
2-core development machine, through this module 0.45 ms (bench/kube_client_calls.py, bench/README.md). A
scheduler binding hundreds of pods a second makes a Binding and an Event per pod: that is a good part of a
CPU core.

What httpx did for these calls is done here: the bearer token (and one retry with a fresh token after a
401, as client-go), the TLS context and server name, the timeouts, keep-alive connections (as many kept
as may be open, idle ones closed after 90 s as Go's transport does) and TCP_NODELAY (Go sets it on every
connection; without it a request's headers and body wait on each other's acknowledgement). Watches, which
stream, and every call through a proxy (``proxy-url``) still go through httpx.
"""

from __future__ import annotations

import socket
import ssl
from typing import Any
from urllib.parse import quote

import httpcore
import httpx

from gpufleet.kube.config import TokenSource
from gpufleet.kube.errors import ApiConnectionError

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
                 tls_server_name: str | None, timeout: float, user_agent: str, max_connections: int) -> None:
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
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context, max_connections=max_connections, max_keepalive_connections=max_connections,
            keepalive_expiry=KEEPALIVE_EXPIRY_S, retries=1, socket_options=NODELAY)

    def close(self) -> None:
        self._pool.close()

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
        extensions: dict[str, Any] = {"timeout": {"connect": seconds, "read": seconds, "write": seconds,
                                                  "pool": seconds}}
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
        return self._pool.request(method, url, headers=headers, content=content, extensions=extensions)
