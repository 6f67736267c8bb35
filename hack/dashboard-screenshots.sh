#!/usr/bin/env bash
# The screenshots in docs/dashboard.md: taken by the dashboard's browser tests in headless Chromium, on the case
# study (files), a one-day simulation and a kmock-served live cluster, written to docs/img/dashboard-*.png.
# Run it after changing the pages, and commit the PNGs it writes.
set -euo pipefail
cd "$(dirname "$0")/.."
GPUFLEET_DASHBOARD_SCREENSHOTS="$PWD/docs/img" .venv/bin/python -m pytest -q \
  tests/web/test_browser.py tests/kube/test_live_dashboard.py::test_a_page_updates_without_a_reload_when_the_cluster_changes
ls -1 docs/img/dashboard-*.png
