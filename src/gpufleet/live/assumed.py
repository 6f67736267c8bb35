"""Pods bound (or being bound) whose Binding the informer cache has not shown yet.

kube-scheduler's "assumed pods": between our POST and the watch event that carries ``spec.nodeName``
back, the cache still shows the pod pending. A cycle run in that window would see the pod's devices as
free and could hand them to another pod, or plan the pod again. So every pod handed to the binder is
assumed at its node and devices until the cache shows it bound (or gone), its bind definitively fails, or a
timeout passes (a bind that vanished without an answer: the timeout then runs from the last attempt). Cycles
run while earlier Bindings are still in flight (gpufleet.live.bindqueue), and this is what keeps them from
handing the same GPUs out twice.

This is the only scheduling state the process keeps between cycles, and it is safe to lose: a restarted
scheduler relists, and the API server then shows every bind that happened.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from gpufleet.k8s.annotations import Intent


@dataclass(frozen=True, slots=True)
class Assumption:
    uid: str | None
    intent: Intent
    expires: float


class AssumedPods:
    def __init__(self, ttl: float = 30.0) -> None:
        self.ttl = ttl
        self._lock = threading.Lock()
        self._pods: dict[str, Assumption] = {}

    def assume(self, pod: str, uid: str | None, intent: Intent, now: float) -> None:
        with self._lock:
            self._pods[pod] = Assumption(uid, intent, now + self.ttl)

    def renew(self, pod: str, now: float) -> None:
        """Keep ``pod`` assumed for another ``ttl`` from ``now``: its Binding got no answer and may still land."""
        with self._lock:
            found = self._pods.get(pod)
            if found is not None:
                self._pods[pod] = Assumption(found.uid, found.intent, now + self.ttl)

    def forget(self, pod: str) -> None:
        with self._lock:
            self._pods.pop(pod, None)

    def get(self, pod: str, uid: str | None, now: float) -> Intent | None:
        """The assumed placement of ``pod`` if it is still assumed (same UID: a recreated pod is new)."""
        with self._lock:
            found = self._pods.get(pod)
            if found is None:
                return None
            if found.expires <= now or (uid is not None and found.uid is not None and uid != found.uid):
                del self._pods[pod]
                return None
            return found.intent

    def confirm(self, pod: str) -> None:
        """The cache shows the pod bound or deleted: the assumption has done its job."""
        self.forget(pod)

    def copy(self) -> AssumedPods:
        """An independent copy, for trial cycles that must not change the real assumptions."""
        other = AssumedPods(self.ttl)
        with self._lock:
            other._pods = dict(self._pods)
        return other

    def keys(self) -> set[str]:
        with self._lock:
            return set(self._pods)

    def next_expiry(self) -> float | None:
        """When the earliest assumption lapses (its capacity is then free again), or None with none held."""
        with self._lock:
            return min((a.expires for a in self._pods.values()), default=None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._pods)
