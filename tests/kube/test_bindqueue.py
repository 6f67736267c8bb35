"""Settling pipelined bind jobs, with a real Binder against kmock over real HTTP: what stays assumed, what is
given up, what the cycle's report and callbacks see."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import kmock
import pytest
from kube_apisim import ApiSim, failure
from live_env import NS, PODS_RES, bound_node, node, pod, wait_until

from gpufleet.k8s import resources as r
from gpufleet.k8s.annotations import Intent
from gpufleet.k8s.client import KubeClient
from gpufleet.live.assumed import AssumedPods
from gpufleet.live.binder import Binder, BindJob, BindResult, PodBind
from gpufleet.live.bindqueue import BindQueue
from gpufleet.live.recorder import Recorder
from gpufleet.scheduler_metrics import SchedulerMetrics

ASSUMED_AT, SETTLED_AT, TTL = 1000.0, 5000.0, 30.0


@dataclass
class Report:
    number: int
    bound: list[str] = field(default_factory=list)
    bind_failed: dict[str, str] = field(default_factory=dict)
    bind_cpu_s: float = 0.0


@pytest.fixture
def short_client(apisim: ApiSim) -> Iterator[KubeClient]:
    with KubeClient(host=apisim.url, timeout=0.3) as c:
        yield c


def test_settling_keeps_what_may_still_land_releases_what_did_not_and_reports_once_all_ended(
    apisim: ApiSim, short_client: KubeClient
) -> None:
    apisim.create(r.NODES, node("n0", gpus=4))
    created = {name: apisim.create(r.PODS, pod(name)) for name in ("ok", "refused", "silent")}
    never: asyncio.Event = apisim.harness.call(asyncio.Event)

    async def bind(request: kmock.Request) -> Any:
        if request.name == "refused":
            raise failure(403, "Forbidden", "pods/binding is forbidden")  # refused outright: nothing written
        if request.name == "silent":
            await never.wait()  # no answer, ever: the client times out
        return apisim._bind(r.PODS, request.namespace, request.name or "", request.data)

    apisim.harness.call(lambda: apisim.kmock["post", PODS_RES, lambda q: q.subresource == "binding"] << bind)
    metrics = SchedulerMetrics()
    binder = Binder(short_client, Recorder(short_client, "gpufleet", "test"), metrics, may_write=lambda: True,
                    retries=1, backoff=0.01)
    assumed = AssumedPods(TTL)
    released: list[int] = []
    queue = BindQueue(binder, assumed, workers=4, metrics=metrics, on_release=lambda: released.append(1),
                      clock=lambda: SETTLED_AT)

    def bind_of(name: str) -> PodBind:
        uid = created[name]["metadata"]["uid"]
        assumed.assume(f"{NS}/{name}", uid, Intent("n0", ("GPU-n0-0",), ASSUMED_AT), ASSUMED_AT)
        return PodBind(f"{NS}/{name}", uid, "n0", ("GPU-n0-0",), None, created[name])

    broken = PodBind("no-namespace", None, "n0", (), None, {})  # a bug: its job raises
    assumed.assume("no-namespace", None, Intent("n0", (), ASSUMED_AT), ASSUMED_AT)
    report = Report(7)
    after: list[str] = []
    jobs = [BindJob(f"{NS}/{n}", (bind_of(n),)) for n in ("ok", "refused", "silent")]
    queue.submit(report, [*jobs, BindJob("broken", (broken,))], ASSUMED_AT)
    queue.after(report, lambda: after.append(f"{len(report.bound)} bound, {len(report.bind_failed)} failed"))
    assert queue.drain(timeout=30.0)

    assert after == ["1 bound, 3 failed"]  # run once, when every job had ended, with the report filled in
    assert report.bound == [f"{NS}/ok"] and bound_node(apisim, "ok") == "n0"
    assert set(report.bind_failed) == {f"{NS}/refused", f"{NS}/silent", "no-namespace"}
    assert "refused" in report.bind_failed[f"{NS}/refused"] and report.bind_failed["no-namespace"] == "internal error"
    # Refused outright: given up at once, and the loop is told its capacity is free.
    assert assumed.get(f"{NS}/refused", None, ASSUMED_AT) is None and released == [1]
    # No answer, and one that raised: kept where they were going, for a full TTL from when they ended.
    for key in (f"{NS}/silent", "no-namespace"):
        assert assumed.get(key, None, SETTLED_AT + TTL - 1) is not None, key
    assert assumed.get(f"{NS}/ok", None, ASSUMED_AT) is not None  # until the cache shows it bound
    assert queue.in_flight() == 0 and metrics.binds_in_flight._value.get() == 0

    late: list[str] = []
    queue.after(report, lambda: late.append("now"))  # the cycle has settled: runs at once
    assert late == ["now"]
    queue.close()
    apisim.harness.call(never.set)  # let the held requests end before the server stops


class GatedBinder:
    """Binds each job once its gate opens (a job per workload, named after it)."""

    def __init__(self, names: list[str]) -> None:
        self.gates = {name: threading.Event() for name in names}

    def run(self, job: BindJob, now: float) -> BindResult:
        assert self.gates[job.workload].wait(30.0), f"{job.workload} never released"
        return BindResult(job.workload, bound=[p.key for p in job.pods])


def test_a_cycle_that_hands_jobs_over_twice_ends_when_the_last_of_them_does() -> None:
    """A round's early Bindings and its end's are one cycle (gpufleet.live.bindstream): the callbacks wait for both."""
    binder = GatedBinder(["ml/a", "ml/b"])
    queue = BindQueue(binder, AssumedPods(TTL), workers=2, metrics=SchedulerMetrics())  # type: ignore[arg-type]
    report = Report(7)
    ended = threading.Event()
    try:
        job = lambda w: BindJob(w, (PodBind(f"{w}-0", "uid", "n0", (), None, {"metadata": {}}),))  # noqa: E731
        queue.submit(report, [job("ml/a")], ASSUMED_AT)
        queue.submit(report, [job("ml/b")], ASSUMED_AT)
        queue.after(report, ended.set)
        binder.gates["ml/a"].set()
        wait_until(lambda: queue.in_flight() == 1, what="ml/a's job settled")
        assert not ended.is_set()  # ml/b's job still runs
        binder.gates["ml/b"].set()
        assert ended.wait(30.0)
        assert queue.drain(30.0)
        assert sorted(report.bound) == ["ml/a-0", "ml/b-0"] and queue.in_flight() == 0
    finally:
        for gate in binder.gates.values():
            gate.set()
        queue.close()
