"""The dashboard beside a hundred slow clients (issue 30): each holds a connection and sends its request's headers
a byte at a time; the pages and the API must still be answered, each request within a second. The thread pool
this server had before (12 workers, 32 waiting) answered none of them."""

from __future__ import annotations

import threading
import time

import httpx

from tests.slow_clients import SlowClients
from tests.web.helpers import files_source, serving

SLOW = 100
WITHIN = 1.0  # seconds
PATHS = ("/api/overview", "/fleet", "/static/app.js", "/api/fleet?limit=5", "/api/queues") * 2


def test_pages_and_the_api_are_answered_within_a_second_beside_100_slow_clients() -> None:
    with serving(files_source()) as dashboard:
        threads = threading.active_count()
        clients = SlowClients(dashboard.port, SLOW, pace=0.5,
                              start=b"GET /api/overview HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
        clients.start()  # returns once every one of them holds a connection with its first bytes sent
        try:
            assert threading.active_count() <= threads + 1  # the clients' own thread: the server took none
            with httpx.Client(timeout=10.0) as client:
                for path in PATHS:
                    started = time.monotonic()
                    response = client.get(dashboard.url + path)
                    took = time.monotonic() - started
                    assert response.status_code == 200, (path, response.text[:200])
                    assert took < WITHIN, f"GET {path} took {took:.2f}s beside {clients.holding} slow clients"
            assert clients.holding >= SLOW * 0.9  # they were there all along (a few may be reconnecting)
        finally:
            clients.stop()
