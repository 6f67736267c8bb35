"""Node scorers of the FGD paper's benchmark: Random, DotProd, GpuClustering, GpuPacking, BestFit, FGD.

Each scorer reproduces the integer arithmetic of the reference Kubernetes score
plugins (scores 0..100, Go-style truncation), because ties between equal integer
scores, broken uniformly at random, are part of the measured behaviour.

Scorers see a node only through :class:`GpuNodeView` and assume the caller has
already filtered the node as feasible (CPU, memory, GPU model, GPU capacity); they
raise ``ValueError`` if the GPU part of the demand does not fit, since they must
also pick the GPUs.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from gpufleet.gpu.constants import MILLI as MILLI
from gpufleet.scheduling.fragmentation import FragmentationModel

__all__ = [
    "MAX_NODE_SCORE",
    "MAX_SPEC_CPU",
    "MAX_SPEC_GPU",
    "MILLI",
    "MIN_NODE_SCORE",
    "SCORER_NAMES",
    "BestFitScorer",
    "DotProdScorer",
    "FgdScorer",
    "GpuClusteringScorer",
    "GpuNodeView",
    "GpuPackingScorer",
    "GpuPodDemand",
    "RandomScorer",
    "Scorer",
    "choose_gpus_best_fit",
    "choose_gpus_random",
    "fits",
    "gpu_tag",
    "make_scorer",
    "min_max_normalize",
    "select_host",
]

# Normalisers of the reference plugins: the largest node shape they assume (128 cores, 8 GPUs).
MAX_SPEC_CPU = 128_000
MAX_SPEC_GPU = 8_000
MAX_NODE_SCORE = 100
MIN_NODE_SCORE = 0


class GpuNodeView(Protocol):
    @property
    def model(self) -> str: ...

    @property
    def cpu_free_milli(self) -> int: ...

    @property
    def gpu_free_milli(self) -> Sequence[int]:
        """Free milli-GPU per physical GPU, 0..1000, indexed by GPU id."""
        ...

    @property
    def gpu_tags(self) -> frozenset[str]:
        """GpuClustering affinity tags (see :func:`gpu_tag`) of the GPU pods on the node."""
        ...


@dataclass(frozen=True, slots=True)
class GpuPodDemand:
    cpu_milli: int
    gpu_milli: int  # per GPU
    num_gpu: int

    def __post_init__(self) -> None:
        if self.cpu_milli < 0 or self.num_gpu < 0 or not 0 <= self.gpu_milli <= MILLI:
            raise ValueError(f"invalid demand {self}")
        if (self.num_gpu == 0) != (self.gpu_milli == 0):
            raise ValueError(f"gpu_milli must be 0 exactly when num_gpu is 0: {self}")
        if self.gpu_milli < MILLI and self.num_gpu > 1:
            raise ValueError(f"a GPU-sharing demand uses exactly one GPU: {self}")

    @property
    def is_sharing(self) -> bool:
        return self.num_gpu == 1 and self.gpu_milli < MILLI

    @property
    def total_gpu_milli(self) -> int:
        return self.gpu_milli * self.num_gpu


def gpu_tag(d: GpuPodDemand) -> str | None:
    """GpuClustering affinity tag: "share-gpu", "<k>-gpu", or None for CPU-only pods."""
    if d.num_gpu == 0:
        return None
    if d.is_sharing:
        return "share-gpu"
    return f"{d.num_gpu}-gpu"


def fits(node: GpuNodeView, d: GpuPodDemand) -> bool:
    """GPU capacity only: at least num_gpu GPUs each with free >= gpu_milli."""
    if d.num_gpu == 0:
        return True
    milli = d.gpu_milli
    return sum(1 for f in node.gpu_free_milli if f >= milli) >= d.num_gpu


def _lowest_index_gpus(free: Sequence[int], d: GpuPodDemand) -> tuple[int, ...]:
    picked = tuple(i for i, f in enumerate(free) if f >= d.gpu_milli)[: d.num_gpu]
    if len(picked) < d.num_gpu:
        raise ValueError(f"{d} does not fit GPUs {list(free)}")
    return picked


MemoKey = TypeVar("MemoKey")


def memoized_choice(memo: dict[MemoKey, tuple[int, frozenset[int]]], max_entries: int, key: MemoKey,
                    evaluate: Callable[[], tuple[int, frozenset[int]]], free: Sequence[int],
                    d: GpuPodDemand) -> tuple[int, tuple[int, ...]]:
    """A fragmentation scorer's (score, GPU indices) from its memo of (score, free values of the best GPUs)
    per node state: the memo is keyed on the multiset of free values, the indices are read off the node's
    actual GPU order (whole-GPU pods: the lowest-index GPUs that fit)."""
    hit = memo.get(key)
    if hit is None:
        hit = evaluate()
        if len(memo) >= max_entries:
            memo.clear()
        memo[key] = hit
    score, best_free = hit
    if not d.is_sharing:
        return score, (_lowest_index_gpus(free, d) if d.num_gpu else ())
    for i, f in enumerate(free):
        if f in best_free:
            return score, (i,)
    raise AssertionError("unreachable: best free value taken from this state")


def choose_gpus_best_fit(node: GpuNodeView, d: GpuPodDemand) -> tuple[int, ...]:
    """Sharing pod: the tightest GPU that fits (lowest index on ties). Whole-GPU pods:
    the lowest-index GPUs that fit, i.e. fully free ones."""
    if d.num_gpu == 0:
        return ()
    free = node.gpu_free_milli
    if not d.is_sharing:
        return _lowest_index_gpus(free, d)
    best = -1
    for i, f in enumerate(free):
        if f >= d.gpu_milli and (best < 0 or f < free[best]):
            best = i
    if best < 0:
        raise ValueError(f"{d} does not fit GPUs {list(free)}")
    return (best,)


def choose_gpus_random(node: GpuNodeView, d: GpuPodDemand, rng: random.Random) -> tuple[int, ...]:
    """Sharing pod: a uniformly random GPU among those that fit. Whole-GPU pods: as best fit."""
    if d.num_gpu == 0:
        return ()
    free = node.gpu_free_milli
    if not d.is_sharing:
        return _lowest_index_gpus(free, d)
    candidates = [i for i, f in enumerate(free) if f >= d.gpu_milli]
    if not candidates:
        raise ValueError(f"{d} does not fit GPUs {list(free)}")
    return (rng.choice(candidates),)


def _go_div(a: int, b: int) -> int:
    """Integer division truncating toward zero, as Go's int64 '/' does."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def min_max_normalize(scores: Sequence[int]) -> list[int]:
    """Map scores linearly onto 0..100 (integer); all 0 when every score is equal."""
    if not scores:
        return []
    lo, hi = min(scores), max(scores)
    span = hi - lo
    if span == 0:
        return [MIN_NODE_SCORE] * len(scores)
    return [(s - lo) * (MAX_NODE_SCORE - MIN_NODE_SCORE) // span + MIN_NODE_SCORE for s in scores]


def select_host(scores: Sequence[int], rng: random.Random) -> int:
    """Index of a maximal score, uniform among ties (what kube-scheduler's selectHost does)."""
    if not scores:
        raise ValueError("no candidate nodes")
    best = max(scores)
    tied = [i for i, s in enumerate(scores) if s == best]
    return tied[0] if len(tied) == 1 else rng.choice(tied)


class Scorer(Protocol):
    name: str

    def score(self, node: GpuNodeView, d: GpuPodDemand) -> tuple[int, tuple[int, ...]]:
        """(raw score, GPU ids the pod would take on this node)."""
        ...

    def normalize(self, scores: list[int]) -> list[int]:
        """Raw scores of all candidate nodes of one pod -> final scores (same order)."""
        ...


class _Identity:
    def normalize(self, scores: list[int]) -> list[int]:
        return list(scores)


class RandomScorer(_Identity):
    """Uniformly random feasible node; sharing pods get a random fitting GPU.

    The reference plugin draws one feasible node in PreScore and scores it 100,
    the rest 0. Scoring every feasible node 100 and letting the caller break the
    tie uniformly (:func:`select_host`) picks each feasible node with the same
    probability 1/#feasible, without the scorer having to see the candidate set.
    """

    name = "random"

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def score(self, node: GpuNodeView, d: GpuPodDemand) -> tuple[int, tuple[int, ...]]:
        return MAX_NODE_SCORE, choose_gpus_random(node, d, self.rng)


class DotProdScorer(_Identity):
    """score = int(100 · (1 − (node·pod)/2)) on max-spec-normalised (cpu, total GPU) vectors.

    A smaller dot product scores higher, the reverse of Tetris's alignment rule;
    that is what the reference benchmark ran.
    """

    name = "dotprod"

    def score(self, node: GpuNodeView, d: GpuPodDemand) -> tuple[int, tuple[int, ...]]:
        gpus = choose_gpus_best_fit(node, d)
        # Same float operation order as the reference, so truncation lands identically.
        dot = 0.0
        dot += (node.cpu_free_milli / MAX_SPEC_CPU) * (d.cpu_milli / MAX_SPEC_CPU)
        dot += (sum(node.gpu_free_milli) / MAX_SPEC_GPU) * (d.total_gpu_milli / MAX_SPEC_GPU)
        return int(MAX_NODE_SCORE * (1.0 - dot / 2)), gpus


class GpuClusteringScorer(_Identity):
    """Prefer nodes already hosting only this pod's GPU-count class, then mixed, then empty nodes."""

    name = "gpuclustering"

    def score(self, node: GpuNodeView, d: GpuPodDemand) -> tuple[int, tuple[int, ...]]:
        gpus = choose_gpus_best_fit(node, d)
        tag = gpu_tag(d)
        if tag is None:
            return MIN_NODE_SCORE, gpus
        fullness = _go_div(MAX_NODE_SCORE // 4 * (MAX_SPEC_GPU - sum(node.gpu_free_milli)), MAX_SPEC_GPU)
        tags = node.gpu_tags
        if tag in tags:
            base = MAX_NODE_SCORE * 3 // 4 if len(tags) == 1 else MAX_NODE_SCORE * 2 // 4
        else:
            base = MAX_NODE_SCORE // 4 if not tags else 0
        return fullness + base, gpus


class GpuPackingScorer(_Identity):
    """Prefer already-shared GPUs, then used nodes, then empty nodes (smaller empty nodes first)."""

    name = "gpupacking"

    def score(self, node: GpuNodeView, d: GpuPodDemand) -> tuple[int, tuple[int, ...]]:
        gpus = choose_gpus_best_fit(node, d)
        if d.num_gpu == 0:
            return MIN_NODE_SCORE, gpus
        free = node.gpu_free_milli
        fully_free = sum(1 for f in free if f == MILLI)
        if fully_free == len(free):
            return max(MAX_NODE_SCORE // 3 - fully_free, fully_free), gpus
        # Fill from the least free GPU upwards: the score asks "which GPUs would a
        # packer use", independent of the best-fit ids actually returned.
        need = d.num_gpu
        used: list[int] = []
        for i in sorted(range(len(free)), key=lambda j: free[j]):
            if need == 0:
                break
            if free[i] >= d.gpu_milli:
                used.append(i)
                need -= 1
        if need:
            raise ValueError(f"{d} does not fit GPUs {list(free)}")
        fully_used = sum(1 for i in used if free[i] == MILLI)
        if fully_used:
            return max(MAX_NODE_SCORE // 2 - fully_used, MAX_NODE_SCORE // 3), gpus
        free_pct = sum(free[i] * 100 // MILLI for i in used)
        return max(MAX_NODE_SCORE - free_pct // 10, MAX_NODE_SCORE // 2), gpus


class BestFitScorer:
    """raw = int((1 − [½·(cpuFree−cpuReq)/128000 + ½·(gpuFree−gpuReq)/8000]) · 100).

    Raw scores are then min-max normalised over the pod's candidate nodes.
    """

    name = "bestfit"

    def score(self, node: GpuNodeView, d: GpuPodDemand) -> tuple[int, tuple[int, ...]]:
        gpus = choose_gpus_best_fit(node, d)
        s = 0.0
        s += (node.cpu_free_milli - d.cpu_milli) / MAX_SPEC_CPU * 0.5
        s += (sum(node.gpu_free_milli) - d.total_gpu_milli) / MAX_SPEC_GPU * 0.5
        return int((1.0 - s) * MAX_NODE_SCORE), gpus

    def normalize(self, scores: list[int]) -> list[int]:
        return min_max_normalize(scores)


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


class FgdScorer(_Identity):
    """int(sigmoid((F_before − F_after)/1000) · 100): the smallest fragmentation increase wins.

    For a sharing pod every fitting GPU is tried and the first GPU attaining the
    best score is chosen, so FGD also picks the GPU inside the node. Other pods
    take the lowest-index fully free GPUs.

    Scores are memoised on (model class, CPU bucket before and after, sorted free
    list, demand): F sees CPU only through the typical pods' CPU thresholds and the
    GPUs only as a multiset, so this key fixes the score and the *free values* of
    the best GPUs; the GPU ids are then read off the node's actual order.
    """

    name = "fgd"

    def __init__(self, fragmentation: FragmentationModel, *, max_entries: int = 1_000_000) -> None:
        self.fragmentation = fragmentation
        self._max_entries = max_entries
        self._memo: dict[tuple[int, int, int, tuple[int, ...], int, int], tuple[int, frozenset[int]]] = {}

    @staticmethod
    def _score_of(before: float, after: float) -> int:
        return int(_sigmoid((before - after) / MILLI) * MAX_NODE_SCORE)

    def score(self, node: GpuNodeView, d: GpuPodDemand) -> tuple[int, tuple[int, ...]]:
        fm = self.fragmentation
        free = node.gpu_free_milli
        cpu = node.cpu_free_milli
        model = node.model
        state = tuple(sorted(free))
        key = (
            fm.model_class(model),
            fm.cpu_bucket(cpu),
            fm.cpu_bucket(cpu - d.cpu_milli),
            state,
            d.gpu_milli,
            d.num_gpu,
        )
        return memoized_choice(self._memo, self._max_entries, key,
                               lambda: self._evaluate(state, cpu, model, d), free, d)

    def _evaluate(self, state: tuple[int, ...], cpu: int, model: str, d: GpuPodDemand) -> tuple[int, frozenset[int]]:
        return gradient_choice(state, cpu, model, d, self.fragmentation.node, self._score_of)


def gradient_choice(state: tuple[int, ...], cpu: int, model: str, d: GpuPodDemand,
                    measure: Callable[[Sequence[int], int, str], float],
                    score_of: Callable[[float, float], int]) -> tuple[int, frozenset[int]]:
    """A fragmentation-gradient score: ``score_of(measure before, measure after)`` for the pod on a node
    whose GPUs have ``state`` free (sorted ascending) and ``cpu`` free. A sharing pod is tried on each
    distinct free value; the best score and the free values that reach it come back (empty for whole-GPU
    pods, which take the fully free GPUs)."""
    cpu_after = cpu - d.cpu_milli
    before = measure(state, cpu, model)
    if not d.is_sharing:
        after = list(state)
        # Non-sharing GPU pods take whole GPUs (gpu_milli == 1000): k fully free ones, which sort last.
        taken = 0
        for j in range(len(after) - 1, -1, -1):
            if taken == d.num_gpu:
                break
            if after[j] >= d.gpu_milli:
                after[j] -= d.gpu_milli
                taken += 1
        if taken < d.num_gpu:
            raise ValueError(f"{d} does not fit GPUs {list(state)}")
        return score_of(before, measure(after, cpu_after, model)), frozenset()
    scores: dict[int, int] = {}
    after = list(state)
    for j, f in enumerate(state):
        # GPUs with equal free milli lead to the same node state; evaluate each value once.
        if f < d.gpu_milli or f in scores:
            continue
        after[j] = f - d.gpu_milli
        scores[f] = score_of(before, measure(after, cpu_after, model))
        after[j] = f
    if not scores:
        raise ValueError(f"{d} does not fit GPUs {list(state)}")
    best = max(scores.values())
    return best, frozenset(f for f, s in scores.items() if s == best)


SCORER_NAMES = ("random", "dotprod", "gpuclustering", "gpupacking", "bestfit", "fgd")


def make_scorer(
    name: str,
    *,
    fragmentation: FragmentationModel | None = None,
    rng: random.Random | None = None,
) -> Scorer:
    """Build a scorer by benchmark name; "fgd" needs ``fragmentation``, "random" needs ``rng``."""
    key = name.strip().lower()
    if key == "fgd":
        if fragmentation is None:
            raise ValueError("the fgd scorer needs a FragmentationModel")
        return FgdScorer(fragmentation)
    if key == "random":
        if rng is None:
            raise ValueError("the random scorer needs an rng (seeded, for reproducible runs)")
        return RandomScorer(rng)
    simple: dict[str, Callable[[], Scorer]] = {
        "dotprod": DotProdScorer,
        "gpuclustering": GpuClusteringScorer,
        "gpupacking": GpuPackingScorer,
        "bestfit": BestFitScorer,
    }
    if key not in simple:
        raise ValueError(f"unknown scorer {name!r}; expected one of {', '.join(SCORER_NAMES)}")
    return simple[key]()
