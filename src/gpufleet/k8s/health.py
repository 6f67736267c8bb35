"""The operations endpoints: probes (``/healthz``, ``/livez``: the process works; ``/readyz``: caches synced,
and whether this replica leads) and ``/metrics`` (Prometheus text format).

Each listener serves only what it is for: the probe address serves the probes, the metrics address serves
``/metrics``, and one address given for both serves both (the test settings do). With ``secureMetrics`` the
metrics listener is HTTPS and every scrape is authenticated and authorized through the API server
(:mod:`gpufleet.k8s.metrics_auth`); the probes stay plain HTTP on their own port, as the kubelet calls them.
Both run on the asynchronous server of :mod:`gpufleet.k8s.serving`: a slow client costs a coroutine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from gpufleet.k8s.metrics_auth import METRICS_PATH, MetricsAuthorizer
from gpufleet.k8s.serving import Endpoint, HttpServer, ReloadingCertificate, ServingLimits, parse_address

PROBE_PATHS = ("/healthz", "/livez", "/readyz")
# Probes and scrapes are small and few: a handful of workers, short deadlines.
OPS_LIMITS = ServingLimits(workers=4, queue=8, handshake_timeout=5.0, read_timeout=5.0, write_timeout=10.0)
TEXT = "text/plain; charset=utf-8"


@dataclass(frozen=True, slots=True)
class Probe:
    ok: bool
    text: str


@dataclass(frozen=True, slots=True)
class Endpoints:
    healthz: Callable[[], Probe]
    readyz: Callable[[], Probe]
    metrics: Callable[[], bytes]


def _handler(endpoints: Endpoints, probes: bool, metrics: bool, authorizer: MetricsAuthorizer | None) -> Endpoint:
    async def answer(request: web.BaseRequest, server: HttpServer) -> web.StreamResponse:
        if request.method not in ("GET", "HEAD"):
            return _body(501, f"Unsupported method ({request.method[:20]!r})\n".encode(), TEXT)
        path = request.raw_path.split("?", 1)[0]
        if metrics and path == METRICS_PATH:
            if authorizer is not None:  # a TokenReview and a SubjectAccessReview: calls, on a worker
                decision = await server.blocking(authorizer.check, request.headers.get("Authorization"))
                if decision.status != 200:
                    return _body(decision.status, (decision.message + "\n").encode(), TEXT)
            return _body(200, await server.blocking(endpoints.metrics), CONTENT_TYPE_LATEST)
        probe = {"/healthz": endpoints.healthz, "/livez": endpoints.healthz,
                 "/readyz": endpoints.readyz}.get(path) if probes else None
        if probe is None:
            served = [*(PROBE_PATHS if probes else ()), *((METRICS_PATH,) if metrics else ())]
            return _body(404, f"not found; this port serves {', '.join(served)}\n".encode(), "text/plain")
        result = await server.blocking(probe)
        return _body(200 if result.ok else 503, (result.text + "\n").encode(), TEXT)

    return answer


def _body(status: int, body: bytes, content_type: str) -> web.Response:
    return web.Response(status=status, body=body, headers={"Content-Type": content_type})


def listen_address(address: str) -> tuple[str, int]:
    parsed = parse_address(address)
    if parsed is None:
        raise ValueError(f"bad listen address {address!r}")
    return parsed


class OpsServer(HttpServer):
    """One listener for the probes, the metrics, or both."""

    def __init__(self, address: str, endpoints: Endpoints, *, probes: bool = True, metrics: bool = True,
                 authorizer: MetricsAuthorizer | None = None, certificate: ReloadingCertificate | None = None) -> None:
        super().__init__(listen_address(address), _handler(endpoints, probes, metrics, authorizer), OPS_LIMITS,
                         name=f"ops-{address}", tls=certificate)
        self.serves_probes, self.serves_metrics = probes, metrics


