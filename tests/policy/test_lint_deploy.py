"""deploy/lint-webhook/ (and the chart's lintWebhook.enabled) and the exported ValidatingAdmissionPolicies, offline:
valid for Kubernetes, wired to what the scheduler serves, sending exactly the kinds the rules judge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import celpy
import kubernetes_validate
import pytest
import yaml

from gpufleet.admission.validating import VALIDATE_PATH
from gpufleet.api.workloadkinds.table import RULES as KIND_RULES
from gpufleet.api.workloadkinds.table import api_resources
from gpufleet.api.workloadkinds.templates import WORKLOAD_KINDS
from gpufleet.policy.vap import export_documents
from tests.kube.test_deploy_manifests import K8S_VERSIONS, chart_values, render_chart

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "deploy" / "lint-webhook"
Doc = dict[str, Any]


def vwc() -> Doc:
    [doc] = [d for d in yaml.safe_load_all((FOLDER / "validatingwebhookconfiguration.yaml").read_text()) if d]
    return doc


def test_kustomization_lists_every_file() -> None:
    k = yaml.safe_load((FOLDER / "kustomization.yaml").read_text())
    assert sorted(k["resources"]) == sorted(f.name for f in FOLDER.glob("*.yaml") if f.name != "kustomization.yaml")


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_the_webhook_configuration_is_valid_for_kubernetes(version: str) -> None:
    kubernetes_validate.validate(vwc(), version, strict=True)


def test_it_calls_the_schedulers_validate_path_through_the_webhook_service() -> None:
    webhook_folder = ROOT / "deploy" / "webhook"
    service = yaml.safe_load((webhook_folder / "service.yaml").read_text())
    certificate = next(d for d in yaml.safe_load_all((webhook_folder / "certificate.yaml").read_text())
                       if d and d["kind"] == "Certificate")
    doc = vwc()
    [hook] = doc["webhooks"]
    target = hook["clientConfig"]["service"]
    assert target == {"name": service["metadata"]["name"], "namespace": service["metadata"]["namespace"],
                      "path": VALIDATE_PATH, "port": service["spec"]["ports"][0]["port"]}
    meta = certificate["metadata"]
    assert doc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{meta['namespace']}/{meta['name']}"
    assert hook["failurePolicy"] in ("Ignore", "Fail") and hook["timeoutSeconds"] <= 10
    assert hook["admissionReviewVersions"] == ["v1"] and hook["sideEffects"] == "None"


def test_it_sends_exactly_the_kinds_the_rules_judge() -> None:
    plural = {(g, k): p for g, _, p, k, _ in api_resources()} | {("", "Pod"): "pods"}
    wanted = {(g, v, plural[(g, k)]) for g, k in WORKLOAD_KINDS if (g, k) in plural
              for v in (["v1"] if not g else KIND_RULES[(g, k)].versions) if KIND_RULES.get((g, k), None) is None
              or KIND_RULES[(g, k)].grouping != "pod-group"}
    wanted |= {(g, v, r) for g, versions in (("kueue.x-k8s.io", ("v1beta1", "v1beta2", "v1alpha1")),
                                             ("gpufleet.io", ("v1beta1", "v1beta2", "v1alpha1")))
               for v in versions for r in ("clusterqueues", "localqueues")}
    [hook] = vwc()["webhooks"]
    sent = {(g, v, r) for rule in hook["rules"] for g in rule["apiGroups"] for v in rule["apiVersions"]
            for r in rule["resources"]}
    assert all(rule["operations"] == ["CREATE", "UPDATE"] for rule in hook["rules"])
    assert sent == wanted


@pytest.mark.parametrize(("obj", "sent"), [
    ({"kind": "Pod", "metadata": {"name": "p"}}, True),
    ({"kind": "Pod", "metadata": {"name": "p", "ownerReferences": [{"kind": "ReplicaSet", "controller": True}]}},
     False),
    ({"kind": "Pod", "metadata": {"name": "p", "ownerReferences": [{"kind": "Thing"}]}}, True),
    ({"kind": "Deployment", "metadata": {"name": "d", "ownerReferences": [{"kind": "X", "controller": True}]}},
     True),
])
def test_the_match_condition_leaves_out_pods_a_controller_made(obj: Doc, sent: bool) -> None:
    [hook] = vwc()["webhooks"]
    [condition] = hook["matchConditions"]
    env = celpy.Environment()
    program = env.program(env.compile(condition["expression"]))
    assert bool(program.evaluate({"object": celpy.json_to_cel(obj)})) is sent


def test_the_chart_renders_deploy_lint_webhook() -> None:
    def ours(values: dict[str, Any], namespace: str = "gpufleet-system") -> list[Doc]:
        return [d for d in render_chart(values, namespace) if d["kind"] == "ValidatingWebhookConfiguration"]

    assert ours(chart_values()) == []  # off by default
    assert ours(chart_values(webhook__enabled=True, lintWebhook__enabled=True)) == [vwc()]
    [other] = ours(chart_values(webhook__enabled=True, lintWebhook__enabled=True, lintWebhook__failurePolicy="Fail"),
                   "ops")
    [hook] = other["webhooks"]
    assert hook["failurePolicy"] == "Fail" and hook["clientConfig"]["service"]["namespace"] == "ops"


@pytest.mark.parametrize("version", ("1.30", K8S_VERSIONS[-1]))
def test_the_exported_policies_are_valid_for_kubernetes(version: str) -> None:
    docs = [d for d in yaml.safe_load_all(export_documents()) if d]
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["ValidatingAdmissionPolicy"] * 2 + ["ValidatingAdmissionPolicyBinding"] * 2
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)
    bindings = {d["spec"]["policyName"]: d["spec"]["validationActions"] for d in docs
                if d["kind"] == "ValidatingAdmissionPolicyBinding"}
    assert bindings == {"gpufleet-lint-deny": ["Deny"], "gpufleet-lint-warn": ["Warn", "Audit"]}
