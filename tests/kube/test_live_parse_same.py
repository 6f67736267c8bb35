"""The live parse (ParseCache.one) leaves out the unknown-field walk, which only warns: it must still make the same
objects, and the same errors, as the manifest reader's full build of the same document."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from live_env import node, pod

from gpufleet.api.manifests import build
from gpufleet.k8s import resources as r
from gpufleet.k8s.parsing import ParseCache, document

JsonDict = dict[str, Any]

_junk = st.dictionaries(st.sampled_from(["extra", "nodeSelectr", "hostNetwork", "x-y"]),
                        st.one_of(st.none(), st.integers(), st.text(max_size=3)), max_size=2)
_gpu = st.fixed_dictionaries({"index": st.integers(-1, 9), "uuid": st.sampled_from(["GPU-a", "", "GPU-b"])},
                             optional={"health": st.sampled_from(["Unhealthy", "Healthy", "sick"]),
                                       "extra": st.integers()})


def _same(resource: r.ResourceType, key: str, obj: JsonDict) -> None:
    parsed = ParseCache().one(resource, key, obj)
    full = build([document(copy.deepcopy(obj))])
    made = (full.nodes or full.pods or [None])[0]
    assert parsed.obj == made
    assert [(e.field, e.message) for e in parsed.errors] == [(e.field, e.message) for e in full.problems.errors]


@settings(max_examples=60, deadline=None)
@given(_junk, _junk, st.lists(_gpu, max_size=4), st.booleans())
def test_a_node_parses_live_as_the_full_reader_reads_it(top: JsonDict, status: JsonDict, gpus: list[JsonDict],
                                                        with_inventory: bool) -> None:
    raw = node("n0", gpus=len(gpus) or 1)
    raw.update(top)
    raw["status"].update(status)
    annotations = raw["metadata"].setdefault("annotations", {})
    if with_inventory:
        annotations["gpufleet.io/gpus"] = json.dumps({"model": "A100-SXM4-80GB", "memoryMiB": 81920,
                                                      "gpus": gpus})
    else:
        annotations.pop("gpufleet.io/gpus", None)
    _same(r.NODES, "n0", raw)


@settings(max_examples=40, deadline=None)
@given(_junk, _junk, st.integers(0, 3))
def test_a_pod_parses_live_as_the_full_reader_reads_it(top: JsonDict, spec: JsonDict, gpus: int) -> None:
    raw = pod("p0", gpus=gpus, queue="team")
    raw.update(top)
    raw["spec"].update(spec)
    _same(r.PODS, "ml/p0", raw)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.fixed_dictionaries({"index": st.one_of(st.integers(-2, 70), st.booleans(), st.text(max_size=2)),
                                       "uuid": st.one_of(st.text(max_size=3), st.integers(), st.just("x" * 257))}),
                max_size=5))
def test_the_inline_check_of_a_plain_gpu_says_what_the_full_checks_say(gpus: list[JsonDict]) -> None:
    # A GPU of two fields takes the inline check; the same GPU marked Healthy takes the checks that name what is
    # wrong. Both must accept the same GPUs and make the same inventory, or refuse with the same message.
    from gpufleet.api.inventory import InventoryError, inventory_from_json

    def read(doc: JsonDict) -> object:
        try:
            return inventory_from_json(doc)
        except InventoryError as e:
            return str(e)

    plain = {"model": "A100-SXM4-80GB", "memoryMiB": 81920, "gpus": gpus}
    marked = {**plain, "gpus": [{**g, "health": "Healthy"} for g in gpus]}
    assert read(plain) == read(marked)
