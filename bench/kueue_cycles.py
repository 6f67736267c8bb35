"""Kueue admission cycles at Kueue's large-scale shape and beyond, quota only (no nodes).

Shape (kueue.md §3, HEAD ``configs/large-scale``): 10 cohorts × 100 ClusterQueues = 1,000 ClusterQueues, each
with nominal 20 cpu, borrowingLimit 100, reclaimWithinCohort Any, withinClusterQueue LowerPriority; 50
workloads per ClusterQueue (50,000) in the baseline generator's mix: 70 % small (1 cpu, 200 ms, priority 50),
20 % medium (5 cpu, 500 ms, priority 100), 10 % large (20 cpu, 1 s, priority 200), arriving as the baseline
generator creates them (every 100 ms / 500 ms / 1.2 s per ClusterQueue), so that large ones find small ones
to preempt; ``--queues-per-cohort 500`` gives issue 15's 5,000 ClusterQueues and 250,000 workloads;
``--all-pending`` submits every workload at the start instead; ``--fair-sharing`` turns on Kueue's fair sharing
(tournament ordering and fair-sharing preemption).

The run is a virtual-time loop: each cycle happens 100 ms after the previous one; an admitted workload
finishes once its runtime has passed (``finish``), which frees quota and requeues parked workloads; preempted
workloads are evicted and requeued before the next cycle. It stops when every workload has run, or when
``--max-cycles`` is reached. Measured (wall clock, this process, policy calls only): admissions per second
over the run, and the latency of each cycle (p50/p99/max), with the time Python's garbage collections took.

The driver keeps Python's cyclic garbage collector out of the cycles (:func:`quiet_gc`): what is alive after
loading and after each cycle is frozen out of later collections, and the collector stays off while cycles run.
That is safe because the Kueue core leaves no cyclic garbage, which each run checks (the objects a full
collection finds afterwards, printed; tests/kueue/test_cyclic_garbage.py holds the core to it); reference
counting frees everything else as it goes. The core itself never touches the collector.

**Today's code** (``--baseline REF``, by default the commit before the nomination memo): ``src/`` of that git
revision (``git archive`` into a temporary directory) runs the same whole runs in a subprocess of this script,
alternating with the measured runs (``--repeat`` of each); the two must make identical decisions (compared by a
digest of every cycle's admissions and preemptions), and the ratios of the medians (p99 cycle, wall and CPU;
admissions per second and per CPU second) are printed. ``--baseline none`` skips it.

Baselines in the same process, over the first ``--baseline-cycles`` cycles (which include the first
preemption cycles), each required to make decisions identical to the measured code's:

* the straightforward preemption search (``Preemptor.shared = False``: every head lists and sorts its cohort's
  candidates and runs Kueue's greedy removal and add-back on the quota tree) with the collector left at its
  defaults (the code before the cohort-shared search); the ratio of p99 cycle latency and of admission rate is
  printed;
* ``--naive-cycles``: the same policy over a quota tree that re-derives every cohort's usage from scratch
  before each query (``QuotaTree.invalidate`` after every change).

    .venv/bin/python bench/kueue_cycles.py [--queues-per-cohort 100] [--per-queue 50] [--baseline-cycles 30]
        [--naive-cycles 5] [--repeat 1] [--baseline REF|none] [--all-pending] [--fair-sharing]
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import heapq
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

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

sys.path.append(str(Path(__file__).resolve().parent))  # a sibling module, also when this file is loaded by path
from revision_src import revision_src

CYCLE_S = 0.1
SIZES = (  # name, share of workloads, cpu, runtime (s), priority
    ("small", 0.7, 1, 0.2, 50),
    ("medium", 0.2, 5, 0.5, 100),
    ("large", 0.1, 20, 1.0, 200),
)
GOAL_P99_MS = 250.0  # issue 15: at 5,000 ClusterQueues and 250,000 workloads
GOAL_RATE = 5_000.0  # issue 15: at 1,000 ClusterQueues and 50,000 workloads
ROOT = Path(__file__).resolve().parents[1]
BASELINE_REF = "094a480"  # today's code: the commit before the nomination memo (issue 15 item 7)


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
    """Every workload of the run, made in the order they arrive (creation time, then input order), as a live
    scheduler makes its objects when their events come in; ``order`` (the input order, Kueue's last tie-breaker)
    numbers them queue by queue, as the baseline generator creates them."""
    specs: list[tuple[float, int, str, str, int, float, int]] = []
    order = 0
    for c in range(cohorts):
        for q in range(per_cohort):
            ns = f"cq-{c}-{q}"
            for size, share, cpu, runtime, prio in SIZES:
                for i in range(round(per_queue * share)):
                    created = i * {"small": 0.1, "medium": 0.5, "large": 1.2}[size]
                    specs.append((created, order, ns, f"{size}-{i}", cpu, runtime, prio))
                    order += 1
    specs.sort()
    jobs: list[Job] = []
    for created, order, ns, name, cpu, runtime, prio in specs:
        t = PodTemplate(labels={}, annotations={}, requests={"cpu": cpu * 1000}, limits={})
        key = f"{ns}/{name}"
        wl = Workload(key=key, namespace=ns, name=name, kind="Pod", queue="lq", priority=prio, created=created,
                      pod_sets=[PodSet("main", 1, t)], pods=[WorkloadPod(key, t, "main")], order=order)
        jobs.append(Job(wl, runtime))
    return jobs


class GcWatch:
    """Time spent in Python's garbage collections (any generation) while installed."""

    def __init__(self) -> None:
        self.durations: list[float] = []
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.durations.append(time.perf_counter() - self._start)

    def __enter__(self) -> GcWatch:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


@dataclass(slots=True)
class Run:
    admissions: int
    preemptions: int
    cycles: int
    wall_s: float
    latencies: list[float]
    trace: list[tuple[tuple[str, ...], tuple[tuple[str, str, str], ...]]]
    finished: int
    pending: int
    cpu: list[float] = field(default_factory=list)  # this thread's CPU time per cycle
    collections: list[float] = field(default_factory=list)  # each garbage collection during the run, seconds
    # Per cycle, wall and CPU time of the admission attempt alone: policy.cycle() and the evictions it issued,
    # without the tick's arrivals and finishes (Kueue's kueue_admission_attempt_duration_seconds times its
    # scheduler's schedule() call; workload creation and completion are handled by its controllers meanwhile).
    attempts: list[float] = field(default_factory=list)
    attempts_cpu: list[float] = field(default_factory=list)
    # Set instead of trace on a run read back from a baseline subprocess: its digest, and the cycles that preempted.
    trace_digest: str = ""
    preempting: list[int] = field(default_factory=list)
    cyclic_garbage: int | None = None  # unreachable objects a full collection found after the run (see quiet_gc)

    @property
    def rate(self) -> float:
        return self.admissions / self.wall_s if self.wall_s else 0.0

    @property
    def cpu_rate(self) -> float:
        return self.admissions / sum(self.cpu) if self.cpu else 0.0

    def digest(self) -> str:
        """A digest of every cycle's decisions (admissions, preemptions with preemptor and reason)."""
        return self.trace_digest or hashlib.sha256(repr(self.trace).encode()).hexdigest()

    def summary(self) -> dict[str, Any]:
        """What a baseline subprocess hands back: the figures, its decisions as a digest."""
        out = asdict(self)
        out["trace"] = []
        out["trace_digest"] = self.digest()
        out["preempting"] = self.preempting_cycles()
        return out

    def preempting_cycles(self) -> list[int]:
        """The cycles (0-based) that preempted."""
        return [i for i, (_, pre) in enumerate(self.trace) if pre] if self.trace else self.preempting


def run(policy: KueuePolicy, jobs: list[Job], max_cycles: int, all_pending: bool = False,
        after_cycle: Callable[[], None] | None = None) -> Run:
    runtime = {j.workload.key: j.runtime for j in jobs}
    arrivals = sorted(jobs, key=lambda j: (j.workload.created, j.workload.order))
    if all_pending:
        for j in arrivals:
            policy.submit(j.workload, 0.0)
        arrivals = []
    arrivals.reverse()
    ends: dict[str, float] = {}  # running workload -> when it finishes
    due: list[tuple[float, str]] = []  # the same as a heap (entries of preempted workloads go stale)
    latencies: list[float] = []
    cpu: list[float] = []
    attempts: list[float] = []
    attempts_cpu: list[float] = []
    trace: list[tuple[tuple[str, ...], tuple[tuple[str, str, str], ...]]] = []
    admissions = preemptions = finished = 0
    wall = 0.0
    now = max(j.workload.created for j in jobs) if all_pending else 0.0
    with GcWatch() as watch:
        for _ in range(max_cycles):
            now += CYCLE_S
            # The driver's own bookkeeping (which workloads arrive, which finish) is done before the clock starts:
            # a tick times the policy's calls only.
            arriving = []
            while arrivals and arrivals[-1].workload.created <= now:
                arriving.append(arrivals.pop().workload)
            finishing = []
            while due and due[0][0] <= now:
                end, key = heapq.heappop(due)
                if ends.get(key) == end:
                    del ends[key]
                    finishing.append(key)
            start = time.perf_counter()
            start_cpu = time.thread_time()
            for w in arriving:
                policy.submit(w, now)
            for key in finishing:
                policy.finish(key, now)
            attempt = time.perf_counter()
            attempt_cpu = time.thread_time()
            d: Decisions = policy.cycle(now)
            for p in d.preempted:
                policy.evicted(p.workload, now, requeue=True, reason=p.reason)
            attempts_cpu.append(time.thread_time() - attempt_cpu)
            attempts.append(time.perf_counter() - attempt)
            elapsed = time.perf_counter() - start
            wall += elapsed
            latencies.append(elapsed)
            cpu.append(time.thread_time() - start_cpu)
            finished += len(finishing)
            for p in d.preempted:
                ends.pop(p.workload, None)
            for a in d.admitted:
                end = ends[a.workload] = now + runtime[a.workload]
                heapq.heappush(due, (end, a.workload))
            admissions += len(d.admitted)
            preemptions += len(d.preempted)
            trace.append((tuple(a.workload for a in d.admitted),
                          tuple((p.workload, p.preemptor, p.reason) for p in d.preempted)))
            if after_cycle is not None:
                after_cycle()
            if finished == len(jobs) or (not ends and not d and not arrivals):
                break
    return Run(admissions, preemptions, len(latencies), wall, latencies, trace, finished, policy.pending_count(),
               cpu, watch.durations, attempts, attempts_cpu)


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def describe(r: Run) -> str:
    gcs = (f"{len(r.collections)} garbage collections, {sum(r.collections) * 1000:.0f} ms in all" if r.collections
           else "no garbage collection") + (
        "" if r.cyclic_garbage is None else f", {r.cyclic_garbage:,} objects of cyclic garbage left")
    return (f"{r.rate:,.0f} admissions/s ({r.cpu_rate:,.0f} per CPU second); cycle p50 "
            f"{pct(r.latencies, 0.5) * 1000:.0f} ms, p99 {pct(r.latencies, 0.99) * 1000:.0f} ms "
            f"({pct(r.cpu, 0.99) * 1000:.0f} ms CPU), max {max(r.latencies) * 1000:.0f} ms; {gcs}"
            + (f"; admission attempt alone p50 {pct(r.attempts, 0.5) * 1000:.0f} ms, p99 "
               f"{pct(r.attempts, 0.99) * 1000:.0f} ms ({pct(r.attempts_cpu, 0.99) * 1000:.0f} ms CPU)"
               if r.attempts else ""))


def preemption_cycles(r: Run) -> str:
    """The cycles that preempted, by their wall (CPU) time."""
    shown = [f"#{i + 1} {r.latencies[i] * 1000:,.0f} ms ({r.cpu[i] * 1000:,.0f} ms CPU)"
             for i in r.preempting_cycles()]
    return "preemption cycles " + (", ".join(shown) if shown else "none")


def load() -> str:
    return "load average {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


DEFAULT_GC_THRESHOLDS = gc.get_threshold()


def quiet_gc() -> None:
    """The driver's collector policy, applied after loading and after every cycle: what is alive now (loaded
    workloads, queues, admitted state) is frozen out of every later collection, and the cyclic collector is off
    while the next cycle runs. Its collections there would rescan what the cycle made to find nothing: the core
    makes no reference cycles, so reference counting frees all its garbage (:func:`cyclic_garbage` checks what
    a run left). A long-running driver would unfreeze and collect now and then, at a quiet moment."""
    gc.disable()
    gc.freeze()


def cyclic_garbage() -> int:
    """The collector back as a driver that never touches it leaves it, returning the unreachable objects a full
    collection then finds: garbage only the cyclic collector could free, left by what ran since the last one."""
    gc.unfreeze()
    gc.set_threshold(*DEFAULT_GC_THRESHOLDS)
    gc.enable()
    return gc.collect()


def baseline_run(src: Path, argv: list[str], out: Path) -> Run:
    """One whole run of this script over another revision's package, in a subprocess."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    subprocess.run([sys.executable, __file__, *argv, "--repeat", "1", "--emit-json", str(out)], env=env,
                   check=True)
    (data,) = json.loads(out.read_text())
    return Run(**data)


def ratios(before: list[Run], after: list[Run]) -> str:
    def med(runs: list[Run], f: Callable[[Run], float]) -> float:
        return statistics.median(f(r) for r in runs)

    p99 = med(before, lambda r: pct(r.latencies, 0.99)) / med(after, lambda r: pct(r.latencies, 0.99))
    cpu_p99 = med(before, lambda r: pct(r.cpu, 0.99)) / med(after, lambda r: pct(r.cpu, 0.99))
    rate = med(after, lambda r: r.rate) / med(before, lambda r: r.rate)
    cpu_rate = med(after, lambda r: r.cpu_rate) / med(before, lambda r: r.cpu_rate)
    return (f"p99 cycle {p99:.2f}x shorter ({cpu_p99:.2f}x in CPU time), admissions/s {rate:.2f}x "
            f"({cpu_rate:.2f}x per CPU second)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--cohorts", type=int, default=10)
    ap.add_argument("--queues-per-cohort", type=int, default=100)
    ap.add_argument("--per-queue", type=int, default=50)
    ap.add_argument("--max-cycles", type=int, default=100_000)
    ap.add_argument("--baseline", default=BASELINE_REF,
                    help=f"git revision of today's code, run whole in a subprocess (default {BASELINE_REF}, before "
                         f"the nomination memo); 'none' skips it")
    ap.add_argument("--baseline-cycles", type=int, default=30,
                    help="cycles run with the straightforward search and default GC; 0 skips it")
    ap.add_argument("--naive-cycles", type=int, default=5,
                    help="cycles run over the naive quota tree; 0 skips it")
    ap.add_argument("--repeat", type=int, default=1, help="measure the whole run this many times")
    ap.add_argument("--fair-sharing", action="store_true", help="enable Kueue's fair sharing")
    ap.add_argument("--all-pending", action="store_true",
                    help="submit every workload at the start instead of at its creation time")
    ap.add_argument("--emit-json", help=argparse.SUPPRESS)  # baseline subprocess: whole runs only, figures here
    args = ap.parse_args(argv)

    m = manifests(args.cohorts, args.queues_per_cohort, args.fair_sharing)

    def fresh(shared: bool = True, factory: Callable[[], QuotaTree] = QuotaTree) -> tuple[KueuePolicy, list[Job]]:
        policy = KueuePolicy(m, quota_tree_factory=factory)
        policy.state.preemptor.shared = shared
        if not shared:
            policy.state.memo = None  # the code before the shared search had no nomination memo either
        return policy, workloads(args.cohorts, args.queues_per_cohort, args.per_queue)

    def measured(cycles: int) -> Run:
        policy, jobs = fresh()
        gc.collect()
        quiet_gc()
        try:
            result = run(policy, jobs, cycles, args.all_pending, quiet_gc)
        finally:
            garbage = cyclic_garbage()
        result.cyclic_garbage = garbage
        return result

    if args.emit_json:
        Path(args.emit_json).write_text(json.dumps([measured(args.max_cycles).summary() for _ in range(args.repeat)]))
        return 0

    n_jobs = args.cohorts * args.queues_per_cohort * sum(round(args.per_queue * s[1]) for s in SIZES)
    mode = "fair sharing" if args.fair_sharing else "classical"
    arrival = "all pending at the start" if args.all_pending else "arriving at their creation times"
    print(f"{len(m.cluster_queues):,} ClusterQueues in {args.cohorts} cohorts, {n_jobs:,} workloads {arrival}; "
          f"{mode} ordering and preemption ({load()}, {os.cpu_count()} CPUs)", flush=True)

    if args.baseline_cycles > 0:
        policy, jobs = fresh(shared=False)
        cyclic_garbage()  # the collector at its defaults: the code before issue 15 never touched it
        today = run(policy, jobs, args.baseline_cycles, args.all_pending)
        del policy, jobs
        new = measured(args.baseline_cycles)
        if new.trace != today.trace:
            print("MISMATCH: the straightforward search decided differently", file=sys.stderr)
            return 1
        print(f"first {today.cycles} cycles ({today.admissions:,} admissions, {today.preemptions} preemptions), "
              f"identical decisions:")
        print(f"  straightforward search, no memo, default GC: {describe(today)}")
        print(f"    {preemption_cycles(today)}")
        print(f"  new (cohort-shared search, memo, collector kept out of cycles): {describe(new)}")
        print(f"    {preemption_cycles(new)}")
        print(f"  ratio: p99 cycle {pct(today.latencies, 0.99) / pct(new.latencies, 0.99):.1f}x shorter, "
              f"longest cycle {max(today.latencies) / max(new.latencies):.1f}x shorter, "
              f"admission rate {new.rate / today.rate:.1f}x", flush=True)

    runs: list[Run] = []
    baselines: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="gpufleet-kueue-baseline-") as tmp:
        src = None
        if args.baseline != "none":
            try:
                src = revision_src(args.baseline, Path(tmp))
            except (OSError, subprocess.CalledProcessError) as e:
                print(f"NO BASELINE: cannot extract src/ of {args.baseline} with git ({e}); current code only")
        for i in range(args.repeat):
            label = f" #{i + 1}" if args.repeat > 1 else ""
            if src is not None:
                base = baseline_run(src, argv if argv is not None else sys.argv[1:], Path(tmp) / f"run{i}.json")
                baselines.append(base)
                print(f"today's code ({args.baseline}), whole run{label}: {describe(base)}")
                print(f"  {preemption_cycles(base)}", flush=True)
            full = measured(args.max_cycles)
            runs.append(full)
            print(f"whole run{label}: {full.admissions:,} admissions, "
                  f"{full.preemptions:,} preemptions, {full.finished:,} finished, {full.pending:,} still pending, "
                  f"{full.cycles} cycles ({full.cycles * CYCLE_S:.1f} s virtual), {full.wall_s:.1f} s in policy "
                  f"calls", flush=True)
            print(f"  {describe(full)}")
            print(f"  {preemption_cycles(full)}", flush=True)
            if baselines and baselines[-1].digest() != full.digest():
                print(f"MISMATCH: today's code ({args.baseline}) decided differently", file=sys.stderr)
                return 1
    p99s = [pct(r.latencies, 0.99) * 1000 for r in runs]
    rates = [r.rate for r in runs]
    if len(runs) > 1:
        print(f"over {len(runs)} runs: p99 {min(p99s):.0f}-{max(p99s):.0f} ms (median {statistics.median(p99s):.0f}),"
              f" admissions/s {min(rates):,.0f}-{max(rates):,.0f} (median {statistics.median(rates):,.0f})")
    if baselines:
        print(f"against today's code ({args.baseline}), medians of {len(runs)} run(s) each, identical decisions: "
              f"{ratios(baselines, runs)}")

    if args.naive_cycles > 0:
        fast_head = run(*fresh(), args.naive_cycles, args.all_pending)
        naive = run(*fresh(factory=NaiveQuotaTree), args.naive_cycles, args.all_pending)
        if naive.trace != fast_head.trace:
            print("MISMATCH: the naive reference decided differently", file=sys.stderr)
            return 1
        print(f"first {naive.cycles} cycles against the naive quota tree ({naive.admissions:,} admissions, identical "
              f"decisions): fast {fast_head.rate:,.0f}/s, naive {naive.rate:,.0f}/s, ratio "
              f"{fast_head.rate / naive.rate:.1f}x; cycle p50 fast {statistics.median(fast_head.latencies) * 1000:.1f}"
              f" ms vs naive {statistics.median(naive.latencies) * 1000:.1f} ms")

    p99 = statistics.median(p99s)
    rate = statistics.median(rates)
    cpu_p99 = statistics.median(pct(r.cpu, 0.99) * 1000 for r in runs)
    cpu_rate = statistics.median(r.cpu_rate for r in runs)
    attempt_p99 = statistics.median(pct(r.attempts, 0.99) * 1000 for r in runs)
    attempt_cpu_p99 = statistics.median(pct(r.attempts_cpu, 0.99) * 1000 for r in runs)
    print(f"goal p99 cycle <= {GOAL_P99_MS:.0f} ms (set for 5,000 ClusterQueues): whole tick (arrivals, finishes, "
          f"admission attempt) {'met' if p99 <= GOAL_P99_MS else 'NOT met'} ({p99:.0f} ms wall; {cpu_p99:.0f} ms "
          f"CPU); admission attempt alone, as Kueue times it, "
          f"{'met' if attempt_p99 <= GOAL_P99_MS else 'NOT met'} ({attempt_p99:.0f} ms wall; {attempt_cpu_p99:.0f} "
          f"ms CPU)")
    print(f"goal >= {GOAL_RATE:,.0f} admissions/s (set for 1,000 ClusterQueues): "
          f"{'met' if rate >= GOAL_RATE else 'NOT met'} ({rate:,.0f}/s wall; {cpu_rate:,.0f} per CPU second)")
    print(f"({load()} at the end: wall-clock figures stretch with what else runs on the machine)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
