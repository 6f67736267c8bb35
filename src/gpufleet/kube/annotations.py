"""The pod annotations the live scheduler writes before a Binding, and how they are read back.

The scheduler keeps no local state: what it decided for a pod lives on the pod itself. Before binding it
writes the *intent* (node, device IDs, time of the decision; for a fractional pod also the GPU the
container must see), then POSTs the Binding. So after a crash or a leader change the next scheduler can

* account a bound pod's devices exactly (``gpufleet.io/devices``), and
* finish a gang whose binds were cut short, on the nodes and devices already chosen (the unbound members
  still carry their intent).

An intent on a pod that is *not* bound is only a plan; it holds nothing and is replaced when the pod is
planned again.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass

from gpufleet.api.kinds import parse_timestamp
from gpufleet.api.objects import DEVICES_ANNOTATION

NODE_ANNOTATION = "gpufleet.io/node"
ASSIGNED_AT_ANNOTATION = "gpufleet.io/assigned-at"
# Read by the container through the downward API (see gpufleet.kube.webhook): the GPU a fractional pod uses.
VISIBLE_DEVICES_ANNOTATION = "gpufleet.io/visible-devices"

__all__ = [
    "ASSIGNED_AT_ANNOTATION",
    "DEVICES_ANNOTATION",
    "NODE_ANNOTATION",
    "VISIBLE_DEVICES_ANNOTATION",
    "Intent",
    "format_time",
    "intent_annotations",
    "read_intent",
]


@dataclass(frozen=True, slots=True)
class Intent:
    node: str
    devices: tuple[str, ...]
    at: float | None  # seconds since the epoch; None when the annotation is missing or malformed


def format_time(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def read_devices(annotations: Mapping[str, str]) -> tuple[str, ...] | None:
    """The device IDs of ``gpufleet.io/devices`` (a JSON list of strings); None when absent or malformed."""
    raw = annotations.get(DEVICES_ANNOTATION)
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    return tuple(value)


def read_intent(annotations: Mapping[str, str]) -> Intent | None:
    node = annotations.get(NODE_ANNOTATION)
    devices = read_devices(annotations)
    if not node or devices is None:
        return None
    return Intent(node, devices, parse_timestamp(annotations.get(ASSIGNED_AT_ANNOTATION)))


def intent_annotations(node: str, devices: tuple[str, ...], at: float, visible: str | None) -> dict[str, str | None]:
    """The merge-patch value of ``metadata.annotations``; a None removes a stale visible-devices value."""
    return {
        NODE_ANNOTATION: node,
        DEVICES_ANNOTATION: json.dumps(list(devices)),
        ASSIGNED_AT_ANNOTATION: format_time(at),
        VISIBLE_DEVICES_ANNOTATION: visible,
    }
