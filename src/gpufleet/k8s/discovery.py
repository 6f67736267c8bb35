"""What the API server serves, from its discovery endpoints: which group versions exist, which kinds they hold.

The scheduler's own resource set is fixed (:mod:`gpufleet.k8s.resources`); discovery answers the questions a
fixed set cannot: is Kueue installed (``queues.source: auto``), and, for ``gpufleet snapshot``, which of the
workload kinds people run on GPUs (JobSet, PyTorchJob, RayJob, ...) this cluster has, in which version.

Discovery needs no permission beyond authentication (the built-in ``system:discovery`` role), so asking never
fails for lack of RBAC; whether the objects may be *listed* is a separate question (:func:`can_list`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.errors import Forbidden, NotFound
from gpufleet.k8s.resources import ResourceType


@dataclass(slots=True)
class Discovery:
    """Cached answers for one client: a group's preferred version and a group version's kinds."""

    client: KubeClient
    _versions: dict[str, tuple[str, ...] | None] = field(default_factory=dict)
    _kinds: dict[tuple[str, str], dict[str, ResourceType] | None] = field(default_factory=dict)

    def versions(self, group: str) -> tuple[str, ...] | None:
        """The versions the server serves for ``group``, preferred first; None when the group is not served."""
        if group == "":
            return ("v1",)
        if group not in self._versions:
            try:
                doc = self.client.request("GET", f"/apis/{group}")
            except NotFound:
                self._versions[group] = None
            else:
                self._versions[group] = _group_versions(doc)
        return self._versions[group]

    def kinds(self, group: str, version: str) -> dict[str, ResourceType] | None:
        """Kind -> resource type of the top-level resources ``group/version`` serves; None when not served."""
        key = (group, version)
        if key not in self._kinds:
            path = f"/api/{version}" if group == "" else f"/apis/{group}/{version}"
            try:
                doc = self.client.request("GET", path)
            except NotFound:
                self._kinds[key] = None
            else:
                self._kinds[key] = _resource_types(group, version, doc)
        return self._kinds[key]

    def find(self, group: str, kind: str, versions: tuple[str, ...] = ()) -> ResourceType | None:
        """The served resource type of ``kind`` in ``group``: in the first of ``versions`` the server serves
        (the versions gpufleet reads), else in the group's preferred version; None when not served."""
        served = self.versions(group)
        if not served:
            return None
        for version in [v for v in versions if v in served] or ([] if versions else [served[0]]):
            found = (self.kinds(group, version) or {}).get(kind)
            if found is not None:
                return found
        return None

    def serves(self, resource: ResourceType) -> bool:
        """Whether ``resource`` (group, version and plural exactly) is served."""
        served = self.kinds(resource.group, resource.version) or {}
        return any(t.plural == resource.plural for t in served.values())


def can_list(client: KubeClient, resource: ResourceType) -> bool:
    """Whether this client may list ``resource`` cluster-wide (one item asked for; False on 403)."""
    try:
        client.list(resource, limit=1)
    except Forbidden:
        return False
    return True


def _group_versions(doc: Any) -> tuple[str, ...]:
    if not isinstance(doc, Mapping):
        return ()
    preferred = (doc.get("preferredVersion") or {}).get("version")
    versions = [str(v.get("version")) for v in doc.get("versions") or [] if isinstance(v, Mapping) and v.get("version")]
    if preferred and preferred in versions:
        versions.remove(preferred)
        versions.insert(0, str(preferred))
    return tuple(versions)


def _resource_types(group: str, version: str, doc: Any) -> dict[str, ResourceType]:
    out: dict[str, ResourceType] = {}
    if not isinstance(doc, Mapping):
        return out
    for item in doc.get("resources") or []:
        if not isinstance(item, Mapping):
            continue
        name, kind = str(item.get("name") or ""), str(item.get("kind") or "")
        if not name or not kind or "/" in name:  # subresources (pods/status) are not kinds of their own
            continue
        out.setdefault(kind, ResourceType(group, version, name, kind, namespaced=bool(item.get("namespaced"))))
    return out
