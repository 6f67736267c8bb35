"""What every workload kind means for scheduling, written once.

One :class:`~gpufleet.api.workloadkinds.model.KindRule` per kind: the versions read, how its pods become workloads
(gang, per group, per pod, or the pods that reference it), how its controller names pods, where its queue, its
suspension and its priority class come from, which Kueue integration it follows, and the pod labels by which a
live pod names it. The parsers (one module per family), the grouping into workloads
(:mod:`gpufleet.cluster.grouping`), the README's list of kinds and the live scheduler all read this table.

Pod names: the API server gives pods created from a ``generateName`` 5 random characters; gpufleet derives those 5
characters from the owner's namespace, name and the pod's position instead (:mod:`.names`), so the same input always
gives the same names. Written ``<sfx>`` below.

Also here: the API versions gpufleet reads for every group it knows (an unknown version of a known group is an
error), and the well-known kinds gpufleet does not read (named as such, not "check the spelling").
"""

from __future__ import annotations

from gpufleet.api.dra_objects import DRA_GROUP, DRA_VERSIONS
from gpufleet.api.workloadkinds.model import KindRule, OwnerLabels

_JOB_LABELS = OwnerLabels("batch.kubernetes.io/job-name", index="batch.kubernetes.io/job-completion-index")
_KUBEFLOW_PRIORITY = ("spec.runPolicy.schedulingPolicy.priorityClass, else the first replica template's "
                      "priorityClassName (in pod-set order)")


def _kubeflow(kind: str, controller: str, pod_sets: str) -> KindRule:
    return KindRule(
        "kubeflow.org", kind, ("v1",), "gang",
        pod_names=f"<name>-<replica type, lower case>-<index> ({pod_sets})",
        queue="label kueue.x-k8s.io/queue-name on the object", suspend="spec.runPolicy.suspend",
        priority=_KUBEFLOW_PRIORITY, kueue=f"kubeflow.org/{kind.lower()}",
        owner_labels=(OwnerLabels("training.kubeflow.org/job-name", pod_set="training.kubeflow.org/replica-type",
                                  index="training.kubeflow.org/replica-index",
                                  extra=(("training.kubeflow.org/operator-name", controller),)),))


RULES: dict[tuple[str, str], KindRule] = {r.key: r for r in (
    KindRule("apps", "Deployment", ("v1",), "per-pod",
             pod_names="<name>-<template hash>-<sfx> (its ReplicaSet <name>-<template hash> creates them; the hash "
                       "is gpufleet's hash of the pod template, not the controller's)",
             queue="label kueue.x-k8s.io/queue-name on the Deployment (Kueue copies it to the pods)",
             suspend=None, priority="the pod template's priorityClassName", kueue="deployment"),
    KindRule("apps", "ReplicaSet", ("v1",), "per-pod", pod_names="<name>-<sfx>",
             queue="label kueue.x-k8s.io/queue-name on the ReplicaSet or its pod template", suspend=None,
             priority="the pod template's priorityClassName", kueue="pod (each pod a workload)"),
    KindRule("apps", "StatefulSet", ("v1",), "gang",
             pod_names="<name>-<ordinal> (from spec.ordinals.start, default 0)",
             queue="label kueue.x-k8s.io/queue-name on the StatefulSet (Kueue makes its pods one pod group)",
             suspend=None, priority="the pod template's priorityClassName", kueue="statefulset",
             fast_admission=True),
    KindRule("batch", "Job", ("v1",), "gang",
             pod_names="Indexed: <name>-<index>-<sfx>; NonIndexed: <name>-<sfx>; min(parallelism, completions) pods",
             queue="label kueue.x-k8s.io/queue-name on the Job", suspend="spec.suspend",
             priority="label kueue.x-k8s.io/priority-class, else the pod template's priorityClassName",
             kueue="batch/job", owner_labels=(_JOB_LABELS,)),
    KindRule("batch", "CronJob", ("v1",), "gang",
             pod_names="its next Job <name>-<scheduled time in minutes since the epoch>, whose pods are named as a "
                       "Job's; the next schedule after its creationTimestamp (else after 1970-01-01T00:00Z)",
             queue="label kueue.x-k8s.io/queue-name in spec.jobTemplate.metadata.labels (not on the CronJob)",
             suspend="spec.suspend (no Job is created)",
             priority="the job template's kueue.x-k8s.io/priority-class label, else its pod template's "
                      "priorityClassName", kueue="batch/job (on each Job it creates)"),
    KindRule("jobset.x-k8s.io", "JobSet", ("v1alpha2",), "gang",
             pod_names="<name>-<replicated job>-<job index>-<pod index>-<sfx> (its Jobs are Indexed unless they say "
                       "otherwise)",
             queue="label kueue.x-k8s.io/queue-name on the JobSet", suspend="spec.suspend",
             priority="label kueue.x-k8s.io/priority-class, else the first replicated job's pod priorityClassName",
             kueue="jobset.x-k8s.io/jobset",
             owner_labels=(OwnerLabels("jobset.sigs.k8s.io/jobset-name",
                                       pod_set="jobset.sigs.k8s.io/replicatedjob-name"),)),
    _kubeflow("PyTorchJob", "pytorchjob-controller", "Master, then Worker"),
    _kubeflow("TFJob", "tfjob-controller", "Chief, Master, PS, Worker, Evaluator"),
    _kubeflow("XGBoostJob", "xgboostjob-controller", "Master, then Worker"),
    _kubeflow("PaddleJob", "paddlejob-controller", "Master, then Worker"),
    KindRule("kubeflow.org", "MPIJob", ("v2beta1", "v1"), "gang",
             pod_names="v2beta1: launcher <name>-launcher-<sfx> (a Job), workers <name>-worker-<index>; v1: "
                       "<name>-launcher, <name>-worker-<index>",
             queue="label kueue.x-k8s.io/queue-name on the object", suspend="spec.runPolicy.suspend",
             priority=_KUBEFLOW_PRIORITY + " (Launcher, then Worker)", kueue="kubeflow.org/mpijob",
             owner_labels=(OwnerLabels("training.kubeflow.org/job-name", pod_set="training.kubeflow.org/job-role",
                                       index="training.kubeflow.org/replica-index",
                                       extra=(("training.kubeflow.org/operator-name", "mpi-operator"),)),)),
    KindRule("trainer.kubeflow.org", "TrainJob", ("v1alpha1",), "gang",
             pod_names="those of the JobSet <name> its runtime (spec.runtimeRef) describes, the trainer job ('node') "
                       "with spec.trainer.numNodes pods and spec.trainer.resourcesPerNode",
             queue="label kueue.x-k8s.io/queue-name on the TrainJob", suspend="spec.suspend",
             priority="label kueue.x-k8s.io/priority-class, else the runtime's pod priorityClassName",
             kueue="trainer.kubeflow.org/trainjob",
             owner_labels=(OwnerLabels("jobset.sigs.k8s.io/jobset-name",
                                       pod_set="jobset.sigs.k8s.io/replicatedjob-name"),)),
    KindRule("ray.io", "RayCluster", ("v1", "v1alpha1"), "gang",
             pod_names="head <name>-head-<sfx>; workers <name>-<group>-worker-<sfx>; replicas x numOfHosts per "
                       "group",
             queue="label kueue.x-k8s.io/queue-name on the RayCluster", suspend="spec.suspend",
             priority="label kueue.x-k8s.io/priority-class, else the head's priorityClassName",
             kueue="ray.io/raycluster",
             owner_labels=(OwnerLabels("ray.io/cluster", pod_set="ray.io/group"),)),
    KindRule("ray.io", "RayJob", ("v1", "v1alpha1"), "gang",
             pod_names="its RayCluster <name>-<sfx> (head and workers named as a RayCluster's), and in K8sJobMode "
                       "(the default) the submitter Job <name>, pod <name>-<sfx>",
             queue="label kueue.x-k8s.io/queue-name on the RayJob", suspend="spec.suspend",
             priority="label kueue.x-k8s.io/priority-class, else the head's priorityClassName",
             kueue="ray.io/rayjob",
             owner_labels=(OwnerLabels("ray.io/originated-from-cr-name", pod_set="ray.io/group",
                                       extra=(("ray.io/originated-from-crd", "RayJob"),)),)),
    KindRule("leaderworkerset.x-k8s.io", "LeaderWorkerSet", ("v1",), "per-group",
             pod_names="group g: leader <name>-<g>, workers <name>-<g>-<w> for w = 1..size-1; one workload "
                       "<name>-<g> per group",
             queue="label kueue.x-k8s.io/queue-name on the LeaderWorkerSet", suspend=None,
             priority="label kueue.x-k8s.io/priority-class, else the leader's priorityClassName",
             kueue="leaderworkerset.x-k8s.io/leaderworkerset",
             owner_labels=(OwnerLabels("leaderworkerset.sigs.k8s.io/name",
                                       index="leaderworkerset.sigs.k8s.io/worker-index",
                                       group_index="leaderworkerset.sigs.k8s.io/group-index"),),
             fast_admission=True),
    KindRule("batch.volcano.sh", "Job", ("v1alpha1",), "gang",
             pod_names="<name>-<task>-<index>; a gang of spec.minAvailable (default: every pod)",
             queue="spec.queue, a Volcano Queue (default: default)", suspend=None,
             priority="spec.priorityClassName", kueue=None,
             owner_labels=(OwnerLabels("volcano.sh/job-name", pod_set="volcano.sh/task-spec"),),
             queue_system="volcano"),
    KindRule("scheduling.volcano.sh", "PodGroup", ("v1beta1",), "pod-group",
             pod_names="names no pods: the Pods annotated scheduling.k8s.io/group-name: <name> are its members, a "
                       "gang of spec.minMember",
             queue="spec.queue, a Volcano Queue (default: default)", suspend=None,
             priority="spec.priorityClassName", kueue=None,
             owner_labels=(OwnerLabels("scheduling.k8s.io/group-name", annotation=True),),
             queue_system="volcano"),
    KindRule("scheduling.run.ai", "PodGroup", ("v2alpha2",), "pod-group",
             pod_names="names no pods: the Pods annotated pod-group-name: <name> are its members, a gang of "
                       "spec.minMember",
             queue="spec.queue, a KAI Queue", suspend=None, priority="spec.priorityClassName", kueue=None,
             owner_labels=(OwnerLabels("pod-group-name", annotation=True),), queue_system="kai"),
)}

# The queue label KAI's pod grouper reads on a workload's top owner or its pods (and its older name).
KAI_QUEUE_LABELS = ("kai.scheduler/queue", "runai/queue")

# The Volcano Queue a workload names: the annotation Volcano's PodGroup controller reads on a pod (and Kubeflow's
# training operator and Trainer on their jobs), and the label KubeRay's Volcano integration reads on a RayCluster
# or RayJob.
VOLCANO_QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
VOLCANO_QUEUE_LABEL = "volcano.sh/queue-name"
# The queue Volcano gives work that names none (it creates it itself), and the scheduler name of its pods.
VOLCANO_DEFAULT_QUEUE = "default"
VOLCANO_SCHEDULER = "volcano"

# The pod annotations naming a Volcano PodGroup (the second is Volcano's own spelling of the same key).
VOLCANO_GROUP_ANNOTATIONS = ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name")

# Kinds read alongside the workload kinds: the queues and runtimes they refer to.
SUPPORTING_KINDS: dict[tuple[str, str], tuple[str, ...]] = {
    ("scheduling.volcano.sh", "Queue"): ("v1beta1",),
    ("scheduling.run.ai", "Queue"): ("v2",),
    ("trainer.kubeflow.org", "TrainingRuntime"): ("v1alpha1",),
    ("trainer.kubeflow.org", "ClusterTrainingRuntime"): ("v1alpha1",),
    ("kueue.x-k8s.io", "AdmissionCheck"): ("v1beta1", "v1beta2"),
}

# Every API group gpufleet knows and the versions it reads of it. A document of a known group at another
# version is refused: its fields may mean something else.
GROUP_VERSIONS: dict[str, tuple[str, ...]] = {
    "": ("v1",),
    "apps": ("v1",),
    "batch": ("v1",),
    "scheduling.k8s.io": ("v1",),
    "kueue.x-k8s.io": ("v1beta1", "v1beta2", "v1alpha1"),
    "config.kueue.x-k8s.io": ("v1beta1", "v1beta2"),
    "gpufleet.io": ("v1alpha1",),
    "jobset.x-k8s.io": ("v1alpha2",),
    "kubeflow.org": ("v1", "v2beta1"),
    "trainer.kubeflow.org": ("v1alpha1",),
    "ray.io": ("v1", "v1alpha1"),
    "leaderworkerset.x-k8s.io": ("v1",),
    "batch.volcano.sh": ("v1alpha1",),
    "scheduling.volcano.sh": ("v1beta1",),
    "scheduling.run.ai": ("v2", "v2alpha2"),
}


# The DRA kinds gpufleet reads (gpufleet.api.dra_parse), at the versions the API server serves them: v1 since
# Kubernetes 1.34, v1beta2 and v1beta1 before. Listed by kind, not by group: the group's other kinds
# (DeviceTaintRule) are said as not read, whatever their version.
DRA_KINDS: dict[tuple[str, str], tuple[str, ...]] = {
    (DRA_GROUP, k): DRA_VERSIONS for k in ("ResourceSlice", "DeviceClass", "ResourceClaim", "ResourceClaimTemplate")}


def versions_of(group: str, kind: str) -> tuple[str, ...] | None:
    """The versions gpufleet reads of ``kind`` in ``group`` (None: the group is not one gpufleet knows)."""
    rule = RULES.get((group, kind))
    if rule is not None:
        return rule.versions
    supporting = SUPPORTING_KINDS.get((group, kind)) or DRA_KINDS.get((group, kind))
    if supporting is not None:
        return supporting
    return GROUP_VERSIONS.get(group)


# Well-known kinds gpufleet does not read, by (group, kind): None for kinds that hold no pods gpufleet would plan,
# else what is lost by leaving them out.
_NOT_WORKLOADS = {
    "": ("Service", "Secret", "ServiceAccount", "Endpoints", "PersistentVolumeClaim",
         "PersistentVolume", "LimitRange", "ResourceQuota", "Event", "PodTemplate", "Binding"),
    "apps": ("ControllerRevision",),
    "rbac.authorization.k8s.io": ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"),
    "networking.k8s.io": ("Ingress", "IngressClass", "NetworkPolicy"),
    "policy": ("PodDisruptionBudget",),
    "autoscaling": ("HorizontalPodAutoscaler",),
    "storage.k8s.io": ("StorageClass", "CSIDriver", "CSINode", "VolumeAttachment"),
    "apiextensions.k8s.io": ("CustomResourceDefinition",),
    "admissionregistration.k8s.io": ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
                                     "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"),
    "coordination.k8s.io": ("Lease",),
    "node.k8s.io": ("RuntimeClass",),
    "discovery.k8s.io": ("EndpointSlice",),
    "events.k8s.io": ("Event",),
    "certificates.k8s.io": ("CertificateSigningRequest",),
    "monitoring.coreos.com": ("ServiceMonitor", "PodMonitor", "PrometheusRule"),
    "kueue.x-k8s.io": ("MultiKueueConfig", "MultiKueueCluster", "ProvisioningRequestConfig"),
    "nvidia.com": ("NVIDIADriver",),  # ClusterPolicy is read (gpufleet.api.nvidia_config), as NVIDIA's ConfigMaps
    "resource.k8s.io": ("DeviceTaintRule",),  # the other DRA kinds are read (DRA_KINDS)
    "scheduling.volcano.sh": ("HyperNode",),
    "kai.scheduler": ("Topology",),
    "kustomize.config.k8s.io": ("Kustomization",),
}
_UNREAD_WORKLOADS = {
    "": ("ReplicationController",),
    "apps": ("DaemonSet",),
    "ray.io": ("RayService",),
    "kubeflow.org": ("MXJob", "JAXJob", "Notebook"),
    "serving.kserve.io": ("InferenceService",),
    "workload.codeflare.dev": ("AppWrapper",),
}
WELL_KNOWN_UNREAD: dict[tuple[str, str], bool] = {
    **{(g, k): False for g, kinds in _NOT_WORKLOADS.items() for k in kinds},
    **{(g, k): True for g, kinds in _UNREAD_WORKLOADS.items() for k in kinds},
}


def readable_kinds() -> list[str]:
    """``group/version Kind`` for every workload and supporting kind (messages, README)."""
    out = [f"{r.group}/{'|'.join(r.versions)} {r.kind}" for r in RULES.values()]
    out += [f"{g}/{'|'.join(v)} {k}" for (g, k), v in SUPPORTING_KINDS.items()]
    return out


# The API resource (plural) of every kind read here, and whether it is namespaced: what a snapshot lists and
# what the live scheduler watches to give its pods their owners.
_CLUSTER_SCOPED = {("scheduling.volcano.sh", "Queue"), ("scheduling.run.ai", "Queue"),
                   ("trainer.kubeflow.org", "ClusterTrainingRuntime"), ("kueue.x-k8s.io", "AdmissionCheck")}


def api_resources() -> list[tuple[str, str, str, str, bool]]:
    """(group, version, plural, kind, namespaced) of every workload and supporting kind, at the version listed
    first (the one to ask the API server for)."""
    kinds = [(r.group, r.versions[0], r.kind) for r in RULES.values()]
    kinds += [(g, v[0], k) for (g, k), v in SUPPORTING_KINDS.items()]
    return [(g, v, k.lower() + ("es" if k.endswith("s") else "s"), k, (g, k) not in _CLUSTER_SCOPED)
            for g, v, k in kinds]
