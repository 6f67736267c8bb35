"""A :class:`~gpufleet.web.contract.ClusterView` from what a planner knows: the policy after its cycles (queues,
quota tree, workload states), its ClusterState (nodes, devices, who holds them) and the workloads.

Both cluster sources build their view here, from the same objects their drivers use: manifests through
:mod:`gpufleet.scheduling.snapshot_plan` (``gpufleet plan``), the live cache through :mod:`gpufleet.live.world`
and :mod:`gpufleet.live.planner` (the scheduler's cycle). Nothing is recomputed: reasons are the planner's,
usage is the quota tree's, devices are the ClusterState's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpufleet.cluster.devices import GpuSlot
from gpufleet.cluster.state import ClusterState, NodeState
from gpufleet.cluster.workloads import Workload
from gpufleet.gpu.constants import MILLI
from gpufleet.gpu.mig import geometry_for
from gpufleet.live.queuestatus import QueueCounts
from gpufleet.scheduling.charges import format_quota
from gpufleet.scheduling.kueue import KueuePolicy
from gpufleet.scheduling.kueue.info import State
from gpufleet.scheduling.quota import FR, QuotaNode, ResourceQuota
from gpufleet.web.contract import (
    ClusterQueueView,
    ClusterView,
    CohortView,
    GpuView,
    NodeView,
    PodView,
    PoolView,
    PreemptionView,
    QuotaView,
    SliceState,
    SliceView,
    SourceKind,
    WorkloadStatus,
    WorkloadView,
)

NO_POOL = "(no pool)"
_STATUS: dict[State, WorkloadStatus] = {State.PENDING: "pending", State.ADMITTED: "admitted",
                                        State.FINISHED: "finished", State.DEACTIVATED: "deactivated"}


@dataclass(slots=True)
class PlannerFacts:
    """What a view is built from (module doc)."""

    policy: KueuePolicy
    cluster: ClusterState | None
    workloads: Sequence[Workload]
    pending: Mapping[str, str]  # workload -> why it waits, as the planner said it
    phases: Mapping[str, str] = field(default_factory=dict)  # pod key -> phase, for pods the workloads do not carry
    planned: frozenset[str] = frozenset()  # pod keys the planner placed and nobody has bound yet
    preemptions: Mapping[str, Sequence[PreemptionView]] = field(default_factory=dict)  # workload -> history


class _Holders:
    """Pod key -> (workload, ClusterQueue, state) for every pod the views draw."""

    def __init__(self, facts: PlannerFacts) -> None:
        self.facts = facts
        self.workload_of: dict[str, str] = {}
        self.phase: dict[str, str] = dict(facts.phases)
        for w in facts.workloads:
            for p in w.pods:
                self.workload_of[p.key] = w.key
                self.phase.setdefault(p.key, p.phase)
        self.queue_of: dict[str, str | None] = {}
        for info in facts.policy.state.infos.values():
            adm = info.admission
            self.queue_of[info.key] = adm.cluster_queue if adm is not None else info.cluster_queue

    def state(self, pod: str) -> SliceState:
        if pod in self.facts.planned:
            return "planned"
        return "running" if self.phase.get(pod) == "Running" else "idle"

    def slice(self, kind: str, device: str, pod: str | None, **extra: object) -> SliceView:
        if pod is None:
            return SliceView(kind, device, **extra)  # type: ignore[arg-type]
        workload = self.workload_of.get(pod)
        queue = self.queue_of.get(workload) if workload else None
        return SliceView(kind, device, pod, workload, queue, self.state(pod), **extra)  # type: ignore[arg-type]


def _gpu(gpu: GpuSlot, holders: _Holders) -> GpuView:
    slices: list[SliceView] = []
    units = MILLI
    mode = gpu.mode
    if gpu.mode == "mig" or gpu.carved:
        # a dynamic MIG GPU carved into MIG devices shows as the MIG GPU it now is: the devices carved
        mode = "mig"
        geometry = geometry_for(gpu.model)
        units = geometry.memory_slices if geometry is not None else 0
        for m in gpu.mig if gpu.mode == "mig" else [p for p in gpu.partitions if p.holder is not None]:
            size = geometry.profile(m.placement.profile).memory_slices if (
                geometry is not None and geometry.has_profile(m.placement.profile)) else 1
            slices.append(holders.slice("mig", m.device_id, m.holder, start=m.placement.start, size=size,
                                        profile=m.placement.profile, memory_mib=m.memory_mib))
        units = max([units, *(s.start + s.size for s in slices)])
    elif gpu.mode == "replicas":
        units = gpu.replicas
        for i, h in enumerate(gpu.replica_holders):
            slices.append(holders.slice("replica", gpu.replica_id(i), h, start=i, size=1))
    elif gpu.fractions:
        at = 0
        for pod, (milli, memory) in sorted(gpu.fractions.items()):
            slices.append(holders.slice("fraction", gpu.device_id, pod, start=at, size=milli, memory_mib=memory))
            at += milli
    else:
        slices.append(holders.slice("whole", gpu.device_id, gpu.holder, start=0, size=MILLI,
                                    memory_mib=gpu.memory_mib))
    return GpuView(gpu.index, gpu.device_id, gpu.model, gpu.memory_mib, mode, gpu.healthy, units, tuple(slices))


def _node(node: NodeState, holders: _Holders) -> NodeView:
    return NodeView(node.name, node.pool or NO_POOL, node.gpu_model, node.ready, node.unschedulable,
                    tuple(_gpu(g, holders) for g in node.gpus), len(node.pods),
                    (node.used.get("cpu", 0), node.allocatable.get("cpu", 0)),
                    (node.used.get("memory", 0), node.allocatable.get("memory", 0)))


def _pools(nodes: Iterable[NodeView]) -> tuple[PoolView, ...]:
    by_pool: dict[str, list[NodeView]] = defaultdict(list)
    for n in nodes:
        by_pool[n.pool].append(n)
    out = []
    for name, members in sorted(by_pool.items()):
        gpus = [g for n in members for g in n.gpus]
        held = 0.0
        for g in gpus:
            taken = [s for s in g.slices if s.holder is not None]
            if g.mode == "whole":
                held += sum(s.size for s in taken) / MILLI
            elif g.units:
                held += (sum(s.size for s in taken) / g.units) if g.mode == "mig" else len(taken) / g.units
        models = tuple(sorted({n.model for n in members if n.model}))
        out.append(PoolView(name, models, len(members), len(gpus), held, sum(1 for g in gpus if g.idle),
                            sum(1 for g in gpus if not g.healthy)))
    return tuple(out)


def _quota(fr: FR, q: ResourceQuota | None, usage: int) -> QuotaView:
    flavor, resource = fr
    nominal = q.nominal if q is not None else 0
    bl = q.borrowing_limit if q is not None else None
    ll = q.lending_limit if q is not None else None
    return QuotaView(flavor, resource, format_quota(resource, nominal), format_quota(resource, usage),
                     format_quota(resource, max(0, usage - nominal)),
                     None if bl is None else format_quota(resource, bl),
                     None if ll is None else format_quota(resource, ll), (nominal, usage, bl, ll))


def _queues(policy: KueuePolicy) -> tuple[tuple[ClusterQueueView, ...], tuple[CohortView, ...]]:
    tree = policy.state.tree
    counts = QueueCounts(policy)
    cqs = []
    for name, spec in sorted(policy.config.cluster_queues.items()):
        quotas = tuple(_quota(fr, q, tree.usage(name, fr)) for fr, q in spec.quotas.items())
        cqs.append(ClusterQueueView(name, spec.cohort, str(spec.strategy), spec.fair_weight,
                                    tree.weighted_share_status(name), counts.cq_pending.get(name, 0),
                                    counts.cq_admitted.get(name, 0), spec.stopped, quotas))
    cohorts = []
    for name in sorted(tree.cohort_names()):
        node: QuotaNode = tree.cohort(name)
        quotas = tuple(_quota(fr, node.quotas.get(fr), tree.usage(node, fr)) for fr in sorted(node.quotas))
        cohorts.append(CohortView(
            name, node.parent.name if node.parent is not None else None, node.fair_weight,
            tree.weighted_share_status(node) if node.parent is not None else 0,
            tuple(sorted(c.name for c in node.children if not c.is_cluster_queue)),
            tuple(sorted(c.name for c in node.children if c.is_cluster_queue)), quotas))
    return tuple(cqs), tuple(cohorts)


def _replicas(cluster: ClusterState | None, node: str | None, resource: str | None) -> int:
    """Replicas per GPU of the time-sliced GPUs offering ``resource`` on ``node`` (1: none known)."""
    state = cluster.nodes.get(node) if cluster is not None and node is not None else None
    counts = [g.replicas for g in (state.gpus if state is not None else ()) if g.mode == "replicas"
              and (resource is None or g.resource == resource)]
    return max(counts, default=1)


def device_text(w: Workload, cluster: ClusterState | None, nodes: Mapping[str, str | None]) -> str:
    """What each pod of ``w`` holds, in words (issue 29): a MIG profile ("1g.10gb"), a time-slice replica with the
    share it is of its GPU on the node it landed on ("1/8 replica"), a fraction ("0.5 GPU"), whole GPUs ("2 GPUs");
    pod sets that differ are listed, "" when no pod asks for a GPU. ``nodes``: pod key -> the node it is on."""
    parts: list[str] = []
    for ps in w.pod_sets:
        g = ps.template.gpu
        if g.kind == "mig" and g.mig_profile:
            text = g.mig_profile if g.count == 1 else f"{g.count}x {g.mig_profile}"
        elif g.kind == "fraction":
            memory = f"{g.memory_mib:,} MiB" if g.memory_mib else ""
            share = f"{g.milli / MILLI:g} GPU" if g.milli else ""
            text = ", ".join(x for x in (share, memory) if x) or "a fraction of a GPU"
        elif g.kind in ("gpu", "shared"):
            placed = [nodes.get(p.key) for p in w.pods if p.pod_set == ps.name]
            replicas = max((_replicas(cluster, n, g.resource) for n in placed if n), default=1)
            if replicas > 1 or g.kind == "shared":
                one = f"1/{replicas} replica" if replicas > 1 else "1 replica"
                text = one if g.count == 1 else f"{g.count}x {one}"
            else:
                text = f"{g.count} GPU{'s' if g.count != 1 else ''}"
        else:
            continue
        if text not in parts:
            parts.append(text)
    return ", ".join(parts)


def _workloads(facts: PlannerFacts, holders: _Holders) -> tuple[WorkloadView, ...]:
    policy = facts.policy
    out = []
    for w in facts.workloads:
        info = policy.info(w.key)
        status: WorkloadStatus = _STATUS[info.state] if info is not None else "pending"
        adm = info.admission if info is not None else None
        placed = {p.pod: p for p in adm.pods} if adm is not None else {}
        pods = []
        for p in w.pods:
            a = placed.get(p.key)
            node = a.node if a is not None else None
            state: SliceState = holders.state(p.key) if node is not None else "free"
            pods.append(PodView(p.key, node, a.devices if a is not None else (), holders.phase.get(p.key, p.phase),
                                state))
        reason = facts.pending.get(w.key, "") if status != "admitted" else ""
        if not reason and info is not None and status != "admitted":
            reason = info.message or info.problem or ""
        cq = (adm.cluster_queue if adm is not None else None) or (info.cluster_queue if info is not None else None)
        flavors = tuple(sorted(adm.flavors().items())) if adm is not None else ()
        nodes = {p.key: p.node for p in pods}
        out.append(WorkloadView(w.key, w.namespace, w.name, w.kind, w.queue or (info.local_queue if info else None),
                                cq, w.priority, status, reason, w.gpu_equivalent, tuple(pods), flavors,
                                tuple(facts.preemptions.get(w.key, ())), device_text(w, facts.cluster, nodes)))
    order = {"pending": 0, "deactivated": 1, "admitted": 2, "finished": 3}
    return tuple(sorted(out, key=lambda v: (order[v.status], v.key)))


def build_view(source: SourceKind, title: str, facts: PlannerFacts, *, generated: float,
               notes: Sequence[str] = ()) -> ClusterView:
    holders = _Holders(facts)
    nodes = tuple(_node(n, holders) for n in sorted(facts.cluster, key=lambda n: ((n.pool or NO_POOL), n.name))
                  ) if facts.cluster is not None else ()
    cqs, cohorts = _queues(facts.policy)
    return ClusterView(source, title, generated, nodes, _pools(nodes), cqs, cohorts, _workloads(facts, holders),
                       tuple(notes))
