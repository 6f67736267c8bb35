from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.cluster.devices import DeviceGrant
from gpufleet.scheduling.placement.stranded import stranded_gpus
from gpufleet.sim.metrics import busy_integrals, kpis, percentile, pool_series
from gpufleet.sim.records import Attempt, JobRecord, PodSpan, PoolInfo, SimResult
from gpufleet.sim.series import Step, bucket_means, integral
from tests.sim.helpers import cluster_of, job, jobs_of, pool


def test_step_integral_and_bucket_means_are_exact() -> None:
    # 1 GPU on [0, 10), 2 more on [5, 20): the level is 1, 3, 2.
    s = Step.from_spans(np.array([0.0, 5.0]), np.array([10.0, 20.0]), np.array([1.0, 2.0]))
    assert integral(s, 0, 20) == 1 * 5 + 3 * 5 + 2 * 10
    assert integral(s, 2, 7) == 1 * 3 + 3 * 2
    assert integral(s, 20, 30) == 0.0
    assert list(bucket_means(s, np.array([0.0, 5.0, 10.0, 20.0]))) == [1.0, 3.0, 2.0]
    assert integral(s.capped(2.0), 0, 20) == 5 + 10 + 20


def test_percentile_is_linear_interpolation() -> None:
    assert percentile([0, 10, 20, 30], 50) == 15.0
    assert percentile([0, 10, 20, 30], 95) == pytest.approx(28.5)
    assert percentile([], 50) is None


def _span(job: str, share: float, held: tuple[float, float], busy: tuple[float, float] | None, demand: float,
          shared: tuple[str, ...] = (), price: float = 1.0, pool_: str = "p") -> PodSpan:
    return PodSpan(job, job + "-0", "n", pool_, "M", share, price, held[0], held[1],
                   busy[0] if busy else None, busy[1] if busy else None, demand, shared)


def test_kpis_by_hand_with_shared_gpu_cap_and_window() -> None:
    # 2 GPUs, window 100 s. a: whole GPU 0-100, busy 0.5 from 50. b, c: replicas of 1/4 on GPU g, both busy 0.75
    # from 0 to 40: the GPU is at most 1 busy (not 1.5). d: held past the window (only 80-100 counts).
    spans = [_span("a", 1.0, (0, 100), (50, 100), 0.5), _span("b", 0.25, (0, 40), (0, 40), 0.75, ("g",)),
             _span("c", 0.25, (0, 40), (0, 40), 0.75, ("g",)), _span("d", 1.0, (80, 150), (80, 150), 1.0)]
    jobs = [JobRecord(k, "ns", "team", "q", None, "inference" if k == "b" else None, 1, 1.0, 0.0,
                      [Attempt(0.0, 10.0 * i, 50.0, "succeeded")], "succeeded", 50.0 + i)
            for i, k in enumerate("abcd")]
    jobs[3].outcome = "failed"
    jobs[3].attempts[0].outcome = "failed"
    jobs[3].attempts[0].cause = "OOMKilled"
    r = SimResult("s", "p", 100.0, 150.0, 2.0, [PoolInfo("p", 2, ("M",))], jobs, spans, [(0.0, 0.5, 1.0, 3)])
    k = kpis(r)
    held = 100 + 10 + 10 + 20  # GPU·s inside the window
    busy = 0.5 * 50 + min(1.5, 1.0) * 40 + 20
    assert k["gpu_allocation_pct"] == pytest.approx(100 * held / 200, abs=0.01)
    assert k["gpu_utilization_pct"] == pytest.approx(100 * busy / 200, abs=0.01)
    assert k["job_success_pct"] == 75.0
    assert k["failures"] == {"OOMKilled": 1}
    assert k["wait_p50_s"] == 15.0  # waits 0, 10, 20, 30
    assert k["makespan_s"] == 53.0
    assert k["cost"] == pytest.approx(held / 3600, abs=0.01)
    assert k["inference_gpu_hours"] == pytest.approx(10 / 3600, abs=1e-3)
    assert k["fragmentation_pct"] == 25.0  # 0.5 of 2 GPUs stranded
    series = pool_series(r, buckets=2)["p"]
    assert series["allocation_pct"] == [pytest.approx(100 * (50 + 10 + 10) / 50 / 2),
                                        pytest.approx(100 * (50 + 20) / 50 / 2)]
    b = busy_integrals(spans, np.array([0.0, 40.0]))
    assert b[1] - b[0] == pytest.approx(40.0)


def test_stranded_is_usable_idle_capacity_where_no_pending_pod_fits() -> None:
    # Two nodes of 8 A100s with 4 held on each; the pending pod needs 8 GPUs on one node: it could use either
    # node were it free, but fits on neither, so all 8 idle GPUs are stranded.
    cluster = cluster_of(pool("p", 2, 8))
    for name in sorted(cluster.nodes):
        cluster.allocate(f"ns/held-{name}", name, {"nvidia.com/gpu": 4}, [DeviceGrant("whole", i) for i in range(4)])
    (big,) = jobs_of(job("big", gpus=8))
    (small,) = jobs_of(job("small", gpus=2))
    (huge,) = jobs_of(job("huge", gpus=16))
    assert stranded_gpus(cluster, [big.workload.pods[0].template]) == (8.0, 8.0)
    assert stranded_gpus(cluster, [big.workload.pods[0].template, small.workload.pods[0].template]) == (0.0, 8.0)
    assert stranded_gpus(cluster, []) == (0.0, 8.0)
    # A pod no node could ever take (16 GPUs on nodes of 8) strands nothing: the idle GPUs are spare for it.
    assert stranded_gpus(cluster, [huge.workload.pods[0].template]) == (0.0, 8.0)


def test_a_dedicated_pool_nobody_pending_can_use_is_spare_not_stranded() -> None:
    # Idle H100s and a pending pod that may only run on the (full) dev pool: the H100s are not stranded for it.
    dev = pool("dev", 1, 1, model="L40S").replace("  cpu:", "  labels: {pool: dev}\n  cpu:")
    cluster = cluster_of(pool("h", 1, 4, model="H100-SXM5-80GB") + dev)
    cluster.allocate("ns/busy", "dev-0", {"nvidia.com/gpu": 1}, [DeviceGrant("whole", 0)])
    picky = job("picky").replace("      containers:", "      nodeSelector: {pool: dev}\n      containers:")
    (only_dev,) = jobs_of(picky)
    assert stranded_gpus(cluster, [only_dev.workload.pods[0].template]) == (0.0, 4.0)
    # A pod of 8 GPUs fits no node even empty: nothing is stranded for it. A pod of 4 could use the H100 node,
    # but once one of its GPUs is held, its 3 idle GPUs are stranded.
    (anywhere,) = jobs_of(job("anywhere", gpus=8))
    assert stranded_gpus(cluster, [anywhere.workload.pods[0].template]) == (0.0, 4.0)
    (four,) = jobs_of(job("four", gpus=4))
    cluster.allocate("ns/h", "h-0", {"nvidia.com/gpu": 1}, [DeviceGrant("whole", 0)])
    assert stranded_gpus(cluster, [four.workload.pods[0].template]) == (3.0, 3.0)


def _result(spans: list[PodSpan], window: float = 100.0) -> SimResult:
    return SimResult("s", "p", window, window, 0.0, [PoolInfo("p", 4, ("M",))], [], spans, [])


def test_busy_of_held_counts_a_time_sliced_gpu_whole_while_in_use() -> None:
    # One replica of 8 (1/8 of GPU g held) keeps g busy: DCGM shows g 100% busy, not 800% (nor the demo's 100.3).
    spans = [_span("a", 0.125, (0, 100), (0, 100), 1.0, ("g",))]
    assert kpis(_result(spans))["busy_of_held_pct"] == 100.0
    # Two replicas held on g over [0, 60) and [40, 100), each half busy while held: g in use 100 s, busy 50 s
    # on [0, 40) and [60, 100), 100% on [40, 60).
    spans = [_span("a", 0.125, (0, 60), (0, 60), 0.5, ("g",)), _span("b", 0.125, (40, 100), (40, 100), 0.5, ("g",))]
    assert kpis(_result(spans))["busy_of_held_pct"] == pytest.approx(100 * (0.5 * 80 + 1.0 * 20) / 100, abs=0.01)
    # A whole GPU, half busy, beside a fraction of g: exclusive devices count by what they hold.
    spans = [_span("w", 1.0, (0, 100), (0, 100), 0.5), _span("f", 0.3, (0, 100), (0, 100), 0.3, ("g",))]
    assert kpis(_result(spans))["busy_of_held_pct"] == pytest.approx(100 * (50 + 30) / 200, abs=0.01)


# "+ 0.0" turns -0.0 into 0.0: sorted() keeps (0.0, -0.0) in that order (they are equal), and a span drawn
# between them would be the empty interval [0.0, -0.0], which hypothesis refuses.
_times = st.floats(min_value=-20.0, max_value=140.0, allow_nan=False).map(lambda t: t + 0.0)


@st.composite
def _spans(draw: st.DrawFn) -> PodSpan:
    """A span as the engine records it: busy inside held; an exclusive pod busy at most by its share, a shared
    one by the number of GPUs it shares."""
    a, b = sorted((draw(_times), draw(_times)))
    shared = tuple(draw(st.lists(st.sampled_from(["g0", "g1", "g2"]), max_size=2, unique=True)))
    share = draw(st.sampled_from([1.0, 2.0, 3 / 7, 0.5, 0.125, 0.25, 0.3]))
    top = float(len(shared)) if shared else share
    demand = draw(st.floats(min_value=0.0, max_value=top))
    busy = None
    if draw(st.booleans()):
        c, d = sorted((draw(st.floats(min_value=a, max_value=b)), draw(st.floats(min_value=a, max_value=b))))
        busy = (c, d)
    return _span("j", share, (a, b), busy, demand, shared)


@given(st.lists(_spans(), max_size=12), st.floats(min_value=1.0, max_value=120.0))
@settings(max_examples=300, deadline=None)
def test_busy_of_held_stays_within_0_and_100(spans: list[PodSpan], window: float) -> None:
    share = kpis(_result(spans, window))["busy_of_held_pct"]
    assert share is None or 0.0 <= share <= 100.0
