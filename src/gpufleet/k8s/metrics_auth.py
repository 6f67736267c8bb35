"""Who may read ``/metrics``: delegated to the API server, as controller-runtime's
``filters.WithAuthenticationAndAuthorization`` does.

Each scrape carries a bearer token (Prometheus sends its service account's). A **TokenReview** asks the API
server who the token belongs to; a **SubjectAccessReview** asks whether that user may ``get`` the
non-resource URL ``/metrics``. Grant it with a ClusterRole rule ``nonResourceURLs: ["/metrics"], verbs: [get]``
(deploy/metrics-auth/ has one, ``gpufleet-metrics-reader``). The scheduler itself needs ``create`` on
``tokenreviews`` and ``subjectaccessreviews`` (the built-in ClusterRole ``system:auth-delegator``).

Decisions are cached briefly per token (allowed for a minute, refused for ten seconds; at most
:data:`CACHE_SIZE` tokens), so a scrape every few seconds costs the API server two requests a minute.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.errors import KubeError
from gpufleet.k8s.resources import SUBJECT_ACCESS_REVIEWS, TOKEN_REVIEWS

log = logging.getLogger(__name__)

METRICS_PATH = "/metrics"
ALLOW_TTL = 60.0
DENY_TTL = 10.0
CACHE_SIZE = 256
MAX_TOKEN_BYTES = 16 * 1024  # service account tokens are about 1 KB; the header is not an upload channel


@dataclass(frozen=True, slots=True)
class Decision:
    status: int  # 200 allowed, 401 not authenticated, 403 not authorized, 503 the API server did not answer
    message: str


class MetricsAuthorizer:
    def __init__(self, client: KubeClient, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.clock = clock
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, Decision]] = {}

    def check(self, authorization: str | None) -> Decision:
        """The decision for one request's ``Authorization`` header."""
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return Decision(401, "Unauthorized: send a bearer token (Authorization: Bearer <token>)")
        if len(token) > MAX_TOKEN_BYTES:
            return Decision(401, "Unauthorized: the bearer token is too long")
        key = hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()
        now = self.clock()
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None and cached[0] > now:
                return cached[1]
        decision = self._decide(token)
        if decision.status in (200, 401, 403):  # an API server outage is not remembered
            with self._lock:
                if len(self._cache) >= CACHE_SIZE:
                    self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
                    if len(self._cache) >= CACHE_SIZE:
                        self._cache.clear()
                self._cache[key] = (now + (ALLOW_TTL if decision.status == 200 else DENY_TTL), decision)
        return decision

    def _decide(self, token: str) -> Decision:
        try:
            review = self.client.create(TOKEN_REVIEWS, {"spec": {"token": token}})
            status = _dict(review.get("status"))
            user = _dict(status.get("user"))
            if status.get("authenticated") is not True or not user.get("username"):
                return Decision(401, "Unauthorized: the token was not accepted by the API server")
            spec: dict[str, Any] = {"user": user["username"],
                                    "nonResourceAttributes": {"path": METRICS_PATH, "verb": "get"}}
            for field in ("uid", "groups", "extra"):
                if user.get(field):
                    spec[field] = user[field]
            access = self.client.create(SUBJECT_ACCESS_REVIEWS, {"spec": spec})
        except KubeError as e:
            log.warning("metrics: authenticating a scrape failed: %s", e)
            return Decision(503, "the API server could not be asked who this is; try again")
        verdict = _dict(access.get("status"))
        if verdict.get("allowed") is True:
            return Decision(200, "ok")
        reason = str(verdict.get("reason") or "")[:200]
        return Decision(403, f"Forbidden: user {str(user['username'])[:100]!r} may not get {METRICS_PATH}"
                             + (f" ({reason})" if reason else ""))


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
