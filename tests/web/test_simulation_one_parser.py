"""A simulation result is read by the one strict JSON reader (api/safejson.loads), which names the file and the
line:column where the parser stopped; no copy of it in the dashboard's source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpufleet.api import safejson
from gpufleet.web.source_simulation import SimulationResultError, load_result


def test_a_file_s_json_error_names_the_file_line_and_column() -> None:
    with pytest.raises(safejson.JsonBodyError) as caught:
        safejson.loads(b'{\n  "runs": [1,\n  ]}', depth_limit=5, source="r.json", fix="write it again")
    assert str(caught.value).startswith("r.json:3:3: not JSON: ")
    assert str(caught.value).endswith("; fix: write it again")
    with pytest.raises(safejson.JsonBodyError, match=r"^r\.json: the JSON is nested 3 levels deep: at most 2 "
                                                      r"\(a limit; see docs/limits\.md\)$"):
        safejson.loads(b"[[[]]]", depth_limit=2, source="r.json", limit="a limit")
    with pytest.raises(safejson.JsonBodyError, match=r"^r\.json: a\[0\]: the number is not finite .*; fix: write "
                                                      r"a finite number, or write it again$"):
        safejson.loads(b'{"a": [1e999]}', depth_limit=5, source="r.json", fix="write it again")


def test_a_result_is_parsed_by_safejson(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, Any]] = []
    real = safejson.loads

    def spy(data: bytes, **kwargs: Any) -> Any:
        seen.append(kwargs)
        return real(data, **kwargs)

    monkeypatch.setattr(safejson, "loads", spy)  # the module source_simulation calls through
    path = tmp_path / "r.json"
    path.write_text('{"runs":\n [1,]}')
    with pytest.raises(SimulationResultError, match=rf"^{path}:2:5: not JSON"):
        load_result(path)
    assert seen and seen[0]["source"] == str(path)
