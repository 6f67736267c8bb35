"""The ``webhook`` section of the scheduler's configuration file: where the admission webhooks listen, their TLS
files and their bounds. The section is read with the rest of the file (:mod:`gpufleet.live.settings`, the process
that serves them); the webhooks' server (:mod:`gpufleet.admission.webhook_server`) takes these values, so the
admission package reads nothing of the live scheduler's.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    enabled: bool = False
    bind_address: str = ":9443"
    # Where the Deployment mounts the gpufleet-webhook-tls Secret (not under /etc/gpufleet: that is the
    # read-only ConfigMap volume, which cannot host a mount point).
    cert_file: str = "/var/run/gpufleet/webhook/tls.crt"
    key_file: str = "/var/run/gpufleet/webhook/tls.key"
    runtime_class_name: str | None = None
    # Bind a fractional pod only if the webhook mutated it; off only where another tool sets the env var.
    require_mutation: bool = True
    # The listener's bounds (gpufleet.k8s.serving): threads answering reviews at once, complete requests
    # waiting for one (more get a 503; connections themselves cost no thread), and deadlines for the TLS
    # handshake, the headers and the body. The API server gives the webhook 5 seconds (timeoutSeconds), so a
    # request slower than that is lost anyway.
    workers: int = 8
    queue: int = 16
    handshake_timeout: float = 5.0
    read_timeout: float = 10.0
