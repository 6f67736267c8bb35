"""The Placer: pods onto nodes and devices of a ClusterState, all or none, with the profile's plugins.

Placement of one pod: static filters (per node group), dynamic filters and scores (per class of identical
node states, see :mod:`.index`), the best score key, a node drawn uniformly among all tied nodes with the
placer's rng, devices chosen on that node, and ``ClusterState.allocate``. A gang is placed pod by pod under
a checkpoint (largest pods first, which a greedy fill needs most) and rolled back whole if one pod fails.

``indexed=False`` gives the naive placer: every node filtered and scored for every pod with the same
plugins; the benchmark's baseline and the tests' reference for the index.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import replace
from typing import Literal

from gpufleet.api.objects import Topology
from gpufleet.cluster.state import ClusterState, NodeState, Placement
from gpufleet.scheduling.fragmentation import FragmentationModel
from gpufleet.scheduling.placement.devices import assign_devices
from gpufleet.scheduling.placement.dra import dra_problem, over_choices, with_choice
from gpufleet.scheduling.placement.explain import format_reasons
from gpufleet.scheduling.placement.filters import fit_count
from gpufleet.scheduling.placement.index import Best, ClassIndex, Result
from gpufleet.scheduling.placement.need import Interner, PodNeed, compile_need
from gpufleet.scheduling.placement.nodeview import NodeView, TagIndex
from gpufleet.scheduling.placement.profiles import Profile, build_scorers, make_profile
from gpufleet.scheduling.placement.scorers import GpuScore, ReplicaSpread
from gpufleet.scheduling.placement.topology import place_preferred, place_required
from gpufleet.scheduling.placement.victims import smallest_victims
from gpufleet.scheduling.types import Placer, PodRequest, TopologyRequest

TieBreak = Literal["random", "name"]
_SHAPE_LIMIT = 100_000  # distinct pod shapes remembered before the ids (and every cache keyed on them) reset


def _size(need: PodNeed) -> tuple[float, int, int]:
    return (need.gpu_equivalent, need.cpu, need.memory)


class GpuPlacer:
    """Implements :class:`gpufleet.scheduling.types.Placer`."""

    def __init__(self, cluster: ClusterState, profile: Profile, rng: random.Random,
                 topologies: Iterable[Topology] = (), *, indexed: bool = True, tie_break: TieBreak = "random",
                 fragmentation: FragmentationModel | None = None) -> None:
        self.cluster = cluster
        self.profile = profile
        self.rng = rng
        self.tie_break = tie_break
        self._intern = Interner()
        self.levels: dict[str, tuple[str, ...]] = {t.meta.name: tuple(t.levels) for t in topologies}
        self._static = tuple(f for f in profile.filters if f.static)
        self._dynamic = tuple(f for f in profile.filters if not f.static)
        plugins = build_scorers(profile, cluster.catalog, rng, fragmentation, cluster.gpus_per_model())
        self._tier, self._scorers, self._then = plugins.tier, plugins.weighted, plugins.then
        only = self._scorers[0] if len(self._scorers) == 1 else None
        self._single = only[0] if only is not None and only[1] == 1 else None
        self._spread = ReplicaSpread() if profile.memory_aware else None
        chooser = next((s for s, _ in self._scorers if isinstance(s, GpuScore)), None)
        self._choose_gpu = chooser.choose_gpu if chooser is not None else None
        self.tags = TagIndex(cluster) if profile.needs_tags else None
        self.index = ClassIndex(cluster, self.tags) if indexed else None
        self._listener: Callable[[NodeState], None] | None
        if self.index is not None:
            self._listener = self.index.on_change
        elif self.tags is not None:
            self._listener = self.tags.on_change
        else:
            self._listener = None
        if self._listener is not None:
            cluster.listeners.append(self._listener)

    def close(self) -> None:
        """Stop following the cluster (a placer that is dropped while its cluster lives on)."""
        if self._listener is not None and self._listener in self.cluster.listeners:
            self.cluster.listeners.remove(self._listener)
        self._listener = None

    def refresh(self, nodes: Iterable[str] | None = None) -> None:
        """Re-read nodes changed in place (ready, unschedulable, labels, taints, GPU health)."""
        if self.index is not None:
            self.index.refresh(nodes)  # re-keying a node refreshes its tags too
        elif self.tags is not None:
            for name in nodes if nodes is not None else list(self.cluster.nodes):
                if name in self.cluster.nodes:
                    self.tags.refresh(self.cluster.nodes[name])

    # ---- plugins -------------------------------------------------------------------------------------------
    def static_reason(self, need: PodNeed, node: NodeState) -> str | None:
        for f in self._static:
            r = f.check(need, node)
            if r is not None:
                return r
        return None

    def evaluate(self, need: PodNeed, node: NodeState) -> Result:
        """Dynamic filters, then the score key (tier, weighted sum, tie-breakers...); a str is the reason."""
        for f in self._dynamic:
            r = f.check(need, node)
            if r is not None:
                return r
        view = NodeView(node, self.tags)
        tier = self._tier.score(need, view) if self._tier is not None else 0
        if self._single is not None:
            score = self._single.score(need, view)
        else:
            score = sum(w * p.score(need, view) for p, w in self._scorers)
        # The memory-aware profile's spread ranks right after the tier, so packing never overrules it.
        head = (tier,) if self._spread is None else (tier, self._spread.score(need, view))
        if self._then:
            return (*head, score, *(p.score(need, view) for p in self._then))
        return (*head, score)

    def why_not(self, pod: PodRequest, node: str) -> str | None:
        """The first filter the node fails for the pod, or None when it would take it."""
        self._prepare()
        [need] = self._needs([pod])
        ns = self.cluster.nodes[node]
        r = self.static_reason(need, ns)
        if r is not None:
            return r
        res = self.evaluate(need, ns)
        return res if isinstance(res, str) else None

    # ---- one pod -------------------------------------------------------------------------------------------
    def _search(self, need: PodNeed, allowed: Collection[str] | None) -> list[list[NodeState]]:
        if self.index is not None:
            return self.index.search(need, self.evaluate, self.static_reason, allowed)[1]
        best: Best[NodeState] = Best()
        for node in self.cluster:
            if allowed is not None and node.name not in allowed:
                continue
            if self.static_reason(need, node) is not None:
                continue
            res = self.evaluate(need, node)
            if not isinstance(res, str):
                best.offer(res, node)
        return [best.result()[1]]

    def _pick(self, tied: list[list[NodeState]]) -> NodeState | None:
        total = sum(len(t) for t in tied)
        if total == 0:
            return None
        if self.tie_break == "name":
            return min((n for t in tied for n in t), key=lambda n: n.name)
        if total == 1:
            return next(t[0] for t in tied if t)
        r = self.rng.randrange(total)  # uniform over nodes: a class is drawn in proportion to its size
        for t in tied:
            if r < len(t):
                return t[r]
            r -= len(t)
        raise AssertionError("unreachable")

    def place_one(self, need: PodNeed, allowed: Collection[str] | None) -> Placement | None:
        node = self._pick(self._search(need, allowed))
        if node is None:
            return None
        grants = assign_devices(need, NodeView(node, self.tags), self.profile.whole_gpus, self.profile.fractions,
                                self._choose_gpu, memory_aware=self.profile.memory_aware)
        return self.cluster.allocate(need.key, node.name, need.charge, grants)

    def place_all(self, needs: Sequence[PodNeed], allowed: Collection[str] | None) -> list[Placement] | None:
        if len(needs) == 1:
            one = self.place_one(needs[0], allowed)
            return None if one is None else [one]
        placed: dict[int, Placement] = {}
        for i in sorted(range(len(needs)), key=lambda i: _size(needs[i]), reverse=True):
            p = self.place_one(needs[i], allowed)
            if p is None:
                return None
            placed[i] = p
        return [placed[i] for i in range(len(needs))]

    def capacity(self, need: PodNeed, node: NodeState) -> int:
        if need.per_node:
            # Its static answer depends on which node this is (an identity label, GPUs an OOM ruled out): never
            # the answer of its class's representative.
            return self._capacity(need, node)
        if self.index is not None:
            return int(self.index.cached(need, node, "capacity", self._capacity))
        return self._capacity(need, node)

    def _capacity(self, need: PodNeed, node: NodeState) -> int:
        return 0 if self.static_reason(need, node) is not None else fit_count(need, node)

    def tier(self, need: PodNeed, node: NodeState) -> int:
        return self._tier.score(need, NodeView(node, self.tags)) if self._tier is not None else 0

    # ---- Placer protocol -----------------------------------------------------------------------------------
    def _place_needs(self, needs: Sequence[PodNeed], topology: TopologyRequest | None) -> list[Placement] | None:
        if not needs:
            return []
        if topology is None:
            return self.place_all(needs, None)
        levels = self.levels.get(topology.topology, ())
        if topology.level not in levels:
            levels = (topology.level,)
        depth = levels.index(topology.level)
        order = sorted(range(len(needs)), key=lambda i: _size(needs[i]), reverse=True)
        ordered = [needs[i] for i in order]
        scope = list(self.cluster)
        if topology.required:
            placed = place_required(self, ordered, levels, depth, scope)
        else:
            placed = place_preferred(self, ordered, levels, depth, scope, spill=None)
        if placed is None:
            return None
        by_index = dict(zip(order, placed, strict=True))
        return [by_index[i] for i in range(len(needs))]

    def _prepare(self) -> None:
        if len(self._intern) > _SHAPE_LIMIT:
            self._intern = Interner()
            if self.index is not None:
                self.index.clear_caches()
        if self.index is not None:
            self.index.sync()

    def _needs(self, pods: Sequence[PodRequest]) -> list[PodNeed]:
        if not self.profile.memory_aware:
            # Only a memory-aware profile has the filters that read what the policy knows of GPU memory (the GPUs an
            # OOM ruled out, the memory a pod is expected to use); any other places as if nothing were known.
            pods = [p if not (p.memory_hint or p.avoid_gpus) else replace(p, memory_hint=0, avoid_gpus=frozenset())
                    for p in pods]
        return [compile_need(p, self._intern) for p in pods]

    def place(self, pods: Sequence[PodRequest], topology: TopologyRequest | None = None) -> list[Placement] | None:
        if any(p.template.dra is not None for p in pods):
            return over_choices(pods, lambda variant: self._place(variant, topology))
        return self._place(pods, topology)

    def _place(self, pods: Sequence[PodRequest], topology: TopologyRequest | None) -> list[Placement] | None:
        self._prepare()
        needs = self._needs(pods)
        mark = self.cluster.checkpoint()
        try:
            placed = self._place_needs(needs, topology)
        except BaseException:
            self.cluster.rollback(mark)
            raise
        if placed is None:
            self.cluster.rollback(mark)
            return None
        self.cluster.commit(mark)
        return placed

    def _fits(self, needs: Sequence[PodNeed], topology: TopologyRequest | None) -> bool:
        mark = self.cluster.checkpoint()
        try:
            return self._place_needs(needs, topology) is not None
        finally:
            self.cluster.rollback(mark)

    def find_victims(self, pods: Sequence[PodRequest], candidates: Sequence[str],
                     topology: TopologyRequest | None = None) -> list[str] | None:
        """The smallest victims (gpufleet.scheduling.placement.victims, the one search every placer uses); pods
        with DRA claims: for the first of their choices some victims make room for."""
        if any(p.template.dra is not None for p in pods):
            return over_choices(pods, lambda variant: self._find_victims(variant, candidates, topology))
        return self._find_victims(pods, candidates, topology)

    def _find_victims(self, pods: Sequence[PodRequest], candidates: Sequence[str],
                      topology: TopologyRequest | None) -> list[str] | None:
        self._prepare()
        needs = self._needs(pods)
        return smallest_victims(self.cluster, candidates, lambda: self._fits(needs, topology))

    def explain(self, pod: PodRequest) -> str:
        if pod.template.dra is not None:
            problem = dra_problem([pod])
            if problem is not None:
                return problem
            pod = (with_choice([pod], 0) or [pod])[0]
        self._prepare()
        [need] = self._needs([pod])
        if self.index is not None:
            reasons, feasible = self.index.reasons(need, self.evaluate, self.static_reason)
        else:
            reasons = {}
            feasible = 0
            for node in self.cluster:
                r = self.static_reason(need, node)
                if r is None:
                    res = self.evaluate(need, node)
                    r = res if isinstance(res, str) else None
                if r is None:
                    feasible += 1
                else:
                    reasons[r] = reasons.get(r, 0) + 1
        return format_reasons(len(self.cluster.nodes), feasible, reasons)


def make_placer(cluster: ClusterState, profile: Profile | str, rng: random.Random,
                topologies: Iterable[Topology] = (), *, indexed: bool = True, tie_break: TieBreak = "random",
                fragmentation: FragmentationModel | None = None) -> GpuPlacer:
    """A placer following ``cluster`` (see GpuPlacer); ``profile`` is a Profile or a profile name."""
    prof = make_profile(profile) if isinstance(profile, str) else profile
    made = GpuPlacer(cluster, prof, rng, topologies, indexed=indexed, tie_break=tie_break,
                     fragmentation=fragmentation)
    _: Placer = made  # mypy proves here that GpuPlacer satisfies the Placer protocol
    return made
