"""Where the API server is and how to authenticate: kubeconfig files, the in-cluster service account, or a
plain host (tests, ``kubectl proxy``).

Supported credentials: bearer token (inline or ``tokenFile``), client certificate, and ``exec`` plugins
that print an ExecCredential token (EKS, GKE, AKS kubelogin). Legacy ``auth-provider`` entries and basic
auth are refused with a :class:`ConfigError` rather than silently sending unauthenticated requests.
"""

from __future__ import annotations

import atexit
import base64
import binascii
import datetime as dt
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from gpufleet.k8s.errors import ConfigError

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class TokenSource(Protocol):
    """Gives the bearer token for the next request; ``refresh`` forces a new one after a 401."""

    def token(self, *, refresh: bool = False) -> str | None: ...


@dataclass(frozen=True)
class StaticToken:
    value: str

    def token(self, *, refresh: bool = False) -> str | None:
        return self.value


class FileToken:
    """A token file that the kubelet rotates (bound service-account tokens expire after about an hour).

    Re-read at most every ``reload_seconds`` and on a 401, as client-go does, so a long-running scheduler
    never sends an expired token.
    """

    def __init__(self, path: str | os.PathLike[str], *, reload_seconds: float = 60.0) -> None:
        self.path = Path(path)
        self.reload_seconds = reload_seconds
        self._lock = threading.Lock()
        self._value: str | None = None
        self._read_at = float("-inf")

    def token(self, *, refresh: bool = False) -> str | None:
        with self._lock:
            now = time.monotonic()
            if refresh or self._value is None or now - self._read_at >= self.reload_seconds:
                try:
                    self._value = self.path.read_text().strip()
                except OSError as e:
                    if self._value is None:
                        raise ConfigError(f"cannot read token file {self.path}: {e}") from e
                    # Keep the last good token: a rotation in progress can briefly remove the file.
                self._read_at = now
            return self._value


@dataclass(frozen=True)
class ExecConfig:
    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    api_version: str = "client.authentication.k8s.io/v1"
    provide_cluster_info: bool = False
    base_dir: str = "."  # relative commands resolve against the kubeconfig's folder


class ExecToken:
    """Runs a client-go credential plugin and caches its token until ``expirationTimestamp``."""

    # Refresh this long before expiry so a request never leaves with a token that dies in flight.
    EXPIRY_MARGIN = dt.timedelta(seconds=30)

    def __init__(self, config: ExecConfig, *, server: str = "", timeout: float = 60.0) -> None:
        self.config = config
        self.server = server
        self.timeout = timeout
        self._lock = threading.Lock()
        self._value: str | None = None
        self._expires: dt.datetime | None = None

    def token(self, *, refresh: bool = False) -> str | None:
        with self._lock:
            now = dt.datetime.now(dt.UTC)
            fresh = self._value is not None and (self._expires is None or now + self.EXPIRY_MARGIN < self._expires)
            if refresh or not fresh:
                self._value, self._expires = self._run()
            return self._value

    def _run(self) -> tuple[str, dt.datetime | None]:
        cfg = self.config
        spec: dict[str, Any] = {"interactive": False}
        if cfg.provide_cluster_info:
            spec["cluster"] = {"server": self.server}
        env = dict(os.environ)
        env.update(dict(cfg.env))
        env["KUBERNETES_EXEC_INFO"] = json.dumps(
            {"apiVersion": cfg.api_version, "kind": "ExecCredential", "spec": spec}
        )
        command = cfg.command
        if os.sep in command and not os.path.isabs(command):
            command = os.path.join(cfg.base_dir, command)
        try:
            done = subprocess.run(
                [command, *cfg.args],
                env=env,
                stdin=subprocess.DEVNULL,  # never interactive: a scheduler has no terminal
                capture_output=True,
                timeout=self.timeout,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise ConfigError(f"exec credential plugin {cfg.command!r} failed: {e}") from e
        if done.returncode != 0:
            raise ConfigError(
                f"exec credential plugin {cfg.command!r} exited {done.returncode}: "
                f"{done.stderr.decode(errors='replace')[:500]}"
            )
        try:
            status = json.loads(done.stdout)["status"]
            token = status["token"]
        except (ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"exec credential plugin {cfg.command!r} printed no status.token") from e
        expires: dt.datetime | None = None
        if status.get("expirationTimestamp"):
            expires = _parse_time(str(status["expirationTimestamp"]))
        return str(token), expires


@dataclass(frozen=True)
class ClusterConfig:
    """Everything :class:`~gpufleet.k8s.client.KubeClient` needs to reach one API server."""

    host: str
    # TLS: a CA bundle path, PEM data, or verification off (``insecure-skip-tls-verify``).
    ca_file: str | None = None
    ca_data: str | None = None
    insecure_skip_tls_verify: bool = False
    tls_server_name: str | None = None
    client_cert_file: str | None = None
    client_key_file: str | None = None
    auth: TokenSource | None = None
    namespace: str = "default"
    proxy_url: str | None = None
    # Kept only for error messages and logs.
    source: str = field(default="explicit", compare=False)

    @classmethod
    def for_host(cls, host: str, *, token: str | None = None, namespace: str = "default") -> ClusterConfig:
        """A plain URL (tests against a mock server, ``kubectl proxy``)."""
        return cls(
            host=host.rstrip("/"),
            auth=StaticToken(token) if token else None,
            namespace=namespace,
            source=f"host {host}",
        )

    @classmethod
    def in_cluster(
        cls,
        *,
        environ: Mapping[str, str] | None = None,
        account_dir: str | os.PathLike[str] | None = None,
    ) -> ClusterConfig:
        """The pod's service account, as client-go's rest.InClusterConfig."""
        env = os.environ if environ is None else environ
        host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
        if not host or not port:
            raise ConfigError("not in a cluster: KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are unset")
        account = Path(account_dir) if account_dir is not None else SERVICE_ACCOUNT_DIR
        token_path = account / "token"
        if not token_path.is_file():
            raise ConfigError(f"in-cluster token file {token_path} is missing")
        namespace = "default"
        ns_path = account / "namespace"
        if ns_path.is_file():
            namespace = ns_path.read_text().strip() or "default"
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"  # an IPv6 service IP
        ca_path = account / "ca.crt"
        return cls(
            host=f"https://{host}:{port}",
            ca_file=str(ca_path) if ca_path.is_file() else None,
            auth=FileToken(token_path),
            namespace=namespace,
            source="in-cluster",
        )

    @classmethod
    def from_kubeconfig(
        cls,
        path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
        *,
        context: str | None = None,
    ) -> ClusterConfig:
        """Load a kubeconfig: ``path``, else ``$KUBECONFIG`` (merged like kubectl), else ``~/.kube/config``."""
        paths = _kubeconfig_paths(path)
        merged = _merge_kubeconfigs(paths)
        context_name = context or merged["current-context"]
        if not context_name:
            raise ConfigError(f"no context given and no current-context in {_names(paths)}")
        ctx = merged["contexts"].get(context_name)
        if ctx is None:
            raise ConfigError(f"context {context_name!r} not found in {_names(paths)}")
        cluster_name, user_name = ctx.get("cluster"), ctx.get("user")
        cluster = merged["clusters"].get(cluster_name)
        if cluster is None:
            raise ConfigError(f"context {context_name!r} names unknown cluster {cluster_name!r}")
        user = merged["users"].get(user_name, {}) if user_name else {}
        base = Path(merged["dirs"].get(("cluster", cluster_name), "."))
        user_base = Path(merged["dirs"].get(("user", user_name), "."))
        server = str(cluster.get("server") or "")
        if not server:
            raise ConfigError(f"cluster {cluster_name!r} has no server")

        ca_file = _resolve(cluster.get("certificate-authority"), base)
        ca_data = _b64(cluster.get("certificate-authority-data"), "certificate-authority-data")
        cert_file = _resolve(user.get("client-certificate"), user_base)
        key_file = _resolve(user.get("client-key"), user_base)
        cert_data = _b64(user.get("client-certificate-data"), "client-certificate-data")
        key_data = _b64(user.get("client-key-data"), "client-key-data")
        if cert_data or key_data:
            if not (cert_data and key_data):
                raise ConfigError(f"user {user_name!r}: client certificate and key must both be given")
            cert_file, key_file = _materialize_pair(cert_data, key_data)
        if bool(cert_file) != bool(key_file):
            raise ConfigError(f"user {user_name!r}: client certificate and key must both be given")

        auth: TokenSource | None = None
        if user.get("token"):
            auth = StaticToken(str(user["token"]))
        elif user.get("tokenFile"):
            auth = FileToken(_resolve(user["tokenFile"], user_base) or "")
        elif user.get("exec"):
            auth = ExecToken(_exec_config(user["exec"], user_base), server=server)
        elif user.get("auth-provider") or user.get("username"):
            raise ConfigError(
                f"user {user_name!r}: auth-provider and basic auth are not supported; "
                "use a token, tokenFile, client certificate or an exec plugin"
            )
        return cls(
            host=server.rstrip("/"),
            ca_file=ca_file,
            ca_data=ca_data,
            insecure_skip_tls_verify=bool(cluster.get("insecure-skip-tls-verify", False)),
            tls_server_name=cluster.get("tls-server-name"),
            client_cert_file=cert_file,
            client_key_file=key_file,
            auth=auth,
            namespace=str(ctx.get("namespace") or "default"),
            proxy_url=cluster.get("proxy-url"),
            source=f"kubeconfig {_names(paths)} context {context_name}",
        )

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str] | None = None,
        *,
        context: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> ClusterConfig:
        """kubectl's order: an explicit file, ``$KUBECONFIG``, in-cluster, then ``~/.kube/config``."""
        env = os.environ if environ is None else environ
        if path is not None or env.get("KUBECONFIG"):
            return cls.from_kubeconfig(path, context=context)
        if env.get("KUBERNETES_SERVICE_HOST"):
            return cls.in_cluster(environ=env)
        return cls.from_kubeconfig(None, context=context)


# --- kubeconfig helpers -------------------------------------------------------------------------------


def _kubeconfig_paths(path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None) -> list[Path]:
    if path is None:
        env = os.environ.get("KUBECONFIG", "")
        raw = [p for p in env.split(os.pathsep) if p] or [str(Path.home() / ".kube" / "config")]
    elif isinstance(path, str | os.PathLike):
        raw = [os.fspath(path)]
    else:
        raw = [os.fspath(p) for p in path]
    paths = [Path(p).expanduser() for p in raw]
    existing = [p for p in paths if p.is_file()]
    if not existing:
        raise ConfigError(f"no kubeconfig found at {_names(paths)}")
    return existing


def _names(paths: Sequence[Path]) -> str:
    return os.pathsep.join(str(p) for p in paths)


def _merge_kubeconfigs(paths: Sequence[Path]) -> dict[str, Any]:
    # kubectl's merge rule: the first file to define a name (or current-context) wins.
    merged: dict[str, Any] = {"current-context": "", "clusters": {}, "users": {}, "contexts": {}, "dirs": {}}
    for path in paths:
        try:
            doc = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"cannot read kubeconfig {path}: {e}") from e
        if not isinstance(doc, dict):
            raise ConfigError(f"kubeconfig {path} is not a mapping")
        if not merged["current-context"] and doc.get("current-context"):
            merged["current-context"] = str(doc["current-context"])
        for section, inner, kind in (("clusters", "cluster", "cluster"), ("users", "user", "user"),
                                     ("contexts", "context", "context")):
            for entry in doc.get(section) or []:
                if not isinstance(entry, dict) or "name" not in entry:
                    continue
                name = str(entry["name"])
                if name not in merged[section]:
                    merged[section][name] = entry.get(inner) or {}
                    merged["dirs"][(kind, name)] = str(path.parent)
    return merged


def _resolve(value: Any, base: Path) -> str | None:
    if not value:
        return None
    p = Path(str(value)).expanduser()
    return str(p if p.is_absolute() else base / p)


def _b64(value: Any, what: str) -> str | None:
    if not value:
        return None
    try:
        return base64.b64decode(str(value), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as e:
        raise ConfigError(f"{what} is not base64-encoded PEM") from e


_tmpdir: str | None = None
_tmpdir_lock = threading.Lock()


def _materialize_pair(cert_pem: str, key_pem: str) -> tuple[str, str]:
    # ssl.SSLContext.load_cert_chain only reads files, so inline credentials go to a private temp folder
    # (0700, removed at exit), as the official client does.
    global _tmpdir
    with _tmpdir_lock:
        if _tmpdir is None:
            _tmpdir = tempfile.mkdtemp(prefix="gpufleet-kube-")
            atexit.register(shutil.rmtree, _tmpdir, True)
        folder = _tmpdir
    fd_c, cert_path = tempfile.mkstemp(dir=folder, suffix=".crt")
    fd_k, key_path = tempfile.mkstemp(dir=folder, suffix=".key")
    with os.fdopen(fd_c, "w") as f:
        f.write(cert_pem)
    with os.fdopen(fd_k, "w") as f:
        f.write(key_pem)
    return cert_path, key_path


def _exec_config(raw: Any, base: Path) -> ExecConfig:
    if not isinstance(raw, dict) or not raw.get("command"):
        raise ConfigError("exec credential plugin without a command")
    env: list[tuple[str, str]] = []
    for item in raw.get("env") or []:
        if isinstance(item, dict) and "name" in item:
            env.append((str(item["name"]), str(item.get("value", ""))))
    return ExecConfig(
        command=str(raw["command"]),
        args=tuple(str(a) for a in raw.get("args") or []),
        env=tuple(env),
        api_version=str(raw.get("apiVersion") or "client.authentication.k8s.io/v1"),
        provide_cluster_info=bool(raw.get("provideClusterInfo", False)),
        base_dir=str(base),
    )


def _parse_time(value: str) -> dt.datetime:
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as e:
        raise ConfigError(f"unparseable timestamp {value!r}") from e
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
