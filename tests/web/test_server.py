"""The dashboard's server over real sockets: read-only, bounded, loopback-safe, and its pages self-contained."""

from __future__ import annotations

import gzip
import socket
import tomllib
from importlib import resources

import httpx
import pytest

from gpufleet.web.server import MAX_STREAMS, MAX_TARGET, Dashboard, is_loopback
from tests.conftest import REPO
from tests.web.helpers import get


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
def test_writes_are_refused_with_405(files_dashboard: Dashboard, method: str) -> None:
    response = httpx.request(method, files_dashboard.url + "/api/workloads", content=b'{"x": 1}', timeout=30.0)
    assert response.status_code == 405 and response.headers["Allow"] == "GET, HEAD"
    assert "read-only" in response.json()["message"]


def test_an_unknown_method_is_refused_as_json(files_dashboard: Dashboard) -> None:
    response = httpx.request("BREW", files_dashboard.url + "/fleet", timeout=30.0)
    assert response.status_code == 501 and "BREW" in response.json()["message"]
    assert response.headers["Content-Security-Policy"].startswith("default-src 'none'")


def test_requests_are_bounded(files_dashboard: Dashboard) -> None:
    long = get(files_dashboard, "/api/workloads?q=" + "x" * MAX_TARGET)
    assert long.status_code == 414
    with_body = httpx.request("GET", files_dashboard.url + "/api/overview", content=b"abc", timeout=30.0)
    assert with_body.status_code == 400 and "no body" in with_body.json()["message"]
    many = get(files_dashboard, "/api/workloads?" + "&".join(f"p{i}=1" for i in range(40)))
    assert many.status_code == 400 and "too many query parameters" in many.json()["message"]


def test_a_host_that_is_not_loopback_is_refused(files_dashboard: Dashboard) -> None:
    refused = get(files_dashboard, "/api/overview", headers={"Host": "attacker.example:8080"})
    assert refused.status_code == 403 and "DNS rebinding" in refused.json()["message"]
    for host in (f"localhost:{files_dashboard.port}", f"127.0.0.1:{files_dashboard.port}", "[::1]:80"):
        assert get(files_dashboard, "/api/overview", headers={"Host": host}).status_code == 200
    assert is_loopback("127.0.0.2") and is_loopback("::1") and not is_loopback("10.0.0.1")


def test_pages_static_files_and_headers(files_dashboard: Dashboard) -> None:
    root = get(files_dashboard, "/", follow_redirects=False)
    assert root.status_code == 302 and root.headers["Location"] == "/fleet"
    for page in ("/fleet", "/queues", "/workloads", "/whatif", "/workloads/research/llm-pretrain"):
        response = get(files_dashboard, page)
        assert response.status_code == 200 and response.headers["Content-Type"] == "text/html; charset=utf-8"
        assert '<script src="/static/app.js" defer></script>' in response.text
        assert "http://" not in response.text and "https://" not in response.text  # nothing from elsewhere
    js = get(files_dashboard, "/static/app.js")
    assert js.headers["Content-Type"].startswith("text/javascript")
    assert not any(f in js.text for f in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("))
    assert get(files_dashboard, "/static/app.css").headers["Content-Type"].startswith("text/css")
    assert get(files_dashboard, "/static/../server.py").status_code == 404
    api = get(files_dashboard, "/api/overview")
    csp = api.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe" not in csp
    assert api.headers["X-Content-Type-Options"] == "nosniff" and api.headers["Cache-Control"] == "no-store"
    head = httpx.head(files_dashboard.url + "/api/overview", timeout=30.0)
    assert head.status_code == 200 and head.content == b"" and int(head.headers["Content-Length"]) > 0


def test_large_answers_are_compressed_when_asked(files_dashboard: Dashboard) -> None:
    with socket.create_connection(("127.0.0.1", files_dashboard.port), timeout=30) as sock:
        sock.sendall(b"GET /api/fleet HTTP/1.1\r\nHost: localhost\r\nAccept-Encoding: gzip\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"Content-Encoding: gzip" in head
    assert gzip.decompress(body).startswith(b'{"version":1,"pools":')


def test_event_streams_are_bounded(files_dashboard: Dashboard) -> None:
    streams = []
    try:
        for _ in range(MAX_STREAMS):
            sock = socket.create_connection(("127.0.0.1", files_dashboard.port), timeout=30)
            sock.sendall(b"GET /api/events HTTP/1.1\r\nHost: localhost\r\n\r\n")
            first = b""
            while b"}\n\n" not in first:  # the stream may come chunked (HTTP/1.1): the event is in the first chunk
                first += sock.recv(4096)
            assert b"text/event-stream" in first and b"event: version\ndata: {\"version\": 1}" in first
            streams.append(sock)
        refused = get(files_dashboard, "/api/events")
        assert refused.status_code == 503 and refused.headers["Retry-After"] == "5"
    finally:
        for sock in streams:
            sock.close()


def test_the_pages_ship_as_package_data() -> None:
    static = resources.files("gpufleet.web").joinpath("static")
    shipped = {p.name for p in static.iterdir()}
    assert {"index.html", "app.js", "app.css", "favicon.svg"} <= shipped
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["gpufleet"]
    for name in shipped:
        assert f"web/static/*{name[name.rindex('.'):]}" in patterns, name
