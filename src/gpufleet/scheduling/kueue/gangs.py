"""All-or-nothing placement of an admitted workload's pods through a :class:`Placer`.

Each pod carries what its admission adds: the node labels, taints and tolerations of the flavors assigned
to its pod set. Pod sets with the same topology request (Kueue TAS annotations, resolved against the
flavor's ``topologyName``) are placed in one call; several calls are wrapped in one ClusterState checkpoint
so that a gang is either placed entirely or not at all.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import replace

from gpufleet.api.objects import HOSTNAME_LABEL, ResourceFlavor, Taint, Toleration
from gpufleet.cluster.devices import InvariantError
from gpufleet.cluster.recorded import recorded_grants
from gpufleet.cluster.state import ClusterState, Placement
from gpufleet.cluster.workloads import WorkloadPod
from gpufleet.scheduling.kueue.info import PodSetRequest, WorkloadInfo
from gpufleet.scheduling.memory import MemoryBook
from gpufleet.scheduling.placement.need import with_claimed_devices
from gpufleet.scheduling.types import Placer, PodRequest, TopologyRequest

_TOLERATE_ALL = (Toleration(operator="Exists"),)

Group = tuple[TopologyRequest | None, list[PodRequest]]


def _flavor_extras(flavors: Sequence[ResourceFlavor]) -> tuple[tuple[tuple[str, str], ...], tuple[Taint, ...],
                                                                tuple[Toleration, ...]]:
    labels: dict[str, str] = {}
    taints: list[Taint] = []
    tolerations: list[Toleration] = []
    for f in flavors:
        labels.update(f.node_labels)
        taints.extend(t for t in f.node_taints if t not in taints)
        tolerations.extend(t for t in f.tolerations if t not in tolerations)
    return tuple(sorted(labels.items())), tuple(taints), tuple(tolerations)


_FINISHED = ("Succeeded", "Failed")


class GangPlacer:
    def __init__(self, placer: Placer, flavors: Mapping[str, ResourceFlavor], memory: MemoryBook | None = None) -> None:
        self.placer = placer
        self.flavors = flavors
        self.memory = memory  # what is known of pods' GPU memory (hints, GPUs to avoid); None: nothing

    @property
    def cluster(self) -> ClusterState:
        return self.placer.cluster

    def pods_of(self, info: WorkloadInfo, podset: PodSetRequest, count: int) -> list[WorkloadPod]:
        # A finished pod is placed nowhere: it may fill a place of its set (a Job's, whose next pod comes later and
        # joins the admitted workload), but placed it would hold a node for nothing.
        pods = [p for p in info.workload.pods if p.pod_set == podset.name and p.phase not in _FINISHED]
        return pods[:count]

    def groups(self, info: WorkloadInfo, podset_flavors: Sequence[Mapping[str, str]],
               counts: Sequence[int]) -> list[Group]:
        """Pod requests grouped by topology request, in pod set order."""
        out: list[Group] = []
        for ps in info.podsets:
            names = sorted(set(podset_flavors[ps.index].values())) if ps.index < len(podset_flavors) else []
            flavors = [self.flavors[n] for n in names if n in self.flavors]
            labels, taints, tolerations = _flavor_extras(flavors)
            topology: TopologyRequest | None = None
            if ps.topology is not None:
                topo_name = next((f.topology_name for f in flavors if f.topology_name), None)
                if topo_name is not None:
                    topology = TopologyRequest(topo_name, ps.topology.level, ps.topology.required)
            book = self.memory
            avoid = book.avoid(info.key) if book is not None else frozenset()
            requests = [PodRequest(p.key, p.template, labels, taints, tolerations,
                                   book.hint(info.workload, p.template) if book is not None else 0, avoid)
                        for p in self.pods_of(info, ps, counts[ps.index])]
            for group_topology, members in out:
                if group_topology == topology:
                    members.extend(requests)
                    break
            else:
                out.append((topology, requests))
        return [g for g in out if g[1]]

    def place(self, groups: Sequence[Group]) -> tuple[list[Placement] | None, Group | None]:
        """Place every group or none; on failure, the group that did not fit."""
        cluster = self.cluster
        mark = cluster.checkpoint()
        placed: list[Placement] = []
        for group in groups:
            got = self.placer.place(group[1], group[0])
            if got is None:
                cluster.rollback(mark)
                return None, group
            placed.extend(got)
        cluster.commit(mark)
        return placed, None

    def plan(self, groups: Sequence[Group]) -> tuple[list[Placement] | None, Group | None]:
        """What-if placement: where every group would go now (as :meth:`place` answers), leaving no trace: the
        cluster is rolled back and the placer's random draws are put back, so that asking changes no later
        choice."""
        rng = getattr(self.placer, "rng", None)
        drawn = rng.getstate() if isinstance(rng, random.Random) else None
        cluster = self.cluster
        mark = cluster.checkpoint()
        try:
            return self.place(groups)
        finally:
            cluster.rollback(mark)
            if drawn is not None:
                assert isinstance(rng, random.Random)
                rng.setstate(drawn)

    def fits(self, groups: Sequence[Group]) -> Group | None:
        """What-if placement (:meth:`plan`): the group that cannot be placed now, None when every group can."""
        return self.plan(groups)[1]

    def explain(self, group: Group, total: int) -> str:
        reason = self.placer.explain(group[1][0])
        if total <= 1:
            return reason
        return f"the {total} pods of the gang cannot all be placed at once: {reason}"

    def victims(self, groups: Sequence[Group], candidates: Sequence[WorkloadInfo]) -> list[WorkloadInfo] | None:
        """Workloads (from ``candidates``, in preference order) whose eviction lets every group be placed;
        [] when nothing needs evicting, None when even all candidates are not enough. The cluster is left
        unchanged."""
        cluster = self.cluster
        owner: dict[str, WorkloadInfo] = {}
        for c in candidates:
            for p in (c.admission.pods if c.admission else []):
                if p.pod in cluster.placements:
                    owner[p.pod] = c
        chosen: dict[str, WorkloadInfo] = {}
        mark = cluster.checkpoint()
        try:
            for topology, pods in groups:
                if self.placer.place(pods, topology) is not None:
                    continue
                remaining = [pod for pod, c in owner.items() if c.key not in chosen and pod in cluster.placements]
                found = self.placer.find_victims(pods, remaining, topology)
                if not found:
                    return None
                for pod in found:
                    c = owner[pod]
                    if c.key in chosen:
                        continue
                    chosen[c.key] = c
                    # The whole gang goes, not just the pods the placer needed.
                    for p in (c.admission.pods if c.admission else []):
                        if p.pod in cluster.placements:
                            cluster.release(p.pod)
                if self.placer.place(pods, topology) is None:
                    return None
            return [c for c in candidates if c.key in chosen]
        finally:
            cluster.rollback(mark)

    def bind(self, pod: WorkloadPod, node: str) -> Placement | None:
        """Account for a pod the manifests already bound to ``node``: the devices gpufleet recorded on it
        (gpufleet.io/devices for that node) when they are free there, else devices chosen by the placer
        restricted to that node when it can, else node capacity charged without devices."""
        cluster = self.cluster
        if node not in cluster.nodes or pod.key in cluster.placements:
            return None
        recorded = recorded_grants(cluster.nodes[node], pod.template.gpu, pod.template.annotations)
        if recorded is not None:
            try:
                return cluster.allocate(pod.key, node, with_claimed_devices(pod.template, pod.template.requests),
                                        recorded)
            except InvariantError:
                pass  # another pod's record (or a stale one) holds them: chosen below instead
        pinned = replace(pod.template, node_selector={HOSTNAME_LABEL: node}, required_affinity=(),
                         tolerations=_TOLERATE_ALL)
        got = self.placer.place([PodRequest(pod.key, pinned)], None)
        if got:
            return got[0]
        try:
            return cluster.allocate(pod.key, node, pod.template.requests, ())
        except InvariantError:
            return None
