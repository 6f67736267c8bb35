"""Issue 30 for a fake machine's MACHINE file (``--nvml fake:MACHINE``), run as a user would run it: ``gpufleet node
discover`` on a FIFO, ``/dev/zero``, a file that is not UTF-8 and one over the MACHINE file's 3 MiB.

Each command runs in a forked child of ``driver.py`` (peak memory and CPU time measured; an alarm turns a hang
into a failure): each must end in a clear error (file, the limit or the line, the fix) with exit 1, never a
traceback, within the promise of docs/limits.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpufleet.node.nvml_fake import MAX_MACHINE_BYTES

from .test_input_limits_everywhere import Run, _dev_zero, _fifo, _file, assert_clear_error_within_bounds, run_in_driver

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
    return run_in_driver(RUNS, tmp_path_factory.mktemp("machine"), timeout=600)


@pytest.mark.parametrize("run", RUNS, ids=[r.name for r in RUNS])
def test_a_bad_machine_file_gets_a_clear_error_within_bounds(run: Run, results: dict[str, dict[str, Any]]) -> None:
    assert_clear_error_within_bounds(run, results[run.name])
