"""The pages in headless Chromium: they render from the API, draw a MIG slice and a fraction where the state says, say
why a blocked gang waits in plan's words, show hostile names as text, replay a simulation with a time slider, and
show an advice (scores, reasons, proposal per pool, files to apply) and a calibration's fit. With
GPUFLEET_DASHBOARD_SCREENSHOTS=DIR each page is also saved there as a PNG (hack/dashboard-screenshots.sh writes
docs/img/ so)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpufleet.web.server import Dashboard
from gpufleet.web.source_simulation import SimulationSource, load_result
from tests.web.helpers import advice_scores, browser_page, cells, get, open_page, pool_lines, screenshot, serving

INNER = 96  # a GPU is drawn 100 px wide, slices inside 2 px margins (app.js GPU_W)


def only_local(page: Any, dashboard: Dashboard) -> None:
    assert all(url.startswith(dashboard.url + "/") for url in page.requested), page.requested
    assert page.errors == [], page.errors


def test_fleet_draws_each_device_where_the_state_says(files_dashboard: Dashboard) -> None:
    with browser_page() as page:
        open_page(page, files_dashboard, "/fleet", "#nodes .node")
        assert page.locator("#nodes .node").count() == 18
        assert page.locator("#pools tr").count() == 5  # a header and 4 pools
        # The MIG instance of production/embeddings: memory slice 2 of 8, one slice wide.
        mig = page.locator('svg.gpu rect.slice[data-holder="production/embeddings"]')
        assert mig.get_attribute("data-kind") == "mig" and mig.get_attribute("data-profile") == "1g.10gb"
        assert (float(mig.get_attribute("x")), float(mig.get_attribute("width"))) == (2 + INNER * 2 / 8, INNER / 8)
        assert "planned" in mig.get_attribute("class")
        # Half an H100: a fraction 500/1000 of its GPU's width.
        frac = page.locator('svg.gpu rect.slice[data-holder="research/half-an-h100"]')
        assert frac.get_attribute("data-kind") == "fraction"
        assert float(frac.get_attribute("width")) == INNER / 2
        # Coloured by the holder's queue, the holder on hover.
        swatch = page.locator('.legend .swatch[data-queue="research"]')
        research = swatch.evaluate("e => getComputedStyle(e).backgroundColor")
        assert frac.evaluate("e => getComputedStyle(e).fill") == research
        frac.hover()
        assert "held by research/half-an-h100" in page.locator("#tip").inner_text()
        assert "ClusterQueue research" in page.locator("#tip").inner_text()
        # The GPU allocated to a pod that does not run stands out.
        idle = page.locator('svg.gpu.idle')
        assert idle.count() == 1 and idle.get_attribute("data-node") == "h100-1"
        assert page.locator('.node[data-node="h100-1"] .badge.idle').inner_text() == "1 idle"
        screenshot(page, "fleet")
        # Filters are in the URL.
        page.select_option('select[name="model"]', "H100-SXM5-80GB")
        page.wait_for_function("() => document.querySelectorAll('#nodes .node').length === 4")
        assert page.url.endswith("/fleet?model=H100-SXM5-80GB")
        page.goto(files_dashboard.url + "/fleet?queue=production")
        page.wait_for_function("() => document.querySelectorAll('#nodes .node').length === 1")
        assert page.locator("#nodes .node").get_attribute("data-node") == "a100-b-1"
        only_local(page, files_dashboard)


def test_a_blocked_gang_says_why_it_waits_as_plan_does(files_dashboard: Dashboard) -> None:
    reason = get(files_dashboard, "/api/workloads/research/llm-pretrain").json()["workload"]["reason"]
    with browser_page() as page:
        open_page(page, files_dashboard, "/workloads", "#workloads tr[data-workload]")
        page.fill('input[name="q"]', "llm")
        page.wait_for_function("() => document.querySelectorAll('#workloads tr[data-workload]').length === 1")
        assert page.url.endswith("/workloads?q=llm")
        screenshot(page, "workloads")
        page.click('#workloads a[href="/workloads/research/llm-pretrain"]')
        page.wait_for_selector("#reason")
        assert page.locator("#reason").inner_text() == reason
        assert "insufficient unused quota for nvidia.com/gpu in flavor h100-full" in reason
        assert page.locator("#pods tr[data-pod]").count() == 4
        assert page.locator("h1").inner_text().startswith("research/llm-pretrain")
        screenshot(page, "workload")
        only_local(page, files_dashboard)


def test_queues_show_usage_against_quota_and_the_cohort_tree(files_dashboard: Dashboard) -> None:
    queues = {q["name"]: q for q in get(files_dashboard, "/api/queues").json()["clusterQueues"]}
    with browser_page() as page:
        open_page(page, files_dashboard, "/queues", "section.cq")
        assert page.locator('#tree li[data-cohort="company"] li[data-cq]').count() == 3
        row = page.locator('section[data-cq="research"] tr[data-flavor="h100-full"][data-resource="nvidia.com/gpu"]')
        cells = row.locator("td").all_inner_texts()
        quota = next(q for q in queues["research"]["quotas"] if q["flavor"] == "h100-full"
                     and q["resource"] == "nvidia.com/gpu")
        assert cells[3:5] == [quota["usage"], quota["nominal"]]
        used = float(row.locator("svg.bar rect.used").get_attribute("width"))
        nominal = float(row.locator("svg.bar rect.nominal").get_attribute("width"))
        assert abs(used / nominal - quota["units"]["usage"] / quota["units"]["nominal"]) < 0.01
        assert page.locator('section[data-cq="research"]').inner_text().count("1 pending") == 1
        screenshot(page, "queues")
        only_local(page, files_dashboard)


def test_names_holding_markup_are_shown_as_text(files_dashboard: Dashboard) -> None:
    with browser_page() as page:
        for path in ("/fleet", "/queues", "/workloads"):
            open_page(page, files_dashboard, path, "#main h1")
            notes = page.locator("#notes").inner_text()
            assert "<script>window.pwned=1</script>" in notes and "<img src=x onerror=window.pwned=2>" in notes
            assert page.evaluate("() => window.pwned") is None
            assert page.evaluate("() => document.scripts.length") == 1
            assert page.locator("#notes img, #notes script").count() == 0


def test_what_if_replays_with_a_time_slider(sim_dashboard: Dashboard) -> None:
    sim = get(sim_dashboard, "/api/simulation").json()
    before, after = sim["runs"]
    steps = len(after["timeline"]["t"])
    with browser_page() as page:
        open_page(page, sim_dashboard, "/whatif", "#kpis")
        rows = page.locator("#kpis tr").first.locator("th").all_inner_texts()
        assert rows == ["KPI", "before (kube-default)", "after (gpufleet)", "change"]
        assert page.locator('#kpis tr[data-kpi="gpu_utilization_pct"] td').nth(2).inner_text() == \
            f"{after['kpis']['gpu_utilization_pct']:g}"
        # The rows are the API's (the CLI's and the report's list), the yardsticks of work done first.
        shown = page.locator("#kpis tr[data-kpi]").evaluate_all("rows => rows.map(r => r.dataset.kpi)")
        assert shown == [r["key"] for r in sim["kpiRows"]] and shown[0] == "work_done_gpu_hours"
        assert page.locator("#waits figure").count() == len(after["timeline"]["wait_quantiles"]["per_queue"])
        teams = set(before["per_team"]) | set(after["per_team"])
        assert page.locator("#cost rect[data-team]").count() == 2 * len(teams)

        def replay_at(index: int) -> dict[str, str]:
            page.locator("#time").fill(str(index))
            page.wait_for_function(f"() => location.search === '?t={index}'")
            cells = page.locator('.run[data-run="after (gpufleet)"] .cell')
            return {cells.nth(i).get_attribute("data-node"): cells.nth(i).get_attribute("data-held")
                    for i in range(cells.count())}

        late = max(range(steps), key=lambda k: sum(n["held"][k] for n in after["timeline"]["nodes"].values()))
        start, busiest = replay_at(0), replay_at(late)
        assert set(start) == set(after["timeline"]["nodes"]) == set(busiest)
        for name, node in after["timeline"]["nodes"].items():
            # The page writes toFixed(2), which rounds 0.125 up where Python's round() goes to even: within 0.005.
            assert abs(float(start[name]) - node["held"][0]) <= 0.005 + 1e-9
            assert abs(float(busiest[name]) - node["held"][late]) <= 0.005 + 1e-9
        assert start != busiest
        waiting = page.locator('.run[data-run="after (gpufleet)"] p').inner_text()
        assert waiting.startswith(f"{after['timeline']['jobs_waiting'][late]} jobs waiting")
        assert "day " in page.locator("#clock").inner_text()
        cursors = page.locator("#timecharts line.cursor")
        assert cursors.count() >= 2
        screenshot(page, "whatif")
        # The slider's position is in the URL: a reload shows the same moment.
        page.reload()
        page.wait_for_selector("#kpis")
        assert page.locator("#time").input_value() == str(late)
        only_local(page, sim_dashboard)


def test_what_if_shows_an_advice_its_reasons_proposal_and_files(advice_dashboard: Dashboard) -> None:
    advice = get(advice_dashboard, "/api/simulation").json()["advice"]
    with browser_page() as page:
        open_page(page, advice_dashboard, "/whatif", "#advice")
        # The reasons in words, each as advise wrote it; the scores, given beside proposal, in advise's words; the
        # objective's own score below them.
        objective = advice_scores(page, advice)
        assert objective[0] == "score on the objective balanced (lower is better)"
        assert float(objective[2]) == pytest.approx(advice["proposal"]["score"], abs=1e-3)
        # Per pool: the MIG layout, the replicas or whole GPUs, given beside proposal; changed pools stand out.
        pools = sorted({p["pool"] for p in advice["given"]["pools"]})
        assert sorted(page.locator("#advice-pools tr[data-pool]").evaluate_all(
            "rows => rows.map(r => r.dataset.pool)")) == pools
        for pool in pools:
            row = f'#advice-pools tr[data-pool="{pool}"]'
            before, after = pool_lines(advice["given"], pool), pool_lines(advice["proposal"], pool)
            assert cells(page, row)[3:] == [before, after]
            assert ("changed" in (page.locator(row).get_attribute("class") or "")) == (before != after)
        assert any(pool_lines(advice["given"], p) != pool_lines(advice["proposal"], p) for p in pools)
        for request in advice["proposal"]["requests"]:
            assert cells(page, f'#advice-requests tr[data-class="{request["class"]}"]')[3:5] == [
                request["given"], request["resource"]]
        # The files to apply, in order, with the command; a file's text opens in place.
        applied = [f for f in advice["files"] if f["applies"]]
        assert page.locator("#advice-files tr[data-file]").evaluate_all(
            "rows => rows.map(r => r.dataset.file)") == [f["file"] for f in applied]
        for f in applied:
            assert cells(page, f'#advice-files tr[data-file="{f["file"]}"]') == [f["file"], f["what"], f["command"]]
        screenshot(page, "whatif-advice", "#advice")
        kueue = next(f for f in applied if f["file"] == "kueue.yaml")
        text = page.locator('#advice-files tr.filetext pre').nth(applied.index(kueue))
        assert not text.is_visible()
        page.locator('#advice-files tr.filetext summary').nth(applied.index(kueue)).click()
        assert text.is_visible() and text.inner_text().strip() == kueue["text"].strip()
        # The runs are the page's as for any result: given beside proposal.
        assert page.locator("#kpis tr").first.locator("th").all_inner_texts() == [
            "KPI", "given (gpufleet)", "proposal (gpufleet)", "change"]
        only_local(page, advice_dashboard)


def test_what_if_shows_a_calibrations_targets_residuals_and_unknowns(calibrated_dashboard: Dashboard) -> None:
    cal = get(calibrated_dashboard, "/api/simulation").json()["calibration"]
    with browser_page() as page:
        open_page(page, calibrated_dashboard, "/whatif", "#calibration")
        assert [t["name"] for t in cal["targets"]] == ["utilization", "success", "wait_p95"]
        for t in cal["targets"]:
            assert cells(page, f'#calibration-targets tr[data-target="{t["name"]}"]') == [
                t["label"], t["text"]["target"], t["text"]["simulated"], t["text"]["residual"], t["text"]["tolerance"],
                "yes"]
        for u in cal["unknowns"]:
            assert cells(page, f'#calibration-unknowns tr[data-unknown="{u["name"]}"]') == [
                u["label"], u["text"]["value"], u["text"]["bounds"], "fitted" if u["fitted"] else "as written"]
        summary = page.locator("#calibration-summary").inner_text()
        assert "the observed run (input)" in summary and "every target within its tolerance" in summary
        assert page.locator("#kpis tr").first.locator("th").all_inner_texts() == ["KPI", "input (gpufleet)"]
        screenshot(page, "whatif-calibration", "#calibration")
        only_local(page, calibrated_dashboard)


def test_an_advice_holding_markup_is_shown_as_text(advice_dir: Path, tmp_path: Path) -> None:
    doc = json.loads((advice_dir / "whatif.json").read_text())
    advice = doc["advice"]
    hostile = {"reason": "<script>window.pwned=1</script>", "pool": "<img src=x onerror=window.pwned=2>",
               "text": "</pre><script>window.pwned=3</script>", "input": "<b onclick=window.pwned=4>input</b>"}
    advice["reasons"][0] = hostile["reason"]
    for p in advice["given"]["pools"] + advice["proposal"]["pools"]:
        if p["pool"] == advice["given"]["pools"][0]["pool"]:
            p["pool"] = hostile["pool"]
    next(f for f in advice["files"] if f["applies"])["text"] = hostile["text"]
    advice["input"] = hostile["input"]
    path = tmp_path / "whatif.json"
    path.write_text(json.dumps(doc))
    with serving(SimulationSource(load_result(path))) as dashboard, browser_page() as page:
        open_page(page, dashboard, "/whatif", "#advice")
        assert page.locator("#advice-reasons li").first.inner_text() == hostile["reason"]
        assert page.locator("#advice-pools tr[data-pool] td").first.inner_text() == hostile["pool"]
        page.locator("#advice-files tr.filetext summary").first.click()
        assert page.locator("#advice-files tr.filetext pre").first.inner_text() == hostile["text"]
        assert hostile["input"] in page.locator("#advice-summary").inner_text()
        assert page.evaluate("() => window.pwned") is None
        assert page.evaluate("() => document.scripts.length") == 1
        assert page.locator("#advice img, #advice script, #advice b").count() == 0
        only_local(page, dashboard)


def test_workloads_show_each_pods_device_and_share(files_dashboard: Dashboard) -> None:
    """Issue 29, item 9: "1g.10gb" and "1/8 replica", not "GPUs 1"."""
    found = {w["key"]: w["device"] for w in get(files_dashboard, "/api/workloads").json()["workloads"]}
    assert found["production/embeddings"] == "1g.10gb"
    assert found["data-science/notebook-anna"] == "1/8 replica"
    with browser_page() as page:
        open_page(page, files_dashboard, "/workloads", "#workloads tr[data-workload]")
        for key, device in (("production/embeddings", "1g.10gb"), ("data-science/notebook-anna", "1/8 replica")):
            row = page.locator(f'#workloads tr[data-workload="{key}"] td')
            assert row.nth(4).inner_text() == device
        page.click('#workloads a[href="/workloads/data-science/notebook-anna"]')
        page.wait_for_selector("#pods")
        assert "1/8 replica per pod" in page.locator("p.muted").first.inner_text()
        only_local(page, files_dashboard)
