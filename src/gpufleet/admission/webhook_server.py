"""Serves the mutating webhook (:mod:`gpufleet.admission.webhook`, on ``/mutate-pods``) and the validating one
(:mod:`gpufleet.admission.validating`, gpufleet's lint rules, on ``/validate``) over HTTPS, as the API server requires.

Every answer is one of: 200 with an AdmissionReview; 400 with ``{"message": ...}`` saying what is wrong with
the request (Content-Type, Content-Length, a truncated or non-UTF-8 body, JSON nested deeper than
:data:`MAX_DEPTH`, a field of the wrong shape); 404 for another path; 408 when the body does not arrive within
the read timeout; 503 when every worker is busy and the queue full. Connections are served by
:mod:`gpufleet.k8s.serving` (aiohttp: a slow client costs a coroutine; deadlines on the handshake, the headers
and the body), and the certificate is reloaded when cert-manager rotates it.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from aiohttp import web

from gpufleet.admission.lint_settings import LintSettings
from gpufleet.admission.mig_resize import ResizeSource, no_resizes
from gpufleet.admission.validating import VALIDATE_PATH, ClusterSource, Validator, no_cluster
from gpufleet.admission.webhook import MUTATE_PATH, BadReview, WebhookPolicy, review
from gpufleet.admission.webhook_settings import WebhookSettings
from gpufleet.api import safejson
from gpufleet.k8s.health import listen_address
from gpufleet.k8s.serving import (
    ClientError,
    Endpoint,
    HttpServer,
    ReloadingCertificate,
    ServingLimits,
    json_error,
    require_json_content_type,
)

log = logging.getLogger(__name__)

# The API server refuses request bodies over 3 MiB, so an AdmissionReview (one object plus a little
# envelope) never needs more; a stored Pod is at most 1.5 MiB.
MAX_BODY = 3 * 1024 * 1024 + 64 * 1024
# Nesting of an AdmissionReview: a Pod's deepest fields (projected volumes, affinity terms, managedFields)
# sit some 20 levels down; json.loads recurses once per level, so the bound is checked before it runs.
MAX_DEPTH = 100


def make_handler(policy: WebhookPolicy, validator: Validator | None = None) -> Endpoint:
    """The endpoint answering AdmissionReviews on ``/mutate-pods`` (and ``/validate`` with a ``validator``)."""
    paths = (MUTATE_PATH, VALIDATE_PATH) if validator is not None else (MUTATE_PATH,)

    def decide(body: bytes, path: str) -> dict[str, Any]:
        try:
            request = safejson.loads(body, depth_limit=MAX_DEPTH)
            return review(request, policy) if path == MUTATE_PATH else validator.review(request)  # type: ignore[union-attr]
        except (safejson.JsonBodyError, BadReview) as e:
            raise ClientError(400, f"bad AdmissionReview: {e}") from None

    async def answer(request: web.BaseRequest, server: HttpServer) -> web.StreamResponse:
        try:
            if request.method != "POST":
                raise ClientError(501, f"Unsupported method ({request.method[:20]!r}): this webhook serves POST")
            body = await server.read_body(request, MAX_BODY)
            path = request.raw_path.split("?", 1)[0]
            if path not in paths:
                raise ClientError(404, f"not found: this webhook serves POST {' and '.join(paths)}")
            require_json_content_type(request)
            return _json(200, await server.blocking(decide, body, path))
        except ClientError as e:
            return _json(e.status, {"message": e.message})
        except Exception:  # a bug here must cost one request, not the connection or a traceback to the client
            log.exception("webhook: answering an AdmissionReview failed")
            return _json(500, {"message": "internal error in the gpufleet webhook; see its logs"})

    return answer


def _json(status: int, body: Any) -> web.Response:
    return web.Response(status=status, body=json.dumps(body, separators=(",", ":")).encode(),
                        content_type="application/json")


class WebhookServer(HttpServer):
    def __init__(self, address: str, cert_file: str, key_file: str, policy: WebhookPolicy,
                 limits: ServingLimits | None = None, validator: Validator | None = None) -> None:
        super().__init__(listen_address(address), make_handler(policy, validator), limits or ServingLimits(),
                         name="webhook", tls=ReloadingCertificate(cert_file, key_file, "webhook"), errors=json_error)

    @classmethod
    def from_settings(cls, settings: WebhookSettings, scheduler_name: str, lint: LintSettings | None = None,
                      cluster: ClusterSource = no_cluster, resizes: ResizeSource = no_resizes) -> WebhookServer:
        """The server of the scheduler's configuration; ``cluster`` is what the lint rules judge against (the
        informer cache's nodes and queues in the scheduler), ``resizes`` where a new pod's MIG resize comes from
        (its owners in that cache)."""
        limits = ServingLimits(workers=settings.workers, queue=settings.queue,
                               handshake_timeout=settings.handshake_timeout, read_timeout=settings.read_timeout)
        return cls(settings.bind_address, settings.cert_file, settings.key_file,
                   WebhookPolicy(scheduler_name, settings.runtime_class_name, resizes), limits,
                   Validator(lint or LintSettings(), cluster))
