"""The fragmentation benchmark through the scheduler's own placement engine (the Placer protocol).

The openb nodes become a :class:`~gpufleet.cluster.state.ClusterState` of whole-mode GPUs; each arriving pod
is a :class:`~gpufleet.scheduling.types.PodRequest` whose template carries CPU and memory requests and a
``GpuDemand`` (``fraction`` with its milli-GPU, or ``gpu`` with its count) restricted to the trace's
``gpu_spec`` models. The placer runs the profile of the policy's name (``make_profile``) with the trace's
typical pods as FGD's target workload.

Node names get the prefix ``NNNN-`` of their position in the seed-shuffled order, as the reference simulator
names them (``%04d-`` from ``rand.Perm``), so the placer's ``name`` tie-break takes the first tied node of
the shuffled order (see :mod:`gpufleet.sim.fragbench` for why that is the reference's behaviour).

Two engines:

* ``placer``: ``make_placer(..., indexed=True)`` as the scheduler runs it;
* ``fast`` (benchmark only): the same :class:`~gpufleet.scheduling.placement.GpuPlacer` (same filter and
  score plugins, tie-break, device choice and ``ClusterState.allocate``) with its candidate search replaced
  by a per-node cache: a node's evaluation for a pod shape is kept until the node's ``generation`` changes.
  In a fill-up only one node changes per pod while ~150 pod shapes recur, so nearly every evaluation is a
  cache hit; the placer's own index instead re-hashes each shape key for every class of every pod.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from gpufleet.api.objects import CPU, PodTemplate
from gpufleet.cluster.state import NodeState
from gpufleet.scheduling.fragmentation import FragmentationModel
from gpufleet.scheduling.placement import PROFILE_NAMES, GpuPlacer, Profile, TieBreak, make_placer, make_profile
from gpufleet.scheduling.placement.need import PodNeed
from gpufleet.scheduling.placement.scorers import GpuScore
from gpufleet.scheduling.types import PodRequest
from gpufleet.sim.fragbench_trace import BenchNode, BenchPod, build_cluster, pod_request_template

__all__ = ["OUR_POLICY", "CachedSearchPlacer", "PlacerEngine", "ordered_name"]

OUR_POLICY = "fgdplus"
_INFEASIBLE = np.iinfo(np.int64).min


def ordered_name(position: int, name: str) -> str:
    """The node's name in the cluster: its position in the shuffled order first, as the reference does."""
    return f"{position:04d}-{name}"


def _profile(policy: str, fm: FragmentationModel) -> Profile:
    if policy == OUR_POLICY and policy not in PROFILE_NAMES:
        # Not registered with the placement profiles yet: run FGD's profile and swap its scorer (below).
        return make_profile("fgd", typical=fm.typical)
    return make_profile(policy, typical=fm.typical)


def _use_fgdplus(placer: GpuPlacer, fm: FragmentationModel) -> None:
    # Benchmark-only bridge until the placement profiles register "fgdplus" (see bench/README.md): the FGD
    # profile's only scorer plugin is replaced by ours, wrapped the same way (GpuScore), which also makes it
    # choose the GPU of a fractional pod.
    from gpufleet.scheduling.fgdplus import FgdPlusScorer

    plugin = GpuScore(FgdPlusScorer(fm))
    placer._scorers = [(plugin, 1)]
    placer._single = plugin
    placer._choose_gpu = plugin.choose_gpu


class CachedSearchPlacer(GpuPlacer):
    """GpuPlacer whose candidate search caches each node's evaluation per pod shape and node generation.

    Only ``_search`` differs: it asks the placer's own ``static_reason`` and ``evaluate`` (the profile's
    filter and score plugins) for the nodes whose state changed since that shape was last evaluated. Nodes
    are kept in cluster order, which the benchmark makes the name order.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, indexed=False, **kwargs)
        self.order: list[NodeState] = list(self.cluster)
        self._fb_pos = {n.name: i for i, n in enumerate(self.order)}
        if any(a.name > b.name for a, b in zip(self.order, self.order[1:], strict=False)):
            # The "name" tie-break below takes the first tied node in cluster order.
            raise ValueError("CachedSearchPlacer needs the cluster's nodes in name order")
        self._fb_gen = np.array([n.generation for n in self.order], dtype=np.int64)
        self._fb_shapes: dict[Any, int] = {}
        self._fb_static: dict[Any, npt.NDArray[np.bool_]] = {}
        # Per shape: the generation each node was evaluated at, its tier and its score (tier _INFEASIBLE when
        # a dynamic filter rejects the node).
        self._fb_seen: list[npt.NDArray[np.int64]] = []
        self._fb_tier: list[npt.NDArray[np.int64]] = []
        self._fb_score: list[npt.NDArray[np.int64]] = []
        self.evaluations = 0
        self.cluster.listeners.append(self._on_change)

    def _on_change(self, node: NodeState) -> None:
        i = self._fb_pos.get(node.name)
        if i is not None:
            self._fb_gen[i] = node.generation

    def close(self) -> None:
        if self._on_change in self.cluster.listeners:
            self.cluster.listeners.remove(self._on_change)
        super().close()

    def _static_mask(self, need: PodNeed) -> npt.NDArray[np.bool_]:
        mask = self._fb_static.get(need.constraint_key)
        if mask is None:
            mask = np.array([self.static_reason(need, n) is None for n in self.order], dtype=np.bool_)
            self._fb_static[need.constraint_key] = mask
        return mask

    def _search(self, need: PodNeed, allowed: Collection[str] | None) -> list[list[NodeState]]:
        if allowed is not None or need.per_node or len(self.order) != len(self.cluster.nodes):
            return super()._search(need, allowed)  # not the benchmark's case: the plain scan
        sid = self._fb_shapes.get(need.shape_key)
        n = len(self.order)
        if sid is None:
            sid = self._fb_shapes[need.shape_key] = len(self._fb_seen)
            self._fb_seen.append(np.full(n, -1, dtype=np.int64))
            self._fb_tier.append(np.full(n, _INFEASIBLE, dtype=np.int64))
            self._fb_score.append(np.zeros(n, dtype=np.int64))
        seen, tier, score = self._fb_seen[sid], self._fb_tier[sid], self._fb_score[sid]
        ok = self._static_mask(need)
        stale = np.flatnonzero(ok & (seen != self._fb_gen))
        if stale.size:
            order = self.order
            for i in stale.tolist():
                res = self.evaluate(need, order[i])
                if isinstance(res, str):
                    tier[i] = _INFEASIBLE
                else:
                    tier[i], score[i] = res
            seen[stale] = self._fb_gen[stale]
            self.evaluations += int(stale.size)
        live = np.flatnonzero(ok & (tier != _INFEASIBLE))
        if live.size == 0:
            return [[]]
        t = tier[live]
        live = live[t == t.max()]
        s = score[live]
        best = live[s == s.max()]
        if self.tie_break == "name":
            # Cluster order is name order: the first tied node is the one the name tie-break picks.
            return [[self.order[int(best[0])]]]
        return [[self.order[i] for i in best.tolist()]]


class PlacerEngine:
    """Places bench pods one at a time through the placement engine; node ``i`` is ``nodes[i]``."""

    def __init__(self, nodes: Sequence[BenchNode], policy: str, fm: FragmentationModel, rng: random.Random,
                 *, tie_break: str = "first", cached: bool = False) -> None:
        renamed = [BenchNode(ordered_name(i, n.name), n.cpu_milli, n.memory_mib, n.gpus, n.model)
                   for i, n in enumerate(nodes)]
        self.cluster = build_cluster(renamed)
        profile = _profile(policy, fm)
        tb: TieBreak = "name" if tie_break == "first" else "random"
        self.placer: GpuPlacer
        if cached:
            self.placer = CachedSearchPlacer(self.cluster, profile, rng, tie_break=tb, fragmentation=fm)
        else:
            self.placer = make_placer(self.cluster, profile, rng, tie_break=tb, fragmentation=fm)
        if policy == OUR_POLICY and policy not in PROFILE_NAMES:
            _use_fgdplus(self.placer, fm)
        self._nodes: list[NodeState] = [self.cluster.nodes[n.name] for n in renamed]
        self._index = {n.name: i for i, n in enumerate(renamed)}
        self._templates: dict[tuple[int, int, int, int, tuple[str, ...]], PodTemplate] = {}

    @property
    def evaluations(self) -> int:
        return self.placer.evaluations if isinstance(self.placer, CachedSearchPlacer) else 0

    def _template(self, pod: BenchPod) -> PodTemplate:
        key = (pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli, pod.models)
        t = self._templates.get(key)
        if t is None:
            # Pods of one shape share a template; nothing downstream mutates it.
            t = self._templates[key] = pod_request_template(pod)
        return t

    def place(self, pod: BenchPod) -> int | None:
        placed = self.placer.place([PodRequest(pod.name, self._template(pod))])
        if placed is None:
            return None
        return self._index[placed[0].node]

    def frag_view(self, i: int) -> tuple[Sequence[int], int, str]:
        node = self._nodes[i]
        return [g.free_milli for g in node.gpus], node.free(CPU), node.gpu_model or ""
