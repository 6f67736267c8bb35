"""The claims of a deleted pod of ours, released: taken out of ``reservedFor`` and, with no consumer left,
deallocated, so that their devices are free for the next pod.

kube-controller-manager's resourceclaim controller does the same when it sees the pod gone; doing it as soon as
the deletion reaches the scheduler's cache frees the devices without waiting for it, and without it (a cluster
whose controller lags or is down, a test cluster without one). Both write under the claim's resourceVersion and
only take out the deleted pod's own entry (by UID), so either may go first (gpufleet.live.claims.release).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from gpufleet.k8s import resources as r
from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.informer import CacheChange, ObjectCache
from gpufleet.live.claims import pod_claim_names, release_all

log = logging.getLogger(__name__)


class DeletedPodClaims:
    """Listens to the cache for deleted pods of ``scheduler_name`` that use claims, and releases them on a pool of
    its own (a burst of deletions never holds up the cycle's writes) while this replica may write (the leader)."""

    def __init__(self, cache: ObjectCache, client: KubeClient, scheduler_name: str, may_write: Callable[[], bool],
                 workers: int = 2) -> None:
        self.client = client
        self.scheduler_name = scheduler_name
        self.may_write = may_write
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="gpufleet-claims")
        self._unlisten = cache.add_listener(self._changed)

    def close(self) -> None:
        self._unlisten()
        self.pool.shutdown(wait=True)

    def _changed(self, change: CacheChange) -> None:
        # Called under the cache's lock: decide cheaply, write elsewhere.
        if change.resource != r.PODS.key or change.type != "DELETED" or change.old is None:
            return
        pod = change.old
        spec = pod.get("spec") or {}
        meta = pod.get("metadata") or {}
        uid = meta.get("uid")
        if spec.get("schedulerName") != self.scheduler_name or not uid or not spec.get("resourceClaims"):
            return
        names = pod_claim_names(pod)
        if not names or not self.may_write():
            return
        namespace, name = meta.get("namespace") or "default", meta.get("name") or "?"
        self.pool.submit(release_all, self.client, [f"{namespace}/{claim}" for claim in names], str(uid),
                         why=f"deleted pod {namespace}/{name}")
