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


_QUEUE_EDITS = st.lists(st.tuples(
    st.sampled_from(["ns-add", "ns-label", "ns-drop", "lq-add", "lq-drop", "lq-broken", "cq-quota", "cq-checks"]),
    st.integers(0, 3)), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(_QUEUE_EDITS)
def test_queue_objects_parsed_one_by_one_read_as_a_fresh_parse_reads_them(edits: list[tuple[str, int]]) -> None:
    """The queue kinds' parse is memoised object by object (a namespace created among thousands re-parses that
    one): after any run of changes it reads what a parse with no memory reads, objects, order and errors alike."""
    from live_env import cluster_queue, flavor, local_queue

    from gpufleet.k8s.informer import ObjectCache
    from gpufleet.live.decide import queue_kinds_read
    from gpufleet.live.world import read_world_objects

    cache, version = ObjectCache(), [0]

    def put(res: r.ResourceType, obj: JsonDict, event: str = "ADDED") -> None:
        version[0] += 1
        obj["metadata"]["resourceVersion"] = str(version[0])
        obj["metadata"].setdefault("uid", f"uid-{obj['metadata']['name']}-{version[0]}")
        cache.apply(res, event, obj)

    put(r.RESOURCE_FLAVORS, flavor())
    put(r.CLUSTER_QUEUES, cluster_queue("cq", 4))
    kinds = queue_kinds_read([res for res in r.SCHEDULER_RESOURCES if res.group == r.GROUP])
    memo = ParseCache()

    def read(parse: ParseCache) -> Any:
        return read_world_objects(cache.snapshot(), parse=parse, scheduler_name="gpufleet", queue_kinds=kinds)

    read(memo)
    for edit, i in edits:
        ns = f"ns{i}"
        if edit == "ns-add" and cache.get(r.NAMESPACES, ns) is None:
            put(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        elif edit == "ns-label" and (old := cache.get(r.NAMESPACES, ns)) is not None:
            new = copy.deepcopy(old)
            new["metadata"]["labels"] = {"team": str(version[0] % 3)}
            put(r.NAMESPACES, new, "MODIFIED")
        elif edit == "ns-drop" and (old := cache.get(r.NAMESPACES, ns)) is not None:
            put(r.NAMESPACES, copy.deepcopy(old), "DELETED")
        elif edit in ("lq-add", "lq-broken") and cache.get(r.LOCAL_QUEUES, f"{ns}/lq") is None:
            lq = local_queue("lq", "cq", ns=ns)
            if edit == "lq-broken":
                lq["spec"] = {}
            put(r.LOCAL_QUEUES, lq)
        elif edit == "lq-drop" and (old := cache.get(r.LOCAL_QUEUES, f"{ns}/lq")) is not None:
            put(r.LOCAL_QUEUES, copy.deepcopy(old), "DELETED")
        elif edit == "cq-quota":
            put(r.CLUSTER_QUEUES, cluster_queue("cq", 4 + i), "MODIFIED")
        elif edit == "cq-checks":
            cq = cluster_queue("cq", 4)
            cq["spec"]["admissionChecks"] = [f"check-{i}"]
            put(r.CLUSTER_QUEUES, cq, "MODIFIED")
        got, want = read(memo).manifests, read(ParseCache()).manifests
        for attr in ("namespaces", "local_queues", "cluster_queues", "flavors", "cohorts"):
            assert getattr(got, attr) == getattr(want, attr), attr
        assert got.controllers.cluster_queue_checks == want.controllers.cluster_queue_checks
        assert [(e.kind, e.name, e.field, e.message) for e in got.problems.all] == [
            (e.kind, e.name, e.field, e.message) for e in want.problems.all]


def test_a_cluster_queue_naming_admission_checks_is_memoised_with_them() -> None:
    """Beside Kueue every ClusterQueue names gpufleet's admission check (docs/beside-kueue.md): its parse, and the
    checks it records, are memoised like any other (a review found each parsed twice on every read)."""
    from live_env import cluster_queue, flavor

    from gpufleet.k8s.informer import ObjectCache
    from gpufleet.live.decide import queue_kinds_read
    from gpufleet.live.world import read_world_objects

    cache = ObjectCache()
    for i, (res, obj) in enumerate([(r.RESOURCE_FLAVORS, flavor()), (r.CLUSTER_QUEUES, cluster_queue("cq", 4))]):
        obj["metadata"].update(resourceVersion=str(i + 1), uid=f"u{i}")
        if res is r.CLUSTER_QUEUES:
            obj["spec"]["admissionChecks"] = ["gpufleet-placement"]
        cache.apply(res, "ADDED", obj)
    kinds = queue_kinds_read([res for res in r.SCHEDULER_RESOURCES if res.group == r.GROUP])
    parse = ParseCache()
    first = read_world_objects(cache.snapshot(), parse=parse, scheduler_name="gpufleet", queue_kinds=kinds)
    assert first.manifests.controllers.cluster_queue_checks == {"cq": ("gpufleet-placement",)}
    before = parse.parses
    cache.apply(r.NAMESPACES, "ADDED", {"apiVersion": "v1", "kind": "Namespace",
                                        "metadata": {"name": "ci", "resourceVersion": "9", "uid": "u9"}})
    again = read_world_objects(cache.snapshot(), parse=parse, scheduler_name="gpufleet", queue_kinds=kinds)
    assert parse.parses == before + 1  # the namespace alone
    assert again.manifests.controllers.cluster_queue_checks == {"cq": ("gpufleet-placement",)}
    assert again.manifests.cluster_queues == first.manifests.cluster_queues
    # The very object again: the kept policy reads again only the ClusterQueues that are not (queues_changed)
    assert again.manifests.cluster_queues[0] is first.manifests.cluster_queues[0]
