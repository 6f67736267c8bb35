"""The fragmentation benchmark's workload: openb nodes and pods, the typical-pod set, and the arrival sequence.

The arrival sequence follows the published procedure (Weng et al., ATC'23, and the authors' simulator):

1. the original pods, ordered by name, are shuffled with the run's seed;
2. pods resampled uniformly, with replacement, from the original trace (by name order) are appended until
   the arrived GPU demand reaches ``ratio`` (1.3) × cluster GPU capacity; a trace that already exceeds the
   target loses randomly chosen pods instead;
3. the node order is shuffled with the same random stream.

The reference stops appending at the first sampled pod for which ``total + gpu_milli`` (its milli *per GPU*)
exceeds the target, yet adds the pod's *total* milli to the running sum. We keep that check by default
(``reference_stop=True``): it only decides whether the very last resampled pod is kept, so the demand ends
within one pod of 130% either way, and keeping it makes our sequences end exactly where the reference's
would for the same draws. ``reference_stop=False`` checks the total instead (never overshoots the target).

A Python port cannot replay Go's math/rand stream, so only seed-averaged figures are comparable.

GPU models use the catalog's keys (``V100M32`` becomes ``V100-32GB``) on nodes, pods and typical pods alike,
so a model constraint reads the same in the placement filters, the scorers and the fragmentation measure.
The undisclosed models ``G2``/``G3`` are added to the catalog with a placeholder memory: fractional pods are
charged memory in proportion to their share, so that figure never decides a placement.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpufleet.api.kinds import FRACTION_RESOURCE
from gpufleet.api.objects import CPU, GPU, GPU_FRACTIONS_LABEL, MEMORY, PODS, GpuDemand, PodTemplate
from gpufleet.cluster.devices import GpuSlot
from gpufleet.cluster.state import ClusterState, NodeState
from gpufleet.gpu.catalog import BUILTIN_MODELS, DEFAULT_CATALOG, Catalog, GpuModel
from gpufleet.gpu.constants import MILLI
from gpufleet.scheduling.fragmentation import TypicalPod, typical_pods
from gpufleet.scheduling.gpuscore import GpuPodDemand
from gpufleet.sim.openb import OpenbNode, OpenbPod, TraceReadReport, read_nodes, read_pods

__all__ = [
    "MIB",
    "NODE_PODS",
    "PLACEHOLDER_GPU_MEMORY_MIB",
    "Arrivals",
    "BenchNode",
    "BenchPod",
    "TraceError",
    "bench_catalog",
    "bench_nodes",
    "bench_pods",
    "build_arrivals",
    "build_cluster",
    "load_trace",
    "model_key",
    "pod_request_template",
    "trace_typical_pods",
]

MIB = 2**20
# The reference nodes advertise pods: 1001, so the pod count never binds (CPU does long before).
NODE_PODS = 1001
# Memory given to the trace's undisclosed models G1/G2/G3 so the catalog accepts them (see the module doc).
PLACEHOLDER_GPU_MEMORY_MIB = 32768


class TraceError(ValueError):
    """The trace could not be read completely; the message lists every rejected row."""


def bench_catalog(models: Iterable[str] = ()) -> Catalog:
    """The default catalog plus an entry, with placeholder memory, for every model in ``models`` it lacks."""
    extra: dict[str, GpuModel] = {}
    for name in models:
        if DEFAULT_CATALOG.find(name) is None and name not in extra:
            extra[name] = DEFAULT_CATALOG.resolve(name, PLACEHOLDER_GPU_MEMORY_MIB)
    if not extra:
        return DEFAULT_CATALOG
    return Catalog((*BUILTIN_MODELS, *extra.values()))


def model_key(name: str) -> str:
    """The catalog key of a trace model name, or the name itself for a model the catalog does not know."""
    found = DEFAULT_CATALOG.find(name)
    return found.key if found is not None else name


@dataclass(frozen=True, slots=True)
class BenchNode:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str  # catalog key
    # Labelled gpufleet.io/gpu-fractions=false: its GPUs take no fractional pod (what gpufleet advise's
    # fragmentation objective searches over; the trace's own nodes are all open).
    fractions_closed: bool = False


@dataclass(frozen=True, slots=True)
class BenchPod:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int  # per GPU; < 1000 only for a one-GPU sharing pod
    models: tuple[str, ...]  # allowed GPU models (catalog keys, trace order kept); empty = any

    @property
    def total_gpu_milli(self) -> int:
        return self.num_gpu * self.gpu_milli

    @property
    def demand(self) -> GpuPodDemand:
        return GpuPodDemand(self.cpu_milli, self.gpu_milli, self.num_gpu)

    @property
    def spec(self) -> tuple[int, int, int, tuple[str, ...]]:
        """The typical-pod key: (cpu, gpu milli per GPU, GPU count, allowed models)."""
        return (self.cpu_milli, self.gpu_milli, self.num_gpu, self.models)


def bench_nodes(nodes: Iterable[OpenbNode]) -> list[BenchNode]:
    """GPU nodes only: the benchmark cluster is the 1213 GPU nodes, as in the reference."""
    return [BenchNode(n.name, n.cpu_milli, n.memory_mib, n.gpus, model_key(n.model))
            for n in nodes if n.gpus > 0 and n.model is not None]


def bench_pods(pods: Iterable[OpenbPod]) -> list[BenchPod]:
    out = []
    for p in pods:
        # A model constraint only means something for a pod that takes GPUs.
        models = tuple(model_key(m) for m in p.gpu_spec) if p.num_gpu else ()
        out.append(BenchPod(p.name, p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, models))
    return out


def _check(report: TraceReadReport) -> None:
    if not report.ok:
        shown = "\n  ".join(report.problems[:20])
        more = f"\n  ... and {len(report.problems) - 20} more" if len(report.problems) > 20 else ""
        raise TraceError(f"{report.file}: {report.rows_rejected} of {report.rows_read} rows rejected:\n  {shown}{more}")


def load_trace(nodes_csv: str | Path, pods_csv: str | Path) -> tuple[list[BenchNode], list[BenchPod]]:
    """Read both CSVs; raise :class:`TraceError` rather than benchmark a silently smaller trace."""
    nodes, node_report = read_nodes(nodes_csv)
    _check(node_report)
    pods, pod_report = read_pods(pods_csv)
    _check(pod_report)
    bn = bench_nodes(nodes)
    if not bn:
        raise TraceError(f"{nodes_csv}: no GPU nodes")
    if not pods:
        raise TraceError(f"{pods_csv}: no pods")
    return bn, bench_pods(pods)


def trace_typical_pods(pods: Sequence[BenchPod], cutoff: float = 0.95) -> list[TypicalPod]:
    """FGD's target workload: the most popular specs of the *original* trace (CPU-only pods included)."""
    return typical_pods((p.spec for p in pods), cutoff)


@dataclass(frozen=True, slots=True)
class Arrivals:
    """One run's input: pods in arrival order and nodes in (shuffled) order."""

    seed: int
    pods: tuple[BenchPod, ...]
    nodes: tuple[BenchNode, ...]
    originals: int  # the first ``originals`` pods are the shuffled trace, the rest resampled
    capacity_milli: int  # cluster GPU capacity

    @property
    def total_gpu_milli(self) -> int:
        return sum(p.total_gpu_milli for p in self.pods)


def build_arrivals(
    pods: Sequence[BenchPod],
    nodes: Sequence[BenchNode],
    seed: int,
    *,
    ratio: float = 1.3,
    reference_stop: bool = True,
    shuffle_nodes: bool = True,
) -> Arrivals:
    """Shuffle, then inflate (or deflate) the trace to ``ratio`` × GPU capacity; shuffle the nodes.

    Deterministic for (trace, nodes, seed, options). ``ratio <= 0`` keeps the shuffled trace as is.
    """
    if not pods:
        raise ValueError("no pods")
    rng = random.Random(seed)
    by_name = sorted(pods, key=lambda p: p.name)
    seq = list(by_name)
    rng.shuffle(seq)
    capacity = sum(n.gpus for n in nodes) * MILLI
    target = ratio * capacity
    total = sum(p.total_gpu_milli for p in seq)
    originals = len(seq)
    if ratio > 0 and total > target:
        # Tune down: drop random pods until the demand fits the target.
        while total > target and seq:
            victim = seq.pop(rng.randrange(len(seq)))
            total -= victim.total_gpu_milli
        originals = len(seq)
    elif ratio > 0 and total < target:
        i = 0
        while True:
            src = by_name[rng.randrange(len(by_name))]
            step = src.gpu_milli if reference_stop else src.total_gpu_milli
            if total + step > target:
                break
            # A resampled pod with zero GPU demand (CPU-only) never moves the total; the loop still ends
            # because every trace with total < target and ratio > 0 has GPU pods (else target would be 0).
            seq.append(BenchPod(f"{src.name}-tuned-{i}", src.cpu_milli, src.memory_mib, src.num_gpu,
                                src.gpu_milli, src.models))
            total += src.total_gpu_milli
            i += 1
    node_seq = list(sorted(nodes, key=lambda n: n.name))
    if shuffle_nodes:
        rng.shuffle(node_seq)
    return Arrivals(seed=seed, pods=tuple(seq), nodes=tuple(node_seq), originals=originals, capacity_milli=capacity)


def _node_state(node: BenchNode, catalog: Catalog) -> NodeState:
    memory = catalog.get(node.model).memory_mib
    gpus = [GpuSlot(i, f"{node.name}/gpu-{i}", node.model, memory, "whole", GPU) for i in range(node.gpus)]
    allocatable = {CPU: node.cpu_milli, MEMORY: node.memory_mib * MIB, PODS: NODE_PODS, GPU: node.gpus}
    labels = {"kubernetes.io/hostname": node.name, "nvidia.com/gpu.product": node.model,
              "nvidia.com/gpu.count": str(node.gpus)}
    if node.fractions_closed:
        labels[GPU_FRACTIONS_LABEL] = "false"
    return NodeState(name=node.name, labels=labels, taints=(), allocatable=allocatable, used={}, gpus=gpus,
                     gpu_model=node.model)


def build_cluster(nodes: Sequence[BenchNode]) -> ClusterState:
    """A ClusterState of whole-mode GPU nodes, in the given order, with a catalog that knows every model."""
    catalog = bench_catalog(n.model for n in nodes)
    return ClusterState((_node_state(n, catalog) for n in nodes), catalog)


def pod_request_template(pod: BenchPod) -> PodTemplate:
    """The pod as the scheduler sees it: CPU and memory requests, and a GPU demand with the model constraint."""
    requests = {CPU: pod.cpu_milli, MEMORY: pod.memory_mib * MIB}
    if pod.num_gpu == 0:
        gpu = GpuDemand()
    elif pod.gpu_milli < MILLI:
        # Quota and accounting charge a fractional pod in thousandths, as the manifest parser does.
        requests[FRACTION_RESOURCE] = pod.gpu_milli
        gpu = GpuDemand(kind="fraction", count=1, milli=pod.gpu_milli, models=pod.models)
    else:
        requests[GPU] = pod.num_gpu
        gpu = GpuDemand(kind="gpu", count=pod.num_gpu, resource=GPU, models=pod.models)
    return PodTemplate(labels={}, annotations={}, requests=requests, limits={}, gpu=gpu)
