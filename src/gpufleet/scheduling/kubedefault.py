"""``kube-default``: what the guide calls "Kubernetes standard", the baseline a team starts from.

kube-scheduler with its default plugins, seen from GPUs:

* pods one at a time, in the order they were queued (every pod of the same priority; no PriorityClasses
  in the case study, so no preemption either), each placed alone: no queues, no gangs; a pod that fits
  nowhere stays pending without holding back the pods behind it;
* GPUs are integer counts of extended resources; the GPU model matters only when a nodeSelector or
  node affinity names it (the placement engine's ``kube-default`` profile: NodeResourcesFit LeastAllocated
  on cpu and memory with NodeResourcesBalancedAllocation, lowest free GPU index);
* a namespace ResourceQuota on requested resources, when given, keeps a pod pending while its namespace is
  at the limit (the real quota refuses the pod's creation and the Job controller retries it).

Unschedulable pods are retried when something is released (a pod finishes or is evicted), as the
scheduler's queueing hints do. A cycle with nothing released only tries pods queued since the last cycle,
and within a cycle a pod is skipped once an identical pod (same requests and constraints) failed: capacity
only shrinks while a cycle places pods, so neither shortcut changes a decision.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpufleet.api.objects import PodTemplate, Topology
from gpufleet.cluster.state import ClusterState
from gpufleet.cluster.workloads import Workload
from gpufleet.scheduling.placement import make_placer, make_profile
from gpufleet.scheduling.types import AdmittedWorkload, Decisions, Placer, PodAssignment, PodRequest

NAME = "kube-default"


def _shape(t: PodTemplate) -> tuple[object, ...]:
    return (tuple(sorted(t.requests.items())), tuple(sorted(t.node_selector.items())), t.required_affinity,
            t.tolerations, t.gpu)


@dataclass(slots=True)
class _Pod:
    key: str
    workload: str
    namespace: str
    template: PodTemplate
    order: tuple[float, int, int]  # (queued at, workload input order, index in the workload)
    shape: tuple[object, ...]


class KubeDefaultPolicy:
    """Implements :class:`gpufleet.scheduling.types.Policy` as kube-scheduler would schedule the pods."""

    def __init__(self, cluster: ClusterState, placer: Placer,
                 quotas: Mapping[str, Mapping[str, int]] | None = None) -> None:
        self.name = NAME
        self.cluster: ClusterState | None = cluster
        self.placer = placer
        self.quotas = {ns: dict(q) for ns, q in (quotas or {}).items()}
        self._used: dict[str, dict[str, int]] = {}
        self._pending: dict[str, _Pod] = {}
        self._waiting: dict[str, set[str]] = {}  # workload -> its pending pods
        self._new: list[str] = []
        self._placed: dict[str, list[_Pod]] = {}  # workload -> its running pods
        self._dirty = False

    @classmethod
    def for_cluster(cls, cluster: ClusterState, *, seed: int = 0, topologies: Iterable[Topology] = (),
                    quotas: Mapping[str, Mapping[str, int]] | None = None) -> KubeDefaultPolicy:
        placer = make_placer(cluster, make_profile(NAME), random.Random(seed), topologies)
        return cls(cluster, placer, quotas)

    # ---- Policy --------------------------------------------------------------------------------------------
    def submit(self, workload: Workload, now: float) -> None:
        for i, pod in enumerate(workload.pods):
            if pod.key in self._pending:
                continue
            self._pending[pod.key] = _Pod(pod.key, workload.key, workload.namespace, pod.template,
                                          (now, workload.order, i), _shape(pod.template))
            self._waiting.setdefault(workload.key, set()).add(pod.key)
            self._new.append(pod.key)

    def finish(self, workload: str, now: float) -> None:
        self._drop(workload)

    def evicted(self, workload: str, now: float, *, requeue: bool = True, reason: str = "Preempted") -> None:
        pods = self._drop(workload)
        if requeue:
            for i, p in enumerate(pods):
                self._pending[p.key] = _Pod(p.key, p.workload, p.namespace, p.template, (now, p.order[1], i),
                                            p.shape)
                self._waiting.setdefault(workload, set()).add(p.key)
                self._new.append(p.key)

    def cycle(self, now: float) -> Decisions:
        decisions = Decisions()
        if self._dirty:
            candidates = sorted(self._pending.values(), key=lambda p: p.order)
        else:
            candidates = sorted((self._pending[k] for k in self._new if k in self._pending), key=lambda p: p.order)
        self._dirty = False
        self._new = []
        failed: set[tuple[object, ...]] = set()
        admitted: dict[str, AdmittedWorkload] = {}
        for pod in candidates:
            if pod.shape in failed or not self._quota_allows(pod):
                continue
            placed = self.placer.place([PodRequest(pod.key, pod.template)])
            if placed is None:
                failed.add(pod.shape)
                continue
            p = placed[0]
            del self._pending[pod.key]
            self._waiting[pod.workload].discard(pod.key)
            self._placed.setdefault(pod.workload, []).append(pod)
            self._charge(pod, 1)
            entry = admitted.get(pod.workload)
            if entry is None:
                entry = admitted[pod.workload] = AdmittedWorkload(pod.workload, None)
                decisions.admitted.append(entry)
            entry.pods.append(PodAssignment(pod.key, p.node, p.device_ids))
        return decisions

    def pending_count(self) -> int:
        return len(self._pending)

    def next_wakeup(self, now: float) -> float | None:
        return None

    # ---- helpers -------------------------------------------------------------------------------------------
    def _drop(self, workload: str) -> list[_Pod]:
        """Release the workload's running pods and forget its pending ones; its pods (running first)."""
        assert self.cluster is not None
        running = self._placed.pop(workload, [])
        for pod in running:
            self.cluster.release(pod.key)
            self._charge(pod, -1)
        waiting = [self._pending.pop(k) for k in self._waiting.pop(workload, ())]
        if running:
            self._dirty = True
        return sorted(running + waiting, key=lambda p: p.order[2])

    def _quota_allows(self, pod: _Pod) -> bool:
        limits = self.quotas.get(pod.namespace)
        if not limits:
            return True
        used = self._used.get(pod.namespace, {})
        return all(used.get(r, 0) + pod.template.requests.get(r, 0) <= limit for r, limit in limits.items())

    def _charge(self, pod: _Pod, sign: int) -> None:
        if pod.namespace not in self.quotas:
            return
        used = self._used.setdefault(pod.namespace, {})
        for r, amount in pod.template.requests.items():
            used[r] = used.get(r, 0) + sign * amount
