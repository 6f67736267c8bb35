"""A closed pipe is quiet only where it is standard output's: a command whose stdout reader went away keeps its own
exit status (an error stays an error), and a closed pipe met anywhere else is a real failure, not status 0."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.cli.terminal import COMMAND, TIMEOUT_S, clean_env
from tests.conftest import REPO


def _into_closed_pipe(command: list[str]) -> subprocess.CompletedProcess[str]:
    """``command`` with its standard output a pipe whose read end is closed before it starts."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(command, stdout=write, stderr=subprocess.PIPE, text=True, env=clean_env(),
                              timeout=TIMEOUT_S, check=False)
    finally:
        os.close(write)


def test_an_error_keeps_its_status_when_stdout_is_a_closed_pipe() -> None:
    missing = str(REPO / "no-such-manifest.yaml")
    done = _into_closed_pipe([*COMMAND, "lint", missing])
    assert done.returncode == 2, done.stderr
    assert "no such file" in done.stderr


def test_a_plan_into_a_closed_pipe_still_ends_quietly_with_status_0() -> None:
    done = _into_closed_pipe([*COMMAND, "plan", str(REPO / "examples" / "casestudy"),
                              str(REPO / "examples" / "plan" / "snapshot.yaml")])
    assert (done.returncode, done.stderr) == (0, "")


# A command that writes to a peer that went away (an API server, a child process): a real failure.
_SOCKET = textwrap.dedent('''
    import socket, sys
    from gpufleet.cli.main import app

    @app.command("probe-socket")
    def probe_socket() -> None:
        a, b = socket.socketpair()
        b.close()
        a.sendall(b"x" * 100000)

    sys.argv = ["gpufleet", "probe-socket"]
    app()
''')


def test_a_closed_pipe_that_is_not_stdout_is_a_failure() -> None:
    for done in (_into_closed_pipe([sys.executable, "-c", _SOCKET]),
                 subprocess.run([sys.executable, "-c", _SOCKET], capture_output=True, text=True, env=clean_env(),
                                timeout=TIMEOUT_S, check=False)):
        assert done.returncode != 0, done.stderr
        assert "BrokenPipeError" in done.stderr


def test_a_closed_stderr_is_not_taken_for_stdout() -> None:
    """A usage error (written to standard error) whose reader went away does not end with status 0."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([*COMMAND, "lint"], stdout=subprocess.PIPE, stderr=write, text=True,
                              env=clean_env(), timeout=TIMEOUT_S, check=False)
    finally:
        os.close(write)
    assert done.returncode != 0
