"""Why a workload waits is a word the core sets when it decides (scheduling.kueue.pending), never read back from a
message: short of quota, short of nodes, preempting, queued."""

from __future__ import annotations

from pathlib import Path

from gpufleet.api.manifests import load_manifests
from gpufleet.scheduling.kueue.pending import PendingReason
from gpufleet.scheduling.snapshot_plan import run_cycles

QUEUES = """\
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: default
      resources: [{name: nvidia.com/gpu, nominalQuota: QUOTA}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: ml}
spec: {clusterQueue: cq}
---
apiVersion: v1
kind: Node
metadata: {name: n1}
status:
  allocatable: {cpu: "64", memory: 512Gi, nvidia.com/gpu: "8", pods: "110"}
"""


def _pod(name: str, gpus: int, priority: int = 0, running: bool = False) -> str:
    bound = "\n  nodeName: n1" if running else ""
    status = "\nstatus: {phase: Running}" if running else ""
    return f"""---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: ml, labels: {{kueue.x-k8s.io/queue-name: q}}}}
spec:
  priority: {priority}{bound}
  containers: [{{name: c, image: x, resources: {{limits: {{nvidia.com/gpu: {gpus}}}}}}}]{status}
"""


def _reasons(tmp_path: Path, quota: int, *pods: str) -> dict[str, PendingReason]:
    path = tmp_path / "input.yaml"
    path.write_text(QUEUES.replace("QUOTA", str(quota)) + "".join(pods), encoding="utf-8")
    result = run_cycles(load_manifests([str(path)]), 1, False)
    assert result.policy is not None
    info = result.policy.info("ml/b")
    assert info is not None and result.policy.info("ml/a") is not None
    return {"ml/b": info.pending}


def test_short_of_quota(tmp_path: Path) -> None:
    reasons = _reasons(tmp_path, 4, _pod("a", 2, running=True), _pod("b", 4))
    assert reasons["ml/b"] is PendingReason.INSUFFICIENT_QUOTA


def test_quota_fits_but_the_nodes_do_not(tmp_path: Path) -> None:
    reasons = _reasons(tmp_path, 16, _pod("a", 6, running=True), _pod("b", 4))
    assert reasons["ml/b"] is PendingReason.INSUFFICIENT_NODES


def test_preempting_a_lower_priority_workload(tmp_path: Path) -> None:
    reasons = _reasons(tmp_path, 4, _pod("a", 4, running=True), _pod("b", 4, priority=100))
    assert reasons["ml/b"] is PendingReason.PREEMPTING
