"""Equivalence classes of nodes, so a pod is evaluated once per kind of node state, not once per node.

Two nodes are in the same *group* when every static filter must answer the same for them (labels but the
per-node identity labels, taints, allocatable, GPU model and shape, readiness) and in the same *class* of
that group when, in addition, their usage is equal (resources used, each GPU's free thousandths, memory,
replicas and MIG instances, as a sorted multiset, and the GpuClustering tags when the profile reads them).
Filters and scorers read nothing else, so one representative answers for the whole class; answers are
cached per class and pod shape, and a class lives until its last node leaves it.

The index follows the cluster through ``ClusterState.listeners``: an allocation or release moves only the
changed node to the class of its new state. A driver that changes a node in place (readiness, labels,
taints, GPU health) calls ``GpuPlacer.refresh`` for it.

Search: a class's answer never changes while it lives, so for each pod shape the index keeps its feasible
classes bucketed by score key under a max-heap of the keys and, on the next pod of that shape, only
evaluates the classes created since (read from a creation log); dead classes are dropped lazily when their
bucket reaches the top. A repeated shape thus costs the node changes since its last visit, not the number
of classes. The log is trimmed to what some shape has still to read; a shape that lags far behind is
forgotten and rebuilt from the live classes on its next pod.

Tiers: a node the tier does not rank (``scorers.UNRANKED``: a GPU model without a price, or one reserved
for restricted workloads) goes to a second lane of the shape's heap; the best of each lane are compared
without the tier (:func:`better`, here on negated keys).

Ties: :meth:`ClassIndex.search` returns every best class with its nodes; the caller draws one node
uniformly over their union, so the random tie-break stays uniform over nodes, not classes.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Iterable
from typing import Any, Generic, TypeVar

from gpufleet.cluster.devices import GpuSlot
from gpufleet.cluster.state import ClusterState, NodeState
from gpufleet.gpu.constants import MILLI
from gpufleet.scheduling.placement.need import IDENTITY_LABELS, PodNeed
from gpufleet.scheduling.placement.nodeview import TagIndex
from gpufleet.scheduling.placement.scorers import UNRANKED

Result = Any  # a reason (str) or a score key (tuple), as the placer's evaluate() returns
Evaluate = Callable[[PodNeed, NodeState], Result]
StaticCheck = Callable[[PodNeed, NodeState], "str | None"]
_CACHE_LIMIT = 512  # pod shapes remembered per class (classes die often; a long-lived one is bounded)
_LOG_SLACK = 512  # creation-log entries kept beyond the live classes before the log is trimmed
_MISSING = object()
T = TypeVar("T")


def static_key(ns: NodeState) -> tuple[Any, ...]:
    labels = tuple(sorted((k, v) for k, v in ns.labels.items() if k not in IDENTITY_LABELS))
    gpus = tuple(sorted((g.mode, g.resource, g.model, g.memory_mib, g.replicas, g.dra_driver is not None,
                         tuple((s.resource, s.memory_mib, s.compute_slices) for s in g.mig),
                         tuple((p.resource, p.memory_mib, tuple(sorted(p.consumes.items()))) for p in g.partitions),
                         tuple(sorted(g.counters.items()))) for g in ns.gpus))
    return (labels, ns.taints, tuple(sorted(ns.allocatable.items())), ns.gpu_model, ns.ready, ns.unschedulable,
            ns.fail_requests_greater_than_one, gpus)


def _gpu_state(g: GpuSlot) -> tuple[Any, ...]:
    # The leading mode number keeps tuples of different modes from being compared field by field.
    if g.mode == "whole":
        # Same values as GpuSlot.free_milli / used_memory_mib, without their generic sums (a hot path).
        if g.holder is not None:
            return (0, g.memory_mib, g.healthy, g.resource, 0, g.memory_mib)
        if g.partitions and g.carved:
            # Which partitions are carved decides which others still can be (their counters).
            return (0, g.memory_mib, g.healthy, g.resource, g.free_milli, g.used_memory_mib,
                    tuple(p.holder is None for p in g.partitions))
        if not g.fractions:
            return (0, g.memory_mib, g.healthy, g.resource, MILLI, 0)
        return (0, g.memory_mib, g.healthy, g.resource, g.free_milli, g.used_memory_mib)
    if g.mode == "replicas":
        return (1, g.memory_mib, g.healthy, g.resource, g.replicas, len(g.free_replicas()), g.shared_memory_mib)
    return (2, g.memory_mib, g.healthy, g.resource,
            tuple(sorted((s.resource, s.memory_mib, s.compute_slices, s.holder is None) for s in g.mig)))


def dynamic_key(ns: NodeState, tags: frozenset[str] | None) -> tuple[Any, ...]:
    used = tuple(sorted(kv for kv in ns.used.items() if kv[1]))  # a released resource leaves a 0 behind
    gpus = tuple(sorted(_gpu_state(g) for g in ns.gpus)) if ns.gpus else ()
    return (used, gpus, tags)


class NodeClass:
    __slots__ = ("alive", "cache", "group", "key", "nodes", "pos", "seq")

    def __init__(self, group: NodeGroup, key: tuple[Any, ...], seq: int) -> None:
        self.group = group
        self.key = key
        self.seq = seq
        self.alive = True
        self.nodes: list[NodeState] = []
        self.pos: dict[str, int] = {}
        self.cache: dict[Any, Result] = {}


class _Lane:
    """Classes bucketed by (negated) score key under a min-heap of the keys, so the tied best classes are one
    bucket, not a run of heap pops."""

    __slots__ = ("buckets", "keys")

    def __init__(self) -> None:
        self.keys: list[tuple[int, ...]] = []
        self.buckets: dict[tuple[int, ...], dict[int, NodeClass]] = {}

    def push(self, key: tuple[int, ...], cls: NodeClass) -> None:
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = {}
            heapq.heappush(self.keys, key)
        bucket[cls.seq] = cls

    def top(self) -> tuple[tuple[int, ...], list[NodeClass], int] | None:
        """The best key, its live classes, and how many dead ones were dropped on the way."""
        keys = self.keys
        dropped = 0
        while keys:
            key = keys[0]
            bucket = self.buckets[key]
            dead = [seq for seq, c in bucket.items() if not c.alive]
            for seq in dead:  # a class that died since it was pushed
                del bucket[seq]
            dropped += len(dead)
            if bucket:
                return key, list(bucket.values()), dropped
            del self.buckets[key]
            heapq.heappop(keys)
        return None

    def compact(self) -> int:
        """Drop dead classes everywhere (they pile up in buckets that never reach the top); live count."""
        for key in list(self.buckets):
            bucket = {seq: c for seq, c in self.buckets[key].items() if c.alive}
            if bucket:
                self.buckets[key] = bucket
            else:
                del self.buckets[key]
        self.keys = list(self.buckets)
        heapq.heapify(self.keys)
        return sum(len(b) for b in self.buckets.values())


class ShapeHeap:
    """Feasible classes for one pod shape, in two lanes: keys with a ranked tier and keys with the UNRANKED
    tier, whose best compete on the rest of the key (:func:`better` on negated keys).
    ``cursor`` is how far into the creation log the shape has looked."""

    __slots__ = ("cursor", "entries", "ranked", "unranked")

    def __init__(self, cursor: int) -> None:
        self.cursor = cursor
        self.ranked = _Lane()
        self.unranked: _Lane | None = None
        self.entries = 0

    def push(self, key: tuple[int, ...], cls: NodeClass) -> None:
        """``key`` is the negated score key (heapq is a min-heap)."""
        if key[0] == -UNRANKED:
            if self.unranked is None:
                self.unranked = _Lane()
            self.unranked.push(key, cls)
        else:
            self.ranked.push(key, cls)
        self.entries += 1

    def top(self) -> tuple[tuple[int, ...], list[NodeClass]] | None:
        best: tuple[tuple[int, ...], list[NodeClass]] | None = None
        for lane in (self.ranked, self.unranked):
            found = lane.top() if lane is not None else None
            if found is None:
                continue
            key, classes, dropped = found
            self.entries -= dropped
            if best is None or key[1:] < best[0][1:]:
                best = (key, classes)
            elif key[1:] == best[0][1:]:
                best = (best[0], best[1] + classes)
        return best

    def compact(self) -> None:
        self.entries = self.ranked.compact() + (self.unranked.compact() if self.unranked is not None else 0)


class Best(Generic[T]):
    """The best score key seen and its tied candidates, under the tier order: keys whose tier is UNRANKED
    and keys with a ranked tier are best separately, then compared on the rest of the key (ties join)."""

    __slots__ = ("lanes",)

    def __init__(self) -> None:
        self.lanes: dict[bool, tuple[tuple[int, ...], list[T]]] = {}

    def beaten(self, key: tuple[int, ...]) -> bool:
        """True when ``key`` cannot be among the best (a worse key in its own lane)."""
        cur = self.lanes.get(key[0] == UNRANKED)
        return cur is not None and key < cur[0]

    def offer(self, key: tuple[int, ...], item: T) -> None:
        lane = key[0] == UNRANKED
        cur = self.lanes.get(lane)
        if cur is None or key > cur[0]:
            self.lanes[lane] = (key, [item])
        elif key == cur[0]:
            cur[1].append(item)

    def result(self) -> tuple[tuple[int, ...] | None, list[T]]:
        ranked, unranked = self.lanes.get(False), self.lanes.get(True)
        if ranked is None or unranked is None:
            only = ranked or unranked
            return (only[0], only[1]) if only is not None else (None, [])
        if better(ranked[0], unranked[0]):
            return ranked
        if better(unranked[0], ranked[0]):
            return unranked
        return ranked[0], ranked[1] + unranked[1]


def better(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Whether score key ``a`` beats ``b``. Lexicographic, except that a key whose tier (first element) is
    UNRANKED is compared with a ranked one on the rest of the key only: a model without a price is neither
    cheaper nor dearer than one with a price."""
    if (a[0] == UNRANKED) != (b[0] == UNRANKED):
        return a[1:] > b[1:]
    return a > b


class NodeGroup:
    __slots__ = ("classes", "key", "static")

    def __init__(self, key: tuple[Any, ...]) -> None:
        self.key = key
        self.classes: dict[tuple[Any, ...], NodeClass] = {}
        self.static: dict[Any, str | None] = {}  # constraint key -> first failing static reason

    def representative(self) -> NodeState:
        return next(iter(self.classes.values())).nodes[0]

    def size(self) -> int:
        return sum(len(c.nodes) for c in self.classes.values())


class ClassIndex:
    def __init__(self, cluster: ClusterState, tags: TagIndex | None = None) -> None:
        self.cluster = cluster
        self.tags = tags
        self.groups: dict[tuple[Any, ...], NodeGroup] = {}
        self._where: dict[str, NodeClass] = {}
        self._log: list[NodeClass] = []  # classes in creation order, from absolute position _base on
        self._base = 0
        self._seq = 0
        self._heaps: dict[int, ShapeHeap] = {}
        for ns in cluster:
            self._add(ns)

    # ---- maintenance ---------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._where)

    def class_count(self) -> int:
        return sum(len(g.classes) for g in self.groups.values())

    def _add(self, ns: NodeState) -> None:
        skey = static_key(ns)
        group = self.groups.get(skey)
        if group is None:
            group = self.groups[skey] = NodeGroup(skey)
        self._insert(group, ns)

    def _insert(self, group: NodeGroup, ns: NodeState) -> None:
        tags = self.tags.refresh(ns) if self.tags is not None else None
        dkey = dynamic_key(ns, tags)
        cls = group.classes.get(dkey)
        if cls is None:
            self._seq += 1
            cls = group.classes[dkey] = NodeClass(group, dkey, self._seq)
            self._log.append(cls)
        cls.pos[ns.name] = len(cls.nodes)
        cls.nodes.append(ns)
        self._where[ns.name] = cls

    def _remove(self, ns: NodeState) -> NodeGroup:
        cls = self._where.pop(ns.name)
        i = cls.pos.pop(ns.name)
        last = cls.nodes.pop()
        if last is not ns:  # swap-remove keeps removal O(1)
            cls.nodes[i] = last
            cls.pos[last.name] = i
        group = cls.group
        if not cls.nodes:
            del group.classes[cls.key]
            cls.alive = False
            cls.cache = {}  # the log may hold the dead class a while: let its answers and key go now
            cls.key = ()
        return group

    def on_change(self, ns: NodeState) -> None:
        """ClusterState listener: move the node to the class of its new usage, or of its new static shape
        (labels, taints, readiness: ``ClusterState.touch``), or drop it (``ClusterState.remove_node``)."""
        cls = self._where.get(ns.name)
        if cls is None:
            if self.cluster.nodes.get(ns.name) is ns:
                self._add(ns)
            return
        if self.cluster.nodes.get(ns.name) is not ns or cls.group.key != static_key(ns):
            self.refresh([ns.name])
            return
        tags = self.tags.refresh(ns) if self.tags is not None else None
        if cls.key == dynamic_key(ns, tags):
            return
        group = self._remove(ns)
        self._insert(group, ns)

    def refresh(self, names: Iterable[str] | None = None) -> None:
        """Re-key nodes changed outside allocate/release (all when ``names`` is None) and add new nodes."""
        nodes = self.cluster.nodes
        todo = list(nodes) if names is None else list(names)
        for name in todo:
            if name in self._where:
                cls = self._where[name]
                group = self._remove(cls.nodes[cls.pos[name]])
                if not group.classes:
                    del self.groups[group.key]
            if name in nodes:
                self._add(nodes[name])

    def sync(self) -> None:
        """Pick up nodes added to the cluster since the index was built (ClusterState has no listener for it)."""
        if len(self._where) != len(self.cluster.nodes):
            self.refresh([n for n in self.cluster.nodes if n not in self._where])

    def clear_caches(self) -> None:
        """Forget every cached answer (the placer does so before it reuses pod-shape ids)."""
        for group in self.groups.values():
            group.static.clear()
            for cls in group.classes.values():
                cls.cache.clear()
        self._heaps.clear()

    # ---- queries -------------------------------------------------------------------------------------------
    def _static(self, group: NodeGroup, need: PodNeed, check: StaticCheck) -> str | None:
        r = group.static.get(need.constraint_key, _MISSING)
        if r is _MISSING:
            if len(group.static) >= 4 * _CACHE_LIMIT:
                group.static.clear()
            r = group.static[need.constraint_key] = check(need, group.representative())
        return r  # type: ignore[return-value]

    def _result(self, cls: NodeClass, need: PodNeed, evaluate: Evaluate) -> Result:
        res = cls.cache.get(need.shape_key)
        if res is None:
            if len(cls.cache) >= _CACHE_LIMIT:
                cls.cache.clear()
            res = cls.cache[need.shape_key] = evaluate(need, cls.nodes[0])
        return res

    def search(self, need: PodNeed, evaluate: Evaluate, check: StaticCheck,
               allowed: Collection[str] | None = None) -> tuple[Result, list[list[NodeState]]]:
        """The best score key among feasible nodes and, per tied class, its candidate nodes."""
        if allowed is not None or need.per_node:
            return self._scan(need, evaluate, check, allowed)
        st = self._heaps.get(need.shape_key)
        log = self._log
        end = self._base + len(log)
        if st is None:
            # A new shape (or one dropped for lagging) starts from every live class.
            st = self._heaps[need.shape_key] = ShapeHeap(end)
            for group in self.groups.values():
                for cls in group.classes.values():
                    self._push(st, cls, need, evaluate, check)
        elif st.cursor < end:
            for cls in log[st.cursor - self._base:]:
                if cls.alive:
                    self._push(st, cls, need, evaluate, check)
            st.cursor = end
            if st.entries > 64 and st.entries > 3 * len(self._where):
                st.compact()
        if len(log) > _LOG_SLACK + 2 * len(self._where):
            self._trim_log()
        found = st.top()
        if found is None:
            return None, []
        key, classes = found
        return tuple(-x for x in key), [c.nodes for c in classes]

    def _trim_log(self) -> None:
        """Drop the log prefix every shape has read; a shape lagging far behind forgets its heap instead (its
        next pod rebuilds it from the live classes, which costs what catching up would)."""
        end = self._base + len(self._log)
        lag_limit = _LOG_SLACK + len(self._where)
        for shape in [k for k, st in self._heaps.items() if end - st.cursor > lag_limit]:
            del self._heaps[shape]
        keep_from = min((st.cursor for st in self._heaps.values()), default=end)
        del self._log[: keep_from - self._base]
        self._base = keep_from

    def _push(self, st: ShapeHeap, cls: NodeClass, need: PodNeed, evaluate: Evaluate, check: StaticCheck) -> None:
        if self._static(cls.group, need, check) is not None:
            return
        res = self._result(cls, need, evaluate)
        if type(res) is not str:
            st.push(tuple(-x for x in res), cls)  # negated: heapq is a min-heap

    def _scan(self, need: PodNeed, evaluate: Evaluate, check: StaticCheck,
              allowed: Collection[str] | None) -> tuple[Result, list[list[NodeState]]]:
        """Every class, with its nodes filtered by ``allowed`` and, for identity-label pods, per node."""
        best: Best[list[NodeState]] = Best()
        per_node = need.per_node
        for group in self.groups.values():
            if not per_node and self._static(group, need, check) is not None:
                continue
            for cls in group.classes.values():
                res = self._result(cls, need, evaluate)
                if type(res) is str or best.beaten(res):
                    continue
                nodes = [n for n in cls.nodes if (allowed is None or n.name in allowed)
                         and (not per_node or check(need, n) is None)]
                if nodes:
                    best.offer(res, nodes)
        return best.result()

    def reasons(self, need: PodNeed, evaluate: Evaluate, check: StaticCheck) -> tuple[dict[str, int], int]:
        """Per reason, how many nodes fail first on it; and how many nodes pass."""
        out: dict[str, int] = {}
        feasible = 0
        for group in self.groups.values():
            static = None if need.per_node else self._static(group, need, check)
            if static is not None:
                out[static] = out.get(static, 0) + group.size()
                continue
            for cls in group.classes.values():
                res = self._result(cls, need, evaluate)
                dynamic = res if type(res) is str else None
                if not need.per_node:
                    if dynamic is None:
                        feasible += len(cls.nodes)
                    else:
                        out[dynamic] = out.get(dynamic, 0) + len(cls.nodes)
                    continue
                for n in cls.nodes:
                    r = check(need, n) or dynamic
                    if r is None:
                        feasible += 1
                    else:
                        out[r] = out.get(r, 0) + 1
        return out, feasible

    def cached(self, need: PodNeed, node: NodeState, key: Any, compute: Callable[[PodNeed, NodeState], Any]) -> Any:
        """A per-class memo for other per-node questions (topology capacity): ``compute`` on the node's class."""
        cls = self._where[node.name]
        k = (key, need.shape_key)
        res = cls.cache.get(k, _MISSING)
        if res is _MISSING:
            res = cls.cache[k] = compute(need, cls.nodes[0])
        return res
