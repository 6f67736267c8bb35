"""The JSON API over real HTTP: every answer holds to the OpenAPI document's schema for its status (parameters
drawn from the document with hypothesis, as schemathesis would), and says what the plan says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from typer.testing import CliRunner

from gpufleet.advise.reasons import KPI_WORDS, kpi_text
from gpufleet.cli.main import app
from gpufleet.web.openapi import document
from gpufleet.web.server import Dashboard
from tests.web.helpers import CASE_FILES, get

OPENAPI = document()


def check(path_template: str, response: Any) -> dict[str, Any]:
    """The answer's body, validated against the schema the document gives for its status."""
    responses = OPENAPI["paths"][path_template]["get"]["responses"]
    assert str(response.status_code) in responses, (path_template, response.status_code, response.text)
    schema = responses[str(response.status_code)]["content"]["application/json"]["schema"]
    body: dict[str, Any] = response.json()
    Draft202012Validator({**schema, "components": OPENAPI["components"]}).validate(body)
    return body


def test_the_document_describes_every_route_and_is_served(files_dashboard: Dashboard) -> None:
    served = get(files_dashboard, "/api/openapi.json")
    assert served.status_code == 200 and served.json() == json.loads(json.dumps(OPENAPI))
    Draft202012Validator.check_schema({"$defs": OPENAPI["components"]["schemas"]})
    assert set(OPENAPI["paths"]) == {"/api/overview", "/api/fleet", "/api/nodes/{name}", "/api/queues",
                                     "/api/workloads", "/api/workloads/{namespace}/{name}", "/api/simulation",
                                     "/api/events"}


def test_files_source_answers_hold_to_the_document(files_dashboard: Dashboard) -> None:
    overview = check("/api/overview", get(files_dashboard, "/api/overview"))
    assert overview["source"] == "files" and overview["pages"] == ["fleet", "queues", "workloads"]
    assert overview["counts"]["nodes"] == 18 and overview["counts"]["gpus"] == 30
    check("/api/fleet", get(files_dashboard, "/api/fleet"))
    check("/api/queues", get(files_dashboard, "/api/queues"))
    check("/api/workloads", get(files_dashboard, "/api/workloads"))
    check("/api/nodes/{name}", get(files_dashboard, "/api/nodes/h100-0"))
    check("/api/workloads/{namespace}/{name}", get(files_dashboard, "/api/workloads/research/llm-pretrain"))
    missing = check("/api/workloads/{namespace}/{name}", get(files_dashboard, "/api/workloads/research/nope"))
    assert missing == {"message": "no workload research/nope"}
    assert check("/api/nodes/{name}", get(files_dashboard, "/api/nodes/nope"))["message"] == "no node 'nope'"
    none = check("/api/simulation", get(files_dashboard, "/api/simulation"))
    assert "has no simulation result" in none["message"]


def test_simulation_source_answers_hold_to_the_document(sim_dashboard: Dashboard) -> None:
    overview = check("/api/overview", get(sim_dashboard, "/api/overview"))
    assert overview["source"] == "simulation" and overview["pages"] == ["whatif"] and overview["counts"] is None
    sim = check("/api/simulation", get(sim_dashboard, "/api/simulation"))
    assert [(r["scenario"], r["policy"]) for r in sim["runs"]] == [("before", "kube-default"), ("after", "gpufleet")]
    assert sim["pair"] == [0, 1] and sim["advice"] is None and sim["calibration"] is None
    for path in ("/api/fleet", "/api/queues", "/api/workloads"):
        assert "has no cluster" in check(path, get(sim_dashboard, path))["message"]


def test_an_advice_is_answered_as_advise_wrote_it_with_its_scores_in_words(advice_dashboard: Dashboard,
                                                                            advice_dir: Path) -> None:
    written = json.loads((advice_dir / "advice.json").read_text())
    sim = check("/api/simulation", get(advice_dashboard, "/api/simulation"))
    assert [r["scenario"] for r in sim["runs"]] == ["given", "proposal"] and sim["pair"] == [0, 1]
    assert sim["calibration"] is None
    advice = sim["advice"]
    for key in ("objective", "changed", "given", "proposal", "tried", "reasons", "notes"):
        assert advice[key] == written[key], key
    assert advice["changed"] and advice["reasons"][0].startswith("On the same demand, the proposal")
    # The scores are the advice's figures, said as advise says them (the same words as its table).
    scores = {s["key"]: s for s in advice["scores"]}
    assert list(scores) == [key for key, _, _ in KPI_WORDS]
    for key, words, _ in KPI_WORDS:
        row = scores[key]
        assert (row["label"], row["given"], row["proposal"]) == (words, written["given"]["kpis"][key],
                                                                 written["proposal"]["kpis"][key])
        assert row["proposalText"] == kpi_text(key, written["proposal"]["kpis"][key])
    # The files: every one written, what it is, how it is applied, with its text (the files to apply).
    files = {f["file"]: f for f in advice["files"]}
    assert set(files) == {p.name for p in advice_dir.iterdir()}
    assert [f["file"] for f in advice["files"] if f["applies"]] == [
        "mig-parted-config.yaml", "device-plugin-config.yaml", "cluster-policy-patch.yaml", "kueue.yaml"]
    assert files["kueue.yaml"]["command"] == f"kubectl apply -f {advice_dir / 'kueue.yaml'}"
    assert files["kueue.yaml"]["text"] == (advice_dir / "kueue.yaml").read_text()
    assert files["whatif.json"]["text"] is None and files["whatif.json"]["command"].startswith("gpufleet dashboard")


def test_a_calibration_is_answered_row_by_row_as_simulate_prints_it(calibrated_dashboard: Dashboard,
                                                                    calibrated: Path) -> None:
    fit = json.loads((calibrated / "result.json").read_text())["calibration"]
    sim = check("/api/simulation", get(calibrated_dashboard, "/api/simulation"))
    assert sim["advice"] is None
    cal = sim["calibration"]
    assert (cal["observed"], cal["withinTolerance"], cal["evaluations"]) == ("input", True, fit["evaluations"])
    assert [t["name"] for t in cal["targets"]] == ["utilization", "success", "wait_p95"]
    for t in cal["targets"]:
        assert (t["target"], t["simulated"], t["tolerance"]) == (fit["targets"][t["name"]], fit["achieved"][t["name"]],
                                                                 fit["tolerance"][t["name"]])
        assert t["residual"] == pytest.approx(fit["residuals"][t["name"]]) and t["met"]
    wait = cal["targets"][2]
    assert wait["label"] == "p95 queue wait" and wait["text"]["target"] == "10m" and wait["text"]["tolerance"] == "±15%"
    assert wait["text"]["residual"] == f"{fit['residuals']['wait_p95']:+.0f} s"
    unknowns = {u["name"]: u for u in cal["unknowns"]}
    assert list(unknowns) == ["load_scale", "busy_scale", "gang_share", "rendezvous_timeout_s", "memory_scale",
                              "failure_rate"]
    for name, u in unknowns.items():
        assert (u["value"], [u["low"], u["high"]], u["fitted"]) == (fit["knobs"][name], fit["bounds"][name],
                                                                    name in fit["fitted"])
    assert fit["fitted"] == ["load_scale", "busy_scale", "failure_rate"]  # the input has no gangs nor memory
    assert unknowns["failure_rate"]["text"] == {"value": f"{fit['knobs']['failure_rate']:.3g}", "bounds": "0 to 0.8"}


TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)


def _value(schema: dict[str, Any]) -> st.SearchStrategy[str]:
    if "enum" in schema:
        return st.sampled_from([str(v) for v in schema["enum"]]) | TEXT
    if schema.get("type") == "integer":
        low, high = schema.get("minimum", 0), schema.get("maximum", 10**6)
        return st.integers(low - 2, high + 2).map(str) | TEXT
    return TEXT | st.text(max_size=300)


def _query(path: str) -> st.SearchStrategy[dict[str, str]]:
    params = [p for p in OPENAPI["paths"][path]["get"]["parameters"] if p["in"] == "query"]
    return st.fixed_dictionaries({}, optional={p["name"]: _value(p["schema"]) for p in params})


@pytest.mark.parametrize("path", ["/api/fleet", "/api/workloads", "/api/queues", "/api/overview"])
def test_any_documented_parameters_get_a_documented_answer(files_dashboard: Dashboard, path: str) -> None:
    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(query=_query(path))
    def run(query: dict[str, str]) -> None:
        response = get(files_dashboard, path, params=query)
        body = check(path, response)
        if response.status_code == 200 and "limit" in body:
            assert len(body.get("nodes", body.get("workloads", []))) <= body["limit"]
            assert body["total"] >= len(body.get("nodes", body.get("workloads", [])))

    run()


def test_fleet_filters_and_pages(files_dashboard: Dashboard) -> None:
    h100 = get(files_dashboard, "/api/fleet", params={"model": "H100-SXM5-80GB"}).json()
    assert h100["total"] == 4 and {n["model"] for n in h100["nodes"]} == {"H100-SXM5-80GB"}
    production = get(files_dashboard, "/api/fleet", params={"queue": "production"}).json()
    assert [n["name"] for n in production["nodes"]] == ["a100-b-1"]
    idle = get(files_dashboard, "/api/fleet", params={"problem": "idle"}).json()
    assert [n["name"] for n in idle["nodes"]] == ["h100-1"]
    pages = [get(files_dashboard, "/api/fleet", params={"limit": "5", "offset": str(o)}).json() for o in (0, 5, 10, 15)]
    names = [n["name"] for p in pages for n in p["nodes"]]
    assert len(names) == 18 == len(set(names)) and all(p["total"] == 18 for p in pages)
    bad = get(files_dashboard, "/api/fleet", params={"limit": "501"})
    assert bad.status_code == 400 and "between 1 and 500" in bad.json()["message"]
    twice = get(files_dashboard, "/api/fleet?pool=a&pool=b")
    assert twice.status_code == 400 and "given 2 times" in twice.json()["message"]


def _plan() -> dict[str, Any]:
    result = CliRunner().invoke(app, ["plan", *CASE_FILES, "--until-stable", "-o", "json"])
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def test_what_the_api_says_is_what_plan_says(files_dashboard: Dashboard) -> None:
    plan = _plan()
    pending = {p["workload"]: p["reason"] for p in plan["cycles"][-1]["pending"]}
    api_pending = get(files_dashboard, "/api/workloads", params={"status": "pending"}).json()["workloads"]
    assert {w["key"]: w["reason"] for w in api_pending} == pending
    assert "insufficient unused quota for nvidia.com/gpu in flavor h100-full" in pending["research/llm-pretrain"]
    placed = {p["pod"]: p for c in plan["cycles"] for a in c["admitted"] for p in a["pods"]}
    # The MIG instance plan gave production/embeddings, drawn at its placement (memory slice 2, one slice wide,
    # of the A100's 8), marked planned since nothing bound it yet.
    embeddings = placed["production/embeddings"]
    node = get(files_dashboard, f"/api/nodes/{embeddings['node']}").json()["node"]
    [(gpu, mig)] = [(g, s) for g in node["gpus"] for s in g["slices"] if s.get("holder") == "production/embeddings"]
    assert (mig["kind"], mig["id"], mig["profile"], mig["start"], mig["size"], gpu["units"], mig["state"]) == (
        "mig", embeddings["devices"][0], "1g.10gb", 2, 1, 8, "planned")
    assert mig["queue"] == "production"
    # Half an H100, as a fraction of 500 thousandths on the GPU plan chose.
    half = placed["research/half-an-h100"]
    node = get(files_dashboard, f"/api/nodes/{half['node']}").json()["node"]
    [(gpu, frac)] = [(g, s) for g in node["gpus"] for s in g["slices"] if s.get("holder") == "research/half-an-h100"]
    assert (frac["kind"], gpu["id"], frac["size"], gpu["units"]) == ("fraction", half["devices"][0], 500, 1000)
    # The pod bound to h100-1 that does not run: its GPU is allocated but idle.
    idle = [g for g in node["gpus"] if g["idle"]] if half["node"] == "h100-1" else []
    stuck = get(files_dashboard, "/api/workloads/research/stuck-on-h100-1").json()["workload"]
    assert stuck["pods"][0]["state"] == "idle" and stuck["pods"][0]["node"] == "h100-1"
    assert half["node"] != "h100-1" or len(idle) == 1
    pools = {p["name"]: p for p in get(files_dashboard, "/api/fleet").json()["pools"]}
    assert pools["h100-training"]["idle"] == 1
    # Queue usage is the plan's.
    queues = {q["name"]: q for q in get(files_dashboard, "/api/queues").json()["clusterQueues"]}
    for cq, per in plan["usage"].items():
        for flavor, resources in per.items():
            for resource, amount in resources.items():
                [quota] = [q for q in queues[cq]["quotas"] if (q["flavor"], q["resource"]) == (flavor, resource)]
                assert quota["usage"] == amount, (cq, flavor, resource)


def test_a_name_holding_markup_is_data_and_json_is_inert(files_dashboard: Dashboard) -> None:
    raw = get(files_dashboard, "/api/overview")
    assert "<script>" not in raw.text and "\\u003cscript\\u003e" in raw.text
    notes = raw.json()["notes"]
    assert any("<script>window.pwned=1</script>" in n for n in notes)
