"""Headless Chromium for tests (Debian's, through Playwright) with closed-network flags: one launch for the
dashboard's browser tests and the HTML report's."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-proxy-server"]
WAIT_MS = 30_000  # waits end at the event; this only bounds a failure on a loaded 2-core machine


def playwright_or_skip() -> Any:
    """Playwright's ``sync_playwright``; a skip where Playwright or Chromium is missing, a failure in CI."""
    problem = None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        problem = "playwright is not installed (pip install -e '.[dev]')"
    if problem is None and not CHROMIUM.exists():
        problem = f"{CHROMIUM} is missing (apt-get install chromium; .ci/run installs it)"
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the browser tests in Chromium: {problem}")
        pytest.skip(problem)
    return sync_playwright


@contextlib.contextmanager
def browser_page(width: int = 1280, height: int = 900) -> Iterator[Any]:
    """A page of headless Chromium that records every request it makes (``page.requested``) and every script
    error (``page.errors``)."""
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
