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
  whether what is left after that can ever be filled is invisible to it. We add, per GPU, the milli it is
  expected to end with (a 1001-entry table per GPU model class, computed once by
  :func:`settled_waste_table`: a simulated fill-up of 4096 GPUs with the typical pods, each share taking the
  free value the previous iteration's table likes best): 530 free (a 470 pod) is likely to end as 470+470
  (60 left); 190 free (a lone 810) stays 190, since the rare 160 shares cannot reach the many such GPUs.
  (A random fill until nothing fits, :func:`fill_waste_table`, said 30 there.)

The score is the decrease of ``F + strand_weight·strand + waste_weight·waste − pressure term`` in micro-GPU,
*without*
FGD's ``int(sigmoid(Δ/1000)·100)`` quantization: the two new terms are what separates nodes FGD would tie.
Like FGD it picks the GPU of a sharing pod (the one with the best score, lowest index on ties); other GPU
pods take the lowest-index free GPUs.

Measured on the openb benchmark (bench/README.md, "Fragmentation benchmark (openb)").
"""

from __future__ import annotations

import functools
import random
from collections.abc import Mapping, Sequence

from gpufleet.scheduling.fragmentation import FragmentationModel, TypicalPod
from gpufleet.scheduling.gpuscore import MILLI, GpuNodeView, GpuPodDemand, gradient_choice, memoized_choice

__all__ = [
    "DEFAULT_PRESSURE_WEIGHT",
    "DEFAULT_STRAND_WEIGHT",
    "DEFAULT_WASTE_WEIGHT",
    "FgdPlusScorer",
    "cpu_per_gpu",
    "fill_waste_table",
    "model_pressure",
    "settled_waste_table",
]

DEFAULT_STRAND_WEIGHT = 1.5
DEFAULT_WASTE_WEIGHT = 3.0
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


def settled_waste_table(typical: Sequence[TypicalPod], model: str, *, gpus: int = 4096, rounds: int = 8,
                        iterations: int = 3, min_visits: int = 30, seed: int = 0) -> list[float]:
    """w[L]: mean milli finally left on the GPUs that had L free at some point of a simulated fill-up.

    The random fill of :func:`fill_waste_table` assumes that whatever fits a GPU eventually lands on it: 190
    free (a lone 810 share) "ends at 30" because a 160 share fits. In a fleet a share goes to the one GPU
    that suits it best among many, so a remainder only a rare share fits stays idle (the openb runs leave
    ~1000 GPUs at 190). Here ``gpus`` model-``model`` GPUs are filled with typical GPU pods drawn by
    popularity (fixed seed: deterministic) until the drawn demand reaches their capacity: whole-GPU pods take
    fresh GPUs, a share takes the free value v (a partial GPU's or a fresh one's) with the least
    ``w[v − m] − w[v]`` under the previous iteration's table (best fit in the first; smallest v on ties).
    Free values visited fewer than ``min_visits`` times keep the random-fill value.
    """
    specs = tuple((p.gpu_milli, p.num_gpu, p.weight) for p in typical
                  if p.gpu_milli and (p.models is None or model in p.models))
    if not specs:
        return fill_waste_table(typical, model)
    # Every placer builds its scorer afresh (the live scheduler each cycle, the simulator each run), and the
    # fill-up takes ~0.5 s: the table is a function of the GPU pod mix alone, so it is computed once.
    return list(_settled(specs, gpus, rounds, iterations, min_visits, seed))


@functools.lru_cache(maxsize=64)
def _settled(specs: tuple[tuple[int, int, float], ...], gpus: int, rounds: int, iterations: int, min_visits: int,
             seed: int) -> tuple[float, ...]:
    # Start from the random fill of the same GPU pod mix.
    table = fill_waste_table(
        [TypicalPod(cpu_milli=0, gpu_milli=m, num_gpu=k, models=None, weight=w) for m, k, w in specs], "")
    shapes = [(m, k) for m, k, _ in specs]
    weights = [w for _, _, w in specs]
    share_sizes = sorted({m for m, k in shapes if m < MILLI})
    # The free values a GPU can reach: MILLI less sums of share sizes.
    reachable = {MILLI}
    stack = [MILLI]
    while stack:
        v = stack.pop()
        for m in share_sizes:
            if m <= v and v - m not in reachable:
                reachable.add(v - m)
                stack.append(v - m)
    for it in range(iterations):
        # Per share size, the free values it may take in order of preference (the table is fixed during an
        # iteration): a draw takes the first one some GPU holds.
        order: dict[int, list[int]] = {}
        for m in share_sizes:
            gain = [table[v - m] - table[v] if it and v >= m else 0.0 for v in range(MILLI + 1)]
            order[m] = sorted((v for v in reachable if v >= m), key=lambda v: (gain[v], v))
        total = [0.0] * (MILLI + 1)
        visits = [0] * (MILLI + 1)
        rng = random.Random(seed)
        for _ in range(rounds):
            free = [MILLI] * gpus
            history: list[list[int]] = [[MILLI] for _ in range(gpus)]
            # GPUs per free value; fresh GPUs are the list at MILLI.
            holding: list[list[int]] = [[] for _ in range(MILLI + 1)]
            holding[MILLI] = list(range(gpus))
            arrived = 0
            while arrived < gpus * MILLI:
                m, k = rng.choices(shapes, weights)[0]
                arrived += m * k
                if m == MILLI:
                    fresh = holding[MILLI]
                    if len(fresh) >= k:
                        for _ in range(k):
                            g = fresh.pop()
                            free[g] = 0
                            history[g].append(0)
                    continue
                for v in order[m]:
                    if holding[v]:
                        break
                else:
                    continue  # fits nowhere
                g = holding[v].pop()
                free[g] -= m
                history[g].append(free[g])
                if free[g]:
                    holding[free[g]].append(g)
            for g in range(gpus):
                for v in history[g]:
                    total[v] += free[g]
                    visits[v] += 1
        table = [total[v] / visits[v] if visits[v] >= min_visits else table[v] for v in range(MILLI + 1)]
    return tuple(table)


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
        if self.waste_weight:
            # The fleet's tables now, with the placer (a live full cycle builds it), rather than at its first
            # placement (a live cycle that carries on, a new pod waiting): ~0.15 s each the first time a process
            # needs one, then remembered (settled_waste_table).
            for model, count in (model_gpus or {}).items():
                if count > 0:
                    self._table(model)

    def normalize(self, scores: list[int]) -> list[int]:
        return list(scores)

    # ---- the measure ---------------------------------------------------------------------------------------
    def _table(self, model: str) -> list[float]:
        cls = self.fragmentation.model_class(model)
        table = self._tables.get(cls)
        if table is None:
            table = self._tables[cls] = settled_waste_table(self.fragmentation.typical, model)
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
        return gradient_choice(state, cpu, model, d, self.measure, self._delta)
