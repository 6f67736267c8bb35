"""DRA claims charged to ClusterQueue quota as Kueue's ``deviceClassMappings`` charge them (issue 28, item 4).

Kueue (pkg/dra/claims.go and its workload controller) charges each ``exactly`` ExactCount request of a claim made
from a ResourceClaimTemplate ``count`` of its DeviceClass's mapped resource per pod, times the pod set's count;
``adminAccess`` is charged nothing; ``allocationMode: All``, ``firstAvailable`` and an unmapped class make the
workload inadmissible; a pod naming a ResourceClaim directly is never charged, and Kueue admits no such workload.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.cluster.build import build_workloads
from gpufleet.cluster.dra_quota import (
    ALL_REFUSED,
    FIRST_AVAILABLE_REFUSED,
    RESOURCE_CLAIMS_REFUSED,
    ClaimCharge,
    charge_lines,
)
from gpufleet.cluster.workloads import Workload
from gpufleet.scheduling.kueue.info import pod_set_requests
from tests.conftest import manifests

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "dra"
GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig"
runner = CliRunner()


def _copy(tmp_path: Path, extra: str = "") -> Path:
    folder = tmp_path / "dra"
    shutil.copytree(EXAMPLES, folder)
    if extra:
        (folder / "extra.yaml").write_text(extra, encoding="utf-8")
    return folder


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new), encoding="utf-8")


def _plan(folder: Path) -> dict[str, Any]:
    got = runner.invoke(app, ["plan", str(folder), "--until-stable", "-o", "json"])
    assert got.exit_code == 0, got.output
    doc: dict[str, Any] = json.loads(got.stdout)
    return doc


def _admitted(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a["workload"]: a for c in doc["cycles"] for a in c["admitted"]}


def _pending(doc: dict[str, Any]) -> dict[str, str]:
    return {p["workload"]: p["reason"] for p in doc["cycles"][-1]["pending"]}


def _workloads(folder: Path) -> dict[str, Workload]:
    m = manifests("\n---\n".join(p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.yaml"))))
    assert not m.problems.errors, m.problems.errors
    return {w.key: w for w in build_workloads(m)}


def _pod(name: str, ns: str, claims: str, queue: str | None) -> str:
    label = f", labels: {{kueue.x-k8s.io/queue-name: {queue}}}" if queue else ""
    return f"""---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {ns}{label}}}
spec:
  resourceClaims: [{claims}]
  containers: [{{name: c, image: busybox, resources: {{requests: {{cpu: "1"}}}}}}]
"""


def _template(name: str, ns: str, requests: str) -> str:
    return f"""---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: {name}, namespace: {ns}}}
spec:
  spec:
    devices:
      requests:
{requests}"""


# ---- what is charged ---------------------------------------------------------------------------------------------

def test_two_pods_asking_two_gpus_each_are_charged_four(tmp_path: Path) -> None:
    # train-pair: a Job of parallelism 2, each pod's claim template asks for 2 gpu.nvidia.com devices, and
    # gpu.nvidia.com maps to nvidia.com/gpu: 2 pods x 2 = 4 GPUs of quota.
    w = _workloads(_copy(tmp_path))["research/train-pair"]
    [ps] = w.pod_sets
    assert ps.count == 2
    assert ps.claim_charges == (ClaimCharge("gpus", "research/gpu-pair-same-pcie-root", "gpus", "gpu.nvidia.com",
                                            GPU, 2),)
    [req] = pod_set_requests(w)
    assert req.per_pod[GPU] == 2000  # quota keeps nvidia.com/gpu in thousandths
    assert req.total()[GPU] == 4000
    # quota only: the pod's own requests (what placement asks of a node) have no nvidia.com/gpu
    assert GPU not in ps.template.requests and all(GPU not in p.template.requests for p in w.pods)

    doc = _plan(_copy(tmp_path / "plan"))
    admitted = _admitted(doc)
    train = admitted["research/train-pair"]
    assert train["resourceUsage"][GPU] == "4"
    assert train["draQuota"] == [{"podSet": "main", "claim": "gpus",
                                  "resourceClaimTemplate": "research/gpu-pair-same-pcie-root", "request": "gpus",
                                  "deviceClass": "gpu.nvidia.com", "resource": GPU, "perPod": 2, "pods": 2,
                                  "charged": 4}]
    assert any("nvidia.com/gpu 4" in n and "gpu.nvidia.com → nvidia.com/gpu" in n for n in train["notes"])
    # placed on the DRA node, whose allocatable has no nvidia.com/gpu: the charge is not asked of the node
    assert {p["node"] for p in train["pods"]} == {"h100-node-0"}
    assert admitted["inference/tokenizer"]["resourceUsage"][MIG] == "1"
    assert doc["usage"]["research"]["default-flavor"][GPU] == "5"  # train-pair 4 + notebook 1
    assert doc["usage"]["inference"]["default-flavor"][MIG] == "1"
    # the embeddings server names its claim and runs outside Kueue: no quota, no charge
    assert admitted["inference/embeddings"]["clusterQueue"] is None and "draQuota" not in admitted[
        "inference/embeddings"]


def test_plan_text_says_which_mapping_charged_what() -> None:
    got = runner.invoke(app, ["plan", str(EXAMPLES), "--until-stable"])
    assert got.exit_code == 0, got.output
    assert "DRA claims and ClusterQueue quota" in got.stdout
    assert "research/train-pair" in got.stdout and "2 pod(s) × 2" in got.stdout


def test_admin_access_is_charged_nothing(tmp_path: Path) -> None:
    requests = """\
      - name: watch
        exactly: {deviceClassName: gpu.nvidia.com, adminAccess: true, count: 3}
      - name: gpu
        exactly: {deviceClassName: gpu.nvidia.com}
"""
    folder = _copy(tmp_path, _template("watcher", "research", requests)
                   + _pod("watcher", "research", "{name: g, resourceClaimTemplateName: watcher}", "research"))
    w = _workloads(folder)["research/watcher"]
    assert [(c.request, c.count) for c in w.pod_sets[0].claim_charges] == [("gpu", 1)]
    assert pod_set_requests(w)[0].per_pod[GPU] == 1000


def test_counts_of_several_requests_and_claims_add_up(tmp_path: Path) -> None:
    requests = """\
      - name: a
        exactly: {deviceClassName: gpu.nvidia.com, count: 2}
      - name: b
        exactly: {deviceClassName: mig.nvidia.com, count: 3}
"""
    claims = "{name: x, resourceClaimTemplateName: mixed}, {name: y, resourceClaimTemplateName: single-gpu}"
    w = _workloads(_copy(tmp_path, _template("mixed", "research", requests)
                         + _pod("mixed", "research", claims, "research")))["research/mixed"]
    assert pod_set_requests(w)[0].per_pod[GPU] == 3000 and pod_set_requests(w)[0].per_pod[MIG] == 3
    lines = charge_lines(w)
    assert any(line.startswith("nvidia.com/gpu 3: pod set main, 1 pod(s) × 3") for line in lines)
    assert any(line.startswith("nvidia.com/mig 3:") and "mig.nvidia.com → nvidia.com/mig" in line for line in lines)


# ---- what Kueue refuses ------------------------------------------------------------------------------------------

def test_all_first_available_and_named_claims_stay_pending_with_kueues_message(tmp_path: Path) -> None:
    extra = (_template("all-gpus", "research", "      - name: every\n"
                       "        exactly: {deviceClassName: gpu.nvidia.com, allocationMode: All}\n")
             + _template("either", "research", "      - name: gpu\n        firstAvailable:\n"
                         "        - {name: whole, deviceClassName: gpu.nvidia.com}\n"
                         "        - {name: mig, deviceClassName: mig.nvidia.com}\n")
             + _pod("wants-all", "research", "{name: gpus, resourceClaimTemplateName: all-gpus}", "research")
             + _pod("wants-either", "research", "{name: gpu, resourceClaimTemplateName: either}", "research")
             + _pod("names-claim", "inference", "{name: mig, resourceClaimName: embeddings-mig}", "inference"))
    folder = _copy(tmp_path, extra)
    pending = _pending(_plan(folder))
    assert pending["research/wants-all"].startswith(
        'spec.podSets[0].template.spec.resourceClaims[0].devices.requests[0].exactly.allocationMode: Invalid value: '
        f'"All": ResourceClaimTemplate all-gpus: {ALL_REFUSED}')
    assert "claim gpus, request every" in pending["research/wants-all"]
    assert "DeviceClass gpu.nvidia.com" in pending["research/wants-all"]
    assert pending["research/wants-either"].startswith(
        'spec.podSets[0].template.spec.resourceClaims[0].devices.requests[0]: Invalid value: "null": '
        f"ResourceClaimTemplate either: {FIRST_AVAILABLE_REFUSED}")
    assert pending["inference/names-claim"].startswith(RESOURCE_CLAIMS_REFUSED)
    assert "embeddings-mig" in pending["inference/names-claim"]
    workloads = _workloads(folder)
    # a claim named directly is never charged, whatever else happens to the workload
    assert workloads["inference/names-claim"].pod_sets[0].claim_charges == ()
    assert workloads["research/wants-all"].hold is not None


def test_an_unmapped_device_class_keeps_the_workload_pending(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    _edit(folder / "kueue-config.yaml", "  - name: nvidia.com/mig\n    deviceClassNames: [mig.nvidia.com]\n", "")
    doc = _plan(folder)
    reason = _pending(doc)["inference/tokenizer"]
    assert reason.startswith('spec.podSets[0].template.spec.resourceClaims[0].resourceClaimTemplateName.'
                             'deviceClassName: Not found: "mig.nvidia.com"')
    assert "claim mig, request mig" in reason and "DeviceClass mig.nvidia.com" in reason
    assert "inference/tokenizer" not in _admitted(doc)
    assert "research/train-pair" in _admitted(doc)  # the mapped class is still charged


def test_a_queue_that_does_not_cover_the_mapped_resource_cannot_admit(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    _edit(folder / "queues.yaml", "coveredResources: [cpu, memory, nvidia.com/gpu]", "coveredResources: [cpu, memory]")
    _edit(folder / "queues.yaml", "      - {name: nvidia.com/gpu, nominalQuota: 8}\n", "")
    doc = _plan(folder)
    assert "research/train-pair" not in _admitted(doc)
    assert GPU in _pending(doc)["research/train-pair"]


def test_quota_exhausted_by_claims_keeps_the_next_workload_pending(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    _edit(folder / "queues.yaml", "{name: nvidia.com/gpu, nominalQuota: 8}", "{name: nvidia.com/gpu, nominalQuota: 4}")
    doc = _plan(folder)
    assert "research/train-pair" in _admitted(doc)  # its 4 GPUs fill the quota...
    reason = _pending(doc)["research/notebook"]  # ... and the notebook's one does not fit, on 4 free H100s
    assert GPU in reason and "insufficient" in reason
    assert doc["usage"]["research"]["default-flavor"][GPU] == "4"


# ---- when Kueue's DRA integration is off ------------------------------------------------------------------------

def test_without_a_kueue_configuration_claims_are_charged_nothing_and_said_so(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    (folder / "kueue-config.yaml").unlink()
    doc = _plan(folder)
    train = _admitted(doc)["research/train-pair"]
    assert GPU not in train["resourceUsage"] and "draQuota" not in train
    assert any("charged to no quota" in n and "no Kueue Configuration" in n for n in train["notes"])
    assert doc["usage"]["research"]["default-flavor"][GPU] == "0"


def test_a_feature_gate_turned_off_charges_nothing(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    _edit(folder / "kueue-config.yaml", "kind: Configuration\n",
          "kind: Configuration\nfeatureGates: {KueueDRAIntegration: false}\n")
    got = runner.invoke(app, ["validate", str(folder)])
    assert "deviceClassMappings are not used: featureGates turns KueueDRAIntegration off" in got.output
    train = _admitted(_plan(folder))["research/train-pair"]
    assert GPU not in train["resourceUsage"]
    assert any("turns KueueDRAIntegration off" in n for n in train["notes"])


def test_the_gate_on_without_mappings_leaves_every_class_unmapped(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    (folder / "kueue-config.yaml").write_text(
        "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nfeatureGates: {KueueDRAIntegration: true}\n",
        encoding="utf-8")
    pending = _pending(_plan(folder))
    assert 'Not found: "gpu.nvidia.com"' in pending["research/train-pair"]
    assert 'Not found: "mig.nvidia.com"' in pending["inference/tokenizer"]


# ---- the Configuration's fields ----------------------------------------------------------------------------------

CONFIG = """\
apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
resources:
  deviceClassMappings:
  - name: nvidia.com/gpu
    deviceClassNames: [gpu.nvidia.com]
  - name: nvidia.com/gpu
    deviceClassNames: [other.nvidia.com]
  - name: "bad name!"
    deviceClassNames: [x.example.com]
  - name: example.com/empty
    deviceClassNames: []
  - name: example.com/twice
    deviceClassNames: [gpu.nvidia.com, gpu.nvidia.com]
  - name: example.com/counted
    deviceClassNames: [c.example.com]
    sources: [{counter: {name: memory, driver: gpu.nvidia.com}}]
"""


def test_mapping_errors_name_file_line_and_field() -> None:
    m = manifests(CONFIG, "kueue.yaml")
    errors = {(e.line, e.field): e for e in m.problems.errors}
    assert set(errors) == {
        (7, "resources.deviceClassMappings[1].name"),
        (9, "resources.deviceClassMappings[2].name"),
        (12, "resources.deviceClassMappings[3].deviceClassNames"),
        (14, "resources.deviceClassMappings[4].deviceClassNames[0]"),
        (14, "resources.deviceClassMappings[4].deviceClassNames[1]"),
    }
    assert all(e.file == "kueue.yaml" and e.fix for e in errors.values())
    assert "already named by deviceClassMappings[0]" in errors[(7, "resources.deviceClassMappings[1].name")].message
    assert "at least one device class name is required" in errors[
        (12, "resources.deviceClassMappings[3].deviceClassNames")].message
    # Kueue's own words for a class two mappings claim
    assert errors[(14, "resources.deviceClassMappings[4].deviceClassNames[0]")].message == \
        "device class already mapped to resource nvidia.com/gpu"
    [sources] = [w for w in m.problems.warnings if w.field == "resources.deviceClassMappings[5].sources"]
    assert sources.code == "left-out" and "not implemented" in sources.message


def test_valid_mappings_are_read_in_order() -> None:
    m = manifests((EXAMPLES / "kueue-config.yaml").read_text(encoding="utf-8"))
    assert not m.problems.errors and m.config is not None
    assert [(x.name, x.device_class_names) for x in m.config.device_class_mappings] == [
        (GPU, ("gpu.nvidia.com",)), (MIG, ("mig.nvidia.com",))]
    assert m.config.dra_integration


def test_too_many_mappings_is_an_error() -> None:
    many = "".join(f"  - {{name: example.com/r{i}, deviceClassNames: [c{i}.example.com]}}\n" for i in range(17))
    m = manifests("apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\nresources:\n"
                  "  deviceClassMappings:\n" + many)
    assert any("at most 16" in e.message and e.field == "resources.deviceClassMappings" for e in m.problems.errors)
