"""``src/`` of another git revision, for benchmarks that run today's code beside an earlier one."""

from __future__ import annotations

import subprocess
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def revision_src(ref: str, into: Path) -> Path:
    """Extract ``src/`` of git revision ``ref`` under ``into`` (``git archive``); return the extracted ``src``.
    Raises OSError or subprocess.CalledProcessError when git cannot (no git, not a clone, unknown ref)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", ref, "src"], check=True,
                             capture_output=True).stdout
    with tempfile.TemporaryFile() as tmp:
        tmp.write(archive)
        tmp.seek(0)
        with tarfile.open(fileobj=tmp) as tar:
            tar.extractall(into, filter="data")
    return into / "src"
