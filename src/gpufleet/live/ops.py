"""The live scheduler's operations listeners, from its settings (the endpoints: gpufleet.k8s.health)."""

from __future__ import annotations

from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.health import Endpoints, OpsServer
from gpufleet.k8s.metrics_auth import MetricsAuthorizer
from gpufleet.k8s.serving import ReloadingCertificate
from gpufleet.live.settings import SchedulerSettings


def ops_servers(settings: SchedulerSettings, endpoints: Endpoints, client: KubeClient) -> list[OpsServer]:
    """The listeners the settings ask for: probes on ``healthProbeBindAddress``, metrics on
    ``metricsBindAddress`` (HTTPS with authentication when ``secureMetrics.enabled``)."""
    probe_address, metrics_address = settings.health_probe_bind_address, settings.metrics_bind_address
    secure = settings.secure_metrics
    if not secure.enabled:
        if probe_address == metrics_address:
            return [OpsServer(probe_address, endpoints)]
        return [OpsServer(probe_address, endpoints, metrics=False),
                OpsServer(metrics_address, endpoints, probes=False)]
    if probe_address == metrics_address:
        raise ValueError("secureMetrics needs metricsBindAddress and healthProbeBindAddress to differ: "
                         "the kubelet calls the probes over plain HTTP")
    return [OpsServer(probe_address, endpoints, metrics=False),
            OpsServer(metrics_address, endpoints, probes=False, authorizer=MetricsAuthorizer(client),
                      certificate=ReloadingCertificate(secure.cert_file, secure.key_file, "metrics"))]
