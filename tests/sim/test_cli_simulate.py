from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gpufleet.cli.simulate import simulate
from tests.sim.helpers import job, pool

app = typer.Typer()
app.command()(simulate)
runner = CliRunner()

KPI_KEYS = {"gpu_allocation_pct", "gpu_utilization_pct", "job_success_pct", "wait_p50_s", "wait_p95_s",
            "wait_p99_s", "makespan_s", "gpu_hours", "cost", "failures"}


def test_json_shape_for_a_small_input_under_two_policies(tmp_path: Path) -> None:
    f = tmp_path / "in.yaml"
    f.write_text(pool("p", 1, 4) + job("a", gpus=2, duration="1h") + job("b", gpus=4, duration="30m", arrival="5m"))
    out = tmp_path / "out.json"
    res = runner.invoke(app, [str(f), "--compare", "kube-default,gpufleet", "--json", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert list(doc) == ["runs"]
    assert [(r["scenario"], r["policy"]) for r in doc["runs"]] == [("input", "kube-default"), ("input", "gpufleet")]
    for run in doc["runs"]:
        assert set(run["kpis"]) >= KPI_KEYS
        assert isinstance(run["kpis"]["failures"], dict)
        assert set(run["per_queue"]) == {"(none)"}
        assert run["per_queue"]["(none)"]["jobs"] == 2
        # b arrives at 300 s and waits for a to end at 3600 s; a does not wait: p99 of [0, 3300].
        assert run["kpis"]["wait_p99_s"] == 3267.0
        assert run["kpis"]["gpu_hours"] == 4.0
    assert "GPU utilization %" in res.output


def test_problems_in_the_input_stop_the_run(tmp_path: Path) -> None:
    f = tmp_path / "in.yaml"
    f.write_text(pool("p", 1, 4) + job("a", annotations='    sim.gpufleet.io/gpu-utilization: "high"'))
    res = runner.invoke(app, [str(f)])
    assert res.exit_code == 1
    assert "gpu-utilization" in res.output


def test_a_bad_duration_stops_the_run_and_says_so(tmp_path: Path) -> None:
    # The message once said the job was "left out of the simulation" while simulate exited 1: they must agree.
    f = tmp_path / "in.yaml"
    f.write_text(pool("p", 1, 4) + job("a", duration="soon") + job("b"))
    res = runner.invoke(app, [str(f)])
    assert res.exit_code == 1
    assert "sim.gpufleet.io/duration" in res.output and "nothing is simulated until it is fixed" in res.output
    assert "left out" not in res.output


def test_unknown_policy_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "in.yaml"
    f.write_text(pool("p", 1, 4) + job("a"))
    res = runner.invoke(app, [str(f), "--policy", "volcano"])
    assert res.exit_code == 2 and "unknown policy volcano" in res.output  # a bad option value is a usage error


def test_case_study_prints_the_published_claims_and_writes_a_report(tmp_path: Path) -> None:
    res = runner.invoke(app, ["--duration", "1d", "--json", str(tmp_path / "cs.json"), "--report", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    assert "published claim" in res.output and "35 → 72" in res.output and "-58%" in res.output
    doc = json.loads((tmp_path / "cs.json").read_text())
    assert [(r["scenario"], r["policy"]) for r in doc["runs"]] == [("before", "kube-default"), ("after", "gpufleet")]
    assert set(doc["runs"][1]["per_queue"]) == {"research", "production", "dev"}
    text = (tmp_path / "r" / "report.md").read_text()
    assert "published claim" in text and "Utilization (" in text
    assert {p.name for p in (tmp_path / "r").glob("*.png")} == {
        "allocation_utilization.png", "wait_cdf.png", "cost_per_team.png"}


def test_openb_csvs_run_without_the_real_trace(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,2,T4\nn1,32000,65536,2,T4\n")
    pods = tmp_path / "pods.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
        "scheduled_time\n"
        "p0,1000,1024,2,1000,,LS,Running,0,3600,0\n"  # 2 whole T4 for an hour
        "p1,1000,1024,1,500,T4,BE,Running,0,3600,0\n")  # half a T4 for an hour
    out = tmp_path / "o.json"
    res = runner.invoke(app, [str(nodes), str(pods), "--policy", "kube-default", "--json", str(out)])
    assert res.exit_code == 0, res.output
    k = json.loads(out.read_text())["runs"][0]["kpis"]
    assert k["gpu_hours"] == 2.5 and k["cost"] == 2.5 * 1.2  # T4 at the guide's 1.2 CHF/h
    assert k["gpu_allocation_pct"] == 62.5  # 2.5 of 4 GPUs for the whole run


def test_a_damaged_csv_row_is_reported_and_refused(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,2,T4\n")
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1024,1,1000\np1,10x0,1024,1,1000\n")
    res = runner.invoke(app, [str(nodes), str(pods)])
    assert res.exit_code == 1
    assert "pods.csv:3: cpu_milli" in res.output and "1 of 2 row(s) rejected" in res.output


def test_failure_models_can_be_switched_off(tmp_path: Path) -> None:
    # 12 GPUs and a 16-pod gang under kube-default: with the rendezvous model it fails after 30 minutes;
    # without it, the 12 placed pods wait on (the run ends with the gang unfinished, nothing failed).
    f = tmp_path / "in.yaml"
    f.write_text(pool("p", 3, 4) + job("ddp", pods=16, duration="2h"))
    runs = {}
    for failures in ("rendezvous,oom,retries", "oom,retries"):
        out = tmp_path / "o.json"
        res = runner.invoke(app, [str(f), "--policy", "kube-default", "--failures", failures, "--json", str(out)])
        assert res.exit_code == 0, res.output
        runs[failures] = json.loads(out.read_text())["runs"][0]["kpis"]
    assert runs["rendezvous,oom,retries"]["failures"] == {"RendezvousTimeout": 1}
    assert runs["oom,retries"]["failures"] == {} and runs["oom,retries"]["jobs_unfinished"] == 1
    res = runner.invoke(app, [str(f), "--failures", "gremlins"])
    assert res.exit_code == 2 and "unknown model(s) gremlins" in res.output


GENERATOR = """
apiVersion: gpufleet.io/v1alpha1
kind: WorkloadGenerator
metadata: {name: tiny}
spec:
  seed: 1
  duration: 2d
  classes:
  - name: train
    arrival: {ratePerHour: 0.5}
    duration: {distribution: exponential, mean: 1h}
    pods: {values: [1, 2]}
"""


def test_a_workload_generator_in_the_input_is_expanded(tmp_path: Path) -> None:
    f = tmp_path / "in.yaml"
    f.write_text(pool("p", 2, 4) + GENERATOR)
    out = tmp_path / "o.json"
    res = runner.invoke(app, [str(f), "--json", str(out)])
    assert res.exit_code == 0, res.output
    run = json.loads(out.read_text())["runs"][0]
    assert run["kpis"]["window_s"] == 2 * 86400  # the generator's duration is the window
    assert 10 < run["kpis"]["jobs"] < 40  # 0.5/h over 48 h: 24 expected
    assert set(run["per_class"]) == {"train"}
    bad = tmp_path / "bad.yaml"
    bad.write_text(pool("p", 1, 4) + GENERATOR.replace("ratePerHour: 0.5", "ratePerHour: fast"))
    res = runner.invoke(app, [str(bad)])
    assert res.exit_code == 1 and "bad.yaml:" in res.output and "spec.classes[0].arrival" in res.output


def test_jobs_out_lines_are_what_the_yardsticks_count(tmp_path: Path) -> None:
    # a runs an hour on 2 GPUs; b (4 GPUs) waits for it; c asks 8 GPUs of a 4-GPU node and never starts.
    f = tmp_path / "in.yaml"
    f.write_text(pool("p", 1, 4) + job("a", gpus=2, duration="1h") + job("b", gpus=4, duration="30m", arrival="5m")
                 + job("c", gpus=8, duration="1h", arrival="10m"))
    out, jobs = tmp_path / "out.json", tmp_path / "jobs.jsonl"
    res = runner.invoke(app, [str(f), "--compare", "kube-default,gpufleet", "--json", str(out),
                              "--jobs-out", str(jobs)])
    assert res.exit_code == 0, res.output
    assert "3 lines" not in res.output and "6 lines" in res.output
    rows = [json.loads(x) for x in jobs.read_text(encoding="utf-8").splitlines()]
    runs = {r["policy"]: r for r in json.loads(out.read_text())["runs"]}
    for policy, run in runs.items():
        mine = {r["job"]: r for r in rows if r["policy"] == policy}
        assert [mine[k]["outcome"] for k in ("team-a/a", "team-a/b", "team-a/c")] == ["succeeded", "succeeded",
                                                                                     "pending"]
        assert mine["team-a/b"]["firstStart"] == 3600.0 and mine["team-a/c"]["firstStart"] is None
        assert mine["team-a/a"]["gpuSecondsUseful"] == 2 * 3600.0
        k = run["kpis"]
        assert k["work_done_gpu_hours"] == pytest.approx(sum(r["gpuSecondsUseful"] for r in mine.values()) / 3600)
        assert k["work_done_gpu_hours"] == 4.0  # 2 GPU-hours of a, 2 of b
        assert k["job_completion_pct"] == pytest.approx(200 / 3, abs=0.01)
        assert k["jobs_never_started"] == 1


def test_jobs_out_into_a_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    f = tmp_path / "in.yaml"
    f.write_text(pool("p", 1, 4) + job("a"))
    res = runner.invoke(app, [str(f), "--jobs-out", str(tmp_path / "no" / "jobs.jsonl")])
    assert res.exit_code == 1
    assert "--jobs-out" in res.output and "Traceback" not in res.output
