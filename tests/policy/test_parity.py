"""One rule engine behind three front ends: for every case and sample object, lint, the validating webhook (a real
AdmissionReview over HTTPS, served by the scheduler's webhook server) and the exported ValidatingAdmissionPolicies
(their CEL evaluated with cel-python) find the same rules.

The webhook judges an object against a cluster made of tests/data/lint/cluster.yaml and the other objects of the
same file (as if applied before it), which is what lint judges it against. The policies know no cluster: they are
compared with lint run without --cluster, on the rules they export."""

from __future__ import annotations

import json
import re
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gpufleet.admission.lint_settings import LintSettings
from gpufleet.admission.validating import VALIDATE_PATH, Validator
from gpufleet.admission.webhook import WebhookPolicy
from gpufleet.admission.webhook_server import WebhookServer
from gpufleet.api.manifests import load_manifests
from gpufleet.policy.cluster import ClusterView
from gpufleet.policy.lintfiles import lint_paths
from gpufleet.policy.subjects import group_of, judged
from gpufleet.policy.vap import exportable, policies
from tests.policy.celeval import CompiledPolicy

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "lint"
TLS = ROOT / "tests" / "kube" / "webhook_tls"
CLUSTER = str(DATA / "cluster.yaml")
FILES = sorted((DATA / "cases").glob("*.yaml")) + sorted((DATA / "samples").glob("*/*.yaml"))
Doc = dict[str, Any]


def objects_of(path: Path) -> list[Doc]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d and judged(d)]


def rules_for(found: dict[tuple[str, str], set[str]], obj: Doc) -> set[str]:
    """What lint found on the object (one named from generateName goes by the name lint gave it)."""
    meta = obj["metadata"]
    if meta.get("name"):
        return found.get((obj["kind"], meta["name"]), set())
    named = [rules for (kind, name), rules in found.items() if kind == obj["kind"]
             and name.startswith(meta["generateName"])]
    return named[0] if named else set()


def lint_rules(path: Path, cluster: bool) -> dict[tuple[str, str], set[str]] | None:
    run = lint_paths([str(path)], [CLUSTER] if cluster else [])
    if not run.ok:
        return None
    out: dict[tuple[str, str], set[str]] = {}
    for f in run.findings:
        out.setdefault((f.object.kind, f.object.name), set()).add(f.rule)
    return out


class Webhook:
    def __init__(self) -> None:
        self.view = ClusterView()
        self.server = WebhookServer("127.0.0.1:0", str(TLS / "tls.crt"), str(TLS / "tls.key"), WebhookPolicy(),
                                    validator=Validator(LintSettings(), lambda: self.view))
        self.client = httpx.Client(verify=ssl.create_default_context(cafile=str(TLS / "tls.crt")))

    def rules(self, obj: Doc) -> set[str]:
        group = group_of(obj["apiVersion"])
        body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": {"uid": "u-1", "kind": {"group": group, "version": obj["apiVersion"].split("/")[-1],
                                                   "kind": obj["kind"]},
                            "operation": "CREATE", "namespace": obj["metadata"].get("namespace"), "object": obj}}
        answer = self.client.post(f"https://127.0.0.1:{self.server.port}{VALIDATE_PATH}",
                                  content=json.dumps(body), headers={"Content-Type": "application/json"}, timeout=10)
        assert answer.status_code == 200, answer.text
        response = answer.json()["response"]
        assert response["uid"] == "u-1"
        found = {w.split("]", 1)[0].lstrip("[") for w in response.get("warnings", [])}
        if not response["allowed"]:
            message = response["status"]["message"]
            found |= set(re.findall(r"\[([a-z][a-z0-9]*(?:-[a-z0-9]+)+)\] ", message))
        return found


@pytest.fixture(scope="module")
def webhook() -> Iterator[Webhook]:
    hook = Webhook()
    hook.server.start()
    try:
        yield hook
    finally:
        hook.client.close()
        hook.server.stop()


@pytest.fixture(scope="module")
def compiled() -> list[CompiledPolicy]:
    return [CompiledPolicy(d) for d in policies() if d["kind"] == "ValidatingAdmissionPolicy"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_lint_and_the_webhook_agree(path: Path, webhook: Webhook) -> None:
    expected = lint_rules(path, cluster=True)
    assert expected is not None
    webhook.view = ClusterView.from_manifests(load_manifests([CLUSTER, str(path)]), described=True)
    for obj in objects_of(path):
        assert webhook.rules(obj) == rules_for(expected, obj), obj["metadata"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_lint_and_the_exported_policies_agree(path: Path, compiled: list[CompiledPolicy]) -> None:
    expected = lint_rules(path, cluster=False)
    if expected is None:
        pytest.skip("the file needs the cluster to be read (queue objects naming its flavors); no policy matches it")
    for obj in objects_of(path):
        group, version = group_of(obj["apiVersion"]), obj["apiVersion"].split("/")[-1]
        matching = [p for p in compiled if p.matches(group, version, _plural(obj["kind"]), "CREATE")]
        found = {d.rule for p in matching for d in p.evaluate(obj)}
        # The rules exported for this kind (gang-without-all-or-nothing is not, for a TrainJob).
        cel_rules = {r.id for r in exportable() if r.cel.covers(group, obj["kind"])}
        assert found == rules_for(expected, obj) & cel_rules, obj["metadata"]


def _plural(kind: str) -> str:
    return kind.lower() + ("es" if kind.endswith("s") else "s")


def test_every_exported_rule_is_exercised_by_a_case(compiled: list[CompiledPolicy]) -> None:
    seen: set[str] = set()
    for path in FILES:
        for obj in objects_of(path):
            seen |= {d.rule for p in compiled for d in p.evaluate(obj)}
    assert seen == {r.id for r in exportable()}
