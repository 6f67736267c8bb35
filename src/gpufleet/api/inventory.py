"""The ``gpufleet.io/gpus`` node annotation: a node's GPU inventory as JSON.

On simulated nodes the NodePool expansion writes it; on real nodes the node agent will publish it from NVML.
It carries what labels cannot: each GPU's UUID, its MIG instances with their UUIDs and starts, the NVLink
pairs, and the device-plugin sharing configuration in force. Shape::

    {"model": "A100-SXM4-80GB", "memoryMiB": 81920,
     "sharing": {"migStrategy": "mixed", "timeSlicing": {"nvidia.com/gpu": 4},
                 "renameByDefault": false, "failRequestsGreaterThanOne": false},
     "gpus": [{"index": 0, "uuid": "GPU-...", "mig": [{"profile": "3g.40gb", "start": 0, "uuid": "MIG-..."}]}],
     "nvlinks": [[0, 1, 12], ...]}

A GPU the node agent found broken (an XID outside NVIDIA's ignore list) carries ``"health": "Unhealthy"``;
the key is absent on healthy GPUs, so a healthy node's annotation is the same whoever writes it.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import Any, cast

from gpufleet.api import safejson
from gpufleet.api.errors import shown
from gpufleet.api.limits import MAX_ANNOTATION_BYTES, MAX_GPUS_PER_NODE, MAX_JSON_DEPTH, MAX_REPLICAS_PER_GPU
from gpufleet.api.objects import GPU_INVENTORY_ANNOTATION, GpuInventory
from gpufleet.api.reader import FieldReader
from gpufleet.gpu.catalog import DEFAULT_CATALOG
from gpufleet.gpu.mig import MigError, MigPlacement, check_layout, geometry_for
from gpufleet.gpu.sharing import DevicePluginConfig, PhysicalGpu

UNHEALTHY = "Unhealthy"


def nvlink_pairs(count: int, links_per_pair: int, mode: str) -> dict[tuple[int, int], int]:
    """NVLink connectivity of a board: every pair (NVSwitch boards), adjacent pairs (bridges) or none."""
    if links_per_pair <= 0 or mode == "none":
        return {}
    if mode == "all":
        return {(i, j): links_per_pair for i in range(count) for j in range(i + 1, count)}
    return {(i, i + 1): links_per_pair for i in range(0, count - 1, 2)}


def format_inventory(gpus: Sequence[PhysicalGpu], sharing: DevicePluginConfig,
                     nvlinks: dict[tuple[int, int], int], unhealthy: Collection[int] = ()) -> str:
    if not gpus:
        return "{}"
    model = gpus[0].model
    doc = {
        "model": model.key,
        "memoryMiB": model.memory_mib,
        "sharing": {
            "migStrategy": sharing.mig_strategy,
            "timeSlicing": dict(sharing.time_slicing),
            "renameByDefault": sharing.rename_by_default,
            "failRequestsGreaterThanOne": sharing.fail_requests_greater_than_one,
        },
        "gpus": [
            {"index": g.index, "uuid": g.uuid,
             **({"health": UNHEALTHY} if g.index in unhealthy else {}),
             **({"mig": [{"profile": i.placement.profile, "start": i.placement.start, "uuid": i.uuid}
                         for i in g.mig]} if g.mig_enabled else {})}
            for g in gpus
        ],
        "nvlinks": [[i, j, n] for (i, j), n in sorted(nvlinks.items())],
    }
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


class InventoryError(ValueError):
    """The annotation is not a GPU inventory; the message names the JSON path and what is wrong there."""


def parse_inventory_annotation(r: FieldReader, annotations: dict[str, str]) -> GpuInventory | None:
    text = annotations.get(GPU_INVENTORY_ANNOTATION)
    if text is None:
        return None
    try:
        return inventory_from_json(load_json_bounded(text))
    except InventoryError as exc:
        r.error(f"annotation {GPU_INVENTORY_ANNOTATION} is not a valid GPU inventory: {exc}", "metadata",
                "annotations", GPU_INVENTORY_ANNOTATION,
                fix="let `gpufleet nodes render` or the node agent write it, or remove it")
        return None


def load_json_bounded(text: str, *, max_bytes: int = MAX_ANNOTATION_BYTES, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """JSON of an annotation with its size and nesting bounded; :class:`InventoryError` on anything wrong."""
    if len(text) > max_bytes:
        raise InventoryError(f"it is {len(text):,} characters long; at most {max_bytes:,} are read")
    try:
        return safejson.loads(text.encode("utf-8", "surrogatepass"), depth_limit=max_depth)
    except safejson.JsonBodyError as exc:
        raise InventoryError(str(exc).replace("the body", "it").replace("the JSON", "it")) from None


def _need(value: Any, kind: type | tuple[type, ...], where: str, what: str) -> Any:
    if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
        raise InventoryError(f"{where} must be {what}, got {shown(value)}")
    return value


def _int_in(value: Any, low: int, high: int, where: str) -> int:
    _need(value, int, where, "an integer")
    if not low <= value <= high:
        raise InventoryError(f"{where} must be from {low} to {high:,}, got {shown(value)}")
    return int(value)


def _text(value: Any, where: str, limit: int = 256) -> str:
    _need(value, str, where, "a string")
    if not value or len(value) > limit:
        raise InventoryError(f"{where} must be a non-empty string of at most {limit} characters")
    return str(value)


def inventory_from_json(doc: Any) -> GpuInventory | None:
    """A checked inventory from parsed JSON: every field of the right type and within gpufleet's limits, MIG
    instances valid for the model, NVLink pairs between GPUs that exist. :class:`InventoryError` otherwise."""
    _need(doc, dict, "the annotation", "a JSON object")
    if not doc:
        return None
    model_name = _text(doc.get("model"), "model")
    memory = _int_in(doc.get("memoryMiB"), 1, 16 * 2**20, "memoryMiB")
    sharing_doc = _need(doc.get("sharing") or {}, dict, "sharing", "an object")
    strategy = sharing_doc.get("migStrategy", "none")
    if strategy not in ("none", "single", "mixed"):
        raise InventoryError(f"sharing.migStrategy must be none, single or mixed, got {shown(strategy)}")
    slicing_doc = _need(sharing_doc.get("timeSlicing") or {}, dict, "sharing.timeSlicing", "an object")
    time_slicing = {_text(k, "sharing.timeSlicing key"): _int_in(v, 1, MAX_REPLICAS_PER_GPU, f"sharing.timeSlicing.{k}")
                    for k, v in slicing_doc.items()}
    flags = {key: _need(sharing_doc.get(key, False), bool, f"sharing.{key}", "true or false")
             for key in ("renameByDefault", "failRequestsGreaterThanOne")}
    gpu_docs = _need(doc.get("gpus"), list, "gpus", "a list")
    if len(gpu_docs) > MAX_GPUS_PER_NODE:
        raise InventoryError(f"gpus lists {len(gpu_docs)} GPUs; at most {MAX_GPUS_PER_NODE} per node")
    known = DEFAULT_CATALOG.find(model_name)
    geometry = geometry_for(known.key if known is not None else model_name)
    gpus: list[tuple[int, str, tuple[tuple[MigPlacement, str], ...], bool]] = []
    for i, g in enumerate(gpu_docs):
        # The common GPU (no MIG, healthy, fields as the node agent writes them) is checked inline, as the NVLink
        # pairs below are; anything else takes the checks that name what is wrong.
        if type(g) is dict and len(g) == 2 and type(index := g.get("index")) is int \
                and 0 <= index < MAX_GPUS_PER_NODE and type(uuid := g.get("uuid")) is str and 0 < len(uuid) <= 256:
            gpus.append((index, uuid, (), False))
            continue
        where = f"gpus[{i}]"
        _need(g, dict, where, "an object")
        index = _int_in(g.get("index"), 0, MAX_GPUS_PER_NODE - 1, f"{where}.index")
        uuid = _text(g.get("uuid"), f"{where}.uuid")
        instances = _need(g.get("mig", []), list, f"{where}.mig", "a list")
        if instances and geometry is None:
            raise InventoryError(f"{where}.mig: {model_name} has no MIG geometry gpufleet knows")
        if len(instances) > 7:
            raise InventoryError(f"{where}.mig lists {len(instances)} instances; a GPU holds at most 7")
        mig = []
        for k, m in enumerate(instances):
            at = f"{where}.mig[{k}]"
            _need(m, dict, at, "an object")
            profile = _text(m.get("profile"), f"{at}.profile", 32)
            start = _int_in(m.get("start"), 0, 7, f"{at}.start")
            mig_uuid = _text(m["uuid"], f"{at}.uuid") if "uuid" in m else ""
            mig.append((MigPlacement(profile, start), mig_uuid))
        if mig:
            assert geometry is not None
            try:
                check_layout(geometry, [p for p, _ in mig])
            except MigError as exc:
                raise InventoryError(f"{where}.mig: {exc}") from None
        health = g.get("health")
        if health not in (None, UNHEALTHY, "Healthy"):
            raise InventoryError(f"{where}.health must be absent or {UNHEALTHY}, got {shown(health)}")
        gpus.append((index, uuid, tuple(mig), health == UNHEALTHY))
    gpus.sort(key=lambda g: g[0])
    if [g[0] for g in gpus] != list(range(len(gpus))):
        raise InventoryError("gpus must be numbered 0, 1, 2, ... by index, each once")
    nvlinks: dict[tuple[int, int], int] = {}
    top = len(gpus) - 1
    for k, link in enumerate(_need(doc.get("nvlinks", []), list, "nvlinks", "a list")):
        # Up to 2,016 links on a 64-GPU board: the common, valid case is checked inline, the message built
        # only for a bad one.
        if (type(link) is list and len(link) == 3 and type(link[0]) is int and type(link[1]) is int
                and type(link[2]) is int and 0 <= link[0] < link[1] <= top and 0 <= link[2] <= 64):
            nvlinks[(link[0], link[1])] = link[2]
            continue
        where = f"nvlinks[{k}]"
        if not isinstance(link, list) or len(link) != 3:
            raise InventoryError(f"{where} must be [gpu, gpu, links], got {shown(link)}")
        a = _int_in(link[0], 0, top, f"{where}[0]")
        _int_in(link[1], a + 1, max(a + 1, top), f"{where}[1]")
        _int_in(link[2], 0, 64, f"{where}[2]")
        raise InventoryError(f"{where} must be [gpu, gpu, links] with gpu < gpu, got {shown(link)}")
    return GpuInventory(
        model=model_name,
        memory_mib=memory,
        uuids=tuple(uuid for _, uuid, _, _ in gpus),
        mig=tuple(mig for _, _, mig, _ in gpus),
        nvlinks=nvlinks,
        sharing=DevicePluginConfig(
            mig_strategy=cast(Any, strategy),
            time_slicing=time_slicing,
            rename_by_default=flags["renameByDefault"],
            fail_requests_greater_than_one=flags["failRequestsGreaterThanOne"],
        ),
        unhealthy=frozenset(index for index, _, _, bad in gpus if bad),
    )
