"""The Preempted Event's note reads back as it was written (the recorder writes it, the dashboard parses it)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.live.preempted_note import parse_preempted_note, preempted_note

_dns = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)
preemptors = st.one_of(st.just(""), st.builds(lambda ns, name: f"{ns}/{name}", _dns, _dns))
reasons = st.sampled_from(["InClusterQueue", "InCohortReclamation", "InCohortFairSharing",
                           "InCohortReclaimWhileBorrowing", "WorkloadPriority"])


@given(preemptors, reasons, st.text(max_size=60))
def test_note_round_trips_whatever_the_message(preemptor: str, reason: str, message: str) -> None:
    assert parse_preempted_note(preempted_note(preemptor, reason, message)) == (preemptor, reason)


def test_note_as_users_see_it() -> None:
    assert preempted_note("ml/urgent", "InClusterQueue", "to admit it: 2 GPUs") == (
        "Preempted by ml/urgent: InClusterQueue: to admit it: 2 GPUs")
    assert preempted_note("", "InCohortReclamation") == "Preempted: InCohortReclamation"


def test_other_text_is_not_a_preemption_note() -> None:
    assert parse_preempted_note("Successfully assigned ml/a to node-1") is None
