"""GPU fragmentation measure of FGD (Weng et al., ATC'23), re-derived from its published definition.

For a node with per-GPU free milli-GPU list ``L``, free CPU ``c`` and GPU model ``t``,
and a target workload ``M`` of typical pod specs ``m`` with popularity ``p_m``::

    F_n(M) = Σ_m p_m · frag_n(m)

where ``frag_n(m)`` is the node's idle GPU milli that pod ``m`` could *not* use:

* CPU-only pod (``gpu_milli == 0``; categories XL/XR): all idle GPU milli.
* GPU model not allowed by the pod (NoAccess): all idle GPU milli.
* ``k_m`` GPUs each with free ≥ ``milli_m`` exist and ``c ≥ cpu_m`` (Q3): only the
  GPUs too small for the pod, ``Σ_{g: L_g < milli_m} L_g``.
* otherwise (Q1 lack both, Q2 lack GPU, Q4 lack CPU): all idle GPU milli.

Memory plays no part, as in the reference simulator.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from fractions import Fraction

from gpufleet.gpu.constants import MILLI

__all__ = [
    "MILLI",
    "FragCategory",
    "FragmentationModel",
    "TypicalPod",
    "classify",
    "node_fragmentation",
    "typical_pods",
]



@dataclass(frozen=True, slots=True)
class TypicalPod:
    cpu_milli: int
    gpu_milli: int  # per GPU; 0 = CPU-only
    num_gpu: int
    models: frozenset[str] | None  # allowed GPU models; None = any
    weight: float  # popularity p_m; the weights of one typical set sum to 1
    # Trace pods behind this spec; lets FragmentationModel use exact integer weights.
    # 0 for hand-built specs, which then fall back to the float weight.
    count: int = 0


class FragCategory(Enum):
    Q1_LACK_BOTH = "q1_lack_both"
    Q2_LACK_GPU = "q2_lack_gpu"
    Q3_SATISFIED = "q3_satisfied"
    Q4_LACK_CPU = "q4_lack_cpu"
    XL_SATISFIED = "xl_satisfied"
    XR_LACK_CPU = "xr_lack_cpu"
    NO_ACCESS = "no_access"


Spec = tuple[int, int, int, tuple[str, ...]]


def typical_pods(specs: Iterable[Spec], cutoff: float = 0.95) -> list[TypicalPod]:
    """The most popular pod specs covering at least ``cutoff`` of the pods, weights renormalised.

    ``spec = (cpu_milli, gpu_milli per GPU, num_gpu, gpu_spec)``. CPU-only pods count.
    Specs are ranked by count, descending; equal counts are ordered by the key
    ``(cpu_milli, gpu_milli, num_gpu, sorted gpu_spec)`` ascending. The reference
    simulator leaves that tie order to Go's map iteration (i.e. random), which can
    only change *which* spec is cut at the boundary, never how many are taken.
    ``gpu_spec`` is part of the key exactly as written (order and repeats kept), as
    the reference keys on the raw annotation string: gpuspec33 lists both
    "V100M16|V100M32" and "V100M16|V100M32|V100M32", and only keeping them apart
    reproduces its 127 typical specs (merging equivalent lists gives 124).
    """
    if not 0.0 < cutoff <= 1.0:
        raise ValueError(f"cutoff must be in (0, 1], got {cutoff}")
    counts: Counter[tuple[int, int, int, tuple[str, ...]]] = Counter()
    for cpu, milli, num, spec in specs:
        if cpu < 0 or num < 0 or not 0 <= milli <= MILLI or (num == 0) != (milli == 0):
            raise ValueError(f"invalid pod spec {(cpu, milli, num, spec)}")
        if milli < MILLI and num > 1:
            raise ValueError(f"sharing pod spec with {num} GPUs: {(cpu, milli, num, spec)}")
        counts[(cpu, milli, num, tuple(spec))] += 1
    total = sum(counts.values())
    if total == 0:
        return []
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    # Exact rational threshold: 0.95 as a float is slightly below 95/100, and a
    # float product could stop one spec early or late on an exact boundary.
    need = Fraction(cutoff).limit_denominator(10**9) * total
    chosen: list[tuple[tuple[int, int, int, tuple[str, ...]], int]] = []
    cum = 0
    for key, n in ranked:
        if cum >= need:
            break
        chosen.append((key, n))
        cum += n
    return [
        TypicalPod(
            cpu_milli=cpu,
            gpu_milli=milli,
            num_gpu=num,
            models=frozenset(spec) if spec else None,
            weight=n / cum,
            count=n,
        )
        for (cpu, milli, num, spec), n in chosen
    ]


def _accessible(model: str, pod: TypicalPod) -> bool:
    return pod.models is None or model in pod.models


def classify(free_milli: Sequence[int], cpu_free_milli: int, model: str, pod: TypicalPod) -> FragCategory:
    """The FGD category of (node, typical pod)."""
    cpu_ok = cpu_free_milli >= pod.cpu_milli
    if pod.gpu_milli == 0:
        return FragCategory.XL_SATISFIED if cpu_ok else FragCategory.XR_LACK_CPU
    if not _accessible(model, pod):
        return FragCategory.NO_ACCESS
    gpu_ok = sum(1 for f in free_milli if f >= pod.gpu_milli) >= pod.num_gpu
    if gpu_ok:
        return FragCategory.Q3_SATISFIED if cpu_ok else FragCategory.Q4_LACK_CPU
    return FragCategory.Q2_LACK_GPU if cpu_ok else FragCategory.Q1_LACK_BOTH


def node_fragmentation(
    free_milli: Sequence[int], cpu_free_milli: int, model: str, typical: Sequence[TypicalPod]
) -> float:
    """F_n(M) in milli-GPU. Straightforward reference version; use FragmentationModel in hot loops."""
    idle = sum(free_milli)
    frag = 0.0
    for pod in typical:
        if classify(free_milli, cpu_free_milli, model, pod) is FragCategory.Q3_SATISFIED:
            frag += pod.weight * sum(f for f in free_milli if f < pod.gpu_milli)
        else:
            frag += pod.weight * idle
    return frag


# Per-model evaluation plan: the weight of typical pods that always see the whole idle
# milli as fragment (CPU-only, NoAccess), and the GPU pods grouped by milli so that one
# bisect over the sorted free list serves every pod with that milli.
# Each group entry is (num_gpu, cpu_rank, weight): cpu fits iff cpu_bucket > cpu_rank.
_Group = tuple[int, tuple[tuple[int, int, int | float], ...]]
_Plan = tuple[int | float, tuple[_Group, ...]]


class FragmentationModel:
    """Memoised F_n(M) for one typical-pod set.

    The memo key is ``(access class of model, CPU bucket, sorted free list)``.
    F depends on CPU only through the comparisons ``cpu_free >= cpu_m``, so free
    CPU is reduced to the number of distinct typical ``cpu_m`` values it reaches;
    likewise models allowed by exactly the same typical pods share entries. This
    keys the same F values as ``(model, cpu_free, sorted(free))`` with far more hits.

    When every typical pod carries its trace ``count`` the weighted sum is done in
    integers (weights count/Σcount) and divided once, so two states with the same
    fragmentation give bit-identical floats; FGD's integer-truncated score would
    otherwise flip 50 → 49 on a rounding error at Δ = 0.

    A miss costs O(#distinct milli · log #gpus + #typical). The memo is cleared when
    it reaches ``max_entries`` (cheaper than LRU bookkeeping on every hit).
    """

    __slots__ = (
        "_cpu_thresholds",
        "_denom",
        "_exact",
        "_max_entries",
        "_memo",
        "_model_class",
        "_plans",
        "hits",
        "misses",
        "typical",
    )

    def __init__(self, typical: Sequence[TypicalPod], *, max_entries: int = 2_000_000) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be >= 1")
        self.typical: tuple[TypicalPod, ...] = tuple(typical)
        self._max_entries = max_entries
        self._exact = bool(self.typical) and all(p.count > 0 for p in self.typical)
        self._denom = sum(p.count for p in self.typical) if self._exact else 1
        self._cpu_thresholds: tuple[int, ...] = tuple(sorted({p.cpu_milli for p in self.typical}))
        self._memo: dict[tuple[int, int, tuple[int, ...]], float] = {}
        self._model_class: dict[str, int] = {}
        self._plans: list[_Plan] = []
        self.hits = 0
        self.misses = 0

    def _class_of(self, model: str) -> int:
        cls = self._model_class.get(model)
        if cls is not None:
            return cls
        access = tuple(_accessible(model, p) for p in self.typical)
        for other, idx in self._model_class.items():
            if tuple(_accessible(other, p) for p in self.typical) == access:
                self._model_class[model] = idx
                return idx
        self._plans.append(self._build_plan(model))
        idx = len(self._plans) - 1
        self._model_class[model] = idx
        return idx

    def _build_plan(self, model: str) -> _Plan:
        always: int | float = 0
        by_milli: dict[int, list[tuple[int, int, int | float]]] = {}
        for p in self.typical:
            w: int | float = p.count if self._exact else p.weight
            if p.gpu_milli == 0 or not _accessible(model, p):
                always += w
                continue
            rank = self._cpu_thresholds.index(p.cpu_milli)
            by_milli.setdefault(p.gpu_milli, []).append((p.num_gpu, rank, w))
        groups = tuple((milli, tuple(entries)) for milli, entries in sorted(by_milli.items()))
        return always, groups

    def model_class(self, model: str) -> int:
        """Id shared by all GPU models that exactly the same typical pods may use."""
        cls = self._model_class.get(model)
        return cls if cls is not None else self._class_of(model)

    def cpu_bucket(self, cpu_free_milli: int) -> int:
        """How many distinct typical-pod CPU requests fit in this free CPU; F sees CPU only through it."""
        return bisect_right(self._cpu_thresholds, cpu_free_milli)

    def node(self, free_milli: Sequence[int], cpu_free_milli: int, model: str) -> float:
        """F_n(M) in milli-GPU for the node state (free milli per GPU, free CPU, GPU model)."""
        free = tuple(sorted(free_milli))
        cpu_bucket = bisect_right(self._cpu_thresholds, cpu_free_milli)
        cls = self._model_class.get(model)
        if cls is None:
            cls = self._class_of(model)
        key = (cls, cpu_bucket, free)
        hit = self._memo.get(key)
        if hit is not None:
            self.hits += 1
            return hit
        self.misses += 1
        value = self._evaluate(self._plans[cls], cpu_bucket, free)
        if len(self._memo) >= self._max_entries:
            self._memo.clear()
        self._memo[key] = value
        return value

    def _evaluate(self, plan: _Plan, cpu_bucket: int, free: tuple[int, ...]) -> float:
        idle = sum(free)
        if idle == 0:
            return 0.0
        always, groups = plan
        n = len(free)
        acc: int | float = always * idle
        for milli, entries in groups:
            small_count = bisect_left(free, milli)
            big_count = n - small_count
            # Only the GPUs too small for this milli stay fragment when the pod fits.
            small = sum(free[:small_count]) if small_count else 0
            for k, rank, w in entries:
                acc += w * (small if big_count >= k and cpu_bucket > rank else idle)
        return acc / self._denom

    def cache_size(self) -> int:
        return len(self._memo)

    def clear(self) -> None:
        self._memo.clear()
        self.hits = 0
        self.misses = 0
