"""Stranded capacity as the simulator and the live scheduler report it: idle GPU capacity that a pending pod could
use, were it free, but that no pending pod fits now.

A sample looks at every node with idle GPU capacity and asks whether at least one pending GPU pod would
fit there on its own, with the placement filters' one node-fit check (ready, taints tolerated, selectors and
allowed models matched, every requested resource free, the pod-count limit, and free devices for the pod's
GPU demand; for a pod with DRA claims, free devices its claims select). The idle capacity of a node where none
fits is stranded when at least one pending pod could use the node were it empty (:func:`could_use`: the same
check on the node with nothing held); a node no pending pod could ever use (a dedicated pool, a model or a
device kind nobody waiting asks for, GPUs published through DRA for a fractional pod) is spare, not stranded.
While no GPU pod is pending nothing is stranded: idle capacity that nobody asks for is spare, not fragmented.

A pod with DRA claims is asked about as placement tries it: once per way its claims can be met
(``firstAvailable``, each with the devices it allows); a pod whose claims cannot be met at all fits nowhere.

This is a feasibility test for a metric, node by node and pod by pod; it neither scores nor allocates, and
it ignores what a Kueue flavor would add to a pod (its node labels), so it can call capacity usable that a
queue's flavor would keep a pod away from.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import fields, replace
from operator import attrgetter

from gpufleet.api.objects import PodTemplate
from gpufleet.cluster.devices import GpuSlot, MigSlot
from gpufleet.cluster.state import ClusterState, NodeState
from gpufleet.gpu.constants import MILLI
from gpufleet.scheduling.placement.dra import dra_problem, with_choice
from gpufleet.scheduling.placement.filters import unfit_reason
from gpufleet.scheduling.placement.need import PodNeed, compile_need
from gpufleet.scheduling.types import PodRequest

MAX_SPECS = 64  # distinct pending pod shapes looked at per sample


def fit_needs(t: PodTemplate) -> list[PodNeed]:
    """The pod as placement tries it (gpufleet.scheduling.placement.dra.over_choices): once per way its DRA
    claims can be met, with the devices that way allows; once as it is without claims; never when its claims
    cannot be met at all (placement refuses it everywhere)."""
    request = PodRequest("", t)
    if dra_problem([request]) is not None:
        return []
    out: list[PodNeed] = []
    index = 0
    while (variant := with_choice([request], index)) is not None:
        out.append(compile_need(variant[0]))
        index += 1
    return out


def fits_alone(node: NodeState, t: PodTemplate) -> bool:
    """Whether pod template ``t`` would fit on ``node`` as it is now."""
    return any(unfit_reason(need, node) is None for need in fit_needs(t))


def idle_gpus(node: NodeState) -> float:
    return sum(g.free_milli for g in node.gpus if g.healthy) / MILLI


def pending_needs(pending: Iterable[PodTemplate]) -> list[PodNeed]:
    """The distinct pending GPU pod shapes (at most :data:`MAX_SPECS`), compiled for the fit check."""
    specs: list[PodTemplate] = []
    seen: set[int] = set()
    for t in pending:
        if t.gpu.wants_gpu and id(t) not in seen:
            seen.add(id(t))
            specs.append(t)
            if len(specs) >= MAX_SPECS:
                break
    return [need for t in specs for need in fit_needs(t)]


# The slots are copied field by field, positionally (dataclasses.replace costs several times more, and a sample
# may copy thousands of GPUs); every field is carried over but those that say who holds the device, so a field
# added to the slots later is kept without a change here.
_GPU_FIELDS = tuple(f.name for f in fields(GpuSlot))
_MIG_FIELDS = tuple(f.name for f in fields(MigSlot))
_gpu_values = attrgetter(*_GPU_FIELDS)
_mig_values = attrgetter(*_MIG_FIELDS)
_GPU_HOLDER, _GPU_FRACTIONS, _GPU_REPLICAS, _GPU_REPLICA_MEMORY, _GPU_MIG, _GPU_PARTITIONS = (
    _GPU_FIELDS.index(n) for n in ("holder", "fractions", "replica_holders", "replica_memory", "mig", "partitions"))
_MIG_HOLDER = _MIG_FIELDS.index("holder")


def _emptied_mig(m: MigSlot) -> MigSlot:
    if m.holder is None:
        return m
    values = list(_mig_values(m))
    values[_MIG_HOLDER] = None
    return MigSlot(*values)


def _emptied_gpu(g: GpuSlot) -> GpuSlot:
    if g.is_free and not g.replica_memory:
        return g  # nothing held: the slot itself serves (an emptied node is only read)
    values = list(_gpu_values(g))
    values[_GPU_HOLDER] = None
    values[_GPU_FRACTIONS] = {}
    values[_GPU_REPLICAS] = [None] * len(g.replica_holders)
    values[_GPU_REPLICA_MEMORY] = {}
    values[_GPU_MIG] = [_emptied_mig(m) for m in g.mig]
    values[_GPU_PARTITIONS] = [_emptied_mig(m) for m in g.partitions]
    return GpuSlot(*values)


def emptied(node: NodeState) -> NodeState:
    """``node`` with nothing held on it: its GPUs (healthy or not, as they are), resources and pods all free.
    The node itself is untouched; the copy shares what holds nothing with it, so it is for reading only."""
    return replace(node, used={}, gpus=[_emptied_gpu(g) for g in node.gpus], pods=set())


def could_use(need: PodNeed, node: NodeState) -> bool:
    """Whether the pod would fit on ``node`` were nothing held there: the one node-fit check that placement
    runs, asked about the node emptied (:func:`emptied`). So a device the pod could never get now is no device
    it could use either (a GPU published through DRA for a fractional pod, a device its claims do not select);
    a separate count of devices would drift from placement's rules."""
    return unfit_reason(need, emptied(node)) is None


def stranded_by_node(cluster: ClusterState, pending: Iterable[PodTemplate]) -> dict[str, tuple[float, float]]:
    """Per node with idle GPU capacity: (its idle GPUs that some pending GPU pod could use were they free but no
    pending GPU pod fits now, its idle GPUs)."""
    needs = pending_needs(pending)
    out: dict[str, tuple[float, float]] = {}
    for node in cluster.nodes.values():
        free = idle_gpus(node)
        if free > 0:
            out[node.name] = (_stranded(node, needs, free), free)
    return out


def stranded_on(node: NodeState, needs: list[PodNeed]) -> float:
    """The idle GPUs of ``node`` that are stranded for the pending shapes ``needs`` (:func:`pending_needs`): all
    of them when some could use the node were it empty but none fits now, else none."""
    free = idle_gpus(node)
    return _stranded(node, needs, free) if free > 0 else 0.0


def _stranded(node: NodeState, needs: list[PodNeed], free: float) -> float:
    if needs and not any(unfit_reason(need, node) is None for need in needs):
        empty = emptied(node)  # once per node, not once per pending shape
        if any(unfit_reason(need, empty) is None for need in needs):
            return free
    return 0.0


def stranded_gpus(cluster: ClusterState, pending: Iterable[PodTemplate]) -> tuple[float, float]:
    """(idle GPUs stranded: on nodes some pending GPU pod could use but none fits now, all idle GPUs)."""
    stranded = 0.0
    idle = 0.0
    for node_stranded, node_idle in stranded_by_node(cluster, pending).values():
        stranded += node_stranded
        idle += node_idle
    return stranded, idle
