"""An object's controllers, up the chain of ``ownerReferences`` with ``controller: true``, read from a cache.

A Job's pod is controlled by the Job; a JobSet's by its child Job, itself controlled by the JobSet; a
Deployment's by a ReplicaSet. Each step is looked up among the resources the cache holds, by the reference's
group and kind, and must carry the reference's UID (an object deleted and made again under the same name is
another one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from gpufleet.k8s.resources import ResourceType

JsonDict = dict[str, Any]
Lookup = Callable[[ResourceType, str], Mapping[str, Any] | None]  # ObjectCache.get
MAX_DEPTH = 4  # a pod, its Job, the JobSet or TrainJob above: no controller chain of ours goes deeper


def controller_ref(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The reference to ``obj``'s controller, when it has one shaped as the API shapes it."""
    meta = obj.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, Mapping) and ref.get("controller") is True and all(
                isinstance(ref.get(k), str) and ref.get(k) for k in ("apiVersion", "kind", "name", "uid")):
            return ref
    return None


def controllers(obj: Mapping[str, Any], resources: Sequence[ResourceType],
                lookup: Lookup) -> Iterator[tuple[ResourceType, Mapping[str, Any]]]:
    """``obj``'s controller, its controller's, and so on, as far as the cache holds them (namespaced kinds, in
    ``obj``'s namespace)."""
    meta = obj.get("metadata")
    namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
    if not isinstance(namespace, str) or not namespace:
        return
    by_kind = {(res.group, res.kind): res for res in resources if res.namespaced}
    for _ in range(MAX_DEPTH):
        ref = controller_ref(obj)
        if ref is None:
            return
        group = str(ref["apiVersion"]).rpartition("/")[0]
        res = by_kind.get((group, str(ref["kind"])))
        found = lookup(res, f"{namespace}/{ref['name']}") if res is not None else None
        if res is None or found is None or (found.get("metadata") or {}).get("uid") != ref["uid"]:
            return
        yield res, found
        obj = found
