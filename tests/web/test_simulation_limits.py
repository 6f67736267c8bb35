"""The dashboard's simulation result is held to the input limits (issue 30, item 7): a number JSON cannot hold, a
value nested past the limit, a file that is not a small regular file are refused at start with the file and the
field, exit 1, never a traceback (and so never a page that closes its connection without an answer)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpufleet.api import limits, safejson
from gpufleet.cli.main import app
from gpufleet.web.source_simulation import SimulationResultError, load_result

runner = CliRunner()


def _result(kpis: str = "{}", extra: str = "") -> str:
    """The smallest result the dashboard accepts, with raw JSON text for the KPIs (and more top-level keys)."""
    timeline = {"t": [0], "nodes": {}, "jobs_waiting": [0], "jobs_running": [0], "fragmentation_pct": [0],
                "wait_quantiles": {}}
    run = {"scenario": "s", "policy": "gpufleet", "kpis": "KPIS", "per_queue": {}, "per_team": {}, "per_pool": {},
           "series": {}, "timeline": timeline, "run": {}}
    return json.dumps({"runs": [run]})[:-1].replace('"KPIS"', kpis) + extra + "}"


def _refused(path: Path) -> str:
    """What load_result and the dashboard command say of ``path``: the same message, exit 1."""
    with pytest.raises(SimulationResultError) as caught:
        load_result(path)
    said = str(caught.value)
    result = runner.invoke(app, ["dashboard", "--simulation", str(path), "--address", "127.0.0.1:0"])
    assert result.exit_code == 1 and said in result.stderr and "Traceback" not in result.output
    return said


def test_a_kpi_written_1e999_is_refused_with_its_field(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(_result('{"cost": 12.5, "gpu_utilization_pct": -1e999}'))
    assert _refused(path) == (f"{path}: runs[0].kpis.gpu_utilization_pct: the number is not finite (too big for a "
                              "double, such as 1e999); fix: write a finite number, or write the result again with "
                              "gpufleet simulate --json OUT")


def test_nesting_past_the_limit_is_refused_before_the_parser_recurses(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text(_result(extra=', "x": ' + "[" * 5000 + "]" * 5000))
    said = _refused(deep)
    assert said.startswith(f"{deep}: the JSON is nested 5,001 levels deep: at most {limits.MAX_RESULT_DEPTH}")
    # Nesting within the limit is read as before.
    within = tmp_path / "within.json"
    within.write_text(_result(extra=', "x": ' + "[" * 50 + "]" * 50))
    assert load_result(within).runs[0]["scenario"] == "s"


def test_only_a_regular_file_within_the_bytes_is_read(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.truncate(limits.MAX_RESULT_BYTES + 1)  # sparse: costs no disk
    # A FIFO is refused as /dev/zero is: tests/hostile/test_input_limits_everywhere.py tries one, under an alarm.
    assert "not a regular file" in _refused(Path("/dev/zero"))
    assert "32 MiB, the limit on a simulation result" in _refused(big)


@pytest.mark.parametrize(("value", "where"), [
    (float("inf"), ""), ({"a": [1.0, {"b": math.nan}]}, "a[1].b"), ([[], {"k": [0.5, -math.inf]}], "[1].k[1]"),
    ({"a": [1, 2.5, "inf"], "b": {"c": None}}, None), ([[[[[]]]]], None),
])
def test_non_finite_names_the_first_number_json_cannot_hold(value: Any, where: str | None) -> None:
    assert safejson.non_finite(value) == where


def test_strict_json_refuses_an_overflowing_literal() -> None:
    with pytest.raises(safejson.JsonBodyError, match=r"the number at spec\.x\[1\] is not finite"):
        safejson.loads(b'{"spec": {"x": [1, 1e999]}}', depth_limit=5)
    assert safejson.loads(b'{"spec": {"x": [1, 1e300]}}', depth_limit=5) == {"spec": {"x": [1, 1e300]}}


def test_an_overflow_without_an_exponent_is_refused_too() -> None:
    # loads walks the parsed value only when the text has a number that could overflow: one with an exponent, or
    # 309 digits in a row. 10**309 written out has 310 and no exponent.
    with pytest.raises(safejson.JsonBodyError, match=r"the number at a is not finite"):
        safejson.loads(b'{"a": ' + b"1" + b"0" * 309 + b'.5}', depth_limit=5)
    assert safejson.loads(b'{"a": ' + b"9" * 308 + b'.5}', depth_limit=5)["a"] > 1e307


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                    | st.text(max_size=6),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
                    max_leaves=12),
       st.sampled_from(["1e999", "-1E+400", "1" * 310, "2.5e9999", "12", "1e2", '"1e999"']))
@example(value={"N": None}, number="1e999")
def test_the_shortcut_never_lets_an_overflow_through(value: Any, number: str) -> None:
    # The same refusal as walking every parsed value: a document with one number spliced in where a key or a list
    # item goes, checked against non_finite on what json.loads makes of it.
    # (the placeholder is longer than any generated text, which could otherwise be "N" itself: a key replaced by a
    # number, which is no JSON at all; found by CI, 2026-12-07)
    text = json.dumps({"x": value, "n": "@@number@@"}).replace('"@@number@@"', number)
    expected = safejson.non_finite(json.loads(text))
    try:
        safejson.loads(text.encode(), depth_limit=64)
    except safejson.JsonBodyError as e:
        assert expected is not None and "not finite" in str(e)
    else:
        assert expected is None
