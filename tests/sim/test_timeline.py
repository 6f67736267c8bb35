"""The run's timeline in ``simulate --json`` (sim/timeline.py), by hand on a small result: what the dashboard's
replay and what-if plots draw."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.sim import timeline as tl
from gpufleet.sim.records import Attempt, JobRecord, PodSpan, PoolInfo, SimResult


def _result(nodes: int = 2) -> SimResult:
    # Window 100 s, 4 buckets of 25 s. Job a holds 2 GPUs of n0 on [0, 50), busy on [25, 50); job b waits 0-50 s,
    # then holds 1 GPU of n1 on [50, 100) busy throughout. n-idle has GPUs and never holds anything.
    spans = [PodSpan("a", "a-0", "n0", "p", "M", 2.0, 1.0, 0.0, 50.0, 25.0, 50.0, 2.0),
             PodSpan("b", "b-0", "n1", "p", "M", 1.0, 1.0, 50.0, 100.0, 50.0, 100.0, 1.0)]
    jobs = [JobRecord("a", "ns", "t", "q1", None, None, 1, 2.0, 0.0, [Attempt(0.0, 25.0, 50.0, "succeeded")]),
            JobRecord("b", "ns", "t", "q2", None, None, 1, 1.0, 0.0, [Attempt(0.0, 50.0, 100.0, "succeeded")])]
    gpu_nodes = {f"n{i}": ("p", "M", 4) for i in range(nodes)} | {"n-idle": ("p", "M", 4)}
    return SimResult("s", "pol", 100.0, 100.0, 12.0, [PoolInfo("p", 12, ("M",))], jobs, spans,
                     stranded=[(0.0, 0.0, 12.0, 2), (50.0, 3.0, 11.0, 0)], gpu_nodes=gpu_nodes)


def test_timeline_by_hand() -> None:
    t = tl.timeline(_result(), buckets=4)
    assert t["t"] == [0.0, 25.0, 50.0, 75.0] and t["bucket_s"] == 25.0
    assert set(t["nodes"]) == {"n0", "n1", "n-idle"} and t["nodes_left_out"] == 0
    assert t["nodes"]["n0"] == {"pool": "p", "model": "M", "gpus": 4, "held": [2.0, 2.0, 0.0, 0.0],
                                "busy": [0.0, 2.0, 0.0, 0.0]}
    assert t["nodes"]["n1"]["held"] == [0.0, 0.0, 1.0, 1.0] and t["nodes"]["n-idle"]["held"] == [0.0] * 4
    # At each bucket's start: a waits on [0, 25), b on [0, 50); a runs on [25, 50), b on [50, 100).
    assert t["jobs_waiting"] == [2, 1, 0, 0] and t["jobs_running"] == [0, 1, 1, 1]
    # 0 stranded GPUs until 50 s, then 3 of 12 (25%).
    assert t["fragmentation_pct"] == [0.0, 0.0, 25.0, 25.0]
    q1 = t["wait_quantiles"]["per_queue"]["q1"]
    assert t["wait_quantiles"]["q"][0] == 0 and t["wait_quantiles"]["q"][-1] == 100
    assert q1 == [25.0] * len(tl.QUANTILES) and t["wait_quantiles"]["per_queue"]["q2"][-1] == 50.0
    assert np.all(np.diff(q1) >= 0)


def test_a_fleet_too_large_to_replay_node_by_node_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tl, "MAX_NODES", 2)
    t = tl.timeline(_result(), buckets=4)
    assert t["nodes"] == {} and t["nodes_left_out"] == 3
