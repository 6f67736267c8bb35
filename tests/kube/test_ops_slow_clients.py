"""The operations endpoints (probes and /metrics) beside a hundred slow clients (issue 30): the kubelet's probes
and Prometheus's scrapes must still be answered, each within a second; the old pool (4 workers, 8 waiting)
refused them, and a refused liveness probe restarts the scheduler."""

from __future__ import annotations

import threading
import time

import httpx
from tests.slow_clients import SlowClients

from gpufleet.k8s.health import Endpoints, OpsServer, Probe

SLOW = 100
WITHIN = 1.0


def test_probes_and_scrapes_are_answered_within_a_second_beside_100_slow_clients() -> None:
    endpoints = Endpoints(healthz=lambda: Probe(True, "ok"), readyz=lambda: Probe(True, "ready: leader"),
                          metrics=lambda: b"# TYPE up gauge\nup 1\n")
    server = OpsServer("127.0.0.1:0", endpoints)
    server.start()
    try:
        threads = threading.active_count()
        clients = SlowClients(server.port, SLOW, pace=0.5,
                              start=b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
        clients.start()
        try:
            assert threading.active_count() <= threads + 1  # the clients' own thread: the server took none
            with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=10.0) as c:
                for path, said in [("/healthz", "ok"), ("/readyz", "ready: leader"), ("/metrics", "up 1")] * 3:
                    started = time.monotonic()
                    response = c.get(path)
                    took = time.monotonic() - started
                    assert response.status_code == 200 and said in response.text
                    assert took < WITHIN, f"GET {path} took {took:.2f}s beside {clients.holding} slow clients"
        finally:
            clients.stop()
    finally:
        server.stop()
