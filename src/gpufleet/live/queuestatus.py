"""ClusterQueue and LocalQueue status, as Kueue reports it, computed from a cycle's policy and written back.

Per ClusterQueue: ``flavorsReservation``/``flavorsUsage`` (total and borrowed beyond nominal, per flavor and
resource), ``pendingWorkloads``, ``reservingWorkloads``/``admittedWorkloads`` and the ``Active`` condition;
per LocalQueue the same counts, ``flavorUsage`` and ``Active``.

Statuses are written with PUT on the status subresource carrying the cached resourceVersion (the RBAC
grants ``update`` only), and only when they differ from what the cache shows, so a quiet cluster costs no
writes. A 409 means the object moved on: the next cycle, seeing the new version, writes again if needed.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

from gpufleet.k8s import resources as r
from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.errors import Conflict, KubeError, NotFound
from gpufleet.k8s.informer import CacheSnapshot
from gpufleet.k8s.resources import ResourceType
from gpufleet.scheduling.charges import format_quota
from gpufleet.scheduling.kueue import KueuePolicy
from gpufleet.scheduling.kueue.info import State, WorkloadInfo

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]


def _stamp(now: float) -> str:
    return dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(old: Mapping[str, Any] | None, status: bool, reason: str, message: str, now: float) -> JsonDict:
    value = "True" if status else "False"
    old_cond = next((c for c in (old or {}).get("conditions") or [] if c.get("type") == "Active"), None)
    # lastTransitionTime moves only when the status flips, as metav1.Condition requires.
    since = old_cond.get("lastTransitionTime") if old_cond and old_cond.get("status") == value else None
    return {"type": "Active", "status": value, "reason": reason, "message": message,
            "lastTransitionTime": since or _stamp(now)}


class QueueCounts:
    """Pending and admitted workloads and admitted usage, per ClusterQueue and per LocalQueue."""

    def __init__(self, policy: KueuePolicy) -> None:
        self.cq_pending: dict[str, int] = {}
        self.cq_admitted: dict[str, int] = {}
        self.lq_pending: dict[tuple[str, str], int] = {}
        self.lq_admitted: dict[tuple[str, str], int] = {}
        self.lq_usage: dict[tuple[str, str], dict[tuple[str, str], int]] = {}
        for info in policy.state.infos.values():
            self.add(info)

    def add(self, info: WorkloadInfo, sign: int = 1) -> None:
        """Count ``info`` as it stands (``sign`` -1: take it out): a cycle that carries on from the last updates
        its counts with the workloads it submitted and admitted instead of counting every workload again."""
        lq = (info.namespace, info.local_queue) if info.local_queue else None
        if info.state is State.PENDING:
            if info.cluster_queue:
                self.cq_pending[info.cluster_queue] = self.cq_pending.get(info.cluster_queue, 0) + sign
            if lq:
                self.lq_pending[lq] = self.lq_pending.get(lq, 0) + sign
        elif info.state is State.ADMITTED and info.admission is not None:
            cq = info.admission.cluster_queue
            if cq:
                self.cq_admitted[cq] = self.cq_admitted.get(cq, 0) + sign
            if lq:
                self.lq_admitted[lq] = self.lq_admitted.get(lq, 0) + sign
                usage = self.lq_usage.setdefault(lq, {})
                for fr, v in info.admission.usage.items():
                    usage[fr] = usage.get(fr, 0) + sign * v

    def admitted(self, info: WorkloadInfo) -> None:
        """``info``, counted pending before, is now admitted."""
        assert info.state is State.ADMITTED
        if info.cluster_queue:
            self.cq_pending[info.cluster_queue] = self.cq_pending.get(info.cluster_queue, 0) - 1
        if info.local_queue:
            lq = (info.namespace, info.local_queue)
            self.lq_pending[lq] = self.lq_pending.get(lq, 0) - 1
        self.add(info)


def cluster_queue_status(name: str, policy: KueuePolicy, counts: QueueCounts, old: Mapping[str, Any] | None,
                         problem: str | None, now: float) -> JsonDict:
    spec = policy.config.cluster_queues.get(name)
    flavors: list[JsonDict] = []
    if spec is not None:
        usage = policy.usage().get(name, {})
        for group in spec.groups:
            for flavor in group.flavors:
                resources = []
                for resource in group.resources:
                    if (flavor, resource) not in spec.quotas:
                        continue
                    total = usage.get(flavor, {}).get(resource, 0)
                    borrowed = max(0, total - spec.nominal((flavor, resource)))
                    resources.append({"name": resource, "total": format_quota(resource, total),
                                      "borrowed": format_quota(resource, borrowed)})
                flavors.append({"name": flavor, "resources": resources})
    if spec is None:
        condition = _condition(old, False, "FlavorNotFound" if problem and "flavor" in problem else "Invalid",
                               f"Can't admit new workloads: {problem or 'the ClusterQueue is invalid'}", now)
    elif spec.stopped:
        condition = _condition(old, False, "Stopped", "Can't admit new workloads: the ClusterQueue is stopped", now)
    else:
        condition = _condition(old, True, "Ready", "Can admit new workloads", now)
    admitted = counts.cq_admitted.get(name, 0)
    return {"flavorsReservation": flavors, "flavorsUsage": flavors, "pendingWorkloads": counts.cq_pending.get(name, 0),
            "reservingWorkloads": admitted, "admittedWorkloads": admitted, "conditions": [condition]}


def local_queue_status(namespace: str, name: str, cluster_queue: str, policy: KueuePolicy, counts: QueueCounts,
                       old: Mapping[str, Any] | None, now: float) -> JsonDict:
    key = (namespace, name)
    spec = policy.config.cluster_queues.get(cluster_queue)
    flavors: list[JsonDict] = []
    if spec is not None:
        usage = counts.lq_usage.get(key, {})
        for group in spec.groups:
            for flavor in group.flavors:
                resources = [{"name": res, "total": format_quota(res, usage.get((flavor, res), 0))}
                             for res in group.resources if (flavor, res) in spec.quotas]
                flavors.append({"name": flavor, "resources": resources})
    if spec is None:
        condition = _condition(old, False, "ClusterQueueDoesNotExist",
                               f"Can't submit new workloads to clusterQueue {cluster_queue}", now)
    elif spec.stopped:
        condition = _condition(old, False, "ClusterQueueIsInactive",
                               f"Can't submit new workloads to clusterQueue {cluster_queue}", now)
    else:
        condition = _condition(old, True, "Ready", "Can submit new workloads to localQueue", now)
    admitted = counts.lq_admitted.get(key, 0)
    return {"pendingWorkloads": counts.lq_pending.get(key, 0), "reservingWorkloads": admitted,
            "admittedWorkloads": admitted, "flavorUsage": flavors, "conditions": [condition]}


def queue_statuses(snapshot: CacheSnapshot, policy: KueuePolicy, problems: Mapping[str, str], now: float, *,
                   cluster_queues: ResourceType = r.CLUSTER_QUEUES, local_queues: ResourceType = r.LOCAL_QUEUES,
                   counts: QueueCounts | None = None) -> list[tuple[ResourceType, JsonDict, JsonDict]]:
    """(resource, cached object, wanted status) for every queue whose status must change; ``cluster_queues`` and
    ``local_queues``: gpufleet.io's kinds or Kueue's (the queue source of the cycle); ``counts``: the policy's,
    when the caller keeps them."""
    counts = counts if counts is not None else QueueCounts(policy)
    out: list[tuple[ResourceType, JsonDict, JsonDict]] = []
    for name, obj in sorted(snapshot.of(cluster_queues).items()):
        old = obj.get("status")
        want = cluster_queue_status(name, policy, counts, old, problems.get(name), now)
        if want != old:
            out.append((cluster_queues, obj, want))
    for key, obj in sorted(snapshot.of(local_queues).items()):
        ns, _, name = key.partition("/")
        cq = str((obj.get("spec") or {}).get("clusterQueue") or "")
        old = obj.get("status")
        want = local_queue_status(ns, name, cq, policy, counts, old, now)
        if want != old:
            out.append((local_queues, obj, want))
    return out


def write_status(client: KubeClient, resource: ResourceType, obj: JsonDict, status: JsonDict) -> bool:
    body = {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": obj.get("metadata") or {},
            "status": status}
    try:
        client.update_status(resource, body)
        return True
    except (Conflict, NotFound):
        return False  # moved on or gone: the next cycle sees it and decides again
    except KubeError as e:
        log.warning("%s %s status not written: %s", resource.kind, resource.object_key(obj), e)
        return False
