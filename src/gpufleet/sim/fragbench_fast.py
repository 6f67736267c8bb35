"""Benchmark-only fast path: the same scorer plugins, with feasibility vectorised and scores cached per node.

A fill-up run asks ~10.8k times "score this pod on every feasible node" while only one node changes between
two asks. This engine keeps, for every distinct (CPU, milli-GPU per GPU, GPU count) demand, each node's last
score and the node version it was computed at, and calls the scorer again only for nodes that changed since.
The scorers of :mod:`gpufleet.scheduling.gpuscore` (and :mod:`gpufleet.scheduling.fgdplus`) are pure
functions of the node view and the demand, so a cached score is exactly what a fresh call would return. The
GPU ids are always taken from a fresh call on the chosen node, so scorers that draw random GPUs (Random) draw
them for the node actually used.

Filters are the benchmark's feasibility rules, vectorised with numpy: free CPU ≥ request, free memory ≥
request, GPU model allowed, and ``num_gpu`` GPUs each with free milli ≥ ``gpu_milli`` (gpuscore.fits).
Host selection is :func:`gpufleet.scheduling.gpuscore.select_host` over the scorer's normalised scores of
the feasible nodes in node order, as in the placement engine.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt

from gpufleet.scheduling.gpuscore import GpuPodDemand, Scorer, gpu_tag, select_host
from gpufleet.sim.fragbench_trace import BenchNode, BenchPod

__all__ = ["TIE_BREAKS", "FastEngine", "MutableNodeView", "TieBreak"]

TieBreak = Literal["random", "first"]
TIE_BREAKS: tuple[TieBreak, ...] = ("random", "first")

_MAX_GPUS = 8


class MutableNodeView:
    """A GpuNodeView the engine updates in place when a pod lands on the node."""

    __slots__ = ("cpu_free_milli", "gpu_free_milli", "gpu_tags", "memory_free_mib", "model")

    def __init__(self, node: BenchNode) -> None:
        self.model: str = node.model
        self.cpu_free_milli: int = node.cpu_milli
        self.memory_free_mib: int = node.memory_mib
        self.gpu_free_milli: tuple[int, ...] = (1000,) * node.gpus
        self.gpu_tags: frozenset[str] = frozenset()


class FastEngine:
    """Places pods one at a time on an array-backed cluster using a gpuscore-style scorer."""

    def __init__(
        self, nodes: Sequence[BenchNode], scorer: Scorer, rng: random.Random, *, tie_break: TieBreak = "random"
    ) -> None:
        if tie_break not in TIE_BREAKS:
            raise ValueError(f"unknown tie_break {tie_break!r}; expected one of {', '.join(TIE_BREAKS)}")
        self.tie_break = tie_break
        self.nodes = tuple(nodes)
        self.scorer = scorer
        self.rng = rng
        n = len(self.nodes)
        width = max([_MAX_GPUS, *(node.gpus for node in self.nodes)])
        self.views = [MutableNodeView(node) for node in self.nodes]
        self._cpu = np.array([node.cpu_milli for node in self.nodes], dtype=np.int64)
        self._mem = np.array([node.memory_mib for node in self.nodes], dtype=np.int64)
        # Free milli per GPU, sorted descending, padded with -1: "k GPUs with ≥ m free" is column k-1 ≥ m.
        self._top = np.full((n, width), -1, dtype=np.int64)
        for i, node in enumerate(self.nodes):
            self._top[i, : node.gpus] = 1000
        self._models = [node.model for node in self.nodes]
        self._model_mask: dict[tuple[str, ...], npt.NDArray[np.bool_]] = {}
        self._version = np.zeros(n, dtype=np.int64)
        self._cache: dict[tuple[int, int, int], tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]] = {}
        self.score_calls = 0

    def _mask_for(self, models: tuple[str, ...]) -> npt.NDArray[np.bool_] | None:
        if not models:
            return None
        mask = self._model_mask.get(models)
        if mask is None:
            allowed = set(models)
            mask = np.array([m in allowed for m in self._models], dtype=np.bool_)
            self._model_mask[models] = mask
        return mask

    def feasible(self, pod: BenchPod) -> npt.NDArray[np.intp]:
        """Indices of the nodes that pass every filter, in node order."""
        ok = (self._cpu >= pod.cpu_milli) & (self._mem >= pod.memory_mib)
        if pod.num_gpu:
            if pod.num_gpu > self._top.shape[1]:
                return np.empty(0, dtype=np.intp)
            ok &= self._top[:, pod.num_gpu - 1] >= pod.gpu_milli
            mask = self._mask_for(pod.models)
            if mask is not None:
                ok &= mask
        return np.flatnonzero(ok)

    def place(self, pod: BenchPod) -> int | None:
        """Place ``pod``; the index of its node, or None when no node passes the filters."""
        idx = self.feasible(pod)
        if idx.size == 0:
            return None
        d = pod.demand
        key = (d.cpu_milli, d.gpu_milli, d.num_gpu)
        entry = self._cache.get(key)
        if entry is None:
            entry = (np.zeros(len(self.nodes), dtype=np.int64), np.full(len(self.nodes), -1, dtype=np.int64))
            self._cache[key] = entry
        scores, seen = entry
        stale = idx[seen[idx] != self._version[idx]]
        if stale.size:
            score = self.scorer.score
            views = self.views
            for j in stale.tolist():
                scores[j] = score(views[j], d)[0]
            seen[stale] = self._version[stale]
            self.score_calls += int(stale.size)
        final = self.scorer.normalize(scores[idx].tolist())
        if self.tie_break == "random":
            pick = select_host(final, self.rng)
        else:
            pick = final.index(max(final))  # the first best node in node order
        chosen = int(idx[pick])
        _, gpus = self.scorer.score(self.views[chosen], d)
        self._allocate(chosen, pod, d, gpus)
        return chosen

    def _allocate(self, i: int, pod: BenchPod, d: GpuPodDemand, gpus: tuple[int, ...]) -> None:
        view = self.views[i]
        if len(gpus) != d.num_gpu:
            raise AssertionError(f"scorer chose GPUs {gpus} for {d}")
        free = list(view.gpu_free_milli)
        for g in gpus:
            if free[g] < d.gpu_milli:
                raise AssertionError(f"GPU {g} of {self.nodes[i].name} has {free[g]} free, {d} needs {d.gpu_milli}")
            free[g] -= d.gpu_milli
        view.gpu_free_milli = tuple(free)
        view.cpu_free_milli -= d.cpu_milli
        view.memory_free_mib -= pod.memory_mib
        tag = gpu_tag(d)
        if tag is not None and tag not in view.gpu_tags:
            view.gpu_tags = view.gpu_tags | {tag}
        self._cpu[i] = view.cpu_free_milli
        self._mem[i] = view.memory_free_mib
        row = sorted(free, reverse=True)
        self._top[i, : len(row)] = row
        self._version[i] += 1

    def frag_view(self, i: int) -> tuple[Sequence[int], int, str]:
        v = self.views[i]
        return v.gpu_free_milli, v.cpu_free_milli, v.model
