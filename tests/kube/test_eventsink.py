"""The event sink against kmock over real HTTP: posting never waits on the API server; a full queue drops and
counts; an event like one still waiting is merged into it and written once with its series count."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import kmock
import pytest
from kube_apisim import ApiSim
from live_env import events, pod, wait_until

from gpufleet.k8s import resources as r
from gpufleet.k8s.client import KubeClient, make_event
from gpufleet.k8s.eventsink import EventSink

EVENTS_RES = kmock.resource("events.k8s.io/v1/events")


class Gate:
    """Holds every Event POST at the server until opened (the writer thread then waits on the wire)."""

    def __init__(self, apisim: ApiSim) -> None:
        self.apisim = apisim
        self.arrived = 0
        self._open: asyncio.Event = apisim.harness.call(asyncio.Event)
        apisim.harness.call(lambda: apisim.kmock["post", EVENTS_RES] << self._hold)

    async def _hold(self, request: kmock.Request) -> Any:
        self.arrived += 1
        await self._open.wait()
        return self.apisim._create(r.EVENTS, dict(request.data), request.namespace)

    def open(self) -> None:
        self.apisim.harness.call(self._open.set)

    def held(self) -> int:
        return int(self.apisim.harness.call(lambda: self.arrived))


def scheduled(name: str, note: str = "") -> dict[str, Any]:
    regarding = {**pod(name), "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"}}
    return make_event(regarding, reason="Scheduled", note=note or f"Successfully assigned ml/{name} to n0",
                      action="Binding", reporting_controller="gpufleet", reporting_instance="test")


@pytest.fixture
def sink(client: KubeClient) -> Iterator[tuple[EventSink, list[int]]]:
    drops: list[int] = []
    instance = EventSink(client, on_drop=drops.append, capacity=3)
    try:
        yield instance, drops
    finally:
        instance.close(timeout=5.0)


def test_posting_never_waits_a_full_queue_drops_and_counts_and_like_events_are_merged(
    apisim: ApiSim, sink: tuple[EventSink, list[int]]
) -> None:
    gate = Gate(apisim)
    events_sink, drops = sink
    assert events_sink.post(scheduled("a"))
    wait_until(lambda: gate.held() == 1, what="the first event on the wire")  # the writer is stuck in it
    # While the API server does not answer, posting goes on without waiting: three fit, like ones merge.
    assert events_sink.post(scheduled("b"))
    assert events_sink.post(scheduled("b"))  # the same event again: merged into the waiting one
    assert events_sink.post(scheduled("c"))
    assert events_sink.post(scheduled("d"))
    assert not events_sink.post(scheduled("e"))  # the queue holds 3: dropped
    assert not events_sink.post(scheduled("f"))
    assert events_sink.post(scheduled("b"))  # still merged: a drop is only for a new event
    assert (events_sink.merged, events_sink.dropped, sum(drops)) == (2, 2, 2)
    assert events_sink.pending() == 4

    gate.open()
    assert events_sink.flush(timeout=10.0)
    written = {e["regarding"]["name"]: e for e in events(apisim, "Scheduled")}
    assert sorted(written) == ["a", "b", "c", "d"]
    assert written["b"]["series"]["count"] == 3 and written["b"]["series"]["lastObservedTime"].endswith("Z")
    assert "series" not in written["a"] and "series" not in written["c"]
    assert events_sink.written == 4


def test_closing_writes_what_waits_within_its_deadline_and_counts_the_rest_dropped(
    apisim: ApiSim, client: KubeClient
) -> None:
    drops: list[int] = []
    events_sink = EventSink(client, on_drop=drops.append, capacity=10)
    for name in ("a", "b", "c"):
        events_sink.post(scheduled(name))
    assert events_sink.flush(timeout=10.0)
    assert len(events(apisim, "Scheduled")) == 3

    gate = Gate(apisim)
    for name in ("d", "e", "f"):
        events_sink.post(scheduled(name))
    wait_until(lambda: gate.held() == 1, what="an event on the wire")
    events_sink.close(timeout=0.2)  # the server holds "d": "e" and "f" cannot be written in time
    assert (events_sink.dropped, sum(drops)) == (2, 2)
    assert not events_sink.post(scheduled("g"))  # closed: dropped, and counted
    assert sum(drops) == 3
    gate.open()
    wait_until(lambda: len(events(apisim, "Scheduled")) == 4, what="the event on the wire written")


def test_a_failed_write_is_dropped_and_the_writer_goes_on(apisim: ApiSim, client: KubeClient) -> None:
    apisim.harness.call(lambda: apisim.kmock["post", EVENTS_RES][:1] << 500)
    events_sink = EventSink(client, capacity=10)
    try:
        events_sink.post(scheduled("lost"))
        events_sink.post(scheduled("kept"))
        assert events_sink.flush(timeout=10.0)
        assert [e["regarding"]["name"] for e in events(apisim, "Scheduled")] == ["kept"]
        assert (events_sink.failed, events_sink.written) == (1, 1)
    finally:
        events_sink.close()
