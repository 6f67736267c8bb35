"""gpufleet's alert rules: valid for promtool, unit-tested firing and quiet by promtool, shipped identically as a
plain rules file, a PrometheusRule and in the chart, and each one documented with a summary and a runbook line."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from prom_tools import promtool
from test_deploy_manifests import chart_values, render_chart

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "gpufleet-rules.yaml"
UNIT_TESTS = Path(__file__).with_name("rules-tests.yaml")


def rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def alerts() -> list[str]:
    return [r["alert"] for r in rules() if "alert" in r]


def test_promtool_accepts_the_rules_file() -> None:
    result = promtool("check", "rules", RULES)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules())} rules found" in result.stdout


def test_every_alert_has_a_severity_a_summary_and_a_runbook_line() -> None:
    for rule in rules():
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        notes = rule["annotations"]
        assert {"summary", "description", "runbook"} <= set(notes), rule["alert"]
        assert "\n" not in notes["runbook"].strip(), f"{rule['alert']}: the runbook is one line"


def test_every_alert_is_unit_tested_firing_and_quiet() -> None:
    cases = [c for t in yaml.safe_load(UNIT_TESTS.read_text())["tests"] for c in t.get("alert_rule_test", [])]
    for alert in alerts():
        mine = [c for c in cases if c["alertname"] == alert]
        assert any(c.get("exp_alerts") for c in mine), f"{alert}: no test where it fires"
        assert any(not c.get("exp_alerts") for c in mine), f"{alert}: no test where it stays quiet"
    assert {c["alertname"] for c in cases} <= set(alerts()), "a test names an alert the rules do not have"


def test_promtool_unit_tests_pass(tmp_path: Path) -> None:
    # promtool compares annotations whole; the unit tests pin labels and timing, so they run on a copy of the
    # rules without annotations (their templates: promtool check rules above, and the real Prometheus e2e).
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "gpufleet-rules.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    shutil.copy(UNIT_TESTS, tmp_path / "rules-tests.yaml")
    result = promtool("test", "rules", "rules-tests.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_broken_expectation_fails_the_unit_tests(tmp_path: Path) -> None:
    """The harness can fail: the same tests against rules whose XID alert never fires."""
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
            if rule.get("alert") == "GpuXidError":
                rule["expr"] = "DCGM_FI_DEV_XID_ERRORS > 1000"
    (tmp_path / "gpufleet-rules.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    shutil.copy(UNIT_TESTS, tmp_path / "rules-tests.yaml")
    result = promtool("test", "rules", "rules-tests.yaml", cwd=tmp_path)
    assert result.returncode != 0 and "GpuXidError" in result.stdout + result.stderr


def test_the_prometheus_rule_and_the_chart_ship_the_same_groups() -> None:
    sync = subprocess.run([sys.executable, str(ROOT / "hack" / "sync_alert_rules.py"), "--check"],
                          capture_output=True, text=True, check=False)
    assert sync.returncode == 0, sync.stdout
    groups = yaml.safe_load(RULES.read_text())["groups"]
    [deployed] = yaml.safe_load_all((ROOT / "deploy" / "prometheus" / "prometheusrule.yaml").read_text())
    assert deployed["spec"]["groups"] == groups
    rendered = render_chart(chart_values(prometheusRule__enabled=True, podMonitor__enabled=True))
    [rule] = [d for d in rendered if d["kind"] == "PrometheusRule"]
    assert rule == deployed
    [monitor] = [d for d in rendered if d["kind"] == "PodMonitor"]
    [expected] = yaml.safe_load_all((ROOT / "deploy" / "prometheus" / "podmonitor-node-agent.yaml").read_text())
    assert monitor == expected
    assert not [d for d in render_chart(chart_values()) if d["kind"] in ("PrometheusRule", "PodMonitor")]


def test_the_kustomization_lists_the_operator_objects() -> None:
    listed = yaml.safe_load((ROOT / "deploy" / "prometheus" / "kustomization.yaml").read_text())["resources"]
    objects = sorted(p.name for p in (ROOT / "deploy" / "prometheus").glob("*.yaml")
                     if p.name not in ("kustomization.yaml", RULES.name))
    assert sorted(listed) == objects


@pytest.mark.parametrize("monitor", ["podmonitor-node-agent.yaml"])
def test_the_pod_monitor_selects_the_node_agent_metrics_port(monitor: str) -> None:
    [pm] = yaml.safe_load_all((ROOT / "deploy" / "prometheus" / monitor).read_text())
    daemonset = next(d for d in yaml.safe_load_all((ROOT / "deploy" / "node-agent.yaml").read_text())
                     if d and d["kind"] == "DaemonSet")
    assert pm["metadata"]["namespace"] == daemonset["metadata"]["namespace"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= daemonset["spec"]["template"]["metadata"]["labels"].items()
    ports = {p["name"] for c in daemonset["spec"]["template"]["spec"]["containers"] for p in c["ports"]}
    assert {e["port"] for e in pm["spec"]["podMetricsEndpoints"]} <= ports
