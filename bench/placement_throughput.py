"""Placement throughput: kube-scheduler's SchedulingBasic shape, and the FGD fragmentation-benchmark fill.

SchedulingBasic: N nodes × 8 whole A100-80GB (64 cpu, 512Gi, all-pairs NVLink), 10,000 pending single-pod
workloads asking 1 GPU + 1 cpu + 4Gi, placed one by one through the Placer (no API server). Reported:
pods/s for each profile at each size, peak Python memory (tracemalloc) of the run, and the same plugins run
naively (every node filtered and scored for every pod) on the first pods, in the same process: the ratio.

openb (when ../shared/data/openb exists): the 1213 GPU nodes and the default pod list shuffled and
resampled to 130% of GPU capacity (~10.8k pods), placed one at a time with FGD, no departures. ``--quality``
also runs every profile on that fill and prints unallocated GPU % at 100% arrived demand (the figure the
FGD paper plots), which is how the gpufleet default profile was chosen.

    .venv/bin/python bench/placement_throughput.py [--nodes 500,1000,5000] [--pods 10000] [--quality]
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

from gpufleet.api.kinds import FRACTION_RESOURCE
from gpufleet.api.objects import CPU, GPU, MEMORY, PODS, GpuDemand, PodTemplate
from gpufleet.cluster.devices import GpuSlot
from gpufleet.cluster.state import ClusterState, NodeState
from gpufleet.gpu.catalog import BUILTIN_MODELS, DEFAULT_CATALOG, Catalog
from gpufleet.scheduling.fragmentation import FragmentationModel, TypicalPod, typical_pods
from gpufleet.scheduling.placement import Profile, make_placer, make_profile
from gpufleet.scheduling.types import PodRequest

GIB = 2**30
MIB = 2**20
A100 = "A100-SXM4-80GB"


# ---- SchedulingBasic -------------------------------------------------------------------------------------------

def basic_cluster(n: int) -> ClusterState:
    links = {(i, j): 12 for i, j in combinations(range(8), 2)}
    nodes = []
    for k in range(n):
        name = f"node-{k:05d}"
        gpus = [GpuSlot(i, f"{name}/gpu-{i}", A100, 81920, "whole", GPU) for i in range(8)]
        nodes.append(NodeState(name=name, labels={"kubernetes.io/hostname": name,
                                                  "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
                               taints=(), allocatable={CPU: 64000, MEMORY: 512 * GIB, PODS: 110, GPU: 8},
                               used={}, gpus=gpus, gpu_model=A100, nvlinks=dict(links)))
    return ClusterState(nodes)


def basic_pods(count: int) -> list[PodRequest]:
    template = PodTemplate(labels={}, annotations={}, requests={CPU: 1000, MEMORY: 4 * GIB, GPU: 1}, limits={},
                           gpu=GpuDemand(kind="gpu", count=1, resource=GPU))
    return [PodRequest(f"default/pod-{i}", template) for i in range(count)]


BASIC_TYPICAL = (TypicalPod(cpu_milli=1000, gpu_milli=1000, num_gpu=1, models=None, weight=1.0, count=1),)


@dataclass
class Run:
    attempts: int
    placed: int
    seconds: float  # placing only; the placer (and its index) is built before the clock starts
    build_seconds: float
    peak_mib: float = 0.0

    @property
    def rate(self) -> float:
        return self.attempts / self.seconds if self.seconds else float("inf")


def run_basic(nodes: int, pods: int, profile: str, *, indexed: bool, seed: int = 1, trace: bool = False) -> Run:
    """One run; ``trace`` measures peak Python memory with tracemalloc (which slows the run: time it apart)."""
    cluster = basic_cluster(nodes)
    requests = basic_pods(pods)
    fragmentation = FragmentationModel(BASIC_TYPICAL) if profile in ("fgd", "gpufleet") else None
    gc.collect()
    if trace:
        tracemalloc.start()
    t0 = time.perf_counter()
    placer = make_placer(cluster, profile, random.Random(seed), indexed=indexed, fragmentation=fragmentation)
    t1 = time.perf_counter()
    placed = sum(1 for r in requests if placer.place([r]) is not None)
    t2 = time.perf_counter()
    peak = 0.0
    if trace:
        peak = tracemalloc.get_traced_memory()[1] / MIB
        tracemalloc.stop()
    return Run(len(requests), placed, t2 - t1, t1 - t0, peak)


# ---- openb fill ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TracePod:
    cpu: int
    memory_mib: int
    num_gpu: int
    milli: int
    models: tuple[str, ...]

    @property
    def gpu_milli(self) -> int:
        return self.num_gpu * self.milli


def _model_key(name: str) -> str:
    found = DEFAULT_CATALOG.find(name)
    return found.key if found is not None else name


def load_openb(root: Path) -> tuple[list[tuple[str, int, int, int, str]], list[TracePod]]:
    from gpufleet.sim.openb import read_nodes, read_pods

    nodes, nrep = read_nodes(root / "openb_node_list_gpu_node.csv")
    pods, prep = read_pods(root / "openb_pod_list_default.csv")
    if not (nrep.ok and prep.ok):
        raise SystemExit(f"openb trace damaged: {nrep.problems[:3]} {prep.problems[:3]}")
    node_rows = [(n.name, n.cpu_milli, n.memory_mib, n.gpus, _model_key(n.model)) for n in nodes
                 if n.gpus and n.model]
    trace = [TracePod(p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli,
                      tuple(_model_key(m) for m in p.gpu_spec) if p.num_gpu else ()) for p in pods]
    return node_rows, trace


def openb_arrivals(trace: Sequence[TracePod], capacity_milli: int, seed: int) -> list[TracePod]:
    """Shuffle the trace, then append pods resampled with replacement until 130% of GPU capacity."""
    rng = random.Random(seed)
    seq = list(trace)
    rng.shuffle(seq)
    total = sum(p.gpu_milli for p in seq)
    while True:
        p = trace[rng.randrange(len(trace))]
        if total + p.gpu_milli > 1.3 * capacity_milli:
            return seq
        seq.append(p)
        total += p.gpu_milli


def openb_cluster(rows: Sequence[tuple[str, int, int, int, str]], seed: int) -> ClusterState:
    extra = {m: DEFAULT_CATALOG.resolve(m, 32768) for *_, m in rows if DEFAULT_CATALOG.find(m) is None}
    catalog = Catalog((*BUILTIN_MODELS, *extra.values())) if extra else DEFAULT_CATALOG
    order = list(rows)
    random.Random(seed).shuffle(order)
    nodes = []
    for name, cpu, mem, count, model in order:
        memory = catalog.get(model).memory_mib
        gpus = [GpuSlot(i, f"{name}/gpu-{i}", model, memory, "whole", GPU) for i in range(count)]
        nodes.append(NodeState(name=name, labels={"kubernetes.io/hostname": name}, taints=(),
                               allocatable={CPU: cpu, MEMORY: mem * MIB, PODS: 1001, GPU: count}, used={},
                               gpus=gpus, gpu_model=model))
    return ClusterState(nodes, catalog)


def trace_request(i: int, p: TracePod) -> PodRequest:
    requests = {CPU: p.cpu, MEMORY: p.memory_mib * MIB}
    if p.num_gpu == 0:
        gpu = GpuDemand()
    elif p.milli < 1000:
        requests[FRACTION_RESOURCE] = p.milli
        gpu = GpuDemand(kind="fraction", count=1, milli=p.milli, models=p.models)
    else:
        requests[GPU] = p.num_gpu
        gpu = GpuDemand(kind="gpu", count=p.num_gpu, resource=GPU, models=p.models)
    return PodRequest(f"openb/pod-{i}", PodTemplate(labels={}, annotations={}, requests=requests, limits={},
                                                    gpu=gpu))


@dataclass
class Fill:
    seconds: float
    pods: int
    failed: int
    unallocated_at_100: float  # % of GPU capacity, when arrived demand first reaches 100%
    unallocated_end: float


def run_openb(rows: Sequence[tuple[str, int, int, int, str]], trace: Sequence[TracePod],
              profile: str | Callable[[Sequence[TypicalPod]], Profile], seed: int, *, indexed: bool = True,
              limit: int | None = None) -> Fill:
    cluster = openb_cluster(rows, seed)
    capacity = 1000 * sum(r[3] for r in rows)
    arrivals = openb_arrivals(trace, capacity, seed)[:limit]
    typical = typical_pods((p.cpu, p.milli, p.num_gpu, p.models) for p in trace)
    requests = [trace_request(i, p) for i, p in enumerate(arrivals)]
    prof = make_profile(profile, typical=typical) if isinstance(profile, str) else profile(typical)
    placer = make_placer(cluster, prof, random.Random(seed), indexed=indexed)
    arrived = 0
    allocated = 0
    at_100: float | None = None
    failed = 0
    t0 = time.perf_counter()
    for req, p in zip(requests, arrivals, strict=True):
        arrived += p.gpu_milli
        if placer.place([req]) is None:
            failed += 1
        else:
            allocated += p.gpu_milli
        if at_100 is None and arrived >= capacity:
            at_100 = 100 * (1 - allocated / capacity)
    dt = time.perf_counter() - t0
    end = 100 * (1 - allocated / capacity)
    return Fill(dt, len(requests), failed, at_100 if at_100 is not None else end, end)


def fgd_bestfit_no_tier(typical: Sequence[TypicalPod]) -> Profile:
    """The gpufleet profile without its cheapest-model tier, to show what the tier costs on openb."""
    return Profile("fgd>bestfit", (("fgd", 1),), then=("bestfit",), fractions="scorer", typical=tuple(typical))


def openb_dir() -> Path | None:
    here = Path(__file__).resolve().parents[1]
    for candidate in (here.parent / "shared" / "data" / "openb", Path.cwd().parent / "shared" / "data" / "openb"):
        if candidate.is_dir():
            return candidate
    return None


# ---- main ------------------------------------------------------------------------------------------------------

def _show(label: str, r: Run) -> None:
    print(f"  {label:<30} {r.attempts:>6} pods ({r.placed} placed) in {r.seconds:7.2f} s = {r.rate:8.0f} pods/s"
          f"  [index build {r.build_seconds:.2f} s]")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="500,1000,5000")
    ap.add_argument("--pods", type=int, default=10_000)
    ap.add_argument("--profiles", default="binpack,fgd")
    ap.add_argument("--naive-pods", type=int, default=200, help="pods the naive baseline places (it is slow)")
    ap.add_argument("--quality", action="store_true", help="openb fill quality of every profile (slow)")
    ap.add_argument("--seeds", type=int, default=3, help="seeds for --quality")
    ap.add_argument("--no-openb", action="store_true")
    args = ap.parse_args(argv)

    print(f"SchedulingBasic: 8×{A100} per node, {args.pods} pods of 1 GPU + 1 cpu + 4Gi, placed one at a time "
          "(pods/s counts every attempt; a full cluster answers 'unschedulable' too)")
    for n in (int(x) for x in args.nodes.split(",")):
        for profile in args.profiles.split(","):
            print(f"{n} nodes, profile {profile}")
            fast = run_basic(n, args.pods, profile, indexed=True)
            _show("indexed (equivalence classes)", fast)
            # The baseline fills an empty cluster: its first pods are its cheapest, so the ratio is not inflated.
            slow = run_basic(n, args.naive_pods, profile, indexed=False)
            _show("naive (every node, every pod)", slow)
            mem = run_basic(n, args.pods, profile, indexed=True, trace=True)
            print(f"  ratio indexed/naive: {fast.rate / slow.rate:.0f}x; peak traced memory of the indexed run "
                  f"(placer, index and placements; the cluster is built before): {mem.peak_mib:.1f} MiB")

    root = None if args.no_openb else openb_dir()
    if root is None:
        print("openb trace not found: skipping the FGD fill")
        return 0
    rows, trace = load_openb(root)
    print(f"openb: {len(rows)} nodes, {sum(r[3] for r in rows)} GPUs; {len(trace)} trace pods -> 130% fill")
    for profile in ("fgd", "gpufleet"):
        fill = run_openb(rows, trace, profile, seed=42)
        print(f"  {profile:<9} indexed: {fill.pods} pods in {fill.seconds:5.1f} s ({fill.pods / fill.seconds:5.0f} "
              f"pods/s), {fill.failed} failed, unallocated {fill.unallocated_at_100:.2f}% at 100% arrived")
    part = 1000
    naive = run_openb(rows, trace, "fgd", seed=42, indexed=False, limit=part)
    indexed = run_openb(rows, trace, "fgd", seed=42, indexed=True, limit=part)
    print(f"  FGD, first {part} pods: naive {naive.seconds:.2f} s, indexed {indexed.seconds:.2f} s "
          f"(ratio {naive.seconds / indexed.seconds:.1f}x)")
    if args.quality:
        profiles: list[str | Callable[[Sequence[TypicalPod]], Profile]] = [
            "fgd", "bestfit", "gpupacking", "gpuclustering", "dotprod", "random", "binpack", "spread",
            "kube-default", "cost", fgd_bestfit_no_tier, "gpufleet"]
        print(f"fill quality: unallocated GPU % at 100% arrived demand, mean of seeds 42..{41 + args.seeds} "
              "(lower is better; the paper: FGD 4.77, BestFit 7.14, Packing 8.22, Clustering 8.35, DotProd 9.38, "
              "Random 13.70)")
        for profile in profiles:
            fills = [run_openb(rows, trace, profile, seed=42 + s) for s in range(args.seeds)]
            name = profile if isinstance(profile, str) else "fgd>bestfit"
            mean = sum(f.unallocated_at_100 for f in fills) / len(fills)
            end = sum(f.unallocated_end for f in fills) / len(fills)
            secs = sum(f.seconds for f in fills) / len(fills)
            per_seed = " ".join(f"{f.unallocated_at_100:.2f}" for f in fills)
            print(f"  {name:<14} {mean:6.2f}%  [{per_seed}]  at 130%: {end:5.2f}%  {secs:5.1f} s/run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
