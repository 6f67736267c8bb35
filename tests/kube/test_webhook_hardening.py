"""The webhook server against hostile clients, over real TLS sockets: every malformed request gets a 400 that
says what is wrong, slow clients are cut off by deadlines, a flood of idle connections costs no threads, and no
answer grows past its bound. (Many slow clients at once: test_webhook_slow_clients.py.)"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet.admission.webhook import MAX_PATCH_BYTES, WebhookPolicy
from gpufleet.admission.webhook_server import MAX_DEPTH, WebhookServer, make_handler
from gpufleet.k8s.serving import HttpServer, ServingLimits

TLS = Path(__file__).parent / "webhook_tls"
JsonDict = dict[str, Any]

# Deadlines short enough for a test, long enough for a loaded 2-core machine to finish a handshake.
LIMITS = ServingLimits(workers=2, queue=2, handshake_timeout=2.0, read_timeout=2.0)


@pytest.fixture
def server() -> Iterator[WebhookServer]:
    s = WebhookServer("127.0.0.1:0", str(TLS / "tls.crt"), str(TLS / "tls.key"),
                      WebhookPolicy("gpufleet", runtime_class_name="nvidia"), LIMITS)
    s.start()
    try:
        yield s
    finally:
        s.stop()


def _trust() -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(TLS / "tls.crt"))


def tls_connect(port: int) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=10.0)
    return _trust().wrap_socket(raw, server_hostname="localhost")


def _answer(data: bytes) -> tuple[int, bytes]:
    status_line, _, rest = data.partition(b"\r\n")
    _, _, payload = rest.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), payload


def exchange(port: int, head: bytes, body: bytes = b"") -> tuple[int, bytes]:
    """Send raw bytes over TLS; the status code and the body of the answer."""
    with tls_connect(port) as s:
        s.sendall(head + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return _answer(data)


def request_head(body: bytes, *, content_type: str | None = "application/json", length: str | None = None,
                 path: str = "/mutate-pods") -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: localhost\r\n"
    if content_type is not None:
        head += f"Content-Type: {content_type}\r\n"
    return (head + f"Content-Length: {len(body) if length is None else length}\r\n\r\n").encode()


def post(port: int, body: bytes, **head: Any) -> tuple[int, bytes]:
    return exchange(port, request_head(body, **head), body)


def message(payload: bytes) -> str:
    answer = json.loads(payload)
    assert set(answer) == {"message"} and answer["message"]
    return str(answer["message"])


def review_body(obj: Any, **request: Any) -> JsonDict:
    req = {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE",
           "object": obj, **request}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


def fraction_pod(**spec: Any) -> JsonDict:
    return {"metadata": {"name": "p", "annotations": {"gpufleet.io/gpu-fraction": "0.5"}},
            "spec": {"schedulerName": "gpufleet", "containers": [{"name": "main", "image": "busybox"}], **spec}}


def encode(value: Any) -> bytes:
    return json.dumps(value).encode()


# --- malformed requests: 400 with a message ------------------------------------------------------------------


@pytest.mark.parametrize("length, said", [
    ("abc", "Content-Length: b'Content-Length: abc'"),  # aiohttp's parser refuses these, quoting the header
    ("-5", "Content-Length: b'Content-Length: -5'"),
    ("²", "Content-Length: b'Content-Length: \\xc2\\xb2'"),
    ("1e3", "Content-Length: b'Content-Length: 1e3'"),
    ("0", "the body is empty"),
    ("99999999999", "larger than"),
])
def test_a_bad_content_length_is_a_400_with_a_message(server: WebhookServer, length: str, said: str) -> None:
    # With a length of 0 nothing follows the headers: bytes after them would be the next request.
    status, payload = post(server.port, b"" if length == "0" else b"{}", length=length)
    assert status == 400 and said in message(payload)


def test_a_missing_content_length_and_a_chunked_body_are_400(server: WebhookServer) -> None:
    status, payload = exchange(server.port, b"POST /mutate-pods HTTP/1.1\r\nHost: x\r\n"
                                            b"Content-Type: application/json\r\n\r\n")
    assert status == 400 and "Content-Length header is required" in message(payload)
    status, payload = exchange(server.port, b"POST /mutate-pods HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                                            b"Content-Type: application/json\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
    assert status == 400 and "Transfer-Encoding" in message(payload)


def test_a_body_that_stops_coming_is_a_408_at_the_read_deadline(server: WebhookServer) -> None:
    body = encode(review_body(fraction_pod()))
    started = time.monotonic()
    status, payload = post(server.port, body[:50], length=str(len(body)))
    assert status == 408 and "did not arrive within 2s" in message(payload)
    assert LIMITS.read_timeout * 0.9 <= time.monotonic() - started < LIMITS.read_timeout + 8.0


def test_a_body_cut_short_by_the_client_ends_the_connection_at_once() -> None:
    # The same handler on a plain socket, where a client can end its side: the server closes the connection then
    # (asyncio's transports close on a half-close; the client has said it sends nothing more), not at the read
    # deadline, and keeps serving.
    plain = HttpServer(("127.0.0.1", 0), make_handler(WebhookPolicy()), LIMITS, name="plain")
    plain.start()
    try:
        body = encode(review_body(fraction_pod()))
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", plain.port), timeout=10.0) as s:
            s.sendall(request_head(body) + body[:50])
            s.shutdown(socket.SHUT_WR)
            assert _closed_by_server(s, within=LIMITS.read_timeout * 0.9)
        assert time.monotonic() - started < LIMITS.read_timeout * 0.9
        with socket.create_connection(("127.0.0.1", plain.port), timeout=10.0) as s:
            s.sendall(request_head(body) + body)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        assert _answer(data)[0] == 200
    finally:
        plain.stop()


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/yaml", "application/jsonx"])
def test_only_json_is_accepted(server: WebhookServer, content_type: str | None) -> None:
    status, payload = post(server.port, encode(review_body(fraction_pod())), content_type=content_type)
    assert status == 400 and "send application/json" in message(payload)


def test_json_with_a_charset_parameter_is_accepted(server: WebhookServer) -> None:
    status, payload = post(server.port, encode(review_body(fraction_pod())),
                           content_type="application/json; charset=utf-8")
    assert status == 200 and json.loads(payload)["response"]["uid"] == "u-1"


@pytest.mark.parametrize("body, said", [
    (b"\xff\xfe{\x00}\x00", "not UTF-8"),
    ("{}".encode("utf-16"), "not UTF-8"),
    (b"[" * 1_000_000 + b"]" * 1_000_000, f"more than the {MAX_DEPTH} allowed"),
    (b'{"a": ' * (MAX_DEPTH + 1) + b"1" + b"}" * (MAX_DEPTH + 1), "nested"),
    (b"{not json", "not valid JSON"),
    (b'{"request": NaN}', "NaN"),
    (b"1" * 5000, "not valid JSON"),  # past Python's 4,300-digit int limit
    (b'"a string"', "the body: expected an object, got a string"),
    (encode({"kind": "AdmissionReview"}), "not an AdmissionReview"),
])
def test_undecodable_bodies_are_400_with_the_reason(server: WebhookServer, body: bytes, said: str) -> None:
    status, payload = post(server.port, body)
    assert status == 400 and said in message(payload)


def test_brackets_inside_strings_do_not_count_as_nesting(server: WebhookServer) -> None:
    pod = fraction_pod()
    pod["metadata"]["annotations"]["note"] = "[" * 10_000 + '\\"{' * 100
    status, payload = post(server.port, encode(review_body(pod)))
    assert status == 200 and json.loads(payload)["response"]["allowed"] is True


@pytest.mark.parametrize("mangle, field", [
    (lambda b: b.update(request="a string"), "request: expected an object, got a string"),
    (lambda b: b["request"].update(uid=7), "request.uid: expected a string, got a number"),
    (lambda b: b["request"].update(uid=""), "request.uid: expected 1 to 128 characters"),
    (lambda b: b["request"].update(kind="Pod"), "request.kind: expected an object"),
    (lambda b: b["request"].update(object=[]), "request.object: expected an object, got an array"),
    (lambda b: b["request"].pop("object"), "request.object: a Pod CREATE carries the pod"),
    (lambda b: b["request"]["object"].update(metadata="m"), "request.object.metadata: expected an object"),
    (lambda b: b["request"]["object"]["metadata"].update(annotations=["x"]), "metadata.annotations: expected"),
    (lambda b: b["request"]["object"]["metadata"]["annotations"].update(x=1), "annotations['x']: expected a string"),
    (lambda b: b["request"]["object"].update(spec=3), "request.object.spec: expected an object, got a number"),
    (lambda b: b["request"]["object"]["spec"].update(containers={}), "spec.containers: expected an array"),
    (lambda b: b["request"]["object"]["spec"]["containers"].append("c"), "spec.containers[1]: expected an object"),
    (lambda b: b["request"]["object"]["spec"]["containers"][0].update(env="x"), "containers[0].env: expected an array"),
    (lambda b: b["request"]["object"]["spec"]["containers"][0].update(env=[1]), "containers[0].env[0]: expected"),
    (lambda b: b["request"]["object"]["spec"]["containers"][0].update(env=[{"name": []}]), "env[0].name: expected"),
    (lambda b: b["request"]["object"]["spec"]["containers"][0].update(resources=[]), "containers[0].resources:"),
    (lambda b: b["request"]["object"]["spec"]["containers"][0].update(resources={"limits": "8"}), ".limits:"),
    (lambda b: b["request"]["object"]["spec"].update(schedulerName={}), "spec.schedulerName: expected a string"),
])
def test_a_wrong_shape_anywhere_is_a_400_naming_the_field(server: WebhookServer, mangle: Any, field: str) -> None:
    body = review_body(fraction_pod())
    mangle(body)
    status, payload = post(server.port, encode(body))
    assert status == 400 and field in message(payload)


def test_other_paths_are_404_and_other_kinds_are_allowed_untouched(server: WebhookServer) -> None:
    status, payload = post(server.port, encode(review_body(fraction_pod())), path="/validate")
    assert status == 404 and "POST /mutate-pods" in message(payload)
    status, payload = post(server.port, encode(review_body({"anything": ["goes"]}, kind={"kind": "Service"})))
    assert status == 200 and json.loads(payload)["response"] == {"uid": "u-1", "allowed": True}


# --- bounded answers --------------------------------------------------------------------------------------------


def test_a_pod_of_200000_tiny_containers_is_refused_with_a_small_answer(server: WebhookServer) -> None:
    # 2.6 MB of {"name":"x"}: each container would need a 200-byte env entry, a 58 MB answer before the bound.
    body = json.dumps(review_body(fraction_pod(containers=[{"name": "x"}] * 200_000)), separators=(",", ":"))
    assert len(body) > 2_500_000
    status, payload = post(server.port, body.encode())
    assert status == 200 and len(payload) < 2_000
    response = json.loads(payload)["response"]
    assert response["allowed"] is False and "patch" not in response
    assert "200,000 containers" in response["status"]["message"]
    assert f"more than {MAX_PATCH_BYTES:,} bytes" in response["status"]["message"]


def test_the_patch_is_proportional_to_the_containers_it_mutates(server: WebhookServer) -> None:
    sizes = {}
    for n in (1, 10, 100):
        status, payload = post(server.port, encode(review_body(fraction_pod(
            containers=[{"name": f"c{i}", "image": "busybox"} for i in range(n)]))))
        assert status == 200
        patch = base64.b64decode(json.loads(payload)["response"]["patch"])
        assert len(json.loads(patch)) == n + 1  # one env entry per container, and the runtime class
        sizes[n] = len(patch)
    per_container = (sizes[100] - sizes[10]) / 90
    assert 150 < per_container < 256  # one compact env entry each (~200 bytes), nothing that grows with the pod
    assert sizes[100] < MAX_PATCH_BYTES


# --- slow and many clients -----------------------------------------------------------------------------------


def _closed_by_server(sock: socket.socket, within: float) -> bool:
    sock.settimeout(within)
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_a_client_that_never_handshakes_is_cut_off(server: WebhookServer) -> None:
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10.0) as idle:
        assert _closed_by_server(idle, within=LIMITS.handshake_timeout + 8.0)
    assert time.monotonic() - started >= LIMITS.handshake_timeout * 0.9


def test_a_client_trickling_its_headers_is_cut_off_at_the_read_deadline(server: WebhookServer) -> None:
    started = time.monotonic()
    with tls_connect(server.port) as s:
        s.sendall(b"POST /mutate-pods HTTP/1.1\r\n")
        cut = False
        for i in range(200):  # one header byte every 50 ms: each read is fast, the request never ends
            try:
                s.sendall(b"X-Slow: " + str(i).encode() + b"\r\n")
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                cut = True
                break
            if _closed_by_server(s, within=0.05):
                cut = True
                break
        assert cut, "the server kept reading a request that never ends"
    elapsed = time.monotonic() - started
    assert LIMITS.read_timeout * 0.9 <= elapsed < LIMITS.read_timeout + 8.0


def test_a_flood_of_idle_connections_holds_no_threads_and_requests_are_still_answered(
    server: WebhookServer,
) -> None:
    before = threading.active_count()
    idle = [socket.create_connection(("127.0.0.1", server.port), timeout=10.0) for _ in range(20)]
    try:
        # Ten times the workers and the queue together: the old thread pool refused these.
        assert post(server.port, encode(review_body(fraction_pod())))[0] == 200
        # The answer took one worker thread; the 20 connections took none.
        assert threading.active_count() <= before + 1
        # They are cut at the handshake deadline all the same.
        assert all(_closed_by_server(s, within=LIMITS.handshake_timeout + 8.0) for s in idle)
    finally:
        for s in idle:
            s.close()
