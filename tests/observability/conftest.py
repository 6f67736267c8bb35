"""Observability tests: alert rules, dashboards and the simulator's OpenMetrics, checked with Prometheus's own
tools (tests/kube/prom_tools.py). tests/kube is put on the path for those helpers and the chart renderer."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kube"))
