"""DRA-backed extended resources (KEP-5004): a pod asking ``nvidia.com/gpu`` goes where a device plugin offers it,
else onto the DRA devices of the DeviceClass whose ``extendedResourceName`` is ``nvidia.com/gpu`` (what NVIDIA's
chart sets on resource.k8s.io/v1), still charged to quota as ``nvidia.com/gpu``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from gpufleet.cli.main import app

runner = CliRunner()

DRA_NODE = """apiVersion: v1
kind: Node
metadata: {name: dra-node}
status:
  allocatable: {cpu: "64", memory: 512Gi, pods: "110"}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.nvidia.com}
spec:
  extendedResourceName: nvidia.com/gpu
  selectors:
  - cel: {expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: dra-node-gpu.nvidia.com-0}
spec:
  driver: gpu.nvidia.com
  nodeName: dra-node
  pool: {name: dra-node, generation: 1, resourceSliceCount: 1}
  devices:
""" + "".join(f"""  - name: gpu-{i}
    attributes:
      type: {{string: gpu}}
      uuid: {{string: GPU-{i:04d}}}
      productName: {{string: NVIDIA H100 80GB HBM3}}
    capacity:
      memory: {{value: 81559Mi}}
""" for i in range(4))

PLUGIN_NODE = """---
apiVersion: v1
kind: Node
metadata: {name: plugin-node, labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3, nvidia.com/gpu.count: "2"}}
status:
  allocatable: {cpu: "64", memory: 512Gi, pods: "110", nvidia.com/gpu: "2"}
"""

QUEUES = """---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: default
      resources: [{name: nvidia.com/gpu, nominalQuota: 16}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: ml}
spec: {clusterQueue: cq}
"""


def _pod(name: str, gpus: int) -> str:
    return f"""---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: ml, labels: {{kueue.x-k8s.io/queue-name: q}}}}
spec:
  containers: [{{name: c, image: x, resources: {{limits: {{nvidia.com/gpu: {gpus}}}}}}}]
"""


def _plan(tmp_path: Path, text: str) -> dict[str, Any]:
    path = tmp_path / "input.yaml"
    path.write_text(text, encoding="utf-8")
    got = runner.invoke(app, ["plan", str(path), "--until-stable", "-o", "json"])
    assert got.exit_code == 0, got.output
    return json.loads(got.stdout)


def _admitted(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a["workload"]: a for c in doc["cycles"] for a in c["admitted"]}


def test_a_gpu_pod_takes_the_device_plugin_first_then_the_classs_dra_devices(tmp_path: Path) -> None:
    doc = _plan(tmp_path, DRA_NODE + PLUGIN_NODE + QUEUES + _pod("first", 2) + _pod("second", 3))
    admitted = _admitted(doc)
    [first] = admitted["ml/first"]["pods"]
    assert first["node"] == "plugin-node" and "claims" not in first
    [second] = admitted["ml/second"]["pods"]
    assert second["node"] == "dra-node"
    devices = [c["device"] for c in second["claims"]]
    assert len(devices) == 3 == len(set(devices)) and all(d.startswith("gpu-") for d in devices)
    assert {c["claim"].split("/")[1].rsplit("-", 1)[0] for c in second["claims"]} == {"second-extended-resources"}
    # Quota is charged on the extended resource, as Kueue charges it, whichever way the pod got its GPUs.
    assert admitted["ml/second"]["resourceUsage"] == {"nvidia.com/gpu": "3"}
    assert doc["usage"]["cq"]["default"]["nvidia.com/gpu"] == "5"


def test_more_than_the_dra_devices_waits(tmp_path: Path) -> None:
    doc = _plan(tmp_path, DRA_NODE + QUEUES + _pod("big", 5))
    assert "ml/big" not in _admitted(doc)


def test_a_classs_implicit_extended_resource_is_placed_on_its_devices(tmp_path: Path) -> None:
    # No queue: Kueue would charge the implicit name, which no ClusterQueue here covers.
    pod = _pod("implicit", 2).replace("nvidia.com/gpu: 2", "deviceclass.resource.kubernetes.io/gpu.nvidia.com: 2") \
        .replace(", labels: {kueue.x-k8s.io/queue-name: q}", "")
    doc = _plan(tmp_path, DRA_NODE + pod)
    [placed] = _admitted(doc)["ml/implicit"]["pods"]
    assert placed["node"] == "dra-node" and len(placed["claims"]) == 2
