"""Property-based fuzzing of the input paths: whatever the input, a value or a clear problem, never an exception.

The manifests are generated as structured data shaped like the kinds gpufleet reads (known field names, with
values of every wrong type, huge and odd numbers, Unicode digits, markup-like text), and as raw text; the GPU
inventory annotation as arbitrary JSON and as mutations of valid inventories. Bounded in examples so that the
whole module runs in well under a minute.
"""

from __future__ import annotations

import json
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.api.errors import MAX_MESSAGE_CHARS, Problems
from gpufleet.api.inventory import format_inventory, inventory_from_json, nvlink_pairs, parse_inventory_annotation
from gpufleet.api.manifests import build, load_manifest_text
from gpufleet.api.objects import GPU_INVENTORY_ANNOTATION
from gpufleet.api.reader import FieldReader
from gpufleet.api.source import Document, load_text
from gpufleet.cluster.build import build_workloads
from gpufleet.cluster.state import ClusterState
from gpufleet.gpu.catalog import DEFAULT_CATALOG
from gpufleet.gpu.sharing import DevicePluginConfig, make_gpus

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

KINDS = [("v1", "Pod"), ("v1", "Node"), ("batch/v1", "Job"), ("kueue.x-k8s.io/v1beta1", "ClusterQueue"),
         ("kueue.x-k8s.io/v1beta1", "LocalQueue"), ("kueue.x-k8s.io/v1beta1", "ResourceFlavor"),
         ("kueue.x-k8s.io/v1beta1", "Cohort"), ("kueue.x-k8s.io/v1beta1", "Workload"),
         ("gpufleet.io/v1alpha1", "NodePool"), ("scheduling.k8s.io/v1", "PriorityClass")]
FIELDS = ["metadata", "name", "namespace", "labels", "annotations", "spec", "status", "containers", "resources",
          "limits", "requests", "nvidia.com/gpu", "cpu", "memory", "count", "parallelism", "completions",
          "template", "podSets", "gpu", "model", "migLayout", "sharing", "timeSlicing", "replicas", "cohort",
          "parentName", "resourceGroups", "coveredResources", "flavors", "nominalQuota", "queueName", "priority",
          "value", "nodeSelector", "tolerations", "affinity", "allocatable", "capacity", "creationTimestamp",
          "gpufleet.io/gpu-fraction", "gpufleet.io/gpu-memory", "kueue.x-k8s.io/pod-group-total-count",
          "kueue.x-k8s.io/pod-group-name", "kueue.x-k8s.io/queue-name", "gpufleet.io/gpus", "nodeName"]
ODD_TEXT = ["²", "٣", "--1", "1e400", "9" * 400, "[/x]", "[bold]3g.20gb", "0.5", "-1", "", " ", "1Gi", "3g.40gb:2",
            "nan", "inf", "true", "{}", "[[[[", '{"gpus": 5}', "2026-01-01T00:00:00Z", "\x00", "a" * 300]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([10**4000, -(10**4000), 2**63, 2**31]), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(ODD_TEXT), st.text(max_size=20))
trees: st.SearchStrategy[Any] = st.recursive(
    scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                     st.dictionaries(st.sampled_from(FIELDS), inner, max_size=5)),
    max_leaves=40)


def _assert_clean(problems: Problems) -> None:
    for p in problems.all:
        assert len(p.message) <= MAX_MESSAGE_CHARS + 80
        assert str(p)  # formats without raising


@FUZZ
@given(kind=st.sampled_from(KINDS), body=st.dictionaries(st.sampled_from(FIELDS), trees, max_size=6))
def test_any_manifest_shaped_data_gives_objects_or_problems(kind: tuple[str, str], body: dict[str, Any]) -> None:
    data = {"apiVersion": kind[0], "kind": kind[1], **body}
    problems = Problems()
    manifests = build([Document(data, "fuzz.yaml", 1, 0)], problems)
    _assert_clean(problems)
    workloads = build_workloads(manifests)  # the next stage must take whatever the parser kept
    ClusterState.from_nodes(manifests.nodes)
    assert all(w.pods is not None for w in workloads)


@FUZZ
@given(kind=st.sampled_from(KINDS), body=st.dictionaries(st.sampled_from(FIELDS), trees, max_size=6))
def test_the_same_data_through_yaml_text_too(kind: tuple[str, str], body: dict[str, Any]) -> None:
    try:
        text = yaml.safe_dump({"apiVersion": kind[0], "kind": kind[1], **body}, allow_unicode=True)
    except (yaml.YAMLError, ValueError):
        return  # not every Python value has a YAML spelling; the raw-text test covers the rest
    manifests = load_manifest_text(text, "fuzz.yaml")
    _assert_clean(manifests.problems)


@FUZZ
@given(st.text(alphabet=st.sampled_from(list("apiVersion: kind-Pod\n[]{}&*!|>'\"#%@`,.0123456789²eE- \t")),
               max_size=300))
def test_any_text_gives_documents_or_problems(text: str) -> None:
    problems = Problems()
    docs = load_text(text, "fuzz.yaml", problems)
    _assert_clean(problems)
    build(docs, problems)


json_values: st.SearchStrategy[Any] = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=10)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.sampled_from(["model", "memoryMiB", "gpus", "index", "uuid", "mig",
                                                             "profile", "start", "nvlinks", "sharing",
                                                             "timeSlicing", "migStrategy", "health"]), inner,
                                            max_size=5)),
    max_leaves=30)


def _parse_annotation(text: str) -> tuple[Any, Problems]:
    problems = Problems()
    doc = Document({"metadata": {"annotations": {GPU_INVENTORY_ANNOTATION: text}}}, "fuzz", 1, 0)
    r = FieldReader(doc, problems, kind="Node", name="n")
    return parse_inventory_annotation(r, {GPU_INVENTORY_ANNOTATION: text}), problems


@FUZZ
@given(json_values)
def test_any_json_inventory_is_read_or_refused_with_a_message(value: Any) -> None:
    inventory, problems = _parse_annotation(json.dumps(value))
    assert inventory is None or not problems.errors
    _assert_clean(problems)


def _valid_inventory(model: str, count: int, layout: str | None) -> dict[str, Any]:
    from gpufleet.gpu.mig import geometry_for, parse_layout

    m = DEFAULT_CATALOG.get(model)
    geometry = geometry_for(m.key)
    placements = parse_layout(layout, geometry) if layout and geometry else None
    gpus = make_gpus("n1", m, count, placements)
    text = format_inventory(gpus, DevicePluginConfig("mixed" if placements else "none"),
                            nvlink_pairs(count, m.nvlinks_per_pair, "all"))
    return dict(json.loads(text))


def _has(target: Any, step: Any, *, setting: bool = False) -> bool:
    """Whether ``target[step]`` exists (for a dict key, may be set when ``setting``)."""
    if isinstance(target, dict) and isinstance(step, str):
        return setting or step in target
    return isinstance(target, list) and isinstance(step, int) and step < len(target)


@FUZZ
@given(model=st.sampled_from(["A100-SXM4-80GB", "H100-SXM5-80GB", "L40S"]), count=st.integers(1, 8),
       path=st.lists(st.sampled_from(["gpus", 0, "index", "mig", "start", "uuid", "nvlinks", "memoryMiB"]),
                     max_size=3),
       replacement=json_values)
def test_mutated_inventories_are_read_or_refused(model: str, count: int, path: list[Any], replacement: Any) -> None:
    doc = _valid_inventory(model, count, "3g.40gb:2" if model.startswith(("A100", "H100")) else None)
    assert _parse_annotation(json.dumps(doc))[0] is not None  # the unmutated one is valid
    target: Any = doc
    for step in path[:-1]:
        if _has(target, step):
            target = target[step]
    if path and _has(target, path[-1], setting=True):
        target[path[-1]] = replacement
    inventory, problems = _parse_annotation(json.dumps(doc))
    _assert_clean(problems)
    if inventory is not None:  # whatever is accepted can be turned into devices
        assert inventory_from_json(doc) == inventory
