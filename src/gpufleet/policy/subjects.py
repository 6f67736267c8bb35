"""From documents (and what gpufleet's parsers made of them) to the subjects the rules judge.

A workload subject is a Pod or an object of a workload kind: its pod templates as written
(:func:`~gpufleet.api.workloadkinds.templates.raw_templates`) and its pods as the workload kinds plan them
(``WorkloadOwner.workloads``). A Pod that a controller owns (an ownerReference with ``controller: true``) is
not judged: its owner is, where it is written (the webhook and the exported policies skip such pods too, so that
a Deployment's pods are not refused one by one after the Deployment was admitted). ClusterQueues and LocalQueues
are queue subjects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpufleet.api.kinds import KUEUE_GROUPS
from gpufleet.api.manifests import Manifests
from gpufleet.api.objects import ClusterQueue, LocalQueue, Pod
from gpufleet.api.source import Document
from gpufleet.api.workloadkinds.model import WorkloadOwner
from gpufleet.api.workloadkinds.templates import WORKLOAD_KINDS, raw_templates
from gpufleet.policy.containers import mapping
from gpufleet.policy.model import ObjectRef, PlannedPods, Subject

QUEUE_KINDS = ("ClusterQueue", "LocalQueue")
Key = tuple[str, int, str, str]  # (file, line, kind, name as parsed: namespace/name or name)


def group_of(api_version: Any) -> str:
    text = api_version if isinstance(api_version, str) else ""
    return text.rpartition("/")[0]


def controlled(obj: Mapping[str, Any]) -> bool:
    """A controller made it (ownerReferences with controller: true)."""
    refs = mapping(obj.get("metadata")).get("ownerReferences")
    return isinstance(refs, list) and any(isinstance(r, Mapping) and r.get("controller") is True for r in refs)


def judged(obj: Mapping[str, Any]) -> bool:
    """Whether the object is one the rules judge: a workload kind (not a Pod a controller owns) or a queue."""
    group, kind = group_of(obj.get("apiVersion")), obj.get("kind")
    if not isinstance(kind, str):
        return False
    if (group, kind) in WORKLOAD_KINDS:
        return not (kind == "Pod" and controlled(obj))
    return kind in QUEUE_KINDS and group in KUEUE_GROUPS


def _key(obj: Pod | WorkloadOwner | ClusterQueue | LocalQueue, kind: str) -> Key | None:
    src = obj.meta.source
    return (src.file, src.line, kind, obj.meta.key) if src is not None else None


def _index(m: Manifests) -> dict[Key, Any]:
    out: dict[Key, Any] = {}
    pairs: list[tuple[Any, str]] = [(p, "Pod") for p in m.pods]
    pairs += [(o, o.kind) for o in m.controllers.owners]
    pairs += [(q, "ClusterQueue") for q in m.cluster_queues] + [(q, "LocalQueue") for q in m.local_queues]
    for obj, kind in pairs:
        key = _key(obj, kind)
        if key is not None:
            out.setdefault(key, obj)
    return out


def _planned(owner: WorkloadOwner) -> tuple[list[PlannedPods], int]:
    """The pod sets of the owner's first unit of admission (a LeaderWorkerSet's groups are alike; a Deployment's
    pods each their own unit), and the size of its largest unit."""
    sets = [PlannedPods(ps.name, ps.count, ps.template) for ps in owner.workloads[0].pod_sets] \
        if owner.workloads else []
    return sets, max((w.total for w in owner.workloads), default=0)


def subject_of(doc: Document, parsed: Mapping[Key, Any]) -> Subject | None:
    """The subject for one document (None when the rules do not judge its kind)."""
    data = doc.data
    if not isinstance(data, Mapping) or not judged(data):
        return None
    group, kind = group_of(data.get("apiVersion")), str(data.get("kind"))
    meta = mapping(data.get("metadata"))
    name = meta.get("name") if isinstance(meta.get("name"), str) else ""
    namespace = meta.get("namespace") if isinstance(meta.get("namespace"), str) and meta.get("namespace") else None
    namespaced = kind != "ClusterQueue"
    if namespaced and namespace is None:
        namespace = "default"
    ref = ObjectRef(kind, namespace if namespaced else None, str(name))
    s = Subject(ref, group, data, doc.file, doc.line or None)
    obj = parsed.get((doc.file, doc.line, kind, f"{namespace}/{name}" if namespaced else str(name)))
    if kind in QUEUE_KINDS:
        s.cluster_queue = obj if isinstance(obj, ClusterQueue) else None
        s.local_queue = obj if isinstance(obj, LocalQueue) else None
        return s
    s.templates = raw_templates(group, kind, data)
    if isinstance(obj, Pod):
        s.pod = obj
        s.pods = [PlannedPods(obj.meta.name, 1, obj.template)]
        s.largest_workload = 1
    elif isinstance(obj, WorkloadOwner) and obj.rule.group == group:
        s.owner = obj
        s.pods, s.largest_workload = _planned(obj)
    return s


def subjects(m: Manifests, documents: Iterable[Document]) -> list[Subject]:
    """The subjects of ``documents``, paired with what ``m`` (their parse) made of them."""
    parsed = _index(m)
    out = []
    for doc in documents:
        s = subject_of(doc, parsed)
        if s is not None:
            out.append(s)
    return out


def documents_of(docs: Sequence[Document]) -> list[Document]:
    """Only the documents whose kind a rule judges (the others need not be kept)."""
    return [d for d in docs if isinstance(d.data, Mapping) and judged(d.data)]
