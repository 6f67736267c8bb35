"""Live API objects → gpufleet's typed objects, through exactly the parsers manifests go through.

Each raw dict from the informer cache is wrapped in a :class:`~gpufleet.api.source.Document` and handed to
:func:`gpufleet.api.manifests.build`, so a Pod read from the API and the same Pod read from a YAML file
become the same object, with the same validation and the same error messages.

Parsing every pod each cycle would cost more than scheduling, so results are memoised by resourceVersion:
a cycle reparses only what changed since the last one. Nodes and Pods are parsed one object at a time
(nothing about them depends on other objects); the queue kinds are parsed together, because build checks
references between them (a ClusterQueue naming a missing ResourceFlavor is dropped with an error), and are
few.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.api.errors import ManifestError, Problems
from gpufleet.api.manifests import Manifests, build
from gpufleet.api.objects import Node, Pod
from gpufleet.api.source import Document
from gpufleet.kube.resources import ResourceType

SOURCE = "<api>"
log = logging.getLogger(__name__)
# The memo key of a foreign pod's resources-only parse (kept apart from its full parse).
_HOLDINGS = ResourceType("", "v1", "pods (resources only)", "Pod", namespaced=True)
_HOLDINGS_OF = "pods"  # ResourceType("", "v1", "pods", ...).key: forgetting pods forgets their slim parses too

JsonDict = dict[str, Any]


def document(obj: Mapping[str, Any], index: int = 0) -> Document:
    return Document(data=obj, file=SOURCE, line=0, index=index)


def _rv(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


@dataclass(frozen=True, slots=True)
class Parsed:
    """One object's parse: the typed object (None when invalid) and its problems."""

    obj: Node | Pod | None
    errors: tuple[ManifestError, ...]

    @property
    def message(self) -> str:
        return "; ".join(f"{e.field}: {e.message}" if e.field else e.message for e in self.errors)


class ParseCache:
    """Memoised parses of Nodes and Pods (by resourceVersion) and of the queue kinds (as one set)."""

    def __init__(self) -> None:
        self._single: dict[tuple[str, str], tuple[str, Parsed]] = {}
        self._queues: tuple[tuple[tuple[str, str, str], ...], Manifests] | None = None
        self.parses = 0  # objects parsed (not served from the memo), for the benchmark and tests

    def one(self, resource: ResourceType, key: str, obj: Mapping[str, Any]) -> Parsed:
        rv = _rv(obj)
        hit = self._single.get((resource.key, key))
        if hit is not None and rv and hit[0] == rv:
            return hit[1]
        self.parses += 1
        try:
            manifests = build([document(obj)])
        except Exception as exc:  # a parser bug must cost this object only, never the cycle
            log.exception("parsing %s %s failed", resource.kind, key)
            parsed = Parsed(None, (ManifestError(f"gpufleet could not read it ({type(exc).__name__}); this is a "
                                                 "bug, please report it with the object", kind=resource.kind,
                                                 name=key),))
        else:
            typed: Node | Pod | None = None
            if resource.kind == "Node" and manifests.nodes:
                typed = manifests.nodes[0]
            elif resource.kind == "Pod" and manifests.pods:
                typed = manifests.pods[0]
            parsed = Parsed(typed, tuple(manifests.problems.errors))
        self._single[(resource.key, key)] = (rv, parsed)
        return parsed

    def holdings(self, key: str, obj: Mapping[str, Any]) -> Pod | None:
        """Another scheduler's bound pod that does not parse, read for what it holds on its node: its name and
        its containers' resources, nothing else (its annotations, affinity and the like are not ours to judge).
        None when not even that parses: its node's capacity is then not charged for it."""
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
        spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
        assert isinstance(meta, Mapping) and isinstance(spec, Mapping)

        def containers(field: str) -> list[Any]:
            items = spec.get(field)
            return [{"name": c.get("name"), "resources": c.get("resources")} for c in items
                    if isinstance(c, Mapping)] if isinstance(items, list) else []

        slim = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {k: meta.get(k) for k in ("name", "namespace", "uid", "resourceVersion")},
                "spec": {"containers": containers("containers"), "initContainers": containers("initContainers"),
                         "nodeName": spec.get("nodeName")}}
        parsed = self.one(_HOLDINGS, key, slim)
        return parsed.obj if isinstance(parsed.obj, Pod) else None

    def forget_except(self, resource: ResourceType, live: Iterable[str]) -> None:
        """Drop memoised parses of objects that no longer exist."""
        keep = set(live)
        kinds = {resource.key, _HOLDINGS.key} if resource.key == _HOLDINGS_OF else {resource.key}
        for memo_key in [k for k in self._single if k[0] in kinds and k[1] not in keep]:
            del self._single[memo_key]

    def queues(self, objects: Iterable[Mapping[str, Any]]) -> Manifests:
        """PriorityClasses, Namespaces and the Kueue kinds, parsed and cross-checked together."""
        docs = sorted(objects, key=lambda o: (str(o.get("kind")), str((o.get("metadata") or {}).get("namespace")),
                                              str((o.get("metadata") or {}).get("name"))))
        stamp = tuple((str(o.get("kind")), str((o.get("metadata") or {}).get("name")), _rv(o)) for o in docs)
        if self._queues is not None and self._queues[0] == stamp and all(s[2] for s in stamp):
            return self._queues[1]
        manifests = build([document(o, i) for i, o in enumerate(docs)], Problems())
        self.parses += len(docs)
        self._queues = (stamp, manifests)
        return manifests
