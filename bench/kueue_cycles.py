"""Kueue admission cycles at Kueue's large-scale shape, quota only (no nodes).

Shape (kueue.md §3, HEAD ``configs/large-scale``): 10 cohorts × 100 ClusterQueues = 1,000 ClusterQueues, each
with nominal 20 cpu, borrowingLimit 100, reclaimWithinCohort Any, withinClusterQueue LowerPriority; 50
workloads per ClusterQueue (50,000) in the baseline generator's mix: 70 % small (1 cpu, 200 ms, priority 50),
20 % medium (5 cpu, 500 ms, priority 100), 10 % large (20 cpu, 1 s, priority 200), arriving as the baseline
generator creates them (every 100 ms / 500 ms / 1.2 s per ClusterQueue), so that large ones find small ones
to preempt; ``--all-pending`` submits all 50,000 at the start instead; ``--fair-sharing`` turns on Kueue's
fair sharing (tournament ordering and fair-sharing preemption).

The run is a virtual-time loop: each cycle happens 100 ms after the previous one; an admitted workload
finishes once its runtime has passed (``finish``), which frees quota and requeues parked workloads; preempted
workloads are evicted and requeued before the next cycle. It stops when every workload has run, or when
``--max-cycles`` is reached. Measured (wall clock, this process, policy calls only): admissions per second
over the run, and the latency of each cycle (p50/p99).

Baseline in the same process: the same policy over a quota tree that re-derives every cohort's usage from
scratch before each query (``QuotaTree.invalidate`` after every change), for the first ``--naive-cycles``
cycles; the two runs must make identical decisions, and the ratio of their admission rates is printed.

    .venv/bin/python bench/kueue_cycles.py [--queues-per-cohort 100] [--per-queue 50] [--naive-cycles 5]
        [--all-pending] [--fair-sharing]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpufleet.api.manifests import Manifests
from gpufleet.api.objects import (
    ClusterQueue,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    ObjectMeta,
    PodTemplate,
    PreemptionPolicy,
    Quota,
    ResourceFlavor,
    ResourceGroup,
    SchedulerConfig,
)
from gpufleet.cluster.workloads import PodSet, Workload, WorkloadPod
from gpufleet.scheduling.kueue import KueuePolicy
from gpufleet.scheduling.quota import FR, QuotaTree
from gpufleet.scheduling.types import Decisions

CYCLE_S = 0.1
SIZES = (  # name, share of workloads, cpu, runtime (s), priority
    ("small", 0.7, 1, 0.2, 50),
    ("medium", 0.2, 5, 0.5, 100),
    ("large", 0.1, 20, 1.0, 200),
)


class NaiveQuotaTree(QuotaTree):
    """Same arithmetic, no incremental state: every change invalidates all derived values."""

    def add_usage(self, cq: str, usage: Mapping[FR, int]) -> None:
        self.invalidate()
        super().add_usage(cq, usage)

    def remove_usage(self, cq: str, usage: Mapping[FR, int]) -> None:
        self.invalidate()
        super().remove_usage(cq, usage)

    def rollback(self, mark: int) -> None:
        self.invalidate()
        super().rollback(mark)


def manifests(cohorts: int, per_cohort: int, fair_sharing: bool = False) -> Manifests:
    m = Manifests(config=SchedulerConfig(fair_sharing=fair_sharing))
    m.flavors.append(ResourceFlavor(ObjectMeta("default")))
    preemption = PreemptionPolicy(within_cluster_queue="LowerPriority", reclaim_within_cohort="Any")
    for c in range(cohorts):
        for q in range(per_cohort):
            name = f"cq-{c}-{q}"
            group = ResourceGroup(("cpu",), [FlavorQuotas("default", {"cpu": Quota(20_000, 100_000)})])
            m.cluster_queues.append(ClusterQueue(ObjectMeta(name), [group], cohort=f"cohort-{c}",
                                                 namespace_selector=LabelSelector(), preemption=preemption))
            m.local_queues.append(LocalQueue(ObjectMeta("lq", namespace=name), name))
    return m


@dataclass(slots=True)
class Job:
    workload: Workload
    runtime: float


def workloads(cohorts: int, per_cohort: int, per_queue: int) -> list[Job]:
    jobs: list[Job] = []
    order = 0
    for c in range(cohorts):
        for q in range(per_cohort):
            ns = f"cq-{c}-{q}"
            for size, share, cpu, runtime, prio in SIZES:
                for i in range(round(per_queue * share)):
                    t = PodTemplate(labels={}, annotations={}, requests={"cpu": cpu * 1000}, limits={})
                    name = f"{size}-{i}"
                    key = f"{ns}/{name}"
                    created = i * {"small": 0.1, "medium": 0.5, "large": 1.2}[size]
                    wl = Workload(key=key, namespace=ns, name=name, kind="Pod", queue="lq", priority=prio,
                                  created=created, pod_sets=[PodSet("main", 1, t)],
                                  pods=[WorkloadPod(key, t, "main")], order=order)
                    order += 1
                    jobs.append(Job(wl, runtime))
    return jobs


@dataclass(slots=True)
class Run:
    admissions: int
    preemptions: int
    cycles: int
    wall_s: float
    latencies: list[float]
    trace: list[tuple[tuple[str, ...], tuple[str, ...]]]
    finished: int
    pending: int


def run(policy: KueuePolicy, jobs: list[Job], max_cycles: int, all_pending: bool = False) -> Run:
    runtime = {j.workload.key: j.runtime for j in jobs}
    arrivals = sorted(jobs, key=lambda j: (j.workload.created, j.workload.order))
    if all_pending:
        for j in arrivals:
            policy.submit(j.workload, 0.0)
        arrivals = []
    arrivals.reverse()
    ends: dict[str, float] = {}
    latencies: list[float] = []
    trace: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
    admissions = preemptions = finished = 0
    wall = 0.0
    now = max(j.workload.created for j in jobs) if all_pending else 0.0
    for _ in range(max_cycles):
        now += CYCLE_S
        start = time.perf_counter()
        while arrivals and arrivals[-1].workload.created <= now:
            policy.submit(arrivals.pop().workload, now)
        for key in [k for k, end in ends.items() if end <= now]:
            del ends[key]
            policy.finish(key, now)
            finished += 1
        d: Decisions = policy.cycle(now)
        for p in d.preempted:
            ends.pop(p.workload, None)
            policy.evicted(p.workload, now, requeue=True, reason=p.reason)
        elapsed = time.perf_counter() - start
        wall += elapsed
        latencies.append(elapsed)
        for a in d.admitted:
            ends[a.workload] = now + runtime[a.workload]
        admissions += len(d.admitted)
        preemptions += len(d.preempted)
        trace.append((tuple(a.workload for a in d.admitted), tuple(p.workload for p in d.preempted)))
        if finished == len(jobs) or (not ends and not d and not arrivals):
            break
    return Run(admissions, preemptions, len(latencies), wall, latencies, trace, finished, policy.pending_count())


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cohorts", type=int, default=10)
    ap.add_argument("--queues-per-cohort", type=int, default=100)
    ap.add_argument("--per-queue", type=int, default=50)
    ap.add_argument("--max-cycles", type=int, default=100_000)
    ap.add_argument("--naive-cycles", type=int, default=5)
    ap.add_argument("--fair-sharing", action="store_true", help="enable Kueue's fair sharing")
    ap.add_argument("--all-pending", action="store_true",
                    help="submit every workload at the start instead of at its creation time")
    args = ap.parse_args(argv)

    m = manifests(args.cohorts, args.queues_per_cohort, args.fair_sharing)

    def fresh(factory: Callable[[], QuotaTree] = QuotaTree) -> tuple[KueuePolicy, list[Job]]:
        return KueuePolicy(m, quota_tree_factory=factory), workloads(args.cohorts, args.queues_per_cohort,
                                                                      args.per_queue)

    policy, jobs = fresh()
    mode = "fair sharing" if args.fair_sharing else "classical"
    arrival = "all pending at the start" if args.all_pending else "arriving at their creation times"
    print(f"{len(m.cluster_queues)} ClusterQueues in {args.cohorts} cohorts, {len(jobs)} workloads {arrival}; "
          f"{mode} ordering and preemption")
    full = run(policy, jobs, args.max_cycles, args.all_pending)
    rate = full.admissions / full.wall_s
    print(f"fast: {full.admissions} admissions, {full.preemptions} preemptions, {full.finished} finished, "
          f"{full.pending} still pending, in {full.cycles} cycles ({full.cycles * CYCLE_S:.1f} s virtual)")
    print(f"fast: {rate:,.0f} admissions/s over the run ({full.wall_s:.2f} s in policy calls); cycle latency "
          f"p50 {pct(full.latencies, 0.5) * 1000:.1f} ms, p99 {pct(full.latencies, 0.99) * 1000:.1f} ms")

    fast_head = run(*fresh(), args.naive_cycles, args.all_pending)
    naive = run(*fresh(NaiveQuotaTree), args.naive_cycles, args.all_pending)
    if naive.trace != fast_head.trace:
        print("MISMATCH: the naive reference decided differently", file=sys.stderr)
        return 1
    naive_rate = naive.admissions / naive.wall_s
    head_rate = fast_head.admissions / fast_head.wall_s
    print(f"first {naive.cycles} cycles ({naive.admissions} admissions, identical decisions): fast "
          f"{head_rate:,.0f}/s, naive reference {naive_rate:,.0f}/s, ratio {head_rate / naive_rate:.1f}x; "
          f"cycle p50 fast {statistics.median(fast_head.latencies) * 1000:.1f} ms vs naive "
          f"{statistics.median(naive.latencies) * 1000:.1f} ms")
    print(f"target >= 1,000 admissions/s: {'met' if rate >= 1000 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
