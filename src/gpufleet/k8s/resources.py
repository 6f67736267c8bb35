"""The resource types gpufleet talks to, and how their URLs are built.

No discovery here: the set is fixed; which of the optional kinds (Kueue's, the workload kinds' CRDs) a cluster
serves is asked once at start (:mod:`gpufleet.k8s.discovery`), never guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from gpufleet.api.workloadkinds.table import api_resources

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

# What the scheduler's informers watch: everything a scheduling cycle reads (with gpufleet.io's queue kinds;
# gpufleet.live.queuesource swaps in Kueue's where Kueue's own objects are the source).
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

# Kueue's own API (kueue.x-k8s.io/v1beta1): the same queue kinds, read as Kueue users already have them, plus
# the Workloads Kueue's controller admits and the AdmissionChecks it asks controllers like ours to answer.
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta1"
KUEUE_RESOURCE_FLAVORS = ResourceType(KUEUE_GROUP, KUEUE_VERSION, "resourceflavors", "ResourceFlavor", namespaced=False)
KUEUE_CLUSTER_QUEUES = ResourceType(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", "ClusterQueue", namespaced=False)
KUEUE_LOCAL_QUEUES = ResourceType(KUEUE_GROUP, KUEUE_VERSION, "localqueues", "LocalQueue", namespaced=True)
KUEUE_COHORTS = ResourceType(KUEUE_GROUP, KUEUE_VERSION, "cohorts", "Cohort", namespaced=False)
KUEUE_WORKLOAD_PRIORITY_CLASSES = ResourceType(KUEUE_GROUP, KUEUE_VERSION, "workloadpriorityclasses",
                                               "WorkloadPriorityClass", namespaced=False)
KUEUE_TOPOLOGIES = ResourceType(KUEUE_GROUP, KUEUE_VERSION, "topologies", "Topology", namespaced=False)
KUEUE_WORKLOADS = ResourceType(KUEUE_GROUP, KUEUE_VERSION, "workloads", "Workload", namespaced=True)
KUEUE_ADMISSION_CHECKS = ResourceType(KUEUE_GROUP, KUEUE_VERSION, "admissionchecks", "AdmissionCheck",
                                      namespaced=False)

# The queue kinds per source, in the same order: (flavors, cluster queues, local queues, cohorts, workload
# priority classes).
GPUFLEET_QUEUE_RESOURCES: tuple[ResourceType, ...] = (RESOURCE_FLAVORS, CLUSTER_QUEUES, LOCAL_QUEUES, COHORTS,
                                                      WORKLOAD_PRIORITY_CLASSES)
KUEUE_QUEUE_RESOURCES: tuple[ResourceType, ...] = (KUEUE_RESOURCE_FLAVORS, KUEUE_CLUSTER_QUEUES, KUEUE_LOCAL_QUEUES,
                                                   KUEUE_COHORTS, KUEUE_WORKLOAD_PRIORITY_CLASSES)

# NVIDIA's configuration as the GPU Operator keeps it: the device plugin's and mig-parted's ConfigMaps, and the
# ClusterPolicy that names them (read by `gpufleet snapshot`, never by the scheduler).
CONFIG_MAPS = ResourceType("", "v1", "configmaps", "ConfigMap", namespaced=True)
CLUSTER_POLICIES = ResourceType("nvidia.com", "v1", "clusterpolicies", "ClusterPolicy", namespaced=False)

# DRA (Kubernetes 1.34+): the node agent's `--dra` mode publishes this node's GPUs as ResourceSlices of NVIDIA's
# driver gpu.nvidia.com (gpufleet.node.dra_publisher); cluster-scoped, one pool per node.
RESOURCE_SLICES = ResourceType("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", namespaced=False)
DEVICE_CLASSES = ResourceType("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", namespaced=False)
RESOURCE_CLAIMS = ResourceType("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", namespaced=True)
RESOURCE_CLAIM_TEMPLATES = ResourceType("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate",
                                        namespaced=True)
# What the live scheduler reads of DRA when the API server serves resource.k8s.io/v1 (Kubernetes 1.34 and later).
DRA_RESOURCES: tuple[ResourceType, ...] = (RESOURCE_SLICES, DEVICE_CLASSES, RESOURCE_CLAIMS, RESOURCE_CLAIM_TEMPLATES)

# The workload kinds (Jobs, JobSets, Deployments, Kubeflow's and Ray's jobs...) and the kinds they refer to (Volcano's
# and KAI's queues, training runtimes, Kueue's AdmissionChecks), at the version gpufleet reads first, as the one
# table of workload kinds lists them (gpufleet.api.workloadkinds.table). The scheduler watches those the cluster
# serves (gpufleet.live.workloadsource, in the version discovery finds); their keys do not depend on the version.
WORKLOAD_RESOURCES: tuple[ResourceType, ...] = tuple(
    KUEUE_ADMISSION_CHECKS if (group, kind) == (KUEUE_GROUP, "AdmissionCheck")
    else ResourceType(group, version, plural, kind, namespaced=namespaced)
    for group, version, plural, kind, namespaced in api_resources())

# Every type gpufleet knows by its resource key (for logs, events and the set-aside objects of a cycle).
ALL_RESOURCES: tuple[ResourceType, ...] = tuple(dict.fromkeys((
    NODES, PODS, NAMESPACES, PRIORITY_CLASSES, LEASES, EVENTS, *GPUFLEET_QUEUE_RESOURCES, NODE_POOLS,
    *KUEUE_QUEUE_RESOURCES, KUEUE_TOPOLOGIES, KUEUE_WORKLOADS, KUEUE_ADMISSION_CHECKS, CONFIG_MAPS, CLUSTER_POLICIES,
    *WORKLOAD_RESOURCES,
)))


def by_key(key: str) -> ResourceType | None:
    """The known type with this :attr:`ResourceType.key`; None for a key gpufleet does not know."""
    return _BY_KEY.get(key)


_BY_KEY = {res.key: res for res in ALL_RESOURCES}
