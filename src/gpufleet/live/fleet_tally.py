"""The fleet's GPU gauges summed node by node, each node's part kept until the node changes (issue 27).

The GPU gauges (capacity, held, idle, unhealthy and fragmented GPUs per pool and model; GPUs held and their cost
per queue) read every node and every placed pod: half a second at 5,000 nodes and 25,000 pods, on the thread
that runs the scheduling cycles, so a pod arriving meanwhile waited for them. Between two full cycles the live
scheduler keeps one cluster state and one policy (gpufleet.live.increment), and a carried cycle changes a few
nodes of it; every change bumps the node's ``generation`` (what the placement index keys on too). So each node's
part is worked out once and kept while its generation stays, and only the nodes that changed are looked at
again. A new cluster state or policy (a full cycle) starts afresh; so does a change of the pending GPU pod
shapes for the fragmentation check (whether a node's idle GPUs are stranded depends on them).

Totals are the same whichever nodes were worked out again: the per-model figures are integers (thousandths of
GPUs, counts), and the per-queue shares and costs are summed with :func:`math.fsum`, exact whatever the order.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpufleet.api.objects import PodTemplate
from gpufleet.cluster.holdings import holding_of
from gpufleet.cluster.state import ClusterState, NodeState
from gpufleet.gpu.constants import MILLI
from gpufleet.scheduling.placement.need import PodNeed
from gpufleet.scheduling.placement.stranded import pending_needs, stranded_on

GpuKey = tuple[str, str]  # (pool, model)
Labels = tuple[str, ...]  # (queue, pool, model)

# Per (pool, model): GPUs, thousandths held, thousandths idle (healthy GPUs), unhealthy GPUs, thousandths idle
# on stranded nodes.
_CAPACITY, _HELD, _IDLE, _UNHEALTHY, _FRAGMENTED = range(5)


@dataclass(slots=True)
class _NodePart:
    gpus: dict[GpuKey, list[int]]  # capacity, held, idle, unhealthy (no fragmented: that depends on ``stuck``)
    stuck: bool  # its idle GPUs are stranded for the pending shapes the tally was worked out with
    holders: dict[str, tuple[Labels, float, float]]  # pod -> (labels, GPU share, cost)


class FleetTally:
    """The GPU gauges' totals, brought up to date by :meth:`update` from the nodes that changed since the last."""

    def __init__(self) -> None:
        self._cluster: weakref.ref[ClusterState] | None = None  # weak: a full cycle's new state may free the old
        self._policy: weakref.ref[object] | None = None
        self._templates: list[PodTemplate] | None = None
        self._needs: list[PodNeed] = []
        self._nodes: dict[str, _NodePart] = {}
        self._gpus: dict[GpuKey, list[int]] = {}
        self._held: dict[Labels, dict[str, tuple[float, float]]] = {}  # labels -> pod -> (share, cost)
        self._sums: dict[Labels, tuple[float, float]] = {}  # labels -> (share, cost), for the labels not dirty
        self._dirty: set[Labels] = set()
        self._changed_names: set[str] = set()  # nodes changed since the last update (a ClusterState listener)
        self.looked_at = 0  # nodes worked out by the last update (for tests and benchmarks)

    def update(self, cluster: ClusterState, policy: object, pending: list[PodTemplate],
               queue_of: Callable[[str], str]) -> None:
        """Bring the totals up to ``cluster``: ``policy`` is the one that placed its pods (their queues, through
        ``queue_of(pod key)``), ``pending`` the distinct pending GPU pod templates (the fragmentation check's)."""
        try:
            self._update(cluster, policy, pending, queue_of)
        except BaseException:
            self._reset()  # half brought up to date: the next update starts afresh
            raise

    def _update(self, cluster: ClusterState, policy: object, pending: list[PodTemplate],
                queue_of: Callable[[str], str]) -> None:
        fresh = self._cluster is None or self._cluster() is not cluster or self._policy is None \
            or self._policy() is not policy
        if fresh:
            self._reset()
            self._cluster, self._policy = weakref.ref(cluster), weakref.ref(policy)
            cluster.listeners.append(self._changed)
        again = pending != self._templates
        if again:
            self._templates = list(pending)
            self._needs = pending_needs(pending)
        changed = cluster.nodes.keys() if fresh else self._changed_names
        self._changed_names = set()
        self.looked_at = len(changed)
        parts = {name: (self._nodes.get(name), None if (node := cluster.nodes.get(name)) is None
                        else self._part(cluster, node, queue_of)) for name in changed}
        # Every old part out before any new one in: a pod that left one changed node and (under the same name) came
        # to another must not lose its new holding to its old one's removal.
        for name, (old, _) in parts.items():
            self._replace(name, old, None)
        for name, (_, new) in parts.items():
            self._replace(name, None, new)
        if again and not fresh:
            for name, part in self._nodes.items():
                if name not in changed:
                    self._restrand(part, cluster.nodes[name])

    def _changed(self, node: NodeState) -> None:
        """A ClusterState listener: ``node`` changed (placed on, released, touched, added or removed)."""
        self._changed_names.add(node.name)

    def gpus(self) -> dict[GpuKey, tuple[int, int, int, int, int]]:
        """Per (pool, model): GPUs, thousandths held, idle, unhealthy GPUs, thousandths idle and stranded."""
        return {k: (v[0], v[1], v[2], v[3], v[4]) for k, v in self._gpus.items()}

    def holders(self) -> dict[Labels, tuple[float, float]]:
        """Per (queue, pool, model) holding any: GPUs held and their cost per hour."""
        for labels in self._dirty:
            held = self._held.get(labels)
            if held:
                self._sums[labels] = (math.fsum(v[0] for v in held.values()), math.fsum(v[1] for v in held.values()))
            else:
                self._sums.pop(labels, None)
        self._dirty.clear()
        return dict(self._sums)

    # --- parts ----------------------------------------------------------------------------------------------

    def _reset(self) -> None:
        old = self._cluster() if self._cluster is not None else None
        if old is not None and self._changed in old.listeners:
            old.listeners.remove(self._changed)
        self._cluster = self._policy = None
        self._changed_names = set()
        self._templates, self._needs = None, []
        self._nodes.clear()
        self._gpus.clear()
        self._held.clear()
        self._sums.clear()
        self._dirty.clear()

    def _part(self, cluster: ClusterState, node: NodeState, queue_of: Callable[[str], str]) -> _NodePart:
        pool = node.pool or ""
        gpus: dict[GpuKey, list[int]] = {}
        for g in node.gpus:
            row = gpus.get((pool, g.model))
            if row is None:
                row = gpus[(pool, g.model)] = [0, 0, 0, 0]
            used = g.used_milli
            row[_CAPACITY] += 1
            row[_HELD] += used
            if g.healthy:
                row[_IDLE] += MILLI - used
            else:
                row[_UNHEALTHY] += 1
        holders: dict[str, tuple[Labels, float, float]] = {}
        for pod in node.pods:
            holding = holding_of(cluster, cluster.placements[pod])
            if holding.share > 0:
                holders[pod] = ((queue_of(pod), holding.pool or "", holding.model or ""), holding.share,
                                holding.share * holding.price)
        return _NodePart(gpus, stranded_on(node, self._needs) > 0, holders)

    def _restrand(self, part: _NodePart, node: NodeState) -> None:
        stuck = stranded_on(node, self._needs) > 0
        if stuck != part.stuck:
            self._add_fragmented(part, -1)
            part.stuck = stuck
            self._add_fragmented(part, 1)

    def _replace(self, name: str, old: _NodePart | None, new: _NodePart | None) -> None:
        """Take ``old``, the node's part as last worked out, out of the totals, and add ``new`` (None: the node is
        gone)."""
        for part, sign in ((old, -1), (new, 1)):
            if part is None:
                continue
            for key, row in part.gpus.items():
                total = self._gpus.get(key)
                if total is None:
                    total = self._gpus[key] = [0, 0, 0, 0, 0]
                for i, value in enumerate(row):
                    total[i] += sign * value
                if total[_CAPACITY] == 0:  # no GPU of this pool and model is left
                    del self._gpus[key]
            self._add_fragmented(part, sign)
            self._add_holders(part.holders.items(), sign)
        if new is None:
            self._nodes.pop(name, None)
        else:
            self._nodes[name] = new

    def _add_fragmented(self, part: _NodePart, sign: int) -> None:
        if not part.stuck:
            return
        for key, row in part.gpus.items():
            total = self._gpus.get(key)
            if total is not None:
                total[_FRAGMENTED] += sign * row[_IDLE]

    def _add_holders(self, holders: Iterable[tuple[str, tuple[Labels, float, float]]], sign: int) -> None:
        for pod, (labels, share, cost) in holders:
            self._dirty.add(labels)
            held = self._held.setdefault(labels, {})
            if sign > 0:
                held[pod] = (share, cost)
            else:
                held.pop(pod, None)
                if not held:
                    del self._held[labels]

