"""Typed errors for the Kubernetes API layer.

Every failure of an API call surfaces as one of these, never as an ``httpx`` exception, so callers
(informers, the leader elector, the binder) decide on retries by type: a :class:`Conflict` is a lost
optimistic-concurrency race, :class:`Gone` means "relist", :class:`TooManyRequests` carries the server's
``Retry-After``, :class:`ServerError` and :class:`ApiConnectionError` are worth retrying with backoff.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class KubeError(Exception):
    """Base of every error raised by :mod:`gpufleet.k8s` (and above it, the live scheduler and the node agent)."""


class ConfigError(KubeError):
    """A kubeconfig or in-cluster environment that cannot be used; the message says what is missing."""


class ApiConnectionError(KubeError):
    """The request never got an HTTP answer, or a streamed answer broke off (reset, timeout, truncation).

    Separate from :class:`ApiError` because there is no status: whether the server applied a write is
    unknown, so a caller must re-read before retrying a non-idempotent call.
    """


class ApiError(KubeError):
    """The API server answered with a non-2xx status (or a watch stream carried an ERROR event)."""

    status: int = 0

    def __init__(
        self,
        status: int,
        reason: str = "",
        message: str = "",
        *,
        details: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.details: Mapping[str, Any] = details or {}
        self.retry_after = retry_after
        super().__init__(f"{status} {reason}: {message}" if message else f"{status} {reason}")


class BadRequest(ApiError):
    """400: the request is malformed (a bug on our side, not worth retrying)."""


class Unauthorized(ApiError):
    """401: credentials missing or expired."""


class Forbidden(ApiError):
    """403: RBAC denies the verb; the deploy/ ClusterRole lacks a rule."""


class NotFound(ApiError):
    """404: the object (or the whole resource type, e.g. a CRD not installed) does not exist."""


class Conflict(ApiError):
    """409: a write raced another writer (stale resourceVersion, UID precondition, pod already bound)."""


class AlreadyExists(Conflict):
    """409 with reason AlreadyExists: a create found the name taken. A :class:`Conflict`, so one except catches both."""


class Gone(ApiError):
    """410: the requested resourceVersion is older than the server keeps; list again from scratch."""


class Invalid(ApiError):
    """422: the object fails server-side validation (schema, immutable field)."""


class TooManyRequests(ApiError):
    """429: throttled, or (for an eviction) a PodDisruptionBudget forbids it now; see ``retry_after``."""


class ServerError(ApiError):
    """5xx: the server failed; retry with backoff."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}


def error_from_status(
    status: int,
    body: Any,
    *,
    retry_after_header: str | None = None,
) -> ApiError:
    """Build the typed error for an HTTP status and its (maybe) ``Status`` JSON body."""
    reason = ""
    message = ""
    details: Mapping[str, Any] = {}
    if isinstance(body, Mapping):
        reason = str(body.get("reason") or "")
        message = str(body.get("message") or "")
        raw_details = body.get("details")
        if isinstance(raw_details, Mapping):
            details = raw_details
        # A Status inside a watch ERROR event carries its own code; the HTTP status there is 200.
        code = body.get("code")
        if isinstance(code, int) and code >= 400:
            status = code
    elif isinstance(body, str):
        message = body[:500]
    retry_after = _parse_retry_after(retry_after_header, details)
    cls: type[ApiError]
    if status == 409 and reason == "AlreadyExists":
        cls = AlreadyExists
    elif status >= 500:
        cls = ServerError
    else:
        cls = _BY_STATUS.get(status, ApiError)
    return cls(status, reason, message, details=details, retry_after=retry_after)


def _parse_retry_after(header: str | None, details: Mapping[str, Any]) -> float | None:
    if header:
        try:
            return max(0.0, float(header))
        except ValueError:
            pass  # an HTTP-date; the details below (or nothing) are good enough for a scheduler
    seconds = details.get("retryAfterSeconds")
    if isinstance(seconds, int | float) and not isinstance(seconds, bool):
        return max(0.0, float(seconds))
    return None
