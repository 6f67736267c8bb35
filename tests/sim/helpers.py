"""Small builders for simulator tests: clusters and jobs written as YAML, as users write them."""

from __future__ import annotations

from gpufleet.api.manifests import Manifests, load_manifest_text
from gpufleet.cluster.state import ClusterState
from gpufleet.sim.model import SimJob
from gpufleet.sim.sources.manifests import jobs_from_manifests


def load(text: str) -> Manifests:
    m = load_manifest_text(text)
    assert not m.problems.errors, [str(e) for e in m.problems.errors]
    return m


def cluster_of(text: str) -> ClusterState:
    return ClusterState.from_nodes(load(text).nodes)


def jobs_of(text: str) -> list[SimJob]:
    m = load(text)
    jobs = jobs_from_manifests(m)
    assert not m.problems.errors, [str(e) for e in m.problems.errors]
    return jobs


def pool(name: str, count: int, gpus: int, model: str = "A100-SXM4-80GB", extra: str = "") -> str:
    return f"""
apiVersion: gpufleet.io/v1alpha1
kind: NodePool
metadata: {{name: {name}}}
spec:
  count: {count}
  namePrefix: {name}
  gpu: {{model: {model}, count: {gpus}{extra}}}
  cpu: "64"
  memory: 512Gi
---
"""


def job(name: str, *, gpus: int = 1, pods: int = 1, resource: str = "nvidia.com/gpu", arrival: str = "0s",
        duration: str = "1h", annotations: str = "", namespace: str = "team-a", backoff: int = 0,
        labels: str = "", pod_annotations: str = "{}") -> str:
    return f"""
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: {namespace}
  labels: {{{labels}}}
  annotations:
    sim.gpufleet.io/arrival: "{arrival}"
    sim.gpufleet.io/duration: "{duration}"
{annotations}
spec:
  parallelism: {pods}
  completions: {pods}
  backoffLimit: {backoff}
  template:
    metadata:
      annotations: {pod_annotations}
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: trainer
        resources:
          limits: {{{resource}: {gpus}, cpu: "1", memory: 1Gi}}
---
"""


def kueue_queues(resources: tuple[str, ...] = ("nvidia.com/gpu",), quota: int = 16, *,
                 cq_annotations: str = "", strategy: str = "") -> str:
    """Namespace team-a, LocalQueue ``q`` in it, pointing at ClusterQueue ``cq`` with ``quota`` of each of
    ``resources`` (one ResourceFlavor ``gpus``); ``cq_annotations``: its annotations, as a YAML flow map's
    inside; ``strategy``: its queueingStrategy, Kueue's default when empty."""
    rows = "\n".join(f"      - {{name: {r}, nominalQuota: {quota}}}" for r in resources)
    annotations = f"\n  annotations: {{{cq_annotations}}}" if cq_annotations else ""
    queueing = f"\n  queueingStrategy: {strategy}" if strategy else ""
    return f"""
apiVersion: v1
kind: Namespace
metadata: {{name: team-a}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {{name: gpus}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata:
  name: cq{annotations}
spec:
  namespaceSelector: {{}}{queueing}
  resourceGroups:
  - coveredResources: [cpu, memory, {", ".join(resources)}]
    flavors:
    - name: gpus
      resources:
      - {{name: cpu, nominalQuota: 1000}}
      - {{name: memory, nominalQuota: 10Ti}}
{rows}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {{name: q, namespace: team-a}}
spec: {{clusterQueue: cq}}
---
"""
