"""What the what-if page reads beside the runs (issue 18 item 3): an advice and a calibration's fit are checked when
the file is read (a wrong one refused naming the field, with what to run), the check agrees with JSON Schema
itself, and the HTML reports (advise's advice.html, simulate --report's report.html) hold the same: the reasons,
the proposal per pool, the files to apply, the fit's targets, residuals and unknowns."""

from __future__ import annotations

import copy
import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from gpufleet.advise.files import FILE_USES
from gpufleet.web.openapi import document
from gpufleet.web.schema_check import KEYWORDS, mismatch
from gpufleet.web.source_simulation import SimulationResultError, load_result
from gpufleet.web.whatif import SCHEMAS

COMPONENTS = document()["components"]


def _write(tmp_path: Path, doc: dict[str, Any], name: str = "whatif.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_a_wrong_advice_is_refused_naming_the_field(advice_dir: Path, tmp_path: Path) -> None:
    good = json.loads((advice_dir / "whatif.json").read_text())
    view = load_result(advice_dir / "whatif.json")
    assert view.advice == good["advice"] and view.calibration is None
    assert view.title.startswith("advice result whatif.json: given (gpufleet), proposal (gpufleet)")
    cases: list[tuple[str, Any, str]] = [
        ("older", {k: good["advice"][k] for k in ("objective", "changed", "reasons")},
         "advice: the field 'budgetPerHour' is missing"),
        ("deep", ("proposal", "pools", 0, "config", "text", 3), "advice.proposal.pools[0].config.text: expected "
                                                                "string, got integer"),
        ("reason", ("reasons", 1, None), "advice.reasons[1]: expected string, got null"),
        ("kpi", ("given", "kpis", "wait_p95_s", "4h"), "advice.given.kpis.wait_p95_s: expected a number, got str"),
        ("file", ("files", 0, "applies", "yes"), "advice.files[0].applies: expected boolean, got string"),
    ]
    for name, change, says in cases:
        doc = copy.deepcopy(good)
        if isinstance(change, dict):
            doc["advice"] = change
        else:
            *path, last, value = change
            target = doc["advice"]
            for key in path:
                target = target[key]
            target[last] = value
        with pytest.raises(SimulationResultError) as caught:
            load_result(_write(tmp_path, doc, f"{name}.json"))
        assert says in str(caught.value), (name, caught.value)
        assert f"{name}.json: advice" in str(caught.value) and "run it again" in str(caught.value)


def test_a_wrong_calibration_is_refused_naming_the_field(calibrated: Path, tmp_path: Path) -> None:
    good = json.loads((calibrated / "result.json").read_text())
    assert load_result(calibrated / "result.json").calibration == good["calibration"]
    cases = [("targets", {"utilisation": 30.0}, "calibration.targets: unknown 'utilisation'; expected some of "
                                                "utilization, success, training_success, wait_p95, gang, oom, error"),
             ("fitted", ["load", "busy_scale"], "calibration.fitted: unknown 'load'"),
             ("bounds", {"load_scale": [0.25]}, "calibration.bounds.load_scale: 1 items, expected 2 to 2"),
             ("within_tolerance", "yes", "calibration.within_tolerance: expected boolean, got string")]
    for field, value, says in cases:
        doc = copy.deepcopy(good)
        doc["calibration"][field] = value
        with pytest.raises(SimulationResultError) as caught:
            load_result(_write(tmp_path, doc, "result.json"))
        assert says in str(caught.value), (field, caught.value)
        assert "simulate --calibrate" in str(caught.value)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:3]):
            out += _paths(v, (*prefix, i))
    return out


JSON = st.recursive(st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False, allow_infinity=False)
                    | st.text(max_size=5), lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6)


@pytest.mark.parametrize("which", ["AdviceDocument", "CalibrationDocument"])
def test_the_check_agrees_with_json_schema_on_any_change(which: str, advice_dir: Path, calibrated: Path) -> None:
    """Replace any value of a real document with any JSON value (or drop it): the dashboard's own check and a
    JSON Schema validator accept and refuse the same documents."""
    source = advice_dir / "whatif.json" if which == "AdviceDocument" else calibrated / "result.json"
    original = json.loads(source.read_text())["advice" if which == "AdviceDocument" else "calibration"]
    paths = _paths(original)
    validator = Draft202012Validator({"$ref": f"#/components/schemas/{which}", "components": COMPONENTS})

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(index=st.integers(0, len(paths) - 1), value=JSON, drop=st.booleans())
    def run(index: int, value: Any, drop: bool) -> None:
        doc = copy.deepcopy(original)
        *parents, last = paths[index] or ("",)
        target = doc
        for key in parents:
            target = target[key]
        if not paths[index]:
            doc = value
        elif drop and isinstance(target, dict):
            del target[last]
        else:
            target[last] = value
        problem = mismatch(doc, SCHEMAS[which], SCHEMAS, "doc")
        assert (problem is None) == validator.is_valid(doc), (paths[index], value, problem)

    assert mismatch(original, SCHEMAS[which], SCHEMAS, "doc") is None
    run()


def test_the_check_knows_every_keyword_of_the_documents_schemas() -> None:
    def keywords(schema: dict[str, Any]) -> set[str]:
        found = set(schema)
        children = [*schema.get("properties", {}).values(), *schema.get("oneOf", [])]
        children += [schema[k] for k in ("items", "additionalProperties") if isinstance(schema.get(k), dict)]
        for child in children:
            found |= keywords(child)
        return found

    used = set().union(*(keywords(s) for s in COMPONENTS["schemas"].values()))
    assert used <= KEYWORDS, used - KEYWORDS
    with pytest.raises(ValueError, match="not supported"):
        mismatch(1, {"minimum": 0}, {}, "x")


class _Tables(HTMLParser):
    """Every table of an HTML page as rows of cell texts, and every list item's text."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.items: list[str] = []
        self._cell: list[str] | None = None
        self._item: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "li":
            self._item = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell))
            self._cell = None
        elif tag == "li" and self._item is not None:
            self.items.append("".join(self._item))
            self._item = None

    def handle_data(self, data: str) -> None:
        for part in (self._cell, self._item):
            if part is not None:
                part.append(data)


def _read_html(path: Path) -> _Tables:
    parser = _Tables()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def _table(page: _Tables, header: list[str]) -> list[list[str]]:
    [table] = [t for t in page.tables if t and t[0] == header]
    return table[1:]


def test_the_advice_report_holds_the_scores_reasons_proposal_and_files(advice_dir: Path) -> None:
    advice = json.loads((advice_dir / "whatif.json").read_text())["advice"]
    page = _read_html(advice_dir / "advice.html")
    assert all(reason in page.items for reason in advice["reasons"])
    scores = _table(page, ["figure", "given", "proposal"])
    assert [row[0] for row in scores] == ["cost of the demand", "cost per busy GPU-hour of work done",
                                          "inference cost", "p95 queue wait", "job success", "GPU utilization",
                                          "fragmentation"]
    pools = _table(page, ["pool", "model", "nodes", "configuration"])
    assert pools == [[p["pool"], p["model"], str(len(p["nodes"])), p["config"]["text"]]
                     for p in advice["proposal"]["pools"]]
    applied = _table(page, ["file", "what it is", "apply with"])
    assert applied == [[f["file"], f["what"], f["command"]] for f in advice["files"] if f["applies"]]
    assert applied[-1] == ["kueue.yaml", FILE_USES["kueue.yaml"].what, f"kubectl apply -f {advice_dir / 'kueue.yaml'}"]
    others = _table(page, ["file", "what it is", "use"])
    assert [row[0] for row in others] == [f["file"] for f in advice["files"] if not f["applies"]]


def test_the_simulation_report_holds_the_fit(calibrated: Path) -> None:
    fit = json.loads((calibrated / "result.json").read_text())["calibration"]
    page = _read_html(calibrated / "report" / "report.html")
    targets = _table(page, ["target", "observed", "simulated (mean of 3)", "residual", "tolerance", "run shown"])
    assert [row[0] for row in targets] == ["GPU utilization %", "job success %", "p95 queue wait"]
    assert targets[0][1:] == ["30", f"{fit['achieved']['utilization']:.1f}",
                              f"{fit['residuals']['utilization']:+.1f}", "±2 pts", f"{fit['shown']['utilization']:.1f}"]
    assert targets[2][3:5] == [f"{fit['residuals']['wait_p95']:+.0f} s", "±15%"]
    unknowns = _table(page, ["unknown", "value", "bounds", "how"])
    assert [row[2:] for row in unknowns] == [["0.25 to 4", "fitted"], ["0.25 to 4", "fitted"],
                                             ["0 to 1", "as written"], ["10 min to 60 min", "as written"],
                                             ["0.5 to 2", "as written"], ["0 to 0.8", "fitted"]]
    assert unknowns[0][1] == f"{fit['knobs']['load_scale']:.3g}"
