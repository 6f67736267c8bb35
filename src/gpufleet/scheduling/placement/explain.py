"""kube-scheduler's FitError text: "0/18 nodes are available: 4 Insufficient nvidia.com/gpu, ..."."""

from __future__ import annotations


def format_reasons(total: int, feasible: int, reasons: dict[str, int]) -> str:
    """Each node counted once, under its first failing filter; reasons sorted as strings, as kube does."""
    head = f"{feasible}/{total} nodes are available"
    if not reasons:
        return head + "."
    return head + ": " + ", ".join(sorted(f"{n} {r}" for r, n in reasons.items())) + "."
