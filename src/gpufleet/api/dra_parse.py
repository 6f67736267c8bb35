"""Parsers for the DRA kinds: ResourceSlice, DeviceClass, ResourceClaim, ResourceClaimTemplate (``resource.k8s.io``
``v1``, ``v1beta2`` and ``v1beta1``) into :mod:`gpufleet.api.dra_objects`.

Each walks its document through a :class:`~gpufleet.api.reader.FieldReader`, so a problem names the file, the line,
the object and the field, with a fix. What the API server's validation refuses is an error here too (a request
with both ``exactly`` and ``firstAvailable``, a slice naming no node selection or two, an attribute with two
values): such an object could not exist in a cluster. Fields the version does not have are warned about against
that version's schema (:mod:`gpufleet.api.dra_schemas`), and so are the fields gpufleet does not read.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from fractions import Fraction
from typing import Any, TypeVar, cast

from gpufleet.api.dra_objects import (
    DNS_SUBDOMAIN,
    DRA_GROUP,
    AllocatedDevice,
    ClaimAllocation,
    ClaimConfig,
    ClaimConsumer,
    ClaimSpec,
    CounterConsumption,
    CounterSet,
    Device,
    DeviceAttribute,
    DeviceClass,
    DeviceConstraint,
    DeviceRequest,
    DeviceSelection,
    DeviceSubRequest,
    DeviceTaint,
    DeviceToleration,
    NodeSelection,
    OpaqueConfig,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourcePool,
    ResourceSlice,
    qualified,
)
from gpufleet.api.dra_podclaims import DNS_LABEL
from gpufleet.api.dra_schemas import SCHEMAS
from gpufleet.api.errors import shown
from gpufleet.api.kinds import parse_meta
from gpufleet.api.reader import FieldReader
from gpufleet.api.workloadkinds.fields import check_schema

T = TypeVar("T")

# The API's own bounds (kubernetes/api resource/v1 types.go), checked as the API server checks them.
MAX_DEVICES_PER_SLICE = 128
MAX_ATTRIBUTES_AND_CAPACITIES = 32  # per device
MAX_REQUESTS = 32  # requests, constraints and config entries of one claim
MAX_SUB_REQUESTS = 8  # firstAvailable entries of one request
MAX_ALLOCATED_DEVICES = 32  # results of one allocation: a larger count can never be allocated
MAX_SELECTOR_BYTES = 10 * 1024
MAX_STRING_ATTRIBUTE = 64

_ATTRIBUTE_TYPES = ("int", "bool", "string", "version")
_LIST_ATTRIBUTE_TYPES = ("ints", "bools", "strings", "versions")
_SEMVER = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")
_NODE_SELECTIONS: tuple[NodeSelection, ...] = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")


def _version(r: FieldReader) -> str:
    return str(r.raw("apiVersion") or "").rpartition("/")[2]


def _check_fields(r: FieldReader, kind: str) -> str:
    """Warn about the fields ``kind`` does not have at the document's version; the version."""
    version = _version(r)
    schema = SCHEMAS.get(version, SCHEMAS["v1"]).get(kind)
    if schema is not None:
        check_schema(r, schema, kind)
    return version


def _qualified_name_ok(name: str) -> bool:
    """A QualifiedName: a C identifier of at most 32 characters, optionally after a DNS subdomain and '/'."""
    domain, sep, ident = name.rpartition("/")
    if sep and (len(domain) > 63 or not DNS_SUBDOMAIN.match(domain)):
        return False
    return _IDENTIFIER.match(ident) is not None


def _dns_label(r: FieldReader, key: str, value: str | None, what: str) -> str | None:
    if value is not None and not DNS_LABEL.match(value):
        r.error(f"{what} {shown(value)} is not a DNS label", key,
                fix="use at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit")
        return None
    return value


# ---- ResourceSlice -------------------------------------------------------------------------------------------------

def _value(entry: FieldReader, fix: str) -> Fraction | None:
    """An entry's ``value`` quantity (a capacity's, a counter's); a missing one is said."""
    q = entry.quantity("value")
    if q is None and not entry.has("value"):
        entry.error("missing required field value", "value", fix=fix)
    return q


def _counters(r: FieldReader, key: str) -> dict[str, Fraction]:
    """A map of counter name to ``{value: quantity}``."""
    section = r.obj(key)
    out: dict[str, Fraction] = {}
    if section is None:
        return out
    for name in section.value:
        entry = section.obj(str(name))
        q = _value(entry, "give the counter's amount, e.g. value: 40Gi") if entry is not None else None
        if q is not None:
            out[str(name)] = q
    return out


def _attribute(a: FieldReader) -> DeviceAttribute | None:
    given = [t for t in _ATTRIBUTE_TYPES if a.has(t)]
    if not given:
        if not any(a.has(t) for t in _LIST_ATTRIBUTE_TYPES):  # a list-typed one is said as left out by the schema
            a.error("an attribute needs one of int, bool, string or version", fix='e.g. {string: "H100"}')
        return None
    if len(given) > 1:
        a.error(f"an attribute has exactly one of int, bool, string or version, got {', '.join(given)}", given[1],
                fix=f"keep {given[0]} alone")
        return None
    kind = given[0]
    if kind == "int":
        number = a.integer("int")
        return DeviceAttribute("int", number) if number is not None else None
    if kind == "bool":
        if not isinstance(a.raw("bool"), bool):
            a.error(f"expected true or false, got {shown(a.raw('bool'))}", "bool", fix="write bool: true or false")
            return None
        return DeviceAttribute("bool", bool(a.raw("bool")))
    text = a.text(kind)
    if text is None:
        return None
    if len(text) > MAX_STRING_ATTRIBUTE:
        a.error(f"a {kind} attribute holds at most {MAX_STRING_ATTRIBUTE} characters, got {len(text)}", kind,
                fix="shorten the value")
        return None
    if kind == "version" and not _SEMVER.match(text):
        a.error(f"{shown(text)} is not a semantic version", kind, fix="write it like 1.2.3 (semver 2.0)")
        return None
    return DeviceAttribute(cast(Any, kind), text)


def _qualified_map(d: FieldReader, key: str, what: str, example: str, driver: str,
                   read: Callable[[FieldReader], T | None]) -> dict[str, T]:
    """A device's map by qualified name (``attributes``, ``capacity``), keyed fully qualified (bare names are the
    driver's); a bad name or entry is said and left out."""
    section = d.obj(key)
    out: dict[str, T] = {}
    if section is None:
        return out
    for raw_name in section.value:
        name = str(raw_name)
        if not _qualified_name_ok(name):
            section.error(f"{what} name {shown(name)} is not a qualified name", name,
                          fix=f"a C identifier of at most 32 characters, optionally after a domain and '/', e.g. "
                              f"{example}")
            continue
        entry = section.obj(name)
        value = read(entry) if entry is not None else None
        if value is not None:
            out[qualified(name, driver)] = value
    return out


def _attributes(d: FieldReader, driver: str) -> dict[str, DeviceAttribute]:
    return _qualified_map(d, "attributes", "attribute", "productName or resource.kubernetes.io/pcieRoot", driver,
                          _attribute)


def _capacity(d: FieldReader, driver: str) -> dict[str, Fraction]:
    return _qualified_map(d, "capacity", "capacity", "memory", driver,
                          lambda entry: _value(entry, "give the capacity, e.g. value: 80Gi"))


def _consumption(c: FieldReader) -> CounterConsumption | None:
    counter_set = c.text("counterSet", required=True)
    counters = _counters(c, "counters")
    if not c.has("counters"):
        c.error("missing required field counters", "counters", fix="list what the device takes from the set")
    return CounterConsumption(counter_set, counters) if counter_set else None


def _taint(t: FieldReader) -> DeviceTaint | None:
    key = t.text("key", required=True)
    effect = t.enum("effect", ("NoSchedule", "NoExecute", "None"), "NoSchedule")
    return DeviceTaint(key, t.text("value", "") or "", effect) if key else None


def _device(d: FieldReader, driver: str, beta1: bool) -> Device | None:
    name = _dns_label(d, "name", d.text("name", required=True), "device name")
    body: FieldReader | None = d
    if beta1:
        body = d.obj("basic", required=True)  # v1beta1: a device's fields are under basic
    if name is None or body is None:
        return None
    attributes = _attributes(body, driver)
    capacity = _capacity(body, driver)
    if len(attributes) + len(capacity) > MAX_ATTRIBUTES_AND_CAPACITIES:
        d.error(f"device {name} has {len(attributes) + len(capacity)} attributes and capacities; a device has at most "
                f"{MAX_ATTRIBUTES_AND_CAPACITIES}", "name", fix="publish fewer attributes")
        return None
    consumes = tuple(body.each("consumesCounters", _consumption))
    sets = [c.counter_set for c in consumes]
    if len(set(sets)) < len(sets):
        body.error("a device consumes from each counter set at most once", "consumesCounters",
                   fix="merge the entries of the same counterSet")
    return Device(name, attributes, capacity, consumes, tuple(body.each("taints", _taint)),
                  index=int(d.path[-1]) if d.path and isinstance(d.path[-1], int) else 0, line=d.where()[1])


def _counter_set(s: FieldReader) -> CounterSet | None:
    name = _dns_label(s, "name", s.text("name", required=True), "counter set name")
    if not s.has("counters"):
        s.error("missing required field counters", "counters",
                fix="give the set's counters, e.g. memory: {value: 80Gi}")
    counters = _counters(s, "counters")
    return CounterSet(name, counters) if name else None


def _node_selection(spec: FieldReader) -> NodeSelection | None:
    given = [k for k in _NODE_SELECTIONS
             if spec.has(k) and (k in ("nodeName", "nodeSelector") or spec.flag(k))]
    if len(given) == 1:
        return given[0]
    spec.error("a ResourceSlice sets exactly one of nodeName, nodeSelector, allNodes and perDeviceNodeSelection"
               + (f", got {', '.join(given)}" if given else ""), given[1] if given else "nodeName",
               fix="nodeName for devices local to one node (NVIDIA's driver sets it)")
    return None


def parse_resource_slice(r: FieldReader) -> ResourceSlice | None:
    version = _check_fields(r, "ResourceSlice")
    meta = parse_meta(r, namespaced=False)
    spec = r.obj("spec", required=True)
    if meta is None or spec is None:
        return None
    driver = spec.text("driver", required=True)
    if driver is not None and (len(driver) > 63 or not DNS_SUBDOMAIN.match(driver)):
        spec.error(f"driver {shown(driver)} is not a DNS subdomain of at most 63 characters", "driver",
                   fix="name the driver by its domain, e.g. gpu.nvidia.com")
        driver = None
    pool_r = spec.obj("pool", required=True)
    pool: ResourcePool | None = None
    if pool_r is not None:
        pool_name = pool_r.text("name", required=True)
        generation = pool_r.integer("generation", 0, minimum=0)
        count = pool_r.integer("resourceSliceCount", required=True, minimum=1)
        if pool_name is not None and (len(pool_name) > 253
                                      or not all(DNS_SUBDOMAIN.match(p) for p in pool_name.split("/"))):
            pool_r.error(f"pool name {shown(pool_name)} is not one or more DNS subdomains separated by '/'", "name",
                         fix="NVIDIA's driver names the pool after the node")
            pool_name = None
        if pool_name is not None and generation is not None and count is not None:
            pool = ResourcePool(pool_name, generation, count)
    selection = _node_selection(spec)
    node_name = spec.text("nodeName") if selection == "nodeName" else None
    listed = spec.raw("devices")
    if isinstance(listed, list) and len(listed) > MAX_DEVICES_PER_SLICE:
        spec.error(f"{len(listed)} devices; a ResourceSlice holds at most {MAX_DEVICES_PER_SLICE}", "devices",
                   fix="split the pool into more slices (and raise resourceSliceCount)")
        return None
    devices: list[Device] = []
    names: set[str] = set()
    for d in spec.items("devices"):
        device = _device(d, driver or "", version == "v1beta1")
        if device is None:
            continue
        if device.name in names:
            d.error(f"device {device.name} is listed twice", "name", fix="give every device of a pool its own name")
            continue
        names.add(device.name)
        devices.append(device)
    counter_sets = spec.each("sharedCounters", _counter_set)
    if len({s.name for s in counter_sets}) < len(counter_sets):
        spec.error("counter set names repeat", "sharedCounters", fix="give each counter set its own name")
    if driver is None or pool is None or selection is None:
        return None
    return ResourceSlice(meta, str(r.raw("apiVersion")), driver, pool, selection, node_name, tuple(devices),
                         tuple(counter_sets))


# ---- DeviceClass ---------------------------------------------------------------------------------------------------

def _selectors(r: FieldReader | None) -> tuple[str, ...]:
    out: list[str] = []
    if r is None:
        return ()
    for s in r.items("selectors"):
        cel = s.obj("cel", required=True)
        expression = cel.text("expression", required=True) if cel is not None else None
        if cel is None or expression is None:
            continue
        if len(expression.encode()) > MAX_SELECTOR_BYTES:
            cel.error(f"the expression is {len(expression.encode()):,} bytes long; at most {MAX_SELECTOR_BYTES:,}",
                      "expression", fix="shorten the expression")
            continue
        out.append(expression)
    return tuple(out)


def _opaque(r: FieldReader) -> OpaqueConfig | None:
    opaque = r.obj("opaque", required=True)
    if opaque is None:
        return None
    driver = opaque.text("driver", required=True)
    if not opaque.has("parameters"):
        opaque.error("missing required field parameters", "parameters",
                     fix="give the driver's configuration, e.g. {apiVersion: resource.nvidia.com/v1beta1, kind: "
                         "GpuConfig}")
    return OpaqueConfig(driver, opaque.raw("parameters")) if driver else None


def parse_device_class(r: FieldReader) -> DeviceClass | None:
    _check_fields(r, "DeviceClass")
    meta = parse_meta(r, namespaced=False)
    spec = r.obj("spec")
    if meta is None:
        return None
    # Pods asking this extended resource are placed on the class's devices where no device plugin offers it
    # (gpufleet.cluster.dra_claims.extended_need).
    extended = spec.text("extendedResourceName") if spec is not None else None
    config = tuple(spec.each("config", _opaque)) if spec is not None else ()
    return DeviceClass(meta, str(r.raw("apiVersion")), _selectors(spec), config, extended)


# ---- ResourceClaim and ResourceClaimTemplate -----------------------------------------------------------------------

def _toleration(t: FieldReader) -> DeviceToleration:
    operator = t.enum("operator", ("Equal", "Exists"), "Equal")
    effect = t.text("effect", "") or ""
    if effect and effect not in ("NoSchedule", "NoExecute", "None"):
        t.error(f"effect {shown(effect)} is not NoSchedule, NoExecute or None", "effect")
    return DeviceToleration(t.text("key", "") or "", operator, t.text("value", "") or "", effect,
                            t.integer("tolerationSeconds"))


def _selection(s: FieldReader, *, admin: bool) -> DeviceSelection | None:
    device_class = s.text("deviceClassName", required=True)
    mode = s.enum("allocationMode", ("ExactCount", "All"), "ExactCount")
    if mode == "All" and s.has("count"):
        s.error("count is for allocationMode ExactCount", "count", fix="drop count, or use allocationMode: ExactCount")
    count = s.integer("count", 1, minimum=1, maximum=MAX_ALLOCATED_DEVICES)
    if device_class is None or count is None:
        return None
    return DeviceSelection(device_class, _selectors(s), cast(Any, mode), count,
                           s.flag("adminAccess") if admin else False, tuple(s.each("tolerations", _toleration)))


def _sub_requests(q: FieldReader) -> tuple[DeviceSubRequest, ...]:
    listed = q.raw("firstAvailable")
    if isinstance(listed, list) and len(listed) > MAX_SUB_REQUESTS:
        q.error(f"{len(listed)} firstAvailable entries; a request lists at most {MAX_SUB_REQUESTS}", "firstAvailable",
                fix="keep the alternatives that matter most")
        return ()
    if isinstance(listed, list) and not listed:
        q.error("firstAvailable is empty", "firstAvailable", fix="list at least one alternative")
    out: list[DeviceSubRequest] = []
    for sub in q.items("firstAvailable"):
        name = _dns_label(sub, "name", sub.text("name", required=True), "subrequest name")
        selection = _selection(sub, admin=False)
        if name is None or selection is None:
            continue
        if any(s.name == name for s in out):
            sub.error(f"subrequest {name} is listed twice", "name", fix="give each alternative its own name")
            continue
        out.append(DeviceSubRequest(name, selection))
    return tuple(out)


def _request(q: FieldReader, beta1: bool) -> DeviceRequest | None:
    name = _dns_label(q, "name", q.text("name", required=True), "request name")
    if beta1:
        # v1beta1: exactly's fields inline; firstAvailable instead of them, never beside deviceClassName
        if q.has("firstAvailable"):
            if q.has("deviceClassName"):
                q.error("a request has deviceClassName or firstAvailable, not both", "deviceClassName",
                        fix="move deviceClassName into each firstAvailable entry")
                return None
            subs = _sub_requests(q)
            return DeviceRequest(name, None, subs) if name and subs else None
        selection = _selection(q, admin=True)
        return DeviceRequest(name, selection) if name and selection else None
    has_exact, has_first = q.has("exactly"), q.has("firstAvailable")
    if has_exact == has_first:
        q.error("a request has exactly one of exactly and firstAvailable" + (", not both" if has_exact else ""),
                "firstAvailable" if has_exact else "exactly",
                fix="exactly: {deviceClassName: gpu.nvidia.com} for one kind of device; firstAvailable for "
                    "alternatives")
        return None
    if has_exact:
        exact = q.obj("exactly")
        selection = _selection(exact, admin=True) if exact is not None else None
        return DeviceRequest(name, selection) if name and selection else None
    subs = _sub_requests(q)
    return DeviceRequest(name, None, subs) if name and subs else None


def _bounded(devices: FieldReader, key: str) -> bool:
    listed = devices.raw(key)
    if isinstance(listed, list) and len(listed) > MAX_REQUESTS:
        devices.error(f"{len(listed)} {key}; a claim has at most {MAX_REQUESTS}", key, fix=f"a claim lists at most "
                      f"{MAX_REQUESTS} {key}; split it into several claims")
        return False
    return True


def _known_requests(r: FieldReader, names: list[str], requests: tuple[DeviceRequest, ...]) -> None:
    """Every name a constraint or config lists is a request of the claim (or ``request/subrequest``)."""
    known = {q.name for q in requests} | {f"{q.name}/{s.name}" for q in requests for s in q.first_available}
    for i, name in enumerate(names):
        if name not in known:
            r.error(f"{name} is not a request of this claim", "requests", i,
                    fix="name one of " + (", ".join(sorted(known)) or "the claim's requests"))


def _constraint(c: FieldReader, requests: tuple[DeviceRequest, ...]) -> DeviceConstraint | None:
    names = c.string_list("requests")
    _known_requests(c, names, requests)
    match, distinct = c.text("matchAttribute"), c.text("distinctAttribute")
    if (match is None) == (distinct is None):
        c.error("a constraint needs exactly one of matchAttribute and distinctAttribute",
                "distinctAttribute" if match is not None else "matchAttribute",
                fix="e.g. matchAttribute: resource.kubernetes.io/pcieRoot (all devices on one PCIe root) or "
                    "distinctAttribute: resource.kubernetes.io/pcieRoot (each on its own)")
        return None
    field_name, attribute = ("matchAttribute", match) if match is not None else ("distinctAttribute", distinct)
    assert attribute is not None
    if "/" not in attribute or not _qualified_name_ok(attribute):
        c.error(f"{field_name} {shown(attribute)} is not a fully qualified attribute name", field_name,
                fix="include the domain, e.g. gpu.nvidia.com/productName or resource.kubernetes.io/pcieRoot")
        return None
    return DeviceConstraint(tuple(names), match, distinct)


def parse_claim_spec(spec: FieldReader | None, beta1: bool) -> ClaimSpec:
    devices = spec.obj("devices") if spec is not None else None
    if devices is None:
        return ClaimSpec()
    if not all(_bounded(devices, key) for key in ("requests", "constraints", "config")):
        return ClaimSpec()
    requests: list[DeviceRequest] = []
    for q in devices.items("requests"):
        request = _request(q, beta1)
        if request is None:
            continue
        if any(other.name == request.name for other in requests):
            q.error(f"request {request.name} is listed twice", "name", fix="give each request its own name")
            continue
        requests.append(request)
    made = tuple(requests)
    constraints = tuple(devices.each("constraints", lambda c: _constraint(c, made)))
    config: list[ClaimConfig] = []
    for c in devices.items("config"):
        names = c.string_list("requests")
        _known_requests(c, names, made)
        opaque = _opaque(c)
        if opaque is not None:
            config.append(ClaimConfig(tuple(names), opaque))
    return ClaimSpec(made, constraints, tuple(config))


def _allocation(status: FieldReader) -> ClaimAllocation | None:
    alloc = status.obj("allocation")
    if alloc is None:
        return None
    results: list[AllocatedDevice] = []
    devices = alloc.obj("devices")
    for x in devices.items("results") if devices is not None else ():
        fields = [x.text(k, required=True) for k in ("request", "driver", "pool", "device")]
        if all(f is not None for f in fields):
            request, driver, pool, device = (str(f) for f in fields)
            results.append(AllocatedDevice(request, driver, pool, device))
    return ClaimAllocation(tuple(results), _allocated_node(alloc.raw("nodeSelector")))


def _allocated_node(selector: Any) -> str | None:
    """The node an allocation's nodeSelector names, in the one shape the allocator writes for node-local devices
    (a single term ``matchFields: [{key: metadata.name, operator: In, values: [<node>]}]``)."""
    terms = selector.get("nodeSelectorTerms") if isinstance(selector, dict) else None
    if not isinstance(terms, list) or len(terms) != 1 or not isinstance(terms[0], dict):
        return None
    fields = terms[0].get("matchFields")
    if not isinstance(fields, list) or len(fields) != 1 or not isinstance(fields[0], dict):
        return None
    field = fields[0]
    values = field.get("values")
    if field.get("key") == "metadata.name" and field.get("operator") == "In" and isinstance(values, list) \
            and len(values) == 1 and isinstance(values[0], str):
        return values[0]
    return None


def _consumer(c: FieldReader) -> ClaimConsumer | None:
    resource = c.text("resource", required=True)
    name = c.text("name", required=True)
    if resource is None or name is None:
        return None
    return ClaimConsumer(resource, name, c.text("uid"), c.text("apiGroup", "") or "")


def parse_resource_claim(r: FieldReader) -> ResourceClaim | None:
    version = _check_fields(r, "ResourceClaim")
    meta = parse_meta(r, namespaced=True)
    spec = r.obj("spec", required=True)
    if meta is None or spec is None:
        return None
    claim = parse_claim_spec(spec, version == "v1beta1")
    status = r.obj("status")
    allocation = _allocation(status) if status is not None else None
    reserved = tuple(status.each("reservedFor", _consumer)) if status is not None else ()
    return ResourceClaim(meta, str(r.raw("apiVersion")), claim, allocation, reserved)


def parse_resource_claim_template(r: FieldReader) -> ResourceClaimTemplate | None:
    version = _check_fields(r, "ResourceClaimTemplate")
    meta = parse_meta(r, namespaced=True)
    spec = r.obj("spec", required=True)
    if meta is None or spec is None:
        return None
    claim_meta = spec.obj("metadata")
    inner = spec.obj("spec", required=True)
    if inner is None:
        return None
    labels = claim_meta.string_map("labels") if claim_meta is not None else {}
    annotations = claim_meta.string_map("annotations") if claim_meta is not None else {}
    return ResourceClaimTemplate(meta, str(r.raw("apiVersion")), parse_claim_spec(inner, version == "v1beta1"),
                                 labels, annotations)


PARSERS: dict[tuple[str, str], Callable[[FieldReader], Any]] = {
    (DRA_GROUP, "ResourceSlice"): parse_resource_slice,
    (DRA_GROUP, "DeviceClass"): parse_device_class,
    (DRA_GROUP, "ResourceClaim"): parse_resource_claim,
    (DRA_GROUP, "ResourceClaimTemplate"): parse_resource_claim_template,
}
