"""What a fractional pod's container must see (``NVIDIA_VISIBLE_DEVICES``) for the grants it was given.

The grants a running pod holds are read from its record by :mod:`gpufleet.cluster.recorded` (re-exported here
as ``grants_from_ids`` for the live driver's accounting).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.cluster.devices import DeviceGrant
from gpufleet.cluster.recorded import grants_from_ids as grants_from_ids
from gpufleet.cluster.state import NodeState

_UUID_PREFIXES = ("GPU-", "MIG-")


def visible_devices(node: NodeState, grants: Sequence[DeviceGrant]) -> str | None:
    """What NVIDIA_VISIBLE_DEVICES must say for a fractional pod: the GPU's UUID when the node publishes its
    inventory, else the GPU's index (NVML's enumeration order, which a node without inventory is assumed to
    follow)."""
    indices = [g.gpu for g in grants if g.kind == "fraction"]
    if not indices:
        return None
    gpu = node.gpus[indices[0]]
    return gpu.device_id if gpu.device_id.startswith(_UUID_PREFIXES) else str(gpu.index)
