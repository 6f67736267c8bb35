"""Pipelined Bindings (issue 15, item 8) against kmock + ApiSim over real HTTP: while cycles run on with Bindings
of earlier cycles in flight, and Bindings fail, lose their answer or time out and land late, no pod is bound
twice and no GPU is ever held by two pods.

The audit sits in front of ApiSim's ``pods/binding``: it injects the faults and checks, at every Binding the
server is about to apply, that the node has room for the pod and that none of the GPUs the Binding names is
held by another pod bound there. The late Bindings are the dangerous ones: the scheduler gives up waiting (its
client times out, the read-back shows the pod unbound) and only then does the server apply them. A scheduler
that took that for a failure would hand the pod's GPU to a pending pod, and the late Binding would then
double-book it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import kmock
import pytest
from kube_apisim import ApiSim, failure
from live_env import (
    FAST_INFORMERS,
    NS,
    PODS_RES,
    bound_node,
    fast_settings,
    node,
    pod,
    priority_class,
    wait_until,
)

from gpufleet.k8s import resources as r
from gpufleet.k8s.client import KubeClient
from gpufleet.live.scheduler import Scheduler
from gpufleet.live.settings import BindingSettings

NODES, GPUS = 4, 4
CLIENT_TIMEOUT = 0.5  # the scheduler's: a late Binding is one the server applies after this
LATE_S = 3.0  # how long the server sits on a late Binding before applying it
LATE_WINDOW_S = 2.2  # every attempt within this long of a late pod's first is late: the binder gives up first


def fault_of(index: int) -> str:
    return ("late", "refused", "refused-hard", "lost", "ok", "ok")[index % 6]


@dataclass
class Audit:
    """Faults in front of ApiSim's Bindings, and what the server saw (loop thread only)."""

    apisim: ApiSim
    faults: dict[str, str]
    attempts: Counter[str] = field(default_factory=Counter)
    accepted: Counter[str] = field(default_factory=Counter)
    late_started: dict[str, float] = field(default_factory=dict)
    tasks: set[asyncio.Future[Any]] = field(default_factory=set)
    sleeping: int = 0
    late_applied: int = 0
    violations: list[str] = field(default_factory=list)

    async def bind(self, request: kmock.Request) -> Any:
        name = request.name or ""
        self.attempts[name] += 1
        attempt = self.attempts[name]
        fault = self.faults.get(name, "ok")
        if fault == "refused" and attempt <= 2:
            raise failure(500, "InternalError", "etcd hiccup, nothing written")
        if fault == "refused-hard" and attempt <= 4:  # more than the binder's 3 retries: it gives up
            raise failure(503, "ServiceUnavailable", "apiserver overloaded, nothing written")
        if fault == "late" and time.monotonic() - self.late_started.setdefault(name, time.monotonic()) < LATE_WINDOW_S:
            # Applied LATE_S from now whatever the client does: aiohttp cancels the handler when the client hangs
            # up on its timeout, and shield() keeps the write going, as a real server's storage write does.
            self.sleeping += 1
            task = asyncio.ensure_future(self.late(request))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
            task.add_done_callback(lambda t: t.cancelled() or t.exception())  # a 409 nobody waits for any more
            return await asyncio.shield(task)
        answer = self.apply(request)
        if fault == "lost" and attempt == 1:
            raise failure(500, "InternalError", "connection to etcd lost after the write")
        return answer

    async def late(self, request: kmock.Request) -> Any:
        try:
            await asyncio.sleep(LATE_S)
            try:
                return self.apply(request)
            finally:
                self.late_applied += 1
        finally:
            self.sleeping -= 1

    def apply(self, request: kmock.Request) -> Any:
        name, body = request.name or "", request.data
        target = body["target"]["name"]
        current = self.apisim.objects[r.PODS.key].get((NS, name))
        placed = (current or {}).get("spec", {}).get("nodeName")
        if placed and placed != target:
            self.violations.append(f"{name}: a Binding to {target} while bound to {placed}")
        if current is not None and not placed:
            notes = (body.get("metadata") or {}).get("annotations") or {}
            wanted = json.loads(notes.get("gpufleet.io/devices", "[]"))
            held = self.devices_on(target)
            if len(held) + len(wanted) > GPUS:
                self.violations.append(f"{name}: {target} would hold {len(held) + len(wanted)} GPUs of {GPUS}")
            shared = set(wanted) & set(held)
            if shared:
                self.violations.append(f"{name}: GPUs {sorted(shared)} on {target} already held by "
                                       f"{sorted({held[d] for d in shared})}")
        out = self.apisim._bind(r.PODS, request.namespace, name, body)  # raises 409 when already bound
        self.accepted[name] += 1
        return out

    def devices_on(self, node_name: str) -> dict[str, str]:
        """GPU -> the pod bound to ``node_name`` that holds it."""
        held: dict[str, str] = {}
        for (_, name), obj in self.apisim.objects[r.PODS.key].items():
            if (obj.get("spec") or {}).get("nodeName") == node_name:
                notes = (obj.get("metadata") or {}).get("annotations") or {}
                for device in json.loads(notes.get("gpufleet.io/devices", "[]")):
                    held[device] = name
        return held


@pytest.fixture
def scheduler(apisim: ApiSim) -> Iterator[Scheduler]:
    settings = fast_settings(binding=BindingSettings(workers=8, retries=3, retry_backoff=0.01,
                                                     gang_repair_timeout=30.0, assume_timeout=20.0))
    client = KubeClient(host=apisim.url, timeout=CLIENT_TIMEOUT, user_agent="gpufleet-test/pipeline")
    instance = Scheduler(client, settings, identity="pipeline", leader_elect=False, informer_options=FAST_INFORMERS)
    try:
        yield instance
    finally:
        instance.stop()
        client.close()


def test_concurrent_binds_with_failures_and_late_answers_never_bind_twice_nor_share_a_gpu(
    apisim: ApiSim, scheduler: Scheduler
) -> None:
    for i in range(NODES):
        apisim.create(r.NODES, node(f"n{i}", gpus=GPUS))
    apisim.create(r.PRIORITY_CLASSES, priority_class("urgent", 1000))
    first = [f"p{i:02d}" for i in range(NODES * GPUS)]  # every GPU
    urgent = [f"u{i}" for i in range(4)]  # come while the first wave is being bound, and go first
    audit = Audit(apisim, {name: fault_of(i) for i, name in enumerate(first)})
    apisim.harness.call(lambda: apisim.kmock["post", PODS_RES, lambda q: q.subresource == "binding"] << audit.bind)
    for name in first:
        apisim.create(r.PODS, pod(name))
    scheduler.start()
    late = [n for n in first if audit.faults[n] == "late"]

    def quiet() -> bool:  # every late Binding has been applied (or refused) by the server
        return apisim.atomically(lambda _: audit.sleeping == 0 and len(audit.late_started) == len(late))

    # The urgent pods arrive while the late Bindings hang: there is no GPU for them, and when the binders give
    # up on the late ones (no answer, read back unbound) there still is none, for those Bindings will land.
    wait_until(lambda: apisim.atomically(lambda _: len(audit.late_started)) == len(late), timeout=60.0,
               what="the late Bindings sent")
    for name in urgent:
        apisim.create(r.PODS, pod(name, priority_class="urgent"))
    everyone = first + urgent

    def bound() -> list[str]:
        return [n for n in everyone if bound_node(apisim, n)]

    # Every GPU taken (by the first wave, and by urgent pods where a Binding was refused for good).
    wait_until(lambda: len(bound()) >= NODES * GPUS and quiet(), timeout=90.0, what="every GPU taken")
    assert 'gpufleet_bind_errors_total{code="0"}' in scheduler.metrics.exposition().decode()  # answers lost
    assert apisim.atomically(lambda _: audit.late_applied) >= len(late)  # and the Bindings applied after that
    assert set(late) <= set(bound())

    # Free four GPUs: whoever waits takes them, while cycles run with whatever is still in flight.
    freed = [n for n in bound() if n not in late][:4]
    for name in freed:
        apisim.delete(r.PODS, NS, name)
    survivors = [n for n in everyone if n not in freed]
    wait_until(lambda: all(bound_node(apisim, n) for n in survivors) and quiet(), timeout=90.0,
               what="the waiting pods bound on the freed GPUs")

    violations, accepted = apisim.atomically(lambda _: (list(audit.violations), Counter(audit.accepted)))
    assert violations == []
    assert all(n <= 1 for n in accepted.values()), {k: v for k, v in accepted.items() if v > 1}
    assert {n for n in survivors if accepted[n] == 1} == set(survivors)
    final: dict[str, list[str]] = {}
    for name in survivors:
        obj = apisim.get(r.PODS, NS, name)
        assert obj is not None
        final.setdefault(obj["spec"]["nodeName"], []).extend(
            json.loads(obj["metadata"]["annotations"]["gpufleet.io/devices"]))
    for node_name, devices in final.items():
        assert len(devices) == len(set(devices)) <= GPUS, (node_name, devices)
