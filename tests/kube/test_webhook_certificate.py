"""The webhook's certificate follows its files (cert-manager writes the Secret after the install, and rotates it):
no certificate yet, handshakes are refused; once the files exist they are served, and a rotated pair is served to
the next handshake, with no restart."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
from pathlib import Path

import pytest
from test_webhook_hardening import LIMITS, TLS, encode, fraction_pod, post, review_body

from gpufleet.admission.webhook import WebhookPolicy
from gpufleet.admission.webhook_server import WebhookServer


def handshake(port: int, cafile: Path) -> bytes:
    """The DER certificate the server presents to a client that trusts ``cafile``."""
    context = ssl.create_default_context(cafile=str(cafile))
    with socket.create_connection(("127.0.0.1", port), timeout=10.0) as raw, \
            context.wrap_socket(raw, server_hostname="localhost") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def self_signed(folder: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a second certificate")
    cert, key = folder / "new.crt", folder / "new.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def test_the_certificate_is_served_once_it_exists_and_follows_its_rotation(tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    server = WebhookServer("127.0.0.1:0", str(cert), str(key), WebhookPolicy(), LIMITS)
    server.start()
    try:
        with pytest.raises((ssl.SSLError, ConnectionResetError)):
            handshake(server.port, TLS / "tls.crt")  # no certificate yet: the handshake is refused
        shutil.copy(TLS / "tls.crt", cert)
        shutil.copy(TLS / "tls.key", key)
        assert post(server.port, encode(review_body(fraction_pod())))[0] == 200
        first = handshake(server.port, TLS / "tls.crt")

        new_cert, new_key = self_signed(tmp_path)
        os.replace(new_key, key)
        os.replace(new_cert, cert)
        stamp = os.stat(cert).st_mtime + 5  # a rotation within the file system's timestamp resolution
        os.utime(cert, (stamp, stamp))
        os.utime(key, (stamp, stamp))
        rotated = handshake(server.port, cert)
        assert rotated != first
    finally:
        server.stop()
