"""``gpufleet plan`` end to end through typer's runner, on a local app (main.py registers it separately)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import typer
from typer.testing import CliRunner

from gpufleet.cli.plan import plan
from tests.kueue.scenario import job
from tests.kueue.test_cohorts import FLAVOR, cq
from tests.kueue.test_preemption import PRIORITIES

app = typer.Typer()
app.command()(plan)


@app.command()
def version() -> None:  # a second command keeps typer from collapsing the app into ``plan``
    """Unused."""


runner = CliRunner()

PREEMPTING = FLAVOR + PRIORITIES + cq("a", 4, spec="\n  preemption: {withinClusterQueue: LowerPriority}") + cq(
    "b", 2) + job("low", "a", cpu="4", priority_class="p1", created=1)
LATER = job("high", "a", cpu="4", priority_class="p300", created=2)


def write(tmp_path: Path, text: str, name: str = "snapshot.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def run_json(*args: str) -> dict[str, object]:
    result = runner.invoke(app, ["plan", *args, "--json"])
    assert result.exit_code == 0, result.output
    doc: dict[str, object] = json.loads(result.stdout)
    return doc


def test_json_of_one_cycle_has_exactly_the_documented_shape(tmp_path: Path) -> None:
    doc = run_json(write(tmp_path, PREEMPTING))
    assert doc == {
        "cycles": [{
            "admitted": [{"workload": "default/low", "clusterQueue": "a", "flavors": {"cpu": "default"},
                          "resourceUsage": {"cpu": "4"}, "pods": []}],
            "preempted": [],
            "pending": [],
        }],
        "usage": {"a": {"default": {"cpu": "4"}}, "b": {"default": {"cpu": "0"}}},
        "quotaOnly": True,  # no nodes in the snapshot: admitted by quota alone, and the JSON says so
    }


def test_until_stable_stops_at_the_first_cycle_without_admission_or_preemption(tmp_path: Path) -> None:
    doc = run_json(write(tmp_path, PREEMPTING + LATER), "--until-stable")
    cycles = doc["cycles"]
    # Both are pending at first: the higher priority one is the head and is admitted. The cycle after it, which
    # admits and preempts nothing, is where the run stops; it is not printed (issue 29), and the last cycle
    # printed carries the final pending reasons.
    assert isinstance(cycles, list) and len(cycles) == 1
    assert [a["workload"] for a in cycles[0]["admitted"]] == ["default/high"]
    (pending,) = cycles[0]["pending"]
    assert pending["workload"] == "default/low" and "insufficient unused quota" in pending["reason"]
    assert doc["usage"] == {"a": {"default": {"cpu": "4"}}, "b": {"default": {"cpu": "0"}}}


def test_preemption_across_cycles_with_a_pre_admitted_workload(tmp_path: Path) -> None:
    admitted = """---
apiVersion: kueue.x-k8s.io/v1beta1
kind: Workload
metadata: {name: low, namespace: default, creationTimestamp: "2024-01-01T00:00:00Z",
           labels: {kueue.x-k8s.io/priority-class: p1}}
spec:
  queueName: a
  priorityClassName: p1
  podSets:
  - name: main
    count: 1
    template:
      spec:
        containers: [{name: c, image: x, resources: {requests: {cpu: "4"}}}]
status:
  admission:
    clusterQueue: a
    podSetAssignments: [{name: main, count: 1, flavors: {cpu: default}, resourceUsage: {cpu: "4"}}]
"""
    text = FLAVOR + PRIORITIES + cq("a", 4, spec="\n  preemption: {withinClusterQueue: LowerPriority}") + cq(
        "b", 2) + admitted + LATER
    doc = run_json(write(tmp_path, text), "--cycles", "3")
    cycles = doc["cycles"]
    assert isinstance(cycles, list) and len(cycles) == 3
    assert cycles[0]["preempted"] == [{"workload": "default/low", "preemptor": "default/high",
                                       "reason": "InClusterQueue"}]
    assert cycles[0]["pending"][0]["workload"] == "default/high"
    assert "Pending the preemption of 1 workload(s)" in cycles[0]["pending"][0]["reason"]
    assert [a["workload"] for a in cycles[1]["admitted"]] == ["default/high"]
    assert cycles[2]["pending"][0]["workload"] == "default/low"


def test_pods_land_on_nodes_with_their_devices(tmp_path: Path) -> None:
    gpu_node = """---
apiVersion: v1
kind: Node
metadata: {name: gpu-1, labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}
status:
  allocatable: {cpu: "16", memory: 128Gi, pods: "20", nvidia.com/gpu: "2"}
"""
    text = FLAVOR + """---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: gpus}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, nvidia.com/gpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 16}, {name: nvidia.com/gpu, nominalQuota: 2}]}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: gpus, namespace: default}
spec: {clusterQueue: gpus}
""" + gpu_node + job("train", "gpus", cpu="2", count=2, gpu=1)
    doc = run_json(write(tmp_path, text))
    cycles = doc["cycles"]
    assert isinstance(cycles, list)
    (admitted,) = cycles[0]["admitted"]
    assert admitted["flavors"] == {"cpu": "default", "nvidia.com/gpu": "default"}
    pods = sorted(admitted["pods"], key=lambda p: p["pod"])
    # a NonIndexed Job's pods: <job>-<5 characters gpufleet derives where the API server draws them at random>
    assert len(pods) == 2 and all(re.fullmatch(r"default/train-[a-z0-9]{5}", p["pod"]) for p in pods)
    assert all(p["node"] == "gpu-1" and len(p["devices"]) == 1 for p in pods)
    assert pods[0]["devices"] != pods[1]["devices"]
    assert doc["usage"] == {"gpus": {"default": {"cpu": "4", "nvidia.com/gpu": "2"}}}


def test_invalid_manifests_exit_1_with_the_errors(tmp_path: Path) -> None:
    bad = FLAVOR + """---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: broken}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: missing-flavor, resources: [{name: cpu, nominalQuota: 1}]}]
"""
    result = runner.invoke(app, ["plan", write(tmp_path, bad), "--json"])
    assert result.exit_code == 1
    assert "missing-flavor" in result.stderr and result.stdout == ""


def test_table_output_names_every_decision(tmp_path: Path) -> None:
    result = runner.invoke(app, ["plan", write(tmp_path, PREEMPTING + job("later", "a", cpu="1", created=3)),
                                 "--cycles", "2"])
    assert result.exit_code == 0, result.output
    for text in ("cycle 1", "cycle 2", "default/low", "admitted", "default/later", "pending", "ClusterQueue usage"):
        assert text in result.stdout
