"""KubeClient's direct calls (gpufleet.k8s.direct) keep one connection per calling thread: counted by a real
HTTP/1.1 server on 127.0.0.1 that records every connection it accepts and when each one ends."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.errors import ApiConnectionError, TooManyRequests

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

    def shutdown_request(self, request: Any) -> None:
        # Counted once its socket is closed, not when its handler returns (before the close): a client told the
        # connection ended must find it closed (CI once saw a silent close counted, then raced, on a loaded machine).
        try:
            super().shutdown_request(request)
        finally:
            self.note(ended=1)

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


def test_a_connection_on_a_descriptor_above_1024_is_kept(peer: Peer) -> None:
    """A busy scheduler holds many descriptors (watches, listeners, clients): the idle check must not need the
    connection's to be below select's limit, or every call would open a new connection."""
    pipes = []
    try:
        while len(pipes) < 600:  # 1,200 descriptors: the connection opened next is numbered above 1,024
            pipes.append(os.pipe())
        with KubeClient(host=peer.url, timeout=5.0) as client:
            for i in range(5):
                _get(client, f"p-{i}")
            assert peer.opened == 1
    finally:
        for a, b in pipes:
            os.close(a)
            os.close(b)


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


# --- the HTTP/1.1 read here: answers as servers write them ---------------------------------------------------------


class Scripted:
    """A server on 127.0.0.1 that reads each request (head and Content-Length body) and writes the next scripted
    answer, byte for byte; ``None`` closes the connection instead of answering, and an HTTP/1.0 answer is followed
    by the end of the connection."""

    def __init__(self, answers: list[bytes | None]) -> None:
        self.answers = list(answers)
        self.requests: list[bytes] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while self.answers:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn, conn.makefile("rb") as reader:  # both closed: the connection ends only then
                while self.answers:
                    head = b""
                    while not head.endswith(b"\r\n\r\n"):
                        line = reader.readline()
                        if not line:
                            break
                        head += line
                    if not head:
                        break
                    length = next((int(x.split(b":")[1]) for x in head.split(b"\r\n")
                                   if x.lower().startswith(b"content-length:")), 0)
                    self.requests.append(head + reader.read(length))
                    answer = self.answers.pop(0)
                    if answer is None:
                        break  # close without a word
                    conn.sendall(answer)
                    if answer.startswith(b"HTTP/1.0"):
                        break

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def scripted() -> Iterator[Callable[[list[bytes | None]], Scripted]]:
    made: list[Scripted] = []

    def make(answers: list[bytes | None]) -> Scripted:
        made.append(Scripted(answers))
        return made[-1]

    yield make
    for server in made:
        server.close()


def _json(status: str, body: bytes, *extra: bytes) -> bytes:
    return b"HTTP/1.1 " + status.encode() + b"\r\nContent-Type: application/json\r\n" + b"".join(
        e + b"\r\n" for e in extra) + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body


def test_chunked_and_close_delimited_answers_are_read_whole(scripted: Callable[..., Scripted]) -> None:
    chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"5\r\n{\"a\":\r\n3;ext=1\r\n 12\r\n1\r\n}\r\n0\r\nX-Trailer: t\r\n\r\n")
    ended = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"b\": 2}"  # no length: until the end
    server = scripted([b"HTTP/1.1 100 Continue\r\n\r\n" + chunked, ended, _json("200 OK", b'{"c": 3}')])
    with KubeClient(host=server.url, timeout=5.0) as client:
        assert client.request("GET", "/a") == {"a": 12}
        assert client.request("GET", "/b") == {"b": 2}
        assert client.request("GET", "/c") == {"c": 3}  # on a new connection: the last answer ended the other


def test_the_request_carries_its_body_headers_and_token(scripted: Callable[..., Scripted]) -> None:
    server = scripted([_json("201 Created", b"{}")])
    with KubeClient(host=server.url + "/prefix", timeout=5.0) as client:
        client.request("POST", "/api/v1/namespaces/ml/pods/p 1/binding", params={"dryRun": "All"},
                       body={"target": {"name": "n1"}})
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /prefix/api/v1/namespaces/ml/pods/p%201/binding?dryRun=All HTTP/1.1"
    assert f"Host: 127.0.0.1:{server.url.rsplit(':', 1)[1]}".encode() in lines
    assert b"Content-Type: application/json" in lines and f"Content-Length: {len(body)}".encode() in lines
    assert json.loads(body) == {"target": {"name": "n1"}}


def test_an_error_answer_keeps_its_status_and_retry_after(scripted: Callable[..., Scripted]) -> None:
    status = json.dumps({"kind": "Status", "code": 429, "reason": "TooManyRequests", "message": "slow"}).encode()
    server = scripted([_json("429 Too Many Requests", status, b"Retry-After: 3"), b"HTTP/1.1 204 No Content\r\n\r\n"])
    with KubeClient(host=server.url, timeout=5.0) as client:
        with pytest.raises(TooManyRequests) as caught:
            client.request("POST", "/x", body={})
        assert caught.value.retry_after == 3
        client.request("DELETE", "/y")  # 204: no body, and the connection kept
    assert len(server.requests) == 2


@pytest.mark.parametrize("answer", [None, b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{\"a\"", b"garbage\r\n\r\n"],
                         ids=["closed", "cut", "not-http"])
def test_no_answer_or_a_broken_one_is_a_connection_error(scripted: Callable[..., Scripted],
                                                         answer: bytes | None) -> None:
    server = scripted([answer, _json("200 OK", b'{"ok": true}')])
    with KubeClient(host=server.url, timeout=5.0) as client:
        with pytest.raises(ApiConnectionError):
            client.request("POST", "/bind", body={})
        assert client.request("GET", "/again") == {"ok": True}  # a fresh connection after the broken one


@pytest.mark.parametrize("refusals", [1, 2])
def test_a_failed_connect_is_tried_once_more(peer: Peer, monkeypatch: pytest.MonkeyPatch, refusals: int) -> None:
    port = peer.server_address[1]
    left = [refusals]
    real = socket.socket.connect

    def connect(self: socket.socket, address: object) -> None:
        if isinstance(address, tuple) and address[1] == port and left[0] > 0:
            left[0] -= 1
            raise ConnectionRefusedError(111, "refused (the test's)")
        real(self, address)  # type: ignore[arg-type]

    monkeypatch.setattr(socket.socket, "connect", connect)
    with KubeClient(host=peer.url, timeout=5.0) as client:
        if refusals == 1:
            _get(client, "p-1")  # the second try connects
            assert peer.opened == 1
        else:
            with pytest.raises(ApiConnectionError, match="refused"):
                _get(client, "p-1")
            assert peer.opened == 0
    assert left == [0]
