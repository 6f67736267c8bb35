"""``gpufleet.io/mig-resized`` on an object whose pods ran out of GPU memory on a MIG instance: its value read and
written (gpufleet.api.mig_resized), and its templates read resized wherever the object is read, so that the quota a
workload is charged is what the webhook makes its pods ask."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.api.manifests import load_manifest_text
from gpufleet.api.mig_resized import (
    BadResized,
    Resize,
    format_resized,
    parse_resized,
    resized_resources,
    resolve,
    with_resize,
)
from gpufleet.cluster.build import build_workloads

ONE, TWO, THREE = "nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-3g.40gb"


def job(annotation: str | None, *, resource: str = ONE) -> str:
    notes = "" if annotation is None else f", annotations: {{gpufleet.io/mig-resized: \"{annotation}\"}}"
    return f"""apiVersion: batch/v1
kind: Job
metadata: {{name: train, namespace: ml{notes}}}
spec:
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      containers: [{{name: c, image: x, resources: {{limits: {{{resource}: 1}}, requests: {{cpu: 1, {resource}: 1}}}}}}]
"""


def test_a_value_reads_back_as_it_was_written() -> None:
    chain = (Resize(ONE, TWO), Resize(TWO, THREE))
    assert parse_resized(format_resized(chain)) == chain
    assert parse_resized(f" {ONE} = {TWO} ,, ") == (Resize(ONE, TWO),)  # spaces and empty entries pass
    assert resolve(ONE, chain) == THREE and resolve(TWO, chain) == THREE and resolve("cpu", chain) == "cpu"
    # Written to its end: the entry that led to 2g leads to 3g now, so one pass takes any pod where it goes.
    assert with_resize(chain[:1], chain[1]) == (Resize(ONE, THREE), Resize(TWO, THREE))
    assert with_resize(chain, Resize(ONE, THREE)) == chain  # a pod asking 1g is resized already
    # Written in the other order (a JobSet's 2g pods ran out first, then its 1g pods): followed to its end, so a
    # webhook called again on a pod it resized changes nothing.
    other = with_resize((Resize(TWO, THREE),), Resize(ONE, TWO))
    assert resolve(ONE, other) == THREE and resolve(resolve(ONE, other), other) == THREE


@pytest.mark.parametrize(("text", "why"), [
    ("", "no old=new entry"),
    (ONE, "is not old=new"),
    (f"nvidia.com/gpu={TWO}", "'nvidia.com/gpu' is not a MIG resource name"),
    (f"{ONE}={ONE}", "replaces nvidia.com/mig-1g.10gb with itself"),
    (",".join([f"{ONE}={TWO}"] * 17), "17 entries; at most 16"),
    (f"{ONE}={TWO},{ONE}={THREE}", "nvidia.com/mig-1g.10gb is already replaced by an earlier entry"),
    (f"{ONE}={TWO},{TWO}={ONE}", "go round in a circle"),
])
def test_a_value_that_does_not_read_says_why(text: str, why: str) -> None:
    with pytest.raises(BadResized, match=why):
        parse_resized(text)


NAMES = st.sampled_from([ONE, TWO, THREE, "nvidia.com/mig-4g.40gb", "nvidia.com/mig-7g.80gb"])


@given(st.lists(st.tuples(NAMES, NAMES).filter(lambda p: p[0] != p[1]).map(lambda p: Resize(*p)), max_size=5),
       st.dictionaries(st.one_of(NAMES, st.sampled_from(["cpu", "memory"])), st.integers(1, 4)))
def test_a_resized_map_asks_each_resource_once_and_what_resolve_says(resizes: list[Resize],
                                                                    asked: dict[str, int]) -> None:
    out = resized_resources(asked, resizes)
    names = [resolve(k, resizes) for k in asked]
    if out is None:  # nothing moves, or two entries would become one: left as it is
        assert names == list(asked) or len(set(names)) < len(names)
        return
    assert list(out) == names and list(out.values()) == list(asked.values())


@given(st.lists(st.tuples(NAMES, NAMES).filter(lambda p: p[0] != p[1]).map(lambda p: Resize(*p)), max_size=6))
def test_resizes_the_scheduler_writes_always_read_back_and_resolving_twice_changes_nothing(
        lessons: list[Resize]) -> None:
    """Whatever order the OOMs come in, what with_resize writes reads back (no resource replaced twice, no cycle)
    and a pod resized once is where it goes: a webhook called again leaves it."""
    written: tuple[Resize, ...] = ()
    for lesson in lessons:
        if resolve(lesson.new, written) == lesson.old:
            continue  # (a larger profile never leads back to a smaller one: the core offers only larger ones)
        written = with_resize(written, lesson)
    if not written:
        return
    assert parse_resized(format_resized(written)) == written
    for name in (ONE, TWO, THREE, "nvidia.com/mig-4g.40gb", "nvidia.com/mig-7g.80gb"):
        assert resolve(resolve(name, written), written) == resolve(name, written)


def test_a_jobs_templates_are_read_resized_and_its_pods_too() -> None:
    m = load_manifest_text(job(f"{ONE}={TWO}"), "job.yaml")
    assert not m.problems.errors and not m.problems.warnings
    [w] = build_workloads(m)
    assert [ps.template.requests.get(TWO) for ps in w.pod_sets] == [1]
    assert ONE not in w.pod_sets[0].template.requests and ONE not in w.pod_sets[0].template.limits
    assert w.pod_sets[0].template.gpu.mig_profile == "2g.20gb"
    assert all(p.template.requests.get(TWO) == 1 for p in w.pods) and len(w.pods) == 2  # (made as plan makes them)
    # A Job asking something else is read as it asks.
    [plain] = build_workloads(load_manifest_text(job(f"{ONE}={TWO}", resource=THREE)))
    assert plain.pod_sets[0].template.requests.get(THREE) == 1


def test_an_annotation_that_does_not_read_is_a_warning_naming_it_and_the_templates_stand() -> None:
    m = load_manifest_text(job("1g=2g"), "job.yaml")
    [warning] = [w for w in m.problems.warnings if "mig-resized" in w.message]
    assert warning.file == "job.yaml" and warning.line == 3
    assert warning.field == "metadata.annotations.gpufleet.io/mig-resized" and "e.g. nvidia.com/mig-1g" in (
        warning.fix or "")
    assert "its pods are read (and made) as their templates ask" in warning.message
    [w] = build_workloads(m)
    assert w.pod_sets[0].template.requests.get(ONE) == 1
