"""The resource types gpufleet talks to, and how their URLs are built.

No discovery: the set is fixed and small, and a scheduler should fail loudly (404 at list time) rather
than guess a version when a CRD is missing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

GROUP = "gpufleet.io"
VERSION = "v1alpha1"


@dataclass(frozen=True, slots=True)
class ResourceType:
    group: str  # "" for the core API
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """A stable name for caches and logs: ``pods``, ``clusterqueues.gpufleet.io``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """The URL path. A namespaced type without a namespace gives the all-namespaces collection."""
        if namespace is not None and not self.namespaced:
            raise ValueError(f"{self.key} is cluster-scoped; got namespace {namespace!r}")
        if name is not None and self.namespaced and namespace is None:
            raise ValueError(f"{self.key} is namespaced; a name needs a namespace")
        if subresource is not None and name is None:
            raise ValueError("a subresource needs an object name")
        parts = ["/api", self.version] if not self.group else ["/apis", self.group, self.version]
        if namespace is not None:
            parts += ["namespaces", quote(namespace, safe="")]
        parts.append(self.plural)
        if name is not None:
            parts.append(quote(name, safe=""))
        if subresource is not None:
            parts.append(subresource)
        return "/".join(parts)

    def object_key(self, obj: Mapping[str, Any]) -> str:
        """client-go's MetaNamespaceKey: ``namespace/name``, or ``name`` for cluster-scoped types."""
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        if self.namespaced:
            return f"{meta.get('namespace') or ''}/{name}"
        return name


NODES = ResourceType("", "v1", "nodes", "Node", namespaced=False)
PODS = ResourceType("", "v1", "pods", "Pod", namespaced=True)
NAMESPACES = ResourceType("", "v1", "namespaces", "Namespace", namespaced=False)
PRIORITY_CLASSES = ResourceType("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False)
LEASES = ResourceType("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True)
EVENTS = ResourceType("events.k8s.io", "v1", "events", "Event", namespaced=True)

RESOURCE_FLAVORS = ResourceType(GROUP, VERSION, "resourceflavors", "ResourceFlavor", namespaced=False)
CLUSTER_QUEUES = ResourceType(GROUP, VERSION, "clusterqueues", "ClusterQueue", namespaced=False)
LOCAL_QUEUES = ResourceType(GROUP, VERSION, "localqueues", "LocalQueue", namespaced=True)
COHORTS = ResourceType(GROUP, VERSION, "cohorts", "Cohort", namespaced=False)
WORKLOAD_PRIORITY_CLASSES = ResourceType(
    GROUP, VERSION, "workloadpriorityclasses", "WorkloadPriorityClass", namespaced=False
)
NODE_POOLS = ResourceType(GROUP, VERSION, "nodepools", "NodePool", namespaced=False)

# Create-only reviews: who a bearer token belongs to, and whether that user may do something (secure metrics).
TOKEN_REVIEWS = ResourceType("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", namespaced=False)
SUBJECT_ACCESS_REVIEWS = ResourceType("authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview",
                                      namespaced=False)

# What the scheduler's informers watch: everything a scheduling cycle reads.
SCHEDULER_RESOURCES: tuple[ResourceType, ...] = (
    NODES,
    PODS,
    PRIORITY_CLASSES,
    NAMESPACES,
    RESOURCE_FLAVORS,
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    COHORTS,
    WORKLOAD_PRIORITY_CLASSES,
)
