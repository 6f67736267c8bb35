"""Calibration (issue 18, item 2): a workload's load scale, busy scale and failure rate fitted to observed KPIs;
known parameters are recovered, unreachable targets refused, inputs without a generator refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpufleet.sim.calibrate import (
    CalibratedWorkload,
    CalibrationError,
    Knobs,
    Targets,
    fit,
    free_knobs,
    parse_targets,
    subject_for,
)
from gpufleet.sim.metrics import kpis
from gpufleet.sim.scenario import run_scenario
from gpufleet.sim.sources.generator import parse_generator

LAB = """apiVersion: gpufleet.io/v1alpha1
kind: NodePool
metadata: {name: lab}
spec:
  count: 3
  namePrefix: lab
  gpu: {model: A100-SXM4-80GB, count: 2}
  cpu: "64"
  memory: 512Gi
---
apiVersion: gpufleet.io/v1alpha1
kind: WorkloadGenerator
metadata: {name: lab}
spec:
  seed: 7
  duration: 4d
  classes:
  - name: train
    arrival: {ratePerHour: 1.0}
    duration: {distribution: lognormal, median: 2h, sigma: 0.5, max: 12h}
    backoffLimit: 1
    gpuUtilization: {distribution: uniform, low: 0.3, high: 0.6}
"""


@pytest.fixture
def lab(tmp_path: Path) -> str:
    path = tmp_path / "lab.yaml"
    path.write_text(LAB)
    return str(path)


def test_targets_are_read_with_units_and_bad_ones_refused() -> None:
    t = parse_targets("utilization=35, success=62%,wait_p95=4h")
    assert dict(t.values) == {"utilization": 35.0, "success": 62.0, "wait_p95": 14400.0}
    assert free_knobs(t) == ("load_scale", "busy_scale", "failure_rate")
    assert free_knobs(parse_targets("success=90")) == ("failure_rate",)
    assert free_knobs(parse_targets("wait_p95=600")) == ("load_scale",)
    for bad, says in (("utilisation=35", "unknown target 'utilisation'"), ("success=120", "percentage"),
                      ("success", "NAME=VALUE"), ("success=9,success=8", "given twice"),
                      ("wait_p95=soon", "wait_p95"), ("", "at least one target")):
        with pytest.raises(CalibrationError, match=says):
            parse_targets(bad)


def test_higher_scales_only_add_jobs_busy_clips_at_one_and_failures_grow_as_supersets(lab: str) -> None:
    doc = next(d for d in yaml.safe_load_all(LAB) if d["kind"] == "WorkloadGenerator")
    workload = CalibratedWorkload([parse_generator(doc)])
    low = {d.data["metadata"]["name"] for d in workload.documents(Knobs(load_scale=1.0), "default")}
    high = {d.data["metadata"]["name"] for d in workload.documents(Knobs(load_scale=2.0), "default")}
    assert low < high and 1.6 < len(high) / len(low) < 2.4  # a Poisson process of twice the rate, thinned

    def busy(scale: float) -> list[float]:
        return [float(d.data["metadata"]["annotations"]["sim.gpufleet.io/gpu-demand"])
                for d in workload.documents(Knobs(busy_scale=scale), "default")]

    assert busy(0.5) == pytest.approx([b / 2 for b in busy(1.0)], abs=1e-4)
    assert set(busy(4.0)) == {1.0}  # 0.3 to 0.6, four times, is a whole GPU busy at most
    [run] = subject_for([lab]).scenarios(Knobs())
    some, more = Knobs(failure_rate=0.2), Knobs(failure_rate=0.5)
    assert workload.crashes(Knobs(), run.jobs[0]) == ()
    drawn = 0
    for job in run.jobs:
        a = [x is not None for x in workload.crashes(some, job)]
        b = [x is not None for x in workload.crashes(more, job)]
        assert all(y for x, y in zip(a, b, strict=True) if x)
        drawn += sum(b)
    assert 0.4 < drawn / (len(run.jobs) * 32) < 0.6


@pytest.mark.slow
def test_calibration_recovers_a_known_load_scale_and_failure_rate(lab: str) -> None:
    # Generate with load scale 2 and failure rate 0.2 (busy share as written), observe the three KPIs, fit.
    subject = subject_for([lab])
    truth = Knobs(load_scale=2.0, busy_scale=1.0, failure_rate=0.2)
    [run] = subject.scenarios(truth)
    observed = kpis(run_scenario(run, run.policies[0], seed=subject.seed))
    assert observed["wait_p95_s"] > 600  # the load makes queues: a wait separates load from busy share
    targets = Targets({"utilization": observed["gpu_utilization_pct"], "success": observed["job_success_pct"],
                       "wait_p95": observed["wait_p95_s"]})
    cal = fit(subject, targets)
    assert cal.within and cal.evaluations <= 30
    # The stated tolerance of a recovery: scales within 15%, the failure rate within 0.05.
    assert cal.knobs.load_scale == pytest.approx(2.0, rel=0.15)
    assert cal.knobs.busy_scale == pytest.approx(1.0, rel=0.15)
    assert cal.knobs.failure_rate == pytest.approx(0.2, abs=0.05)
    summary = cal.summary()
    assert summary["within_tolerance"] and set(summary["residuals"]) == {"utilization", "success", "wait_p95"}
    assert [sc.name for sc in cal.scenarios] == ["input"]


def test_targets_out_of_reach_are_refused_with_the_closest_figure(lab: str) -> None:
    subject = subject_for([lab])
    with pytest.raises(CalibrationError) as caught:
        fit(subject, parse_targets("wait_p95=30d"), max_evaluations=4)  # a month's wait in a 4-day window
    text = str(caught.value)
    assert "out of reach for the input's run" in text and "p95 queue wait 720.0h (closest reached:" in text
    assert "after 4 simulations; the fit stopped at load scale (arrival rates ×) at its upper bound 4" in text


def test_inputs_without_a_generator_and_studies_with_policies_are_refused(tmp_path: Path, lab: str) -> None:
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(LAB.split("---")[0])
    with pytest.raises(CalibrationError, match="the input has none"):
        subject_for([str(jobs)])
    csv = tmp_path / "pods.csv"
    csv.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n")
    with pytest.raises(CalibrationError, match="a trace"):
        subject_for([lab, str(csv)])
    with pytest.raises(CalibrationError, match="without --policy or --compare"):
        subject_for([], policy="gpufleet")


def test_simulate_calibrate_reports_the_fit_and_runs_on_the_calibrated_workload(lab: str, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gpufleet.cli.main import app

    runner = CliRunner()
    result = runner.invoke(app, ["simulate", lab, "--calibrate", "utilization=30,success=95", "-o", "json",
                                 "--report", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    fit_ = doc["calibration"]
    assert fit_["within_tolerance"] and set(fit_["targets"]) == {"utilization", "success"}
    assert abs(fit_["achieved"]["utilization"] - 30) <= 2 and abs(fit_["achieved"]["success"] - 95) <= 2
    # The run shown is the replication nearest the targets, with its own figures, whose mean the fit met.
    [run] = doc["runs"]
    assert fit_["replications"] == 3 and fit_["seed"] in (7, 8, 9)
    assert run["kpis"]["gpu_utilization_pct"] == fit_["shown"]["utilization"]
    assert run["kpis"]["job_success_pct"] == fit_["shown"]["success"]
    assert "simulation 1: load 1.00" in result.stderr  # progress on standard error, never in the document
    assert "## Calibration" in (tmp_path / "r" / "report.md").read_text()
    bad = runner.invoke(app, ["simulate", lab, "--calibrate", "utilisation=30"])
    assert bad.exit_code == 2 and "Invalid value for '--calibrate'" in bad.output
    far = runner.invoke(app, ["simulate", lab, "--calibrate", "wait_p95=30d"])
    assert far.exit_code == 1 and "\nerror: the targets are out of reach" in far.stderr
