"""A pod request compiled once into what filters, scorers and caches read.

Compiling up front turns a :class:`~gpufleet.scheduling.types.PodRequest` (whose template is a mutable,
unhashable dataclass) into hashable keys: ``constraint_key`` decides every static filter (labels, taints,
model, device memory), ``shape_key`` additionally the dynamic ones and the scores. Two pods with equal
keys are indistinguishable to placement, which is what lets the equivalence-class index cache results.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.api.dra_need import DistinctValues
from gpufleet.api.gpushare import placed_requests
from gpufleet.api.objects import CPU, HOSTNAME_LABEL, MEMORY, GpuDemand, NodeSelectorTerm, PodTemplate, Toleration
from gpufleet.cluster.free_devices import demand_resource
from gpufleet.scheduling.types import PodRequest

# Labels whose value is different on every node. They are left out of the node equivalence key (else every
# node would be a class of its own); a pod constraining one of them is checked node by node instead.
IDENTITY_LABELS: frozenset[str] = frozenset({HOSTNAME_LABEL})


@dataclass(frozen=True, slots=True, eq=False)
class PodNeed:
    key: str
    charge: dict[str, int]  # what ClusterState.allocate charges (the requests less the quota-only ones)
    requests: tuple[tuple[str, int], ...]  # allocatable resources to check, sorted; zero amounts dropped
    cpu: int
    memory: int
    gpu: GpuDemand
    selector: tuple[tuple[str, str], ...]
    affinity: tuple[NodeSelectorTerm, ...]
    tolerations: tuple[Toleration, ...]
    node_labels: tuple[tuple[str, str], ...]
    per_node: bool  # constrains an identity label or avoids GPUs: filters must run on every node, not per class
    memory_hint: int  # MiB it is expected to use on a time-sliced GPU (PodRequest.memory_hint; 0: unknown)
    avoid_gpus: frozenset[str]  # GPUs ("node/index") it must not share again
    dra_groups: tuple[frozenset[tuple[str, str, str]], ...]  # DRA devices its claims allow (PodRequest.dra_groups)
    dra_distinct: DistinctValues | None  # distinctAttribute: its devices differ in it (PodRequest.dra_distinct)
    dra: bool  # its GPUs come through DRA claims: only DRA nodes' devices, and only those, are for it
    constraint_key: int  # interned: equal constraints, equal key (a small int hashes fast in hot loops)
    shape_key: int

    @property
    def gpu_equivalent(self) -> float:
        return self.gpu.gpu_equivalent


def _mentions_identity(selector: tuple[tuple[str, str], ...], affinity: tuple[NodeSelectorTerm, ...],
                       node_labels: tuple[tuple[str, str], ...]) -> bool:
    if any(k in IDENTITY_LABELS for k, _ in selector) or any(k in IDENTITY_LABELS for k, _ in node_labels):
        return True
    return any(r.key in IDENTITY_LABELS for term in affinity for r in term.requirements)


class Interner:
    """Small ints for the nested key tuples (whose dataclass members hash in Python, slowly)."""

    def __init__(self) -> None:
        self._ids: dict[tuple[Any, ...], int] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def __call__(self, key: tuple[Any, ...]) -> int:
        i = self._ids.get(key)
        if i is None:
            i = self._ids[key] = len(self._ids)
        return i


def with_claimed_devices(t: PodTemplate, requests: Mapping[str, int]) -> dict[str, int]:
    """``requests`` plus the devices the pod's DRA claims give it, as the resources a DRA node counts them under
    (placed as the device plugin's pods are: filters, scorers and the node's usage read the same numbers)."""
    out = dict(requests)
    if t.dra is not None and t.gpu.kind in ("gpu", "mig"):
        resource = demand_resource(t.gpu)
        if resource is not None and resource not in out:
            out[resource] = t.gpu.count
    return out


def compile_need(req: PodRequest, intern: Interner | None = None) -> PodNeed:
    """The pod's need; without an ``intern``, its keys are -1 (a one-off check that caches nothing)."""
    t = req.template
    placed = placed_requests(t.requests, t.gpu.kind == "fraction")  # quota-only resources left out
    dra = t.dra is not None
    placed = with_claimed_devices(t, placed)
    requests = tuple(sorted((r, a) for r, a in placed.items() if a))
    selector = tuple(sorted(t.node_selector.items()))
    tolerations = t.tolerations + req.extra_tolerations
    node_labels = tuple(sorted(req.node_labels))
    constraint = (selector, t.required_affinity, tolerations, node_labels, t.gpu, req.memory_hint, req.avoid_gpus,
                  req.dra_groups, req.dra_distinct, dra)
    return PodNeed(
        key=req.key,
        charge=placed,
        requests=requests,
        cpu=t.requests.get(CPU, 0),
        memory=t.requests.get(MEMORY, 0),
        gpu=t.gpu,
        selector=selector,
        affinity=t.required_affinity,
        tolerations=tolerations,
        node_labels=node_labels,
        per_node=bool(req.avoid_gpus or req.dra_groups)
        or _mentions_identity(selector, t.required_affinity, node_labels),
        memory_hint=req.memory_hint,
        avoid_gpus=req.avoid_gpus,
        dra_groups=req.dra_groups,
        dra_distinct=req.dra_distinct,
        dra=dra,
        constraint_key=intern(constraint) if intern is not None else -1,
        shape_key=intern((constraint, requests)) if intern is not None else -1,
    )
