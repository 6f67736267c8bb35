"""The inventory annotation's health mark: written by the node agent, read by the scheduler's cluster state."""

from __future__ import annotations

import json

from gpufleet.api.inventory import format_inventory, inventory_from_json
from gpufleet.api.objects import Node, ObjectMeta
from gpufleet.cluster.state import node_state_from
from gpufleet.gpu.catalog import DEFAULT_CATALOG
from gpufleet.gpu.sharing import DevicePluginConfig, make_gpus


def test_unhealthy_gpus_are_marked_and_read_back_as_unhealthy_slots() -> None:
    gpus = make_gpus("n0", DEFAULT_CATALOG.get("A100-SXM4-80GB"), 4)
    text = format_inventory(gpus, DevicePluginConfig(), {}, unhealthy={2})
    doc = json.loads(text)
    assert [g.get("health") for g in doc["gpus"]] == [None, None, "Unhealthy", None]
    inventory = inventory_from_json(doc)
    assert inventory is not None and inventory.unhealthy == frozenset({2})
    node = Node(ObjectMeta("n0"), {"nvidia.com/gpu": 4}, {"nvidia.com/gpu": 4}, gpus=inventory)
    state = node_state_from(node)
    assert [g.healthy for g in state.gpus] == [True, True, False, True]
    assert state.free_whole_gpus() == [0, 1, 3]


def test_a_healthy_inventory_has_no_health_key_so_render_and_agent_agree() -> None:
    gpus = make_gpus("n0", DEFAULT_CATALOG.get("H100-SXM5-80GB"), 2)
    assert format_inventory(gpus, DevicePluginConfig(), {}) == format_inventory(gpus, DevicePluginConfig(), {},
                                                                                 unhealthy=())
    assert "health" not in format_inventory(gpus, DevicePluginConfig(), {})
