"""Probes and metrics on their own listeners, and authenticated metrics: HTTPS, each scrape's bearer token
checked with a TokenReview and its user authorized with a SubjectAccessReview (get /metrics), answered by the
kmock-based API server (ApiSim) over real HTTP."""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import kmock
import pytest
from kube_apisim import ApiSim, failure
from live_env import fast_settings, wait_until

from gpufleet.k8s import resources as r
from gpufleet.k8s.health import OpsServer
from gpufleet.live.scheduler import Scheduler
from gpufleet.live.settings import SecureMetricsSettings, settings_from_text

TLS = Path(__file__).parent / "webhook_tls"
PROMETHEUS = "system:serviceaccount:monitoring:prometheus"
TOKENS = {"prometheus-token": {"username": PROMETHEUS, "uid": "u-prom", "groups": ["system:serviceaccounts"]},
          "intruder-token": {"username": "system:serviceaccount:ml:intruder", "uid": "u-x", "groups": []}}
JsonDict = dict[str, Any]


class AuthApi:
    """TokenReview and SubjectAccessReview on ApiSim's kmock: who a token is, and whether it may get /metrics
    (only PROMETHEUS may). ``down`` makes both answer 503."""

    def __init__(self, apisim: ApiSim) -> None:
        self.apisim = apisim
        self.token_reviews: list[JsonDict] = []
        self.access_reviews: list[JsonDict] = []
        self.down = False
        tokens = apisim.kmock["post", kmock.resource(r.TOKEN_REVIEWS.group, r.TOKEN_REVIEWS.version,
                                                     r.TOKEN_REVIEWS.plural)]
        access = apisim.kmock["post", kmock.resource(r.SUBJECT_ACCESS_REVIEWS.group, r.SUBJECT_ACCESS_REVIEWS.version,
                                                     r.SUBJECT_ACCESS_REVIEWS.plural)]
        apisim.harness.call(lambda: tokens << self._token_review)
        apisim.harness.call(lambda: access << self._access_review)

    def _token_review(self, request: kmock.Request) -> JsonDict:
        if self.down:
            raise failure(503, "ServiceUnavailable", "the API server is restarting")
        body = dict(request.data)
        self.token_reviews.append(body)
        user = TOKENS.get(body["spec"]["token"])
        status: JsonDict = {"authenticated": True, "user": user} if user else {"authenticated": False,
                                                                              "error": "invalid bearer token"}
        return {**body, "status": status}

    def _access_review(self, request: kmock.Request) -> JsonDict:
        if self.down:
            raise failure(503, "ServiceUnavailable", "the API server is restarting")
        body = dict(request.data)
        self.access_reviews.append(body)
        spec = body["spec"]
        allowed = spec["user"] == PROMETHEUS and spec.get("nonResourceAttributes") == {"path": "/metrics",
                                                                                     "verb": "get"}
        return {**body, "status": {"allowed": allowed, **({} if allowed else {"reason": "no RBAC rule"})}}


def _by_role(sched: Scheduler) -> tuple[OpsServer, OpsServer]:
    [probes] = [s for s in sched.servers if s.serves_probes]
    [metrics] = [s for s in sched.servers if s.serves_metrics]
    assert probes is not metrics
    return probes, metrics


def test_probes_and_metrics_listen_apart_and_each_serves_only_its_own(
    apisim: ApiSim, live_scheduler: Callable[..., Scheduler]
) -> None:
    sched = live_scheduler(settings=fast_settings(metrics_bind_address="localhost:0"))
    probes, metrics = _by_role(sched)
    with httpx.Client(timeout=5.0) as c:
        wait_until(lambda: c.get(f"http://127.0.0.1:{probes.port}/readyz").status_code == 200)
        assert c.get(f"http://127.0.0.1:{probes.port}/healthz").status_code == 200
        assert c.get(f"http://127.0.0.1:{probes.port}/metrics").status_code == 404
        assert c.get(f"http://127.0.0.1:{metrics.port}/metrics").status_code == 200
        for path in ("/healthz", "/readyz"):
            assert c.get(f"http://127.0.0.1:{metrics.port}{path}").status_code == 404


@pytest.fixture
def secured(apisim: ApiSim, live_scheduler: Callable[..., Scheduler]) -> tuple[Scheduler, AuthApi, str]:
    auth = AuthApi(apisim)
    settings = fast_settings(metrics_bind_address="localhost:0",
                             secure_metrics=SecureMetricsSettings(True, str(TLS / "tls.crt"), str(TLS / "tls.key")))
    sched = live_scheduler(settings=settings)
    _, metrics = _by_role(sched)
    return sched, auth, f"https://localhost:{metrics.port}/metrics"


def _https() -> httpx.Client:
    return httpx.Client(verify=ssl.create_default_context(cafile=str(TLS / "tls.crt")), timeout=10.0)


def scrape(url: str, token: str | None) -> httpx.Response:
    with _https() as c:
        return c.get(url, headers={"Authorization": f"Bearer {token}"} if token else {})


def test_metrics_need_a_token_the_api_server_accepts_and_a_user_it_authorizes(
    secured: tuple[Scheduler, AuthApi, str],
) -> None:
    sched, auth, url = secured
    probes, _ = _by_role(sched)
    with httpx.Client(timeout=5.0) as c:  # the kubelet's probes stay plain HTTP, unauthenticated
        wait_until(lambda: c.get(f"http://127.0.0.1:{probes.port}/healthz").status_code == 200)
    with pytest.raises(httpx.HTTPError):  # no plain HTTP on the metrics port
        httpx.get(url.replace("https://", "http://"), timeout=5.0)

    missing = scrape(url, None)
    assert missing.status_code == 401 and "bearer token" in missing.text and not auth.token_reviews
    unknown = scrape(url, "stolen-token")
    assert unknown.status_code == 401 and "not accepted" in unknown.text
    assert auth.token_reviews[-1]["spec"] == {"token": "stolen-token"} and not auth.access_reviews
    intruder = scrape(url, "intruder-token")
    assert intruder.status_code == 403 and "intruder" in intruder.text and "no RBAC rule" in intruder.text

    allowed = scrape(url, "prometheus-token")
    assert allowed.status_code == 200 and "gpufleet_informers_synced" in allowed.text
    review = auth.access_reviews[-1]
    assert review["apiVersion"] == "authorization.k8s.io/v1" and review["kind"] == "SubjectAccessReview"
    assert review["spec"] == {"user": PROMETHEUS, "uid": "u-prom", "groups": ["system:serviceaccounts"],
                              "nonResourceAttributes": {"path": "/metrics", "verb": "get"}}
    # Decisions are cached for a while: the next scrapes cost the API server nothing.
    reviews = (len(auth.token_reviews), len(auth.access_reviews))
    assert scrape(url, "prometheus-token").status_code == 200
    assert scrape(url, "intruder-token").status_code == 403
    assert (len(auth.token_reviews), len(auth.access_reviews)) == reviews


def test_an_unreachable_api_server_gives_503_and_is_not_remembered(secured: tuple[Scheduler, AuthApi, str]) -> None:
    _, auth, url = secured
    auth.down = True
    answer = scrape(url, "prometheus-token")
    assert answer.status_code == 503 and "try again" in answer.text
    auth.down = False
    assert scrape(url, "prometheus-token").status_code == 200


def test_secure_metrics_need_a_port_of_their_own() -> None:
    text = "metricsBindAddress: ':8080'\nhealthProbeBindAddress: ':8080'\nsecureMetrics: {enabled: true}\n"
    _, problems = settings_from_text(text, "config.yaml")
    [error] = problems.errors
    assert "secureMetrics needs a metrics port of its own" in error.message and error.field == "metricsBindAddress"
    settings, problems = settings_from_text(text.replace("':8080'\nsecureMetrics", "':8081'\nsecureMetrics"))
    assert not problems.errors and settings.secure_metrics.enabled
    assert dataclasses.replace(settings.secure_metrics, enabled=False) == SecureMetricsSettings()
