"""The webhook beside a hundred slow clients (issue 30): each holds a TLS connection and sends its headers, or its
body, a byte at a time; ordinary AdmissionReviews must still be answered, each within a second. The thread pool
this server had before (8 workers, 16 waiting) refused them all."""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Iterator

import pytest
from test_webhook_hardening import TLS, encode, fraction_pod, post, review_body
from tests.slow_clients import START, SlowClients

from gpufleet.admission.webhook import WebhookPolicy
from gpufleet.admission.webhook_server import WebhookServer

SLOW = 100
ORDINARY = 10
WITHIN = 1.0  # seconds: the API server gives a webhook 5, and a pod's creation waits on it
HEADERS_DONE = (b"POST /mutate-pods HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                b"Content-Length: 100000\r\n\r\n{")


def trust() -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(TLS / "tls.crt"))


@pytest.fixture
def server() -> Iterator[WebhookServer]:
    # The default limits: deadlines of 10 s, so the slow clients hold their connections through the test.
    s = WebhookServer("127.0.0.1:0", str(TLS / "tls.crt"), str(TLS / "tls.key"), WebhookPolicy("gpufleet"))
    s.start()
    try:
        yield s
    finally:
        s.stop()


@pytest.mark.parametrize("start", [START, HEADERS_DONE], ids=["headers", "body"])
def test_ordinary_reviews_are_answered_within_a_second_beside_100_slow_clients(server: WebhookServer,
                                                                                start: bytes) -> None:
    threads = threading.active_count()
    clients = SlowClients(server.port, SLOW, pace=0.5, tls=trust, start=start)
    clients.start()  # returns once every one of them holds a connection with its first bytes sent
    try:
        assert threading.active_count() <= threads + 1  # the clients' own thread: the server took none for them
        body = encode(review_body(fraction_pod()))
        for _ in range(ORDINARY):
            started = time.monotonic()
            status, payload = post(server.port, body)
            took = time.monotonic() - started
            assert status == 200 and json.loads(payload)["response"]["allowed"] is True
            assert took < WITHIN, f"an ordinary review took {took:.2f}s beside {clients.holding} slow clients"
        assert clients.holding >= SLOW * 0.9  # they were there all along (a few may be reconnecting)
    finally:
        clients.stop()
