"""Dashboards for tests: a server on a free loopback port over a source, HTTP over real sockets, and headless
Chromium (:mod:`tests.chromium`, shared with the HTML report's test)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from gpufleet.api.manifests import load_manifests
from gpufleet.web.contract import DataSource
from gpufleet.web.server import Dashboard
from gpufleet.web.source_files import FilesSource
from tests.chromium import browser_page as browser_page  # the dashboard tests take it from here
from tests.conftest import REPO

DATA = Path(__file__).parent / "data"
CASE_FILES = [str(REPO / "examples" / "casestudy"), str(REPO / "examples" / "plan" / "snapshot.yaml"),
              str(DATA / "extra.yaml")]
HOSTILE = str(DATA / "hostile.yaml")
SMALL_ADVICE = str(REPO / "tests" / "advise" / "small.yaml")  # the advisor's own small cluster and demand
CALIBRATE = str(DATA / "calibrate.yaml")
CALIBRATION_TARGETS = "utilization=30,success=95,wait_p95=10m"


def files_source(*extra: str) -> FilesSource:
    files = [*CASE_FILES, *extra]
    return FilesSource(load_manifests(files), "the case study with a snapshot")


@contextlib.contextmanager
def serving(source: DataSource) -> Iterator[Dashboard]:
    dashboard = Dashboard(source, "127.0.0.1", 0)
    dashboard.start()
    try:
        yield dashboard
    finally:
        dashboard.stop()


def get(dashboard: Dashboard, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.get(dashboard.url + path, timeout=30.0, **kwargs)


def screenshot(page: Any, name: str, part: str | None = None) -> None:
    """With GPUFLEET_DASHBOARD_SCREENSHOTS=DIR, the page (or the element ``part`` selects) as
    DIR/dashboard-NAME.png (hack/dashboard-screenshots.sh writes docs/img/ so); nothing otherwise."""
    folder = os.environ.get("GPUFLEET_DASHBOARD_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        path = str(Path(folder) / f"dashboard-{name}.png")
        if part is None:
            page.screenshot(path=path, full_page=True)
        else:
            page.locator(part).screenshot(path=path)


def open_page(page: Any, dashboard: Dashboard, path: str, ready: str) -> None:
    page.goto(dashboard.url + path)
    page.wait_for_selector(ready)


def cells(page: Any, selector: str) -> list[str]:
    """The texts of the table cells under ``selector``, stripped."""
    return [text.strip() for text in page.locator(selector + " td").all_inner_texts()]


def advice_scores(page: Any, advice: dict[str, Any]) -> list[str]:
    """Checks that the what-if page shows the advice's reasons and its scores, given beside proposal, in advise's
    words; returns the cells of the objective's own score row below them."""
    assert page.locator("#advice-reasons li").all_inner_texts() == advice["reasons"]
    for score in advice["scores"]:
        assert cells(page, f'#advice-scores tr[data-score="{score["key"]}"]') == [
            score["label"], score["givenText"], score["proposalText"]]
    return cells(page, '#advice-scores tr[data-score="objective"]')


def pool_lines(judged: dict[str, Any], pool: str) -> str:
    """How the what-if page words one pool of a judged configuration: a line per node group."""
    return "\n".join(f"{len(p['nodes'])} node{'' if len(p['nodes']) == 1 else 's'}: {p['config']['text']}"
                     for p in judged["pools"] if p["pool"] == pool)
