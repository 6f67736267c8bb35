"""Replay the whole openb default trace with its timestamps under kube-default, and time it.

8152 pods on the 1213 GPU nodes, each arriving at its creation_time and leaving at its deletion_time
(~149 days of virtual time), placed one by one by the kube-default policy through the placement engine.
Reported, in one process:

* load: reading both CSVs and turning them into nodes and jobs;
* baseline: the same jobs through the engine with a policy that admits every pod without placing it
  (clock, records and metrics only: what the simulator costs by itself);
* replay: the full run under kube-default (placement, device accounting, fragmentation samples), and its
  ratio to the baseline;
* metrics: KPIs and per-pool series from the run's records;
* peak memory: the process's maximum resident set size after each phase (ru_maxrss).

Target: replay ≤ 60 s on the 2-core development machine. Figures there (load average ~3.5 from other
work): load 0.24 s, baseline 0.50 s, replay 1.6–2.5 s (≈ 5× baseline), metrics 0.14 s, peak RSS 69 MiB.
The trace is light with its timestamps (at most ~66 of 6212 GPUs asked at once), so every pod is placed
on arrival; the replay measures the engine and one placement per pod, not queueing. (Before the engine
kept its own count of held GPUs, each fragmentation sample summed all 6212 GPUs: replay 8.7 s.)

    .venv/bin/python bench/openb_replay.py [--pods FILE] [--nodes FILE] [--samples 500]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from gpufleet.api.objects import Node
from gpufleet.cluster.state import ClusterState
from gpufleet.cluster.workloads import Workload
from gpufleet.scheduling.kubedefault import KubeDefaultPolicy
from gpufleet.scheduling.types import AdmittedWorkload, Decisions, PodAssignment
from gpufleet.sim.engine import simulate_jobs
from gpufleet.sim.metrics import kpis, pool_series
from gpufleet.sim.model import SimConfig, SimJob
from gpufleet.sim.openb import DEFAULT_POD_FILE, GPU_NODE_FILE, default_openb_dir, read_nodes, read_pods
from gpufleet.sim.sources.openbtrace import openb_jobs, openb_nodes

T = TypeVar("T")


def timed(label: str, fn: Callable[[], T], figures: dict[str, float]) -> T:
    start = time.perf_counter()
    value = fn()
    figures[label] = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{label:>9}: {figures[label]:7.2f} s   peak RSS {rss:7.1f} MiB", flush=True)
    return value


class AdmitAll:
    """Admits every pod at once without a node: the engine's own cost, with no placement at all."""

    name = "admit-all"
    cluster: ClusterState | None = None

    def __init__(self) -> None:
        self.queue: list[Workload] = []

    def submit(self, workload: Workload, now: float) -> None:
        self.queue.append(workload)

    def finish(self, workload: str, now: float) -> None:
        pass

    def evicted(self, workload: str, now: float, *, requeue: bool = True, reason: str = "Preempted") -> None:
        pass

    def cycle(self, now: float) -> Decisions:
        d = Decisions(admitted=[AdmittedWorkload(w.key, None, pods=[PodAssignment(p.key, None) for p in w.pods])
                                for w in self.queue])
        self.queue = []
        return d

    def pending_count(self) -> int:
        return len(self.queue)

    def next_wakeup(self, now: float) -> float | None:
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = default_openb_dir()
    ap.add_argument("--pods", type=Path, default=root / DEFAULT_POD_FILE if root else None)
    ap.add_argument("--nodes", type=Path, default=root / GPU_NODE_FILE if root else None)
    ap.add_argument("--samples", type=int, default=500)
    args = ap.parse_args()
    if args.pods is None or args.nodes is None or not args.pods.exists():
        print("openb trace not found: set GPUFLEET_OPENB_DIR or pass --pods/--nodes; skipped")
        return 0
    figures: dict[str, float] = {}

    def load() -> tuple[list[Node], list[SimJob]]:
        node_rows, node_report = read_nodes(args.nodes)
        pod_rows, pod_report = read_pods(args.pods)
        for report in (node_report, pod_report):
            for problem in report.problems:
                print(problem, file=sys.stderr)
        jobs = openb_jobs(pod_rows, pod_report)
        if not node_report.ok or not pod_report.ok:
            raise SystemExit(f"refusing to time a damaged trace: {node_report.rows_rejected} node row(s), "
                             f"{pod_report.rows_rejected} pod row(s) rejected")
        return openb_nodes(node_rows), jobs

    nodes, jobs = timed("load", load, figures)
    config = SimConfig(samples=args.samples)
    timed("baseline", lambda: simulate_jobs(AdmitAll(), jobs, config), figures)
    cluster = ClusterState.from_nodes(nodes)
    result = timed("replay", lambda: simulate_jobs(KubeDefaultPolicy.for_cluster(cluster, seed=0), jobs, config),
                   figures)
    k = timed("metrics", lambda: (kpis(result), pool_series(result)), figures)[0]
    print(f"{len(jobs)} pods on {len(nodes)} nodes, {result.events} events, {result.cycles} cycles, "
          f"{result.run_end / 86400:.1f} virtual days")
    print(f"replay / baseline = {figures['replay'] / figures['baseline']:.1f}x; target replay <= 60 s: "
          f"{'met' if figures['replay'] <= 60 else 'MISSED'}")
    print(f"succeeded {k['jobs_succeeded']}, failed {k['jobs_failed']}, unfinished {k['jobs_unfinished']}, "
          f"allocation {k['gpu_allocation_pct']}%, GPU-hours {k['gpu_hours']}, wait p99 {k['wait_p99_s']} s")
    return 0 if figures["replay"] <= 60 else 1


if __name__ == "__main__":
    sys.exit(main())
