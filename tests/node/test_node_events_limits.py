"""MACHINE and MACHINE.events read as untrusted input (issue 30, docs/limits.md): a FIFO never blocks, a huge
append is read in bounded chunks, and a MACHINE file is a regular UTF-8 file within its bytes.

No fixed sleeps: a call that could block runs in a thread joined with a timeout, and events are waited for.
"""

from __future__ import annotations

import logging
import os
import threading
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from machines import MIG_MIXED, WHOLE_8, write_machine

from gpufleet.node import nvml_fake
from gpufleet.node.contract import NvmlError, XidEvent
from gpufleet.node.nvml_fake import EVENTS_CHUNK, MAX_EVENT_LINE, MAX_MACHINE_BYTES, FakeNvml

JOIN_S = 20.0  # only reached when the call hangs: a FIFO that blocks fails the test here, not the whole run


def in_thread(call: Callable[[], Any]) -> Any:
    """``call()`` in a daemon thread; fails (instead of hanging) when it does not return within JOIN_S."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["value"] = call()
        except BaseException as e:  # handed back to the test
            out["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(JOIN_S)
    assert not thread.is_alive(), f"blocked for {JOIN_S} s"
    if "error" in out:
        raise out["error"]
    return out["value"]


def wait_for(fake: FakeNvml, last: XidEvent, within: float = 60.0) -> list[XidEvent]:
    """Every event until ``last`` arrives, in order."""
    got: list[XidEvent] = []
    deadline = threading.Event()
    timer = threading.Timer(within, deadline.set)
    timer.start()
    try:
        while last not in got:
            assert not deadline.is_set(), f"{last} did not arrive within {within} s; got {got}"
            got += fake.wait_events(1.0)
    finally:
        timer.cancel()
    return got


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == nvml_fake.__name__]


def test_a_fifo_at_the_events_path_is_refused_once_without_blocking(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write_machine(tmp_path, MIG_MIXED)
    fake = FakeNvml(str(path))
    gpus = fake.machine().gpus
    events = Path(str(path) + ".events")
    os.mkfifo(events)  # nobody ever writes to it: a blocking open would wait forever
    with caplog.at_level(logging.WARNING):
        assert in_thread(lambda: fake.wait_events(0.2)) == []
        assert in_thread(lambda: fake.wait_events(0.2)) == []
    refused = [m for m in messages(caplog) if "not a regular file" in m]
    assert len(refused) == 1, refused  # said once, not on every read
    assert refused[0].startswith(f"{events}: ") and "fix:" in refused[0]
    # A writer that opens the FIFO meanwhile is not read either (it could stream forever).
    writer = os.open(events, os.O_RDWR | os.O_NONBLOCK)
    try:
        os.write(writer, b'{"gpu": 0, "xid": 79}\n')
        assert in_thread(lambda: fake.wait_events(0.2)) == []
    finally:
        os.close(writer)
    events.unlink()
    events.write_text('{"gpu": 1, "xid": 79}\n')  # a regular file again: read from its top
    assert wait_for(fake, XidEvent(gpus[1].uuid, 79)) == [XidEvent(gpus[1].uuid, 79)]


def test_a_huge_append_is_read_in_bounded_chunks_and_the_events_after_it_arrive(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    path = write_machine(tmp_path, WHOLE_8)
    fake = FakeNvml(str(path))
    gpus = fake.machine().gpus
    events = Path(str(path) + ".events")
    reads: list[int] = []
    pread = os.pread

    def spy(fd: int, n: int, offset: int) -> bytes:
        reads.append(n)
        return pread(fd, n, offset)

    monkeypatch.setattr(os, "pread", spy)  # what nvml_fake reads with
    giant = 24 * EVENTS_CHUNK  # one line with no newline for 24 MiB: never held, only counted
    garbage = b"not an event\n" * (EVENTS_CHUNK // 13 + 1000)  # more than a chunk of bad lines
    with events.open("wb") as f:
        f.write(b'{"gpu": 1, "xid": 79}\n')
        f.write(b"x" * giant + b"\n")
        f.write(garbage)
        f.write(b'{"gpu": 7, "xid": 48}\n')
    total = events.stat().st_size
    first, last = XidEvent(gpus[1].uuid, 79), XidEvent(gpus[7].uuid, 48)
    tracemalloc.start()
    try:
        with caplog.at_level(logging.WARNING):
            got = wait_for(fake, last)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got == [first, last]
    assert max(reads) <= EVENTS_CHUNK and sum(reads) >= total and len(reads) >= total // EVENTS_CHUNK
    assert peak < 8 * EVENTS_CHUNK, f"{peak:,} bytes at the peak for a {total:,}-byte append"
    said = messages(caplog)
    assert [m for m in said if m.startswith(f"{events}:2: ")] == [
        f"{events}:2: a line of {giant:,} bytes, more than an event's {MAX_EVENT_LINE:,} characters; skipped unparsed"]
    bad_lines = garbage.count(b"\n")
    one_by_one = [m for m in said if "not JSON" in m]
    summaries = [m for m in said if "more bad lines skipped" in m]
    # Every bad line is said once: one by one up to the limit per read, the rest counted with their line numbers.
    counted = sum(int(m.split(": ", 1)[1].split()[0]) for m in summaries)
    assert len(one_by_one) + counted == bad_lines
    assert len(one_by_one) <= nvml_fake.MAX_REPORTED_LINES * (len(reads))
    assert summaries and all(m.startswith(f"{events}: ") and "fix:" in m for m in summaries)
    assert fake.sample(gpus[7]).last_xid == 48  # health and telemetry follow the lines that parse


def test_a_partial_line_longer_than_any_event_is_not_held_and_the_next_line_counts(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write_machine(tmp_path, MIG_MIXED)
    fake = FakeNvml(str(path))
    gpus = fake.machine().gpus
    events = Path(str(path) + ".events")
    with caplog.at_level(logging.WARNING):
        events.write_bytes(b"[" * 40_000)  # still being written: no newline yet
        assert in_thread(lambda: fake.wait_events(0.0)) == []
        assert len(fake._events_file.partial) == 0 and fake._events_file.overlong == 40_000
        with events.open("ab") as f:
            f.write(b"]" * 10 + b'\n{"gpu": 0, "xid": 94, "gi": 2}\n')
        got = wait_for(fake, XidEvent(gpus[0].uuid, 94, 2))
    assert got == [XidEvent(gpus[0].uuid, 94, 2)]
    assert [m for m in messages(caplog) if m.startswith(f"{events}:")] == [
        f"{events}:1: a line of 40,010 bytes, more than an event's 4,096 characters; skipped unparsed"]


@pytest.mark.parametrize(("line", "said"), [
    (b'{"gpu": 0, "xid": 79, "note": "caf\xe9"}', "not UTF-8 (invalid continuation byte at byte 34 of the line)"),
    (b'{"gpu": 0, "xid": 79, "a": ' + b"[" * 21 + b"]" * 21 + b"}",
     "not JSON (nested too deep): 22 levels, at most 20"),
    (b'{"gpu": 0, "xid": 1000000000000000000}', "field xid: at most 18 digits"),
    (b'{"gpu": 0, "xid": 79.0}', "field xid must be a non-negative integer, got 79.0"),
    (b'{"gpu": 0, "xid": ' + b"9" * 4000 + b"}", "field xid: at most 18 digits"),
    (b'{"gpu": true, "xid": 79}', "field gpu must be a non-negative integer, got True"),
], ids=["not-utf8", "too-deep", "19-digits", "float", "4000-digits", "bool"])
def test_each_bad_line_is_reported_once_with_file_line_and_field(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, line: bytes, said: str) -> None:
    path = write_machine(tmp_path, MIG_MIXED)
    fake = FakeNvml(str(path))
    gpus = fake.machine().gpus
    events = Path(str(path) + ".events")
    with caplog.at_level(logging.WARNING):
        events.write_bytes(line + b'\n{"gpu": 1, "xid": 13}\n')
        assert wait_for(fake, XidEvent(gpus[1].uuid, 13)) == [XidEvent(gpus[1].uuid, 13)]
        assert fake.wait_events(0.0) == []
    bad = [m for m in messages(caplog) if m.startswith(f"{events}:")]
    assert len(bad) == 1 and bad[0].startswith(f"{events}:1: {said}"), bad
    assert fake.sample(gpus[0]).last_xid == 0  # the bad line changed nothing


# --- the MACHINE file ----------------------------------------------------------------------------------------


def test_a_fifo_as_machine_is_an_error_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "machine.yaml"
    os.mkfifo(fifo)
    with pytest.raises(NvmlError, match=r"machine.yaml: not a regular file .*fix: give the path of a regular file"):
        in_thread(lambda: FakeNvml(str(fifo)))


def test_dev_zero_as_machine_is_an_error() -> None:
    with pytest.raises(NvmlError, match="/dev/zero: not a regular file"):
        in_thread(lambda: FakeNvml("/dev/zero"))


def test_a_machine_file_that_is_not_utf8_names_the_line_and_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "machine.yaml"
    path.write_bytes(WHOLE_8.replace("memory: 2Ti", "memory: 2Ti  # caf\xe9").encode("latin-1"))
    with pytest.raises(NvmlError, match=r"machine.yaml: the file is not UTF-8 text .*line 9\).*fix: save the file "
                       "as UTF-8"):
        FakeNvml(str(path))


def test_a_machine_file_over_its_size_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "machine.yaml"
    path.write_text(WHOLE_8 + "#" * MAX_MACHINE_BYTES + "\n")
    with pytest.raises(NvmlError, match=r"machine.yaml: the input would exceed 3 MiB, gpufleet's limit on a MACHINE "
                       r"file \(see docs/limits.md\).*fix:"):
        FakeNvml(str(path))
    path.write_text(WHOLE_8 + "#" * (MAX_MACHINE_BYTES - len(WHOLE_8) - 10) + "\n")  # just within: read
    assert len(FakeNvml(str(path)).machine().gpus) == 8


def test_a_machine_file_that_turns_into_a_fifo_keeps_the_last_machine_without_blocking(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write_machine(tmp_path, WHOLE_8)
    fake = FakeNvml(str(path))
    before = fake.machine()
    path.unlink()
    os.mkfifo(path)
    with caplog.at_level(logging.WARNING):
        assert in_thread(fake.machine) == before
    assert any("cannot be read" in m and "not a regular file" in m for m in messages(caplog))
