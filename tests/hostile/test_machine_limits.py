"""Issue 30 for a fake machine's MACHINE file (``--nvml fake:MACHINE``), run as a user would run it: ``gpufleet node
discover`` on a FIFO, ``/dev/zero``, a file that is not UTF-8 and one over the MACHINE file's 3 MiB.

Each command runs in a forked child of ``driver.py`` (peak memory and CPU time measured; an alarm turns a hang
into a failure): each must end in a clear error (file, the limit or the line, the fix) with exit 1, never a
traceback, within the promise of docs/limits.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpufleet.node.nvml_fake import MAX_MACHINE_BYTES

from .test_hostile_inputs import DRIVER, MAX_CPU_SECONDS, MAX_RSS_MIB, MAX_WALL_SECONDS
from .test_input_limits_everywhere import Run, _dev_zero, _fifo, _file

ROOT = Path(__file__).resolve().parents[2]
MACHINE_TEXT = (ROOT / "examples" / "node" / "dgx-a100.yaml").read_text()


def _discover(machine: Any) -> Any:
    return lambda folder: ["node", "discover", "--nvml", f"fake:{machine(folder)}"]


RUNS = [
    Run("machine-fifo", _discover(_fifo("m.yaml")), ("m.yaml: not a regular file", "fix: give the path of a regular")),
    Run("machine-dev-zero", _discover(_dev_zero), ("/dev/zero: not a regular file", "fix:")),
    Run("machine-not-utf8", _discover(_file("m.yaml", lambda: MACHINE_TEXT.encode() + b"# caf\xe9\n")),
        ("m.yaml: the file is not UTF-8", "line 16", "fix: save the file as UTF-8")),
    Run("machine-over-3-mib", _discover(_file("m.yaml", lambda: MACHINE_TEXT + "#" * MAX_MACHINE_BYTES + "\n")),
        ("m.yaml", "3 MiB, gpufleet's limit on a MACHINE file", "fix:")),
]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    folder = tmp_path_factory.mktemp("machine")
    jobs = []
    for run in RUNS:
        where = folder / run.name
        where.mkdir()
        jobs.append({"id": run.name, "argv": run.make(where)})
    env = {**os.environ, "HOSTILE_SCRATCH": str(folder), "COLUMNS": "200", "NO_COLOR": "1"}
    proc = subprocess.run([sys.executable, str(DRIVER)], input=json.dumps(jobs), capture_output=True, text=True,
                          env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-5000:]
    return {r["id"]: r for r in json.loads(proc.stdout)}


@pytest.mark.parametrize("run", RUNS, ids=[r.name for r in RUNS])
def test_a_bad_machine_file_gets_a_clear_error_within_bounds(run: Run, results: dict[str, dict[str, Any]]) -> None:
    r = results[run.name]
    output = r["output"]
    assert "Traceback" not in output, output[-3000:]
    assert r["exit"] == 1, f"exit {r['exit']}:\n{output[-3000:]}"
    for text in run.expect:
        assert text in output, f"{text!r} not in:\n{output[-3000:]}"
    assert r["max_rss_mib"] < MAX_RSS_MIB, f"{r['max_rss_mib']} MiB"
    assert r["cpu_seconds"] < MAX_CPU_SECONDS, f"{r['cpu_seconds']} s of CPU"
    assert r["seconds"] < MAX_WALL_SECONDS, f"{r['seconds']} s"
