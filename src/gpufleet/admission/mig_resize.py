"""The mutating webhook's MIG resize: a new pod of an object the scheduler resized after an OOM asks the larger
profile (:mod:`gpufleet.api.mig_resized` says why and how the object carries it).

At pod creation the pod's controllers are looked up in this replica's informer cache (the pod's Job, the JobSet
above it...); the first of the kinds resized (``RESIZABLE_KINDS``) that carries ``gpufleet.io/mig-resized`` says
which MIG resources its pods ask instead.
Every container's requests and limits are rewritten, and the pod gets the same annotation, which says what was
changed (``kubectl describe`` shows a pod asking what its template does not). An annotation that does not read
leaves the pod as it is and comes back as an admission warning naming the object; so does a pod the rewrite
would leave asking one resource twice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpufleet.api.gpushare import requested_gpu_resources, spec_containers
from gpufleet.api.mig_resized import (
    RESIZABLE_KINDS,
    RESIZED_ANNOTATION,
    BadResized,
    Resize,
    format_resized,
    parse_resized,
    resized_on,
    resized_resources,
    resolve,
)
from gpufleet.k8s.owners import Lookup, controllers
from gpufleet.k8s.resources import ResourceType

JsonDict = dict[str, Any]
MIG_PREFIX = "nvidia.com/mig-"


@dataclass(frozen=True, slots=True)
class Resized:
    """The object a pod's resize comes from (``Job team-a/train``) and its annotation's value."""

    owner: str
    text: str


ResizeSource = Callable[[Mapping[str, Any], str], Resized | None]  # (pod, its namespace) -> its owner's resize


def no_resizes(pod: Mapping[str, Any], namespace: str) -> Resized | None:
    return None


class CacheResizeSource:
    """The pod's controllers as the informer cache holds them (the webhook answers within the cache's lag)."""

    def __init__(self, lookup: Lookup, resources: Sequence[ResourceType]) -> None:
        self.lookup = lookup
        self.resources = tuple(resources)

    def __call__(self, pod: Mapping[str, Any], namespace: str) -> Resized | None:
        meta = pod.get("metadata")
        if not isinstance(meta, Mapping) or not meta.get("ownerReferences"):
            return None
        if not meta.get("namespace"):  # (the API server fills it from the request; a test's review may not)
            pod = {**pod, "metadata": {**meta, "namespace": namespace}}
        for res, obj in controllers(pod, self.resources, self.lookup):
            if (res.group, res.kind) not in RESIZABLE_KINDS:
                continue
            text = resized_on(obj)
            if text is not None:
                meta_o = obj.get("metadata") or {}
                return Resized(f"{res.kind} {meta_o.get('namespace')}/{meta_o.get('name')}", text)
        return None


def asks_mig(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec")
    return any(name.startswith(MIG_PREFIX) for name in requested_gpu_resources(spec if isinstance(spec, dict) else {}))


def resize_ops(pod: Mapping[str, Any], namespace: str, source: ResizeSource) -> tuple[list[JsonDict], list[str]]:
    """JSON patch operations resizing ``pod``'s MIG resources as its owner says ([] when nothing to do), and the
    warnings to answer with."""
    if not asks_mig(pod):
        return [], []
    found = source(pod, namespace)
    if found is None:
        return [], []
    try:
        resizes = parse_resized(found.text)
    except BadResized as e:
        return [], [f"gpufleet: {found.owner} has an unreadable {RESIZED_ANNOTATION} annotation ({e}); the pod asks "
                    "what its template asks"]
    spec = pod.get("spec")
    ops: list[JsonDict] = []
    applied: list[Resize] = []
    for section, i, c in spec_containers(spec if isinstance(spec, dict) else {}):
        resources = c.get("resources")
        if not isinstance(resources, Mapping):
            continue
        for part in ("requests", "limits"):
            values = resources.get(part)
            if not isinstance(values, Mapping):
                continue
            new = resized_resources(values, resizes)
            if new is None:
                if any(resolve(k, resizes) != k for k in values):
                    return [], [f"gpufleet: {found.owner} resizes MIG resources ({found.text}), which would make "
                                f"{section}[{i}] ask one resource twice; the pod asks what its template asks"]
                continue
            ops.append({"op": "replace", "path": f"/spec/{section}/{i}/resources/{part}", "value": new})
            applied += [Resize(k, resolve(k, resizes)) for k in values if resolve(k, resizes) != k]
    if not ops:
        return [], []
    meta = pod.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    value = format_resized(dict.fromkeys(applied))  # (each resource once, in the order met)
    if isinstance(annotations, Mapping):
        ops.append({"op": "add", "path": "/metadata/annotations/" + RESIZED_ANNOTATION.replace("~", "~0").replace(
            "/", "~1"), "value": value})
    else:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {RESIZED_ANNOTATION: value}})
    return ops, []
