"""Lint on DRA input: pods that get their GPUs through claims ask no nvidia.com/ resource, and the rules about GPU
requests leave them alone; a ClusterQueue's quota of a resource Kueue charges claims to (its deviceClassMappings)
is backed by the nodes publishing the mapped devices; a node whose GPUs only claims hand out is said to offer them
so."""

from __future__ import annotations

import shutil
from pathlib import Path

from gpufleet.policy.lintfiles import lint_paths
from gpufleet.policy.model import Finding

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "dra"
CLUSTER_FILES = ("nodes.yaml", "slices.yaml", "deviceclasses.yaml", "claims.yaml")

FLAVORS = """\
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: any}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: h100s}
spec:
  nodeLabels: {kubernetes.io/hostname: h100-node-0}
---
"""

# A quota of MIG devices as Kueue's deviceClassMappings charge them.
QUEUE = """\
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: @NAME@}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, nvidia.com/mig]
    flavors:
    - name: @FLAVOR@
      resources:
      - {name: cpu, nominalQuota: 16}
      - {name: nvidia.com/mig, nominalQuota: 4}
---
"""

CONFIG = """\
apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
@GATES@
resources:
  deviceClassMappings:
  - name: nvidia.com/gpu
    deviceClassNames: [gpu.nvidia.com]
  - name: nvidia.com/mig
    deviceClassNames: [mig.nvidia.com]
"""

# Pods that get GPUs only through claims, written as users write them: no nvidia.com/ resource anywhere.
CLAIMED = """\
apiVersion: v1
kind: Pod
metadata: {name: notebook, namespace: research}
spec:
  resourceClaims:
  - {name: gpu, resourceClaimTemplateName: single-gpu}
  containers:
  - name: jupyter
    image: quay.io/jupyter/pytorch-notebook
    resources:
      requests: {cpu: "4", memory: 32Gi}
      claims: [{name: gpu}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: pair, namespace: research}
spec:
  template:
    spec:
      restartPolicy: Never
      resourceClaims:
      - {name: gpus, resourceClaimTemplateName: gpu-pair-same-pcie-root}
      containers:
      - name: trainer
        image: nvcr.io/nvidia/pytorch:25.01-py3
        resources:
          requests: {cpu: "16", memory: 128Gi}
          claims: [{name: gpus}]
---
apiVersion: v1
kind: Pod
metadata: {name: tokenizer, namespace: inference}
spec:
  resourceClaims:
  - {name: mig, resourceClaimTemplateName: mig-1g10gb}
  containers:
  - name: tokenizer
    image: python:3.12-slim
    resources:
      limits: {cpu: "1", memory: 4Gi}
      claims: [{name: mig}]
---
# A device-plugin pod on a cluster whose GPUs only claims hand out, asking a resource no DeviceClass backs: it
# never runs, and the closest offer says so.
apiVersion: v1
kind: Pod
metadata: {name: plugin, namespace: research}
spec:
  containers:
  - name: c
    image: busybox
    resources: {limits: {nvidia.com/gpu.shared: 1}, requests: {cpu: "1", memory: 1Gi}}
"""

# Pods asking nvidia.com/gpu, which the gpu.nvidia.com DeviceClass backs (extendedResourceName): one GPU runs on its
# DRA devices, nine fit no node.
EXTENDED = """\
apiVersion: v1
kind: Pod
metadata: {name: one, namespace: research}
spec:
  containers:
  - name: c
    image: busybox
    resources: {limits: {nvidia.com/gpu: 1}, requests: {cpu: "1", memory: 1Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: nine, namespace: research}
spec:
  containers:
  - name: c
    image: busybox
    resources: {limits: {nvidia.com/gpu: 9}, requests: {cpu: "1", memory: 1Gi}}
"""


def _lint(tmp_path: Path, text: str, *, config: str | None = None) -> list[Finding]:
    """Lint ``text`` against examples/dra's cluster (its Nodes, slices, DeviceClasses and claim templates)."""
    cluster = tmp_path / "cluster"
    cluster.mkdir(exist_ok=True)
    for name in CLUSTER_FILES:
        shutil.copy(EXAMPLES / name, cluster / name)
    if config is not None:
        (cluster / "kueue-config.yaml").write_text(config, encoding="utf-8")
    linted = tmp_path / "linted.yaml"
    linted.write_text(text, encoding="utf-8")
    run = lint_paths([str(linted)], [str(cluster)])
    assert run.ok, [str(p) for p in run.unreadable]
    return run.findings


def _queue(name: str, flavor: str) -> str:
    return QUEUE.replace("@NAME@", name).replace("@FLAVOR@", flavor)


def test_pods_with_claims_trip_no_rule_about_gpu_requests(tmp_path: Path) -> None:
    namespaces = "apiVersion: v1\nkind: Namespace\nmetadata: {name: research}\n---\n" \
                 "apiVersion: v1\nkind: Namespace\nmetadata: {name: inference}\n---\n"
    findings = _lint(tmp_path, namespaces + CLAIMED)
    assert {(f.object.name, f.rule) for f in findings} == {("plugin", "gpu-request-unsatisfiable")}
    [plugin] = findings
    # The DRA node's GPUs are not nvidia.com/gpu to a device-plugin pod: the closest offer says how they are given.
    assert "node(s) offer GPUs through DRA claims only" in plugin.message
    assert "8x H100-SXM5-80GB (80 GiB) through DRA claims (gpu.nvidia.com)" in plugin.message
    assert "as nvidia.com/gpu" not in plugin.message


def test_an_extended_resource_a_device_class_backs_runs_on_its_dra_devices(tmp_path: Path) -> None:
    namespaces = "apiVersion: v1\nkind: Namespace\nmetadata: {name: research}\n---\n"
    findings = [f for f in _lint(tmp_path, namespaces + EXTENDED) if f.rule == "gpu-request-unsatisfiable"]
    assert [f.object.name for f in findings] == ["nine"]
    assert "Insufficient nvidia.com/gpu" in findings[0].message


def test_a_quota_kueue_charges_claims_to_is_backed_by_the_published_devices(tmp_path: Path) -> None:
    text = FLAVORS + _queue("mig-anywhere", "any") + _queue("mig-on-h100s", "h100s")
    findings = [f for f in _lint(tmp_path, text, config=CONFIG.replace("@GATES@", ""))
                if f.rule == "clusterqueue-flavor-without-nodes"]
    # Any node: a100-node-0 publishes MIG devices. The H100 node publishes none: that quota is backed by nothing.
    assert [f.object.name for f in findings] == ["mig-on-h100s"]
    assert "quota of nvidia.com/mig but covers no node that offers it" in findings[0].message


def test_without_kueues_dra_integration_no_claim_backs_the_quota(tmp_path: Path) -> None:
    # Mapped, but the integration is off: Kueue charges claims to nothing, so nothing backs nvidia.com/mig.
    config = CONFIG.replace("@GATES@", "featureGates: {KueueDRAIntegration: false}")
    findings = _lint(tmp_path, FLAVORS + _queue("mig-anywhere", "any"), config=config)
    assert [(f.rule, f.object.name) for f in findings] == [("clusterqueue-flavor-without-nodes", "mig-anywhere")]


def test_a_fraction_quota_on_dra_gpus_is_backed_by_nothing(tmp_path: Path) -> None:
    # gpufleet's fractions ride on device-plugin GPUs: a DRA node's whole GPUs take none (free_devices).
    text = FLAVORS + _queue("fractions", "any").replace("nvidia.com/mig", "gpufleet.io/gpu-milli")
    findings = _lint(tmp_path, text, config=CONFIG.replace("@GATES@", ""))
    assert [(f.rule, f.object.name) for f in findings] == [("clusterqueue-flavor-without-nodes", "fractions")]


def test_the_dra_example_lints_clean() -> None:
    run = lint_paths([str(EXAMPLES)])
    assert run.ok, [str(p) for p in run.unreadable]
    assert run.findings == []
