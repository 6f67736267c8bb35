"""The scheduler's configuration file: defaults, every error with its field and fix, and the CLI's refusal."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from gpufleet.cli.scheduler import scheduler
from gpufleet.live.settings import SchedulerSettings, SettingsError, load_settings, settings_from_text

ROOT = Path(__file__).resolve().parents[2]


def errors_of(text: str) -> list[str]:
    _, problems = settings_from_text(text, "config.yaml")
    return [str(e) for e in problems.errors]


def test_the_deployed_config_map_is_valid_and_complete() -> None:
    config = yaml.safe_load((ROOT / "deploy" / "configmap.yaml").read_text())["data"]["config.yaml"]
    settings, problems = settings_from_text(config, "configmap.yaml")
    assert not problems.errors, [str(e) for e in problems.errors]
    assert settings.leader_election.lease_name == "gpufleet-scheduler"
    assert (settings.leader_election.lease_duration, settings.leader_election.renew_deadline,
            settings.leader_election.retry_period) == (15.0, 10.0, 2.0)
    assert settings.metrics_bind_address == ":8080" and settings.health_probe_bind_address == ":8081"


def test_a_full_configuration_is_read() -> None:
    settings, problems = settings_from_text("""
schedulerName: gpu-sched
leaderElection: {leaseName: l, namespace: ops, leaseDuration: 4s, renewDeadline: 3s, retryPeriod: 500ms}
cyclePeriod: 250ms
placementProfile: binpack
kueue:
  fairSharing: {enable: true}
  waitForPodsReady: {enable: true, timeout: 2m, blockAdmission: false}
binding: {workers: 8, retries: 2, retryBackoff: 50ms, gangRepairTimeout: 90s}
preemption: {disruptionBudgetBackoff: 2m}
webhook: {enabled: true, bindAddress: "127.0.0.1:9443", runtimeClassName: nvidia}
""", "c.yaml")
    assert not problems.errors, [str(e) for e in problems.errors]
    assert settings.scheduler_name == "gpu-sched" and settings.cycle_period == 0.25
    assert settings.leader_election.namespace == "ops" and settings.leader_election.retry_period == 0.5
    assert settings.kueue.fair_sharing and settings.kueue.pods_ready.enable
    assert settings.kueue.pods_ready.timeout_s == 120.0
    assert settings.binding.workers == 8 and settings.binding.gang_repair_timeout == 90.0
    assert settings.disruption_budget_backoff == 120.0
    assert settings.webhook.enabled and settings.webhook.runtime_class_name == "nvidia"
    assert settings.placement_profile == "binpack"


def test_no_file_means_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "sched-ns")
    settings = load_settings(None)
    assert settings.scheduler_name == SchedulerSettings().scheduler_name
    assert settings.leader_election.namespace == "sched-ns"


@pytest.mark.parametrize("text, field, fix", [
    ("leaderElection: {leaseDuration: 10s, renewDeadline: 10s}", "leaderElection.renewDeadline",
     "step down before its lease can expire"),
    ("leaderElection: {renewDeadline: 2s, retryPeriod: 2s}", "leaderElection.retryPeriod", "1.2 x retryPeriod"),
    ("cyclePeriod: soon", "cyclePeriod", "500ms, 2s"),
    ("metricsBindAddress: localhost", "metricsBindAddress", ':8080'),
    ("placementProfile: fastest", "placementProfile", "gpufleet, binpack"),
    ("schedulerNmae: gpufleet", "schedulerNmae", "known fields: schedulerName"),
    ("binding: {workers: 0}", "binding.workers", None),
    ("kueue: {waitForPodsReady: {timeout: forever}}", "kueue.waitForPodsReady.timeout", "30m"),
    ("kueue: {fairSharing: {preemptionStrategies: [Greedy]}}", "kueue.fairSharing.preemptionStrategies",
     "LessThanOrEqualToFinalShare"),
    ("kueue: {}\nkueueConfigFile: k.yaml", "kueueConfigFile", "keep one"),
    ("kueueConfigFile: missing.yaml", "kueueConfigFile", "Configuration file"),
    ("webhook: {enabled: maybe}", "webhook.enabled", None),
    ("kind: Deployment", "kind", "SchedulerConfiguration"),
    # A number where a string belongs is refused, not turned into the name "5" unseen.
    ("schedulerName: 5", "schedulerName", 'schedulerName: "5"'),
    ("leaderElection: {leaseName: 7}", "leaderElection.leaseName", 'leaseName: "7"'),
    ("webhook: {certFile: 1.5}", "webhook.certFile", 'certFile: "1.5"'),
    ("besideKueue: {enabled: true, admissionCheckController: 3}", "besideKueue.admissionCheckController", None),
    ("placementProfile: 2", "placementProfile", None),
])
def test_errors_name_the_field_and_the_fix(text: str, field: str, fix: str | None) -> None:
    errors = errors_of(text)
    assert errors, text
    matching = [e for e in errors if f": {field}: " in e]
    assert matching, errors
    assert re.match(r"config\.yaml:\d+: SchedulerConfiguration: ", matching[0]), matching[0]
    if fix is not None:
        assert "; fix: " in matching[0] and fix in matching[0], matching[0]


def test_a_quoted_number_is_a_string() -> None:
    settings, problems = settings_from_text('schedulerName: "5"\nleaderElection: {leaseName: "7"}\n', "c.yaml")
    assert not problems.errors, [str(e) for e in problems.errors]
    assert settings.scheduler_name == "5" and settings.leader_election.lease_name == "7"


def test_every_error_is_reported_at_once_with_its_line() -> None:
    errors = errors_of("schedulerName: x\ncyclePeriod: never\nleaderElection:\n  leaseDuration: nope\n")
    assert sorted(e.split(": ")[0] for e in errors) == ["config.yaml:2", "config.yaml:4"]


def test_a_referenced_kueue_configuration_is_read(tmp_path: Path) -> None:
    (tmp_path / "kueue.yaml").write_text("apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\n"
                                         "fairSharing: {enable: true}\n")
    (tmp_path / "config.yaml").write_text("kueueConfigFile: kueue.yaml\n")
    assert load_settings(str(tmp_path / "config.yaml")).kueue.fair_sharing


def test_load_settings_raises_with_every_error(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("cyclePeriod: x\nplacementProfile: y\n")
    with pytest.raises(SettingsError) as caught:
        load_settings(str(path))
    assert len(caught.value.errors) == 2
    with pytest.raises(SettingsError, match="cannot read the configuration"):
        load_settings(str(tmp_path / "absent.yaml"))


def test_the_command_refuses_to_start_with_a_bad_config(tmp_path: Path) -> None:
    app = typer.Typer()
    app.command()(scheduler)
    path = tmp_path / "config.yaml"
    path.write_text("leaderElection: {leaseDuration: 1s, renewDeadline: 5s}\n")
    result = CliRunner().invoke(app, ["--config", str(path), "--leader-elect"])
    assert result.exit_code == 1  # an error in the input; 2 is for the command line itself
    assert "leaderElection.renewDeadline" in result.output and "did not start" in result.output
