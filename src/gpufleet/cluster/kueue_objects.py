"""A Kueue Workload object and the object it stands for count once.

Kueue creates a Workload object for every object it manages (a Job, a JobSet, a pod group, a plain pod...). A
snapshot of a cluster holds both, and the running pods too: read separately they would be three workloads, the
same quota charged twice and the pods planned again. Here each Workload object is folded into the workload of
the object it stands for, found the way Kueue links them:

* the pods of an admitted job carry the Workload's name (annotation ``kueue.x-k8s.io/workload``);
* the Workload's ``ownerReferences`` name its owner's UID (a Job, or the pods themselves for plain pods), as its
  ``kueue.x-k8s.io/job-uid`` label does for job integrations;
* a pod group's Workload is named after the group (label ``kueue.x-k8s.io/pod-group-name``).

The workload that remains is the owner's, with its real pods (adopted by :mod:`gpufleet.cluster.grouping`), and
Kueue's decisions from the Workload object: its admission (ClusterQueue, flavors, quota), priority, ``active``
and UID. A Workload object whose owner is not in the input stays a workload of its own, as written.
"""

from __future__ import annotations

from gpufleet.cluster.workloads import Workload

WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"


def _target(obj: Workload, by_name: dict[tuple[str, str], Workload], by_uid: dict[str, Workload],
            groups: dict[tuple[str, str], Workload]) -> Workload | None:
    found = by_name.get((obj.namespace, obj.name))
    if found is not None:
        return found
    owners = (*(obj.origin.owners if obj.origin is not None else ()), obj.labels.get(JOB_UID_LABEL) or "")
    for uid in owners:
        found = by_uid.get(uid)
        if found is not None and found.namespace == obj.namespace:
            return found
    return groups.get((obj.namespace, obj.name))


def fold_kueue_workloads(workloads: list[Workload]) -> list[Workload]:
    """``workloads`` without the Kueue Workload objects that stand for another workload of the list, each folded
    into that one (module doc)."""
    objects = [w for w in workloads if w.kind == "Workload"]
    if not objects:
        return workloads
    by_name: dict[tuple[str, str], Workload] = {}
    by_uid: dict[str, Workload] = {}
    groups: dict[tuple[str, str], Workload] = {}
    for w in workloads:
        if w.kind == "Workload":
            continue
        if w.origin is not None and w.origin.uid:
            by_uid.setdefault(w.origin.uid, w)
        if w.kind == "PodGroup":
            groups.setdefault((w.namespace, w.name), w)
        for p in w.pods:
            named = p.template.annotations.get(WORKLOAD_ANNOTATION)
            if named:
                by_name.setdefault((w.namespace, named), w)
    folded: set[int] = set()
    for obj in objects:
        target = _target(obj, by_name, by_uid, groups)
        if target is None or target.admission is not None:
            continue  # no owner in the input (or two Workload objects for one owner: the first counts)
        target.admission = obj.admission
        target.priority, target.priority_class = obj.priority, obj.priority_class
        target.active = obj.active
        target.uid = obj.uid
        target.queue = obj.queue or target.queue
        folded.add(id(obj))
    return [w for w in workloads if id(w) not in folded]
