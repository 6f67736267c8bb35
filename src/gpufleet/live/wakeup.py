"""When the next scheduling cycle is worth running.

A cycle rebuilds its whole input, so one run for nothing costs as much as one that schedules. The loop
therefore waits for *work*, counted here:

* every change in the informer cache, except two kinds that decide nothing new, which cycles run for them
  alone would spend the CPU on that hundreds of Bindings landing each second need:

  - one of our own Bindings landing: a pod assumed on a node (gpufleet.live.assumed) now shown bound to
    that very node. The cycle that bound it already counted it there;
  - a ClusterQueue's or LocalQueue's status alone changing (ours, written by the cycles; or Kueue's): no
    decision reads a queue's status; nor the status of a workload kind's object (a Job's, a Deployment's: their
    controllers rewrite it as their pods come and go, and the pods' own changes wake the cycle);
  - the status of a pod that holds no node changing but for its phase and the DRA claims it names: our own
    ``PodScheduled=False`` conditions on the pods that wait (a backlog of thousands writes as many), which no
    decision reads;
  - an object of a workload kind whose pod templates name another scheduler, before and after the change
    (every Deployment and ReplicaSet of the cluster is watched; their rollouts and scaling decide nothing here);
* a Binding that failed (:meth:`Wakeup.poke`): the capacity assumed for it is free again;
* a cycle whose round stopped at its time budget or cycle limit with more to admit (:meth:`Wakeup.poke`).

Timers (backoffs, timeouts, assumptions and shields lapsing) wake a cycle when they fall due
(``CycleReport.next_due``); with neither work nor a timer, the loop waits for the cycle period (a resync).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from gpufleet.k8s.informer import CacheChange, ObjectCache
from gpufleet.k8s.parsing import concerns
from gpufleet.k8s.resources import PODS, WORKLOAD_RESOURCES
from gpufleet.live.assumed import AssumedPods


class Wakeup:
    def __init__(self, cache: ObjectCache, assumed: AssumedPods, *, clock: Callable[[], float] = time.time,
                 scheduler_name: str | None = None) -> None:
        self._assumed = assumed
        self._scheduler_name = scheduler_name  # None: every workload-kind object's change is work
        self._clock = clock
        self._cond = threading.Condition()
        self._version = 0
        self.skipped = 0  # changes that were our own Bindings landing
        self._unlisten = cache.add_listener(self._changed)

    @property
    def version(self) -> int:
        with self._cond:
            return self._version

    def poke(self) -> None:
        with self._cond:
            self._version += 1
            self._cond.notify_all()

    def wait(self, since: int, timeout: float) -> int:
        """Until there is work after ``since`` (then the new version) or ``timeout`` passes."""
        with self._cond:
            self._cond.wait_for(lambda: self._version > since, timeout)
            return self._version

    def close(self) -> None:
        self._unlisten()

    def _changed(self, change: CacheChange) -> None:
        if (self._own_bind_landed(change) or unread_status_only(change) or _waiting_pod_status(change)
                or self._anothers_object(change)):
            self.skipped += 1
            return
        self.poke()

    def _anothers_object(self, change: CacheChange) -> bool:
        res = _WORKLOAD_TYPES.get(change.resource)
        if res is None or self._scheduler_name is None:
            return False
        return not any(o is not None and concerns(res, o, self._scheduler_name) for o in (change.old, change.new))

    def _own_bind_landed(self, change: CacheChange) -> bool:
        if change.resource != PODS.key or change.type != "MODIFIED" or change.old is None or change.new is None:
            return False
        if (change.old.get("spec") or {}).get("nodeName"):
            return False
        node = (change.new.get("spec") or {}).get("nodeName")
        if not node:
            return False
        intent = self._assumed.get(change.key, (change.new.get("metadata") or {}).get("uid"), self._clock())
        return intent is not None and intent.node == node


# Kinds whose status no decision reads (Kueue's AdmissionCheck is not among them: beside Kueue its status is ours).
_WORKLOAD_TYPES = {res.key: res for res in WORKLOAD_RESOURCES}
_STATUS_UNREAD = frozenset({"ClusterQueue", "LocalQueue", *(
    res.kind for res in WORKLOAD_RESOURCES if res.kind != "AdmissionCheck")})
_VOLATILE_META = ("resourceVersion", "managedFields", "generation")


def unread_status_only(change: CacheChange) -> bool:
    old, new = change.old, change.new
    if change.type != "MODIFIED" or old is None or new is None or new.get("kind") not in _STATUS_UNREAD:
        return False
    return without_status(old) == without_status(new)


def _waiting_pod_status(change: CacheChange) -> bool:
    """A pod that holds no node, before and after, whose change is in its status alone, its phase and the DRA claims
    it names kept (the resourceclaim controller naming the claim it made for the pod is what the pod waited for)."""
    old, new = change.old, change.new
    if change.resource != PODS.key or change.type != "MODIFIED" or old is None or new is None:
        return False
    if (old.get("spec") or {}).get("nodeName") or (new.get("spec") or {}).get("nodeName"):
        return False
    before, after = old.get("status") or {}, new.get("status") or {}
    if before.get("phase") != after.get("phase") or any(before.get(f) != after.get(f) for f in _READ_STATUS):
        return False
    return without_status(old) == without_status(new)


# What a pod's status says that scheduling reads: the claims made for it (its ResourceClaimTemplates' claims), and
# the claim kube-scheduler made for its extended resources backed by DRA (KEP-5004).
_READ_STATUS = ("resourceClaimStatuses", "extendedResourceClaimStatus")


def without_status(obj: dict[str, Any], ignored: tuple[str, ...] = ()) -> dict[str, Any]:
    """``obj`` without its status and the metadata that changes with every write (and ``ignored``)."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _VOLATILE_META and k not in ignored}
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": meta}

