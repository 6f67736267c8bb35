"""`gpufleet simulate --metrics-out FILE`: the simulated runs as OpenMetrics with timestamps, under the live
scheduler's metric names, loaded into TSDB blocks by promtool, every sample accounted for."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from prom_tools import promtool
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.scheduler_metrics import SchedulerMetrics
from gpufleet.sim.openmetrics import SimRun, local_queue_map, step_for, write_openmetrics
from gpufleet.sim.records import Attempt, JobRecord, PodSpan, PoolInfo, SimResult

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+) (\d+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass
class Sample:
    name: str
    labels: dict[str, str]
    value: float
    timestamp: float


@dataclass
class Family:
    name: str
    type: str
    samples: list[Sample] = field(default_factory=list)


def families(path: Path) -> dict[str, Family]:
    """The file's families, parsed strictly: every line a TYPE, HELP, sample with a timestamp, or the final EOF
    (prometheus_client's OpenMetrics parser refuses histograms with several timestamps, which backfilling needs;
    promtool itself loads the file in test_promtool_loads_every_sample_into_tsdb_blocks)."""
    out: dict[str, Family] = {}
    lines = path.read_text().splitlines()
    assert lines[-1] == "# EOF"
    current: Family | None = None
    for line in lines[:-1]:
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            assert name not in out, f"{name}: family not contiguous"
            current = out[name] = Family(name, kind)
        elif line.startswith("# HELP "):
            assert current is not None and line.split(" ", 3)[2] == current.name
        else:
            m = _SAMPLE.match(line)
            assert m and current is not None and m.group(1).startswith(current.name), line
            labels = dict(_LABEL.findall(m.group(2) or ""))
            current.samples.append(Sample(m.group(1), labels, float(m.group(3)), float(m.group(4))))
    return out


def tiny_result() -> SimResult:
    """Two A100s in pool "p"; job a holds one GPU from 0 to 600 s (waited 60 s), job b waits from 120 s
    and runs on the other from 300 s until it is preempted at 900 s."""
    spans = [PodSpan("ml/a", "ml/a-0", "n0", "p", "A100-SXM4-80GB", 1.0, 3.2, held_from=0.0, held_to=600.0),
             PodSpan("ml/b", "ml/b-0", "n0", "p", "A100-SXM4-80GB", 1.0, 3.2, held_from=300.0, held_to=900.0)]
    a = JobRecord("ml/a", "ml", "ml", "team", None, None, 1, 1.0, -60.0,
                  [Attempt(-60.0, 0.0, 600.0, "succeeded")], "succeeded", 600.0)
    b = JobRecord("ml/b", "ml", "ml", "team", None, None, 2, 1.0, 120.0,
                  [Attempt(120.0, 300.0, 900.0, "preempted", "InClusterQueue")], "unfinished")
    return SimResult("s", "gpufleet", window_s=1200.0, run_end=1200.0, capacity=2.0,
                     pools=[PoolInfo("p", 2, ("A100-SXM4-80GB",))], jobs=[a, b], spans=spans,
                     stranded=[(0.0, 0.0, 1.0, 0), (600.0, 1.0, 1.0, 1)], gpus={("p", "A100-SXM4-80GB"): 2},
                     prices={"A100-SXM4-80GB": 3.2},
                     stranded_by=[(0.0, {}), (600.0, {("p", "A100-SXM4-80GB"): 1.0})])


def test_values_at_known_instants(tmp_path: Path) -> None:
    path = tmp_path / "run.om"
    end = 1_800_000_000.0
    write_openmetrics(path, [SimRun("after", tiny_result(), local_queue_map([("ml", "team", "prod")]))],
                      end=end, step=60.0)
    origin = int(end - 1200)
    fams = families(path)

    def at(name: str, t: float, **labels: str) -> float:
        for s in fams[name].samples:
            if s.timestamp == origin + t and labels.items() <= s.labels.items():
                return float(s.value)
        raise AssertionError(f"{name} {labels} at {t}: no sample")

    pool = {"run": "after", "node_pool": "p", "model": "A100-SXM4-80GB"}
    assert at("gpufleet_gpus_held", 0, **pool) == 1 and at("gpufleet_gpus_held", 300, **pool) == 2
    assert at("gpufleet_gpus_idle", 660, **pool) == 1 and at("gpufleet_gpus_held", 900, **pool) == 0
    assert at("gpufleet_gpus_capacity", 1200, **pool) == 2
    assert at("gpufleet_fragmented_gpus", 540, **pool) == 0 and at("gpufleet_fragmented_gpus", 600, **pool) == 1
    queue = {"run": "after", "cluster_queue": "prod"}
    assert at("gpufleet_cluster_queue_cost_per_hour", 360, **queue) == pytest.approx(6.4)
    assert at("gpufleet_pending_workloads", 180, **queue) == 1 and at("gpufleet_pending_workloads", 300, **queue) == 0
    assert at("gpufleet_admitted_active_workloads", 420, **queue) == 2
    assert at("gpufleet_admitted_workloads", 240, **queue) == 1 and at("gpufleet_admitted_workloads", 300, **queue) == 2
    assert at("gpufleet_evicted_workloads", 840, **queue) == 0
    assert at("gpufleet_evicted_workloads", 900, **queue, reason="Preempted") == 1
    # waits 60 s and 180 s: the 80 s bucket holds one, the 320 s bucket both; count and sum follow
    assert at("gpufleet_admission_wait_time_seconds", 600, **queue, le="80.0") == 1
    assert at("gpufleet_admission_wait_time_seconds", 600, **queue, le="320.0") == 2
    hist = [s for s in fams["gpufleet_admission_wait_time_seconds"].samples
            if s.timestamp == origin + 600]
    assert {s.name: s.value for s in hist if not s.name.endswith("_bucket")} == {
        "gpufleet_admission_wait_time_seconds_count": 2, "gpufleet_admission_wait_time_seconds_sum": 240}


def test_sampling_step_stays_within_prometheus_lookback() -> None:
    assert step_for(3600) == 60 and step_for(7 * 86400) == 240 and step_for(10**9) == 240


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim") / "casestudy.om"
    result = runner.invoke(app, ["simulate", str(ROOT / "examples" / "casestudy"), "--duration", "6h",
                                 "--metrics-out", str(out), "-o", "json"])
    assert result.exit_code == 0, result.output
    return out


def test_the_file_uses_the_live_names_types_and_the_run_labels(simulated: Path) -> None:
    live = {f.name: f.type for f in SchedulerMetrics().registry.collect()}
    fams = families(simulated)
    assert {"gpufleet_gpus_held", "gpufleet_fragmented_gpus", "gpufleet_cluster_queue_cost_per_hour",
            "gpufleet_pending_workloads", "gpufleet_admission_wait_time_seconds"} <= fams.keys()
    runs: set[str] = set()
    for name, fam in fams.items():
        assert live[name] == fam.type, name
        last: dict[tuple[tuple[str, str], ...], float] = {}
        for s in fam.samples:
            runs.add(s.labels["run"])
            key = (s.name, *sorted(s.labels.items()))
            assert s.timestamp is not None and s.timestamp > last.get(key, -math.inf), (name, key)
            last[key] = s.timestamp
    assert runs == {"before (kube-default)", "after (gpufleet)"}
    queues = {s.labels["cluster_queue"] for s in fams["gpufleet_pending_workloads"].samples}
    assert queues == {"research", "production", "dev"}  # LocalQueue dev in data-science points at ClusterQueue dev


def test_fleet_gauges_add_up_at_every_instant(simulated: Path) -> None:
    fams = families(simulated)
    rows: dict[str, dict[tuple[object, ...], float]] = defaultdict(dict)
    for name in ("gpufleet_gpus_capacity", "gpufleet_gpus_held", "gpufleet_gpus_idle", "gpufleet_fragmented_gpus"):
        for s in fams[name].samples:
            rows[name][(s.labels["run"], s.labels["node_pool"], s.labels["model"], s.timestamp)] = s.value
    assert rows["gpufleet_gpus_capacity"]
    for key, cap in rows["gpufleet_gpus_capacity"].items():
        held, idle = rows["gpufleet_gpus_held"][key], rows["gpufleet_gpus_idle"][key]
        assert held + idle == pytest.approx(cap) and held <= cap + 1e-9
        assert 0 <= rows["gpufleet_fragmented_gpus"][key] <= idle + 1e-9
    held_by_queue: dict[tuple[object, ...], float] = defaultdict(float)
    for s in fams["gpufleet_cluster_queue_gpus_held"].samples:
        held_by_queue[(s.labels["run"], s.timestamp)] += s.value
    held_total: dict[tuple[object, ...], float] = defaultdict(float)
    for (run, _, _, stamp), v in rows["gpufleet_gpus_held"].items():
        held_total[(run, stamp)] += v
    for key, v in held_total.items():
        assert held_by_queue.get(key, 0.0) == pytest.approx(v, abs=1e-6)


def test_held_gpus_match_the_runs_spans(tmp_path: Path) -> None:
    """Independently of the writer's step functions: GPUs held at an instant are the spans covering it."""
    from gpufleet.sim.runner import plan, run_plan

    p = plan([str(ROOT / "examples" / "casestudy")], duration="2h")
    [out, *_] = run_plan(p)
    path = tmp_path / "one.om"
    end = 1_800_000_000.0
    write_openmetrics(path, [SimRun("r", out.result, local_queue_map([]))], end=end, step=60.0)
    origin = int(end - out.result.window_s)
    by_stamp: dict[float, float] = defaultdict(float)
    for s in families(path)["gpufleet_gpus_held"].samples:
        by_stamp[s.timestamp - origin] += s.value
    for t in np.arange(0.0, out.result.window_s, 600.0):
        expected = sum(x.share for x in out.result.spans if x.node and x.held_from <= t < x.held_to)
        assert by_stamp[float(t)] == pytest.approx(expected, abs=1e-6), t


def test_promtool_loads_every_sample_into_tsdb_blocks(simulated: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    result = promtool("tsdb", "create-blocks-from", "openmetrics", simulated, data, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert list(data.glob("*/meta.json")), "no TSDB block written"
    (data / "wal").mkdir()  # dump opens the head's WAL, which a Prometheus server would have created
    dumped = promtool("tsdb", "dump", data, timeout=600)
    assert dumped.returncode == 0, dumped.stderr
    in_file = sum(1 for line in simulated.read_text().splitlines() if line and not line.startswith("#"))
    in_tsdb = dumped.stdout.splitlines()
    assert len(in_tsdb) == in_file
    names = {m.group(1) for m in (re.match(r'\{__name__="([^"]+)"', line) for line in in_tsdb) if m}
    assert "gpufleet_gpus_held" in names and "gpufleet_admitted_workloads_total" in names


def test_an_unwritable_metrics_file_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    result = runner.invoke(app, ["simulate", str(ROOT / "examples" / "casestudy"), "--duration", "1h",
                                 "--metrics-out", str(tmp_path / "missing" / "x.om"), "-o", "json"])
    assert result.exit_code == 1
    assert "--metrics-out" in result.stderr and "Traceback" not in result.output
