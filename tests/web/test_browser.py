"""The pages in headless Chromium: they render from the API, draw a MIG slice and a fraction where the state
says, say why a blocked gang waits in plan's words, show hostile names as text, and replay a simulation with a
time slider. With GPUFLEET_DASHBOARD_SCREENSHOTS=DIR each page is also saved there as a PNG (hack/dashboard-
screenshots.sh writes docs/img/ so)."""

from __future__ import annotations

from typing import Any

from gpufleet.web.server import Dashboard
from tests.web.helpers import browser_page, get, screenshot

INNER = 96  # a GPU is drawn 100 px wide, slices inside 2 px margins (app.js GPU_W)


def open_page(page: Any, dashboard: Dashboard, path: str, ready: str) -> None:
    page.goto(dashboard.url + path)
    page.wait_for_selector(ready)


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
            assert float(start[name]) == round(node["held"][0], 2)
            assert float(busiest[name]) == round(node["held"][late], 2)
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
