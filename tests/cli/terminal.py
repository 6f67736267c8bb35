"""Run the real ``gpufleet`` program as a user would: in a pipe, or in a pseudo-terminal of a given size."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from dataclasses import dataclass
from pathlib import Path

COMMAND = [sys.executable, "-m", "gpufleet.cli.main"]
TIMEOUT_S = 120.0  # a loaded 2-core machine: generous, the commands take a second or two
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
COLOUR = re.compile(r"\x1b\[(?:[0-9;]*;)?(?:3[0-7]|9[0-7]|38;[25];[0-9;]+)m")


@dataclass(frozen=True)
class Ran:
    code: int
    stdout: str
    stderr: str  # empty in a terminal: both streams go to the one terminal, in ``stdout``


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without what would change the console's choices behind a test's back."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TERM", "TTY_COMPATIBLE")}
    env.update(extra)
    return env


def piped(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, stdin: str = "") -> Ran:
    """The program with its standard output and error captured through pipes, as in a CI log."""
    done = subprocess.run([*COMMAND, *args], input=stdin, capture_output=True, text=True, cwd=cwd,
                          env=env if env is not None else clean_env(), timeout=TIMEOUT_S)
    return Ran(done.returncode, done.stdout, done.stderr)


def in_terminal(*args: str, columns: int, cwd: Path | None = None, env: dict[str, str] | None = None) -> Ran:
    """The program on a pseudo-terminal ``columns`` wide (both streams), as a user at a terminal sees it."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    proc = subprocess.Popen([*COMMAND, *args], stdin=slave, stdout=slave, stderr=slave, cwd=cwd, close_fds=True,
                            env=env if env is not None else clean_env(TERM="xterm-256color"))
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], deadline - time.monotonic())
            if not ready:
                break
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the program ended and closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    text = b"".join(chunks).decode("utf-8", errors="replace").replace("\r\n", "\n")
    return Ran(code, text, "")


def visible(text: str) -> str:
    """Text without its escape sequences, as it shows on the screen."""
    return ANSI.sub("", text)
