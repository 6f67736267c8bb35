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
from gpufleet.live import planner
from gpufleet.live.binder import BindJob
from gpufleet.live.bindstream import BindStream
from gpufleet.live.cycle import CycleRunner
from gpufleet.scheduling.kueue import KueuePolicy


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

    def submit(self, report: Any, jobs: list[BindJob], now: float) -> None:
        if jobs:
            self.calls.append((self.cycles.count, [p.key for j in jobs for p in j.pods]))

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


def _decisions(admitted: list[str], preempted: list[str]) -> SimpleNamespace:
    return SimpleNamespace(admitted=[SimpleNamespace(workload=w) for w in admitted],
                           preempted=[SimpleNamespace(workload=w) for w in preempted])


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
