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

from gpufleet.api.objects import GPU_INVENTORY_ANNOTATION, GpuInventory
from gpufleet.api.reader import FieldReader
from gpufleet.gpu.mig import MigPlacement
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


def parse_inventory_annotation(r: FieldReader, annotations: dict[str, str]) -> GpuInventory | None:
    text = annotations.get(GPU_INVENTORY_ANNOTATION)
    if text is None:
        return None
    try:
        doc = json.loads(text)
        return inventory_from_json(doc)
    except (ValueError, KeyError, TypeError) as exc:
        r.error(f"annotation {GPU_INVENTORY_ANNOTATION} is not a valid GPU inventory: {exc}", "metadata",
                "annotations", GPU_INVENTORY_ANNOTATION,
                fix="let `gpufleet nodes render` or the node agent write it, or remove it")
        return None


def inventory_from_json(doc: dict[str, Any]) -> GpuInventory | None:
    if not doc:
        return None
    sharing = doc.get("sharing") or {}
    gpus = sorted(doc["gpus"], key=lambda g: int(g["index"]))
    return GpuInventory(
        model=str(doc["model"]),
        memory_mib=int(doc["memoryMiB"]),
        uuids=tuple(str(g["uuid"]) for g in gpus),
        mig=tuple(
            tuple((MigPlacement(str(m["profile"]), int(m["start"])), str(m.get("uuid", ""))) for m in g.get("mig", []))
            for g in gpus
        ),
        nvlinks={(int(a), int(b)): int(n) for a, b, n in doc.get("nvlinks", [])},
        sharing=DevicePluginConfig(
            mig_strategy=cast(Any, sharing.get("migStrategy", "none")),
            time_slicing={str(k): int(v) for k, v in (sharing.get("timeSlicing") or {}).items()},
            rename_by_default=bool(sharing.get("renameByDefault", False)),
            fail_requests_greater_than_one=bool(sharing.get("failRequestsGreaterThanOne", False)),
        ),
        unhealthy=frozenset(int(g["index"]) for g in gpus if g.get("health") == UNHEALTHY),
    )
