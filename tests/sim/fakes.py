"""A test double of a scheduling policy: FIFO, first fit, all-or-nothing or pod by pod.

It exists so that the engine's own behaviour (clock, failure models, metrics) can be tested with
hand-computed expectations that do not depend on the real placers' scoring.
"""

from __future__ import annotations

from gpufleet.api.kinds import FRACTION_RESOURCE
from gpufleet.api.objects import PodTemplate
from gpufleet.cluster.devices import DeviceGrant
from gpufleet.cluster.state import ClusterState, NodeState, first_free_grants
from gpufleet.cluster.workloads import Workload
from gpufleet.scheduling.types import AdmittedWorkload, Decisions, PodAssignment, PreemptedWorkload


def _grants(ns: NodeState, t: PodTemplate) -> list[DeviceGrant] | None:
    return first_free_grants(ns, t.gpu)


class FifoPolicy:
    """Admits in arrival order. ``gang``: a workload's pods all at once or none (else pod by pod).
    ``preempt``: a pending workload of higher priority evicts the lowest-priority running one when stuck."""

    def __init__(self, cluster: ClusterState, *, gang: bool = True, preempt: bool = False) -> None:
        self.name = "fifo-gang" if gang else "fifo-pods"
        self.cluster: ClusterState | None = cluster
        self.gang = gang
        self.preempt = preempt
        self.queue: list[Workload] = []
        self.placed: dict[str, list[str]] = {}
        self.workloads: dict[str, Workload] = {}
        self.calls: list[tuple[str, str, float]] = []
        self.ready: list[tuple[str, float]] = []

    def submit(self, workload: Workload, now: float) -> None:
        self.calls.append(("submit", workload.key, now))
        self.workloads[workload.key] = workload
        self.queue.append(workload)

    def _release(self, key: str) -> None:
        assert self.cluster is not None
        for pod in self.placed.pop(key, []):
            self.cluster.release(pod)

    def finish(self, workload: str, now: float) -> None:
        self.calls.append(("finish", workload, now))
        self._release(workload)
        self.queue = [w for w in self.queue if w.key != workload]

    def evicted(self, workload: str, now: float, *, requeue: bool = True, reason: str = "Preempted") -> None:
        self.calls.append(("evicted", workload, now))
        self._release(workload)
        if requeue:
            self.queue.append(self.workloads[workload])

    def pods_ready(self, workload: str, now: float) -> None:
        self.ready.append((workload, now))

    def _place(self, pod: str, t: PodTemplate) -> PodAssignment | None:
        assert self.cluster is not None
        for ns in self.cluster.nodes.values():
            if any(ns.free(r) < a for r, a in t.requests.items() if r != FRACTION_RESOURCE and a > 0):
                continue
            grants = _grants(ns, t)
            if grants is None:
                continue
            p = self.cluster.allocate(pod, ns.name, t.requests, grants)
            return PodAssignment(pod, ns.name, p.device_ids)
        return None

    def cycle(self, now: float) -> Decisions:
        assert self.cluster is not None
        d = Decisions()
        for w in list(self.queue):
            done = set(self.placed.get(w.key, []))
            todo = [p for p in w.pods if p.key not in done]
            mark = self.cluster.checkpoint()
            got: list[PodAssignment] = []
            for p in todo:
                a = self._place(p.key, p.template)
                if a is None:
                    break
                got.append(a)
            if self.gang and len(got) < len(todo):
                self.cluster.rollback(mark)
                if self.preempt and not d.preempted:
                    victims = [k for k, v in self.placed.items() if self.workloads[k].priority < w.priority]
                    if victims:
                        d.preempted.append(PreemptedWorkload(victims[0], w.key, "InClusterQueue"))
                continue
            self.cluster.commit(mark)
            if got:
                self.placed.setdefault(w.key, []).extend(a.pod for a in got)
                d.admitted.append(AdmittedWorkload(w.key, None, pods=got))
            if len(got) == len(todo):
                self.queue.remove(w)
        return d

    def pending_count(self) -> int:
        return len(self.queue)

    def next_wakeup(self, now: float) -> float | None:
        return None

