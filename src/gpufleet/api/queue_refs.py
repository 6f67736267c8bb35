"""Workloads that name a Kueue LocalQueue their namespace does not have.

Kueue leaves such a workload pending ("LocalQueue <name> doesn't exist"); ``plan`` says so as its pending reason,
and ``validate`` warns when the input is read, with the file, line and label. Only when the input has queue
objects at all (LocalQueues or ClusterQueues, Volcano's and KAI's as translated): an input of workloads alone
says nothing about the cluster's queues.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpufleet.api.objects import GPUFLEET_QUEUE_LABEL, KUEUE_QUEUE_LABEL, ObjectMeta
from gpufleet.api.workloadkinds.common import queue_label

if TYPE_CHECKING:
    from gpufleet.api.manifests import Manifests

MAX_NAMED = 5  # LocalQueues of the namespace named in the fix


def check_queue_names(m: Manifests) -> None:
    """Warn about every workload of ``m`` (an owner such as a Job, or a pod of no owner in the input) whose
    Kueue queue label names a LocalQueue missing from its namespace."""
    if not m.local_queues and not m.cluster_queues:
        return
    by_namespace: dict[str, set[str]] = {}
    for lq in m.local_queues:
        by_namespace.setdefault(lq.meta.namespace or "default", set()).add(lq.meta.name)
    owner_uids = set()
    for owner in m.controllers.owners:
        if owner.meta.uid:
            owner_uids.add(owner.meta.uid)
        label, name = _kueue_queue(owner.labels)
        if label is not None and name is not None and name not in by_namespace.get(owner.namespace, set()):
            if label in owner.meta.labels:
                field = f"metadata.labels.{label}"
            elif owner.kind == "CronJob":
                field = f"spec.jobTemplate.metadata.labels.{label}"
            else:
                field = f"spec.template.metadata.labels.{label}"
            _warn(m, owner.meta, owner.kind, owner.namespace, name, field, by_namespace)
    for pod in m.pods:
        if owner_uids.intersection(pod.meta.owners):
            continue  # its owner, in the input, is warned about (or names a queue that exists)
        label, name = _kueue_queue(pod.meta.labels)
        namespace = pod.meta.namespace or "default"
        if label is not None and name is not None and name not in by_namespace.get(namespace, set()):
            _warn(m, pod.meta, "Pod", namespace, name, f"metadata.labels.{label}", by_namespace)


def _kueue_queue(labels: dict[str, str]) -> tuple[str | None, str | None]:
    """(label, LocalQueue name) of a Kueue queue label; (None, None) for none, or for a Volcano or KAI queue."""
    name, system = queue_label(labels)
    if name is None or system != "kueue":
        return None, None
    return (KUEUE_QUEUE_LABEL if labels.get(KUEUE_QUEUE_LABEL) else GPUFLEET_QUEUE_LABEL), name


def _warn(m: Manifests, meta: ObjectMeta, kind: str, namespace: str, name: str, field: str,
          by_namespace: dict[str, set[str]]) -> None:
    there = sorted(by_namespace.get(namespace, set()))
    if there:
        more = f" (and {len(there) - MAX_NAMED} more)" if len(there) > MAX_NAMED else ""
        fix = (f"define LocalQueue {name} in namespace {namespace}, or name one of its LocalQueues: "
               f"{', '.join(there[:MAX_NAMED])}{more}")
    else:
        fix = f"define LocalQueue {name} in namespace {namespace} (it has no LocalQueue), or fix the name"
    src = meta.source
    m.problems.warning(
        f"names LocalQueue {name}, which does not exist in namespace {namespace}: Kueue leaves it pending "
        f"(\"LocalQueue {name} doesn't exist\")", file=src.file if src else None, line=src.line if src else None,
        kind=kind, name=meta.key, field=field, fix=fix)
