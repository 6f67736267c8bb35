"""The operations endpoint: ``/healthz`` (the process works), ``/readyz`` (caches synced; says whether this
replica leads) and ``/metrics`` (Prometheus text format). Plain ``http.server`` on a thread: three GETs do not
deserve a web framework."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST

from gpufleet.kube.settings import parse_address


@dataclass(frozen=True, slots=True)
class Probe:
    ok: bool
    text: str


@dataclass(frozen=True, slots=True)
class Endpoints:
    healthz: Callable[[], Probe]
    readyz: Callable[[], Probe]
    metrics: Callable[[], bytes]


def _handler(endpoints: Endpoints) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, endpoints.metrics(), CONTENT_TYPE_LATEST)
                return
            probe = {"/healthz": endpoints.healthz, "/livez": endpoints.healthz,
                     "/readyz": endpoints.readyz}.get(path)
            if probe is None:
                self._send(404, b"not found\n", "text/plain")
                return
            result = probe()
            self._send(200 if result.ok else 503, (result.text + "\n").encode(), "text/plain; charset=utf-8")

        def _send(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a probe every few seconds would flood the logs

    return Handler


class ServerThread:
    """An HTTP server serving on a daemon thread, with the start/stop lifecycle the scheduler needs."""

    def __init__(self, server: ThreadingHTTPServer, name: str) -> None:
        self.server = server
        self.server.daemon_threads = True
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


def listen_address(address: str) -> tuple[str, int]:
    parsed = parse_address(address)
    if parsed is None:
        raise ValueError(f"bad listen address {address!r}")
    return parsed


class OpsServer(ServerThread):
    """One listener serving all three paths (the metrics and probe addresses may be the same or differ)."""

    def __init__(self, address: str, endpoints: Endpoints) -> None:
        super().__init__(ThreadingHTTPServer(listen_address(address), _handler(endpoints)), f"ops-{address}")
