"""The note of a ``Preempted`` Event, written by the scheduler on each victim pod and read back by the dashboard.

``Preempted by <preemptor>: <reason>[: <message>]`` (``by <preemptor>`` left out when the preemptor is not
known). The preemptor is a workload key (``namespace/name``, DNS names: no colon) and the reason one of Kueue's
(``InClusterQueue``, ``InCohortReclamation``...; no colon), so the first two colons delimit them whatever the
message says. Writer and reader live here so that they cannot drift apart.
"""

from __future__ import annotations

import re

PREEMPTED = "Preempted"

_NOTE = re.compile(r"Preempted(?: by (?P<by>[^:]+))?: (?P<reason>[^:]+)")


def preempted_note(preemptor: str, reason: str, message: str = "") -> str:
    by = f" by {preemptor}" if preemptor else ""
    return f"{PREEMPTED}{by}: {reason}" + (f": {message}" if message else "")


def parse_preempted_note(note: str) -> tuple[str, str] | None:
    """(preemptor or "", reason) of a note :func:`preempted_note` wrote; None for any other text."""
    match = _NOTE.match(note)
    if match is None:
        return None
    return match.group("by") or "", match.group("reason")
