"""Reader for the openb trace (Alibaba cluster-trace-gpu-v2023) node and pod CSVs.

The trace itself is never vendored: callers locate it with :func:`default_openb_dir`.
Every row that cannot be turned into a record is counted and described in the
returned :class:`TraceReadReport`, so a benchmark can refuse to run on a damaged
file instead of silently measuring a smaller workload.

A CSV is held to the limits of every other input (``docs/limits.md``): it is read as the manifest reader reads
a file (a regular file within the run's bytes, UTF-8), a node has at most 64 GPUs and a pod at most a node's,
an integer at most 18 digits, a field at most 253 characters, and a run at most 5,000 nodes and 150,000 pods:
past the last two the file is not read further. Each problem names the file, line, column, the limit and the fix.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.api import limits
from gpufleet.api.errors import ManifestError, Problems, shown
from gpufleet.api.reader import parse_int_text
from gpufleet.api.source import InputBudget, read_file_text
from gpufleet.gpu.constants import MILLI

__all__ = [
    "DEFAULT_POD_FILE",
    "GPU_NODE_FILE",
    "MILLI",
    "OPENB_DIR_ENV",
    "OpenbNode",
    "OpenbPod",
    "TraceReadReport",
    "default_openb_dir",
    "read_nodes",
    "read_pods",
    "read_trace",
]

OPENB_DIR_ENV = "GPUFLEET_OPENB_DIR"
GPU_NODE_FILE = "openb_node_list_gpu_node.csv"
DEFAULT_POD_FILE = "openb_pod_list_default.csv"

_NODE_REQUIRED = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
_POD_REQUIRED = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
# Absent from the multigpu* files; a missing column simply yields None / ().
_POD_OPTIONAL = ("gpu_spec", "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time")


@dataclass(frozen=True, slots=True)
class OpenbNode:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str | None  # None for CPU-only nodes


@dataclass(frozen=True, slots=True)
class OpenbPod:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int  # per GPU, 0..1000
    gpu_spec: tuple[str, ...]  # allowed GPU models; empty = any model
    qos: str | None
    phase: str | None
    creation_time: int | None
    deletion_time: int | None
    scheduled_time: int | None
    line: int  # physical line in the CSV, for error messages further down the pipeline


@dataclass
class TraceReadReport:
    """rows_read counts every data row seen, accepted or not; rows_rejected ⊆ rows_read."""

    file: str
    rows_read: int = 0
    rows_rejected: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def rows_accepted(self) -> int:
        return self.rows_read - self.rows_rejected

    @property
    def ok(self) -> bool:
        return not self.problems


class _RowError(Exception):
    def __init__(self, column: str, what: str, fix: str | None = None) -> None:
        super().__init__(f"{column}: {what}")
        self.column = column
        self.what = what
        self.fix = fix


def _problem(file: str, line: int, column: str, what: str, fix: str | None = None) -> str:
    """One problem as every input error reads: ``FILE:LINE: COLUMN: WHAT; fix: FIX`` (cut if huge)."""
    return str(ManifestError(what, file, line, field=column, fix=fix))


def _int_field(row: dict[str, str], column: str, *, lo: int = 0, hi: int | limits.Limit | None = None) -> int:
    raw = row[column].strip()
    if raw == "":
        raise _RowError(column, "empty, expected an integer")
    # int() would accept "1_000", " +5" and Unicode digits, and refuses past 4,300 digits with a ValueError; the
    # trace only ever holds plain ASCII digits, and no field needs more than int64's 18.
    value = parse_int_text(raw) if not raw.startswith("+") else None
    if value is None:
        body = raw[1:] if raw[0] == "-" else raw
        if body.isascii() and body.isdigit():
            raise _RowError(column, f"a number of {len(body):,} digits: at most {limits.MAX_INT_DIGITS} (gpufleet's "
                            "limit on an integer; see docs/limits.md)", fix="write the value in plain units, "
                            f"at most {limits.MAX_INT_DIGITS} digits")
        raise _RowError(column, f"not an integer: {shown(raw)}", fix="write a whole number in ASCII digits")
    if isinstance(hi, limits.Limit) and value > hi.value:  # a documented limit: said as the YAML input says it
        raise _RowError(column, f"{value:,} is too large: {hi.says()}", fix=f"use a value of at most {hi.value:,}")
    top = hi.value if isinstance(hi, limits.Limit) else hi
    if value < lo or (top is not None and value > top):
        bound = f"{lo}..{top}" if top is not None else f">= {lo}"
        raise _RowError(column, f"{value} out of range ({bound})")
    return value


def _opt_int_field(row: dict[str, str], column: str) -> int | None:
    if column not in row or row[column].strip() == "":
        return None
    return _int_field(row, column)


def _opt_str_field(row: dict[str, str], column: str) -> str | None:
    value = row.get(column, "").strip()
    return value or None


def _parse_node(row: dict[str, str], line: int) -> OpenbNode:
    name = row["sn"].strip()
    if not name:
        raise _RowError("sn", "empty node name")
    gpus = _int_field(row, "gpu", hi=limits.GPUS_PER_NODE)
    model = _opt_str_field(row, "model")
    if gpus > 0 and model is None:
        raise _RowError("model", f"empty but the node has {gpus} GPUs")
    return OpenbNode(
        name=name,
        cpu_milli=_int_field(row, "cpu_milli"),
        memory_mib=_int_field(row, "memory_mib"),
        gpus=gpus,
        model=model,
    )


def _parse_pod(row: dict[str, str], line: int) -> OpenbPod:
    name = row["name"].strip()
    if not name:
        raise _RowError("name", "empty pod name")
    cpu = _int_field(row, "cpu_milli")
    mem = _int_field(row, "memory_mib")
    num_gpu = _int_field(row, "num_gpu", hi=limits.GPUS_PER_NODE)  # a pod runs on one node
    gpu_milli = _int_field(row, "gpu_milli", hi=MILLI)
    if gpu_milli < MILLI and num_gpu > 1:
        raise _RowError("gpu_milli", f"{gpu_milli} < {MILLI} with num_gpu={num_gpu} (sharing needs 1 GPU)")
    if (num_gpu == 0) != (gpu_milli == 0):
        raise _RowError("gpu_milli", f"{gpu_milli} with num_gpu={num_gpu} (0 exactly when num_gpu is 0)")
    spec_raw = row.get("gpu_spec", "").strip()
    gpu_spec = tuple(part.strip() for part in spec_raw.split("|") if part.strip()) if spec_raw else ()
    return OpenbPod(
        name=name,
        cpu_milli=cpu,
        memory_mib=mem,
        num_gpu=num_gpu,
        gpu_milli=gpu_milli,
        gpu_spec=gpu_spec,
        qos=_opt_str_field(row, "qos"),
        phase=_opt_str_field(row, "pod_phase"),
        creation_time=_opt_int_field(row, "creation_time"),
        deletion_time=_opt_int_field(row, "deletion_time"),
        scheduled_time=_opt_int_field(row, "scheduled_time"),
        line=line,
    )


@dataclass(frozen=True, slots=True)
class _Kind:
    """What one kind of CSV holds: its columns, its row parser, its key, and the run's limit on its rows."""

    noun: str
    required: Sequence[str]
    parse: Callable[[dict[str, str], int], OpenbNode | OpenbPod]
    name_column: str
    limit: limits.Limit


_NODES = _Kind("nodes", _NODE_REQUIRED, _parse_node, "sn", limits.NODES)
_PODS = _Kind("pods", _POD_REQUIRED, _parse_pod, "name", limits.PODS)


def _parse_rows(text: str, kind: _Kind, report: TraceReadReport, room: int) -> list[OpenbNode | OpenbPod]:
    """The records of a CSV's text; every problem goes into ``report``. At most ``room`` rows are read: the row
    past it is an error and the rest of the file is not read (its records would only be thrown away)."""
    file = report.file
    out: list[OpenbNode | OpenbPod] = []
    seen: dict[str, int] = {}
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        if header is None:
            report.problems.append(_problem(file, 1, "header", "file is empty", "give the CSV with its header"))
            return out
        header = [h.strip() for h in header]
        missing = [c for c in kind.required if c not in header]
        for column in missing:
            report.problems.append(_problem(file, 1, column, "missing from header",
                                            f"add the column; the {kind.noun} CSV needs {', '.join(kind.required)}"))
        for row in reader:
            if not row:
                continue
            line = reader.line_num
            if report.rows_read == room:
                _limit_reached(report, kind, line, room)
                return out
            report.rows_read += 1
            if missing:  # without a required column no row can be read: counted, so the loss is seen
                report.rows_rejected += 1
                continue
            record = _parse_row(header, row, line, kind, seen, report)
            if record is not None:
                out.append(record)
    except csv.Error as err:  # an unclosed quote, or a field past the csv module's own 128 KiB
        report.rows_read += 1
        report.rows_rejected += 1
        report.problems.append(_problem(file, reader.line_num, "row", f"not valid CSV ({err}); the rest of the "
                                        "file is not read", f"a field holds at most {limits.MAX_CSV_FIELD_CHARS} "
                                        "characters; close every quote"))
    return out


def _parse_row(header: list[str], row: list[str], line: int, kind: _Kind, seen: dict[str, int],
               report: TraceReadReport) -> OpenbNode | OpenbPod | None:
    try:
        if len(row) < len(header):
            raise _RowError(header[len(row)], f"missing (row has {len(row)} of {len(header)} fields)")
        if len(row) > len(header):
            raise _RowError("row", f"{len(row)} fields, header has {len(header)}")
        for column, value in zip(header, row, strict=True):
            if len(value) > limits.MAX_CSV_FIELD_CHARS:
                raise _RowError(column, f"{len(value):,} characters: {limits.CSV_FIELD_CHARS.says()}",
                                fix="shorten the field")
        record = kind.parse(dict(zip(header, row, strict=True)), line)
        key = record.name
        if key in seen:
            raise _RowError(kind.name_column, f"duplicate {key!r} (first on line {seen[key]})")
        seen[key] = line
    except _RowError as err:
        report.rows_rejected += 1
        report.problems.append(_problem(report.file, line, err.column, err.what, err.fix))
        return None
    return record


def _limit_reached(report: TraceReadReport, kind: _Kind, line: int, room: int) -> None:
    others = kind.limit.value - room
    with_others = f" with the {others:,} in the input's other files" if others else ""
    report.problems.append(_problem(
        report.file, line, "row", f"more than {room:,} {kind.noun}{with_others}: {kind.limit.says()}; the rest of "
        "the file is not read", f"give fewer {kind.noun} per run (a part of the trace)"))


def _read_text(path: str | os.PathLike[str], budget: InputBudget | None, report: TraceReadReport) -> str | None:
    """The file's text as the manifest reader reads a file (regular, within the budget, UTF-8); None with
    the problem in ``report`` otherwise."""
    problems = Problems()
    text = read_file_text(str(path), problems, budget if budget is not None else InputBudget(),
                          skip_irregular=False)
    report.problems.extend(str(e) for e in problems.errors)
    return text


def _read(path: str | os.PathLike[str], kind: _Kind, budget: InputBudget | None, room: int | None
          ) -> tuple[list[OpenbNode | OpenbPod], TraceReadReport]:
    report = TraceReadReport(file=str(path))
    text = _read_text(path, budget, report)
    if text is None:
        return [], report
    return _parse_rows(text, kind, report, kind.limit.value if room is None else room), report


def read_nodes(path: str | os.PathLike[str], *, budget: InputBudget | None = None, room: int | None = None
               ) -> tuple[list[OpenbNode], TraceReadReport]:
    """Read an openb node list (``sn,cpu_milli,memory_mib,gpu,model``); ``budget`` is the run's bytes (a fresh
    one alone), ``room`` how many nodes the run has left (the limit alone)."""
    rows, report = _read(path, _NODES, budget, room)
    return [r for r in rows if isinstance(r, OpenbNode)], report


def read_pods(path: str | os.PathLike[str], *, budget: InputBudget | None = None, room: int | None = None
              ) -> tuple[list[OpenbPod], TraceReadReport]:
    """Read an openb pod list; the 5-column multigpu files are accepted (optional fields become None)."""
    rows, report = _read(path, _PODS, budget, room)
    return [r for r in rows if isinstance(r, OpenbPod)], report


def read_trace(path: str | os.PathLike[str], *, budget: InputBudget, node_room: int, pod_room: int
               ) -> tuple[list[OpenbNode], list[OpenbPod], TraceReadReport]:
    """One CSV of either kind, read once: a node list when its header starts with ``sn,``, else a pod list."""
    report = TraceReadReport(file=str(path))
    text = _read_text(path, budget, report)
    if text is None:
        return [], [], report
    end = text.find("\n")
    if (text if end < 0 else text[:end]).strip().startswith("sn,"):
        nodes = _parse_rows(text, _NODES, report, node_room)
        return [r for r in nodes if isinstance(r, OpenbNode)], [], report
    pods = _parse_rows(text, _PODS, report, pod_room)
    return [], [r for r in pods if isinstance(r, OpenbPod)], report


def default_openb_dir() -> Path | None:
    """Where the trace lives: $GPUFLEET_OPENB_DIR, else ``<repo>/../shared/data/openb``.

    The trace is deliberately kept outside the repository, so this returns None
    (rather than raising) when it is absent and tests can skip with a reason.
    An explicitly set but missing $GPUFLEET_OPENB_DIR also gives None instead of
    falling back, so a typo in the variable is not masked by another copy.
    """
    env = os.environ.get(OPENB_DIR_ENV)
    if env:
        p = Path(env).expanduser()
        return p if p.is_dir() else None
    # src/gpufleet/sim/openb.py -> parents[3] is the checkout root in the src layout.
    repo = Path(__file__).resolve().parents[3]
    rel = Path("shared", "data", "openb")
    for candidate in (repo.parent / rel, Path.cwd().parent / rel):
        if candidate.is_dir():
            return candidate
    return None
