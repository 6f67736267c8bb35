"""Lint's messages are sentences (issue 29, item 9): no Python dict or repr in them, whatever the input holds."""

from __future__ import annotations

from pathlib import Path

from gpufleet.policy.lintfiles import lint_paths

CLUSTER = """apiVersion: v1
kind: Node
metadata: {name: n1, labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3, nvidia.com/gpu.count: "8"}}
status: {capacity: {nvidia.com/gpu: "8", cpu: "64", memory: 512Gi}, allocatable: {nvidia.com/gpu: "8", cpu: "64",
         memory: 512Gi}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: nowhere}
spec: {nodeLabels: {pool: nowhere, zone: z1}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: nowhere
      resources: [{name: nvidia.com/gpu, nominalQuota: 4}]
"""


def test_a_flavor_covering_no_node_names_its_labels_as_text(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER)
    run = lint_paths([str(path)])
    (finding,) = [f for f in run.findings if f.rule == "clusterqueue-flavor-without-nodes"]
    assert "no node with its nodeLabels pool=nowhere, zone=z1" in finding.message
    assert not any(c in finding.message for c in "{}'"), finding.message
