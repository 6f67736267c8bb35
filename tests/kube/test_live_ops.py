"""Operations: /healthz, /readyz and /metrics over HTTP, JSON logs, and waitForPodsReady gang timeouts."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Callable

import httpx
import pytest
from kube_apisim import ApiSim
from live_env import NS, bound_node, fast_settings, node, pod, wait_until

from gpufleet.api.objects import PodsReadyPolicy, SchedulerConfig
from gpufleet.k8s import resources as r
from gpufleet.k8s.logs import JsonFormatter, setup_logging
from gpufleet.live.scheduler import Scheduler


def test_probes_and_metrics_over_http(apisim: ApiSim, live_scheduler: Callable[..., Scheduler]) -> None:
    apisim.create(r.NODES, node("n0", gpus=2))
    apisim.create(r.PODS, pod("p0"))
    sched = live_scheduler()
    wait_until(lambda: bound_node(apisim, "p0") == "n0")
    [server] = sched.servers  # metrics and probes share 127.0.0.1:0 in the test settings
    base = f"http://127.0.0.1:{server.port}"
    with httpx.Client(base_url=base, timeout=5.0) as c:
        assert c.get("/healthz").status_code == 200
        ready = c.get("/readyz")
        assert ready.status_code == 200 and "caches synced; leader" in ready.text
        wait_until(lambda: "gpufleet_pods_scheduled_total 1.0" in c.get("/metrics").text)
        metrics = c.get("/metrics")
        assert metrics.headers["content-type"].startswith("text/plain")
        for family in ("gpufleet_cycle_duration_seconds_bucket", "gpufleet_pending_workloads",
                       "gpufleet_preemptions_total", "gpufleet_gang_timeouts_total", "gpufleet_bind_errors_total",
                       'gpufleet_cycle_phase_seconds_total{phase="core"}', "gpufleet_informers_synced 1.0"):
            assert family in metrics.text, family
        assert c.get("/nothing").status_code == 404


def test_readyz_fails_until_every_informer_has_listed(apisim: ApiSim,
                                                      live_scheduler: Callable[..., Scheduler]) -> None:
    sched = live_scheduler(run=False)
    probe = sched.readyz()
    assert not probe.ok and "pods" in probe.text and "clusterqueues.gpufleet.io" in probe.text
    sched.start()
    wait_until(lambda: sched.readyz().ok)


def test_logs_are_json_lines_with_extra_fields() -> None:
    stream = io.StringIO()
    setup_logging("info", stream)
    try:
        logging.getLogger("gpufleet.test").info("bound %d pods", 3, extra={"cycle": 7})
        try:
            raise ValueError("boom")
        except ValueError:
            logging.getLogger("gpufleet.test").exception("failed")
        first, second = (json.loads(line) for line in stream.getvalue().splitlines())
        assert first["msg"] == "bound 3 pods" and first["cycle"] == 7 and first["level"] == "info"
        assert first["logger"] == "gpufleet.test" and first["ts"].endswith("Z")
        assert second["level"] == "error" and "ValueError: boom" in second["error"]
    finally:
        root = logging.getLogger()
        for handler in [h for h in root.handlers if isinstance(h.formatter, JsonFormatter)]:
            root.removeHandler(handler)
        root.setLevel(logging.WARNING)


def test_logs_go_to_stderr_as_it_is_when_each_record_comes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command run in-process swaps stderr for a stream it closes on return; its threads may log after that."""
    during, after = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", during)
    setup_logging("info")
    try:
        logging.getLogger("gpufleet.test").info("while the command runs")
        written = during.getvalue()
        monkeypatch.setattr(sys, "stderr", after)
        during.close()
        logging.getLogger("gpufleet.test").info("from a thread, after it returned")
        assert [json.loads(line)["msg"] for line in written.splitlines()] == ["while the command runs"]
        assert [json.loads(line)["msg"] for line in after.getvalue().splitlines()] == [
            "from a thread, after it returned"]  # and no "--- Logging error ---"
    finally:
        root = logging.getLogger()
        for handler in [h for h in root.handlers if isinstance(h.formatter, JsonFormatter)]:
            root.removeHandler(handler)
        root.setLevel(logging.WARNING)


READY_TIMEOUT = 5.0  # long enough for "solo" to be bound and marked Ready first, even on a loaded machine


# An hour's cycle period: the waitForPodsReady timeout's own timer wakes the cycle that evicts.
@pytest.mark.parametrize("cycle_period", [0.2, 3600.0])
def test_a_gang_not_ready_in_time_is_evicted(apisim: ApiSim, live_scheduler: Callable[..., Scheduler],
                                            cycle_period: float) -> None:
    apisim.create(r.NODES, node("n0", gpus=4))
    for i in range(2):
        apisim.create(r.PODS, pod(f"g{i}", group="pair", group_size=2))
    apisim.create(r.PODS, pod("solo"))
    kueue = SchedulerConfig(pods_ready=PodsReadyPolicy(enable=True, timeout_s=READY_TIMEOUT))
    sched = live_scheduler(settings=fast_settings(kueue=kueue, cycle_period=cycle_period))
    # The kubelet reports "solo" ready as soon as it is bound (before its own timeout can pass on a loaded
    # machine); the gang's pods never become ready (an image that never pulls).
    wait_until(lambda: bound_node(apisim, "solo") is not None, timeout=READY_TIMEOUT, what="solo bound")
    apisim.modify(r.PODS, NS, "solo", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    # (The gang's pods vanish only through the timeout's eviction, so the wait below also proves they ran.)
    wait_until(lambda: apisim.get(r.PODS, NS, "g0") is None and apisim.get(r.PODS, NS, "g1") is None,
               what="the unready gang evicted")
    assert bound_node(apisim, "solo") == "n0"
    wait_until(lambda: 'gpufleet_gang_timeouts_total{reason="PodsReadyTimeout"} 1.0'
               in sched.metrics.exposition().decode(), what="the timeout counted")
