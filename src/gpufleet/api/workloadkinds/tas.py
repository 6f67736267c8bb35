"""Kueue's TAS pod-set slices, never passed over in silence.

``kueue.x-k8s.io/podset-slice-required-topology: <level>`` with ``kueue.x-k8s.io/podset-slice-size: <n>`` (and the
multi-layer ``podset-slice-required-topology-constraints``) ask Kueue's topology-aware scheduling to cut a pod set
into slices of ``n`` pods and keep each slice within one domain of ``level`` (Kueue's multislice JobSet sample:
each replicated Job one slice). gpufleet's topology-aware placement keeps a whole pod set within one domain of a
level (``podset-required-topology``) or as few as it can (``podset-preferred-topology``); it has no slices. So:

* malformed slices are errors, as Kueue refuses them (KEP-2724, "PodSet Slice size validation"): a size that is
  not a whole number of at least 1, that is larger than the pod set or does not evenly divide it, a size without a
  slice level, a slice level without a size (except on a JobSet, where the size defaults to the Job's
  ``parallelism``, each Job one slice), unreadable multi-layer constraints. Each is said at the annotation's own
  line and field path;
* a pod set that also asks a required or preferred topology is placed by it, on a flavor with a topology, and the
  slices are said to be left out (``--strict``: an error);
* a pod set that asks slices alone is, in Kueue, a topology-aware pod set placed anywhere in a flavor's topology
  (Kueue's ``TASFlavorSnapshot`` reads a slice-only request as unconstrained at the topology's highest level),
  each slice within one domain of its level, and never on a flavor without a topology. gpufleet does the same
  without the slices: the pod set is placed in as few domains of the slice level as it can (as if it asked
  ``podset-preferred-topology: <slice level>``), so only a flavor with a topology (one that has that level)
  admits it; the slices are said to be left out.

The checks run while the document is read (:func:`check_owner`, :func:`check_document`), so that each problem
points at the annotation itself; :func:`place_slices` then gives slice-only pod sets their topology request once
the whole input is known.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from gpufleet.api.errors import LEFT_OUT
from gpufleet.api.objects import PREFERRED_TOPOLOGY_ANNOTATION, REQUIRED_TOPOLOGY_ANNOTATION, PodTemplate
from gpufleet.api.reader import FieldReader, PathPart, parse_int_text
from gpufleet.api.workloadkinds.model import WorkloadOwner

if TYPE_CHECKING:
    from gpufleet.api.manifests import Manifests

SLICE_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE_ANNOTATION = "kueue.x-k8s.io/podset-slice-size"
SLICE_CONSTRAINTS_ANNOTATION = "kueue.x-k8s.io/podset-slice-required-topology-constraints"
SLICE_KEYS = (SLICE_TOPOLOGY_ANNOTATION, SLICE_SIZE_ANNOTATION, SLICE_CONSTRAINTS_ANNOTATION)
MAX_LAYERS = 3  # Kueue's limit on multi-layer constraints
_FIX = "expect Kueue to admit it only where every slice fits one domain, or drop the slice annotations"
_MATCHED = (*SLICE_KEYS, REQUIRED_TOPOLOGY_ANNOTATION, PREFERRED_TOPOLOGY_ANNOTATION)


@dataclass(frozen=True, slots=True)
class _Said:
    message: str
    key: str  # the annotation it is about
    fix: str
    error: bool


@dataclass(frozen=True, slots=True)
class Slices:
    """What a pod set's slice annotations ask, once they are valid."""

    asked: str  # in words
    key: str  # the annotation that asks it
    level: str  # the slice level (multi-layer: the coarsest layer's)
    whole: str | None  # the required or preferred level the pod set also asks


def asks_slices(annotations: Mapping[str, str]) -> bool:
    return bool(annotations) and any(k in annotations for k in SLICE_KEYS)


def read_slices(annotations: Mapping[str, str], count: int,
                default_size: int | None = None) -> tuple[Slices | None, list[_Said]]:
    """The slices a pod set of ``count`` pods asks (None when it asks none, or asks them wrongly) and what is to
    be said about them. ``default_size``: the slice size when none is given (a JobSet's Job parallelism)."""
    if not asks_slices(annotations):
        return None, []
    level = annotations.get(SLICE_TOPOLOGY_ANNOTATION)
    size_text = annotations.get(SLICE_SIZE_ANNOTATION)
    layers = annotations.get(SLICE_CONSTRAINTS_ANNOTATION)
    if layers is not None:
        if level is not None or size_text is not None:
            other = SLICE_TOPOLOGY_ANNOTATION if level is not None else SLICE_SIZE_ANNOTATION
            return None, [_Said(f"{SLICE_CONSTRAINTS_ANNOTATION} may not be set with {other}; Kueue refuses it",
                                SLICE_CONSTRAINTS_ANNOTATION, f"keep either the constraints or {other}", True)]
        first, why = _first_layer(layers, count)
        if first is None:
            return None, [_Said(f"{SLICE_CONSTRAINTS_ANNOTATION} {why}; Kueue refuses it",
                                SLICE_CONSTRAINTS_ANNOTATION,
                                'write a JSON array such as [{"topology": "<node label>", "size": "4"}]', True)]
        asked = f"multi-layer slices ({SLICE_CONSTRAINTS_ANNOTATION})"
        slices = Slices(asked, SLICE_CONSTRAINTS_ANNOTATION, first, None)
    else:
        size: int | None = None
        if size_text is not None:
            size = parse_int_text(size_text)
            if size is None or size < 1:
                return None, [_Said(f"{SLICE_SIZE_ANNOTATION} must be a whole number of at least 1, got "
                                    f"{size_text!r}; Kueue refuses it", SLICE_SIZE_ANNOTATION,
                                    f'write {SLICE_SIZE_ANNOTATION}: "<pods per slice>"', True)]
        if level is None:
            return None, [_Said(f"{SLICE_SIZE_ANNOTATION} needs {SLICE_TOPOLOGY_ANNOTATION}; Kueue refuses it alone",
                                SLICE_SIZE_ANNOTATION,
                                f"add {SLICE_TOPOLOGY_ANNOTATION}: <node label of the slice's level>", True)]
        key = SLICE_SIZE_ANNOTATION
        given = "" if size is not None else " (a JobSet's default: its Job's parallelism)"
        if size is None:
            if default_size is None:
                return None, [_Said(f"{SLICE_TOPOLOGY_ANNOTATION} needs {SLICE_SIZE_ANNOTATION}; Kueue refuses it "
                                    "alone", SLICE_TOPOLOGY_ANNOTATION,
                                    f'add {SLICE_SIZE_ANNOTATION}: "<pods per slice>"', True)]
            size, key = default_size, SLICE_TOPOLOGY_ANNOTATION
        if size > count:
            return None, [_Said(f"slice size {size}{given} is more than the pod set's {count} pods; Kueue refuses "
                                "it", key, f"give a slice size of at most {count} that divides it", True)]
        if count % size:
            return None, [_Said(f"slice size {size}{given} does not evenly divide the pod set's {count} pods; Kueue "
                                "refuses it", key, f"give a slice size that divides {count} (e.g. "
                                f"{_divisor_near(count, size)})", True)]
        asked = f"slices of {size} pods, each within one {level} domain ({SLICE_TOPOLOGY_ANNOTATION})"
        slices = Slices(asked, SLICE_TOPOLOGY_ANNOTATION, level, None)
    whole = annotations.get(REQUIRED_TOPOLOGY_ANNOTATION) or annotations.get(PREFERRED_TOPOLOGY_ANNOTATION)
    if whole:
        how = "within one" if annotations.get(REQUIRED_TOPOLOGY_ANNOTATION) else "in as few"
        said = _Said(f"Kueue's topology-aware scheduling keeps {slices.asked}; gpufleet has no slices and places the "
                     f"pod set {how} {whole} domain{'' if how == 'within one' else 's'} only (left out)",
                     slices.key, _FIX, False)
        return replace(slices, whole=whole), [said]
    said = _Said(f"Kueue's topology-aware scheduling places it on a flavor with a topology, keeping {slices.asked}; "
                 f"gpufleet has no slices and places the pod set, on a flavor with a topology, in as few "
                 f"{slices.level} domains as it can (left out)", slices.key,
                 f"add {REQUIRED_TOPOLOGY_ANNOTATION}: <level> to keep the whole pod set within one domain, or "
                 "accept the difference", False)
    return slices, [said]


def _first_layer(text: str, count: int) -> tuple[str | None, str]:
    """The coarsest layer's level of multi-layer constraints, or None and why they are refused."""
    try:
        layers = json.loads(text)
    except ValueError:
        return None, "is not a JSON array"
    if not isinstance(layers, list) or not 1 <= len(layers) <= MAX_LAYERS:
        return None, f"must be a JSON array of 1 to {MAX_LAYERS} layers"
    sizes: list[int] = []
    for layer in layers:
        topology = layer.get("topology") if isinstance(layer, dict) else None
        size = layer.get("size") if isinstance(layer, dict) else None
        n = size if type(size) is int else parse_int_text(size) if isinstance(size, str) else None
        if not isinstance(topology, str) or not topology or n is None or n < 1:
            return None, "needs a topology and a size of at least 1 in every layer"
        if sizes and sizes[-1] % n:
            return None, f"has a layer of size {n} that does not evenly divide the layer above ({sizes[-1]})"
        sizes.append(n)
    if sizes[0] > count:
        return None, f"has a first layer of {sizes[0]} pods, more than the pod set's {count}"
    first = layers[0]["topology"]
    return str(first), ""


def _divisor_near(count: int, size: int) -> int:
    return max(d for d in range(1, min(size, count) + 1) if count % d == 0)


# ---- said while the document is read -------------------------------------------------------------------------


def check_owner(r: FieldReader, owner: WorkloadOwner) -> None:
    """Say what the owner's slice annotations ask (errors, left-out warnings), each at the annotation's line and
    field path in ``r``'s document (the pod template that carries it)."""
    if not owner.workloads:
        return
    pod_sets = [ps for ps in owner.workloads[0].pod_sets if asks_slices(ps.template.annotations)]
    if not pod_sets:
        return
    places = _template_places(r.value)
    for ps in pod_sets:
        _, said = read_slices(ps.template.annotations, ps.count, ps.slice_default)
        path = _place_of(ps.name, ps.template.annotations, places, r.value)
        for s in said:
            _say(r, path, ps.name, s)


def check_document(r: FieldReader, group: str, kind: str) -> None:
    """The same for a Pod (one pod) and a Kueue Workload object (its pod sets' templates)."""
    data = r.value
    if not isinstance(data, Mapping):
        return
    if (group, kind) == ("", "Pod"):
        annotations = _strings(_get(data, "metadata", "annotations"))
        for s in read_slices(annotations, 1)[1]:
            _say(r, (), "main", s)
    elif (group, kind) == ("kueue.x-k8s.io", "Workload"):
        pod_sets = _get(data, "spec", "podSets")
        for i, ps in enumerate(pod_sets if isinstance(pod_sets, list) else []):
            if not isinstance(ps, Mapping):
                continue
            annotations = _strings(_get(ps, "template", "metadata", "annotations"))
            count = ps.get("count", 1)
            if not asks_slices(annotations) or type(count) is not int or count < 1:
                continue
            for s in read_slices(annotations, count)[1]:
                _say(r, ("spec", "podSets", i, "template"), str(ps.get("name", i)), s)


def _say(r: FieldReader, template: tuple[PathPart, ...] | None, pod_set: str, s: _Said) -> None:
    where: tuple[PathPart, ...] = ("metadata",) if template is None else (*template, "metadata", "annotations", s.key)
    if s.error:
        r.error(f"pod set {pod_set}: {s.message}", *where, fix=s.fix)
    else:
        r.warning(f"pod set {pod_set}: {s.message}", *where, fix=s.fix, code=LEFT_OUT)


def _get(data: Any, *keys: str) -> Any:
    for key in keys:
        data = data.get(key) if isinstance(data, Mapping) else None
    return data


def _strings(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items() if v is not None} if isinstance(value, Mapping) else {}


Place = tuple[tuple[PathPart, ...], dict[str, str]]


def _template_places(data: Any) -> list[Place]:
    """Every pod template of a document whose annotations ask slices: (its path, its annotations), in document
    order. The object's own metadata is not one."""
    out: list[Place] = []
    stack: list[tuple[tuple[PathPart, ...], Any]] = [((), data)]
    while stack:
        path, node = stack.pop()
        children: list[tuple[tuple[PathPart, ...], Any]] = []
        if isinstance(node, Mapping):
            annotations = _get(node, "metadata", "annotations")
            if path and isinstance(annotations, Mapping) and any(k in annotations for k in SLICE_KEYS):
                out.append((path, _strings(annotations)))
            children = [((*path, k), v) for k, v in node.items()
                        if isinstance(k, str) and k != "metadata" and isinstance(v, (Mapping, list))]
        elif isinstance(node, list):
            children = [((*path, i), v) for i, v in enumerate(node) if isinstance(v, (Mapping, list))]
        stack.extend(reversed(children))
    return out


def _place_of(pod_set: str, annotations: Mapping[str, str], places: list[Place],
              data: Any) -> tuple[PathPart, ...] | None:
    """The path of the pod template a pod set comes from: the one whose topology annotations are the pod set's,
    the one named like the pod set when several are (a JobSet's replicated job, a Kubeflow replica type)."""
    want = {k: annotations.get(k) for k in _MATCHED}
    same = [path for path, found in places if {k: found.get(k) for k in _MATCHED} == want]
    for path in same:
        if _names(data, path, pod_set):
            return path
    return same[0] if same else None


def _names(data: Any, path: tuple[PathPart, ...], name: str) -> bool:
    """Whether ``name`` is a key along ``path`` or the ``name`` of a mapping on it."""
    node = data
    for part in path:
        if isinstance(part, str) and part.lower() == name.lower():
            return True
        if isinstance(node, Mapping):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int):
            node = node[part]
        else:
            return False
        if isinstance(node, Mapping) and node.get("name") == name:
            return True
    return False


# ---- once the whole input is known ---------------------------------------------------------------------------


def place_slices(m: Manifests) -> None:
    """Give every pod set that asks valid slices and no other topology the topology request Kueue reads it as
    (module doc): placed in as few domains of the slice level as can be, on a flavor with a topology."""
    for owner in m.controllers.owners:
        for plan in owner.workloads:
            for ps in plan.pod_sets:
                ps.template = _placed(ps.template, ps.count, ps.slice_default)
    for pod in m.pods:
        pod.template = _placed(pod.template, 1, None)
    for wl in m.workloads:
        for spec in wl.pod_sets:
            spec.template = _placed(spec.template, spec.count, None)


def _placed(template: PodTemplate, count: int, default_size: int | None) -> PodTemplate:
    if not asks_slices(template.annotations):
        return template
    slices, _ = read_slices(template.annotations, count, default_size)
    if slices is None or slices.whole is not None:
        return template
    return replace(template, annotations={**template.annotations, PREFERRED_TOPOLOGY_ANNOTATION: slices.level})
