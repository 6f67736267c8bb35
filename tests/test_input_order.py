"""Input order is queue order when timestamps are absent; inactive Workloads wait; YAML booleans as names."""

from __future__ import annotations

from gpufleet.cluster.build import build_workloads
from gpufleet.scheduling.kueue import KueuePolicy
from tests.conftest import manifests

QUEUE = """apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  queueingStrategy: StrictFIFO
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 1}]}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: lq, namespace: default}
spec: {clusterQueue: cq}
"""

JOB = """---
apiVersion: batch/v1
kind: Job
metadata: {name: first-job, labels: {kueue.x-k8s.io/queue-name: lq}}
spec:
  template:
    spec:
      containers: [{name: c, resources: {requests: {cpu: "1"}}}]
"""
POD = """---
apiVersion: v1
kind: Pod
metadata: {name: second-pod, labels: {kueue.x-k8s.io/queue-name: lq}}
spec:
  containers: [{name: c, resources: {requests: {cpu: "1"}}}]
"""


def test_documents_without_timestamps_queue_in_input_order() -> None:
    m = manifests(QUEUE + JOB + POD)
    assert [w.name for w in build_workloads(m)] == ["first-job", "second-pod"]
    policy = KueuePolicy(m)
    for w in build_workloads(m):
        policy.submit(w, 0.0)
    decisions = policy.cycle(0.0)
    # One CPU of quota: the Job, written first, is admitted although Pods are collected before Jobs.
    assert [a.workload for a in decisions.admitted] == ["default/first-job"]


def test_inactive_workload_is_not_admitted() -> None:
    wl = """---
apiVersion: kueue.x-k8s.io/v1beta1
kind: Workload
metadata: {name: paused}
spec:
  queueName: lq
  active: false
  podSets:
  - name: main
    count: 1
    template:
      spec:
        containers: [{name: c, resources: {requests: {cpu: "1"}}}]
"""
    m = manifests(QUEUE + wl)
    (w,) = build_workloads(m)
    assert not w.active
    policy = KueuePolicy(m)
    policy.submit(w, 0.0)
    assert policy.cycle(0.0).admitted == []
    assert any("inactive" in p.reason for p in policy.pending_report())


def test_unquoted_yaml_boolean_name_gets_a_fix() -> None:
    m = manifests("apiVersion: v1\nkind: Namespace\nmetadata: {name: off}\n")
    (e,) = m.problems.errors
    assert "boolean false" in e.message and e.fix is not None and 'name: "off"' in e.fix
