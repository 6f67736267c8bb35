"""``gpufleet plan`` on DRA input: each placed pod lists its claims' allocation results, the devices are the ones
the claims select, and a claim that cannot be met keeps its pod pending with a reason naming the claim and request."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from gpufleet.api.manifests import Manifests
from gpufleet.api.objects import ObjectMeta, Pod, PodResourceClaim, PodTemplate
from gpufleet.cli.main import app
from gpufleet.cluster.build import build_workloads
from gpufleet.cluster.dra_claims import NO_DRA_OBJECTS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "dra"
runner = CliRunner()


def _plan(*files: str) -> dict[str, Any]:
    got = runner.invoke(app, ["plan", *files, "--until-stable", "-o", "json"])
    assert got.exit_code == 0, got.output
    return json.loads(got.stdout)


def _pods(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["pod"]: p for c in doc["cycles"] for a in c["admitted"] for p in a["pods"]}


def test_each_placed_pod_lists_its_claims_allocation() -> None:
    pods = _pods(_plan(str(EXAMPLES)))
    tokenizer = pods["inference/tokenizer"]["claims"]
    assert len(tokenizer) == 1 and tokenizer[0]["request"] == "mig"
    assert tokenizer[0]["driver"] == "gpu.nvidia.com" and "-mig-1g10gb-" in tokenizer[0]["device"]
    assert tokenizer[0]["claim"].startswith("inference/tokenizer-mig-")
    # The claim the embeddings server names: its own name, a 3g.40gb device.
    [embeddings] = pods["inference/embeddings"]["claims"]
    assert embeddings["claim"] == "inference/embeddings-mig" and "-mig-3g40gb-" in embeddings["device"]
    # The gang's workers: two GPUs each, on one node, none shared.
    workers = [p for k, p in pods.items() if k.startswith("research/train-pair-")]
    assert len(workers) == 2
    devices = [(c["pool"], c["device"]) for w in workers for c in w["claims"]]
    assert len(devices) == 4 == len(set(devices))
    assert all(len(w["claims"]) == 2 and w["claims"][0]["pool"] == w["node"] for w in workers)


def test_a_claim_nothing_can_meet_keeps_its_pod_pending_naming_claim_and_request(tmp_path: Path) -> None:
    folder = tmp_path / "dra"
    shutil.copytree(EXAMPLES, folder)
    (folder / "extra.yaml").write_text("""\
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: b200, namespace: research}
spec:
  spec:
    devices:
      requests:
      - name: big
        exactly:
          deviceClassName: gpu.nvidia.com
          selectors:
          - cel: {expression: "device.attributes['gpu.nvidia.com'].productName.matches('B200')"}
---
apiVersion: v1
kind: Pod
metadata: {name: wants-b200, namespace: research}
spec:
  resourceClaims:
  - {name: gpu, resourceClaimTemplateName: b200}
  containers:
  - name: c
    image: busybox
    resources: {requests: {cpu: "1"}, claims: [{name: gpu}]}
""", encoding="utf-8")
    doc = _plan(str(folder))
    pending = {p["workload"]: p for p in doc["cycles"][-1]["pending"]}
    reason = json.dumps(pending["research/wants-b200"])
    assert "request big" in reason and "no device in the cluster matches" in reason
    assert "research/wants-b200" not in _pods(doc)


def test_without_dra_objects_a_claiming_pod_is_said_unplannable() -> None:
    # What the live scheduler builds: pods only (its informers do not watch DRA objects yet).
    template = PodTemplate({}, {}, {}, {},
                           resource_claims=(PodResourceClaim("gpu", resource_claim_template_name="single-gpu"),))
    pod = Pod(ObjectMeta("p", "ns"), template)
    [w] = build_workloads(Manifests(pods=[pod]))
    need = w.pods[0].template.dra
    assert need is not None and need.problem == NO_DRA_OBJECTS
