"""The dashboard over a simulation result: the document ``gpufleet simulate --json OUT`` writes.

The document is checked when it is read (every run has its scenario, policy, KPIs, per-queue and per-team
figures, pool series and timeline, with the types the pages read), so a wrong file is refused at start with
the field that is wrong, never half drawn. A result written before runs had a ``timeline`` is refused with
how to make a new one. Beside the runs, an ``advice`` (``gpufleet advise -o DIR`` writes ``whatif.json``) or a
``calibration`` (``simulate --calibrate --json``) is checked the same way (:mod:`gpufleet.web.whatif`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpufleet.api import safejson
from gpufleet.api.errors import Problems
from gpufleet.api.limits import MAX_RESULT_BYTES, MAX_RESULT_DEPTH
from gpufleet.api.source import InputBudget, read_file_bytes
from gpufleet.web.contract import ClusterView, SimulationView, SourceKind
from gpufleet.web.source_static import StaticSource
from gpufleet.web.whatif import advice_problem, calibration_problem

REWRITE = "write the result again with gpufleet simulate --json OUT"


class SimulationResultError(ValueError):
    """A file that is not a ``simulate --json`` result the dashboard can show (the message says where)."""


_RUN_FIELDS: tuple[tuple[str, type | tuple[type, ...]], ...] = (
    ("scenario", str), ("policy", str), ("kpis", dict), ("per_queue", dict), ("per_team", dict),
    ("per_pool", dict), ("series", dict), ("timeline", dict), ("run", dict))
_TIMELINE_FIELDS: tuple[tuple[str, type | tuple[type, ...]], ...] = (
    ("t", list), ("nodes", dict), ("jobs_waiting", list), ("jobs_running", list), ("fragmentation_pct", list),
    ("wait_quantiles", dict))


def _check(obj: dict[str, Any], fields: tuple[tuple[str, type | tuple[type, ...]], ...], where: str) -> None:
    for name, kind in fields:
        if name not in obj:
            raise SimulationResultError(f"{where}: the field {name!r} is missing")
        if not isinstance(obj[name], kind):
            raise SimulationResultError(f"{where}.{name}: expected {getattr(kind, '__name__', kind)}, "
                                        f"got {type(obj[name]).__name__}")


def check_result(doc: Any, path: str) -> tuple[dict[str, Any], ...]:
    """The runs of a ``simulate --json`` document, or :class:`SimulationResultError` naming the wrong field."""
    if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list):
        raise SimulationResultError(f"{path}: not a gpufleet simulate --json result (no 'runs' list at the top)")
    runs = doc["runs"]
    if not runs:
        raise SimulationResultError(f"{path}: the result has no runs")
    for i, run in enumerate(runs):
        where = f"{path}: runs[{i}]"
        if not isinstance(run, dict):
            raise SimulationResultError(f"{where}: expected an object, got {type(run).__name__}")
        if "timeline" not in run and "kpis" in run:
            raise SimulationResultError(f"{where} has no timeline: it was written by an older gpufleet; "
                                        "run gpufleet simulate --json OUT again")
        _check(run, _RUN_FIELDS, where)
        _check(run["timeline"], _TIMELINE_FIELDS, f"{where}.timeline")
        steps = len(run["timeline"]["t"])
        for name in ("jobs_waiting", "jobs_running", "fragmentation_pct"):
            if len(run["timeline"][name]) != steps:
                raise SimulationResultError(f"{where}.timeline.{name}: {len(run['timeline'][name])} values for "
                                            f"{steps} times")
    return tuple(runs)


def _read(path: Path) -> bytes:
    """The file's bytes as every input file is read (docs/limits.md): a regular file (a FIFO would block the
    start, ``/dev/zero`` never ends), within the limit on a result."""
    problems = Problems()
    data = read_file_bytes(str(path), problems, InputBudget(MAX_RESULT_BYTES, limit="the limit on a simulation "
                                                            "result"), skip_irregular=False)
    if data is None:
        raise SimulationResultError("\n".join(str(e) for e in problems.errors))
    return data


def _parse(data: bytes, path: Path) -> Any:
    """The JSON of a result as every untrusted JSON is read (:func:`safejson.loads`): its nesting bounded before the
    parser recurses, every number finite (a KPI written ``1e999`` reads as infinity, which passes the checks and
    then cannot be served as JSON); the file name, and the line:column where the parser stopped, in the error."""
    try:
        return safejson.loads(data, depth_limit=MAX_RESULT_DEPTH, source=str(path),
                              limit="gpufleet's limit on a simulation result", fix=REWRITE)
    except safejson.JsonBodyError as e:
        raise SimulationResultError(str(e)) from None


def load_result(path: Path) -> SimulationView:
    """Read and check a result file; :class:`SimulationResultError` for anything wrong with it."""
    doc = _parse(_read(path), path)
    runs = check_result(doc, str(path))
    advice, calibration = doc.get("advice"), doc.get("calibration")
    for problem in (advice_problem(advice, f"{path}: advice") if advice is not None else None,
                    calibration_problem(calibration, f"{path}: calibration") if calibration is not None else None):
        if problem is not None:
            raise SimulationResultError(problem)
    labels = ", ".join(f"{r['scenario']} ({r['policy']})" for r in runs)
    what = "advice" if advice is not None else "calibrated simulation" if calibration is not None else "simulation"
    return SimulationView(f"{what} result {path.name}: {labels}", runs, advice, calibration)


class SimulationSource(StaticSource):
    kind: SourceKind = "simulation"

    def __init__(self, view: SimulationView) -> None:
        super().__init__()
        self._view = view
        self.title = view.title

    def cluster(self) -> ClusterView | None:
        return None

    def simulation(self) -> SimulationView:
        return self._view
