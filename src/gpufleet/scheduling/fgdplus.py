"""FGD+: fragmentation gradient descent that also sees CPU-stranded GPUs and hard-to-fill GPU remainders.

FGD (Weng et al., ATC'23) scores a node by how much a placement increases its fragmentation F_n(M): the idle
GPU milli that a typical pod could not use *as its next pod*. On the openb trace two things it does not see
decide most of the GPUs it leaves unallocated:

* **CPU stranding.** A GPU pod of the trace asks ~11 cores per GPU, and a G2 node has 12 cores per GPU. FGD
  puts CPU-only and CPU-heavy pods on such nodes as long as the *next* typical pod still fits; a few pods
  later the node's remaining GPUs have no CPU left for anyone. We add the node's stranded GPU milli,
  ``max(0, idle − free_cpu / r)``, where ``r`` is the typical GPU pods' CPU per GPU. CPU-only pods then go to
  the CPU-rich nodes (T4: 52 cores per GPU) and FGD's own measure is left to pair the GPU shares.
* **Model pressure** (traces with ``gpu_spec``). Pods restricted to a few GPU models need those models'
  capacity; FGD sees a restriction only through its NoAccess category, which even *attracts* unrestricted
  pods to the scarce models (their idle GPUs count as fragment for everyone who may not use them). Given
  the fleet's GPU count per model, we spread each typical GPU pod's demand over the models it allows (in
  proportion to their capacity) and call ``pressure(X)`` the demand per GPU of model X over the fleet's mean.
  ``pressure_weight·(pressure − 1)·idle`` is *subtracted* from the measure: idle GPUs of a contested model
  are worth keeping, those of an uncontested one are not. Without restrictions every pressure is 1 and the
  term vanishes.
* **Remainders no pod fills.** FGD counts a GPU's free milli as usable by every pod that fits in it once;
  whether what is left after that can ever be filled is invisible to it. We add, per GPU, the expected milli
  left over when the GPU is filled by random typical shares until none fits (a 1001-entry table per GPU
  model class, computed once): 530 free (a 470 pod) is likely to end as 470+470 (60 left), 210 free (a
  470+320 pair) ends unused unless a rare 160 pod comes.

The score is the decrease of ``F + strand_weight·strand + waste_weight·waste − pressure term`` in micro-GPU,
*without*
FGD's ``int(sigmoid(Δ/1000)·100)`` quantization: the two new terms are what separates nodes FGD would tie.
Like FGD it picks the GPU of a sharing pod (the one with the best score, lowest index on ties); other GPU
pods take the lowest-index free GPUs.

Measured on the openb benchmark (bench/README.md, "Fragmentation benchmark (openb)").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpufleet.scheduling.fragmentation import FragmentationModel, TypicalPod
from gpufleet.scheduling.gpuscore import MILLI, GpuNodeView, GpuPodDemand, memoized_choice

__all__ = [
    "DEFAULT_PRESSURE_WEIGHT",
    "DEFAULT_STRAND_WEIGHT",
    "DEFAULT_WASTE_WEIGHT",
    "FgdPlusScorer",
    "cpu_per_gpu",
    "fill_waste_table",
    "model_pressure",
]

DEFAULT_STRAND_WEIGHT = 1.5
DEFAULT_WASTE_WEIGHT = 0.5
DEFAULT_PRESSURE_WEIGHT = 2.0
# Score unit: the measure is in milli-GPU; scores are integers, so keep three more digits (micro-GPU).
_SCALE = 1000


def cpu_per_gpu(typical: Sequence[TypicalPod]) -> float | None:
    """Popularity-weighted CPU milli per whole GPU asked by the typical GPU pods (None without GPU pods)."""
    cpu = 0.0
    gpus = 0.0
    for p in typical:
        if p.gpu_milli == 0:
            continue
        cpu += p.weight * p.cpu_milli
        gpus += p.weight * p.gpu_milli * p.num_gpu / MILLI
    return cpu / gpus if gpus > 0 else None


def model_pressure(typical: Sequence[TypicalPod], model_gpus: Mapping[str, int]) -> dict[str, float]:
    """Per GPU model, the typical GPU demand per GPU of that model over the fleet's mean (1 = uncontested).

    Each typical GPU pod's demand (popularity × milli × GPUs) is spread over the models it allows, in
    proportion to their GPU counts; unrestricted pods spread over the whole fleet, so a fleet without
    restrictions has pressure 1 everywhere.
    """
    caps = {m: n for m, n in model_gpus.items() if n > 0}
    total_gpus = sum(caps.values())
    demand = dict.fromkeys(caps, 0.0)
    total = 0.0
    for p in typical:
        if p.gpu_milli == 0:
            continue
        allowed = [m for m in caps if p.models is None or m in p.models]
        room = sum(caps[m] for m in allowed)
        if room == 0:
            continue  # a pod no model of this fleet can take puts no pressure anywhere
        d = p.weight * p.gpu_milli * p.num_gpu
        total += d
        for m in allowed:
            demand[m] += d * caps[m] / room
    if total <= 0:
        return dict.fromkeys(caps, 1.0)
    mean = total / total_gpus
    out: dict[str, float] = {}
    for m, n in caps.items():
        value = demand[m] / n / mean
        # Float noise must not turn "uncontested" into a tiny bias that breaks exact ties.
        out[m] = 1.0 if abs(value - 1.0) < 1e-9 else value
    return out


def fill_waste_table(typical: Sequence[TypicalPod], model: str) -> list[float]:
    """w[L]: expected milli left on a GPU with L free when random typical one-GPU pods allowed on ``model``
    land on it (each size in proportion to its popularity, among the sizes that still fit) until none fits.

    w[L] = L when no size fits, else the popularity-weighted mean of w[L − m] over the sizes m ≤ L.
    """
    weights: dict[int, float] = {}
    for p in typical:
        if p.gpu_milli == 0 or p.num_gpu != 1 or (p.models is not None and model not in p.models):
            continue
        weights[p.gpu_milli] = weights.get(p.gpu_milli, 0.0) + p.weight
    sizes = sorted(weights)
    table = [0.0] * (MILLI + 1)
    for free in range(MILLI + 1):
        total = 0.0
        acc = 0.0
        for m in sizes:
            if m > free:
                break
            total += weights[m]
            acc += weights[m] * table[free - m]
        table[free] = acc / total if total > 0 else float(free)
    return table


class FgdPlusScorer:
    """FGD+ on the :class:`~gpufleet.scheduling.gpuscore.GpuNodeView` protocol (see the module doc)."""

    name = "fgdplus"

    def __init__(self, fragmentation: FragmentationModel, *, model_gpus: Mapping[str, int] | None = None,
                 strand_weight: float = DEFAULT_STRAND_WEIGHT, waste_weight: float = DEFAULT_WASTE_WEIGHT,
                 pressure_weight: float = DEFAULT_PRESSURE_WEIGHT, max_entries: int = 1_000_000) -> None:
        """``model_gpus``: the fleet's GPU count per model (catalog keys, as nodes report them); without it
        the pressure term is off."""
        if strand_weight < 0 or waste_weight < 0 or pressure_weight < 0:
            raise ValueError("weights must be >= 0")
        self.fragmentation = fragmentation
        self.strand_weight = strand_weight
        self.waste_weight = waste_weight
        self.pressure_weight = pressure_weight
        self.pressure: dict[str, float] = (model_pressure(fragmentation.typical, model_gpus)
                                           if model_gpus is not None else {})
        ratio = cpu_per_gpu(fragmentation.typical)
        # Without typical GPU pods there is no CPU-per-GPU need to strand against.
        self._milli_per_cpu = MILLI / ratio if ratio else None
        self._tables: dict[int, list[float]] = {}
        self._max_entries = max_entries
        self._memo: dict[tuple[str, int, int, tuple[int, ...], int, int], tuple[int, frozenset[int]]] = {}

    def normalize(self, scores: list[int]) -> list[int]:
        return list(scores)

    # ---- the measure ---------------------------------------------------------------------------------------
    def _table(self, model: str) -> list[float]:
        cls = self.fragmentation.model_class(model)
        table = self._tables.get(cls)
        if table is None:
            table = self._tables[cls] = fill_waste_table(self.fragmentation.typical, model)
        return table

    def strand(self, free: Sequence[int], cpu_free_milli: int) -> float:
        """Idle GPU milli the node's free CPU cannot feed at the typical CPU-per-GPU ratio."""
        if self._milli_per_cpu is None:
            return 0.0
        idle = sum(free)
        return max(0.0, idle - max(cpu_free_milli, 0) * self._milli_per_cpu)

    def measure(self, free: Sequence[int], cpu_free_milli: int, model: str) -> float:
        """F_n(M) + strand_weight·strand + waste_weight·Σ_g w[L_g] − pressure_weight·(pressure − 1)·idle,
        in milli-GPU."""
        value = self.fragmentation.node(free, cpu_free_milli, model)
        lean = self.pressure.get(model, 1.0) - 1.0
        if lean and self.pressure_weight:
            value -= self.pressure_weight * lean * sum(free)
        if self.strand_weight:
            value += self.strand_weight * self.strand(free, cpu_free_milli)
        if self.waste_weight:
            table = self._table(model)
            value += self.waste_weight * sum(table[f] for f in free)
        return value

    # ---- the scorer ----------------------------------------------------------------------------------------
    def score(self, node: GpuNodeView, d: GpuPodDemand) -> tuple[int, tuple[int, ...]]:
        free = node.gpu_free_milli
        cpu = node.cpu_free_milli
        model = node.model
        state = tuple(sorted(free))
        # The measure sees the GPUs as a multiset, the CPU exactly (strand) and the model itself (pressure
        # differs between models the typical pods treat alike), so this key fixes the score and the free
        # values of the best GPUs; the GPU index is read off the node's actual order.
        key = (model, cpu, d.cpu_milli, state, d.gpu_milli, d.num_gpu)
        return memoized_choice(self._memo, self._max_entries, key,
                               lambda: self._evaluate(state, cpu, model, d), free, d)

    def _delta(self, before: float, after: float) -> int:
        return round((before - after) * _SCALE)

    def _evaluate(self, state: tuple[int, ...], cpu: int, model: str, d: GpuPodDemand) -> tuple[int, frozenset[int]]:
        cpu_after = cpu - d.cpu_milli
        before = self.measure(state, cpu, model)
        if not d.is_sharing:
            after = list(state)
            taken = 0
            for j in range(len(after) - 1, -1, -1):  # sorted ascending: fully free GPUs are last
                if taken == d.num_gpu:
                    break
                if after[j] >= d.gpu_milli:
                    after[j] -= d.gpu_milli
                    taken += 1
            if taken < d.num_gpu:
                raise ValueError(f"{d} does not fit GPUs {list(state)}")
            return self._delta(before, self.measure(after, cpu_after, model)), frozenset()
        scores: dict[int, int] = {}
        after = list(state)
        for j, f in enumerate(state):
            if f < d.gpu_milli or f in scores:
                continue
            after[j] = f - d.gpu_milli
            scores[f] = self._delta(before, self.measure(after, cpu_after, model))
            after[j] = f
        if not scores:
            raise ValueError(f"{d} does not fit GPUs {list(state)}")
        best = max(scores.values())
        return best, frozenset(f for f, s in scores.items() if s == best)
