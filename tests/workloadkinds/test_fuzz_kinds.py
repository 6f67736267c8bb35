"""Whatever a workload kind's document holds, a plan or a clear problem, never an exception: the samples of every
kind with one value anywhere in them replaced by a value of any shape (wrong types, huge numbers, Unicode digits),
read, grouped into workloads and planned."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.api.errors import MAX_MESSAGE_CHARS
from gpufleet.api.manifests import build
from gpufleet.api.source import Document
from gpufleet.cli.plan import run_cycles
from gpufleet.cluster.build import build_workloads

DATA = Path(__file__).parent.parent / "data" / "workloads"
SAMPLES = [doc for path in sorted(DATA.glob("*.yaml")) if not path.name.startswith("nodes-")
           for doc in yaml.safe_load_all(path.read_text()) if isinstance(doc, dict)]


def _paths(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at] if at else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*at, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*at, i))
    return out


PLACES = [(i, p) for i, doc in enumerate(SAMPLES) for p in _paths(doc)]
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([10**4000, 2**63, 2**31, -1, 0]), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["²", "٣", "1e400", "9" * 400, "[bold]x", "-", "", "Indexed", "*/0 * * * *", "@every 1h",
                     "Master", "default", "a" * 300]), st.text(max_size=12))
values: st.SearchStrategy[Any] = st.recursive(
    scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                     st.dictionaries(st.sampled_from(["name", "replicas", "template", "spec",
                                                                      "containers", "groupName", "size"]),
                                                     inner, max_size=3)), max_leaves=12)


def _replace(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    at: Any = out
    for part in path[:-1]:
        at = at[part]
    at[path[-1]] = value
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PLACES), values)
def test_any_value_anywhere_in_a_workload_kind_is_read_or_refused_clearly(place: tuple[int, tuple[Any, ...]],
                                                                          value: Any) -> None:
    index, path = place
    docs = [Document(data=_replace(SAMPLES[index], path, value), file="fuzz.yaml", line=1, index=0)]
    docs += [Document(data=copy.deepcopy(d), file="queues.yaml", line=1, index=i + 1)
             for i, d in enumerate(SAMPLES) if d.get("kind") in ("ResourceFlavor", "ClusterQueue", "LocalQueue")]
    m = build(docs)
    for p in m.problems.all:
        assert len(p.message) <= MAX_MESSAGE_CHARS + 80 and str(p)
    build_workloads(m, create_missing=False)
    if not m.problems.errors:
        run_cycles(m, 2, until_stable=False)
