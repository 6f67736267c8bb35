"""ray.io RayCluster and RayJob (KubeRay).

Kueue admits a RayCluster as one workload: a ``head`` pod set of one pod, then a pod set per worker group of
``replicas x numOfHosts`` pods, named after the group. A RayJob adds, in K8sJobMode (its default), a ``submitter``
pod set of one pod: the Job that submits the entrypoint (its own template, else KubeRay's default submitter).
"""

from __future__ import annotations

from gpufleet.api.kinds import parse_meta
from gpufleet.api.objects import CPU, MEMORY, PodTemplate, ResourceList
from gpufleet.api.reader import FieldReader
from gpufleet.api.workloadkinds import names
from gpufleet.api.workloadkinds.common import (
    MAX_POD_SETS,
    check_plan,
    count,
    first_priority_class,
    queue_key,
    queue_label,
    read_template,
)
from gpufleet.api.workloadkinds.model import PodName, PodSetPlan, WorkloadOwner, WorkloadPlan
from gpufleet.api.workloadkinds.table import RULES

_GIB = 2**30
# KubeRay's default submitter container: requests 500m CPU and 200Mi, limits 1 CPU and 1Gi (Kueue counts the same).
DEFAULT_SUBMITTER_REQUESTS: ResourceList = {CPU: 500, MEMORY: 200 * 2**20}
DEFAULT_SUBMITTER_LIMITS: ResourceList = {CPU: 1000, MEMORY: _GIB}
SUBMISSION_MODES = ("K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode")


def _cluster_pod_sets(spec: FieldReader, namespace: str, cluster: str) -> list[PodSetPlan] | None:
    head = spec.obj("headGroupSpec", required=True)
    head_template = read_template(head) if head is not None else None
    if head_template is None:
        return None
    pod_sets = [PodSetPlan("head", 1, head_template,
                           lambda i: names.generated(f"{cluster}-head-", namespace, cluster, index=i))]
    seen = {"head"}
    for g in spec.items("workerGroupSpecs"):
        group = g.text("groupName", required=True)
        template = read_template(g)
        if group is None or template is None:
            continue
        key = group.lower()
        if key in seen:
            g.error(f"worker group {group} is defined twice (or is named head)", "groupName",
                    fix="give every worker group its own name")
            continue
        seen.add(key)
        replicas = count(g, "replicas", count(g, "minReplicas", 1))
        hosts = g.integer("numOfHosts", 1, minimum=1, maximum=64) or 1
        if g.flag("suspend"):
            replicas = 0
        pod_sets.append(PodSetPlan(key, replicas * hosts, template, _worker_name(namespace, cluster, group)))
    if len(pod_sets) > MAX_POD_SETS:
        spec.error(f"{len(pod_sets) - 1} worker groups; Kueue admits at most {MAX_POD_SETS - 1} besides the head",
                   "workerGroupSpecs", fix="merge worker groups with the same template")
        return None
    return pod_sets


def _worker_name(namespace: str, cluster: str, group: str) -> PodName:
    return lambda i: names.generated(f"{cluster}-{group}-worker-", namespace, cluster, index=i)


def parse_ray_cluster(r: FieldReader) -> WorkloadOwner | None:
    meta = parse_meta(r, namespaced=True)
    spec = r.obj("spec", required=True)
    if meta is None or spec is None:
        return None
    pod_sets = _cluster_pod_sets(spec, meta.namespace or "default", meta.name)
    if pod_sets is None:
        return None
    queue, system = queue_label(meta.labels)
    owner = WorkloadOwner(meta=meta, rule=RULES[("ray.io", "RayCluster")],
                          workloads=[WorkloadPlan(meta.name, pod_sets)], queue=queue_key(queue, system),
                          priority_class=pod_sets[0].template.priority_class_name, suspended=spec.flag("suspend"),
                          labels=dict(meta.labels), annotations=dict(meta.annotations))
    if spec.flag("enableInTreeAutoscaling"):
        owner.notes.append("autoscaling is on: planned at each worker group's replicas")
    return owner if check_plan(r, owner, "spec.workerGroupSpecs") else None


def _default_submitter(head: PodTemplate) -> PodTemplate:
    return PodTemplate(labels={}, annotations={}, requests=dict(DEFAULT_SUBMITTER_REQUESTS),
                       limits=dict(DEFAULT_SUBMITTER_LIMITS), restart_policy="Never",
                       scheduler_name=head.scheduler_name)


def parse_ray_job(r: FieldReader) -> WorkloadOwner | None:
    meta = parse_meta(r, namespaced=True)
    spec = r.obj("spec", required=True)
    if meta is None or spec is None:
        return None
    ns = meta.namespace or "default"
    queue, system = queue_label(meta.labels)
    owner = WorkloadOwner(meta=meta, rule=RULES[("ray.io", "RayJob")], queue=queue_key(queue, system),
                          suspended=spec.flag("suspend"), labels=dict(meta.labels),
                          annotations=dict(meta.annotations),
                          backoff_limit=spec.integer("backoffLimit", 0, minimum=0, maximum=2**31 - 1) or 0)
    if spec.has("clusterSelector"):
        spec.warning("the RayJob runs on an existing RayCluster (clusterSelector): it creates no pods of its own, and "
                     "Kueue does not admit such a RayJob; it is left out", "clusterSelector",
                     fix="plan the RayCluster it selects, or give the RayJob a rayClusterSpec")
        return owner
    cluster_spec = spec.obj("rayClusterSpec", required=True)
    if cluster_spec is None:
        return None
    cluster = names.generated(f"{meta.name}-", ns, meta.name)  # KubeRay names the cluster <rayjob>-<5 random>
    pod_sets = _cluster_pod_sets(cluster_spec, ns, cluster)
    if pod_sets is None:
        return None
    mode = spec.enum("submissionMode", SUBMISSION_MODES, "K8sJobMode")
    if mode == "K8sJobMode":
        template = read_template(spec, "submitterPodTemplate") if spec.has("submitterPodTemplate") else (
            _default_submitter(pod_sets[0].template))
        if template is None:
            return None
        pod_sets.append(PodSetPlan("submitter", 1, template,
                                   lambda i: names.generated(f"{meta.name}-", ns, meta.name, "submitter", index=i)))
    owner.workloads = [WorkloadPlan(meta.name, pod_sets)]
    owner.priority_class = first_priority_class([pod_sets[0].template])
    return owner if check_plan(r, owner, "spec.rayClusterSpec.workerGroupSpecs") else None
