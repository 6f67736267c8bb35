"""Kubeconfig and in-cluster loading, and that the credentials actually reach a server."""

from __future__ import annotations

import base64
import http.server
import json
import os
import shutil
import ssl
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_apisim import ApiSim, status

from gpufleet.k8s import resources as r
from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.config import ClusterConfig, ExecToken, FileToken, StaticToken
from gpufleet.k8s.errors import ApiConnectionError, ConfigError


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def write_kubeconfig(path: Path, *, current: str | None = "dev", clusters: list[dict[str, Any]] | None = None,
                     users: list[dict[str, Any]] | None = None, contexts: list[dict[str, Any]] | None = None) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": current,
        "clusters": clusters if clusters is not None else [
            {"name": "dev", "cluster": {"server": "https://dev.example:6443/",
                                        "certificate-authority": "ca.crt"}}],
        "users": users if users is not None else [{"name": "dev", "user": {"token": "t-dev"}}],
        "contexts": contexts if contexts is not None else [
            {"name": "dev", "context": {"cluster": "dev", "user": "dev", "namespace": "ml"}}],
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def test_kubeconfig_current_context_token_namespace_and_relative_paths(tmp_path: Path) -> None:
    cfg = ClusterConfig.from_kubeconfig(write_kubeconfig(tmp_path / "config"))
    assert cfg.host == "https://dev.example:6443"
    assert cfg.namespace == "ml"
    assert cfg.ca_file == str(tmp_path / "ca.crt")  # relative to the kubeconfig's folder
    assert isinstance(cfg.auth, StaticToken) and cfg.auth.token() == "t-dev"


def test_explicit_context_and_unknown_context(tmp_path: Path) -> None:
    path = write_kubeconfig(
        tmp_path / "config",
        clusters=[{"name": "dev", "cluster": {"server": "https://dev:6443"}},
                  {"name": "prod", "cluster": {"server": "https://prod:6443", "insecure-skip-tls-verify": True}}],
        users=[{"name": "dev", "user": {"token": "a"}}, {"name": "prod", "user": {"tokenFile": "tok"}}],
        contexts=[{"name": "dev", "context": {"cluster": "dev", "user": "dev"}},
                  {"name": "prod", "context": {"cluster": "prod", "user": "prod"}}],
    )
    (tmp_path / "tok").write_text("from-file\n")
    prod = ClusterConfig.from_kubeconfig(path, context="prod")
    assert prod.host == "https://prod:6443" and prod.insecure_skip_tls_verify and prod.namespace == "default"
    assert isinstance(prod.auth, FileToken) and prod.auth.token() == "from-file"
    with pytest.raises(ConfigError, match="context 'nope' not found"):
        ClusterConfig.from_kubeconfig(path, context="nope")


def test_kubeconfig_env_list_merges_first_definition_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = write_kubeconfig(tmp_path / "a", current=None,
                             clusters=[{"name": "dev", "cluster": {"server": "https://first:1"}}], users=[],
                             contexts=[])
    second = write_kubeconfig(tmp_path / "b")  # defines dev again, plus the user, context and current
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(first), str(tmp_path / "missing"), str(second)]))
    cfg = ClusterConfig.from_kubeconfig()
    assert cfg.host == "https://first:1"  # the first file's cluster
    assert cfg.auth is not None and cfg.auth.token() == "t-dev"  # the second file's user


def test_inline_client_certificate_is_written_to_private_files(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "config", users=[{"name": "dev", "user": {
        "client-certificate-data": b64("CERT PEM"), "client-key-data": b64("KEY PEM")}}])
    cfg = ClusterConfig.from_kubeconfig(path)
    assert cfg.client_cert_file and cfg.client_key_file and cfg.auth is None
    assert Path(cfg.client_cert_file).read_text() == "CERT PEM"
    assert Path(cfg.client_key_file).read_text() == "KEY PEM"
    assert stat.S_IMODE(os.stat(cfg.client_key_file).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(Path(cfg.client_key_file).parent).st_mode) == 0o700


@pytest.mark.parametrize("user, message", [
    ({"auth-provider": {"name": "gcp"}}, "not supported"),
    ({"client-certificate-data": b64("only cert")}, "must both be given"),
    ({"client-key-data": "%%%"}, "not base64"),
])
def test_unusable_users_are_refused(tmp_path: Path, user: dict[str, Any], message: str) -> None:
    path = write_kubeconfig(tmp_path / "config", users=[{"name": "dev", "user": user}])
    with pytest.raises(ConfigError, match=message):
        ClusterConfig.from_kubeconfig(path)


def test_unreadable_tls_material_is_a_config_error(tmp_path: Path) -> None:
    cfg = ClusterConfig(host="https://k:6443", ca_file=str(tmp_path / "missing.crt"), source="test")
    with pytest.raises(ConfigError, match="TLS setup for test"):
        KubeClient(cfg)
    with pytest.raises(ConfigError, match="TLS setup"):
        KubeClient(ClusterConfig(host="https://k:6443", ca_data="not a PEM"))


def test_in_cluster(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "namespace").write_text("gpufleet-system")
    (tmp_path / "ca.crt").write_text("CA")
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    cfg = ClusterConfig.in_cluster(environ=env, account_dir=tmp_path)
    assert cfg.host == "https://[fd00::1]:443"
    assert cfg.namespace == "gpufleet-system" and cfg.ca_file == str(tmp_path / "ca.crt")
    assert cfg.auth is not None and cfg.auth.token() == "sa-token"
    with pytest.raises(ConfigError, match="not in a cluster"):
        ClusterConfig.in_cluster(environ={}, account_dir=tmp_path)


def test_load_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    explicit = write_kubeconfig(tmp_path / "explicit")
    (tmp_path / "token").write_text("t")
    monkeypatch.setattr("gpufleet.k8s.config.SERVICE_ACCOUNT_DIR", tmp_path)
    in_cluster = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    monkeypatch.delenv("KUBECONFIG", raising=False)
    assert ClusterConfig.load(explicit, environ=in_cluster).host == "https://dev.example:6443"  # explicit first
    assert ClusterConfig.load(environ=in_cluster).host == "https://10.0.0.1:443"  # then in-cluster
    monkeypatch.setenv("KUBECONFIG", str(explicit))
    assert ClusterConfig.load(environ={**in_cluster, "KUBECONFIG": str(explicit)}).source.startswith("kubeconfig")


def test_bearer_token_reaches_the_server(apisim: ApiSim) -> None:
    cfg = ClusterConfig(host=apisim.url, auth=StaticToken("s3cret"))
    with KubeClient(cfg) as c:
        c.list(r.NODES)
    [req] = apisim.requests(r.NODES, "LIST")
    assert req.headers["Authorization"] == "Bearer s3cret"
    assert req.headers["User-Agent"].startswith("gpufleet/")


def test_rotated_token_file_is_reread_after_a_401(apisim: ApiSim, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("old")
    source = FileToken(token_file, reload_seconds=3600)
    assert source.token() == "old"
    token_file.write_text("new")  # the kubelet rotated it; our cached copy is stale
    rejects_old = apisim.kmock[lambda req: req.headers.get("Authorization") == "Bearer old"]
    apisim.harness.call(lambda: rejects_old << 401 << status(401, "Unauthorized", "token expired"))
    with KubeClient(ClusterConfig(host=apisim.url, auth=source)) as c:
        c.list(r.NODES)
    auths = [q.headers.get("Authorization") for q in apisim.kmock]
    assert auths == ["Bearer old", "Bearer new"]


def test_exec_plugin_token_is_cached_until_expiry(apisim: ApiSim, tmp_path: Path) -> None:
    counter = tmp_path / "runs"
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json, os, pathlib, sys\n"
        f"p = pathlib.Path({str(counter)!r}); n = int(p.read_text()) + 1 if p.exists() else 1\n"
        "p.write_text(str(n))\n"
        "info = json.loads(os.environ['KUBERNETES_EXEC_INFO'])\n"
        "assert info['spec']['interactive'] is False and info['spec']['cluster']['server']\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential',\n"
        "  'status': {'token': os.environ['PREFIX'] + str(n), 'expirationTimestamp': sys.argv[1]}}))\n"
    )
    path = write_kubeconfig(
        tmp_path / "config",
        clusters=[{"name": "dev", "cluster": {"server": apisim.url}}],
        users=[{"name": "dev", "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
            "args": [str(plugin), "2999-01-01T00:00:00Z"], "env": [{"name": "PREFIX", "value": "tok-"}],
            "provideClusterInfo": True}}}],
    )
    cfg = ClusterConfig.from_kubeconfig(path)
    assert isinstance(cfg.auth, ExecToken)
    with KubeClient(cfg) as c:
        c.list(r.NODES)
        c.list(r.NODES)
    assert counter.read_text() == "1"  # not expired: one run for both requests
    assert [q.headers["Authorization"] for q in apisim.kmock] == ["Bearer tok-1", "Bearer tok-1"]


# --- real TLS: CA verification, client certificates, tls-server-name ---------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not installed; the TLS test needs it to mint certificates")
    d = tmp_path
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "1",
             "-subj", "/CN=test-ca", cwd=d)
    client_cn = "/CN=system:serviceaccount:gpufleet-system:gpufleet"
    for name, subj, ext in (("server", "/CN=kube-apiserver", "subjectAltName=DNS:kubernetes.default"),
                            ("client", client_cn, "extendedKeyUsage=clientAuth")):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", subj, cwd=d)
        (d / f"{name}.ext").write_text(ext + "\n")
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.crt", "-days", "1", "-extfile", f"{name}.ext", cwd=d)
    return d


@pytest.fixture
def tls_server(pki: Path) -> Iterator[tuple[str, list[str]]]:
    peers: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            cert = self.connection.getpeercert()
            peers.append(dict(x[0] for x in cert["subject"])["commonName"])
            body = json.dumps({"kind": "NodeList", "metadata": {"resourceVersion": "7"}, "items": []}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki / "server.crt", pki / "server.key")
    ctx.load_verify_locations(pki / "ca.crt")
    ctx.verify_mode = ssl.CERT_REQUIRED  # like the API server: client certificates are checked
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}", peers
    finally:
        server.shutdown()
        server.server_close()


def test_mutual_tls_with_inline_credentials_and_tls_server_name(
    pki: Path, tls_server: tuple[str, list[str]], tmp_path: Path
) -> None:
    url, peers = tls_server

    def config(server_name: str | None) -> ClusterConfig:
        cluster: dict[str, Any] = {"server": url, "certificate-authority-data": b64((pki / "ca.crt").read_text())}
        if server_name:
            cluster["tls-server-name"] = server_name
        path = write_kubeconfig(tmp_path / "kc", clusters=[{"name": "dev", "cluster": cluster}], users=[
            {"name": "dev", "user": {"client-certificate-data": b64((pki / "client.crt").read_text()),
                                     "client-key-data": b64((pki / "client.key").read_text())}}])
        return ClusterConfig.from_kubeconfig(path)

    # The server certificate names kubernetes.default only, not 127.0.0.1.
    with KubeClient(config("kubernetes.default")) as c:
        assert c.list(r.NODES).resource_version == "7"
    assert peers == ["system:serviceaccount:gpufleet-system:gpufleet"]
    with KubeClient(config(None)) as c, pytest.raises(ApiConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        c.list(r.NODES)
