"""Calibration that explains what it fits: scheduler-attributable mechanisms (gangs and their rendezvous timeout,
memory) fitted before the jobs' own failure rate, a team's attribution of its failures as targets, and the demo
on the guide's case study."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.sim.calibrate import (
    CalibratedWorkload,
    CalibrationError,
    Knobs,
    failure_split,
    figure,
    free_knobs,
    parse_attribution,
    parse_targets,
    subject_for,
)
from gpufleet.sim.sources.generator import parse_generator

STUDY = """apiVersion: gpufleet.io/v1alpha1
kind: WorkloadGenerator
metadata: {name: lab}
spec:
  seed: 3
  duration: 2d
  classes:
  - name: tune
    role: training
    arrival: {ratePerHour: 1.0}
    duration: {distribution: lognormal, median: 2h, sigma: 0.5, max: 12h}
    gpuMemoryUsed: {distribution: lognormal, median: 20Gi, sigma: 0.2, max: 70Gi}
  - name: serve
    role: inference
    arrival: {ratePerHour: 0.5}
    duration: {distribution: lognormal, median: 6h, sigma: 0.5, max: 1d}
"""

runner = CliRunner()


def test_attributions_are_read_as_shares_and_bad_ones_refused() -> None:
    assert parse_attribution("gang=0.8, oom=10%") == {"gang": 80.0, "oom": 10.0}
    for bad, says in (("gangs=0.8", "unknown cause 'gangs'"), ("gang=1.2", "share from 0 to 1"),
                      ("gang=0.8,oom=0.3", "add up to 1.1"), ("gang", "NAME=SHARE"), ("", "at least one"),
                      ("gang=0.5,gang=0.2", "given twice")):
        with pytest.raises(CalibrationError, match=says):
            parse_attribution(bad)
    t = parse_targets("utilization=35,training_success=62").with_attribution("gang=0.9")
    assert dict(t.values) == {"utilization": 35.0, "training_success": 62.0, "gang": 90.0}
    assert t.text() == "utilization=35, training_success=62" and t.attribution_text() == "gang=0.9"


def test_free_knobs_are_the_mechanisms_the_workload_has_then_the_failure_rate() -> None:
    success = parse_targets("success=80")
    assert free_knobs(success) == ("failure_rate",)  # a workload without gangs or memory: only its own errors
    every = ("gang_share", "rendezvous_timeout_s", "memory_scale")
    assert free_knobs(success, every) == (*every, "failure_rate")
    # What the team attributes decides which mechanisms may explain it: gangs, not memory.
    gang = success.with_attribution("gang=0.9")
    assert free_knobs(gang, every) == ("gang_share", "rendezvous_timeout_s", "failure_rate")
    assert free_knobs(parse_targets("utilization=40").with_attribution("oom=0.5"), every) == (
        "load_scale", "busy_scale", "memory_scale")


def test_gang_share_and_memory_scale_change_the_jobs_as_stated() -> None:
    workload = CalibratedWorkload([parse_generator(yaml.safe_load(STUDY))])
    assert workload.has_gangable and workload.has_memory

    def jobs(knobs: Knobs) -> dict[str, dict[str, object]]:
        return {d.data["metadata"]["name"]: d.data for d in workload.documents(knobs, "default")}

    plain, spread, heavy = jobs(Knobs()), jobs(Knobs(gang_share=1.0)), jobs(Knobs(memory_scale=1.5))
    assert set(plain) == set(spread) == set(heavy)
    for name, job in plain.items():
        gangs = spread[name]
        annotations, gang_annotations = job["metadata"]["annotations"], gangs["metadata"]["annotations"]
        if name.startswith("tune"):  # a one-pod training job: two pods, the same work in half the time
            assert (job["spec"]["parallelism"], gangs["spec"]["parallelism"]) == (1, 2)
            assert gang_annotations["sim.gpufleet.io/gang"] == "true"
            assert float(gang_annotations["sim.gpufleet.io/duration"][:-1]) == pytest.approx(
                float(annotations["sim.gpufleet.io/duration"][:-1]) / 2, abs=1)
            used = int(annotations["sim.gpufleet.io/gpu-memory-used"][:-2])
            assert int(heavy[name]["metadata"]["annotations"]["sim.gpufleet.io/gpu-memory-used"][:-2]) == \
                pytest.approx(used * 1.5, abs=1)
        else:  # inference is never made a gang
            assert gangs["spec"]["parallelism"] == 1
    half = jobs(Knobs(gang_share=0.5))
    tuned = [n for n in plain if n.startswith("tune")]
    share = sum(half[n]["spec"]["parallelism"] == 2 for n in tuned) / len(tuned)
    assert 0.3 < share < 0.7  # each job's own uniform decides, the same at every share (common random numbers)
    assert all(spread[n]["spec"]["parallelism"] == 2 for n in tuned if half[n]["spec"]["parallelism"] == 2)


def test_figures_and_the_failure_split_read_the_failed_attempts(tmp_path: object) -> None:
    k = {"failures": {"RendezvousTimeout": 9, "Error": 1}, "training_success_pct": 61.5}
    assert figure("gang", k) == 90.0 and figure("oom", k) == 0.0 and figure("training_success", k) == 61.5
    assert failure_split(k) == [("partial gangs (rendezvous timeouts)", 90.0), ("the jobs' own errors", 10.0)]
    assert figure("gang", {"failures": {}}) == 0.0  # no failure at all: no share of any cause


def test_attribute_needs_calibrate_and_a_readable_share(tmp_path: object) -> None:
    alone = runner.invoke(app, ["simulate", "--attribute", "gang=0.9"])
    assert alone.exit_code == 2 and "give --calibrate with it" in alone.output
    bad = runner.invoke(app, ["simulate", "--calibrate", "success=60", "--attribute", "gang=2"])
    assert bad.exit_code == 2 and "share from 0 to 1" in bad.output


def test_a_subject_knows_which_mechanisms_its_workload_has(tmp_path: object) -> None:
    from pathlib import Path
    assert isinstance(tmp_path, Path)
    nodes = ("apiVersion: gpufleet.io/v1alpha1\nkind: NodePool\nmetadata: {name: lab}\nspec:\n  count: 2\n"
             "  namePrefix: lab\n  gpu: {model: A100-SXM4-80GB, count: 2}\n  cpu: \"64\"\n  memory: 512Gi\n---\n")
    path = tmp_path / "lab.yaml"
    path.write_text(nodes + STUDY)
    assert subject_for([str(path)]).mechanisms == {"gang_share", "rendezvous_timeout_s", "memory_scale"}
    assert subject_for([str(path)], failures="retries").mechanisms == {"gang_share"}


def test_demo_is_the_guides_calibration(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpufleet.cli import calibration
    from gpufleet.cli import simulate as simulate_module

    seen: dict[str, object] = {}
    monkeypatch.setattr(simulate_module, "simulate", lambda **kw: seen.update(kw))
    simulate_module.demo()
    assert (seen["calibrate"], seen["attribute"]) == (calibration.GUIDE_BASELINE, calibration.GUIDE_ATTRIBUTION)
    assert (calibration.GUIDE_BASELINE, calibration.GUIDE_ATTRIBUTION) == ("utilization=35,training_success=62",
                                                                           "gang=0.9")


@pytest.mark.slow
def test_the_demo_calibrates_the_guides_before_with_its_attribution_and_after_does_better(tmp_path: object) -> None:
    from pathlib import Path

    from gpufleet.cli.calibration import GUIDE_ATTRIBUTION, GUIDE_BASELINE
    assert isinstance(tmp_path, Path)
    out = tmp_path / "demo.json"
    result = runner.invoke(app, ["simulate", "--calibrate", GUIDE_BASELINE, "--attribute", GUIDE_ATTRIBUTION,
                                 "--json", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    cal = doc["calibration"]
    assert cal["within_tolerance"] and set(cal["targets"]) == {"utilization", "training_success", "gang"}
    # The guide's attribution: most of before's failures are partial gangs; the fit says what explains the rest.
    split = cal["failure_split"]
    assert abs(split["partial gangs (rendezvous timeouts)"] - 90) <= 5 and sum(split.values()) == pytest.approx(100)
    assert cal["knobs"]["failure_rate"] < 0.1  # the jobs' own errors explain only what the mechanisms leave
    before, after = (next(r["kpis"] for r in doc["runs"] if r["scenario"] == s) for s in ("before", "after"))
    assert after["job_completion_pct"] >= before["job_completion_pct"]
    assert after["gpu_utilization_pct"] >= before["gpu_utilization_pct"]
    assert after["training_completion_pct"] > before["training_completion_pct"]
    assert after["failures"].get("RendezvousTimeout", 0) == 0 < before["failures"]["RendezvousTimeout"]
    # And the text says it: the split, the table by role and class, a reason per published claim.
    assert "Of the observed run's failed attempts: 9" in result.stdout
    assert "Completion by role and class" in result.stdout and "training-job success %: " in result.stdout
