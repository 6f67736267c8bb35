"""A plain first-fit :class:`~gpufleet.scheduling.types.Placer`: a reference for tests of the queueing core's
gang logic, independent of the placement engine's scoring.

Nodes are tried in name order; whether a node fits a pod is the placement filters' one node-fit check
(:func:`~gpufleet.scheduling.placement.filters.unfit_reason`), and the pod gets the node's first free devices
(:func:`~gpufleet.cluster.free_devices.first_free_grants`), which that check guarantees are there. No scoring.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from gpufleet.cluster.free_devices import first_free_grants
from gpufleet.cluster.state import ClusterState, NodeState, Placement
from gpufleet.scheduling.placement.dra import dra_problem, first_dra_grants, over_choices, with_choice
from gpufleet.scheduling.placement.filters import pod_unfit_reason
from gpufleet.scheduling.placement.need import compile_need, with_claimed_devices
from gpufleet.scheduling.placement.victims import smallest_victims
from gpufleet.scheduling.types import PodRequest, TopologyRequest


class FirstFitPlacer:
    def __init__(self, cluster: ClusterState) -> None:
        self.cluster = cluster

    # ---- feasibility -------------------------------------------------------------------------------------------
    def _why_not(self, pod: PodRequest, node: NodeState) -> str | None:
        return pod_unfit_reason(pod, node)

    def _place_one(self, pod: PodRequest, nodes: Sequence[NodeState]) -> Placement | None:
        for node in nodes:
            if self._why_not(pod, node) is None:
                grants = (first_dra_grants(compile_need(pod), node) if pod.dra_groups
                          else first_free_grants(node, pod.template.gpu))
                assert grants is not None, "the fit check passed, so the devices are there"
                return self.cluster.allocate(pod.key, node.name,
                                             with_claimed_devices(pod.template, pod.template.requests), grants)
        return None

    def _place_all(self, pods: Sequence[PodRequest], nodes: Sequence[NodeState]) -> list[Placement] | None:
        mark = self.cluster.checkpoint()
        out: list[Placement] = []
        for pod in pods:
            p = self._place_one(pod, nodes)
            if p is None:
                self.cluster.rollback(mark)
                return None
            out.append(p)
        self.cluster.commit(mark)
        return out

    # ---- Placer ------------------------------------------------------------------------------------------------
    def place(self, pods: Sequence[PodRequest], topology: TopologyRequest | None = None) -> list[Placement] | None:
        if any(p.template.dra is not None for p in pods):
            return over_choices(pods, lambda variant: self._place_in(variant, topology))
        return self._place_in(pods, topology)

    def _place_in(self, pods: Sequence[PodRequest], topology: TopologyRequest | None) -> list[Placement] | None:
        nodes = sorted(self.cluster.nodes.values(), key=lambda n: n.name)
        if topology is not None:
            domains: dict[str, list[NodeState]] = {}
            for n in nodes:
                value = n.labels.get(topology.level)
                if value is not None:
                    domains.setdefault(value, []).append(n)
            for value in sorted(domains):
                got = self._place_all(pods, domains[value])
                if got is not None:
                    return got
            if topology.required:
                return None
        return self._place_all(pods, nodes)

    def explain(self, pod: PodRequest) -> str:
        if pod.template.dra is not None:
            problem = dra_problem([pod])
            if problem is not None:
                return problem
            pod = (with_choice([pod], 0) or [pod])[0]
        nodes = list(self.cluster.nodes.values())
        reasons = Counter(r for n in nodes if (r := self._why_not(pod, n)) is not None)
        free = len(nodes) - sum(reasons.values())
        if free:
            return f"{free}/{len(nodes)} nodes are available for one such pod"
        detail = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items()))
        return f"0/{len(nodes)} nodes are available: {detail}."

    def find_victims(self, pods: Sequence[PodRequest], candidates: Sequence[str],
                     topology: TopologyRequest | None = None) -> list[str] | None:
        return smallest_victims(self.cluster, candidates, lambda: self._fits(pods, topology))

    def _fits(self, pods: Sequence[PodRequest], topology: TopologyRequest | None) -> bool:
        mark = self.cluster.checkpoint()
        try:
            return self.place(pods, topology) is not None
        finally:
            self.cluster.rollback(mark)
