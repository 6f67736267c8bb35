"""A plain first-fit :class:`~gpufleet.scheduling.types.Placer`, used only when the placement engine
(``gpufleet.scheduling.placement``) is not installed, so that gangs can still be placed on nodes.

Nodes are tried in name order; a node fits a pod when it is ready and schedulable, carries the flavor's node
labels, matches the pod's nodeSelector and required affinity, has no untolerated NoSchedule/NoExecute taint,
has the requested resources free, and can grant the pod's GPU devices (whole GPUs, time-slice replicas, MIG
instances or a fraction of a GPU). No scoring: the engine does that.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from gpufleet.api.kinds import FRACTION_RESOURCE
from gpufleet.api.objects import GpuDemand
from gpufleet.cluster.devices import DeviceGrant
from gpufleet.cluster.state import ClusterState, NodeState, Placement, first_free_grants
from gpufleet.scheduling.types import PodRequest, TopologyRequest


def _grants(node: NodeState, demand: GpuDemand) -> list[DeviceGrant] | None:
    """The devices of ``node`` that would hold ``demand``, or None."""
    if demand.kind != "none" and demand.models and node.gpu_model not in demand.models:
        return None
    return first_free_grants(node, demand)


class FirstFitPlacer:
    def __init__(self, cluster: ClusterState) -> None:
        self.cluster = cluster

    # ---- feasibility -------------------------------------------------------------------------------------------
    def _why_not(self, pod: PodRequest, node: NodeState) -> str | None:
        t = pod.template
        labels = node.labels
        if not node.ready or node.unschedulable:
            return "node(s) were unschedulable or not ready"
        if any(labels.get(k) != v for k, v in pod.node_labels) or any(
                labels.get(k) != v for k, v in t.node_selector.items()):
            return "node(s) didn't match Pod's node affinity/selector"
        if t.required_affinity and not any(term.matches(labels) for term in t.required_affinity):
            return "node(s) didn't match Pod's node affinity/selector"
        tolerations = (*t.tolerations, *pod.extra_tolerations)
        for taint in node.taints:
            if taint.effect != "PreferNoSchedule" and not any(x.tolerates(taint) for x in tolerations):
                return "node(s) had untolerated taint"
        for r, v in t.requests.items():
            if r != FRACTION_RESOURCE and v > 0 and node.free(r) < v:
                return f"Insufficient {r}"
        if node.used.get("pods", 0) + 1 > node.allocatable.get("pods", 110):
            return "Too many pods"
        if _grants(node, t.gpu) is None:
            return "node(s) had no free GPU device for the request"
        return None

    def _place_one(self, pod: PodRequest, nodes: Sequence[NodeState]) -> Placement | None:
        for node in nodes:
            if self._why_not(pod, node) is None:
                grants = _grants(node, pod.template.gpu)
                assert grants is not None
                return self.cluster.allocate(pod.key, node.name, pod.template.requests, grants)
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
        nodes = list(self.cluster.nodes.values())
        reasons = Counter(r for n in nodes if (r := self._why_not(pod, n)) is not None)
        free = len(nodes) - sum(reasons.values())
        if free:
            return f"{free}/{len(nodes)} nodes are available for one such pod"
        detail = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items()))
        return f"0/{len(nodes)} nodes are available: {detail}."

    def find_victims(self, pods: Sequence[PodRequest], candidates: Sequence[str],
                     topology: TopologyRequest | None = None) -> list[str] | None:
        cluster = self.cluster
        mark = cluster.checkpoint()
        try:
            removed: list[Placement] = []
            for pod in candidates:
                if pod not in cluster.placements:
                    continue
                removed.append(cluster.release(pod))
                if self._fits(pods, topology):
                    break
            else:
                return None
            victims = list(removed)
            # Give back, newest removal first (the last one excluded), every pod not needed.
            for p in reversed(removed[:-1]):
                cluster.allocate(p.pod, p.node, p.requests, p.grants)
                if self._fits(pods, topology):
                    victims.remove(p)
                else:
                    cluster.release(p.pod)
            return [p.pod for p in victims]
        finally:
            cluster.rollback(mark)

    def _fits(self, pods: Sequence[PodRequest], topology: TopologyRequest | None) -> bool:
        mark = self.cluster.checkpoint()
        try:
            return self.place(pods, topology) is not None
        finally:
            self.cluster.rollback(mark)
