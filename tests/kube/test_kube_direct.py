"""KubeClient's direct calls (gpufleet.k8s.direct) keep one connection per calling thread: counted by a real
HTTP/1.1 server on 127.0.0.1 that records every connection it accepts and when each one ends."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.errors import ApiConnectionError

WAIT_S = 10.0  # the most a test waits for the server to see something happen


class Peer(ThreadingHTTPServer):
    """Answers every GET with a small JSON object over keep-alive connections; counts connections."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.changed = threading.Condition()
        self.opened = 0
        self.ended = 0
        # Answer, then close the connection: saying so (Connection: close), or silently, as a server whose
        # keep-alive timeout ran out.
        self.close_after_answer: str | None = None  # None, "announced" or "silent"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def note(self, opened: int = 0, ended: int = 0) -> None:
        with self.changed:
            self.opened += opened
            self.ended += ended
            self.changed.notify_all()

    def wait_ended(self, count: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: self.ended >= count, WAIT_S), (
                f"the server saw {self.ended} of {count} connections end")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    server: Peer

    def setup(self) -> None:
        super().setup()
        self.server.note(opened=1)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.note(ended=1)

    def do_GET(self) -> None:
        body = json.dumps({"kind": "Pod", "path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if self.server.close_after_answer == "announced":
            self.send_header("Connection", "close")
        if self.server.close_after_answer:
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def peer() -> Iterator[Peer]:
    server = Peer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _get(client: KubeClient, name: str) -> None:
    assert client.request("GET", f"/api/v1/namespaces/ml/pods/{name}")["path"].endswith(name)


def _in_thread(client: KubeClient, calls: int) -> None:
    failures: list[BaseException] = []

    def run() -> None:
        try:
            for i in range(calls):
                _get(client, f"p-{i}")
        except BaseException as e:  # reported to the test below
            failures.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join(WAIT_S)
    assert not t.is_alive() and not failures, failures


def test_each_thread_keeps_one_connection_for_all_its_calls(peer: Peer) -> None:
    with KubeClient(host=peer.url, timeout=5.0) as client:
        for i in range(20):
            _get(client, f"p-{i}")
        assert peer.opened == 1
        for _ in range(3):
            _in_thread(client, 5)
        assert peer.opened == 4  # one per thread, none per call
        _get(client, "p-again")
        assert peer.opened == 4  # this thread's, alive, was not closed when the others opened theirs


def test_the_connection_of_a_thread_that_ended_is_closed_when_another_is_opened(peer: Peer) -> None:
    with KubeClient(host=peer.url, timeout=5.0) as client:
        _in_thread(client, 2)
        assert (peer.opened, peer.ended) == (1, 0)  # kept alive after its thread ended...
        _get(client, "p-main")  # ... until the next connection is opened
        peer.wait_ended(1)
        assert peer.opened == 2


@pytest.mark.parametrize("how", ["announced", "silent"])
def test_a_connection_the_server_closed_is_replaced(peer: Peer, how: str) -> None:
    peer.close_after_answer = how
    with KubeClient(host=peer.url, timeout=5.0) as client:
        _get(client, "p-1")
        peer.wait_ended(1)
        # Closed with a word, or found readable at end of file while idle (has_expired): a new one, no error.
        _get(client, "p-2")
        assert peer.opened == 2


def test_a_closed_client_closes_its_connections_and_refuses_calls(peer: Peer) -> None:
    client = KubeClient(host=peer.url, timeout=5.0)
    _get(client, "p-1")
    _in_thread(client, 1)
    client.close()
    peer.wait_ended(2)
    with pytest.raises(ApiConnectionError, match="closed"):
        _get(client, "p-2")
