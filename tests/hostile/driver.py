"""Runs gpufleet commands on hostile inputs, each in a forked child with its time, memory and exit code.

Usage: ``python driver.py`` with a JSON list of ``{"id": ..., "argv": [...]}`` on stdin; prints a JSON list of
``{"id", "exit", "seconds", "cpu_seconds", "max_rss_mib", "output"}``. The CLI is imported once; every command then
runs in a fork of this process (so one command's memory is measured alone, and a runaway one is killed without taking
the others along): an address-space cap and an alarm stop a command that would exhaust the machine.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time
from typing import Any

from gpufleet.cli.main import app

HARD_MEMORY_CAP = 3 * 2**30  # far above the 1 GiB the tests allow: only there to protect the machine
HARD_TIME_CAP_S = 120


def _child(argv: list[str], out_path: str) -> None:
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    resource.setrlimit(resource.RLIMIT_AS, (HARD_MEMORY_CAP, HARD_MEMORY_CAP))
    signal.alarm(HARD_TIME_CAP_S)
    code = 0
    try:
        app(argv, prog_name="gpufleet")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # a traceback is exactly what the tests look for: print it and fail
        import traceback

        traceback.print_exc()
        code = 99
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def run(job: dict[str, Any], scratch: str) -> dict[str, Any]:
    out_path = os.path.join(scratch, f"{job['id']}.out")
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns
        _child(job["argv"], out_path)
    _, status, usage = os.wait4(pid, 0)
    seconds = time.monotonic() - started
    exit_code = os.waitstatus_to_exitcode(status)
    with open(out_path, encoding="utf-8", errors="replace") as fh:
        output = fh.read()
    return {"id": job["id"], "exit": exit_code, "seconds": round(seconds, 2),
            "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
            "max_rss_mib": round(usage.ru_maxrss / 1024, 1), "output": output[-20_000:]}


def main() -> None:
    jobs = json.load(sys.stdin)
    scratch = os.environ.get("HOSTILE_SCRATCH", "/tmp")
    results = [run(job, scratch) for job in jobs]
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
