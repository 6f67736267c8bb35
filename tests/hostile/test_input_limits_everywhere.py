"""Issue 30's reproducers for the inputs beside manifests, run as a user would run them: the node agent's
device-plugin config (item 4), openb CSVs for ``simulate`` and ``advise`` (item 6) and the dashboard's simulation
result (item 7).

Each command runs in a forked child of ``driver.py``, which measures its peak memory and CPU time: every one must
end in a clear error (file, line or row, field, the limit; exit 1 as the CLI documents), never a traceback, within
the promise of docs/limits.md (1 GiB, 20 s of CPU). A FIFO that would block and ``/dev/zero`` that never ends are
among them: the driver's alarm and the wall-time bound turn a hang into a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpufleet.api import limits

from .test_hostile_inputs import DRIVER, MAX_CPU_SECONDS, MAX_RSS_MIB, MAX_WALL_SECONDS

ROOT = Path(__file__).resolve().parents[2]
MACHINE = f"fake:{ROOT / 'examples' / 'node' / 'dgx-a100.yaml'}"
POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time," \
             "scheduled_time\n"
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"


@dataclass(frozen=True)
class Run:
    name: str
    make: Callable[[Path], list[str]]  # writes the input under a folder, returns the command line's arguments
    expect: tuple[str, ...]  # each must be in the output


def _file(name: str, content: Callable[[], str | bytes]) -> Callable[[Path], Path]:
    def write(folder: Path) -> Path:
        path = folder / name
        data = content()
        path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
        return path
    return write


def _fifo(name: str) -> Callable[[Path], Path]:
    def make(folder: Path) -> Path:
        path = folder / name
        os.mkfifo(path)  # nobody ever writes to it: reading it would block forever
        return path
    return make


def _dev_zero(_folder: Path) -> Path:
    return Path("/dev/zero")


# --- item 4: the node agent's --config ------------------------------------------------------------------------

def _replicas(n: int) -> str:
    return f"version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: {n}\n"


def _discover(config: Callable[[Path], Path]) -> Callable[[Path], list[str]]:
    return lambda folder: ["node", "discover", "--nvml", MACHINE, "--config", str(config(folder))]


# --- item 6: openb CSVs -----------------------------------------------------------------------------------------

def _nodes(n: int = 2, gpus: str = "8") -> str:
    return NODE_HEADER + "".join(f"n{i},96000,393216,{gpus},V100M32\n" for i in range(n))


def _pods(n: int = 2, cpu: str = "1000", name: str = "p") -> str:
    return POD_HEADER + "".join(f"{name}{i},{cpu},1024,1,1000,,LS,Running,{i},{i + 600},\n" for i in range(n))


def _short_pods(n: int) -> str:
    """The 5-column pod file (openb's multigpu form) with the shortest rows: the most rows within the bytes."""
    return "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(f"p{i},1,1,1,1000\n" for i in range(n))


def _command(command: str, *files: Callable[[Path], Path]) -> Callable[[Path], list[str]]:
    return lambda folder: [command, *(str(f(folder)) for f in files), *(["--duration", "1h"] if command == "simulate"
                                                                          else [])]


NODES_OK = _file("nodes.csv", _nodes)
PODS_OK = _file("pods.csv", _pods)

# --- item 7: the dashboard's simulation result ----------------------------------------------------------------


def _result(**kpis: str) -> str:
    """The smallest result the dashboard accepts, with raw JSON text for the KPIs given."""
    timeline = {"t": [0], "nodes": {}, "jobs_waiting": [0], "jobs_running": [0], "fragmentation_pct": [0],
                "wait_quantiles": {}}
    run = {"scenario": "s", "policy": "gpufleet", "kpis": "KPIS", "per_queue": {}, "per_team": {}, "per_pool": {},
           "series": {}, "timeline": timeline, "run": {}}
    text = json.dumps({"runs": [run]})
    return text.replace('"KPIS"', "{" + ", ".join(f'"{k}": {v}' for k, v in kpis.items()) + "}")


def _dashboard(result: Callable[[Path], Path]) -> Callable[[Path], list[str]]:
    # Port 0: were the file ever accepted, the child would serve; the driver's alarm would then fail the test.
    return lambda folder: ["dashboard", "--simulation", str(result(folder)), "--address", "127.0.0.1:0"]


RUNS = [
    # item 4
    Run("config-replicas-1000000", _discover(_file("c.yaml", lambda: _replicas(1_000_000))),
        ("c.yaml:6", "sharing.timeSlicing.resources[0].replicas", "at most 64", "fix:")),
    Run("config-replicas-65", _discover(_file("c.yaml", lambda: _replicas(65))), ("c.yaml:6", "at most 64")),
    Run("config-fifo", _discover(_fifo("c.yaml")), ("c.yaml", "not a regular file", "fix:")),
    Run("config-dev-zero", _discover(_dev_zero), ("/dev/zero", "not a regular file")),
    Run("config-not-utf8", _discover(_file("c.yaml", lambda: b"version: v1\n# caf\xe9\n")),
        ("c.yaml", "not UTF-8", "line 2", "fix:")),
    Run("config-over-1-mib", _discover(_file("c.yaml", lambda: "version: v1\n" + "#" * limits.MAX_CONFIG_BYTES)),
        ("c.yaml", "1 MiB", "fix:")),
    # item 6, under simulate and advise
    Run("csv-gpu-1e9.simulate", _command("simulate", _file("n.csv", lambda: _nodes(1, "1000000000")), PODS_OK),
        ("n.csv:2: gpu:", "at most 64", "fix:")),
    Run("csv-gpu-1e9.advise", _command("advise", _file("n.csv", lambda: _nodes(1, "1000000000")), PODS_OK),
        ("n.csv:2: gpu:", "at most 64")),
    Run("csv-100000-nodes", _command("simulate", _file("n.csv", lambda: _nodes(100_000)), PODS_OK),
        (f"n.csv:{limits.MAX_NODES + 2}: row: more than 5,000 nodes", "fix:")),
    Run("csv-1000000-pods", _command("advise", NODES_OK, _file("p.csv", lambda: _short_pods(1_000_000))),
        (f"p.csv:{limits.MAX_PODS + 2}: row: more than 150,000 pods", "fix:")),
    Run("csv-over-32-mib", _command("simulate", NODES_OK, _file("p.csv", lambda: _pods(700_000))),
        ("p.csv", "32 MiB", "fix:")),
    Run("csv-5000-digits", _command("simulate", NODES_OK, _file("p.csv", lambda: _pods(1, "9" * 5000))),
        ("p.csv:2: cpu_milli:", "at most 253")),
    Run("csv-19-digits", _command("simulate", NODES_OK, _file("p.csv", lambda: _pods(1, "9" * 19))),
        ("p.csv:2: cpu_milli:", "19 digits", "at most 18")),
    Run("csv-200-kb-field", _command("simulate", NODES_OK, _file("p.csv", lambda: _pods(1, name="x" * 200_000))),
        ("p.csv:2: row:", "not valid CSV", "at most 253")),
    Run("csv-not-utf8", _command("advise", NODES_OK, _file("p.csv", lambda: _pods(1).encode() + b"caf\xe9,1\n")),
        ("p.csv", "not UTF-8", "line 3")),
    Run("csv-fifo", _command("simulate", NODES_OK, _fifo("p.csv")), ("p.csv", "not a regular file")),
    # item 7
    Run("result-kpi-1e999", _dashboard(_file("r.json", lambda: _result(cost="1e999"))),
        ("r.json: runs[0].kpis.cost:", "not finite", "fix:")),
    Run("result-5000-deep", _dashboard(_file("r.json", lambda: _result(cost="[" * 5000 + "]" * 5000))),
        ("r.json", "5,004 levels deep", "at most 64")),
    Run("result-fifo", _dashboard(_fifo("r.json")), ("r.json", "not a regular file")),
]


def run_in_driver(runs: list[Run], folder: Path, timeout: float = 900) -> dict[str, dict[str, Any]]:
    """Each run's command in a forked child of ``driver.py`` (peak memory, CPU and wall time measured; an alarm
    turns a hang into a failure): its result by name."""
    jobs = []
    for run in runs:
        where = folder / run.name
        where.mkdir()
        jobs.append({"id": run.name, "argv": run.make(where)})
    env = {**os.environ, "HOSTILE_SCRATCH": str(folder), "COLUMNS": "200", "NO_COLOR": "1"}
    proc = subprocess.run([sys.executable, str(DRIVER)], input=json.dumps(jobs), capture_output=True, text=True,
                          env=env, timeout=timeout, check=False)
    assert proc.returncode == 0, proc.stderr[-5000:]
    return {r["id"]: r for r in json.loads(proc.stdout)}


def assert_clear_error_within_bounds(run: Run, r: dict[str, Any]) -> None:
    """Exit 1, no traceback, the expected words, one-line messages, within the promise of docs/limits.md."""
    output = r["output"]
    assert "Traceback" not in output, output[-3000:]
    assert r["exit"] == 1, f"exit {r['exit']}:\n{output[-3000:]}"
    for text in run.expect:
        assert text in output, f"{text!r} not in:\n{output[-3000:]}"
    assert r["max_rss_mib"] < MAX_RSS_MIB, f"{r['max_rss_mib']} MiB"
    assert r["cpu_seconds"] < MAX_CPU_SECONDS, f"{r['cpu_seconds']} s of CPU"
    assert r["seconds"] < MAX_WALL_SECONDS, f"{r['seconds']} s"
    assert max((len(line) for line in output.splitlines()), default=0) < 2000


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return run_in_driver(RUNS, tmp_path_factory.mktemp("limits"))


@pytest.mark.parametrize("run", RUNS, ids=[r.name for r in RUNS])
def test_each_reproducer_gets_a_clear_error_within_bounds(run: Run, results: dict[str, dict[str, Any]]) -> None:
    assert_clear_error_within_bounds(run, results[run.name])
