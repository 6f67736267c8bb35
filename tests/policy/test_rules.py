"""Every rule: a manifest that triggers it and a close one that must not (tests/data/lint/cases/<rule>.yaml, objects
named bad-* and good-*), judged against tests/data/lint/cluster.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.policy.lintfiles import lint_paths
from gpufleet.policy.model import Finding
from gpufleet.policy.rules import RULE_IDS, RULES

DATA = Path(__file__).resolve().parents[1] / "data" / "lint"
CASES = DATA / "cases"
CLUSTER = str(DATA / "cluster.yaml")


def lint_case(rule: str, cluster: bool = True) -> list[Finding]:
    run = lint_paths([str(CASES / f"{rule}.yaml")], [CLUSTER] if cluster else [])
    assert run.ok, [str(p) for p in run.unreadable]
    return run.findings


def names_in(rule: str) -> set[str]:
    import yaml

    return {d["metadata"]["name"] for d in yaml.safe_load_all((CASES / f"{rule}.yaml").read_text()) if d}


def test_every_rule_has_its_cases() -> None:
    assert sorted(p.stem for p in CASES.glob("*.yaml")) == sorted(RULE_IDS)
    for rule in RULE_IDS:
        names = names_in(rule)
        assert any(n.startswith("bad-") for n in names) and any(n.startswith("good-") for n in names), rule


@pytest.mark.parametrize("rule", RULE_IDS)
def test_the_rule_finds_the_bad_objects_and_only_them(rule: str) -> None:
    found = {f.object.name for f in lint_case(rule) if f.rule == rule}
    assert found == {n for n in names_in(rule) if n.startswith("bad-")}


@pytest.mark.parametrize("rule", RULE_IDS)
def test_a_finding_names_object_field_place_and_fix(rule: str) -> None:
    findings = [f for f in lint_case(rule) if f.rule == rule]
    assert findings
    for f in findings:
        assert f.severity == next(r.severity for r in RULES if r.id == rule)
        assert f.message.startswith(f"{f.object}: ")  # the object, then the field
        field = f.message.removeprefix(f"{f.object}: ").split(": ", 1)[0]
        assert (field and " " not in field.split(" (")[0]) or field.startswith("pod set ")
        assert f.file is not None and f.file.endswith(f"{rule}.yaml") and f.line and f.line > 0
        assert f.fix


@pytest.mark.parametrize("rule", ["gpu-model-unconstrained", "whole-gpu-for-small-pod", "gpu-request-unsatisfiable",
                                  "gpu-workload-without-queue"])
def test_rules_that_need_the_cluster_say_nothing_without_it(rule: str) -> None:
    assert next(r.needs for r in RULES if r.id == rule) is not None
    assert [f for f in lint_case(rule, cluster=False) if f.rule == rule] == []


def test_the_closest_offer_is_the_node_with_the_most_of_the_device() -> None:
    [sixteen] = [f for f in lint_case("gpu-request-unsatisfiable") if f.object.name == "bad-sixteen"]
    assert "8x H100-SXM5-80GB" in sixteen.message and "Insufficient nvidia.com/gpu" in sixteen.message
    [profile] = [f for f in lint_case("gpu-request-unsatisfiable") if f.object.name == "bad-profile"]
    assert "closest offer is a100-mig-" in profile.message and "nvidia.com/mig-3g.40gb" in profile.message


def test_the_cheaper_request_is_named() -> None:
    [small] = [f for f in lint_case("whole-gpu-for-small-pod") if f.rule == "whole-gpu-for-small-pod"]
    assert "nvidia.com/mig-1g.10gb" in small.fix  # the smallest profile that holds 8 GiB


def test_the_model_finding_suggests_the_cheapest_model_that_fits() -> None:
    [f] = [f for f in lint_case("gpu-model-unconstrained") if f.rule == "gpu-model-unconstrained"]
    assert "H100-SXM5-80GB, L40S" in f.message and "NVIDIA-L40S" in f.fix


def test_lint_ignore_silences_the_named_rules_on_that_object_only(tmp_path: Path) -> None:
    text = (CASES / "privileged-gpu-container.yaml").read_text()
    path = tmp_path / "ignored.yaml"
    head = "metadata: {name: bad-privileged, namespace: ml, labels:"
    ignore = "metadata: {name: bad-privileged, namespace: ml, annotations: {gpufleet.io/lint-ignore: %s}, labels:"
    path.write_text(text.replace(head, ignore % "'gpu-model-unconstrained, privileged-gpu-container'"))
    run = lint_paths([str(path)], [CLUSTER])
    assert run.ok and not [f for f in run.findings if f.rule == "privileged-gpu-container"]
    path.write_text(text.replace(head, ignore % "hostpath-nvidia-devices"))
    assert [f.object.name for f in lint_paths([str(path)], [CLUSTER]).findings
            if f.rule == "privileged-gpu-container"] == ["bad-privileged"]


def test_a_pod_a_controller_owns_is_judged_at_its_owner(tmp_path: Path) -> None:
    path = tmp_path / "owned.yaml"
    path.write_text((CASES / "hostpath-nvidia-devices.yaml").read_text().replace(
        "metadata: {name: bad-devices, namespace: dev}",
        "metadata: {name: bad-devices, namespace: dev, ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, "
        "name: rs, uid: u1, controller: true}]}"))
    assert [f for f in lint_paths([str(path)]).findings if f.rule == "hostpath-nvidia-devices"] == []


def test_a_request_without_equal_limit_is_a_finding_not_unreadable_input() -> None:
    run = lint_paths([str(CASES / "gpu-request-without-equal-limit.yaml")], [CLUSTER])
    assert run.ok  # the parser's refusal of the same objects is not said twice
    assert not [p for p in run.problems if "limit" in p.message]
