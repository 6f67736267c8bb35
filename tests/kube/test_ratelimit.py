"""The client-side token bucket (clientConnection qps/burst) and the rate-limited client view, against kmock."""

from __future__ import annotations

import pytest
from kube_apisim import ApiSim

from gpufleet.k8s import resources as r
from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.ratelimit import TokenBucket
from gpufleet.live.settings import ClientConnectionSettings, settings_from_text


class FrozenClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))


def test_a_burst_goes_at_once_then_callers_are_spaced_in_the_order_they_asked() -> None:
    clock = FrozenClock()
    bucket = TokenBucket(10.0, 3, clock=clock, sleep=clock.sleep)
    assert [round(bucket.reserve(), 6) for _ in range(6)] == [0.0, 0.0, 0.0, 0.1, 0.2, 0.3]
    clock.now += 0.3  # the three reserved tokens came due, nothing is left over
    assert round(bucket.reserve(), 6) == 0.1
    clock.now += 60.0  # a long quiet spell refills only up to the burst
    assert [round(bucket.reserve(), 6) for _ in range(4)] == [0.0, 0.0, 0.0, 0.1]


def test_zero_or_negative_qps_means_no_limit_and_a_burst_below_one_is_refused() -> None:
    clock = FrozenClock()
    for qps in (0.0, -1.0):
        bucket = TokenBucket(qps, 0, clock=clock, sleep=clock.sleep)
        for _ in range(1000):
            bucket.wait()
        assert bucket.unlimited and clock.slept == []
    with pytest.raises(ValueError, match="burst must be at least 1"):
        TokenBucket(5.0, 0)


def test_a_limited_view_waits_for_a_token_before_each_call_and_shares_the_connections(
    apisim: ApiSim, client: KubeClient
) -> None:
    clock = FrozenClock()
    view = client.limited(TokenBucket(20.0, 2, clock=clock, sleep=clock.sleep))
    for i in range(5):
        view.create(r.NAMESPACES, {"metadata": {"name": f"ns-{i}"}})
    assert clock.slept == [0.05, 0.1, 0.15]  # two at once, then one every 1/20 s, each later caller further back
    view.close()  # a view owns no connection: the client it came from still works
    assert len(client.list(r.NAMESPACES).items) == 5
    assert clock.slept == [0.05, 0.1, 0.15]  # the client itself is not limited


def test_client_connection_settings_are_read_and_checked() -> None:
    settings, problems = settings_from_text("clientConnection: {qps: 50, burst: 100}\n", "c.yaml")
    assert not problems.errors and settings.client_connection == ClientConnectionSettings(50.0, 100)
    settings, problems = settings_from_text("clientConnection: {qps: -1}\n", "c.yaml")
    assert not problems.errors and settings.client_connection.qps == -1.0  # no limit, as in client-go
    _, problems = settings_from_text("clientConnection: {qps: fast, burst: 0, kubeconfig: x}\n", "c.yaml")
    errors = [str(e) for e in problems.errors]
    assert any("clientConnection.qps: expected a finite number" in e for e in errors), errors
    assert any("clientConnection.burst: must be at least 1" in e for e in errors), errors
    assert any("clientConnection.kubeconfig: unknown field kubeconfig" in e and "known fields: qps, burst" in e
               for e in errors), errors
