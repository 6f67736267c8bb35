"""Dashboards for tests: a server on a free loopback port over a source, HTTP over real sockets, and headless
Chromium (Debian's, through Playwright) with the closed-network flags the report's test uses."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpufleet.api.manifests import load_manifests
from gpufleet.web.contract import DataSource
from gpufleet.web.server import Dashboard
from gpufleet.web.source_files import FilesSource
from tests.conftest import REPO

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-proxy-server"]
DATA = Path(__file__).parent / "data"
CASE_FILES = [str(REPO / "examples" / "casestudy"), str(REPO / "examples" / "plan" / "snapshot.yaml"),
              str(DATA / "extra.yaml")]
HOSTILE = str(DATA / "hostile.yaml")
SMALL_ADVICE = str(REPO / "tests" / "advise" / "small.yaml")  # the advisor's own small cluster and demand
CALIBRATE = str(DATA / "calibrate.yaml")
CALIBRATION_TARGETS = "utilization=30,success=95,wait_p95=10m"
WAIT_MS = 30_000  # waits end at the event; this only bounds a failure on a loaded 2-core machine


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


def playwright_or_skip() -> Any:
    problem = None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        problem = "playwright is not installed (pip install -e '.[dev]')"
    if problem is None and not CHROMIUM.exists():
        problem = f"{CHROMIUM} is missing (apt-get install chromium; .ci/run installs it)"
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the dashboard in Chromium: {problem}")
        pytest.skip(problem)
    return sync_playwright


@contextlib.contextmanager
def browser_page(width: int = 1280, height: int = 900) -> Iterator[Any]:
    """A page of headless Chromium that records every request it makes and every script error."""
    sync_playwright = playwright_or_skip()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(WAIT_MS)
            page.requested = []  # type: ignore[attr-defined]
            page.errors = []  # type: ignore[attr-defined]
            page.on("request", lambda r: page.requested.append(r.url))
            page.on("pageerror", lambda e: page.errors.append(str(e)))
            page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" else None)
            yield page
        finally:
            browser.close()


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
