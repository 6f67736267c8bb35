"""Peers' conventions read faithfully (issue 29, points 1-5): KAI's and Volcano's queues, every field of Kueue's
v1beta2 CRDs, Kueue's TAS slices and HAMi's GPU shares. Each test is built from the peer's own sample, re-typed
(see docs/peers.md for the conventions and the versions they were checked against)."""

from __future__ import annotations

from gpufleet.api import gpushare
from gpufleet.api.errors import LEFT_OUT
from gpufleet.api.gpushare import is_fractional
from gpufleet.api.manifests import Manifests
from gpufleet.api.workloadkinds.fields import SCHEMAS
from gpufleet.cluster.build import build_workloads
from gpufleet.scheduling.snapshot_plan import run_cycles
from tests.conftest import manifests

# ---- 1. KAI queues --------------------------------------------------------------------------------------------

# KAI Scheduler's docs/quickstart/default-queues.yaml (v0.9 era): a parent and a leaf queue, each resource with
# no deserved quota, no limit and an over-quota weight of 1.
_KAI_QUICKSTART = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: default-parent-queue}
spec:
  resources:
    cpu: {quota: 0, limit: -1, overQuotaWeight: 1}
    gpu: {quota: 0, limit: -1, overQuotaWeight: 1}
    memory: {quota: 0, limit: -1, overQuotaWeight: 1}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: default-queue}
spec:
  parentQueue: default-parent-queue
  resources:
    cpu: {quota: 0, limit: -1, overQuotaWeight: 1}
    gpu: {quota: 0, limit: -1, overQuotaWeight: 1}
    memory: {quota: 0, limit: -1, overQuotaWeight: 1}
"""

# KAI's quick-start pods (pods/cpu-only-pod.yaml, pods/gpu-pod.yaml), in the quick-start's queue.
_KAI_PODS = """
---
apiVersion: v1
kind: Pod
metadata:
  name: gpu-pod
  labels: {kai.scheduler/queue: default-queue}
spec:
  schedulerName: kai-scheduler
  containers:
  - name: main
    image: ubuntu
    resources:
      limits: {nvidia.com/gpu: "1"}
---
apiVersion: v1
kind: Pod
metadata:
  name: cpu-only-pod
  labels: {kai.scheduler/queue: default-queue}
spec:
  schedulerName: kai-scheduler
  containers:
  - name: main
    image: ubuntu
    resources:
      requests: {cpu: 100m, memory: 64Mi}
"""

_ONE_GPU_NODE = """
---
apiVersion: gpufleet.io/v1alpha1
kind: NodePool
metadata: {name: gpu}
spec:
  count: 1
  cpu: "8"
  memory: 32Gi
  gpu: {model: A100-SXM4-80GB, count: 2}
"""


def _admitted_and_pending(m: Manifests) -> tuple[set[str], dict[str, str]]:
    result = run_cycles(m, 1, until_stable=True)
    admitted = {a.workload for c in result.cycles for a in c.decisions.admitted}
    return admitted, {p.workload: p.reason for p in result.cycles[-1].pending}


def _quotas(m: Manifests, name: str) -> dict[str, tuple[int, int | None]]:
    groups = [o.resource_groups for o in m.cluster_queues if o.name == name]
    groups += [o.resource_groups for o in m.cohorts if o.name == name]
    assert len(groups) == 1, name
    return {r: (q.nominal, q.borrowing_limit) for r, q in groups[0][0].flavors[0].resources.items()}


def test_kai_quick_start_queues_run_work_on_idle_capacity_quota_only() -> None:
    m = manifests(_KAI_QUICKSTART + _KAI_PODS)
    assert not m.problems.errors
    admitted, pending = _admitted_and_pending(m)
    assert admitted == {"default/gpu-pod", "default/cpu-only-pod"}, pending
    # quota 0, limit -1: nothing deserved, no cap; the parent is a Cohort under the cluster's Cohort "kai:(root)"
    assert _quotas(m, "kai:default-queue")["nvidia.com/gpu"] == (0, None)
    (leaf,) = [cq for cq in m.cluster_queues if cq.name == "kai:default-queue"]
    assert leaf.cohort == "kai:default-parent-queue" and leaf.preemption.reclaim_within_cohort == "Any"
    assert {c.name: c.parent for c in m.cohorts} == {"kai:default-parent-queue": "kai:(root)", "kai:(root)": None}


def test_kai_pool_is_the_clusters_capacity_beyond_what_the_queues_deserve() -> None:
    m = manifests(_KAI_QUICKSTART + _KAI_PODS + _ONE_GPU_NODE)
    assert _quotas(m, "kai:(root)")["nvidia.com/gpu"] == (2, None)  # 2 GPUs in the cluster, 0 deserved
    admitted, _ = _admitted_and_pending(m)
    assert admitted == {"default/gpu-pod", "default/cpu-only-pod"}


def test_kai_deserved_limit_and_parent_map_onto_the_quota_tree() -> None:
    m = manifests("""
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: research}
spec:
  resources:
    gpu: {quota: 8, limit: 12, overQuotaWeight: 2}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: team-a}
spec:
  parentQueue: research
  resources:
    gpu: {quota: 3, limit: 6, overQuotaWeight: 3}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: team-b}
spec:
  parentQueue: research
  resources:
    gpu: {quota: 2, limit: -1}
""" + _ONE_GPU_NODE)
    assert _quotas(m, "kai:team-a")["nvidia.com/gpu"] == (3, 3)  # deserved 3, capped at 6
    assert _quotas(m, "kai:team-b")["nvidia.com/gpu"] == (2, None)  # no cap
    # the parent's 8 held by its subtree: 3 + 2 in the children, 3 more of its own; capped at 12
    assert _quotas(m, "kai:research")["nvidia.com/gpu"] == (3, 4)
    weights = {cq.name: cq.fair_weight for cq in m.cluster_queues}
    assert weights["kai:team-a"] == 3.0 and weights["kai:team-b"] == 1.0
    assert [c.fair_weight for c in m.cohorts if c.name == "kai:research"] == [2.0]
    assert _quotas(m, "kai:(root)")["nvidia.com/gpu"] == (0, None)  # 2 GPUs, 8 deserved: nothing beyond


def test_queue_warnings_carry_file_and_line() -> None:
    m = manifests(_KAI_PODS.replace("default-queue", "missing-queue"), "pods.yaml")
    (missing,) = [w for w in m.problems.warnings if "missing-queue" in w.message]
    assert (missing.file, missing.line) == ("pods.yaml", 3)  # the first pod naming it
    m = manifests(_KAI_QUICKSTART + _KAI_PODS, "queues.yaml")
    (summary,) = [w for w in m.problems.warnings if "read as Kueue ClusterQueues" in w.message]
    assert summary.file == "queues.yaml" and summary.line is not None


# ---- 2. Volcano's queue on pods and Ray clusters ----------------------------------------------------------------

# Volcano's example/deployment: a Queue "test" and a Deployment whose pods name it by annotation.
_VOLCANO_DEPLOYMENT = """
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: test}
spec:
  weight: 1
  reclaimable: false
  capability: {cpu: 2}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: deploy-with-volcano
  labels: {app: nginx}
spec:
  replicas: 1
  selector:
    matchLabels: {app: nginx}
  template:
    metadata:
      labels: {app: nginx}
      annotations: {scheduling.volcano.sh/queue-name: test}
    spec:
      schedulerName: volcano
      containers:
      - name: nginx
        image: nginx:latest
        resources:
          requests: {cpu: 300m}
"""


def test_volcano_queue_annotation_on_a_deployments_pods_puts_it_in_the_queue() -> None:
    m = manifests(_VOLCANO_DEPLOYMENT)
    (w,) = build_workloads(m)
    assert w.queue == "volcano:test"
    admitted, _ = _admitted_and_pending(m)
    assert admitted == {w.key}
    # the Queue's capability (2 CPUs) is what it may use: 7 such pods do not fit
    m = manifests(_VOLCANO_DEPLOYMENT.replace("replicas: 1", "replicas: 7"))
    admitted, pending = _admitted_and_pending(m)
    assert len(admitted) == 6 and len(pending) == 1


def test_volcano_queue_annotation_on_a_plain_pod() -> None:
    m = manifests(_VOLCANO_DEPLOYMENT.split("---")[0] + """---
apiVersion: v1
kind: Pod
metadata:
  name: p
  annotations: {scheduling.volcano.sh/queue-name: test}
spec:
  schedulerName: volcano
  containers:
  - {name: c, image: busybox, resources: {requests: {cpu: 100m}}}
""")
    (w,) = build_workloads(m)
    assert w.queue == "volcano:test"


# KubeRay's ray-cluster.volcano-scheduler-queue.yaml: a Volcano Queue and a RayCluster naming it by label.
_KUBERAY_VOLCANO = """
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: kuberay-test-queue}
spec:
  weight: 1
  capability: {cpu: 4, memory: 6Gi}
---
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: test-cluster-0
  labels:
    ray.io/scheduler-name: volcano
    volcano.sh/queue-name: kuberay-test-queue
spec:
  rayVersion: '2.9.0'
  headGroupSpec:
    rayStartParams: {}
    template:
      spec:
        containers:
        - name: ray-head
          image: rayproject/ray:2.9.0
          resources:
            limits: {cpu: "1", memory: 2Gi}
            requests: {cpu: "1", memory: 2Gi}
  workerGroupSpecs:
  - groupName: worker
    rayStartParams: {}
    replicas: 2
    minReplicas: 2
    maxReplicas: 2
    template:
      spec:
        containers:
        - name: ray-worker
          image: rayproject/ray:2.9.0
          resources:
            limits: {cpu: "1", memory: 1Gi}
            requests: {cpu: "1", memory: 1Gi}
"""


def test_volcano_queue_label_on_a_ray_cluster_puts_it_in_the_queue() -> None:
    m = manifests(_KUBERAY_VOLCANO)
    (w,) = build_workloads(m)
    assert w.queue == "volcano:kuberay-test-queue"
    admitted, _ = _admitted_and_pending(m)
    assert admitted == {w.key}
    # 3 CPUs of the queue's 4: one more worker fits, three more do not
    m = manifests(_KUBERAY_VOLCANO.replace("replicas: 2", "replicas: 5").replace("maxReplicas: 2", "maxReplicas: 5"))
    admitted, pending = _admitted_and_pending(m)
    assert not admitted and "cpu" in next(iter(pending.values()))


def test_kueue_label_wins_over_volcanos() -> None:
    m = manifests(_KUBERAY_VOLCANO.replace("    ray.io/scheduler-name: volcano\n",
                                           "    kueue.x-k8s.io/queue-name: lq\n"))
    (w,) = build_workloads(m)
    assert w.queue == "lq"


# ---- 3. Kueue v1beta2: every field known --------------------------------------------------------------------------

# Every spec field of Kueue's v1beta2 CRDs (apis/kueue/v1beta2/*_types.go), by kind: a path per field.
V1BETA2_FIELDS = {
    "ClusterQueue": (
        "resourceGroups.coveredResources", "resourceGroups.flavors.name",
        "resourceGroups.flavors.resources.name", "resourceGroups.flavors.resources.nominalQuota",
        "resourceGroups.flavors.resources.borrowingLimit", "resourceGroups.flavors.resources.lendingLimit",
        "cohortName", "queueingStrategy", "namespaceSelector", "flavorFungibility.whenCanBorrow",
        "flavorFungibility.whenCanPreempt", "flavorFungibility.preference", "preemption.reclaimWithinCohort",
        "preemption.borrowWithinCohort.policy", "preemption.borrowWithinCohort.maxPriorityThreshold",
        "preemption.withinClusterQueue", "admissionChecksStrategy", "stopPolicy", "fairSharing.weight",
        "admissionScope", "concurrentAdmissionPolicy"),
    "LocalQueue": ("clusterQueue", "stopPolicy", "fairSharing", "wallTimePolicy"),
    "ResourceFlavor": ("nodeLabels", "nodeTaints", "tolerations", "topologyName", "resourceWeights"),
    "Cohort": ("parentName", "resourceGroups", "fairSharing"),
    "Workload": ("podSets.name", "podSets.template", "podSets.count", "podSets.minCount",
                 "podSets.topologyRequest", "queueName", "priorityClassRef", "priority", "active",
                 "maximumExecutionTimeSeconds"),
    "AdmissionCheck": ("controllerName", "retryDelayMinutes", "parameters"),
    "Topology": ("levels.nodeLabel",),
}


def _known(schema: object, path: list[str]) -> bool:
    for key in path:
        while schema is not None and not isinstance(schema, dict):
            schema = getattr(schema, "item", getattr(schema, "value", None))
        if schema is None:
            return True  # ANY: everything below is accepted
        if key not in schema:
            return False
        schema = schema[key]
    return True


def test_every_v1beta2_field_is_known() -> None:
    for kind, fields in V1BETA2_FIELDS.items():
        schema = SCHEMAS[("kueue.x-k8s.io", kind)]
        for f in fields:
            assert _known(schema["spec"], f.split(".")), f"{kind} spec.{f}"
    wpc = SCHEMAS[("kueue.x-k8s.io", "WorkloadPriorityClass")]
    assert "value" in wpc and "description" in wpc


_V1BETA2_QUEUES = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: on-demand}
spec:
  resourceWeights: {nvidia.com/gpu: 2}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  flavorFungibility:
    whenCanBorrow: TryNextFlavor
    whenCanPreempt: TryNextFlavor
    preference: PreemptionOverBorrowing
  concurrentAdmissionPolicy:
    migration: {mode: TryPreferredFlavors}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: on-demand
      resources:
      - {name: cpu, nominalQuota: 9}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: lq, namespace: default}
spec:
  clusterQueue: cq
  wallTimePolicy: {wallTimeAllocatedHours: 10}
"""


def test_v1beta2_fields_gpufleet_does_not_implement_are_said_so_never_unknown() -> None:
    m = manifests(_V1BETA2_QUEUES)
    assert not m.problems.errors, [str(e) for e in m.problems.errors]
    assert not [w for w in m.problems.warnings if "unknown" in w.message or "remove it;" in (w.fix or "")]
    said = {w.field: w for w in m.problems.warnings if "not implemented" in w.message}
    for field in ("spec.concurrentAdmissionPolicy", "spec.flavorFungibility.preference", "spec.wallTimePolicy",
                  "spec.resourceWeights"):
        assert field in said, sorted(map(str, said))
        assert said[field].code == LEFT_OUT and said[field].line is not None
    assert len(m.cluster_queues) == 1 and len(m.local_queues) == 1


def test_v1beta2_may_stop_search_is_read_as_kueue_v1beta1s_borrow_and_preempt() -> None:
    m = manifests(_V1BETA2_QUEUES.replace("whenCanBorrow: TryNextFlavor", "whenCanBorrow: MayStopSearch")
                  .replace("whenCanPreempt: TryNextFlavor", "whenCanPreempt: MayStopSearch"))
    assert not m.problems.errors
    ff = m.cluster_queues[0].flavor_fungibility
    assert (ff.when_can_borrow, ff.when_can_preempt) == ("Borrow", "Preempt")


# ---- 4. TAS slices --------------------------------------------------------------------------------------------

# Kueue's multislice JobSet sample (TAS): replicated jobs of 4 pods, the whole pod set in one block, each slice of
# 4 pods in one rack.
_MULTISLICE = """
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: multislice
  namespace: team-a
  labels: {kueue.x-k8s.io/queue-name: tas-queue}
spec:
  replicatedJobs:
  - name: workers
    replicas: 2
    template:
      spec:
        parallelism: 4
        completions: 4
        template:
          metadata:
            annotations:
              kueue.x-k8s.io/podset-required-topology: cloud.provider.com/topology-block
              kueue.x-k8s.io/podset-slice-required-topology: cloud.provider.com/topology-rack
              kueue.x-k8s.io/podset-slice-size: "4"
          spec:
            restartPolicy: Never
            containers:
            - name: worker
              image: busybox
              resources:
                requests: {cpu: "1"}
"""
_PLAIN_QUEUE = """
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: plain}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: plain
      resources:
      - {name: cpu, nominalQuota: 100}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: tas-queue, namespace: team-a}
spec: {clusterQueue: cq}
"""


def test_tas_slices_with_a_required_topology_are_said_left_out() -> None:
    m = manifests(_MULTISLICE + _PLAIN_QUEUE)
    (w,) = [w for w in m.problems.warnings if "slices of 4 pods" in w.message]
    assert w.code == LEFT_OUT and w.file == "test.yaml" and "topology-rack" in w.message
    assert m.problems.escalate(LEFT_OUT) >= 1  # --strict: an error
    # the required topology still holds: no flavor without a topology admits it
    _, pending = _admitted_and_pending(manifests(_MULTISLICE + _PLAIN_QUEUE))
    assert "team-a/multislice" in pending


# A TAS flavor beside the plain one: 4 nodes of 4 CPUs in 2 racks of one block (Kueue's TAS sample topology).
_TAS_QUEUE = _PLAIN_QUEUE.replace("    - name: plain\n", """    - name: racks
      resources:
      - {name: cpu, nominalQuota: 100}
    - name: plain
""") + """---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: racks}
spec: {nodeLabels: {pool: tas}, topologyName: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Topology
metadata: {name: default}
spec:
  levels:
  - nodeLabel: cloud.provider.com/topology-block
  - nodeLabel: cloud.provider.com/topology-rack
""" + "".join(f"""---
apiVersion: v1
kind: Node
metadata:
  name: n{i}
  labels: {{kubernetes.io/hostname: n{i}, pool: tas, cloud.provider.com/topology-block: b1,
           cloud.provider.com/topology-rack: r{i // 2}}}
status:
  allocatable: {{cpu: "4", memory: 64Gi, pods: "20"}}
""" for i in range(4))

_SLICES_ALONE = _MULTISLICE.replace(
    "              kueue.x-k8s.io/podset-required-topology: cloud.provider.com/topology-block\n", "")


def test_tas_slices_alone_are_placed_on_a_flavor_with_a_topology_as_kueue_does() -> None:
    # Kueue reads a slice-only request as topology-aware scheduling anywhere in the flavor's topology: never on a
    # flavor without one (where gpufleet used to place it), never held forever (what gpufleet did next).
    m = manifests(_SLICES_ALONE + _PLAIN_QUEUE)
    assert not m.problems.errors
    (w,) = [w for w in m.problems.warnings if "slices of 4 pods" in w.message]
    assert w.code == LEFT_OUT and "on a flavor with a topology" in w.message
    assert w.line == _line_of(_SLICES_ALONE, "podset-slice-required-topology:")
    assert w.field == ("spec.replicatedJobs[0].template.spec.template.metadata.annotations."
                       "kueue.x-k8s.io/podset-slice-required-topology")
    admitted, pending = _admitted_and_pending(m)
    assert not admitted and "does not support TopologyAwareScheduling" in pending["team-a/multislice"]
    admitted, pending = _admitted_and_pending(manifests(_SLICES_ALONE + _TAS_QUEUE))
    assert admitted == {"team-a/multislice"}, pending


def _line_of(text: str, needle: str) -> int:
    """The line of ``needle`` in a document given to :func:`manifests` (its text's first line is line 1)."""
    return next(i for i, line in enumerate(text.split("\n"), 1) if needle in line)


def test_malformed_slices_are_errors_as_kueues_webhook_refuses_them() -> None:
    too_big = manifests(_MULTISLICE.replace('podset-slice-size: "4"', 'podset-slice-size: "9"'))
    assert any("more than the pod set's 8 pods" in e.message for e in too_big.problems.errors)
    alone = manifests(_MULTISLICE.replace(
        "              kueue.x-k8s.io/podset-slice-required-topology: cloud.provider.com/topology-rack\n", ""))
    assert any("needs kueue.x-k8s.io/podset-slice-required-topology" in e.message for e in alone.problems.errors)
    bad = manifests(_MULTISLICE.replace('podset-slice-size: "4"', 'podset-slice-size: "four"'))
    assert any("whole number of at least 1" in e.message for e in bad.problems.errors)


def test_a_slice_size_must_evenly_divide_the_pod_set_and_is_said_at_the_annotation() -> None:
    # KEP-2724, "PodSet Slice size validation": 3 does not divide the 8 workers
    text = _MULTISLICE.replace('podset-slice-size: "4"', 'podset-slice-size: "3"')
    m = manifests(text + _PLAIN_QUEUE)
    (e,) = m.problems.errors
    assert "does not evenly divide the pod set's 8 pods" in e.message
    assert e.line == _line_of(text, "podset-slice-size:")
    assert e.field == ("spec.replicatedJobs[0].template.spec.template.metadata.annotations."
                       "kueue.x-k8s.io/podset-slice-size")
    assert not m.controllers.owners  # refused, as Kueue's webhook refuses it


def test_a_jobsets_slice_size_defaults_to_its_jobs_parallelism() -> None:
    no_size = _MULTISLICE.replace('              kueue.x-k8s.io/podset-slice-size: "4"\n', "")
    m = manifests(no_size + _PLAIN_QUEUE)
    assert not m.problems.errors, [str(e) for e in m.problems.errors]
    assert any("slices of 4 pods" in w.message for w in m.problems.warnings)  # parallelism 4: each Job a slice
    # any other kind must give the size
    job = manifests("""
apiVersion: batch/v1
kind: Job
metadata: {name: sliced, namespace: team-a, labels: {kueue.x-k8s.io/queue-name: tas-queue}}
spec:
  parallelism: 4
  completions: 4
  template:
    metadata:
      annotations:
        kueue.x-k8s.io/podset-slice-required-topology: cloud.provider.com/topology-rack
    spec:
      restartPolicy: Never
      containers: [{name: w, image: busybox}]
""")
    (e,) = job.problems.errors
    assert "needs kueue.x-k8s.io/podset-slice-size" in e.message and e.line == 11


def test_tas_slices_alone_on_a_kueue_workload_object_need_a_flavor_with_a_topology_too() -> None:
    text = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {name: sliced, namespace: team-a}
spec:
  queueName: tas-queue
  podSets:
  - name: workers
    count: 8
    template:
      metadata:
        annotations:
          kueue.x-k8s.io/podset-slice-required-topology: cloud.provider.com/topology-rack
          kueue.x-k8s.io/podset-slice-size: "4"
      spec:
        restartPolicy: Never
        containers:
        - {name: worker, image: busybox, resources: {requests: {cpu: "1"}}}
"""
    m = manifests(text + _PLAIN_QUEUE)
    assert not m.problems.errors, [str(e) for e in m.problems.errors]
    (w,) = [w for w in m.problems.warnings if "slices of 4 pods" in w.message]
    assert w.line == _line_of(text, "podset-slice-required-topology:")
    assert w.field == "spec.podSets[0].template.metadata.annotations.kueue.x-k8s.io/podset-slice-required-topology"
    admitted, pending = _admitted_and_pending(m)
    assert not admitted and "does not support TopologyAwareScheduling" in pending["team-a/sliced"]
    admitted, _ = _admitted_and_pending(manifests(text + _TAS_QUEUE))
    assert admitted == {"team-a/sliced"}
    bad = text.replace('podset-slice-size: "4"', 'podset-slice-size: "3"')
    (e,) = manifests(bad + _PLAIN_QUEUE).problems.errors
    assert "does not evenly divide" in e.message and e.line == _line_of(bad, "podset-slice-size:")


def test_a_pods_malformed_slices_are_said_at_the_annotation() -> None:
    text = """
apiVersion: v1
kind: Pod
metadata:
  name: p
  annotations:
    kueue.x-k8s.io/podset-slice-size: "1"
spec:
  containers: [{name: c, image: busybox}]
"""
    (e,) = manifests(text).problems.errors
    assert "needs kueue.x-k8s.io/podset-slice-required-topology" in e.message
    assert e.line == 7 and e.field == "metadata.annotations.kueue.x-k8s.io/podset-slice-size"


# ---- 5. HAMi --------------------------------------------------------------------------------------------------

# Kueue's HAMi sample: a ClusterQueue covering HAMi's resources and a Job whose pods each ask a share of one GPU.
_HAMI = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: hami-flavor}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: hami-cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu, nvidia.com/gpucores, nvidia.com/gpumem]
    flavors:
    - name: hami-flavor
      resources:
      - {name: cpu, nominalQuota: 10}
      - {name: memory, nominalQuota: 10Gi}
      - {name: nvidia.com/gpu, nominalQuota: 10}
      - {name: nvidia.com/gpucores, nominalQuota: 200}
      - {name: nvidia.com/gpumem, nominalQuota: 20000}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: user-queue, namespace: default}
spec: {clusterQueue: hami-cq}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: hami-job
  labels: {kueue.x-k8s.io/queue-name: user-queue}
spec:
  parallelism: 3
  completions: 3
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: cuda
        image: ubuntu
        resources:
          limits:
            nvidia.com/gpu: 1
            nvidia.com/gpucores: 30
            nvidia.com/gpumem: 1024
"""
_ONE_A100 = _ONE_GPU_NODE.replace("count: 2}", "count: 1}")


def test_hami_share_is_read_as_a_fraction_and_gpu_memory() -> None:
    m = manifests(_HAMI + _ONE_A100)
    assert not m.problems.errors, [str(e) for e in m.problems.errors]
    (job,) = m.controllers.owners
    gpu = job.workloads[0].pod_sets[0].template.gpu
    assert (gpu.kind, gpu.milli, gpu.memory_mib) == ("fraction", 300, 1024)
    result = run_cycles(m, 1, until_stable=True)
    (admitted,) = [a for c in result.cycles for a in c.decisions.admitted]
    assert len({p.node for p in admitted.pods}) == 1  # three 30% shares on the one GPU


def test_hami_share_without_memory_takes_the_whole_gpu_and_on_several_gpus_counts_them_whole() -> None:
    whole = manifests(_HAMI.replace("            nvidia.com/gpumem: 1024\n", ""))
    (job,) = whole.controllers.owners
    assert job.workloads[0].pod_sets[0].template.gpu.kind == "gpu"
    several = manifests(_HAMI.replace("nvidia.com/gpu: 1", "nvidia.com/gpu: 2"))
    gpu = several.controllers.owners[0].workloads[0].pod_sets[0].template.gpu
    assert (gpu.kind, gpu.count) == ("gpu", 2)
    assert any("counted as 2 whole GPUs" in w.message and w.code == LEFT_OUT for w in several.problems.warnings)
    over = manifests(_HAMI.replace("nvidia.com/gpucores: 30", "nvidia.com/gpucores: 130"))
    assert any("at most 100" in e.message for e in over.problems.errors)


def test_one_fractional_rule_serves_the_parser_and_the_webhook() -> None:
    hami = {"metadata": {"annotations": {}}, "spec": {"containers": [{"name": "c", "resources": {"limits": {
        "nvidia.com/gpu": 1, "nvidia.com/gpucores": 30, "nvidia.com/gpumem": 1024}}}]}}
    memory_only = {"metadata": {"annotations": {"gpu-memory": "2000"}}, "spec": {"containers": [{"name": "c"}]}}
    memory_and_gpu = {"metadata": {"annotations": {"gpu-memory": "2000"}}, "spec": {"containers": [
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}
    for pod, fractional in ((hami, False), (memory_only, True), (memory_and_gpu, False)):
        assert gpushare.pod_is_fractional(pod) is fractional
    assert is_fractional({"gpufleet.io/gpu-fraction": "0.5"}, ["nvidia.com/gpu"])
    assert is_fractional({"gpu-memory": "2000"}, ["nvidia.com/gpucores"])  # HAMi's share is not a device


def test_a_pod_volcano_schedules_without_a_queue_is_in_volcanos_default_queue() -> None:
    m = manifests(_VOLCANO_DEPLOYMENT.replace("      annotations: {scheduling.volcano.sh/queue-name: test}\n", ""))
    (w,) = build_workloads(m)
    assert w.queue == "volcano:default"
    assert "volcano:default" in {cq.name for cq in m.cluster_queues}  # unlimited: Volcano creates it itself
    other = manifests(_VOLCANO_DEPLOYMENT.replace("schedulerName: volcano", "schedulerName: default-scheduler")
                      .replace("      annotations: {scheduling.volcano.sh/queue-name: test}\n", ""))
    assert build_workloads(other)[0].queue is None


def test_kai_queue_naming_a_missing_parent_is_a_top_level_queue_said_so() -> None:
    m = manifests(_KAI_QUICKSTART.split("---")[1] + _KAI_PODS, "queues.yaml")
    (w,) = [w for w in m.problems.warnings if "parentQueue default-parent-queue" in w.message]
    assert w.file == "queues.yaml" and w.field == "spec.parentQueue"
    (leaf,) = [cq for cq in m.cluster_queues if cq.name == "kai:default-queue"]
    assert leaf.cohort == "kai:(root)"
    admitted, _ = _admitted_and_pending(m)
    assert admitted == {"default/gpu-pod", "default/cpu-only-pod"}


# ---- review of issue 29: KAI's quota-less queues, names that cannot collide, one Volcano default --------------

def test_a_kai_queue_with_only_a_limit_deserves_nothing_and_borrows_up_to_its_limit() -> None:
    # KAI's quota is a plain number: unset is 0 deserved (Volcano's capability-only queue is another matter)
    m = manifests("""
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: capped}
spec:
  resources:
    gpu: {limit: 4}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: other}
spec:
  resources:
    gpu: {quota: 2, limit: -1}
""" + _ONE_GPU_NODE.replace("count: 2}", "count: 8}"))
    assert _quotas(m, "kai:capped")["nvidia.com/gpu"] == (0, 4)
    assert _quotas(m, "kai:other")["nvidia.com/gpu"] == (2, None)
    assert m.controllers.kai_deserved["nvidia.com/gpu"] == 2  # only quotas are deserved
    assert _quotas(m, "kai:(root)")["nvidia.com/gpu"] == (6, None)  # 8 GPUs, 2 deserved


def test_queues_made_for_kai_and_volcano_cannot_collide_with_the_inputs_own() -> None:
    own = """
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: Cohort
metadata: {name: kai}
spec: {}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: Cohort
metadata: {name: volcano}
spec: {}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: gpufleet-any-node}
spec: {nodeLabels: {pool: nowhere}}
"""
    m = manifests(_KAI_QUICKSTART + _KAI_PODS + "---" + _VOLCANO_DEPLOYMENT + own)
    assert not m.problems.errors, [str(e) for e in m.problems.errors]
    made = {c.name for c in m.cohorts if c.meta.source is None} | {cq.cohort for cq in m.cluster_queues}
    assert {"kai:(root)", "volcano:(root)"} <= made and not made & {"kai", "volcano"}
    assert {f.name for f in m.flavors} == {"gpufleet-any-node", "gpufleet:any-node"}
    # the user's flavor (with node labels no node has) is not the one the translated queues use
    admitted, _ = _admitted_and_pending(m)
    assert {"default/gpu-pod", "default/cpu-only-pod"} <= admitted


_VOLCANO_PYTORCH = """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: pt, namespace: ml}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          schedulerName: volcano
          containers: [{name: pytorch, image: x, resources: {requests: {cpu: "1"}}}]
    Worker:
      replicas: 2
      template:
        spec:
          schedulerName: volcano
          containers: [{name: pytorch, image: x, resources: {requests: {cpu: "1"}}}]
"""


def test_volcanos_default_queue_is_one_rule_for_every_kind() -> None:
    m = manifests(_VOLCANO_PYTORCH)
    (w,) = build_workloads(m)
    assert w.queue == "volcano:default"  # as a Deployment's or a pod's
    assert "volcano:default" in {cq.name for cq in m.cluster_queues}
    admitted, _ = _admitted_and_pending(m)
    assert admitted == {"ml/pt"}
    named = _VOLCANO_PYTORCH.replace("    Worker:\n      replicas: 2\n      template:\n",
                                     "    Worker:\n      replicas: 2\n      template:\n        metadata:\n"
                                     "          annotations: {scheduling.volcano.sh/queue-name: test}\n")
    m = manifests(_VOLCANO_DEPLOYMENT.split("---")[0] + "---\n" + named)
    assert build_workloads(m)[0].queue == "volcano:test"  # Volcano reads the queue on the pods
    job = """
apiVersion: batch/v1
kind: Job
metadata: {name: j}
spec:
  template:
    spec:
      schedulerName: volcano
      restartPolicy: Never
      containers: [{name: c, image: x}]
"""
    assert build_workloads(manifests(job))[0].queue == "volcano:default"
    ray = _KUBERAY_VOLCANO.replace("    volcano.sh/queue-name: kuberay-test-queue\n", "")
    assert build_workloads(manifests(ray))[0].queue == "volcano:default"  # KubeRay's ray.io/scheduler-name
    assert build_workloads(manifests(job.replace("volcano", "default-scheduler")))[0].queue is None


def test_pods_of_a_missing_volcano_pod_group_are_in_volcanos_default_queue_too() -> None:
    m = manifests("""
apiVersion: v1
kind: Pod
metadata:
  name: p
  annotations: {scheduling.k8s.io/group-name: absent}
spec:
  schedulerName: volcano
  containers: [{name: c, image: x}]
""")
    (w,) = build_workloads(m)
    assert w.queue == "volcano:default"
    assert ("volcano:default", "default") in {(lq.meta.name, lq.meta.namespace) for lq in m.local_queues}
