"""Prometheus's own tools for tests: ``promtool`` (rule checks, rule unit tests, TSDB import) and the
``prometheus`` server, both from Debian's ``prometheus`` package (``.ci/run`` installs it when absent).

A test that needs one fails when it is missing, naming the package, so CI cannot pass by skipping them. On a
machine without the package set GPUFLEET_SKIP_PROMETHEUS=1 to skip them instead (and say so in the output).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

OPT_OUT = "GPUFLEET_SKIP_PROMETHEUS"


def prometheus_tool(name: str) -> str:
    """The path of ``promtool`` or ``prometheus``; fails (or skips, opted out) when it is not installed."""
    found = shutil.which(name)
    if found:
        return found
    if os.environ.get(OPT_OUT) == "1":
        pytest.skip(f"{name} is not installed and {OPT_OUT}=1: Prometheus tests skipped")
    pytest.fail(f"{name} is not installed: install Debian's prometheus package (apt-get install prometheus; "
                f".ci/run does it in CI), or set {OPT_OUT}=1 to skip the tests that need it", pytrace=False)


def promtool(*args: str | Path, cwd: Path | None = None, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Run promtool; the result carries its output, the caller asserts on the exit status."""
    return subprocess.run([prometheus_tool("promtool"), *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout, check=False)


def check_expressions(expressions: dict[str, str], folder: Path) -> subprocess.CompletedProcess[str]:
    """PromQL syntax check offline: each expression becomes a recording rule (named after its key) in a rules
    file that ``promtool check rules`` parses; an error names the rule, hence the expression."""
    import yaml

    rules = [{"record": f"check:{i}", "expr": expr, "labels": {"source": source}}
             for i, (source, expr) in enumerate(expressions.items())]
    path = folder / "expressions.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "expressions", "rules": rules}]}, sort_keys=False))
    return promtool("check", "rules", path)
