"""The fields of the DRA kinds, version by version, for the unknown-field check (gpufleet.api.workloadkinds.fields).

``v1`` and ``v1beta2`` have the same shape; ``v1beta1`` puts a device's fields under ``basic`` and a request's
inline. A field the kind has that gpufleet does not read (:class:`Unread`) is said as left out, as for every
kind: binding conditions, consumable capacity, list-typed attributes.
"""

from __future__ import annotations

from gpufleet.api.workloadkinds.fields import ANY, META, ListOf, MapOf, Schema, Unread


def _f(*names: str, **nested: Schema) -> dict[str, Schema]:
    return {**dict.fromkeys(names, ANY), **nested}


def _object(spec: Schema, status: Schema = ANY) -> dict[str, Schema]:
    return {"apiVersion": ANY, "kind": ANY, "metadata": META, "spec": spec, "status": status}


_NOT_IMPLEMENTED = "is not implemented"
_LIST_ATTRIBUTE = Unread(f"list-typed attributes (DRAListTypeAttributes) {_NOT_IMPLEMENTED}: the attribute is skipped")
_CONSUMABLE = "consumable capacity (DRAConsumableCapacity)"
_COUNTERS = MapOf(_f("value"))

_DEVICE_FIELDS: dict[str, Schema] = _f(
    "nodeName", "nodeSelector", "allNodes",
    attributes=MapOf(_f("int", "bool", "string", "version", ints=_LIST_ATTRIBUTE, bools=_LIST_ATTRIBUTE,
                        strings=_LIST_ATTRIBUTE, versions=_LIST_ATTRIBUTE)),
    capacity=MapOf(_f("value", requestPolicy=Unread(f"{_CONSUMABLE} {_NOT_IMPLEMENTED}"))),
    consumesCounters=ListOf(_f("counterSet", counters=_COUNTERS)),
    taints=ListOf(_f("key", "value", "effect", "timeAdded")),
    bindsToNode=Unread(f"device binding (DRADeviceBindingConditions) {_NOT_IMPLEMENTED}"),
    bindingConditions=Unread(f"device binding (DRADeviceBindingConditions) {_NOT_IMPLEMENTED}"),
    bindingFailureConditions=Unread(f"device binding (DRADeviceBindingConditions) {_NOT_IMPLEMENTED}"),
    allowMultipleAllocations=Unread(f"{_CONSUMABLE} {_NOT_IMPLEMENTED}"),
)


def _slice_spec(device: Schema) -> dict[str, Schema]:
    return _f("driver", "nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection",
              pool=_f("name", "generation", "resourceSliceCount"), devices=ListOf(device),
              sharedCounters=ListOf(_f("name", counters=_COUNTERS)),
              nodeAllocatableResourceMappings=Unread(f"node allocatable mappings (DRANodeAllocatableResources) "
                                                     f"{_NOT_IMPLEMENTED}"))


_SELECTORS = ListOf(_f(cel=_f("expression")))
_OPAQUE = _f("driver", "parameters")
_DEVICE_CLASS_SPEC = _f("extendedResourceName", selectors=_SELECTORS, config=ListOf(_f(opaque=_OPAQUE)))

_SELECTION: dict[str, Schema] = _f(
    "deviceClassName", "allocationMode", "count", selectors=_SELECTORS,
    tolerations=ListOf(_f("key", "operator", "value", "effect", "tolerationSeconds")),
    capacity=Unread(f"capacity requests ({_CONSUMABLE}) {_NOT_IMPLEMENTED}"))
_SUB_REQUEST = {**_SELECTION, "name": ANY}
_EXACT = {**_SELECTION, "adminAccess": ANY}


def _claim_spec(request: Schema) -> dict[str, Schema]:
    return _f(devices=_f(
        requests=ListOf(request),
        constraints=ListOf(_f("requests", "matchAttribute", "distinctAttribute")),
        config=ListOf(_f("requests", opaque=_OPAQUE))))


_V1_CLAIM = _claim_spec(_f("name", exactly=_EXACT, firstAvailable=ListOf(_SUB_REQUEST)))
_BETA1_CLAIM = _claim_spec({**_EXACT, "name": ANY, "firstAvailable": ListOf(_SUB_REQUEST)})


def _kinds(device: Schema, claim: Schema) -> dict[str, dict[str, Schema]]:
    return {
        "ResourceSlice": _object(_slice_spec(device)),
        "DeviceClass": _object(_DEVICE_CLASS_SPEC),
        "ResourceClaim": _object(claim),
        "ResourceClaimTemplate": _object(_f(metadata=META, spec=claim)),
    }


_V1 = _kinds({**_DEVICE_FIELDS, "name": ANY}, _V1_CLAIM)
_BETA1 = _kinds(_f("name", basic=_DEVICE_FIELDS), _BETA1_CLAIM)

# version -> kind -> schema
SCHEMAS: dict[str, dict[str, dict[str, Schema]]] = {"v1": _V1, "v1beta2": _V1, "v1beta1": _BETA1}
