"""A pod's DRA claims turned into what placement places: GPU demands, each with the devices allowed to meet it.

gpufleet places a claimed GPU as it places any GPU (the same filters, scores, gangs, quotas and fragmentation),
so the claims of a pod become one :class:`~gpufleet.api.objects.GpuDemand` (``count`` whole GPUs, or ``count``
MIG devices of one profile) together with the DRA devices that may meet it. How:

1. each claim comes from its template (one claim per pod, named as the resourceclaim controller names it) or is
   the claim the pod names;
2. each request's devices are those every selector of its DeviceClass and of the request match (CEL, evaluated
   once per device and expression); a ``firstAvailable`` request tries its entries in the user's order, so a pod
   has one :class:`DraChoice` per combination of entries, best first, and placement takes the first that fits
   anywhere (as kube-scheduler does since 1.35, whatever its scorers prefer);
3. a ``matchAttribute`` constraint splits the allowed devices into groups of one value: the devices a pod gets
   all come from one group; ``allocationMode: All`` takes a whole pool (node) of matching devices, all free.

What a pod asks that this cannot express is refused with a reason naming the claim and the request (the pod stays
pending with it, never placed without its devices): ``adminAccess``, ``All`` beside other requests, requests of one
pod that select different devices or mix whole GPUs with MIG devices, constraints that cover only some requests,
devices that are not NVIDIA GPUs or MIG devices, claims allocated to another pod before or that several pods share.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import lru_cache
from itertools import product
from typing import TYPE_CHECKING, Literal

from gpufleet.api.dra_need import ClaimRequest, DeviceKey, DistinctValues, DraChoice, DraNeed
from gpufleet.api.dra_nodes import complete_pools
from gpufleet.api.dra_objects import (
    ClaimSpec,
    Device,
    DeviceClass,
    DeviceSelection,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)
from gpufleet.api.errors import Problems
from gpufleet.api.manifests import Manifests
from gpufleet.api.objects import GpuDemand, Node, PodResourceClaim, PodTemplate
from gpufleet.cluster.dra_selectors import AttributeValue, SelectorError, device_activation, matches, parse_semver
from gpufleet.gpu.constants import GPU
from gpufleet.gpu.mig import resource_name_for_profile

if TYPE_CHECKING:
    from gpufleet.cluster.workloads import Workload

TERMINAL_PHASES = ("Succeeded", "Failed")
NO_DRA_OBJECTS = ("its DRA claims cannot be planned: the input has no DRA objects (ResourceSlices, DeviceClasses, "
                  "ResourceClaimTemplates, ResourceClaims); live, the API server does not serve resource.k8s.io or "
                  "the scheduler may not list it (deploy/rbac.yaml)")
MAX_CHOICES = 64  # ways to meet a pod's claims kept, in the user's order
MAX_COMBINATIONS = 512  # combinations of firstAvailable entries looked at per pod



def device_key_text(key: DeviceKey) -> str:
    return "/".join(key)


@dataclass(frozen=True, slots=True)
class PublishedDevice:
    """A device of a complete pool, with the node it is on and what gpufleet plans it as: a whole GPU, or a MIG
    device of ``profile`` (None: neither, which gpufleet does not plan)."""

    node: str
    driver: str
    pool: str
    device: Device
    kind: Literal["whole", "mig"] | None
    profile: str | None = None
    model: str | None = None  # the GPU model of its node, when the node's DRA GPUs are all of one model

    @property
    def key(self) -> DeviceKey:
        return self.driver, self.pool, self.device.name


@dataclass(frozen=True, slots=True)
class Matched:
    """What the devices some selectors match are, as a claim's resolution reads them (worked out once per list of
    selectors: thousands of pods from one template ask the same)."""

    any: bool
    failed: str | None  # the first evaluation problem met
    keys: frozenset[DeviceKey]
    kinds: frozenset[tuple[Literal["whole", "mig"] | None, str | None]]
    every: bool  # every device of their one kind in the fleet
    # Every device of their one kind on the nodes of these GPU models, and only those (a claim that selects a model):
    # placement may then keep the pod to those models' nodes, by node class, instead of naming the devices.
    models: tuple[str, ...] = ()


@dataclass(slots=True)
class DraCatalog:
    """The DRA objects of the input, and the devices of its complete pools."""

    classes: Mapping[str, DeviceClass] = field(default_factory=dict)
    templates: Mapping[str, ResourceClaimTemplate] = field(default_factory=dict)
    claims: Mapping[str, ResourceClaim] = field(default_factory=dict)
    devices: Sequence[PublishedDevice] = ()
    _matches: dict[tuple[str, object], bool] = field(default_factory=dict)
    _failures: dict[str, str] = field(default_factory=dict)
    _every: dict[tuple[str | None, str | None], frozenset[DeviceKey]] = field(default_factory=dict)
    _by_key: dict[DeviceKey, PublishedDevice] | None = None
    # Per list of selectors: what matching() found, and the same devices' keys as one shared set (thousands of pods
    # from one template ask the same thing; one set also hashes once as a placement key).
    _found: dict[tuple[str, ...], Matched] = field(default_factory=dict)
    _distinct: dict[tuple[str, frozenset[DeviceKey]], DistinctValues] = field(default_factory=dict)

    def by_key(self) -> dict[DeviceKey, PublishedDevice]:
        """The devices by their identity (made once)."""
        if self._by_key is None or len(self._by_key) != len(self.devices):
            self._by_key = {d.key: d for d in self.devices}
        return self._by_key

    def every(self, kind: str | None, profile: str | None) -> frozenset[DeviceKey]:
        """Every device of the fleet that gpufleet plans as ``kind`` (and ``profile``)."""
        hit = self._every.get((kind, profile))
        if hit is None:
            hit = self._every[(kind, profile)] = frozenset(d.key for d in self.devices
                                                           if (d.kind, d.profile) == (kind, profile))
        return hit

    def matching_keys(self, selectors: Sequence[str]) -> Matched:
        """:meth:`matching`, remembered per list of selectors, with what a claim's resolution reads of it."""
        key = tuple(selectors)
        hit = self._found.get(key)
        if hit is None:
            found, failed = self.matching(selectors)
            kinds = frozenset((d.kind, d.profile) for d in found)
            keys = frozenset(d.key for d in found)
            every = len(kinds) == 1 and keys == self.every(*next(iter(kinds)))
            models = () if every or len(kinds) != 1 else self._models_covering(keys, *next(iter(kinds)))
            hit = self._found[key] = Matched(bool(found), failed, keys, kinds, every, models)
        return hit

    def _models_covering(self, keys: frozenset[DeviceKey], kind: str | None, profile: str | None
                         ) -> tuple[str, ...]:
        """The GPU models whose nodes' devices of ``kind`` (and ``profile``) are exactly ``keys``; () when none
        are (a device on a node of several models, or a model some of whose devices are left out)."""
        by_key = self.by_key()
        models = {by_key[k].model for k in keys}
        if not models or None in models:
            return ()
        covered = frozenset(d.key for d in self.devices if (d.kind, d.profile) == (kind, profile)
                            and d.model in models)
        return tuple(sorted(m for m in models if m is not None)) if covered == keys else ()

    def distinct_values(self, attribute: str, devices: frozenset[DeviceKey]) -> DistinctValues:
        """Each of ``devices``' value of ``attribute`` (those without it left out), one object per attribute and
        set of devices (pods asking the same share it)."""
        memo = (attribute, devices)
        hit = self._distinct.get(memo)
        if hit is None:
            by_key = self.by_key()
            values: dict[DeviceKey, object] = {}
            for key in devices:
                found = by_key[key].device.attributes.get(attribute)
                if found is not None:
                    values[key] = (found.type, found.value)
            hit = self._distinct[memo] = DistinctValues(attribute, values)
        return hit

    def matching(self, selectors: Sequence[str]) -> tuple[list[PublishedDevice], str | None]:
        """The devices every selector matches, and the first evaluation problem met (a device a selector fails on
        is not matched, as kube-scheduler treats it)."""
        found: list[PublishedDevice] = []
        problem: str | None = None
        for d in self.devices:
            ok = True
            for expression in selectors:
                # Devices that agree on everything the expression reads get the same answer: evaluated once
                # (cel-python takes a fraction of a millisecond per device; a fleet's GPUs differ in little else
                # than their uuid and PCI address, which few selectors read).
                memo = (expression, _content_key(expression, d))
                cached = self._matches.get(memo)
                if cached is None:
                    try:
                        cached = matches(expression, _activation(d))
                    except SelectorError as e:
                        cached = False
                        self._failures.setdefault(expression, f"selector {expression!r} on device "
                                                              f"{device_key_text(d.key)}: {e}")
                    self._matches[memo] = cached
                if not cached:
                    problem = problem or self._failures.get(expression)
                    ok = False
                    break
            if ok:
                found.append(d)
        return found, problem


# The only ways an expression may mention the device for the cache to key on what it reads: device.driver,
# device.allowMultipleAllocations, and device.attributes["domain"].name / device.capacity["domain"].name with no
# call after the name (a macro or method on the domain's map reads the whole map).
_DEVICE = re.compile(r"\bdevice\b")
_NAMED = re.compile(r"""device\.(attributes|capacity)\[(['"])([^'"\\]+)\2\]\.([A-Za-z_][A-Za-z0-9_]*)\b(?!\s*\()""")
_PLAIN = re.compile(r"device\.(driver|allowMultipleAllocations)\b(?!\s*\()")


@lru_cache(maxsize=1024)
def _reads(expression: str) -> frozenset[tuple[str, str]] | None:
    """The (section, qualified name) pairs the expression reads, or None when that cannot be told for sure (any
    mention of ``device`` in another form: spaces, brackets, a whole map, a macro): then every attribute and
    capacity counts. Conservative by design: a wrong key would give a device another device's answer."""
    named = list(_NAMED.finditer(expression))
    plain = list(_PLAIN.finditer(expression))
    starts = {m.start() for m in named} | {m.start() for m in plain}
    if any(m.start() not in starts for m in _DEVICE.finditer(expression)):
        return None
    return frozenset((m.group(1), f"{m.group(3)}/{m.group(4)}") for m in named)


def _content_key(expression: str, d: PublishedDevice) -> object:
    """What decides the expression's answer on ``d``: the driver and the attributes and capacities it reads (all
    of them when that cannot be told)."""
    reads = _reads(expression)
    attributes, capacity = d.device.attributes, d.device.capacity
    if reads is None:
        return (d.driver, tuple(sorted((k, a.type, a.value) for k, a in attributes.items())),
                tuple(sorted(capacity.items())))
    picked: list[tuple[str, str, object]] = []
    for section, name in sorted(reads):
        if section == "attributes":
            a = attributes.get(name)
            picked.append((section, name, None if a is None else (a.type, a.value)))
        else:
            picked.append((section, name, capacity.get(name)))
    return (d.driver, tuple(picked))


def _activation(d: PublishedDevice) -> dict[str, object]:
    attributes: dict[str, AttributeValue] = {}
    for name, a in d.device.attributes.items():
        if a.type == "version" and isinstance(a.value, str):
            try:
                attributes[name] = parse_semver(a.value)
            except SelectorError:
                continue  # not a version: the parser said so; the attribute is left out of CEL
        else:
            attributes[name] = a.value
    capacity: dict[str, Fraction] = dict(d.device.capacity)
    return device_activation(d.driver, attributes, capacity)


_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the letters Kubernetes' generateName suffixes use


def generated_claim_name(pod: str, claim: str, seed: str) -> str:
    """The name the resourceclaim controller gives the claim it makes from a template for ``pod``: ``<pod>-<claim>-``
    cut to 58 characters, then five random letters; here the letters come from ``seed`` so that a plan is
    reproducible (the live cluster's name is read back from the pod's status)."""
    base = f"{pod}-{claim}-"[:58]
    digest = hashlib.sha256(seed.encode()).digest()
    return base + "".join(_NAME_ALPHABET[b % len(_NAME_ALPHABET)] for b in digest[:5])


@dataclass(frozen=True, slots=True)
class _Awaited:
    """A claim the pod needs that does not exist yet, live: why it waits (DraNeed.awaiting)."""

    why: str


def _claim_spec(namespace: str, pod: str, ref: PodResourceClaim, catalog: DraCatalog,
                seed: str, live: bool = False) -> tuple[str, ClaimSpec] | str | _Awaited:
    if ref.resource_claim_template_name is not None:
        if live and (ref.generated_name is None or f"{namespace}/{ref.generated_name}" not in catalog.claims):
            # Live, the claim must exist to be allocated: the resourceclaim controller makes it, and the pod's
            # status names it (kube-scheduler's PreEnqueue waits the same way).
            return _Awaited(f"claim {ref.name}: waiting for the resourceclaim controller to create the claim from "
                            f"ResourceClaimTemplate {namespace}/{ref.resource_claim_template_name}")
        if ref.generated_name is not None and f"{namespace}/{ref.generated_name}" in catalog.claims:
            made = catalog.claims[f"{namespace}/{ref.generated_name}"]
            if made.allocation is not None:
                return (f"claim {made.key} is already allocated; gpufleet does not plan pending pods on claims "
                        "allocated before (not implemented)")
            return made.key, made.spec
        key = f"{namespace}/{ref.resource_claim_template_name}"
        template = catalog.templates.get(key)
        if template is None:
            return (f"claim {ref.name}: ResourceClaimTemplate {key} is not in the input; add it, or name an existing "
                    "claim (resourceClaimName)")
        name = ref.generated_name or generated_claim_name(pod, ref.name, seed)
        return f"{namespace}/{name}", template.spec
    key = f"{namespace}/{ref.resource_claim_name}"
    claim = catalog.claims.get(key)
    if claim is None:
        if live:  # (created after the pod: kube-scheduler's PreEnqueue waits for it too)
            return _Awaited(f"claim {ref.name}: waiting for ResourceClaim {key} to be created")
        return f"claim {ref.name}: ResourceClaim {key} is not in the input; add it"
    if claim.allocation is not None:
        return (f"claim {key} is already allocated; gpufleet does not plan pods on claims allocated before "
                "(not implemented)")
    return key, claim.spec


@dataclass(frozen=True, slots=True)
class _Option:
    """One way to meet one request: what it is called in results, its devices, how many, and of what kind."""

    request: str
    devices: frozenset[DeviceKey]
    count: int
    kind: Literal["whole", "mig"]
    profile: str | None
    every: bool = False  # its devices are every device of its kind in the fleet
    models: tuple[str, ...] = ()  # its devices are every device of its kind on these models' nodes (Matched.models)
    # allocationMode All: every matching device of one pool, which must all be free: the pools of one size
    pools: tuple[frozenset[DeviceKey], ...] = ()


def claimed_demand(kind: Literal["whole", "mig"], profile: str | None, count: int) -> GpuDemand:
    """The demand of ``count`` claimed devices, named by the resource the device plugin would advertise them as
    (what DRA nodes' resources count them under, and what the scorers read)."""
    if kind == "whole":
        return GpuDemand(kind="gpu", count=count, resource=GPU)
    return GpuDemand(kind="mig", count=count, resource=resource_name_for_profile(profile or ""), mig_profile=profile)


def _options(claim: str, request_name: str, selections: Sequence[tuple[str, DeviceSelection]],
             catalog: DraCatalog) -> list[_Option] | str:
    out: list[_Option] = []
    problems: list[str] = []
    where = f"claim {claim} request {request_name}"
    for name, s in selections:
        if s.admin_access:
            problems.append(f"{where}: adminAccess is not planned by gpufleet (not implemented)")
            continue
        device_class = catalog.classes.get(s.device_class_name)
        if device_class is None:
            problems.append(f"{where}: DeviceClass {s.device_class_name} is not in the input; add it")
            continue
        matched = catalog.matching_keys(device_class.selectors + s.selectors)
        failed, kinds = matched.failed, set(matched.kinds)
        if not matched.any:
            problems.append(f"{where}: no device in the cluster matches DeviceClass {s.device_class_name} and the "
                            "request's selectors" + (f" ({failed})" if failed else ""))
            continue
        if len(kinds) > 1 or None in {k for k, _ in kinds}:
            problems.append(f"{where}: its devices are of several kinds ({_kinds_text(kinds)}); gpufleet plans a "
                            "request of whole NVIDIA GPUs or of MIG devices of one profile (not implemented "
                            "otherwise); add a selector on the device type or profile")
            continue
        (kind, profile), = kinds
        assert kind is not None
        if s.allocation_mode == "All":
            out += _all_options(name, matched.keys, kind, profile)
        else:
            out.append(_Option(name, matched.keys, s.count, kind, profile, matched.every, matched.models))
    if not out:
        return "; ".join(problems) or f"{where}: it asks for nothing"
    return out


def _all_options(name: str, keys: frozenset[DeviceKey], kind: Literal["whole", "mig"],
                 profile: str | None) -> list[_Option]:
    """allocationMode All: the request takes every matching device of the pool (the node) it lands on, and fails
    when one of them is taken. One option per pool size, smallest first: its count is that size, and its devices
    are the pools of that size, each a group the pod must take whole."""
    pools: dict[str, set[DeviceKey]] = {}
    for key in keys:
        pools.setdefault(key[1], set()).add(key)
    by_size: dict[int, list[frozenset[DeviceKey]]] = {}
    for pool in sorted(pools):
        by_size.setdefault(len(pools[pool]), []).append(frozenset(pools[pool]))
    return [_Option(name, keys, size, kind, profile, pools=tuple(groups)) for size, groups in sorted(by_size.items())]


def _kinds_text(kinds: set[tuple[Literal["whole", "mig"] | None, str | None]]) -> str:
    words = sorted("MIG " + (p or "?") if k == "mig" else "whole GPU" if k == "whole" else "not a GPU"
                   for k, p in kinds)
    return ", ".join(words)


def held_claims(namespace: str, refs: Sequence[PodResourceClaim], catalog: DraCatalog) -> DraNeed:
    """What a pod bound to a node holds through its claims: the devices their allocations name (one choice, those
    devices exactly), so that a snapshot's running pods keep their devices in a plan. A claim that is not in the
    input or not allocated leaves the pod holding no claimed device, said."""
    results: list[tuple[str, str, DeviceKey]] = []  # (claim, request, device)
    for ref in refs:
        name = ref.resource_claim_name or ref.generated_name
        claim = catalog.claims.get(f"{namespace}/{name}") if name else None
        if claim is None or claim.allocation is None:
            what = f"claim {namespace}/{name}" if name else f"the claim made from template {ref.name}"
            return DraNeed((), problem=f"{what} of this running pod is not in the input or not allocated: the "
                                       "devices it holds are not known, so none is counted")
        results += [(claim.key, d.request, (d.driver, d.pool, d.device)) for d in claim.allocation.devices]
    by_key = catalog.by_key()
    kinds = {(by_key[k].kind, by_key[k].profile) if k in by_key else (None, None) for _, _, k in results}
    claims = tuple(dict.fromkeys(c for c, _, _ in results))
    if not results or len(kinds) != 1 or None in {k for k, _ in kinds}:
        return DraNeed(claims, problem="the devices its claims hold are not all whole GPUs or MIG devices of one "
                                       "profile of the input's ResourceSlices: they are not counted")
    (kind, profile), = kinds
    assert kind is not None  # refused above
    demand = claimed_demand(kind, profile, len(results))
    requests = tuple(ClaimRequest(c, r, 1) for c, r, _ in results)
    return DraNeed(claims, (DraChoice(demand, (frozenset(k for _, _, k in results),), requests),))


def _reserved_for(namespace: str, pod: str, refs: Sequence[PodResourceClaim], catalog: DraCatalog) -> bool:
    """Whether every claim of the pod exists, is allocated and is reserved for it."""
    for ref in refs:
        name = ref.resource_claim_name or ref.generated_name
        claim = catalog.claims.get(f"{namespace}/{name}") if name else None
        if claim is None or claim.allocation is None or all(c.name != pod for c in claim.reserved_for):
            return False
    return bool(refs)


def resolve_pod_claims(namespace: str, pod: str, refs: Sequence[PodResourceClaim], catalog: DraCatalog,
                       shared: Mapping[str, int] | None = None, *, live: bool = False) -> DraNeed:
    """The pod's claims resolved into choices (or a problem). ``shared``: how many pods name each claim
    (namespace/name), for the refusal of claims several pods share."""
    claim_names: list[str] = []
    per_request: list[tuple[str, list[_Option]]] = []
    constraints: list[tuple[str, tuple[str, ...], str]] = []  # matchAttribute: (claim, requests, attribute)
    distinct: list[tuple[str, tuple[str, ...], str]] = []  # distinctAttribute, the same way
    for ref in refs:
        resolved = _claim_spec(namespace, pod, ref, catalog, f"{namespace}/{pod}/{ref.name}", live)
        if isinstance(resolved, _Awaited):
            return DraNeed(tuple(claim_names), problem=resolved.why, awaiting=True)
        if isinstance(resolved, str):
            return DraNeed(tuple(claim_names), problem=resolved)
        claim, spec = resolved
        if shared is not None and ref.resource_claim_name is not None and shared.get(claim, 0) > 1:
            return DraNeed(tuple(claim_names), problem=(
                f"claim {claim} is named by {shared[claim]} pods; gpufleet does not plan a claim several pods "
                "share (not implemented)"))
        claim_names.append(claim)
        for q in spec.requests:
            if q.exactly is not None:
                options = _options(claim, q.name, [(q.name, q.exactly)], catalog)
            else:
                options = _options(claim, q.name, [(f"{q.name}/{s.name}", s.selection) for s in q.first_available],
                                   catalog)
            if isinstance(options, str):
                return DraNeed(tuple(claim_names), problem=options)
            per_request.append((claim, options))
        for c in spec.constraints:
            covered = c.requests or tuple(q.name for q in spec.requests)
            if c.match_attribute is not None:
                constraints.append((claim, covered, c.match_attribute))
            elif c.distinct_attribute is not None:
                distinct.append((claim, covered, c.distinct_attribute))
    choices: list[DraChoice] = []
    problem: str | None = None
    # Combinations tried, successes or not, are bounded: 32 requests of 8 entries each are 8**32 combinations.
    for tried, combo in enumerate(product(*(options for _, options in per_request))):
        if len(choices) >= MAX_CHOICES or tried >= MAX_COMBINATIONS:
            break
        made = _choice([(claim, o) for (claim, _), o in zip(per_request, combo, strict=True)], constraints, catalog,
                       distinct)
        if isinstance(made, str):
            problem = problem or made
        else:
            choices.append(made)
    if not choices:
        if problem is None:
            problem = (f"none of the first {MAX_COMBINATIONS} combinations of the claims' firstAvailable entries "
                       "can be planned" if per_request else "the claims ask for no device")
        return DraNeed(tuple(claim_names), problem=problem)
    return DraNeed(tuple(claim_names), tuple(choices))


def _one_scope(picked: Sequence[tuple[str, _Option]], constraints: Sequence[tuple[str, tuple[str, ...], str]]) -> bool:
    """Whether the constraints cover every request of the pod and come from one claim (the one scope planned)."""
    names = {(claim, o.request.split("/")[0]) for claim, o in picked}
    covered = {(claim, r) for claim, requests, _ in constraints for r in requests}
    return covered & names == names and len({claim for claim, _, _ in constraints}) <= 1


def _choice(picked: Sequence[tuple[str, _Option]], constraints: Sequence[tuple[str, tuple[str, ...], str]],
            catalog: DraCatalog, distinct: Sequence[tuple[str, tuple[str, ...], str]] = ()) -> DraChoice | str:
    first_claim, first = picked[0]
    for claim, o in picked[1:]:
        if (o.kind, o.profile) != (first.kind, first.profile):
            return (f"claim {claim} request {o.request} and claim {first_claim} request {first.request} ask for "
                    "devices of different kinds; gpufleet plans one kind of device per pod (not implemented)")
        if o.devices is not first.devices and o.devices != first.devices:
            return (f"claim {claim} request {o.request} and claim {first_claim} request {first.request} select "
                    "different devices; gpufleet plans the requests of one pod on one set of devices (not "
                    "implemented)")
    count = sum(o.count for _, o in picked)
    if any(o.pools for _, o in picked):
        if len(picked) > 1 or constraints or distinct:
            return (f"claim {first_claim} request {first.request}: allocationMode All beside other requests or "
                    "constraints in one pod is not planned by gpufleet (not implemented)")
        return DraChoice(claimed_demand(first.kind, first.profile, count), first.pools,
                         (ClaimRequest(first_claim, first.request, count),))
    groups: tuple[frozenset[DeviceKey], ...] = (first.devices,)
    models: tuple[str, ...] = ()
    if first.every:
        # Every DRA device of its kind: no restriction to carry (placement keeps a claiming pod on DRA nodes'
        # devices anyway), so it is placed like any other pod, by node class rather than node by node.
        groups = ()
    elif first.models and not constraints and not distinct:
        # Every device of its kind on some models' nodes (a selector on the product): the GPU model filter keeps
        # the pod to those nodes by node class, as a device-plugin pod naming its models.
        groups, models = (), first.models
    if constraints:
        if not _one_scope(picked, constraints):
            return ("a matchAttribute constraint covers only some of the pod's requests, or several claims carry "
                    "constraints; gpufleet plans one constraint scope per pod (not implemented)")
        groups = _split(first.devices, [a for _, _, a in constraints], catalog)
        if not groups:
            return (f"no device of claim {first_claim} request {first.request} carries "
                    + ", ".join(sorted({a for _, _, a in constraints})))
    spread: DistinctValues | None = None
    if distinct:
        attributes = sorted({a for _, _, a in distinct})
        if not _one_scope(picked, distinct) or len(attributes) > 1:
            return ("a distinctAttribute constraint covers only some of the pod's requests, several claims carry "
                    "them, or they name several attributes; gpufleet plans one distinctAttribute over all of a "
                    "pod's requests (not implemented)")
        spread = catalog.distinct_values(attributes[0], first.devices)
        # the devices without the attribute cannot meet the constraint: groups keep those that have it
        has = spread.values.keys()
        groups = tuple(g if g <= has else frozenset(g & has) for g in (groups or (first.devices,)))
        values = {spread.values[k] for g in groups for k in g}
        if len(values) < count:
            return (f"claim {first_claim} request {first.request}: its devices have {len(values)} distinct "
                    f"value(s) of {attributes[0]}, fewer than the {count} devices distinctAttribute spreads")
    if first.kind == "whole":
        demand = claimed_demand("whole", None, count)
    else:
        demand = claimed_demand("mig", first.profile, count)
    if models:
        demand = replace(demand, models=models)
    return DraChoice(demand, groups, tuple(ClaimRequest(claim, o.request, o.count) for claim, o in picked),
                     distinct=spread)


def _split(devices: frozenset[DeviceKey], attributes: Sequence[str],
           catalog: DraCatalog) -> tuple[frozenset[DeviceKey], ...]:
    """``devices`` grouped by their values of every attribute (a device without one of them is in no group)."""
    by_key = catalog.by_key()
    groups: dict[tuple[object, ...], set[DeviceKey]] = {}
    for key in devices:
        d = by_key[key]
        values = []
        for a in attributes:
            found = d.device.attributes.get(a)
            if found is None:
                break
            values.append((found.type, found.value))
        else:
            groups.setdefault(tuple(values), set()).add(key)
    return tuple(frozenset(g) for _, g in sorted(groups.items(), key=lambda kv: repr(kv[0])))


def pods_per_claim(entries: Iterable[tuple[str, Sequence[PodResourceClaim]]]) -> dict[str, int]:
    """How many pods name each claim (namespace/name), from (namespace, claims) per pod."""
    out: dict[str, int] = {}
    for namespace, refs in entries:
        for ref in refs:
            if ref.resource_claim_name is not None:
                key = f"{namespace}/{ref.resource_claim_name}"
                out[key] = out.get(key, 0) + 1
    return out


# ---- the input's claims, resolved for every pod ----------------------------------------------------------------

def published_devices(nodes: Sequence[Node], slices: Sequence[ResourceSlice]) -> list[PublishedDevice]:
    """The devices of the complete pools that are on the input's nodes, each with what gpufleet plans it as (the
    node's DRA GPUs say which device is a whole GPU and which a MIG device of which profile). The pools' problems
    were said when the nodes got their GPUs (gpufleet.api.dra_nodes); they are not said again here."""
    if not slices:
        return []
    kinds: dict[DeviceKey, tuple[Literal["whole", "mig"], str | None]] = {}
    models: dict[str, str | None] = {}  # node -> the model of its DRA GPUs, when one
    for node in nodes:
        found = {g.model for g in node.dra_gpus}
        models[node.name] = found.pop() if len(found) == 1 else None
        for g in node.dra_gpus:
            if g.device is not None:
                kinds[(g.driver, g.pool, g.device)] = ("whole", None)
            for m in (*g.mig, *g.partitions):
                kinds[(g.driver, g.pool, m.device)] = ("mig", m.profile)
    named = {n.name for n in nodes}
    out: list[PublishedDevice] = []
    for pool in complete_pools(slices, Problems()):
        for s in pool.slices:
            if s.node_selection != "nodeName" or s.node_name not in named:
                continue
            for d in s.devices:
                kind, profile = kinds.get((pool.driver, pool.name, d.name), (None, None))
                out.append(PublishedDevice(s.node_name, pool.driver, pool.name, d, kind, profile,
                                           models.get(s.node_name)))
    return out


def resolve_workload_claims(workloads: Sequence[Workload], manifests: Manifests, *, live: bool = False,
                            catalog: DraCatalog | None = None) -> int:
    """Resolve the claims of every pod of ``workloads`` against the input (each pod's template gets its
    :class:`DraNeed` and, when it can be met, the demand of its first choice, as does its pod set's template);
    how many pods have claims. ``catalog``: the input's DRA objects as a catalog the caller keeps (the live
    scheduler's, whose device matches serve every cycle that carries on), else one is made of ``manifests``."""
    # Live, a pod placed on DRA devices through an extended resource needs the claim kube-scheduler creates for
    # it (KEP-5004), which gpufleet does not create yet: the live scheduler leaves such pods to device plugins.
    extended = extended_resources(manifests.device_classes) if manifests.resource_slices and not live else {}
    pods = [(w, p) for w in workloads for p in w.pods if p.template.resource_claims
            or (extended and p.node_name is None and any(r in extended for r in p.template.requests))]
    if not pods:
        return 0
    if not (manifests.resource_slices or manifests.device_classes or manifests.resource_claim_templates
            or manifests.resource_claims):
        # No DRA objects at all (live: not served, or not listable): say that, rather than "not in the input".
        for _, p in pods:
            p.template = replace(p.template, dra=DraNeed((), problem=NO_DRA_OBJECTS))
        return len(pods)
    catalog = catalog if catalog is not None else DraCatalog(
        classes={c.name: c for c in manifests.device_classes},
        templates={t.key: t for t in manifests.resource_claim_templates},
        claims={c.key: c for c in manifests.resource_claims},
        devices=published_devices(manifests.nodes, manifests.resource_slices))
    shared = pods_per_claim((w.namespace, p.template.resource_claims) for w, p in pods)
    for w, p in pods:
        name = p.key.split("/", 1)[1]
        if not p.template.resource_claims:
            need = extended_need(w.namespace, name, p.template, extended, catalog)
            if need is None:
                continue
        elif p.node_name is not None or _reserved_for(w.namespace, name, p.template.resource_claims, catalog):
            # Running, or its claims already allocated and reserved for it (a Binding that did not land yet):
            # the devices are fixed, as kube-scheduler treats an allocated claim.
            need = held_claims(w.namespace, p.template.resource_claims, catalog)
            if p.node_name is None and not live:
                # Bound where its claims are, by whoever allocated them: it holds those devices (live, the
                # scheduler's world binds it: gpufleet.live.world).
                p.node_name = _allocation_node(need, catalog)
        else:
            need = resolve_pod_claims(w.namespace, name, p.template.resource_claims, catalog, shared, live=live)
        gpu = need.choices[0].demand if need.choices else p.template.gpu
        p.template = replace(p.template, dra=need, gpu=gpu)
        if need.awaiting and w.hold is None and not any(q.node_name for q in w.pods):
            # Out of its queue until its claims exist (kube-scheduler's PreEnqueue): a StrictFIFO head waiting
            # for the resourceclaim controller would hold back the queue behind it. (A workload running already,
            # a Job whose next pod waits for its claim, stays admitted: its late pod waits to be placed.)
            w.hold = f"pod {p.key}: {need.problem}"
    _pod_set_demands({id(w): w for w, _ in pods}.values())
    return len(pods)


def _allocation_node(need: DraNeed, catalog: DraCatalog) -> str | None:
    """The node the devices of a held need are on (None: not one node, or unknown)."""
    if not need.choices or not need.choices[0].groups:
        return None
    by_key = catalog.by_key()
    nodes = {by_key[k].node for k in need.choices[0].groups[0] if k in by_key}
    return nodes.pop() if len(nodes) == 1 else None


def claim_names(namespace: str, refs: Sequence[PodResourceClaim]) -> list[str]:
    """The keys (namespace/name) of the claims a pod's references name, where known."""
    return [f"{namespace}/{n}" for ref in refs if (n := ref.resource_claim_name or ref.generated_name)]


def bound_claims(workloads: Iterable[Workload]) -> set[str]:
    """The keys of the claims that pods holding their nodes name (bound and not finished)."""
    return {c for w in workloads for p in w.pods if p.node_name is not None and p.phase not in TERMINAL_PHASES
            for c in claim_names(w.namespace, p.template.resource_claims)}


def unheld_allocations(claims: Sequence[ResourceClaim], held: Iterable[str]) -> list[ResourceClaim]:
    """The allocated claims among ``claims`` that no pod holding its node holds (``held``: the keys of the claims
    such pods name): a claim whose pod is gone, finished or another scheduler's to bind. kube-scheduler's allocator
    counts their devices as in use until they are deallocated, and so does gpufleet."""
    taken = set(held)
    return [c for c in claims if c.allocation is not None and c.key not in taken]


def _pod_set_demands(workloads: Iterable[Workload]) -> None:
    """Give each pod set whose pods have claims the demand its pods got. Where a workload is counted whole rather
    than pod by pod, its pod sets stand for their pods (the GPUs the dashboard shows for it, the simulator's job
    size, advise's demand): without this a claimed workload counted as asking no GPU. The pods of a pod set come
    from one template, so they ask the same devices; the claims themselves (names differ per pod) stay on the
    pods."""
    for w in workloads:
        for ps in w.pod_sets:
            first = next((p for p in w.pods if p.pod_set == ps.name and p.template.dra is not None
                          and p.template.dra.choices), None)
            if first is not None:
                ps.template = replace(ps.template, gpu=first.template.gpu)


# ---- extended resources a DeviceClass backs (KEP-5004) ------------------------------------------------------

IMPLICIT_EXTENDED_PREFIX = "deviceclass.resource.kubernetes.io/"


def extended_resources(classes: Sequence[DeviceClass]) -> dict[str, DeviceClass]:
    """Which DeviceClass meets each extended resource a pod may ask for (``extendedResourceName``, and every
    class's implicit ``deviceclass.resource.kubernetes.io/<class>``). Kubernetes gives a name two classes declare
    to the one created later; creation times are rarely in an input, so the first by name is taken here."""
    out: dict[str, DeviceClass] = {}
    for c in sorted(classes, key=lambda c: c.name):
        out.setdefault(IMPLICIT_EXTENDED_PREFIX + c.name, c)
        if c.extended_resource_name:
            out.setdefault(c.extended_resource_name, c)
    return out


def extended_need(namespace: str, pod: str, template: PodTemplate, extended: Mapping[str, DeviceClass],
                  catalog: DraCatalog) -> DraNeed | None:
    """How a pod asking an extended resource a DeviceClass backs is placed: first where a device plugin offers it
    (the pod as it is), else on DRA devices of the class, as kube-scheduler's DynamicResources plugin does for
    nodes without that device plugin. None when the class matches no device of the input."""
    wanted = [(r, n) for r, n in sorted(template.requests.items()) if r in extended and n > 0]
    if len(wanted) != 1:
        return None  # none, or several extended resources at once: left to the device plugin's way
    resource, count = wanted[0]
    found, _ = catalog.matching(extended[resource].selectors)
    kinds = {(d.kind, d.profile) for d in found}
    if not found or len(kinds) != 1 or None in {k for k, _ in kinds}:
        return None
    (kind, profile), = kinds
    assert kind is not None  # refused above
    demand = claimed_demand(kind, profile, count)
    claim = f"{namespace}/{generated_claim_name(pod, 'extended-resources', f'{namespace}/{pod}/extended')}"
    # Its devices need no naming to placement: any DRA device of the class's kind will do (the class matches them
    # all), and only pods placed through DRA take DRA nodes' devices.
    groups = () if len(found) == len(catalog.every(kind, profile)) else (frozenset(d.key for d in found),)
    dra = DraChoice(demand, groups, (ClaimRequest(claim, "container-0-request-0", count),),
                    drop_requests=frozenset({resource} - {demand.resource}))
    return DraNeed((claim,), (DraChoice(template.gpu, (), (), plugin=True), dra))
