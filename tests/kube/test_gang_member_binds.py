"""A gang's Bindings: in the job's order until one carrying the gang's plan succeeds, then the other members
together (gpufleet.live.binder). A client that answers the members only once they are all in flight proves the
second part without a clock: bound one after another, the first member would wait for the others forever."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

from gpufleet.k8s.annotations import GANG_PLAN_ANNOTATION
from gpufleet.k8s.errors import ServerError
from gpufleet.live.binder import Binder, BindJob, PodBind
from gpufleet.scheduler_metrics import SchedulerMetrics

WAIT = 30.0  # seconds a member waits for the others before the test fails


class Client:
    """Answers the first Binding that carries the plan at once (after ``refuse_first`` refusals); every other
    Binding only once ``members`` of them are waiting together."""

    def __init__(self, members: int, refuse_first: int = 0) -> None:
        self.barrier = threading.Barrier(members, timeout=WAIT)
        self.refuse_first = refuse_first
        self.calls: list[tuple[str, bool]] = []  # (pod, carried the plan), in the order they were sent
        self.threads: dict[str, int] = {}  # pod -> the thread that sent its Binding
        self.lock = threading.Lock()

    def bind(self, namespace: str, pod_name: str, node_name: str, *, pod_uid: str | None = None,
             annotations: Mapping[str, str] | None = None) -> None:
        planned = GANG_PLAN_ANNOTATION in (annotations or {})
        with self.lock:
            self.calls.append((pod_name, planned))
            self.threads[pod_name] = threading.get_ident()
            refuse = planned and self.refuse_first > 0
            if refuse:
                self.refuse_first -= 1
        if refuse:
            raise ServerError(503, "try again")
        if not planned and self.barrier.parties > 1:
            self.barrier.wait()  # raises BrokenBarrierError when the members do not come together

    def get(self, resource: object, name: str, namespace: str | None = None) -> dict[str, object]:
        """Read back after a refused Binding: still unbound."""
        return {"metadata": {"name": name, "uid": f"uid-{name[1:]}"}, "spec": {}}


def pods(n: int) -> tuple[PodBind, ...]:
    return tuple(PodBind(f"ml/m{i}", f"uid-{i}", f"n{i % 2}", (f"GPU-{i}",), None, {"metadata": {}})
                 for i in range(n))


def binder(client: Client, **options: object) -> Binder:
    events: list[str] = []
    recorder = type("R", (), {"scheduled": lambda self, raw, node: events.append(node)})()
    return Binder(client, recorder, SchedulerMetrics(), may_write=lambda: True, retries=0,  # type: ignore[arg-type]
                  sleep=lambda _: None, **options)  # type: ignore[arg-type]


def test_the_members_after_the_one_carrying_the_plan_are_bound_together() -> None:
    client = Client(members=5)
    b = binder(client)
    try:
        result = b.run(BindJob("ml/gang", pods(6)), 1000.0)
    finally:
        b.close()
    assert result.bound == [f"ml/m{i}" for i in range(6)] and not result.failed  # recorded in the job's order
    assert client.calls[0] == ("m0", True)  # the plan first, alone, on the job's thread
    assert client.threads["m0"] == threading.get_ident() != client.threads["m1"]
    assert sorted(name for name, planned in client.calls[1:] if not planned) == [f"m{i}" for i in range(1, 6)]


def test_until_the_plan_is_recorded_each_binding_carries_it_one_after_another() -> None:
    client = Client(members=4, refuse_first=1)  # m0's Binding is refused: m1 carries the plan in its place
    b = binder(client)
    try:
        result = b.run(BindJob("ml/gang", pods(6)), 1000.0)
    finally:
        b.close()
    assert client.calls[:2] == [("m0", True), ("m1", True)]
    assert result.bound == [f"ml/m{i}" for i in range(1, 6)] and set(result.failed) == {"ml/m0"}


def test_without_member_threads_the_members_go_one_after_another_on_the_jobs_thread() -> None:
    client = Client(members=1)  # no one waits for anyone
    b = binder(client, member_workers=0)
    result = b.run(BindJob("ml/gang", pods(4)), 1000.0)
    assert result.bound == [f"ml/m{i}" for i in range(4)]
    assert set(client.threads.values()) == {threading.get_ident()}
    assert [name for name, _ in client.calls] == ["m0", "m1", "m2", "m3"]


class BusyClient(Client):
    """Each Binding costs its thread ``cpu`` seconds of CPU (measured on that thread's clock, whatever the load)."""

    def __init__(self, members: int, cpu: float) -> None:
        super().__init__(members)
        self.cpu = cpu

    def bind(self, namespace: str, pod_name: str, node_name: str, *, pod_uid: str | None = None,
             annotations: Mapping[str, str] | None = None) -> None:
        started = time.thread_time()
        while time.thread_time() - started < self.cpu:
            pass
        super().bind(namespace, pod_name, node_name, pod_uid=pod_uid, annotations=annotations)


def test_the_member_threads_cpu_counts_in_the_jobs_client_cpu() -> None:
    client = BusyClient(members=4, cpu=0.02)
    b = binder(client)
    try:
        result = b.run(BindJob("ml/gang", pods(5)), 1000.0)
    finally:
        b.close()
    assert len(result.bound) == 5
    assert result.client_cpu_seconds >= 5 * 0.02  # the first on the job's thread, four on the members'
