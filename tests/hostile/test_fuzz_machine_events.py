"""Fuzzing MACHINE.events (issue 30): whatever lines are appended, and however the appends cut them, the fake
NVML's event wait never raises, delivers exactly the valid events in order, and says every bad line once, with
its file and line number.

The lines mix valid events (keys in any order, optional gi and ci, extra fields, spacing) with garbage text,
lines over 4,096 characters (a valid event padded out included), JSON nested past 20 levels, bytes that are not
UTF-8, fields of the wrong type or range and blank lines. The file grows in random pieces, a wait between each,
and is read in chunks of random size, so lines are split anywhere across reads.
"""

from __future__ import annotations

import itertools
import json
import logging
import tempfile
import threading
from pathlib import Path
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.node import nvml_fake
from gpufleet.node.contract import ALL_INSTANCES, XidEvent
from gpufleet.node.nvml_fake import FakeNvml

ROOT = Path(__file__).resolve().parents[2]
MACHINE = (ROOT / "examples" / "node" / "dgx-a100.yaml").read_text()
GPUS = 8
FUZZ = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SENTINEL = {"gpu": GPUS - 1, "xid": 999_999}

# A line is its bytes and the event it must give (index, xid, gi, ci), or None; blank lines are not reported.
Line = tuple[bytes, tuple[int, int, int, int] | None]


@st.composite
def valid_events(draw: st.DrawFn) -> Line:
    doc: dict[str, object] = {"gpu": draw(st.integers(0, GPUS - 1)), "xid": draw(st.integers(0, 10**18 - 1))}
    for key in ("gi", "ci"):
        if draw(st.booleans()):
            doc[key] = draw(st.integers(0, 14))
    if draw(st.booleans()):  # fields the reader ignores, nested within the limit
        depth = draw(st.integers(0, 18))
        doc["note"] = json.loads("[" * depth + json.dumps(draw(st.text(max_size=20))) + "]" * depth)
    keys = draw(st.permutations(list(doc)))
    text = json.dumps({k: doc[k] for k in keys}, indent=draw(st.sampled_from([None, 1])), ensure_ascii=False)
    text = text.replace("\n", " ")
    expect = (int(doc["gpu"]), int(doc["xid"]),  # type: ignore[call-overload]
              int(doc.get("gi", ALL_INSTANCES)), int(doc.get("ci", ALL_INSTANCES)))  # type: ignore[call-overload]
    return text.encode(), expect


def _bad(data: bytes) -> Line:
    return data, None


# No "{": garbage can never be a JSON object, hence never an event.
garbage = st.text(st.characters(exclude_characters="\n{", codec="utf-8"), min_size=1,
                  max_size=200).filter(lambda t: bool(t.encode().strip())).map(lambda t: _bad(t.encode()))
huge = st.one_of(
    st.integers(nvml_fake.MAX_EVENT_LINE + 1, 40_000).map(lambda n: _bad(b"x" * n)),
    st.integers(nvml_fake.MAX_EVENT_LINE + 1, 6_000).map(lambda n: _bad(b'{"gpu": 0, "xid": 79}'.ljust(n))),
    st.integers(nvml_fake.MAX_EVENT_LINE + 1, 8_000).map(lambda n: _bad("é".encode() * n)),  # 2 bytes a char
)
nested = st.one_of(
    st.integers(21, 6_000).map(lambda n: _bad(b"[" * n)),
    st.integers(20, 300).map(lambda n: _bad(b'{"gpu": 0, "xid": 79, "a": ' + b"[" * n + b"]" * n + b"}")),
)
not_utf8 = st.one_of(
    st.binary(max_size=60).map(lambda b: _bad(b"\xff" + b.replace(b"\n", b""))),
    st.sampled_from([b"\x80", b"\xc3", b"\xed\xa0\x80", b"\xf8"]).map(
        lambda b: _bad(b'{"gpu": 0, "xid": 79, "note": "' + b + b'"}')),
)
wrong_fields = st.sampled_from([
    b'{"gpu": 8, "xid": 79}', b'{"gpu": -1, "xid": 79}', b'{"gpu": 0, "xid": true}', b'{"gpu": 0, "xid": 7.9}',
    b'{"gpu": 0, "xid": "79"}', b'{"gpu": 0, "xid": 1000000000000000000}', b'{"gpu": 0}', b'{"xid": 79}',
    b'{"gpu": 0, "xid": 79, "gi": -2}', b'[{"gpu": 0, "xid": 79}]', b'{"gpu": 0, "xid": 1e999}', b'"event"',
    b'{"gpu": 0, "xid": NaN}', b'{"gpu": 0, "xid": 79', b'{"gpu": 0, "xid": 79}}',
]).map(_bad)
blank = st.sampled_from([b"", b" ", b"\t \r"]).map(_bad)
lines = st.lists(st.one_of(valid_events(), valid_events(), garbage, huge, nested, not_utf8, wrong_fields, blank),
                 max_size=40)


class Said(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@FUZZ
@given(lines=lines, cuts=st.lists(st.floats(0.0, 1.0), max_size=6),
       chunk=st.sampled_from([37, 512, 4_096, 65_536, nvml_fake.EVENTS_CHUNK]))
def test_event_lines_never_raise_and_give_exactly_the_valid_events_in_order(
        lines: list[Line], cuts: list[float], chunk: int) -> None:
    last = (SENTINEL["gpu"], SENTINEL["xid"], ALL_INSTANCES, ALL_INSTANCES)
    every = [*lines, (json.dumps(SENTINEL).encode(), last)]
    data = b"".join(raw + b"\n" for raw, _ in every)
    with tempfile.TemporaryDirectory() as folder:
        machine = Path(folder) / "machine.yaml"
        machine.write_text(MACHINE)
        said = Said()
        logger = logging.getLogger(nvml_fake.__name__)
        logger.addHandler(said)
        try:
            with mock.patch.object(nvml_fake, "EVENTS_CHUNK", chunk):
                fake = FakeNvml(str(machine))
                uuids = [g.uuid for g in fake.machine().gpus]
                got: list[XidEvent] = []
                events = Path(str(machine) + ".events")
                points = sorted({0, *(int(c * len(data)) for c in cuts), len(data)})
                with events.open("wb", buffering=0) as f:
                    for start, end in itertools.pairwise(points):
                        f.write(data[start:end])  # a line may end in the next piece
                        got += fake.wait_events(0.0)
                done = threading.Event()
                timer = threading.Timer(60.0, done.set)
                timer.start()
                try:
                    wanted = XidEvent(uuids[last[0]], last[1])
                    while wanted not in got:
                        assert not done.is_set(), f"the last event did not arrive; got {got}"
                        got += fake.wait_events(1.0)
                finally:
                    timer.cancel()
                assert fake.wait_events(0.0) == []
        finally:
            logger.removeHandler(said)
    expected = [XidEvent(uuids[g], xid, gi, ci) for _, e in every if e is not None for g, xid, gi, ci in [e]]
    assert got == expected
    bad = [n for n, (raw, e) in enumerate(every, start=1) if e is None and raw.strip()]
    prefix = f"{events}:"
    for n in bad:  # each bad line said once, with its file and line (40 lines: never summarised)
        assert sum(m.startswith(f"{prefix}{n}: ") for m in said.messages) == 1, (n, every[n - 1][0][:200],
                                                                                  said.messages)
    assert sum(m.startswith(prefix) for m in said.messages) == len(bad), said.messages
    assert all(len(m) < 2_000 for m in said.messages)
