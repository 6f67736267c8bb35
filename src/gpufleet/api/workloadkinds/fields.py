"""The fields each kind gpufleet reads may have, so that a misspelt one is said, never silently ignored.

A schema is a mapping from field name to the schema below it; ``ANY`` stops the check (a map of labels, a status,
a part of a spec gpufleet passes over); :class:`ListOf` and :class:`MapOf` describe lists and maps of one schema.
Only what is written here is checked: the levels gpufleet reads, and the Kubernetes objects they embed (object
metadata, pod templates, Job specs). A field not in the schema is a warning with its file and line and, when a
known field is close, the one probably meant (``queueingStrategie`` -> ``queueingStrategy``). A field the kind has
but gpufleet's placement does not honour (:class:`Unread`: inter-pod affinity, topology spread, pod-level
resources, runtime overhead) is said too, as left out, where it is written.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from gpufleet.api.errors import LEFT_OUT
from gpufleet.api.reader import FieldReader


@dataclass(frozen=True, slots=True)
class ListOf:
    item: Schema


@dataclass(frozen=True, slots=True)
class MapOf:
    value: Schema


@dataclass(frozen=True, slots=True)
class Unread:
    """A field the kind has and gpufleet does not honour: said when present, as left out."""

    what: str


Schema: TypeAlias = "Mapping[str, Schema] | ListOf | MapOf | Unread | None"
ANY: Schema = None
MAX_WARNINGS_PER_DOCUMENT = 20


def _fields(*names: str, **nested: Schema) -> dict[str, Schema]:
    return {**dict.fromkeys(names, ANY), **nested}


META = _fields("name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
               "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
               "ownerReferences", "finalizers", "managedFields")
RESOURCES = _fields("requests", "limits", claims=ListOf(_fields("name", "request")))
CONTAINER = _fields(
    "name", "image", "command", "args", "workingDir", "ports", "envFrom", "env", "resizePolicy", "restartPolicy",
    "restartPolicyRules", "volumeMounts", "volumeDevices", "livenessProbe", "readinessProbe", "startupProbe",
    "lifecycle", "terminationMessagePath", "terminationMessagePolicy", "imagePullPolicy", "securityContext",
    "stdin", "stdinOnce", "tty", resources=RESOURCES)
_PLACED_WITHOUT = "gpufleet places the pods without it"
POD_SPEC = _fields(
    "volumes", "ephemeralContainers", "restartPolicy", "terminationGracePeriodSeconds", "activeDeadlineSeconds",
    "dnsPolicy", "nodeSelector", "serviceAccountName", "serviceAccount", "automountServiceAccountToken",
    "nodeName", "hostNetwork", "hostPID", "hostIPC", "shareProcessNamespace", "securityContext", "imagePullSecrets",
    "hostname", "hostnameOverride", "subdomain", "schedulerName", "tolerations", "hostAliases",
    "priorityClassName", "priority", "dnsConfig", "readinessGates", "runtimeClassName", "enableServiceLinks",
    "preemptionPolicy", "setHostnameAsFQDN", "os", "hostUsers", "schedulingGates", "workloadRef",
    affinity=_fields("nodeAffinity", podAffinity=Unread(f"inter-pod affinity: {_PLACED_WITHOUT}"),
                     podAntiAffinity=Unread(f"inter-pod anti-affinity: {_PLACED_WITHOUT}")),
    topologySpreadConstraints=Unread(f"topology spread constraints: {_PLACED_WITHOUT}"),
    overhead=Unread("the runtime's overhead: it is not added to the pod's requests"),
    resources=Unread("pod-level resources: the containers' resources are what gpufleet counts"),
    # read onto the pod (gpufleet.api.dra_podclaims), whose devices gpufleet.cluster.dra_claims plans
    resourceClaims=ListOf(_fields("name", "resourceClaimName", "resourceClaimTemplateName")),
    containers=ListOf(CONTAINER), initContainers=ListOf(CONTAINER))
POD_TEMPLATE = {"metadata": META, "spec": POD_SPEC}
JOB_SPEC = _fields(
    "parallelism", "completions", "activeDeadlineSeconds", "podFailurePolicy", "successPolicy", "backoffLimit",
    "backoffLimitPerIndex", "maxFailedIndexes", "selector", "manualSelector", "ttlSecondsAfterFinished",
    "completionMode", "suspend", "podReplacementPolicy", "managedBy", template=POD_TEMPLATE)
JOB_TEMPLATE = {"metadata": META, "spec": JOB_SPEC}


def _object(spec: Schema, *top: str) -> dict[str, Schema]:
    return {**_fields("apiVersion", "kind", "status", *top), "metadata": META, "spec": spec}


_REPLICA_SPEC = _fields("replicas", "restartPolicy", template=POD_TEMPLATE)
_RUN_POLICY = _fields("cleanPodPolicy", "ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit",
                      "suspend", "managedBy", "jobSuccessPolicy",
                      schedulingPolicy=_fields("minAvailable", "queue", "minResources", "priorityClass",
                                               "scheduleTimeoutSeconds"))


def _kubeflow(field: str, *extra: str) -> dict[str, Schema]:
    return _object({**_fields(*extra), field: MapOf(_REPLICA_SPEC), "runPolicy": _RUN_POLICY})


_JOBSET_SPEC = _fields(
    "network", "successPolicy", "failurePolicy", "startupPolicy", "suspend", "coordinator", "managedBy",
    "ttlSecondsAfterFinished",
    replicatedJobs=ListOf(_fields("name", "replicas", "dependsOn", "groupName", template=JOB_TEMPLATE)))
_RAY_CLUSTER_SPEC = _fields(
    "rayVersion", "enableInTreeAutoscaling", "autoscalerOptions", "headServiceAnnotations", "suspend", "managedBy",
    "gcsFaultToleranceOptions", "upgradeStrategy", "authOptions",
    headGroupSpec=_fields("rayStartParams", "serviceType", "headService", "enableIngress", "resources", "labels",
                          template=POD_TEMPLATE),
    workerGroupSpecs=ListOf(_fields("groupName", "replicas", "minReplicas", "maxReplicas", "numOfHosts",
                                    "rayStartParams", "scaleStrategy", "suspend", "idleTimeoutSeconds",
                                    "resources", "labels", template=POD_TEMPLATE)))
_RESOURCE_GROUPS = ListOf(_fields("coveredResources", flavors=ListOf(_fields(
    "name", resources=ListOf(_fields("name", "nominalQuota", "borrowingLimit", "lendingLimit"))))))

SCHEMAS: dict[tuple[str, str], dict[str, Schema]] = {
    ("", "Pod"): _object(POD_SPEC),
    ("", "Node"): _object(_fields("podCIDR", "podCIDRs", "providerID", "unschedulable", "taints", "configSource",
                                  "externalID")),
    ("", "Namespace"): _object(ANY),
    ("scheduling.k8s.io", "PriorityClass"): _object(ANY, "value", "globalDefault", "description",
                                                    "preemptionPolicy"),
    ("batch", "Job"): _object(JOB_SPEC),
    ("batch", "CronJob"): _object(_fields("schedule", "timeZone", "startingDeadlineSeconds", "concurrencyPolicy",
                                          "suspend", "successfulJobsHistoryLimit", "failedJobsHistoryLimit",
                                          jobTemplate=JOB_TEMPLATE)),
    **{("apps", k): _object(_fields("replicas", "selector", "minReadySeconds", "revisionHistoryLimit", *extra,
                                    template=POD_TEMPLATE))
       for k, extra in (("Deployment", ("strategy", "paused", "progressDeadlineSeconds")), ("ReplicaSet", ()),
                        ("StatefulSet", ("serviceName", "volumeClaimTemplates", "podManagementPolicy",
                                         "updateStrategy", "persistentVolumeClaimRetentionPolicy", "ordinals")))},
    ("jobset.x-k8s.io", "JobSet"): _object(_JOBSET_SPEC),
    ("kubeflow.org", "PyTorchJob"): _kubeflow("pytorchReplicaSpecs", "elasticPolicy", "nprocPerNode"),
    ("kubeflow.org", "TFJob"): _kubeflow("tfReplicaSpecs", "successPolicy", "enableDynamicWorker"),
    ("kubeflow.org", "XGBoostJob"): _kubeflow("xgbReplicaSpecs"),
    ("kubeflow.org", "PaddleJob"): _kubeflow("paddleReplicaSpecs", "elasticPolicy"),
    ("kubeflow.org", "MPIJob"): _kubeflow("mpiReplicaSpecs", "slotsPerWorker", "sshAuthMountPath",
                                          "mpiImplementation", "launcherCreationPolicy", "runLauncherAsWorker",
                                          "cleanPodPolicy", "mainContainer"),
    ("trainer.kubeflow.org", "TrainJob"): _object(_fields(
        "runtimeRef", "initializer", "labels", "annotations", "podTemplateOverrides", "podSpecOverrides", "suspend",
        "managedBy", "runtimePatches",
        trainer=_fields("image", "command", "args", "env", "numNodes", "resourcesPerNode", "numProcPerNode"))),
    ("trainer.kubeflow.org", "TrainingRuntime"): _object(_fields("mlPolicy", "podGroupPolicy",
                                                                 template={"metadata": META, "spec": _JOBSET_SPEC})),
    ("trainer.kubeflow.org", "ClusterTrainingRuntime"): _object(_fields(
        "mlPolicy", "podGroupPolicy", template={"metadata": META, "spec": _JOBSET_SPEC})),
    ("ray.io", "RayCluster"): _object(_RAY_CLUSTER_SPEC),
    ("ray.io", "RayJob"): _object(_fields(
        "entrypoint", "runtimeEnvYAML", "jobId", "shutdownAfterJobFinishes", "ttlSecondsAfterFinished",
        "activeDeadlineSeconds", "clusterSelector", "submitterConfig", "suspend", "submissionMode",
        "entrypointNumCpus", "entrypointNumGpus", "entrypointResources", "backoffLimit", "managedBy",
        "deletionStrategy", "metadata", rayClusterSpec=_RAY_CLUSTER_SPEC, submitterPodTemplate=POD_TEMPLATE)),
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): _object(_fields(
        "replicas", "startupPolicy", "rolloutStrategy", "networkConfig",
        leaderWorkerTemplate=_fields("size", "restartPolicy", "subGroupPolicy", "volumeClaimTemplates",
                                     leaderTemplate=POD_TEMPLATE, workerTemplate=POD_TEMPLATE))),
    ("batch.volcano.sh", "Job"): _object(_fields(
        "schedulerName", "minAvailable", "volumes", "policies", "plugins", "runningEstimate", "queue", "maxRetry",
        "ttlSecondsAfterFinished", "priorityClassName", "minSuccess", "networkTopology",
        tasks=ListOf(_fields("name", "replicas", "minAvailable", "policies", "topologyPolicy", "maxRetry",
                             "dependsOn", "partitionPolicy", template=POD_TEMPLATE)))),
    ("scheduling.volcano.sh", "PodGroup"): _object(_fields("minMember", "minTaskMember", "queue",
                                                           "priorityClassName", "minResources", "networkTopology",
                                                           "subGroupPolicy")),
    ("scheduling.volcano.sh", "Queue"): _object(_fields("weight", "capability", "reclaimable", "guarantee",
                                                        "deserved", "parent", "affinity", "type", "extendClusters",
                                                        "dequeueStrategy", "priority")),
    ("scheduling.run.ai", "PodGroup"): _object(_fields(
        "minMember", "queue", "priorityClassName", "preemptibility", "parallelism", "completions", "backoffLimit",
        "markUnschedulable", "schedulingBackoff", "topologyConstraint", "subGroups")),
    ("scheduling.run.ai", "Queue"): _object(_fields("displayName", "parentQueue", "priority", "preemptMinRuntime",
                                                    "reclaimMinRuntime", resources=MapOf(_fields(
                                                        "quota", "limit", "overQuotaWeight")))),
    # Kueue's CRDs, v1beta1 and v1beta2 together (every field of v1beta2 is known: honoured, or said not to be by
    # gpufleet.api.workloadkinds.kueuefeatures)
    ("kueue.x-k8s.io", "ResourceFlavor"): _object(_fields("nodeLabels", "nodeTaints", "tolerations",
                                                          "topologyName", "resourceWeights")),
    ("kueue.x-k8s.io", "ClusterQueue"): _object(_fields(
        "cohort", "cohortName", "namespaceSelector", "queueingStrategy", "stopPolicy", "admissionChecks",
        "admissionChecksStrategy", "admissionScope", "waitForPodsReady", "concurrentAdmissionPolicy",
        resourceGroups=_RESOURCE_GROUPS,
        preemption=_fields("withinClusterQueue", "reclaimWithinCohort",
                           borrowWithinCohort=_fields("policy", "maxPriorityThreshold")),
        flavorFungibility=_fields("whenCanBorrow", "whenCanPreempt", "preference"), fairSharing=_fields("weight"))),
    ("kueue.x-k8s.io", "LocalQueue"): _object(_fields("clusterQueue", "stopPolicy", "fairSharing",
                                                      "wallTimePolicy")),
    ("kueue.x-k8s.io", "Cohort"): _object(_fields("parentName", "parent", "resourceGroups", "fairSharing")),
    ("kueue.x-k8s.io", "WorkloadPriorityClass"): _object(ANY, "value", "description"),
    ("kueue.x-k8s.io", "Workload"): _object(_fields(
        "queueName", "priority", "priorityClassName", "priorityClassSource", "priorityClassRef", "active",
        "maximumExecutionTimeSeconds",
        podSets=ListOf(_fields("name", "count", "minCount", "topologyRequest", template=POD_TEMPLATE)))),
    ("kueue.x-k8s.io", "Topology"): _object(_fields(levels=ListOf(_fields("nodeLabel")))),
    ("kueue.x-k8s.io", "AdmissionCheck"): _object(_fields("controllerName", "retryDelayMinutes", "parameters")),
    ("config.kueue.x-k8s.io", "Configuration"): _fields(
        "apiVersion", "kind", "namespace", "manageJobsWithoutQueueName", "managedJobsNamespaceSelector",
        "waitForPodsReady", "fairSharing", "admissionFairSharing", "integrations", "featureGates",
        "controller", "health", "metrics", "webhook", "leaderElection", "internalCertManagement",
        "clientConnection", "queueVisibility", "multiKueue", "objectRetentionPolicies", "dra",
        resources=_fields("excludeResourcePrefixes", "transformations",
                          deviceClassMappings=ListOf(_fields("name", "deviceClassNames", "sources")))),
    ("gpufleet.io", "NodePool"): _object(_fields(
        "count", "namePrefix", "cpu", "memory", "pods", "labels", "taints",
        gpu=_fields("model", "count", "memory", "migLayout", "nvlink"),
        sharing=_fields("migStrategy", timeSlicing=_fields("renameByDefault", "failRequestsGreaterThanOne",
                                                           "replicas", "resources")),
        topology=ListOf(_fields("nodeLabel", "values", "nodesPerDomain")))),
}
for _k in ("ResourceFlavor", "ClusterQueue", "LocalQueue", "Cohort", "WorkloadPriorityClass", "Workload", "Topology"):
    SCHEMAS[("gpufleet.io", _k)] = SCHEMAS[("kueue.x-k8s.io", _k)]


def check_fields(r: FieldReader, group: str, kind: str) -> int:
    """Warn about every field of the document that its kind does not have; how many were warned about."""
    schema = SCHEMAS.get((group, kind))
    if schema is None:
        return 0
    return check_schema(r, schema, kind)


def check_schema(r: FieldReader, schema: Mapping[str, Schema], kind: str) -> int:
    """:func:`check_fields` against a schema the caller chooses (a kind whose fields differ between versions, such
    as DRA's v1 and v1beta1, checks each version against its own); how many fields were warned about."""
    found: list[tuple[tuple[str | int, ...], str, list[str]]] = []
    unread: dict[str, tuple[tuple[str | int, ...], str]] = {}
    _walk(r.value, schema, (), found, unread)
    for what, (path, key) in unread.items():  # once per document: a JobSet's every template says the same
        r.warning(f"{key} is not honoured by gpufleet ({what}; left out)", *path, key,
                  fix="expect placement to differ from kube-scheduler's here, or drop the field", code=LEFT_OUT)
    for path, key, known in found[:MAX_WARNINGS_PER_DOCUMENT]:
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
        where = ".".join(str(p) for p in path if isinstance(p, str)) or "the top level"
        fix = f"did you mean {close[0]}?" if close else f"remove it; the fields known at {where} are " + \
            ", ".join(sorted(known)[:12]) + (", ..." if len(known) > 12 else "")
        r.warning(f"unknown field {key!r} in {kind}: it is ignored (left out)", *path, key, fix=fix, code=LEFT_OUT)
    if len(found) > MAX_WARNINGS_PER_DOCUMENT:
        r.warning(f"{len(found) - MAX_WARNINGS_PER_DOCUMENT} more unknown fields in this {kind} (left out)",
                  fix="check the document against its kind's API reference", code=LEFT_OUT)
    return len(found)


def _walk(value: Any, schema: Schema, path: tuple[str | int, ...],
          found: list[tuple[tuple[str | int, ...], str, list[str]]],
          unread: dict[str, tuple[tuple[str | int, ...], str]]) -> None:
    if schema is None or len(found) > MAX_WARNINGS_PER_DOCUMENT:
        return
    if isinstance(schema, Unread):
        if value not in (None, {}, []) and schema.what not in unread:
            unread[schema.what] = (path[:-1], str(path[-1]))
        return
    if isinstance(schema, ListOf):
        if isinstance(value, list):
            for i, item in enumerate(value):
                _walk(item, schema.item, (*path, i), found, unread)
        return
    if not isinstance(value, Mapping):
        return
    if isinstance(schema, MapOf):
        for k, v in value.items():
            _walk(v, schema.value, (*path, str(k)), found, unread)
        return
    for k, v in value.items():
        key = str(k)
        if key not in schema:
            found.append((path, key, list(schema)))
            continue
        _walk(v, schema[key], (*path, key), found, unread)
