"""Serves the mutating webhook (:mod:`gpufleet.kube.webhook`) over HTTPS, as the API server requires.

The certificate is reloaded when its file changes (cert-manager rotates it in the mounted Secret): each new
connection is wrapped with the context current at that moment, so rotation needs no restart.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from gpufleet.kube.health import ServerThread, listen_address
from gpufleet.kube.webhook import MUTATE_PATH, WebhookPolicy, review

log = logging.getLogger(__name__)

_MAX_BODY = 3 * 1024 * 1024  # an AdmissionReview carries one object; the API server caps those near 1.5 MiB


class _Certificates:
    def __init__(self, cert_file: str, key_file: str) -> None:
        self.cert_file, self.key_file = cert_file, key_file
        self._lock = threading.Lock()
        self._stamp: tuple[float, float] | None = None
        self._context: ssl.SSLContext | None = None
        try:
            self._context = self._load()
        except (OSError, ssl.SSLError) as e:
            # At install time cert-manager may not have written the Secret yet: serve as soon as it has.
            log.info("webhook certificate not loaded (%s): connections are refused until it exists", e)

    def _load(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.cert_file, self.key_file)
        self._stamp = (os.stat(self.cert_file).st_mtime, os.stat(self.key_file).st_mtime)
        return ctx

    def current(self) -> ssl.SSLContext:
        with self._lock:
            try:
                stamp = (os.stat(self.cert_file).st_mtime, os.stat(self.key_file).st_mtime)
                if stamp != self._stamp:
                    self._context = self._load()
            except (OSError, ssl.SSLError) as e:  # mid-rotation: keep serving the last good pair
                log.warning("webhook certificate reload failed: %s", e)
            if self._context is None:
                raise OSError(f"no webhook certificate at {self.cert_file} yet")
            return self._context


def _handler(policy: WebhookPolicy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.path.split("?", 1)[0] != MUTATE_PATH:
                self._send(404, {"message": "not found"})
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length <= 0 or length > _MAX_BODY:
                self._send(400, {"message": "an AdmissionReview body is required"})
                return
            try:
                answer = review(json.loads(self.rfile.read(length)), policy)
            except ValueError as e:
                self._send(400, {"message": f"bad AdmissionReview: {e}"})
                return
            self._send(200, answer)

        def _send(self, code: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("webhook: " + format, *args)

    return Handler


class _TlsServer(ThreadingHTTPServer):
    """Wraps each accepted connection with the certificate current at that moment."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], certs: _Certificates) -> None:
        super().__init__(address, handler)
        self.certs = certs

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = self.socket.accept()
        try:
            context = self.certs.current()
        except OSError:
            sock.close()  # no certificate yet: refuse this one (the API server retries or fails the pod)
            raise
        # The handshake runs in the request thread (first read), so a slow client cannot stall accept().
        return context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr


class WebhookServer(ServerThread):
    def __init__(self, address: str, cert_file: str, key_file: str, policy: WebhookPolicy) -> None:
        super().__init__(_TlsServer(listen_address(address), _handler(policy), _Certificates(cert_file, key_file)),
                         "webhook")
