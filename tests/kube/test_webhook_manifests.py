"""deploy/webhook/ (and the chart's webhook.enabled): the admission webhook's objects (fractional GPUs, MIG
resizes), validated offline.

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
@pytest.mark.parametrize("kind", ["Service", "MutatingWebhookConfiguration", "ClusterRole", "ClusterRoleBinding",
                                  "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"])
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
    [port] = svc["spec"]["ports"]
    assert [w["name"] for w in mwc["webhooks"]] == ["fractional-gpu.gpufleet.io", "mig-resize.gpufleet.io"]
    for webhook in mwc["webhooks"]:
        target = webhook["clientConfig"]["service"]
        assert (target["name"], target["namespace"]) == (svc["metadata"]["name"], svc["metadata"]["namespace"])
        assert target["path"] == MUTATE_PATH
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
    webhook = one("MutatingWebhookConfiguration")["webhooks"][0]
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
    for webhook in other[("MutatingWebhookConfiguration", "gpufleet-fractional-gpu")]["webhooks"]:
        assert "== 'gpu-sched'" in webhook["matchConditions"][0]["expression"]
        assert webhook["clientConfig"]["service"]["namespace"] == "ops"
    [subject] = other[("ClusterRoleBinding", "gpufleet-mig-resize")]["subjects"]
    assert subject == {"kind": "ServiceAccount", "name": "gpufleet-scheduler", "namespace": "ops"}
    assert not [d for d in render_chart(chart_values()) if d["kind"] == "MutatingWebhookConfiguration"]


def _mig_pod(*, scheduler: str = "gpufleet", controlled: bool | None = True, where: str = "limits",
             resource: str = "nvidia.com/mig-1g.10gb", init: bool = False) -> Doc:
    meta: Doc = {"name": "p", "namespace": "team-a"}
    if controlled is not None:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u",
                                    "controller": controlled}]
    containers = [{"name": "side", "image": "x"},
                  {"name": "main", "image": "x", "resources": {where: {resource: "1", "cpu": "1"}}}]
    spec: Doc = {"schedulerName": scheduler, "containers": containers}
    if init:
        spec["initContainers"] = [{"name": "warm", "image": "x",
                                   "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


@pytest.mark.parametrize(("pod", "sent"), [
    (_mig_pod(), True),
    (_mig_pod(where="requests"), True),
    (_mig_pod(scheduler="default-scheduler"), False),  # another scheduler's pod
    (_mig_pod(controlled=None), False),  # a pod of its own: nothing makes it again
    (_mig_pod(controlled=False), False),  # owned, but by no controller
    (_mig_pod(resource="nvidia.com/gpu"), False),  # no MIG instance asked
    (_mig_pod(resource="nvidia.com/gpu", init=True), True),  # asked by an init container (the charge counts it)
])
def test_the_mig_resize_webhook_gets_exactly_the_controlled_mig_pods_of_this_scheduler_and_fails_open(
        pod: Doc, sent: bool) -> None:
    import celpy

    webhook = one("MutatingWebhookConfiguration")["webhooks"][1]
    assert webhook["failurePolicy"] == "Ignore" and webhook["sideEffects"] == "None"
    env = celpy.Environment()
    activation = {"object": celpy.json_to_cel(pod)}
    results = [bool(env.program(env.compile(c["expression"])).evaluate(activation))
               for c in webhook["matchConditions"]]
    assert all(results) is sent, results


def _resizable() -> set[tuple[str, str]]:
    """(group, plural) of the kinds gpufleet resizes (gpufleet.api.mig_resized.RESIZABLE_KINDS)."""
    from gpufleet.api.mig_resized import RESIZABLE_KINDS
    from gpufleet.k8s import resources as r

    out = {(res.group, res.plural) for res in r.WORKLOAD_RESOURCES if (res.group, res.kind) in RESIZABLE_KINDS}
    assert len(out) == len(RESIZABLE_KINDS)
    return out


def test_the_mig_resize_grant_patches_only_the_job_kinds_and_goes_to_the_scheduler() -> None:
    role, binding = one("ClusterRole"), one("ClusterRoleBinding")
    verbs = {(g, res, v) for rule in role["rules"] for g in rule["apiGroups"] for res in rule["resources"]
             for v in rule["verbs"]}
    assert {v for _, _, v in verbs} == {"patch"}
    assert {(g, res) for g, res, _ in verbs} == _resizable()
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": role["metadata"]["name"]}
    deployment = next(d for d in deploy_docs() if d["kind"] == "Deployment")
    [subject] = binding["subjects"]
    assert (subject["name"], subject["namespace"]) == (
        deployment["spec"]["template"]["spec"]["serviceAccountName"], deployment["metadata"]["namespace"])


def test_only_the_scheduler_changes_a_resize_once_the_object_exists() -> None:
    from test_policy_manifests import SCHEDULER, Policy

    vap, binding = one("ValidatingAdmissionPolicy"), one("ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {"policyName": vap["metadata"]["name"], "validationActions": ["Deny"]}
    rules = vap["spec"]["matchConstraints"]["resourceRules"]
    assert {(g, res) for rule in rules for g in rule["apiGroups"] for res in rule["resources"]} == _resizable()
    assert {op for rule in rules for op in rule["operations"]} == {"UPDATE"}  # set at creation: pods agree
    policy = Policy(vap)
    key = "gpufleet.io/mig-resized"

    def job(**annotations: str) -> Doc:
        meta: Doc = {"name": "train", "namespace": "ml"}
        if annotations:
            meta["annotations"] = annotations
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta}

    one_two = {key: "nvidia.com/mig-1g.10gb=nvidia.com/mig-2g.20gb"}
    chained = {key: "nvidia.com/mig-1g.10gb=nvidia.com/mig-3g.40gb,nvidia.com/mig-2g.20gb=nvidia.com/mig-3g.40gb"}
    for case, user, new, old, admitted in [
        ("the scheduler writes it", SCHEDULER, job(**one_two), job(), True),
        ("the scheduler adds an entry", SCHEDULER, job(**chained), job(**one_two), True),
        ("a user removes it", "alice", job(), job(**one_two), False),
        ("a user changes it", "alice", job(**chained), job(**one_two), False),
        ("a user adds it later", "alice", job(**one_two), job(), False),
        ("a user edits another annotation", "alice", job(**one_two, note="x"), job(**one_two), True),
        ("the Job controller writes status", "system:serviceaccount:kube-system:job-controller", job(**one_two),
         job(**one_two), True),
    ]:
        assert policy.admits("UPDATE", user, new, old) is admitted, case
