"""``-n/--namespace`` on every command that prints namespaced objects (plan, validate, lint): it filters what is
printed, never what is computed, and cluster-scoped objects stay in every namespace's view."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.cli.options import in_namespace, namespace_of
from tests.conftest import REPO

runner = CliRunner()
LINT_DATA = REPO / "tests" / "data" / "lint"


def _pod(name: str, namespace: str | None, gpus: str = "1") -> str:
    meta = f"{{name: {name}" + (f", namespace: {namespace}}}" if namespace else "}")
    return f"""---
apiVersion: v1
kind: Pod
metadata: {meta}
spec:
  containers:
  - name: c
    resources: {{limits: {{nvidia.com/gpu: "{gpus}"}}}}
"""


# An invalid quantity in three namespaces (one of them the default one) and a cluster-scoped object in error.
BROKEN = (_pod("a", "research", "x") + _pod("b", "production", "y") + _pod("c", None, "z") + """---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: nope, resources: [{name: nvidia.com/gpu, nominalQuota: 4}]}]
""")


@pytest.fixture
def broken(tmp_path: Path) -> str:
    path = tmp_path / "broken.yaml"
    path.write_text(BROKEN)
    return str(path)


def test_namespace_of_and_in_namespace() -> None:
    assert namespace_of("research/llm") == "research"
    assert namespace_of("cq") is None and namespace_of(None) is None and namespace_of("") is None
    assert in_namespace(None, "research") and in_namespace(None, None)
    assert in_namespace("research", "research") and not in_namespace("research", "production")
    assert in_namespace("research", None)  # cluster-scoped: in every namespace's view


def test_validate_shows_the_namespace_and_the_cluster_and_keeps_the_exit_code(broken: str) -> None:
    whole = runner.invoke(app, ["validate", broken])
    assert whole.exit_code == 1
    for name in ("Pod research/a", "Pod production/b", "Pod default/c", "ClusterQueue cq"):
        assert name in whole.stderr
    result = runner.invoke(app, ["validate", broken, "-n", "research"])
    assert result.exit_code == 1, result.output
    assert "Pod research/a" in result.stderr and "ClusterQueue cq" in result.stderr
    assert "production/b" not in result.stderr and "default/c" not in result.stderr
    assert ("error: 4 error(s) in 4 document(s), 2 error(s) in namespaces other than research not shown"
            in result.stderr)
    # An error only in another namespace still fails: the input as a whole is not valid.
    only_other = runner.invoke(app, ["validate", broken, "--namespace", "nobody"])
    assert only_other.exit_code == 1
    assert "Pod " not in only_other.stderr and "ClusterQueue cq" in only_other.stderr
    assert "3 error(s) in namespaces other than nobody not shown" in only_other.stderr
    default = runner.invoke(app, ["validate", broken, "-n", "default"])
    assert "Pod default/c" in default.stderr and "research/a" not in default.stderr


def test_validate_document_under_namespace(broken: str) -> None:
    whole = json.loads(runner.invoke(app, ["validate", broken, "-o", "json"]).stdout)
    assert "namespace" not in whole and len(whole["problems"]) == len(
        [p for p in whole["problems"] if p["severity"] in ("error", "warning")])
    result = runner.invoke(app, ["validate", broken, "-n", "production", "-o", "yaml"])
    assert result.exit_code == 1
    doc = yaml.safe_load(result.stdout)
    assert doc["valid"] is False and doc["namespace"] == "production"
    assert {p["name"] for p in doc["problems"]} == {"production/b", "cq"}
    assert doc["problemsInOtherNamespaces"] == len(whole["problems"]) - len(doc["problems"]) == 2
    assert doc["objects"] == whole["objects"]


def test_validate_warnings_elsewhere_are_counted(tmp_path: Path) -> None:
    path = tmp_path / "lq.yaml"
    path.write_text("""apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: production}
spec: {clusterQueue: missing}
""")
    result = runner.invoke(app, ["validate", str(path), "-n", "research"])
    assert result.exit_code == 0, result.output
    assert "LocalQueue" not in result.stderr
    assert "valid: 1 LocalQueue (1 warning(s), 1 warning(s) in namespaces other than research not shown)" in (
        result.stdout)


LINT_INPUT = (_pod("a", "research") + _pod("b", "production") + _pod("c", None) + "---\n"
              + (LINT_DATA / "cases" / "clusterqueue-flavor-without-nodes.yaml").read_text())


def _lint(tmp_path: Path, *args: str) -> tuple[int, list[dict[str, object]]]:
    path = tmp_path / "lint.yaml"
    path.write_text(LINT_INPUT)
    result = runner.invoke(app, ["lint", str(path), "--cluster", str(LINT_DATA / "cluster.yaml"), "-o", "json",
                                 *args])
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.stdout)["findings"]


def _objects(findings: list[dict[str, object]]) -> set[tuple[object, ...]]:
    return {tuple(f["object"].values()) for f in findings}  # type: ignore[attr-defined]


def test_lint_judges_everything_and_shows_the_namespace_and_the_cluster(tmp_path: Path) -> None:
    _, everything = _lint(tmp_path)
    assert {("Pod", "research", "a"), ("Pod", "production", "b"), ("Pod", "default", "c"),
            ("ClusterQueue", None, "bad-whole-on-mig")} <= _objects(everything)
    _, research = _lint(tmp_path, "-n", "research")
    assert ("Pod", "research", "a") in _objects(research)
    assert ("ClusterQueue", None, "bad-whole-on-mig") in _objects(research)
    assert not any(o[1] not in ("research", None) for o in _objects(research))
    # The same verdicts, only fewer of them shown.
    assert [f for f in everything if f in research] == research
    _, nobody = _lint(tmp_path, "-n", "nobody")
    assert _objects(nobody) == {("ClusterQueue", None, "bad-whole-on-mig")}  # in every namespace's view


def test_lint_fail_on_judges_what_is_shown(tmp_path: Path) -> None:
    path = tmp_path / "pods.yaml"
    path.write_text(_pod("a", "research") + _pod("b", "production"))
    every = runner.invoke(app, ["lint", str(path), "--fail-on", "warning"])
    assert every.exit_code == 1 and "Pod production/b" in every.stdout
    elsewhere = runner.invoke(app, ["lint", str(path), "--fail-on", "warning", "-n", "staging"])
    assert elsewhere.exit_code == 0, elsewhere.output
    assert "research/a" not in elsewhere.stdout
    assert "0 finding(s) (" in elsewhere.stdout and "more in namespaces other than staging, not shown)" in (
        elsewhere.stdout)
    one = runner.invoke(app, ["lint", str(path), "--fail-on", "warning", "-n", "research"])
    assert one.exit_code == 1 and "Pod research/a" in one.stdout and "production/b" not in one.stdout


def test_advise_shows_one_namespace_of_the_same_advice(tmp_path: Path) -> None:
    small = str(REPO / "tests" / "advise" / "small.yaml")
    result = runner.invoke(app, ["advise", small, "--evaluations", "3", "-n", "ds", "-o", "json",
                                 "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    whole = json.loads((tmp_path / "advice.json").read_text())  # the files: the whole cluster's advice
    assert shown["namespace"] == "ds"
    for side in ("given", "proposal"):
        assert {r["namespace"] for r in whole[side]["requests"]} == {"prod", "ds"}
        assert shown[side]["requests"] == [r for r in whole[side]["requests"] if r["namespace"] == "ds"]
        assert shown[side]["score"] == whole[side]["score"] and shown[side]["pools"] == whole[side]["pools"]
    text = runner.invoke(app, ["advise", small, "--evaluations", "3", "-n", "prod"])
    assert text.exit_code == 0, text.output
    rows = text.stdout.split("Requests", 1)[1].split("\n\n", 1)[0].splitlines()[3:]
    assert rows and all(row.split()[1] == "prod" for row in rows), rows
