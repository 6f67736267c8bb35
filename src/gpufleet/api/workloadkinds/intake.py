"""What :func:`gpufleet.api.manifests.build` asks of the workload kinds, document by document and once at the end.

Per document: the version check (a known group at an unknown version is refused), ``generateName`` (a stable
name, said), unknown fields (warned with file and line), the workload-kind parsers, the audit of Kueue features
gpufleet does not implement, and the message for a kind gpufleet does not read (a well-known kind is named as
such). At the end: TrainJobs are completed from their runtimes, Volcano and KAI queues become ClusterQueues, and
what gpufleet decided about each owner is said.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpufleet.api.errors import LEFT_OUT
from gpufleet.api.mig_resized import (
    RESIZABLE_KINDS,
    RESIZED_ANNOTATION,
    BadResized,
    parse_resized,
    resized_template,
)
from gpufleet.api.reader import FieldReader
from gpufleet.api.source import Document
from gpufleet.api.workloadkinds import (
    apps,
    batch,
    kai,
    kubeflow,
    kueuefeatures,
    lws,
    names,
    queues,
    ray,
    tas,
    volcano,
)
from gpufleet.api.workloadkinds.common import volcano_default_queue
from gpufleet.api.workloadkinds.fields import check_fields
from gpufleet.api.workloadkinds.model import AdmissionCheck, ControllerObjects, ForeignQueue, WorkloadOwner
from gpufleet.api.workloadkinds.table import RULES, SUPPORTING_KINDS, WELL_KNOWN_UNREAD, versions_of

if TYPE_CHECKING:
    from gpufleet.api.manifests import Manifests

OwnerParser = Callable[[FieldReader], WorkloadOwner | None]

OWNER_PARSERS: dict[tuple[str, str], OwnerParser] = {
    ("apps", "Deployment"): apps.parse_deployment,
    ("apps", "ReplicaSet"): apps.parse_replica_set,
    ("apps", "StatefulSet"): apps.parse_stateful_set,
    ("batch", "Job"): batch.parse_job,
    ("batch", "CronJob"): batch.parse_cron_job,
    ("jobset.x-k8s.io", "JobSet"): batch.parse_job_set,
    **{("kubeflow.org", k): kubeflow.parse_training_job for k in kubeflow.REPLICA_SPECS},
    ("ray.io", "RayCluster"): ray.parse_ray_cluster,
    ("ray.io", "RayJob"): ray.parse_ray_job,
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): lws.parse_leader_worker_set,
    ("batch.volcano.sh", "Job"): volcano.parse_volcano_job,
    ("scheduling.volcano.sh", "PodGroup"): volcano.parse_pod_group,
    ("scheduling.run.ai", "PodGroup"): volcano.parse_pod_group,
}
assert set(OWNER_PARSERS) | {("trainer.kubeflow.org", "TrainJob")} == set(RULES), "every kind of the table parses"

_KUEUE_GROUPS = ("kueue.x-k8s.io", "gpufleet.io", "config.kueue.x-k8s.io")
_AUDITED = ("ClusterQueue", "LocalQueue", "ResourceFlavor", "Workload", "Configuration")


def handles(group: str, kind: str) -> bool:
    """Whether the kind is read here rather than by :data:`gpufleet.api.kinds.PARSERS`."""
    return (group, kind) in RULES or (group, kind) in SUPPORTING_KINDS


def split_api_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def check_version(r: FieldReader, api_version: str, kind: str) -> bool:
    """False (with an error) when the group is one gpufleet knows and the version is not one it reads."""
    group, version = split_api_version(api_version)
    known = versions_of(group, kind)
    if known is None or version in known:
        return True
    r.error(f"{api_version} is not a version gpufleet reads: it reads {kind} as "
            + ", ".join(f"{group + '/' if group else ''}{v}" for v in known), "apiVersion",
            fix=f"write apiVersion: {group + '/' if group else ''}{known[0]} (fields may differ between versions)")
    return False


def fill_generated_name(doc: Document, r: FieldReader, objects: ControllerObjects) -> None:
    """A document with ``metadata.generateName`` and no name gets a stable name derived from it, said as a
    warning: the API server would add 5 random characters; gpufleet adds 5 derived from the namespace, the
    generateName and how many documents used it before."""
    data = doc.data
    meta = data.get("metadata") if isinstance(data, dict) else None
    if not isinstance(meta, dict) or meta.get("name") or not meta.get("generateName"):
        return
    base = meta["generateName"]
    if not isinstance(base, str):
        return
    ns = str(meta.get("namespace") or "default")
    key = (str(data.get("kind")), ns, base)
    seen = objects.generated_names.get(key, 0)
    objects.generated_names[key] = seen + 1
    meta["name"] = names.generated(base, ns, index=seen)
    r.warning(f"named {meta['name']} from generateName {base!r} (the API server would add 5 random characters; "
              "gpufleet derives them from the input, so every run gives the same name)", "metadata", "generateName",
              fix="give metadata.name to choose the name yourself")


def fields(r: FieldReader, api_version: str, kind: str, *, warn: bool = True) -> None:
    """Warn about the fields the kind does not have (the object named as its parser will name it); ``warn=False``
    names it only (a reader that keeps no warnings)."""
    group, _ = split_api_version(api_version)
    meta = r.raw("metadata")
    if r.name is None and isinstance(meta, dict) and isinstance(meta.get("name"), str):
        ns = meta.get("namespace")
        r.name = f"{ns}/{meta['name']}" if isinstance(ns, str) and ns else meta["name"]
    if warn:
        check_fields(r, group, kind)


_SUPPORTING_PARSERS: dict[tuple[str, str], Callable[[FieldReader], Any]] = {
    ("scheduling.volcano.sh", "Queue"): volcano.parse_volcano_queue,
    ("scheduling.run.ai", "Queue"): kai.parse_kai_queue,
    ("trainer.kubeflow.org", "TrainingRuntime"): kubeflow.parse_training_runtime,
    ("trainer.kubeflow.org", "ClusterTrainingRuntime"): kubeflow.parse_training_runtime,
    ("kueue.x-k8s.io", "AdmissionCheck"): kueuefeatures.parse_admission_check,
}
assert set(_SUPPORTING_PARSERS) == set(SUPPORTING_KINDS)


def parse(r: FieldReader, api_version: str, kind: str) -> Any:
    """The object a workload or supporting kind parses into (None when it does not); :func:`keep` adds it."""
    group, _ = split_api_version(api_version)
    if (group, kind) == ("trainer.kubeflow.org", "TrainJob"):
        return kubeflow.parse_train_job(r)
    parser = OWNER_PARSERS.get((group, kind)) or _SUPPORTING_PARSERS[(group, kind)]
    made = parser(r)
    if isinstance(made, WorkloadOwner):
        tas.check_owner(r, made)  # said here, where each annotation's line is known
        _resize_mig(r, made)
    return made


def _resize_mig(r: FieldReader, owner: WorkloadOwner) -> None:
    """The owner's pod templates as the webhook makes its pods once an OOM resized them
    (:mod:`gpufleet.api.mig_resized`): what its workloads are charged is what their pods ask."""
    text = owner.meta.annotations.get(RESIZED_ANNOTATION)
    if text is None or (owner.rule.group, owner.rule.kind) not in RESIZABLE_KINDS:
        return
    try:
        resizes = parse_resized(text)
    except BadResized as e:
        r.warning(f"annotation {RESIZED_ANNOTATION}: {e}; its pods are read (and made) as their templates ask",
                  "metadata", "annotations", RESIZED_ANNOTATION,
                  fix="write old=new MIG resource names separated by commas, e.g. "
                      "nvidia.com/mig-1g.10gb=nvidia.com/mig-2g.20gb, or remove the annotation")
        return
    for plan in owner.workloads:
        for ps in plan.pod_sets:
            ps.template = resized_template(ps.template, resizes)


def keep(obj: Any, objects: ControllerObjects, order: int) -> None:
    """Add a parsed object (one without errors) to ``objects``; ``order`` is its document's position."""
    if isinstance(obj, tuple):  # a TrainJob and the step that completes it from its runtime
        obj, link = obj
        objects.linkers.append(link)
    obj.meta.order = order
    if isinstance(obj, WorkloadOwner):
        objects.owners.append(obj)
    elif isinstance(obj, ForeignQueue):
        objects.queues.append(obj)
    elif isinstance(obj, AdmissionCheck):
        objects.admission_checks.append(obj)
    else:
        objects.runtimes.append(obj)


def audit(r: FieldReader, api_version: str, kind: str, objects: ControllerObjects) -> None:
    group, _ = split_api_version(api_version)
    if group in _KUEUE_GROUPS and kind in _AUDITED:
        kueuefeatures.audit(r, kind, objects)
    if (group, kind) in _SLICED:
        tas.check_document(r, group, kind)


_SLICED = (("", "Pod"), ("kueue.x-k8s.io", "Workload"))  # kinds not parsed here whose pod templates may ask slices


def unread_kind(r: FieldReader, api_version: str, kind: str, readable: set[tuple[str, str]]) -> None:
    """A kind gpufleet does not read: named as a well-known kind when it is one, else with the closest kind it
    reads (a misspelling)."""
    group, _ = split_api_version(api_version)
    holds_pods = WELL_KNOWN_UNREAD.get((group, kind))
    if holds_pods is False:
        r.warning(f"{kind} is not a workload kind gpufleet reads; left out", "kind",
                  fix="nothing to do: it holds no pods to plan (remove it to silence this)", code=LEFT_OUT)
        return
    if holds_pods:
        r.warning(f"{api_version} {kind} is a workload kind gpufleet does not read yet; its pods are left out of "
                  "the plan", "kind", fix="give its pods as Pods, or a Job or JobSet with the same templates",
                  code=LEFT_OUT)
        return
    readable = set(readable) | set(RULES) | set(SUPPORTING_KINDS)
    kinds = sorted({k for _, k in readable})
    close = difflib.get_close_matches(kind, kinds, n=1, cutoff=0.8)
    same_kind_groups = sorted(g or "v1" for g, k in readable if k == kind)
    if same_kind_groups:
        fix = f"{kind} is read in group(s) {', '.join(same_kind_groups)}: check the apiVersion"
    elif close:
        fix = f"did you mean kind: {close[0]}?"
    else:
        fix = "remove it, or check apiVersion and kind spelling (README lists the kinds gpufleet reads)"
    r.warning(f"{api_version} {kind} is not a kind gpufleet reads; it is left out", "kind", fix=fix, code=LEFT_OUT)


def finish(m: Manifests) -> None:
    """The steps that need the whole input: TrainJobs from their runtimes, Volcano and KAI queues as Kueue's
    objects, and the notes about owners."""
    _drop_duplicate_owners(m)
    linkers, m.controllers.linkers = m.controllers.linkers, []
    for link in linkers:
        link(m.controllers, m.problems)
    for owner in m.controllers.owners:
        volcano_default_queue(owner)
    queues.translate_queues(m)
    tas.place_slices(m)
    for owner in m.controllers.owners:
        src = owner.meta.source
        for note in owner.notes:
            m.problems.warning(note, file=src.file if src else None, line=src.line if src else None,
                               kind=owner.kind, name=owner.key)


def _drop_duplicate_owners(m: Manifests) -> None:
    seen: dict[tuple[str, str, str], WorkloadOwner] = {}
    kept: list[WorkloadOwner] = []
    for owner in m.controllers.owners:
        key = (owner.rule.group, owner.kind, owner.key)
        first = seen.get(key)
        if first is None:
            seen[key] = owner
            kept.append(owner)
            continue
        src = owner.meta.source
        m.problems.error(f"duplicate name: {owner.key} is already defined at {first.meta.source}",
                         file=src.file if src else None, line=src.line if src else None, kind=owner.kind,
                         name=owner.key, field="metadata.name", fix="rename one of them or remove the duplicate")
    m.controllers.owners = kept
