"""A workload's MIG resources replaced by larger profiles after its pods ran out of GPU memory.

A MIG instance has the memory it has: a pod whose model does not fit fails, and its retry asks the same profile
and fails again. Where its ClusterQueue opts in (``gpufleet.io/mig-resize-on-oom: "true"``), gpufleet offers
the next attempt the next larger profile the queue covers. In the simulator the policy does it itself; live, a
Job's next pod asks what its template asks, so the scheduler writes what to ask instead on the object whose pods
they are, and the mutating webhook rewrites each new pod of that object:

    metadata:
      annotations:
        gpufleet.io/mig-resized: "nvidia.com/mig-1g.10gb=nvidia.com/mig-2g.20gb"

A comma-separated list of ``old=new`` MIG resource names, followed until nothing changes (``1g=2g,2g=3g`` takes a
pod asking 1g to 3g; the scheduler writes each entry to its end, ``1g=3g,2g=3g``); a resource named twice on the
left, or a cycle, does not read. Every reader of the object reads its templates resized (``plan``, ``simulate``,
the live scheduler's quota), so what the workload is charged is what its pods ask. Only the kinds whose controllers
make a new pod from the object's own templates after one fails are resized (:data:`RESIZABLE_KINDS`). A team may
set the annotation when it creates the object; once it exists only the scheduler may change it
(``deploy/webhook/admission-policy.yaml``): removing it would leave the resized pods charged as the smaller profile.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from gpufleet.api.objects import GpuDemand, PodTemplate
from gpufleet.gpu.mig import profile_from_resource_name

RESIZE_ON_OOM_ANNOTATION = "gpufleet.io/mig-resize-on-oom"  # on a ClusterQueue: "true" opts its workloads in
RESIZED_ANNOTATION = "gpufleet.io/mig-resized"  # on the object whose pods are resized (a Job)
V = TypeVar("V")
# (group, kind) of the objects resized: their controllers make a failed pod's replacement from their own templates,
# and the scheduler may patch them (deploy/webhook/rbac.yaml). A TrainJob's pods come from its runtime's templates.
RESIZABLE_KINDS: frozenset[tuple[str, str]] = frozenset({
    ("batch", "Job"), ("jobset.x-k8s.io", "JobSet"), ("batch.volcano.sh", "Job"),
    *(("kubeflow.org", k) for k in ("PyTorchJob", "TFJob", "XGBoostJob", "PaddleJob", "MPIJob"))})
MAX_RESIZES = 16  # pairs in one annotation: a MIG geometry has at most a handful of profiles to climb


@dataclass(frozen=True, slots=True)
class Resize:
    """A MIG resource a workload's pods ask for, replaced by a larger profile of the same GPU after an OOM."""

    old: str
    new: str

    def text(self) -> str:
        return f"{self.old} → {self.new} (OOM-killed on {self.old})"


class BadResized(ValueError):
    """The annotation's value is not a list of ``old=new`` MIG resource names; the message says what is wrong."""


def parse_resized(text: str) -> tuple[Resize, ...]:
    """The resizes an annotation's value lists, in order; :class:`BadResized` says what is wrong with it."""
    out: list[Resize] = []
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if len(parts) > MAX_RESIZES:  # (before any is read: an annotation may be as long as 256 KiB)
        raise BadResized(f"{len(parts)} entries; at most {MAX_RESIZES}")
    for i, part in enumerate(parts):
        old, sep, new = (s.strip() for s in part.partition("="))
        if not sep:
            raise BadResized(f"entry {i + 1} ({part[:80]!r}) is not old=new")
        for name in (old, new):
            if profile_from_resource_name(name) is None:
                raise BadResized(f"entry {i + 1}: {name[:80]!r} is not a MIG resource name (nvidia.com/mig-<profile>)")
        if old == new:
            raise BadResized(f"entry {i + 1} replaces {old} with itself")
        if any(r.old == old for r in out):
            raise BadResized(f"entry {i + 1}: {old} is already replaced by an earlier entry")
        out.append(Resize(old, new))
    if not out:
        raise BadResized("no old=new entry")
    step = {r.old: r.new for r in out}
    for r in out:
        seen, at = {r.old}, r.new
        while at in step:
            if at in seen:
                raise BadResized(f"the entries go round in a circle through {at}")
            seen.add(at)
            at = step[at]
    return tuple(out)


def resized_on(obj: Mapping[str, object]) -> str | None:
    """The annotation's value on an object as the API returns it (a Job), if it carries one."""
    meta = obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    value = annotations.get(RESIZED_ANNOTATION) if isinstance(annotations, Mapping) else None
    return value if isinstance(value, str) else None


def format_resized(resizes: Iterable[Resize]) -> str:
    return ",".join(f"{r.old}={r.new}" for r in resizes)


def with_resize(resizes: Sequence[Resize], resize: Resize) -> tuple[Resize, ...]:
    """``resizes`` with ``resize`` added, each entry taken to its end (an entry that led to ``resize.old`` leads to
    ``resize.new`` now), unless a pod asking ``resize.old`` is already taken elsewhere."""
    if any(r.old == resize.old for r in resizes):
        return tuple(resizes)
    return (*(Resize(r.old, resize.new) if r.new == resize.old else r for r in resizes), resize)


def resolve(resource: str, resizes: Sequence[Resize]) -> str:
    """What a pod asking ``resource`` asks once ``resizes`` are followed until nothing changes (as
    :func:`parse_resized` reads them: no resource replaced twice, no cycle; a cycle given anyway stops after one
    round)."""
    step = {r.old: r.new for r in resizes}
    for _ in range(len(step)):
        if resource not in step:
            break
        resource = step[resource]
    return resource


def resized_resources(resources: Mapping[str, V], resizes: Sequence[Resize]) -> dict[str, V] | None:
    """A requests or limits map with its MIG resources resized, or None when nothing changes. A map that would
    then name one resource twice (a pod asking a 1g and a 2g instance, the 1g taken to 2g) is left as it is, as
    :func:`resized_template` leaves its template."""
    names = [resolve(k, resizes) for k in resources]
    if names == list(resources) or len(set(names)) < len(names):
        return None
    return dict(zip(names, resources.values(), strict=True))


def resized_template(t: PodTemplate, resizes: Sequence[Resize]) -> PodTemplate:
    """``t`` asking the resized MIG resources instead (itself when it asks none of them, or when it would then ask
    one resource under two entries: see :func:`resized_resources`)."""
    requests = resized_resources(t.requests, resizes)
    limits = resized_resources(t.limits, resizes)
    if requests is None and limits is None:
        return t
    if any(m is None and any(resolve(k, resizes) != k for k in old) for m, old in ((requests, t.requests),
                                                                                    (limits, t.limits))):
        return t  # (one of the maps would name a resource twice)
    gpu: GpuDemand = t.gpu
    asked = gpu.resource or (f"nvidia.com/mig-{gpu.mig_profile}" if gpu.kind == "mig" else None)
    if asked is not None and resolve(asked, resizes) != asked:
        new = resolve(asked, resizes)
        gpu = replace(gpu, resource=new, mig_profile=profile_from_resource_name(new))
    return replace(t, requests=t.requests if requests is None else requests,
                   limits=t.limits if limits is None else limits, gpu=gpu)
