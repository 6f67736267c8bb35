"""Serves the mutating webhook (:mod:`gpufleet.kube.webhook`, on ``/mutate-pods``) and the validating one
(:mod:`gpufleet.kube.validating`, gpufleet's lint rules, on ``/validate``) over HTTPS, as the API server requires.

Every answer is one of: 200 with an AdmissionReview; 400 with ``{"message": ...}`` saying what is wrong with
the request (Content-Type, Content-Length, a truncated or non-UTF-8 body, JSON nested deeper than
:data:`MAX_DEPTH`, a field of the wrong shape); 404 for another path; 408 when the request does not arrive
within the read timeout. Connections are served by a bounded pool with handshake and read deadlines
(:mod:`gpufleet.kube.serving`), and the certificate is reloaded when cert-manager rotates it.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from gpufleet.api import safejson
from gpufleet.kube.health import listen_address
from gpufleet.kube.lint_settings import LintSettings
from gpufleet.kube.serving import (
    BoundedHandler,
    BoundedHTTPServer,
    ClientError,
    ReloadingCertificate,
    ServerThread,
    ServingLimits,
)
from gpufleet.kube.settings import WebhookSettings
from gpufleet.kube.validating import VALIDATE_PATH, ClusterSource, Validator, no_cluster
from gpufleet.kube.webhook import MUTATE_PATH, BadReview, WebhookPolicy, review

log = logging.getLogger(__name__)

# The API server refuses request bodies over 3 MiB, so an AdmissionReview (one object plus a little
# envelope) never needs more; a stored Pod is at most 1.5 MiB.
MAX_BODY = 3 * 1024 * 1024 + 64 * 1024
# Nesting of an AdmissionReview: a Pod's deepest fields (projected volumes, affinity terms, managedFields)
# sit some 20 levels down; json.loads recurses once per level, so the bound is checked before it runs.
MAX_DEPTH = 100


def make_handler(policy: WebhookPolicy, validator: Validator | None = None) -> type[BoundedHandler]:
    paths = (MUTATE_PATH, VALIDATE_PATH) if validator is not None else (MUTATE_PATH,)

    class Handler(BoundedHandler):
        def do_POST(self) -> None:
            try:
                body = self.read_body(MAX_BODY)
                path = self.path.split("?", 1)[0]
                if path not in paths:
                    raise ClientError(404, f"not found: this webhook serves POST {' and '.join(paths)}")
                self.require_json_content_type()
                try:
                    request = safejson.loads(body, depth_limit=MAX_DEPTH)
                    answer = review(request, policy) if path == MUTATE_PATH else validator.review(request)  # type: ignore[union-attr]
                except (safejson.JsonBodyError, BadReview) as e:
                    raise ClientError(400, f"bad AdmissionReview: {e}") from None
            except ClientError as e:
                self._send(e.status, {"message": e.message})
                return
            except Exception:  # a bug here must cost one request, not the connection's thread or a traceback
                log.exception("webhook: answering an AdmissionReview failed")
                self._send(500, {"message": "internal error in the gpufleet webhook; see its logs"})
                return
            self._send(200, answer)

        def _send(self, code: int, body: Any) -> None:
            self.send_body(code, json.dumps(body, separators=(",", ":")).encode(), "application/json")

    return Handler


class WebhookServer(ServerThread):
    def __init__(self, address: str, cert_file: str, key_file: str, policy: WebhookPolicy,
                 limits: ServingLimits | None = None, validator: Validator | None = None) -> None:
        certificate = ReloadingCertificate(cert_file, key_file, "webhook")
        server = BoundedHTTPServer(listen_address(address), make_handler(policy, validator),
                                   limits or ServingLimits(), name="webhook", tls=certificate.current)
        super().__init__(server, "webhook")

    @classmethod
    def from_settings(cls, settings: WebhookSettings, scheduler_name: str, lint: LintSettings | None = None,
                      cluster: ClusterSource = no_cluster) -> WebhookServer:
        """The server of the scheduler's configuration; ``cluster`` is what the lint rules judge against (the
        informer cache's nodes and queues in the scheduler)."""
        limits = ServingLimits(workers=settings.workers, queue=settings.queue,
                               handshake_timeout=settings.handshake_timeout, read_timeout=settings.read_timeout)
        return cls(settings.bind_address, settings.cert_file, settings.key_file,
                   WebhookPolicy(scheduler_name, settings.runtime_class_name), limits,
                   Validator(lint or LintSettings(), cluster))
