"""deploy/webhook/ (and the chart's webhook.enabled): the fractional-GPU webhook's objects, validated offline.

Core kinds go through kubernetes-validate (strict) like deploy/; cert-manager's Issuer and Certificate have no
schema there, so their structure is checked by hand. Then the wiring: what the API server calls must reach
what the scheduler serves, with the certificate the Deployment mounts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from test_deploy_manifests import K8S_VERSIONS, chart_values, deploy_docs, render_chart

from gpufleet.admission.webhook import MUTATE_PATH
from gpufleet.k8s.serving import parse_address
from gpufleet.live.settings import settings_from_text

ROOT = Path(__file__).resolve().parents[2]
WEBHOOK = ROOT / "deploy" / "webhook"
Doc = dict[str, Any]


def webhook_docs() -> list[Doc]:
    return [d for f in sorted(WEBHOOK.glob("*.yaml")) if f.name != "kustomization.yaml"
            for d in yaml.safe_load_all(f.read_text()) if d]


def one(kind: str, docs: list[Doc] | None = None) -> Doc:
    [doc] = [d for d in (docs if docs is not None else webhook_docs()) if d["kind"] == kind]
    return doc


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("kind", ["Service", "MutatingWebhookConfiguration"])
def test_core_objects_are_valid_for_kubernetes(kind: str, version: str) -> None:
    kubernetes_validate.validate(one(kind), version, strict=True)


def test_cert_manager_objects_structure() -> None:
    issuer, cert = one("Issuer"), one("Certificate")
    for doc in (issuer, cert):
        assert doc["apiVersion"] == "cert-manager.io/v1" and set(doc) == {"apiVersion", "kind", "metadata", "spec"}
        assert doc["metadata"]["namespace"] == "gpufleet-system"
    assert issuer["spec"] == {"selfSigned": {}}
    assert set(cert["spec"]) <= {"secretName", "dnsNames", "issuerRef", "duration", "renewBefore"}
    assert cert["spec"]["issuerRef"] == {"kind": "Issuer", "name": issuer["metadata"]["name"]}


def test_kustomization_lists_every_file() -> None:
    k = yaml.safe_load((WEBHOOK / "kustomization.yaml").read_text())
    assert sorted(k["resources"]) == sorted(f.name for f in WEBHOOK.glob("*.yaml") if f.name != "kustomization.yaml")


def test_the_scheduler_config_always_runs_the_listener() -> None:
    configmap = next(d for d in deploy_docs() if d["kind"] == "ConfigMap")
    settings, problems = settings_from_text(configmap["data"]["config.yaml"], "configmap.yaml")
    assert not problems.errors and settings.webhook.enabled and settings.webhook.require_mutation


def test_the_api_server_reaches_the_scheduler_with_the_mounted_certificate() -> None:
    svc, mwc, cert = one("Service"), one("MutatingWebhookConfiguration"), one("Certificate")
    deployment = next(d for d in deploy_docs() if d["kind"] == "Deployment")
    configmap = next(d for d in deploy_docs() if d["kind"] == "ConfigMap")
    settings, _ = settings_from_text(configmap["data"]["config.yaml"])
    pod = deployment["spec"]["template"]
    [webhook] = mwc["webhooks"]
    target = webhook["clientConfig"]["service"]
    assert (target["name"], target["namespace"]) == (svc["metadata"]["name"], svc["metadata"]["namespace"])
    assert target["path"] == MUTATE_PATH
    [port] = svc["spec"]["ports"]
    assert target["port"] == port["port"]
    address = parse_address(settings.webhook.bind_address)
    assert address is not None and port["targetPort"] == address[1]
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    # TLS: cert-manager's Secret is what the Deployment mounts, where the config says the files are.
    secret = cert["spec"]["secretName"]
    volume = next(v for v in pod["spec"]["volumes"] if v.get("secret", {}).get("secretName") == secret)
    assert volume["secret"]["optional"] is True
    [container] = pod["spec"]["containers"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
    for path in (settings.webhook.cert_file, settings.webhook.key_file):
        assert Path(path).parent == Path(mount["mountPath"])
    assert f"{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc" in cert["spec"]["dnsNames"]
    assert mwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        f"{cert['metadata']['namespace']}/{cert['metadata']['name']}")


def test_only_fractional_gpufleet_pods_are_sent_and_failures_fail_closed() -> None:
    [webhook] = one("MutatingWebhookConfiguration")["webhooks"]
    assert webhook["failurePolicy"] == "Fail" and webhook["sideEffects"] == "None"
    assert webhook["admissionReviewVersions"] == ["v1"] and webhook["timeoutSeconds"] <= 10
    [rule] = webhook["rules"]
    assert (rule["operations"], rule["resources"], rule["apiGroups"]) == (["CREATE"], ["pods"], [""])
    conditions = " ".join(c["expression"] for c in webhook["matchConditions"])
    for key in ("gpufleet.io/gpu-fraction", "gpu-fraction", "gpufleet.io/gpu-memory", "gpu-memory"):
        assert f"'{key}'" in conditions
    assert "object.spec.schedulerName == 'gpufleet'" in conditions
    excluded = webhook["namespaceSelector"]["matchExpressions"][0]
    assert excluded["operator"] == "NotIn" and "gpufleet-system" in excluded["values"]


def _key(doc: Doc) -> tuple[str, str]:
    return doc["kind"], doc["metadata"]["name"]


def test_chart_with_the_webhook_renders_deploy_webhook() -> None:
    rendered = {_key(d): d for d in render_chart(chart_values(webhook__enabled=True))}
    for doc in webhook_docs():
        assert rendered[_key(doc)] == doc, _key(doc)
    other = {_key(d): d for d in render_chart(chart_values(webhook__enabled=True, schedulerName="gpu-sched"),
                                              namespace="ops")}
    [webhook] = other[("MutatingWebhookConfiguration", "gpufleet-fractional-gpu")]["webhooks"]
    assert "== 'gpu-sched'" in webhook["matchConditions"][0]["expression"]
    assert webhook["clientConfig"]["service"]["namespace"] == "ops"
    assert not [d for d in render_chart(chart_values()) if d["kind"] == "MutatingWebhookConfiguration"]
