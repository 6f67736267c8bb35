"""A round's admissions go to the binders while the round runs (gpufleet.live.bindstream), each pod once.

In process: the cycle runs on an ObjectCache filled by hand, and the bind queue is replaced by one that records
what it is handed and how many policy cycles the round had run by then. The round's end is known from the
cycle's report, so "while the round runs" is a count of policy cycles, not a clock."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from live_env import node, pod
from test_carried_cycles import Cluster, runner

from gpufleet.k8s import resources as r
from gpufleet.live import bindstream, planner
from gpufleet.live.binder import BindJob
from gpufleet.live.bindstream import BindStream
from gpufleet.live.cycle import CycleRunner
from gpufleet.scheduling.kueue import KueuePolicy
from gpufleet.scheduling.kueue.state import PODS_READY_TIMEOUT
from gpufleet.scheduling.types import PreemptedWorkload


class PolicyCycles:
    """Counts the policy cycles run (every KueuePolicy's)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = KueuePolicy.cycle

        def counted(policy: KueuePolicy, now: float) -> Any:
            self.count += 1
            return real(policy, now)

        monkeypatch.setattr(KueuePolicy, "cycle", counted)


class Handed:
    """Stands in for the bind queue: what it was handed, and the policy cycles run by then."""

    def __init__(self, cycles: PolicyCycles) -> None:
        self.cycles = cycles
        self.calls: list[tuple[int, list[str]]] = []
        self.devices: list[tuple[str, str]] = []  # (node, GPU) of every pod handed over

    def submit(self, report: Any, jobs: list[BindJob], now: float) -> None:
        if jobs:
            self.calls.append((self.cycles.count, [p.key for j in jobs for p in j.pods]))
            self.devices += [(p.node, d) for j in jobs for p in j.pods for d in p.devices]

    def close(self) -> None:
        pass


@pytest.fixture
def burst(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[CycleRunner, Handed, PolicyCycles]]:
    c = Cluster()
    for i in range(40):
        c.put(r.NODES, node(f"n{i}", gpus=8))
    for k in range(300):
        c.put(r.PODS, pod(f"p-{k:03d}", queue="lq"))
    run = runner(c)
    cycles = PolicyCycles(monkeypatch)
    handed = Handed(cycles)
    run.binds.close()
    run.binds = handed  # type: ignore[assignment]
    try:
        yield run, handed, cycles
    finally:
        run.close()


def test_a_bursts_bindings_start_while_its_round_runs_and_each_pod_is_handed_over_once(
        burst: tuple[CycleRunner, Handed, PolicyCycles]) -> None:
    run, handed, _ = burst
    report = run.run()
    assert len(report.admitted) == 300 and not report.carried
    assert len(handed.calls) >= 3  # batches of 64 during the round, the rest at its end
    first_at = handed.calls[0][0]
    assert first_at < report.policy_cycles // 2  # handed over with most of the round still to run
    sent = [key for _, keys in handed.calls for key in keys]
    assert len(sent) == len(set(sent)) == 300  # every admitted pod once, none twice
    assert run.assumed.keys() == set(sent)  # each assumed where it is going


def test_a_second_cycle_sends_nothing_again(burst: tuple[CycleRunner, Handed, PolicyCycles]) -> None:
    run, handed, _ = burst
    run.run()
    sent = len(handed.calls)
    second = run.run()  # nothing changed (the Bindings never landed: still assumed)
    assert not second.admitted and len(handed.calls) == sent


def _decisions(admitted: list[str], preempted: list[str], timed_out: list[str] | None = None) -> SimpleNamespace:
    return SimpleNamespace(admitted=[SimpleNamespace(workload=w) for w in admitted],
                           preempted=[PreemptedWorkload(w, "ns/preemptor", "InClusterQueue") for w in preempted]
                           + [PreemptedWorkload(w, "", PODS_READY_TIMEOUT) for w in timed_out or []])


class ScriptedPolicy:
    """Each cycle's decisions from a script; settled once the script is spent."""

    def __init__(self, script: list[SimpleNamespace]) -> None:
        self.script = script

    def cycle(self, now: float) -> SimpleNamespace:
        return self.script.pop(0) if self.script else _decisions([], [])

    def settled(self) -> bool:
        return not self.script

    def pending_report(self) -> list[Any]:
        return []


def test_the_round_stops_handing_admissions_over_at_its_first_preemption() -> None:
    heard: list[list[str]] = []
    policy = ScriptedPolicy([_decisions(["a"], []), _decisions(["b"], []), _decisions(["c"], ["x"]),
                             _decisions(["d"], [])])
    plan = planner.run(policy, 0.0, on_admitted=lambda adm: heard.append([a.workload for a in adm]))  # type: ignore[arg-type]
    assert heard == [["a"], ["b"]]  # c came with a preemption: from there on, the round's end
    assert [a.workload for a in plan.admitted] == ["a", "b", "c", "d"]  # all in the plan all the same


def test_a_waitforpodsready_timeout_does_not_stop_the_handing_over() -> None:
    # (nothing admitted waits for a timed-out workload's eviction: no preemptor counts on its room)
    heard: list[list[str]] = []
    policy = ScriptedPolicy([_decisions(["a"], [], ["late"]), _decisions(["b"], []), _decisions(["c"], ["x"])])
    plan = planner.run(policy, 0.0, on_admitted=lambda adm: heard.append([a.workload for a in adm]))  # type: ignore[arg-type]
    assert heard == [["a"], ["b"]]
    assert [p.workload for p in plan.preempted] == ["late", "x"]


def test_the_stream_sends_in_batches_and_stops_for_the_round_when_sending_fails(
        caplog: pytest.LogCaptureFixture) -> None:
    batches: list[list[str]] = []
    fail = [False]

    def send(world: Any, admitted: list[Any]) -> None:
        if fail[0]:
            raise RuntimeError("no job for it")
        batches.append([a.workload for a in admitted])

    stream = BindStream(send, batch=3, every_s=3600.0)
    world: Any = object()
    for name in "abcdefg":
        stream(world, [SimpleNamespace(workload=name)])  # type: ignore[list-item]
    assert batches == [["a", "b", "c"], ["d", "e", "f"]] and stream.buffer[0].workload == "g"
    fail[0] = True
    for name in "hi":
        stream(world, [SimpleNamespace(workload=name)])  # type: ignore[list-item]
    assert stream.stopped and stream.sent == 6 and "wait for its end" in caplog.text
    stream(world, [SimpleNamespace(workload="j")])  # type: ignore[list-item]
    assert len(batches) == 2 and stream.sent == 6


def _failing_last_cycle(monkeypatch: pytest.MonkeyPatch, culprit: str) -> None:
    """The round's last policy cycle raises while ``culprit`` is among the policy's workloads: the cycle looks for
    the object responsible, sets it aside and decides again."""
    real = KueuePolicy.cycle

    def cycle(policy: KueuePolicy, now: float) -> Any:
        out = real(policy, now)
        if policy.info(culprit) is not None and not out.admitted:
            raise RuntimeError("a fault tied to one pod")
        return out

    monkeypatch.setattr(KueuePolicy, "cycle", cycle)


def test_a_retry_after_a_round_failed_sends_no_binding_twice(
        burst: tuple[CycleRunner, Handed, PolicyCycles], monkeypatch: pytest.MonkeyPatch) -> None:
    # The failed round had handed some admissions over and buffered others; the retry decides again without the
    # culprit. A stream kept across the two sent the buffered admissions with the retry's own, the same pods.
    run, handed, _ = burst
    # Batches of 8 and no timer: 4 admissions are left in the buffer when the round fails, and the retry re-admits
    # those 4 before its own first batch is full.
    monkeypatch.setattr(bindstream, "BATCH", 8)
    monkeypatch.setattr(bindstream, "EVERY_S", 3600.0)
    run.cache.apply(r.PODS, "ADDED", {**pod("poison", gpus=100, queue="lq", created="2030-01-01T00:00:00Z"),
                                      "metadata": {**pod("poison")["metadata"], "uid": "u-poison",
                                                   "resourceVersion": "9999",
                                                   "labels": {"kueue.x-k8s.io/queue-name": "lq"}}})
    _failing_last_cycle(monkeypatch, "ml/poison")
    run.run()
    assert [h.key for h in run.quarantine.held] == ["ml/poison"]
    sent = [key for _, keys in handed.calls for key in keys]
    assert len(sent) == len(set(sent)) == 300  # the failed round's and the retry's, each pod once
    assert len(handed.devices) == len(set(handed.devices)) == 300  # and no GPU handed out twice


def test_a_pod_whose_binding_is_on_its_way_is_never_set_aside(monkeypatch: pytest.MonkeyPatch) -> None:
    # Set aside, the retry would not count it where it is going, and hand its GPUs to another pod.
    c = Cluster()
    c.put(r.NODES, node("n0", gpus=8))
    c.put(r.PODS, pod("first", gpus=8, queue="lq", created="2026-01-01T00:00:00Z"))
    c.put(r.PODS, pod("second", gpus=8, queue="lq", created="2026-01-01T00:00:01Z"))
    run = runner(c)
    cycles = PolicyCycles(monkeypatch)
    handed = Handed(cycles)
    run.binds.close()
    run.binds = handed  # type: ignore[assignment]
    monkeypatch.setattr(bindstream, "BATCH", 1)
    _failing_last_cycle(monkeypatch, "ml/first")
    try:
        with pytest.raises(RuntimeError, match="a fault tied to one pod"):
            run.run()
    finally:
        run.close()
    assert [keys for _, keys in handed.calls] == [["ml/first"]]  # handed over during the failed round
    assert not run.quarantine.held and run.assumed.keys() == {"ml/first"}  # still counted where it is going
