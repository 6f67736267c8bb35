"""A snapshot of a live DRA cluster in ``gpufleet plan``: a running pod keeps the devices its claim's allocation
names, and a pending pod's claim is called by the name its status gives (the resourceclaim controller's)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from gpufleet.cli.main import app
from tests.dra.dynamic_mig import allocated_claim, template

runner = CliRunner()


def _gpu(i: int) -> str:
    return f"""  - name: gpu-{i}
    attributes:
      type: {{string: gpu}}
      uuid: {{string: GPU-{i:04d}}}
      productName: {{string: NVIDIA H100 80GB HBM3}}
    capacity:
      memory: {{value: 81559Mi}}
"""


def _template(name: str, count: int) -> str:
    return template(name, "gpus", "gpu.nvidia.com", count)


def _pod(name: str, template: str, *, running: bool = False, made: str | None = None) -> str:
    node = "\n  nodeName: n1" if running else ""
    statuses = f"\n  resourceClaimStatuses: [{{name: gpus, resourceClaimName: {made}}}]" if made else ""
    phase = "Running" if running else "Pending"
    return f"""---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: ml}}
spec:{node}
  resourceClaims: [{{name: gpus, resourceClaimTemplateName: {template}}}]
  containers: [{{name: c, image: x, resources: {{requests: {{cpu: "1"}}, claims: [{{name: gpus}}]}}}}]
status:
  phase: {phase}{statuses}
"""


CLUSTER = f"""apiVersion: v1
kind: Node
metadata: {{name: n1}}
status:
  allocatable: {{cpu: "64", memory: 512Gi, pods: "110"}}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {{name: gpu.nvidia.com}}
spec:
  selectors:
  - cel: {{expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {{name: n1-gpu.nvidia.com-0}}
spec:
  driver: gpu.nvidia.com
  nodeName: n1
  pool: {{name: n1, generation: 1, resourceSliceCount: 1}}
  devices:
{"".join(_gpu(i) for i in range(8))}---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: runner-gpus-x7k2p, namespace: ml}}
spec:
  devices:
    requests:
    - name: gpus
      exactly: {{deviceClassName: gpu.nvidia.com, count: 2}}
status:
  allocation:
    devices:
      results:
      - {{request: gpus, driver: gpu.nvidia.com, pool: n1, device: gpu-0}}
      - {{request: gpus, driver: gpu.nvidia.com, pool: n1, device: gpu-1}}
    nodeSelector:
      nodeSelectorTerms:
      - matchFields: [{{key: metadata.name, operator: In, values: [n1]}}]
  reservedFor: [{{resource: pods, name: runner, uid: u-1}}]
""" + _template("two", 2) + _template("six", 6) + _template("seven", 7) \
    + _pod("runner", "two", running=True, made="runner-gpus-x7k2p")


def _plan(tmp_path: Path, *pods: str) -> dict[str, Any]:
    path = tmp_path / "snapshot.yaml"
    path.write_text(CLUSTER + "".join(pods), encoding="utf-8")
    got = runner.invoke(app, ["plan", str(path), "--until-stable", "-o", "json"])
    assert got.exit_code == 0, got.output
    return json.loads(got.stdout)


def _admitted(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["pod"]: p for c in doc["cycles"] for a in c["admitted"] for p in a["pods"]}


def test_a_running_pods_allocated_devices_stay_held(tmp_path: Path) -> None:
    doc = _plan(tmp_path, _pod("six", "six", made="six-gpus-q2w9z"), _pod("seven", "seven"))
    admitted = _admitted(doc)
    # Six of the eight GPUs are free: the six-GPU pod gets exactly those, the seven-GPU one waits.
    six = admitted["ml/six"]["claims"]
    assert sorted(c["device"] for c in six) == [f"gpu-{i}" for i in range(2, 8)]
    assert "ml/seven" not in admitted
    assert "ml/seven" in {p["workload"] for p in doc["cycles"][-1]["pending"]}
    # The pending pod's claim has the name its status gives, not one gpufleet made up.
    assert {c["claim"] for c in six} == {"ml/six-gpus-q2w9z"}



def _allocated_claim(name: str, devices: range, reserved_for: str | None) -> str:
    return allocated_claim(name, [f"gpu-{i}" for i in devices], reserved_for=reserved_for)


def _created(pod: str, when: str) -> str:
    return pod.replace("namespace: ml}", f"namespace: ml, creationTimestamp: '{when}'}}", 1)


def test_a_pending_pods_allocated_claim_keeps_its_devices_from_earlier_pods(tmp_path: Path) -> None:
    # "late" was allocated gpu-2..gpu-7 (its Binding has not landed); "early", ahead of it in the queue, asks six
    # GPUs too: kube-scheduler's allocator counts allocated devices as in use, so early waits and late keeps them.
    doc = _plan(tmp_path, _allocated_claim("late-gpus-abcde", range(2, 8), "late"),
                _created(_pod("early", "six", made="early-gpus-fghij"), "2026-01-01T00:00:00Z"),
                _created(_pod("late", "six", made="late-gpus-abcde"), "2026-01-01T01:00:00Z"))
    admitted = _admitted(doc)
    # late is bound where its claims are (by whoever allocated them), not planned again; early finds two GPUs
    assert "ml/late" not in admitted and "ml/early" not in admitted
    [early] = [p for p in doc["cycles"][-1]["pending"] if p["workload"] == "ml/early"]
    assert "Insufficient nvidia.com/gpu" in early["reason"]


def test_devices_of_a_claim_allocated_for_no_pod_are_not_offered(tmp_path: Path) -> None:
    # An allocated claim whose pod is gone keeps its devices until it is deallocated, as kube-scheduler counts it.
    doc = _plan(tmp_path, _allocated_claim("orphan-gpus", range(2, 5), None),
                _pod("six", "six", made="six-gpus-q2w9z"), _pod("two", "two", made="two-gpus-klmno"))
    admitted = _admitted(doc)
    assert "ml/six" not in admitted
    assert sorted(c["device"] for c in admitted["ml/two"]["claims"]) == ["gpu-5", "gpu-6"]


def test_a_finished_pods_claim_keeps_its_devices_until_deallocated(tmp_path: Path) -> None:
    # The runner pod finished; its claim is still allocated (the controller has not deallocated it yet).
    done = CLUSTER.replace("phase: Running", "phase: Succeeded")
    path = tmp_path / "snapshot.yaml"
    path.write_text(done + _pod("seven", "seven"), encoding="utf-8")
    got = runner.invoke(app, ["plan", str(path), "--until-stable", "-o", "json"])
    assert got.exit_code == 0, got.output
    assert "ml/seven" not in _admitted(json.loads(got.stdout))  # gpu-0 and gpu-1 are the claim's: 6 free, not 7
