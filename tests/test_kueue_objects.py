"""A Kueue Workload object and what it stands for (a Job, a plain pod, a pod group) count once in `plan`, as
admitted, with their running pods where they run (issue 14 item 3)."""

from __future__ import annotations

import json

from gpufleet.api.manifests import load_manifest_text
from gpufleet.cli.plan import run_cycles
from gpufleet.cluster.build import build_workloads

CLUSTER = """apiVersion: gpufleet.io/v1alpha1
kind: NodePool
metadata: {name: a100}
spec: {count: 2, cpu: "64", memory: 512Gi, gpu: {model: A100-SXM4-80GB, count: 4}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: gpu, resources: [{name: nvidia.com/gpu, nominalQuota: 12}]}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: team, namespace: ml}
spec: {clusterQueue: team}
"""

ADMITTED = """status:
  admission:
    clusterQueue: team
    podSetAssignments: [{name: %s, count: %d, flavors: {nvidia.com/gpu: gpu}, resourceUsage: {nvidia.com/gpu: "%d"}}]
  conditions:
  - {type: QuotaReserved, status: "True", reason: QuotaReserved, lastTransitionTime: "2026-01-01T00:00:01Z"}
  - {type: Admitted, status: "True", reason: Admitted, lastTransitionTime: "2026-01-01T00:00:01Z"}
"""


def kueue_workload(name: str, pod_set: str, pods: int, gpus: int, *, owner: str | None = None,
                   labels: dict[str, str] | None = None) -> str:
    meta: dict[str, object] = {"name": name, "namespace": "ml", "labels": labels or {}}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Job", "name": "x", "uid": owner, "controller": True}]
    template = {"spec": {"containers": [{"name": "c", "image": "x",
                                          "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}
    return ("---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: Workload\nmetadata: " + json.dumps(meta) + "\nspec: "
            + json.dumps({"queueName": "team", "podSets": [{"name": pod_set, "count": pods, "template": template}]})
            + "\n" + ADMITTED % (pod_set, pods, pods * gpus))


def pod(name: str, gpus: int, node: str | None, *, labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None, uid: str | None = None, created: str = "00:00:00") -> str:
    meta: dict[str, object] = {"name": name, "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "team",
                                                                           **(labels or {})},
                               "annotations": annotations or {}, "creationTimestamp": f"2026-01-01T{created}Z"}
    if uid is not None:
        meta["uid"] = uid
    spec: dict[str, object] = {"containers": [{"name": "c", "image": "x",
                                                "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}
    if node is not None:
        spec["nodeName"] = node
    return ("---\napiVersion: v1\nkind: Pod\nmetadata: " + json.dumps(meta) + "\nspec: " + json.dumps(spec)
            + ("\nstatus: {phase: Running}\n" if node else "\n"))


JOB = """---
apiVersion: batch/v1
kind: Job
metadata: {name: train, namespace: ml, uid: job-uid, labels: {kueue.x-k8s.io/queue-name: team}}
spec:
  parallelism: 2
  completions: 2
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: 2}}}]
"""


def running_job() -> str:
    """A Job Kueue admitted, its Workload object, and its two pods running on a100-0."""
    job_pods = "".join(pod(f"train-{s}", 2, "a100-0", labels={"batch.kubernetes.io/job-name": "train"},
                           annotations={"kueue.x-k8s.io/workload": "job-train-3f2a1"}) for s in ("abcde", "fghij"))
    return JOB + kueue_workload("job-train-3f2a1", "main", 2, 2, owner="job-uid",
                                labels={"kueue.x-k8s.io/job-uid": "job-uid"}) + job_pods


def test_a_running_job_its_workload_and_its_pods_are_one_admitted_workload() -> None:
    manifests = load_manifest_text(CLUSTER + running_job() + pod("next", 4, None, created="00:05:00"))
    assert not manifests.problems.errors, manifests.problems.errors
    workloads = {w.key: w for w in build_workloads(manifests)}
    assert set(workloads) == {"ml/train", "ml/next"}
    train = workloads["ml/train"]
    assert train.admission is not None and train.admission.cluster_queue == "team"
    assert sorted((p.key, p.node_name) for p in train.pods) == [("ml/train-abcde", "a100-0"),
                                                                ("ml/train-fghij", "a100-0")]
    result = run_cycles(manifests, 3, True)
    admitted = [(a.workload, [p.node for p in a.pods]) for c in result.cycles for a in c.decisions.admitted]
    assert admitted == [("ml/next", ["a100-1"])]  # a100-0's GPUs are held by the running Job's pods
    assert result.usage["team"]["gpu"]["nvidia.com/gpu"] == "8"  # 4 for the Job, counted once, 4 for next


def test_plain_pods_and_pod_groups_fold_their_workload_objects() -> None:
    single = pod("solo", 1, "a100-1", uid="solo-uid") + kueue_workload("pod-solo-1a2b3", "main", 1, 1,
                                                                     owner="solo-uid")
    group = "".join(pod(f"g-{i}", 1, "a100-1", labels={"kueue.x-k8s.io/pod-group-name": "grp"},
                        annotations={"kueue.x-k8s.io/pod-group-total-count": "2"}) for i in range(2))
    group += kueue_workload("grp", "b54683bb", 2, 1)
    orphan = kueue_workload("orphan", "main", 1, 2, owner="gone-uid")  # its owner is not in the input
    manifests = load_manifest_text(CLUSTER + single + group + orphan)
    assert not manifests.problems.errors, manifests.problems.errors
    workloads = {w.key: w for w in build_workloads(manifests)}
    assert set(workloads) == {"ml/solo", "ml/grp", "ml/orphan"}
    assert workloads["ml/solo"].admission is not None and workloads["ml/grp"].admission is not None
    assert workloads["ml/orphan"].kind == "Workload"
    result = run_cycles(manifests, 1, False)
    assert result.usage["team"]["gpu"]["nvidia.com/gpu"] == "5"  # 1 + 2 + 2, each once
