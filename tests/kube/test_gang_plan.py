"""The gang plan a gang's first Binding carries (gpufleet.io/gang-plan): written within its size bound, read
back exactly, and never a reason to fail when an annotation holds something else."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.k8s.annotations import (
    GANG_PLAN_ANNOTATION,
    MAX_GANG_PLAN_BYTES,
    Intent,
    PlannedPod,
    gang_plan,
    read_gang_plan,
)


def test_a_plan_round_trips() -> None:
    pods = [PlannedPod("w0", "uid-0", "n0", ("GPU-a",)), PlannedPod("w1", None, "n1", ("GPU-b", "GPU-c"))]
    plan = gang_plan(pods, 1767225600.5)
    assert plan is not None
    assert read_gang_plan({GANG_PLAN_ANNOTATION: plan}) == {
        "w0": ("uid-0", Intent("n0", ("GPU-a",), 1767225600.5)),
        "w1": (None, Intent("n1", ("GPU-b", "GPU-c"), 1767225600.5)),
    }


def test_a_plan_past_the_bound_is_left_out() -> None:
    uuid = "GPU-" + "0" * 36
    small = [PlannedPod(f"worker-{i}", "0" * 36, f"node-{i}", (uuid,)) for i in range(500)]
    assert gang_plan(small, 0.0) is not None  # hundreds of members fit
    large = [PlannedPod(f"worker-{i}", "0" * 36, f"node-{i}", (uuid,) * 8) for i in range(1000)]
    assert gang_plan(large, 0.0) is None


@settings(max_examples=300, deadline=None)
@given(raw=st.text(max_size=200) | st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=15).map(json.dumps))
def test_whatever_the_annotation_holds_reading_it_never_fails(raw: str) -> None:
    for name, (uid, intent) in read_gang_plan({GANG_PLAN_ANNOTATION: raw}).items():
        assert isinstance(name, str) and (uid is None or isinstance(uid, str))
        assert intent.node and all(isinstance(d, str) for d in intent.devices)


def test_deep_or_huge_annotations_are_ignored() -> None:
    assert read_gang_plan({GANG_PLAN_ANNOTATION: "[" * 100_000}) == {}
    assert read_gang_plan({GANG_PLAN_ANNOTATION: " " * (MAX_GANG_PLAN_BYTES + 1)}) == {}
