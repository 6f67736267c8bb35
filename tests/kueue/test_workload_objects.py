"""Kueue ``Workload`` objects as Kueue accepts them (issue 15, item 1).

The API server validates a Pod, and a Job's pod template, as a Pod: an extended resource must have a limit equal
to its request. Kueue runs no such validation on the templates of a ``Workload``'s podSets: a Workload written by
hand (or by an integration Kueue does not run Pod validation for) may request ``nvidia.com/gpu`` without a limit,
and Kueue admits it, charging the request. Kueue's own check at nomination is only that requests do not exceed
limits.
"""

from __future__ import annotations

from gpufleet.cluster.build import build_workloads
from tests.conftest import manifests
from tests.kueue.scenario import Scenario

RESOURCES_REQUESTS_ONLY = "{requests: {cpu: \"1\", nvidia.com/gpu: 2}}"


def workload(name: str, resources: str, *, count: int = 1, queue: str = "gpus") -> str:
    return f"""---
apiVersion: kueue.x-k8s.io/v1beta1
kind: Workload
metadata: {{name: {name}, namespace: default, creationTimestamp: "2024-01-01T00:00:00Z"}}
spec:
  queueName: {queue}
  podSets:
  - name: main
    count: {count}
    template:
      spec:
        containers:
        - name: c
          image: x
          resources: {resources}
"""


JOB = """---
apiVersion: batch/v1
kind: Job
metadata: {name: train, namespace: default}
spec:
  template:
    spec:
      containers:
      - name: c
        image: x
        resources: {requests: {cpu: "1", nvidia.com/gpu: 2}}
"""

POD = """---
apiVersion: v1
kind: Pod
metadata: {name: solo, namespace: default}
spec:
  containers:
  - name: c
    image: x
    resources: {requests: {cpu: "1", nvidia.com/gpu: 2}}
"""

QUEUE = """---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: gpus}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, nvidia.com/gpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 16}, {name: nvidia.com/gpu, nominalQuota: 4}]}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: gpus, namespace: default}
spec: {clusterQueue: gpus}
"""


def test_a_workload_may_request_an_extended_resource_without_a_limit() -> None:
    m = manifests(workload("wl", RESOURCES_REQUESTS_ONLY, count=2))
    assert not m.problems.all, [str(p) for p in m.problems.all]
    (wl,) = build_workloads(m)
    assert wl.total_requests() == {"cpu": 2000, "nvidia.com/gpu": 4}
    template = m.workloads[0].pod_sets[0].template
    assert (template.gpu.kind, template.gpu.count) == ("gpu", 2)
    assert template.limits == {}


def test_a_job_or_a_pod_requesting_without_a_limit_is_still_an_error() -> None:
    m = manifests(JOB + POD, "apps.yaml")
    errors = [e for e in m.problems.errors if "requested without a limit" in e.message]
    assert sorted((e.kind, e.name) for e in errors) == [("Job", "default/train"), ("Pod", "default/solo")]
    assert all(e.file == "apps.yaml" and e.fix is not None and "limits.nvidia.com/gpu" in e.fix for e in errors)


def test_a_workload_whose_requests_exceed_its_limits_names_the_field() -> None:
    resources = "{requests: {nvidia.com/gpu: 3}, limits: {nvidia.com/gpu: 2}}"
    m = manifests(workload("over", resources), "wl.yaml")
    (e,) = m.problems.errors
    assert e.kind == "Workload" and e.name == "default/over" and e.file == "wl.yaml"
    assert e.field == "spec.podSets[0].template.spec.containers[0].resources.requests.nvidia.com/gpu"
    assert "exceed limits" in e.message and e.fix is not None and "at most limits.nvidia.com/gpu" in e.fix


def test_a_workload_requesting_less_than_its_limit_is_charged_its_request() -> None:
    resources = "{requests: {nvidia.com/gpu: 1}, limits: {nvidia.com/gpu: 2}}"
    m = manifests(workload("under", resources))
    assert not m.problems.errors, [str(e) for e in m.problems.errors]
    (wl,) = build_workloads(m)
    assert wl.total_requests() == {"nvidia.com/gpu": 1}


def test_a_snapshot_with_such_a_workload_is_planned_and_the_request_charged() -> None:
    s = Scenario(QUEUE + workload("wl", RESOURCES_REQUESTS_ONLY, count=2)
                 + workload("more", RESOURCES_REQUESTS_ONLY).replace("2024-01-01T00:00:00Z", "2024-01-01T00:00:05Z"))
    s.run(2)
    assert s.admitted() == {"wl"}
    assert s.usage("gpus", resource="nvidia.com/gpu") == 4000  # quota keeps nvidia.com/gpu in thousandths
    assert "insufficient unused quota for nvidia.com/gpu" in s.pending()["more"]
