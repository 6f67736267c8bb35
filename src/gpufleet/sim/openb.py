"""Reader for the openb trace (Alibaba cluster-trace-gpu-v2023) node and pod CSVs.

The trace itself is never vendored: callers locate it with :func:`default_openb_dir`.
Every row that cannot be turned into a record is counted and described in the
returned :class:`TraceReadReport`, so a benchmark can refuse to run on a damaged
file instead of silently measuring a smaller workload.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

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
]

_T = TypeVar("_T")
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
    def __init__(self, column: str, what: str) -> None:
        super().__init__(f"{column}: {what}")
        self.column = column
        self.what = what


def _int_field(row: dict[str, str], column: str, *, lo: int = 0, hi: int | None = None) -> int:
    raw = row[column].strip()
    if raw == "":
        raise _RowError(column, "empty, expected an integer")
    # int() would accept "1_000" and " +5"; the trace only ever holds plain digits.
    body = raw[1:] if raw[0] == "-" else raw
    if not body.isascii() or not body.isdigit():
        raise _RowError(column, f"not an integer: {raw!r}")
    value = int(raw)
    if value < lo or (hi is not None and value > hi):
        bound = f"{lo}..{hi}" if hi is not None else f">= {lo}"
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
    gpus = _int_field(row, "gpu")
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
    num_gpu = _int_field(row, "num_gpu")
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


def _read(
    path: str | os.PathLike[str],
    required: Sequence[str],
    parse: Callable[[dict[str, str], int], _T],
    name_of: Callable[[_T], str],
    name_column: str,
) -> tuple[list[_T], TraceReadReport]:
    p = Path(path)
    report = TraceReadReport(file=str(p))
    out: list[_T] = []
    seen: dict[str, int] = {}
    with p.open(newline="", encoding="utf-8-sig") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            report.problems.append(f"{p}:1: header: file is empty")
            return out, report
        header = [h.strip() for h in header]
        missing = [c for c in required if c not in header]
        if missing:
            for column in missing:
                report.problems.append(f"{p}:1: {column}: missing from header")
            # Without a required column no row can be read; count them so the caller sees the loss.
            for row in reader:
                if row:
                    report.rows_read += 1
                    report.rows_rejected += 1
            return out, report
        for row in reader:
            if not row:
                continue
            line = reader.line_num
            report.rows_read += 1
            try:
                if len(row) < len(header):
                    raise _RowError(header[len(row)], f"missing (row has {len(row)} of {len(header)} fields)")
                if len(row) > len(header):
                    raise _RowError("row", f"{len(row)} fields, header has {len(header)}")
                rec = parse(dict(zip(header, row, strict=True)), line)
                key = name_of(rec)
                if key in seen:
                    raise _RowError(name_column, f"duplicate {key!r} (first on line {seen[key]})")
                seen[key] = line
            except _RowError as err:
                report.rows_rejected += 1
                report.problems.append(f"{p}:{line}: {err.column}: {err.what}")
                continue
            out.append(rec)
    return out, report


def read_nodes(path: str | os.PathLike[str]) -> tuple[list[OpenbNode], TraceReadReport]:
    """Read an openb node list (``sn,cpu_milli,memory_mib,gpu,model``)."""
    return _read(path, _NODE_REQUIRED, _parse_node, lambda n: n.name, "sn")


def read_pods(path: str | os.PathLike[str]) -> tuple[list[OpenbPod], TraceReadReport]:
    """Read an openb pod list; the 5-column multigpu files are accepted (optional fields become None)."""
    return _read(path, _POD_REQUIRED, _parse_pod, lambda q: q.name, "name")


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
