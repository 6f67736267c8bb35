"""The fragmentation objective's measure: unallocated GPUs at saturation, FGD's fill-up, on the advisor's input.

The fleet and the demand of ``gpufleet advise`` become the fragmentation benchmark's nodes and pods
(:mod:`gpufleet.sim.fragbench.trace`), and each seed runs the benchmark's own fill-up
(:func:`gpufleet.sim.fragbench.bench.simulate`): the demand's pods shuffled and resampled to 130% of the GPU capacity,
the nodes shuffled, every pod offered once to the placement engine, nothing leaving. Read at 100% arrived:

* unallocated GPUs, % of capacity, when the arrived GPU demand first reaches the capacity;
* pods placed among those arrived until then.

The figure is read at the arrival that takes the arrived GPU demand to the capacity, so it exists for every fleet;
the benchmark's report averages the arrivals that land in the 100% bin (kept beside it, ``binned_pct``), which a
small fleet with 8-GPU pods may leave empty. On openb the two agree within noise.

Only whole-mode GPUs are measured (the benchmark's model): a GPU node offering MIG instances or time-slice
replicas, or a pod asking for them, is refused with a message that names it.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.api.objects import CPU, GPU, MEMORY, Node
from gpufleet.cluster.free_devices import fractions_closed
from gpufleet.cluster.state import node_state_from
from gpufleet.gpu.constants import MILLI
from gpufleet.scheduling.fragmentation import TypicalPod
from gpufleet.sim.fragbench.bench import simulate
from gpufleet.sim.fragbench.trace import (
    MIB,
    Arrivals,
    BenchNode,
    BenchPod,
    build_arrivals,
    model_key,
    trace_typical_pods,
)
from gpufleet.sim.model import SimJob, SimulationError

ARRIVED_PCT = 100  # the arrive ratio the figures are read at
POLICY = "gpufleet"  # the scheduler's default placement profile, as the advisor's simulations run


def bench_fleet(nodes: Sequence[Node]) -> list[BenchNode]:
    """The input's GPU nodes as the benchmark's nodes; a node labelled gpufleet.io/gpu-fractions=false stays
    closed to fractions. CPU-only nodes are left out, as the benchmark leaves them out."""
    out = []
    for node in nodes:
        state = node_state_from(node)
        if not state.gpus:
            continue
        odd = sorted({f"{g.mode} {g.resource}" for g in state.gpus if g.mode != "whole" or g.resource != GPU})
        if odd or state.gpu_model is None:
            raise SimulationError(
                f"node {node.name}: the fragmentation objective measures whole GPUs (nvidia.com/gpu) only, as FGD's "
                f"fill-up does; this node offers {', '.join(odd) or 'GPUs of no known model'}. Give the "
                "fleet with whole GPUs, or use --objective cost|wait|balanced")
        out.append(BenchNode(node.name, state.allocatable.get(CPU, 0), state.allocatable.get(MEMORY, 0) // MIB,
                             len(state.gpus), model_key(state.gpu_model), fractions_closed(state.labels)))
    if not out:
        raise SimulationError("no GPU nodes in the input: nothing to measure")
    return out


def bench_demand(jobs: Sequence[SimJob]) -> list[BenchPod]:
    """Every pod of the demand as the benchmark's pod: CPU and memory, whole GPUs or a fraction of one."""
    out = []
    for job in jobs:
        for pod in job.workload.pods:
            t = pod.template
            g = t.gpu
            cpu, memory = t.requests.get(CPU, 0), t.requests.get(MEMORY, 0) // MIB
            models = tuple(model_key(m) for m in g.models)
            if g.kind == "none":
                out.append(BenchPod(pod.key, cpu, memory, 0, 0, ()))
            elif g.kind == "gpu" and (g.resource in (None, GPU)):
                out.append(BenchPod(pod.key, cpu, memory, g.count, MILLI, models))
            elif g.kind == "fraction" and 0 < g.milli < MILLI:
                out.append(BenchPod(pod.key, cpu, memory, 1, g.milli, models))
            else:
                what = ("a GPU share given by memory only (gpufleet.io/gpu-memory)" if g.kind == "fraction"
                        else f"{g.count} x {g.resource or g.kind}")
                raise SimulationError(
                    f"pod {pod.key}: the fragmentation objective measures whole GPUs and fractions of one "
                    f"(gpufleet.io/gpu-fraction), as FGD's fill-up does; this pod asks for {what}. Use "
                    "--objective cost|wait|balanced for MIG and time-sliced demand")
    if not any(p.num_gpu for p in out):
        raise SimulationError("no pod of the demand asks for a GPU: nothing to measure")
    return out


@dataclass(frozen=True, slots=True)
class Demand:
    """The demand as the fill-up offers it, with FGD's typical pods (its most popular specs, 95% cutoff)."""

    pods: tuple[BenchPod, ...]
    typical: tuple[TypicalPod, ...]

    @classmethod
    def of(cls, jobs: Sequence[SimJob]) -> Demand:
        pods = bench_demand(jobs)
        return cls(tuple(pods), tuple(trace_typical_pods(pods)))


@dataclass(frozen=True, slots=True)
class FillUp:
    """One fleet measured over paired seeds (the same seeds, so the same arrivals, for every fleet compared)."""

    seeds: tuple[int, ...]
    unallocated_pct: tuple[float, ...]  # per seed, at 100% arrived
    placed: tuple[int, ...]  # pods placed among those arrived until 100%, per seed
    arrived: tuple[int, ...]  # pods arrived until 100%, per seed
    # The benchmark's own figure, the mean over the arrivals in the 100% bin (NaN where none lands within a
    # point of it: a small fleet with large pods), kept to compare with bench/README.md
    binned_pct: tuple[float, ...]
    seconds: float

    @property
    def mean_unallocated(self) -> float:
        return math.fsum(self.unallocated_pct) / len(self.unallocated_pct)

    @property
    def mean_placed(self) -> float:
        return sum(self.placed) / len(self.placed)

    def paired_delta(self, given: FillUp) -> tuple[float, float]:
        """Mean and sample standard deviation over seeds of (this − given) unallocated GPU %."""
        if self.seeds != given.seeds:
            raise ValueError("fill-ups on different seeds are not paired")
        d = [a - b for a, b in zip(self.unallocated_pct, given.unallocated_pct, strict=True)]
        return math.fsum(d) / len(d), statistics.stdev(d) if len(d) > 1 else 0.0


@dataclass(slots=True)
class _UntilFull:
    """The fill-up's step callback: pods arrived and placed until the arrived GPU demand reaches the capacity."""

    arrivals: Arrivals
    arrived_milli: int = 0
    allocated_milli: int = 0
    pods: int = 0
    placed: int = 0

    def __call__(self, k: int, where: int | None) -> None:
        if self.full:
            return
        pod = self.arrivals.pods[k]
        self.arrived_milli += pod.total_gpu_milli
        self.pods += 1
        if where is not None:
            self.placed += 1
            self.allocated_milli += pod.total_gpu_milli

    @property
    def full(self) -> bool:
        return self.arrived_milli >= self.arrivals.capacity_milli

    @property
    def unallocated_pct(self) -> float:
        return 100.0 - self.allocated_milli / self.arrivals.capacity_milli * 100.0


def fill_up(nodes: Sequence[BenchNode], demand: Demand, seeds: Sequence[int], policy: str = POLICY) -> FillUp:
    """The benchmark's fill-up of ``nodes`` with ``demand``, once per seed."""
    started = time.perf_counter()
    unallocated: list[float] = []
    binned: list[float] = []
    placed: list[int] = []
    arrived_pods: list[int] = []
    for seed in seeds:
        arrivals = build_arrivals(demand.pods, nodes, seed)
        count = _UntilFull(arrivals)
        run = simulate(arrivals, demand.typical, policy, on_step=count)
        if not count.full:  # build_arrivals inflates to 130%: only a defect would stop short of 100%
            raise SimulationError(f"seed {seed}: the arrivals stop at {count.arrived_milli / MILLI:,.1f} GPUs, below "
                                  f"the fleet's {arrivals.capacity_milli / MILLI:,.0f}")
        unallocated.append(count.unallocated_pct)
        binned.append(run.unallocated_pct[ARRIVED_PCT])
        placed.append(count.placed)
        arrived_pods.append(count.pods)
    return FillUp(tuple(seeds), tuple(unallocated), tuple(placed), tuple(arrived_pods), tuple(binned),
                  time.perf_counter() - started)
