"""The parts of Kueue's Configuration that say how DRA claims are charged to quota.

* ``resources.deviceClassMappings[]`` (Kueue 0.14 and later, ``config.kueue.x-k8s.io`` v1beta1 and v1beta2): each
  entry's ``name`` is the resource ClusterQueues cover and quota is written in; ``deviceClassNames`` are the
  DeviceClasses whose devices are charged to it, one per device. Kueue refuses to start on a Configuration its
  validation rejects, so the same rules are errors here: at most 16 mappings, names and class names that are
  qualified names of at most 253 characters, each name once, one to eight classes per mapping, each class once
  and mapped to one resource.
* ``featureGates``: read as written; KueueDRAIntegration (DynamicResourceAllocation before Kueue 0.18) says whether
  the mappings are used at all (:attr:`~gpufleet.api.objects.SchedulerConfig.dra_integration`).

``sources`` (Kueue 0.18's counter- and capacity-based charges for partitionable devices and consumable capacity)
is not implemented: it is said as left out, and the mapping's classes are charged by device count.
"""

from __future__ import annotations

import re

from gpufleet.api.dra_objects import DNS_SUBDOMAIN
from gpufleet.api.errors import LEFT_OUT
from gpufleet.api.objects import DeviceClassMapping, dra_gate
from gpufleet.api.reader import FieldReader

MAX_MAPPINGS = 16  # Kueue's validation: TooMany above 16 mappings
MAX_CLASSES_PER_MAPPING = 8
MAX_NAME = 253

_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_QUALIFIED = ("an optional DNS subdomain and '/', then at most 63 letters, digits, '-', '_' or '.' that start and "
              "end with a letter or digit")


def qualified_name(text: str) -> bool:
    """Kubernetes' IsQualifiedName (what Kueue checks mapping and class names with), and at most 253 characters."""
    if len(text) > MAX_NAME:
        return False
    prefix, slash, name = text.rpartition("/")
    if slash and (not prefix or len(prefix) > MAX_NAME or not DNS_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_NAME.match(name))


def parse_feature_gates(r: FieldReader) -> dict[str, bool]:
    gates = r.obj("featureGates")
    if gates is None:
        return {}
    out: dict[str, bool] = {}
    for name in gates.value:
        if gates.raw(str(name)) is not None:
            out[str(name)] = gates.flag(str(name))
    return out


def parse_device_class_mappings(r: FieldReader, gates: dict[str, bool]) -> tuple[DeviceClassMapping, ...]:
    """``resources.deviceClassMappings`` of the Configuration ``r``; every problem reported where it is."""
    resources = r.obj("resources")
    if resources is None or not resources.has("deviceClassMappings"):
        return ()
    listed = resources.raw("deviceClassMappings")
    if isinstance(listed, list) and len(listed) > MAX_MAPPINGS:
        resources.error(f"{len(listed)} mappings: Kueue accepts at most {MAX_MAPPINGS}", "deviceClassMappings",
                        fix="map several DeviceClasses to one resource (deviceClassNames) instead")
    out: list[DeviceClassMapping] = []
    names: dict[str, int] = {}  # resource -> index of the mapping that names it
    resource_of: dict[str, str] = {}  # device class -> resource
    for i, m in enumerate(resources.items("deviceClassMappings")):
        name = m.text("name", required=True)
        ok = name is not None
        if name is not None and not qualified_name(name):
            m.error(f"{name!r} is not a resource name Kueue accepts: {_QUALIFIED}, at most {MAX_NAME} characters",
                    "name", fix="name the resource ClusterQueues cover for these devices, e.g. nvidia.com/gpu")
            ok = False
        elif name is not None and name in names:
            m.error(f"resource {name} is already named by deviceClassMappings[{names[name]}]", "name",
                    fix=f"list every DeviceClass charged as {name} under one mapping")
            ok = False
        elif name is not None:
            names[name] = i
        classes = m.string_list("deviceClassNames")
        if not classes and not isinstance(m.raw("deviceClassNames"), list) and m.has("deviceClassNames"):
            ok = False  # not a list: string_list said so
        elif not classes:
            m.error("at least one device class name is required", "deviceClassNames",
                    fix="list the DeviceClasses whose devices are charged to this resource, e.g. [gpu.nvidia.com]")
            ok = False
        elif len(classes) > MAX_CLASSES_PER_MAPPING:
            m.error(f"{len(classes)} device classes: Kueue accepts at most {MAX_CLASSES_PER_MAPPING} per mapping",
                    "deviceClassNames", fix="split them over several resources")
            ok = False
        seen: set[str] = set()
        for j, dc in enumerate(classes):
            if not qualified_name(dc):
                m.error(f"{dc!r} is not a DeviceClass name Kueue accepts: {_QUALIFIED}", "deviceClassNames", j,
                        fix="write the DeviceClass's metadata.name, e.g. gpu.nvidia.com")
                ok = False
            elif dc in seen:
                m.error(f"device class {dc} is listed twice", "deviceClassNames", j, fix="list it once")
                ok = False
            elif name is not None and resource_of.get(dc, name) != name:
                # Kueue's own words for a class two mappings claim
                m.error(f"device class already mapped to resource {resource_of[dc]}", "deviceClassNames", j,
                        fix=f"map {dc} to one resource: drop it here or from the mapping of {resource_of[dc]}")
                ok = False
            elif name is not None:
                resource_of.setdefault(dc, name)
            seen.add(dc)
        if m.has("sources"):
            m.warning("sources (counter- and capacity-based quota for partitionable devices and consumable "
                      "capacity) is not implemented: gpufleet charges these classes one per device (left out)",
                      "sources", fix="remove sources to plan as gpufleet does, or expect Kueue to charge counters",
                      code=LEFT_OUT)
        if ok and name is not None:
            out.append(DeviceClassMapping(name, tuple(classes)))
    gate = dra_gate(gates)
    if out and gate is not None and not gates[gate]:
        resources.warning(f"deviceClassMappings are not used: featureGates turns {gate} off, so Kueue charges no "
                          "DRA claim to quota", "deviceClassMappings",
                          fix=f"set featureGates.{gate}: true, or remove the mappings")
    return tuple(out)
