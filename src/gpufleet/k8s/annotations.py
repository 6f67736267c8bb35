"""The pod annotations the live scheduler writes with each Binding, and how they are read back.

The scheduler keeps no local state: what it decided for a pod lives on the pod itself. The *intent* (node,
device IDs, time of the decision; for a fractional pod also the GPU the container must see) travels in the
Binding's ``metadata.annotations``, which the API server copies onto the pod in the same update that sets
``spec.nodeName`` (``BindingREST.setPodHostAndAnnotations``, pkg/registry/core/pod/storage). So the
scheduler needs no right to patch pods, and no pod is ever bound without its intent or annotated without
being bound. After a crash or a leader change the next scheduler can

* account a bound pod's devices exactly (``gpufleet.io/devices``), and
* finish a gang whose binds were cut short, on the nodes and devices already chosen: the first member bound
  carries the plan of the whole gang (``gpufleet.io/gang-plan``), so every unbound member's placement is on a
  bound pod (:func:`read_gang_plan`, used by :mod:`gpufleet.live.gangs`).

Only the scheduler may set or change these annotations: deploy/admission-policy.yaml refuses everyone else
(a ValidatingAdmissionPolicy over pods and Bindings). An intent on a pod that is *not* bound (written by an
older gpufleet, which patched pods before binding) is only a plan; it holds nothing.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass

from gpufleet.api.kinds import parse_timestamp
from gpufleet.api.objects import DEVICES_ANNOTATION, NODE_ANNOTATION, VISIBLE_DEVICES_ANNOTATION
from gpufleet.cluster.recorded import read_device_ids as read_devices

ASSIGNED_AT_ANNOTATION = "gpufleet.io/assigned-at"
# On the first pod of a gang to be bound: where every member of the gang goes.
GANG_PLAN_ANNOTATION = "gpufleet.io/gang-plan"
# Every annotation that records a placement: only the scheduler writes them (deploy/admission-policy.yaml).
PLACEMENT_ANNOTATIONS = (NODE_ANNOTATION, DEVICES_ANNOTATION, ASSIGNED_AT_ANNOTATION, VISIBLE_DEVICES_ANNOTATION,
                         GANG_PLAN_ANNOTATION)
# A gang plan larger than this is left out (see docs/live-scheduler.md); all annotations of a pod together may
# not pass 256 KiB, and the pod's own need room too. Some 1,000 members of one GPU each fit.
MAX_GANG_PLAN_BYTES = 128 * 1024

__all__ = [
    "ASSIGNED_AT_ANNOTATION",
    "DEVICES_ANNOTATION",
    "GANG_PLAN_ANNOTATION",
    "NODE_ANNOTATION",
    "PLACEMENT_ANNOTATIONS",
    "VISIBLE_DEVICES_ANNOTATION",
    "Intent",
    "PlannedPod",
    "format_time",
    "gang_plan",
    "intent_annotations",
    "read_devices",
    "read_gang_plan",
    "read_intent",
]


@dataclass(frozen=True, slots=True)
class Intent:
    node: str
    devices: tuple[str, ...]
    at: float | None  # seconds since the epoch; None when the annotation is missing or malformed


def format_time(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def read_intent(annotations: Mapping[str, str]) -> Intent | None:
    node = annotations.get(NODE_ANNOTATION)
    devices = read_devices(annotations)
    if not node or devices is None:
        return None
    return Intent(node, devices, parse_timestamp(annotations.get(ASSIGNED_AT_ANNOTATION)))


def intent_annotations(node: str, devices: tuple[str, ...], at: float, visible: str | None) -> dict[str, str]:
    """The annotations of a Binding that places a pod (a Binding can add or replace annotations, not remove
    them: ``visible`` is left out when None, and nothing else reads the key on a pod that is not fractional)."""
    out = {
        NODE_ANNOTATION: node,
        DEVICES_ANNOTATION: json.dumps(list(devices)),
        ASSIGNED_AT_ANNOTATION: format_time(at),
    }
    if visible is not None:
        out[VISIBLE_DEVICES_ANNOTATION] = visible
    return out


@dataclass(frozen=True, slots=True)
class PlannedPod:
    name: str
    uid: str | None
    node: str
    devices: tuple[str, ...]


def gang_plan(pods: list[PlannedPod], at: float) -> str | None:
    """The ``gpufleet.io/gang-plan`` value for a gang's pods; None when it would pass MAX_GANG_PLAN_BYTES."""
    value = json.dumps({"at": format_time(at),
                        "pods": {p.name: {"uid": p.uid, "node": p.node, "devices": list(p.devices)} for p in pods}},
                       separators=(",", ":"))
    return value if len(value) <= MAX_GANG_PLAN_BYTES else None


def read_gang_plan(annotations: Mapping[str, str]) -> dict[str, tuple[str | None, Intent]]:
    """Pod name -> (its UID when recorded, its intent) from a ``gpufleet.io/gang-plan``; {} when absent or
    malformed (a plan is a help for repairs, never a reason to fail)."""
    raw = annotations.get(GANG_PLAN_ANNOTATION)
    if not isinstance(raw, str) or len(raw) > MAX_GANG_PLAN_BYTES:
        return {}
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return {}
    if not isinstance(value, dict) or not isinstance(value.get("pods"), dict):
        return {}
    at = parse_timestamp(value.get("at")) if isinstance(value.get("at"), str) else None
    out: dict[str, tuple[str | None, Intent]] = {}
    for name, entry in value["pods"].items():
        if not isinstance(entry, dict):
            continue
        node, devices, uid = entry.get("node"), entry.get("devices"), entry.get("uid")
        if not isinstance(node, str) or not node or not isinstance(devices, list):
            continue
        if not all(isinstance(d, str) for d in devices) or not (uid is None or isinstance(uid, str)):
            continue
        out[str(name)] = (uid, Intent(node, tuple(devices), at))
    return out
