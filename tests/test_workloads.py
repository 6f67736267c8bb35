"""Workloads from Pods, pod groups, Jobs and Kueue Workload objects; Kueue's priority precedence."""

from __future__ import annotations

import re

from gpufleet.cluster.build import build_workloads
from tests.conftest import manifests

PRIORITIES = """apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: base}
value: 10
globalDefault: true
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: urgent}
value: 5000
"""


def pod(name: str, labels: str = "{}", annotations: str = "{}", extra: str = "", gpu: int = 1) -> str:
    return f"""---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: ml
  labels: {labels}
  annotations: {annotations}
  creationTimestamp: "2026-01-01T00:00:{len(name):02d}Z"
spec:
{extra}  containers:
  - name: c
    resources: {{limits: {{nvidia.com/gpu: {gpu}, cpu: "2"}}}}
"""


def test_single_pods_and_priority_precedence() -> None:
    text = PRIORITIES + pod("plain") + pod("classed", extra="  priorityClassName: high\n") + pod(
        "wpc", labels="{kueue.x-k8s.io/priority-class: urgent}", extra="  priorityClassName: high\n")
    wls = {w.name: w for w in build_workloads(manifests(text))}
    assert wls["plain"].priority == 10  # the global default PriorityClass
    assert wls["classed"].priority == 1000
    assert wls["wpc"].priority == 5000  # WorkloadPriorityClass wins over the pod's PriorityClass
    assert wls["plain"].kind == "Pod" and wls["plain"].size == 1
    assert wls["plain"].total_requests() == {"nvidia.com/gpu": 1, "cpu": 2000}


def test_pod_group_is_one_workload_with_role_pod_sets() -> None:
    group = "{kueue.x-k8s.io/pod-group-name: train, kueue.x-k8s.io/queue-name: research}"
    count = '{kueue.x-k8s.io/pod-group-total-count: "3"}'
    text = pod("w1", group, count) + pod("w2", group, count) + pod("launcher", group, count, gpu=0)
    (wl,) = build_workloads(manifests(text))
    assert wl.key == "ml/train" and wl.kind == "PodGroup" and wl.queue == "research"
    assert sorted(ps.count for ps in wl.pod_sets) == [1, 2]
    assert wl.complete and wl.size == 3
    assert wl.total_requests()["nvidia.com/gpu"] == 2


def test_incomplete_group_is_not_complete_and_bad_counts_are_errors() -> None:
    group = "{kueue.x-k8s.io/pod-group-name: g}"
    wl = build_workloads(manifests(pod("a", group, '{kueue.x-k8s.io/pod-group-total-count: "4"}')))[0]
    assert not wl.complete
    m = manifests(pod("a", group, '{kueue.x-k8s.io/pod-group-total-count: "2"}') + pod("bb", group, "{}"))
    assert build_workloads(m) == []
    assert any("pod-group-total-count" in e.message for e in m.problems.errors)


def test_job_and_kueue_workload() -> None:
    text = """apiVersion: batch/v1
kind: Job
metadata:
  name: sweep
  namespace: ml
  labels: {kueue.x-k8s.io/queue-name: research}
spec:
  parallelism: 4
  completions: 8
  backoffLimit: 2
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: c
        resources: {limits: {nvidia.com/gpu: 2}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: Workload
metadata: {name: wl, namespace: ml}
spec:
  queueName: prod
  priority: 7
  podSets:
  - name: workers
    count: 2
    template:
      spec:
        containers:
        - name: c
          resources: {requests: {cpu: "1"}}
status:
  admission:
    clusterQueue: cq
    podSetAssignments:
    - name: workers
      flavors: {cpu: default}
      resourceUsage: {cpu: "2"}
      count: 2
"""
    m = manifests(text)
    assert not m.problems.errors, [str(e) for e in m.problems.errors]
    job, wl = build_workloads(m)
    assert job.kind == "Job" and job.size == 4 and job.backoff_limit == 2
    assert job.total_requests() == {"nvidia.com/gpu": 8}
    # NonIndexed: <job>-<5 characters>, the characters the API server draws at random derived from the input
    assert len({p.key for p in job.pods}) == 4
    assert all(re.fullmatch(r"ml/sweep-[bcdfghjklmnpqrstvwxz2456789]{5}", p.key) for p in job.pods)
    assert [p.key for p in job.pods] == [p.key for p in build_workloads(manifests(text))[0].pods]
    assert wl.kind == "Workload" and wl.priority == 7 and wl.queue == "prod"
    assert wl.admission is not None and wl.admission.cluster_queue == "cq"
    assert wl.admission.pod_set_assignments[0].resource_usage == {"cpu": 2000}
