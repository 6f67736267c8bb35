"""When the informer first showed each of our pods waiting for a node: the start of the pod scheduling SLI.

kube-scheduler's ``scheduler_pod_scheduling_sli_duration_seconds`` runs from the moment a pod enters its
scheduling queue (its informer event) to the end of its binding. This keeps, per pod of ours that holds no node,
the monotonic time of the informer event that first showed it so, and the binder observes two figures from it
(:class:`gpufleet.scheduler_metrics.SchedulerMetrics`): when the Binding is *sent* (the scheduler's own part,
what issue 27's latency goal counts) and when the API server *accepted* it (the SLI as kube-scheduler's).

Each figure is taken once per pod: a Binding sent again (a retry, a pod planned anew after a refused Binding) is
not observed again, and the accepted figure takes the pod out of the table. A pod also leaves it when it is
deleted, or when the cache shows it on a node before any Binding of ours was sent for it (bound by someone
else); once ours was sent, the pod stays until the binder takes the accepted figure, for the watch event of a
Binding can arrive before its answer (or until the pod is deleted, when that answer was lost). A pod replaced by
one of the same name (another uid) starts afresh.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpufleet.k8s.informer import CacheChange, ObjectCache
from gpufleet.k8s.resources import PODS


class PendingSince:
    """A cache listener (informer thread) and a lookup the binding workers call (their threads)."""

    def __init__(self, cache: ObjectCache, scheduler_name: str, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._scheduler = scheduler_name
        self._clock = clock
        self._lock = threading.Lock()
        self._since: dict[str, _Waiting] = {}  # pod key -> when it was first seen waiting
        self._unlisten = cache.add_listener(self._changed)

    def close(self) -> None:
        self._unlisten()

    def __len__(self) -> int:
        with self._lock:
            return len(self._since)

    def sent(self, key: str, uid: str | None) -> float | None:
        """Seconds from the informer's event to this pod's first Binding being sent; None when it was not seen
        waiting (seen bound first, another uid) or its first Binding was already counted."""
        with self._lock:
            entry = self._entry(key, uid)
            if entry is None or entry.sent:
                return None
            entry.sent = True
        return max(0.0, self._clock() - entry.since)

    def bound(self, key: str, uid: str | None) -> float | None:
        """Seconds from the informer's event to this pod's Binding accepted (once: the pod leaves the table)."""
        with self._lock:
            entry = self._entry(key, uid)
            if entry is None:
                return None
            del self._since[key]
        return max(0.0, self._clock() - entry.since)

    def forget(self, key: str) -> None:
        """The pod's Binding ended without its figure: bound elsewhere, gone, or an outcome never known."""
        with self._lock:
            self._since.pop(key, None)

    def _entry(self, key: str, uid: str | None) -> _Waiting | None:
        entry = self._since.get(key)
        if entry is None or (uid is not None and entry.uid is not None and entry.uid != uid):
            return None
        return entry

    def _changed(self, change: CacheChange) -> None:
        if change.resource != PODS.key:
            return
        pod = change.new
        if change.type == "DELETED" or pod is None:
            with self._lock:
                self._since.pop(change.key, None)
            return
        spec = pod.get("spec") or {}
        meta = pod.get("metadata") or {}
        waiting = (not spec.get("nodeName") and spec.get("schedulerName") == self._scheduler
                   and not meta.get("deletionTimestamp")
                   and (pod.get("status") or {}).get("phase", "Pending") == "Pending")
        uid = meta.get("uid")
        with self._lock:
            if not waiting:
                entry = self._since.get(change.key)
                # Our own Binding's watch event can come before its answer: the binder takes that figure still.
                if entry is not None and not (entry.sent and spec.get("nodeName") and entry.uid == uid):
                    del self._since[change.key]
                return
            entry = self._since.get(change.key)
            if entry is None or entry.uid != uid:
                self._since[change.key] = _Waiting(uid, self._clock())


@dataclass(slots=True)
class _Waiting:
    uid: str | None
    since: float  # monotonic time of the informer event that first showed the pod waiting
    sent: bool = False  # its first Binding was counted
