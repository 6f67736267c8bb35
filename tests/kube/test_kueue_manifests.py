"""deploy/kueue/ and deploy/beside-kueue/, checked offline: valid objects, RBAC that grants exactly what the
scheduler reads and writes in each mode, a configuration the scheduler accepts, and the AdmissionCheck it answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from test_deploy_manifests import K8S_VERSIONS, one

from gpufleet.k8s import resources as r
from gpufleet.live.queuesource import BESIDE_KUEUE_RESOURCES
from gpufleet.live.settings import settings_from_text

ROOT = Path(__file__).resolve().parents[2]
Doc = dict[str, Any]
READ = ("get", "list", "watch")


def docs(folder: str) -> list[Doc]:
    path = ROOT / "deploy" / folder
    listed = yaml.safe_load((path / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(f.name for f in path.glob("*.yaml") if f.name != "kustomization.yaml")
    return [d for name in listed for d in yaml.safe_load_all((path / name).read_text()) if d]


def permissions(folder: str) -> set[tuple[str, str, str]]:
    [role] = [d for d in docs(folder) if d["kind"] == "ClusterRole"]
    return {(g, res, verb) for rule in role["rules"] for g in rule["apiGroups"] for res in rule["resources"]
            for verb in rule["verbs"]}


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("folder", ["kueue", "beside-kueue"])
def test_core_objects_are_valid_for_kubernetes(folder: str, version: str) -> None:
    for doc in docs(folder):
        if doc["apiVersion"].startswith("kueue.x-k8s.io/"):
            continue  # Kueue's CRD kinds: checked below
        kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("folder", ["kueue", "beside-kueue"])
def test_rules_are_justified_and_bound_to_the_scheduler(folder: str) -> None:
    lines = (ROOT / "deploy" / folder / "rbac.yaml").read_text().splitlines()
    for i, line in enumerate(lines):
        if line.startswith("- apiGroups:"):
            assert lines[i - 1].lstrip().startswith("#"), f"{folder}/rbac.yaml:{i + 1}: rule without a reason"
    [binding] = [d for d in docs(folder) if d["kind"] == "ClusterRoleBinding"]
    sa = one("ServiceAccount")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                    "namespace": sa["metadata"]["namespace"]}]


def test_kueue_role_reads_kueues_queue_kinds_and_writes_their_statuses() -> None:
    granted = permissions("kueue")
    assert {(g, res) for g, res, verb in granted if verb in READ} == {
        (res.group, res.plural) for res in (*r.KUEUE_QUEUE_RESOURCES, r.KUEUE_ADMISSION_CHECKS)}
    assert {p for p in granted if p[2] not in READ} == {
        ("kueue.x-k8s.io", "clusterqueues/status", "update"), ("kueue.x-k8s.io", "localqueues/status", "update")}


def test_beside_kueue_role_reads_what_the_informers_watch_and_writes_only_check_states() -> None:
    granted = permissions("beside-kueue")
    watched = {(res.group, res.plural) for res in (*r.KUEUE_QUEUE_RESOURCES, *BESIDE_KUEUE_RESOURCES)}
    for group, plural in watched:
        for verb in READ:
            assert (group, plural, verb) in granted, (plural, verb)
    assert {(g, res) for g, res, verb in granted if verb in READ} == watched
    assert {p for p in granted if p[2] not in READ} == {
        ("kueue.x-k8s.io", "workloads/status", "update"), ("kueue.x-k8s.io", "admissionchecks/status", "update")}


def test_beside_kueue_configuration_is_accepted_and_names_the_checks_controller() -> None:
    [config] = [d for d in docs("beside-kueue") if d["kind"] == "ConfigMap"]
    base = one("ConfigMap", "gpufleet-scheduler-config")
    assert config["metadata"] == base["metadata"]  # it replaces deploy/'s configuration
    settings, problems = settings_from_text(config["data"]["config.yaml"], "beside-kueue/configmap.yaml")
    assert not problems.errors, problems.errors
    assert settings.beside_kueue.enabled and settings.queues.source == "kueue"
    base_settings, _ = settings_from_text(base["data"]["config.yaml"], "configmap.yaml")
    # Everything else is deploy/'s configuration unchanged.
    assert (settings.leader_election, settings.webhook) == (base_settings.leader_election, base_settings.webhook)
    [check] = [d for d in docs("beside-kueue") if d["kind"] == "AdmissionCheck"]
    assert check["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    assert check["spec"] == {"controllerName": settings.beside_kueue.admission_check_controller}
