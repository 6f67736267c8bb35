"""Quota arithmetic of Kueue's cohort tree (ClusterQueues as leaves, Cohorts as inner nodes).

Pure and self-contained: amounts are ints in canonical units chosen by the caller (millicores,
bytes, counts) and keyed by ``FR = (flavor, resource)``.

Per flavor-resource every node has, as in Kueue's ``resource_node.go``:

* subtree quota: a ClusterQueue's nominal quota; for a Cohort its own nominal quota plus what
  every child makes available to it (the child's subtree quota minus its local quota);
* local quota ``max(0, subtree - lendingLimit)`` when a lending limit is set, else 0: capacity
  that never leaves the node;
* usage: a ClusterQueue's admitted usage; for a Cohort the part of its children's usage that
  did not fit into their local quotas.  Cohort usage is maintained incrementally by
  :meth:`QuotaTree.add_usage` / :meth:`QuotaTree.remove_usage`, which are exact inverses.

Numbers are stored column-wise (one :class:`_Column` of int lists per flavor-resource, indexed
by node id): a query hashes its ``FR`` once and then walks the node's ancestor chain with list
indexing only, O(depth).  Scheduling cycles simulate admissions and preemptions and undo them
with :meth:`QuotaTree.checkpoint` / :meth:`QuotaTree.rollback`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["FR", "MAX_INT64", "QuotaNode", "QuotaTree", "ResourceQuota"]

FR = tuple[str, str]

# Kueue reports a zero-weight borrower's weighted share as MaxInt64 in status.
MAX_INT64 = (1 << 63) - 1


@dataclass(slots=True)
class ResourceQuota:
    nominal: int = 0
    borrowing_limit: int | None = None  # None = unlimited
    lending_limit: int | None = None  # None = everything lendable

    def __post_init__(self) -> None:
        if self.nominal < 0:
            raise ValueError(f"nominal quota must be >= 0, got {self.nominal}")
        if self.borrowing_limit is not None and self.borrowing_limit < 0:
            raise ValueError(f"borrowing limit must be >= 0, got {self.borrowing_limit}")
        if self.lending_limit is not None and self.lending_limit < 0:
            raise ValueError(f"lending limit must be >= 0, got {self.lending_limit}")


class _Column:
    """Everything about one flavor-resource, indexed by node id."""

    __slots__ = ("cap", "local", "over", "over_cqs", "pot", "potcap", "present", "subtree", "usage")

    def __init__(self, size: int) -> None:
        self.usage: list[int] = [0] * size
        self.subtree: list[int] = [0] * size
        self.local: list[int] = [0] * size
        # With a borrowing limit: most the node may hold in its parent (subtree - local + BL) ...
        self.cap: list[int | None] = [None] * size
        # ... and the cap on its potential available (subtree + BL).
        self.potcap: list[int | None] = [None] * size
        # Whether the FR is in the node's subtree quota (declared by it or by a descendant).
        self.present: list[bool] = [False] * size
        self.pot: list[int | None] = [None] * size  # potentialAvailable cache (usage-independent)
        # Over-quota index (usage > subtree quota), kept exact by _add/_remove: parent id -> such children,
        # and every such ClusterQueue. Preemption looks for reclaimable capacity only there.
        self.over: dict[int, set[int]] = {}
        self.over_cqs: set[int] = set()

    def grow(self, size: int) -> None:
        extra = size - len(self.usage)
        if extra > 0:
            self.usage.extend([0] * extra)
            self.subtree.extend([0] * extra)
            self.local.extend([0] * extra)
            self.cap.extend([None] * extra)
            self.potcap.extend([None] * extra)
            self.present.extend([False] * extra)
            self.pot.extend([None] * extra)

    def reset_static(self) -> None:
        size = len(self.usage)
        self.subtree = [0] * size
        self.local = [0] * size
        self.cap = [None] * size
        self.potcap = [None] * size
        self.present = [False] * size
        self.pot = [None] * size
        self.over = {}
        self.over_cqs = set()


class QuotaNode:
    """A ClusterQueue (leaf, ``is_cluster_queue``) or a Cohort (inner node).

    ``usage`` and ``subtree`` are read-only dict snapshots built on access; derived values are
    valid after :meth:`QuotaTree.finalize`, which the tree's accessors run when needed.
    """

    __slots__ = (
        "_below",
        "_root",
        "_tree",
        "children",
        "disabled",
        "explicit",
        "fair_weight",
        "height",
        "id",
        "in_cycle",
        "is_cluster_queue",
        "lendable",
        "name",
        "parent",
        "quotas",
    )

    def __init__(self, tree: QuotaTree, node_id: int, name: str, is_cluster_queue: bool) -> None:
        self._tree = tree
        self.id = node_id
        self.name = name
        self.is_cluster_queue = is_cluster_queue
        self.parent: QuotaNode | None = None
        self.children: list[QuotaNode] = []
        self.quotas: dict[FR, ResourceQuota] = {}
        self.fair_weight = 1.0
        # False for a cohort that only exists because something names it as parent/cohort.
        self.explicit = True
        self.height = 0
        self.in_cycle = False
        # True when the parent chain runs into a cycle: Kueue admits nothing in such a tree.
        self.disabled = False
        self._root = node_id
        # Ids of the ancestors below the root, top-down, ending with this node (empty for a root).
        self._below: tuple[int, ...] = ()
        # Per resource name, what this node (as a parent) can lend: Σ_flavors potentialAvailable.
        self.lendable: dict[str, int] | None = None

    def __repr__(self) -> str:
        kind = "ClusterQueue" if self.is_cluster_queue else "Cohort"
        return f"<{kind} {self.name!r}>"

    def _col(self, fr: FR) -> _Column | None:
        tree = self._tree
        if tree._dirty:
            tree.finalize()
        return tree._cols.get(fr)

    @property
    def usage(self) -> dict[FR, int]:
        tree = self._tree
        if tree._dirty:
            tree.finalize()
        i = self.id
        return {fr: c.usage[i] for fr, c in tree._cols.items() if c.present[i] or c.usage[i]}

    @property
    def subtree(self) -> dict[FR, int]:
        tree = self._tree
        if tree._dirty:
            tree.finalize()
        i = self.id
        return {fr: c.subtree[i] for fr, c in tree._cols.items() if c.present[i]}

    def subtree_quota(self, fr: FR) -> int:
        c = self._col(fr)
        return 0 if c is None else c.subtree[self.id]

    def local_quota(self, fr: FR) -> int:
        """Capacity of this node that is never lent to its parent."""
        c = self._col(fr)
        return 0 if c is None else c.local[self.id]

    def usage_of(self, fr: FR) -> int:
        c = self._col(fr)
        return 0 if c is None else c.usage[self.id]

    def local_available(self, fr: FR) -> int:
        c = self._col(fr)
        return 0 if c is None else max(0, c.local[self.id] - c.usage[self.id])

    def nominal(self, fr: FR) -> int:
        q = self.quotas.get(fr)
        return 0 if q is None else q.nominal

    def has_parent(self) -> bool:
        return self.parent is not None


def _available(col: _Column, root: int, below: tuple[int, ...]) -> int:
    """Kueue's recursive ``available`` evaluated top-down; negative for a node in debt."""
    usage = col.usage
    local = col.local
    cap = col.cap
    a = col.subtree[root] - usage[root]
    for i in below:
        u = usage[i]
        g = local[i]
        c = cap[i]
        if c is not None:
            limit = c - (u - g if u > g else 0)
            if limit < a:
                a = limit
        if g > u:
            a += g - u
    return a


def _potential(col: _Column, root: int, below: tuple[int, ...], me: int) -> int:
    cached = col.pot[me]
    if cached is not None:
        return cached
    local = col.local
    potcap = col.potcap
    p = col.subtree[root]
    for i in below:
        p += local[i]
        c = potcap[i]
        if c is not None and c < p:
            p = c
    col.pot[me] = p
    return p


def _cross(col: _Column, up: list[int], i: int, over: bool, leaf: bool) -> None:
    """Node ``i`` went over (or back within) its subtree quota: update the over-quota index."""
    p = up[i]
    if over:
        if p >= 0:
            col.over.setdefault(p, set()).add(i)
        if leaf:
            col.over_cqs.add(i)
    else:
        if p >= 0:
            col.over.get(p, set()).discard(i)
        if leaf:
            col.over_cqs.discard(i)


def _add(col: _Column, up: list[int], i: int, v: int) -> None:
    # Usage first fills the node's unused local quota; only the excess reaches the parent.
    usage = col.usage
    local = col.local
    subtree = col.subtree
    leaf = True  # usage is only ever added to ClusterQueues, the first node of the walk
    while i >= 0:
        u = usage[i]
        usage[i] = u + v
        if u <= subtree[i] < u + v:
            _cross(col, up, i, True, leaf)
        leaf = False
        free = local[i] - u
        if free < 0:
            free = 0
        if v <= free:
            return
        v -= free
        i = up[i]


def _remove(col: _Column, up: list[int], i: int, v: int) -> None:
    # Exact inverse of _add: the parent only gives back what this node had stored there.
    usage = col.usage
    local = col.local
    subtree = col.subtree
    leaf = True
    while i >= 0:
        u = usage[i]
        usage[i] = u - v
        if u - v <= subtree[i] < u:
            _cross(col, up, i, False, leaf)
        leaf = False
        stored = u - local[i]
        if stored <= 0:
            return
        if v > stored:
            v = stored
        i = up[i]


_LogEntry = tuple[QuotaNode, tuple[tuple[FR, int], ...], bool]


class QuotaTree:
    """The cohort forest of ClusterQueues and Cohorts with their quotas and usage."""

    def __init__(self) -> None:
        self._cqs: dict[str, QuotaNode] = {}
        self._cohorts: dict[str, QuotaNode] = {}
        self._nodes: list[QuotaNode] = []
        # Parent id used for usage propagation; -1 for roots and for disabled nodes, so that a
        # cycle can never make propagation loop.
        self._up: list[int] = []
        self._cols: dict[FR, _Column] = {}
        self._dirty = True
        self._problems: list[str] = []
        # Undo log of usage changes, only written while a checkpoint is open.
        self._log: list[_LogEntry] = []
        self._marks: list[tuple[int, int]] = []  # (token, log position)
        self._next_token = 0
        # Generations: how many lasting changes each cohort tree (by its root's id) has seen, and the whole forest
        # (rebuilt, or changed while not finalized). A usage change made outside any checkpoint lasts; one inside
        # is rolled back, unless committed (commit counts as a change of the forest).
        self._tree_generation: dict[int, int] = {}
        self._forest_generation = 0

    # ----------------------------------------------------------------------------------------
    # construction

    def _new_node(self, name: str, is_cluster_queue: bool) -> QuotaNode:
        node = QuotaNode(self, len(self._nodes), name, is_cluster_queue)
        self._nodes.append(node)
        self._up.append(-1)
        for col in self._cols.values():
            col.grow(len(self._nodes))
        return node

    def _column(self, fr: FR) -> _Column:
        col = self._cols.get(fr)
        if col is None:
            col = self._cols[fr] = _Column(len(self._nodes))
        return col

    def _ensure_cohort(self, name: str) -> QuotaNode:
        node = self._cohorts.get(name)
        if node is None:
            node = self._new_node(name, False)
            node.explicit = False
            self._cohorts[name] = node
        return node

    @staticmethod
    def _set_parent(node: QuotaNode, parent: QuotaNode | None) -> None:
        if node.parent is parent:
            return
        if node.parent is not None:
            node.parent.children.remove(node)
        node.parent = parent
        if parent is not None:
            parent.children.append(node)

    @staticmethod
    def _check_weight(fair_weight: float) -> float:
        if not fair_weight >= 0:  # also rejects NaN
            raise ValueError(f"fair sharing weight must be >= 0, got {fair_weight}")
        return float(fair_weight)

    def add_cohort(
        self,
        name: str,
        parent: str | None = None,
        quotas: Mapping[FR, ResourceQuota] | None = None,
        fair_weight: float = 1.0,
    ) -> None:
        """Add or replace a Cohort.  A parent that does not exist yet becomes an implicit,
        empty cohort (it is filled in if it is added later)."""
        node = self._ensure_cohort(name)
        node.explicit = True
        node.quotas = dict(quotas or {})
        node.fair_weight = self._check_weight(fair_weight)
        self._set_parent(node, None if parent is None else self._ensure_cohort(parent))
        self._dirty = True

    def add_cluster_queue(
        self,
        name: str,
        cohort: str | None,
        quotas: Mapping[FR, ResourceQuota],
        fair_weight: float = 1.0,
    ) -> None:
        """Add or replace a ClusterQueue; its usage is kept when it is replaced."""
        node = self._cqs.get(name)
        if node is None:
            node = self._new_node(name, True)
            self._cqs[name] = node
        node.quotas = dict(quotas)
        node.fair_weight = self._check_weight(fair_weight)
        self._set_parent(node, None if cohort is None else self._ensure_cohort(cohort))
        self._dirty = True

    def finalize(self) -> list[str]:
        """Derive subtree quotas, heights and cohort usage; detect cohort cycles.

        Returns the problems found.  Nodes whose parent chain runs into a cycle are marked
        ``disabled`` and refuse every admission (Kueue disables the whole tree).
        """
        problems: list[str] = []
        for cohort in self._cohorts.values():
            cohort.in_cycle = False
            cohort.disabled = False

        # Every node has at most one parent, so each walk up either ends at a root or runs into
        # a cycle; state 1 marks nodes of the current walk.
        state: dict[str, int] = {}
        for start in sorted(self._cohorts):
            path: list[QuotaNode] = []
            n: QuotaNode | None = self._cohorts[start]
            while n is not None and n.name not in state:
                state[n.name] = 1
                path.append(n)
                n = n.parent
            if n is not None and state[n.name] == 1:
                cycle = path[path.index(n) :]
                for c in cycle:
                    c.in_cycle = True
                names = " -> ".join(c.name for c in [*cycle, cycle[0]])
                problems.append(f"cohort cycle: {names}; admission disabled in its tree")
            for p in path:
                state[p.name] = 2

        # With every cycle marked, a walk up from any other cohort ends at a root or a cycle.
        for cohort in self._cohorts.values():
            walk: QuotaNode | None = cohort
            while walk is not None and not walk.in_cycle and not walk.disabled:
                walk = walk.parent
            cohort.disabled = walk is not None

        for name in sorted(self._cqs):
            cq = self._cqs[name]
            cq.disabled = cq.parent is not None and cq.parent.disabled
            if cq.disabled:
                problems.append(f"cluster queue {name}: cohort tree contains a cycle; admission disabled")

        for node in self._nodes:
            for fr in node.quotas:
                self._column(fr)
        for col in self._cols.values():
            col.reset_static()

        for node in self._nodes:
            if node.disabled:
                self._reset_disabled(node)
            elif node.parent is None:
                self._derive(node, node.id, ())
                for fr, q in node.quotas.items():
                    if q.borrowing_limit is not None or q.lending_limit is not None:
                        kind = "cluster queue" if node.is_cluster_queue else "cohort"
                        problems.append(f"{kind} {node.name}: borrowing/lending limit on {fr} ignored without a parent")

        self._problems = problems
        self._dirty = False
        self._forest_generation += 1
        return list(problems)

    def _reset_disabled(self, node: QuotaNode) -> None:
        i = node.id
        node._root = i
        node._below = ()
        node.lendable = None
        node.height = 0
        self._up[i] = -1
        for fr, q in node.quotas.items():
            col = self._cols[fr]
            col.subtree[i] = q.nominal
            col.present[i] = True
        if not node.is_cluster_queue:
            # Nothing propagates into a disabled tree, so cohorts there hold no usage.
            for col in self._cols.values():
                col.usage[i] = 0

    def _derive(self, node: QuotaNode, root: int, below: tuple[int, ...]) -> None:
        i = node.id
        node._root = root
        node._below = below
        node.lendable = None
        parent = node.parent
        self._up[i] = -1 if parent is None else parent.id
        height = 0
        for child in node.children:
            self._derive(child, root, (*below, child.id))
            height = max(height, 1 if child.is_cluster_queue else child.height + 1)
        node.height = height
        quotas = node.quotas
        for fr, col in self._cols.items():
            q = quotas.get(fr)
            s = 0 if q is None else q.nominal
            present = q is not None
            if node.children:
                usage = col.usage
                subtree = col.subtree
                local = col.local
                used = 0
                for child in node.children:
                    j = child.id
                    if col.present[j]:
                        present = True
                        s += subtree[j] - local[j]
                    over = usage[j] - local[j]
                    if over > 0:
                        used += over
                    if usage[j] > subtree[j]:
                        col.over.setdefault(i, set()).add(j)
                usage[i] = used
            elif not node.is_cluster_queue:
                col.usage[i] = 0
            col.subtree[i] = s
            col.present[i] = present
            if node.is_cluster_queue and col.usage[i] > s:
                col.over_cqs.add(i)
            if parent is not None and q is not None:
                g = 0 if q.lending_limit is None else max(0, s - q.lending_limit)
                col.local[i] = g
                bl = q.borrowing_limit
                if bl is not None:
                    col.cap[i] = s - g + bl
                    col.potcap[i] = s + bl

    def invalidate(self) -> None:
        """Mark every derived value stale: the next query re-derives subtree quotas and cohort usage from
        ClusterQueue usage alone (used by naive reference models in benchmarks and tests)."""
        self._dirty = True

    @property
    def problems(self) -> list[str]:
        if self._dirty:
            self.finalize()
        return list(self._problems)

    # ----------------------------------------------------------------------------------------
    # lookup

    def cluster_queue(self, name: str) -> QuotaNode:
        if self._dirty:
            self.finalize()
        return self._cqs[name]

    def cohort(self, name: str) -> QuotaNode:
        if self._dirty:
            self.finalize()
        return self._cohorts[name]

    def cluster_queue_names(self) -> list[str]:
        return list(self._cqs)

    def cohort_names(self) -> list[str]:
        return list(self._cohorts)

    def flavor_resources(self) -> list[FR]:
        return list(self._cols)

    def _node(self, node: str | QuotaNode) -> QuotaNode:
        """A name resolves to the ClusterQueue first, then to the Cohort of that name."""
        if self._dirty:
            self.finalize()
        if isinstance(node, QuotaNode):
            return node
        found = self._cqs.get(node)
        if found is None:
            found = self._cohorts.get(node)
        if found is None:
            raise KeyError(node)
        return found

    def usage(self, node: str | QuotaNode, fr: FR) -> int:
        n = self._node(node)
        col = self._cols.get(fr)
        return 0 if col is None else col.usage[n.id]

    def nonzero_usage(self) -> dict[tuple[bool, str], dict[FR, int]]:
        """All non-zero usage keyed by (is_cluster_queue, name); for comparisons and debugging."""
        if self._dirty:
            self.finalize()
        out: dict[tuple[bool, str], dict[FR, int]] = {}
        for node in self._nodes:
            i = node.id
            nz = {fr: c.usage[i] for fr, c in self._cols.items() if c.usage[i]}
            if nz:
                out[(node.is_cluster_queue, node.name)] = nz
        return out

    # ----------------------------------------------------------------------------------------
    # capacity queries

    def available(self, cq: str, fr: FR) -> int:
        """Unused capacity the ClusterQueue could take now without preemption (>= 0); 0 for a
        flavor-resource the ClusterQueue does not declare."""
        node = self._cqs[cq]
        if self._dirty:
            self.finalize()
        col = self._cols.get(fr)
        if col is None or node.disabled or not col.present[node.id]:
            return 0
        a = _available(col, node._root, node._below)
        return a if a > 0 else 0

    def potential_available(self, cq: str, fr: FR) -> int:
        """The most the ClusterQueue could ever hold of ``fr`` if nothing else were used."""
        node = self._cqs[cq]
        if self._dirty:
            self.finalize()
        col = self._cols.get(fr)
        if col is None or node.disabled or not col.present[node.id]:
            return 0
        return _potential(col, node._root, node._below, node.id)

    def node_available(self, node: str | QuotaNode, fr: FR) -> int:
        """Kueue's raw ``available`` for any node: not clamped at 0 and without the
        ClusterQueue declaration check; 0 for disabled nodes."""
        n = self._node(node)
        col = self._cols.get(fr)
        if col is None or n.disabled:
            return 0
        return _available(col, n._root, n._below)

    def node_potential_available(self, node: str | QuotaNode, fr: FR) -> int:
        n = self._node(node)
        col = self._cols.get(fr)
        if col is None or n.disabled:
            return 0
        return _potential(col, n._root, n._below, n.id)

    def fits(self, cq: str, usage: Mapping[FR, int]) -> bool:
        """Every flavor-resource of ``usage`` is within ``available``."""
        node = self._cqs[cq]
        if self._dirty:
            self.finalize()
        if node.disabled:
            return False
        i = node.id
        root = node._root
        below = node._below
        cols = self._cols
        for fr, v in usage.items():
            col = cols.get(fr)
            if col is None or not col.present[i]:
                if v > 0:
                    return False
                continue
            if v > _available(col, root, below):
                return False
        return True

    def try_add_usage(self, cq: str, usage: Mapping[FR, int]) -> bool:
        """``fits`` followed by ``add_usage`` when it fits."""
        if not self.fits(cq, usage):
            return False
        self.add_usage(cq, usage)
        return True

    # ----------------------------------------------------------------------------------------
    # usage

    def add_usage(self, cq: str, usage: Mapping[FR, int]) -> None:
        self._change(cq, usage, True)

    def remove_usage(self, cq: str, usage: Mapping[FR, int]) -> None:
        self._change(cq, usage, False)

    def _change(self, cq: str, usage: Mapping[FR, int], add: bool) -> None:
        """A usage change, logged while a checkpoint is open, else counted in the tree's generation."""
        node = self._cqs[cq]
        if self._marks:
            self._log.append((node, tuple(usage.items()), add))
        else:
            self._changed(node)
        self._apply(node, usage.items(), add)

    def add_lasting_usage(self, cq: str, usage: Mapping[FR, int]) -> None:
        """:meth:`add_usage` as if no checkpoint were open: no rollback takes it out, and it counts as a lasting
        change of the tree's generation. A scheduling cycle charges what it admits this way while its snapshot
        checkpoint is open, instead of charging it in the snapshot, rolling it back and charging it again. Usage
        changes commute (every derived value is a function of ClusterQueue usage alone), so rolling back the
        snapshot's other changes afterwards leaves the tree exactly as charging after the rollback would."""
        self._lasting(self.add_usage, cq, usage)

    def remove_lasting_usage(self, cq: str, usage: Mapping[FR, int]) -> None:
        """The inverse of :meth:`add_lasting_usage`, also kept through rollbacks."""
        self._lasting(self.remove_usage, cq, usage)

    def _lasting(self, change: Callable[[str, Mapping[FR, int]], None], cq: str, usage: Mapping[FR, int]) -> None:
        marks = self._marks
        self._marks = []  # through add_usage/remove_usage, so that a subclass overriding them sees the change
        try:
            change(cq, usage)
        finally:
            self._marks = marks

    # ----------------------------------------------------------------------------------------
    # generations

    def _changed(self, node: QuotaNode) -> None:
        if self._dirty:
            self._forest_generation += 1  # root ids are re-derived by the next finalize
            return
        root = node._root
        self._tree_generation[root] = self._tree_generation.get(root, 0) + 1

    def note_change(self, cq: str) -> None:
        """Something that depends on this ClusterQueue's cohort tree changed outside the tree (a workload admitted
        there began its eviction): bump the tree's generation as a lasting usage change would."""
        self._changed(self._cqs[cq])

    def generation(self, cq: str) -> tuple[int, int, int]:
        """The ClusterQueue's cohort tree (its root's id) and the changes it has seen: equal values mean that no
        usage in the tree has changed for good in between (checkpoints rolled back leave it as it was), nor
        anything :meth:`note_change` was told of."""
        return self.local_state(cq)[0]  # worked out there once: the memo reads it with the rest, per head

    def local_state(self, cq: str) -> tuple[tuple[int, int, int], tuple[int, ...], bool]:
        """:meth:`generation`, the ClusterQueue's usage of every flavor-resource of the forest (in the tree's column
        order), and whether it is above its quota in any of them: all a nomination memo reads of the tree, in one
        call."""
        node = self._cqs[cq]
        if self._dirty:
            self.finalize()
        root = node._root
        generation = (root, self._forest_generation, self._tree_generation.get(root, 0))
        i = node.id
        usage = []
        over = False
        for col in self._cols.values():
            u = col.usage[i]
            usage.append(u)
            if u > col.subtree[i]:
                over = True
        return generation, tuple(usage), over

    def _apply(self, node: QuotaNode, items: Iterable[tuple[FR, int]], add: bool) -> None:
        cols = self._cols
        i = node.id
        if self._dirty:
            # Cohort usage is re-derived from ClusterQueue usage by finalize().
            for fr, v in items:
                col = cols.get(fr) or self._column(fr)
                col.usage[i] += v if add else -v
            return
        op = _add if add else _remove
        up = self._up
        for fr, v in items:
            op(cols.get(fr) or self._column(fr), up, i, v)

    def checkpoint(self) -> int:
        """Open a checkpoint; usage changes are logged until it is rolled back or committed.
        Checkpoints nest."""
        token = self._next_token
        self._next_token += 1
        self._marks.append((token, len(self._log)))
        return token

    def _pop_mark(self, token: int) -> int:
        for k in range(len(self._marks) - 1, -1, -1):
            if self._marks[k][0] == token:
                pos = self._marks[k][1]
                del self._marks[k:]
                return pos
        raise KeyError(f"unknown or closed checkpoint {token}")

    def rollback(self, mark: int) -> None:
        """Undo every usage change since ``mark``; closes it and any checkpoint opened after it."""
        pos = self._pop_mark(mark)
        log = self._log
        while len(log) > pos:
            node, items, added = log.pop()
            self._apply(node, reversed(items), not added)
        if not self._marks:
            log.clear()

    def commit(self, mark: int) -> None:
        """Keep the changes since ``mark``; closes it and any checkpoint opened after it."""
        pos = self._pop_mark(mark)
        if len(self._log) > pos:
            self._forest_generation += 1  # changes made inside a checkpoint now last
        if not self._marks:
            self._log.clear()

    @contextmanager
    def simulate(self) -> Iterator[QuotaTree]:
        """Context in which every usage change is undone on exit."""
        mark = self.checkpoint()
        try:
            yield self
        finally:
            self.rollback(mark)

    def snapshot(self) -> QuotaTree:
        """An independent deep copy, without open checkpoints."""
        if self._dirty:
            self.finalize()
        log, marks = self._log, self._marks
        self._log, self._marks = [], []
        try:
            return copy.deepcopy(self)
        finally:
            self._log, self._marks = log, marks

    # ----------------------------------------------------------------------------------------
    # borrowing

    def is_borrowing(self, cq: str, fr: FR, extra: int = 0) -> bool:
        """``usage + extra > nominal`` (Kueue's BorrowingWith)."""
        return self.usage(self._cqs[cq], fr) + extra > self._cqs[cq].nominal(fr)

    def borrowed(self, cq: str, fr: FR) -> int:
        return max(0, self.usage(self._cqs[cq], fr) - self._cqs[cq].nominal(fr))

    def children_over_quota(self, node: QuotaNode, frs: Iterable[FR]) -> list[QuotaNode]:
        """Children of ``node`` whose usage exceeds their subtree quota (a ClusterQueue's nominal) in any of
        ``frs``, in id order; read from an index maintained with usage, so it costs what it returns."""
        if self._dirty:
            self.finalize()
        ids: set[int] = set()
        for fr in frs:
            col = self._cols.get(fr)
            if col is not None:
                found = col.over.get(node.id)
                if found:
                    ids |= found
        return [self._nodes[j] for j in sorted(ids)]

    def cluster_queues_over_quota(self, frs: Iterable[FR]) -> list[QuotaNode]:
        """Every ClusterQueue with usage above its nominal quota in any of ``frs``, in id order."""
        if self._dirty:
            self.finalize()
        ids: set[int] = set()
        for fr in frs:
            col = self._cols.get(fr)
            if col is not None:
                ids |= col.over_cqs
        return [self._nodes[j] for j in sorted(ids)]

    def over_quota(self, node: QuotaNode, frs: Iterable[FR]) -> bool:
        """Usage above the node's own quota in any of ``frs`` (Kueue's not IsWithinNominalInResources)."""
        if self._dirty:
            self.finalize()
        i = node.id
        for fr in frs:
            col = self._cols.get(fr)
            if col is not None and col.usage[i] > col.subtree[i]:
                return True
        return False

    def within_nominal(self, node: str | QuotaNode, fr: FR) -> bool:
        """Usage within the node's own quota (a ClusterQueue's nominal, a Cohort's subtree)."""
        n = self._node(node)
        col = self._cols.get(fr)
        return col is None or col.usage[n.id] <= col.subtree[n.id]

    def _fit_walk(self, node: QuotaNode, col: _Column, val: int) -> QuotaNode | None:
        # A cohort holds ``remaining`` when its usage plus it stays within its subtree quota;
        # each level that cannot absorbs what is left of its local quota first.
        usage = col.usage
        local = col.local
        subtree = col.subtree
        i = node.id
        remaining = val - max(0, local[i] - usage[i])
        anc = node.parent
        while anc is not None:
            j = anc.id
            if usage[j] + remaining <= subtree[j]:
                return anc
            remaining -= max(0, local[j] - usage[j])
            anc = anc.parent
        return None

    def lowest_subtree_that_fits(self, cq: str, fr: FR, val: int) -> tuple[int, bool]:
        """Kueue's FindHeightOfLowestSubtreeThatFits: (height, whether that subtree is smaller
        than the whole cohort tree).  Not borrowing, or no cohort: (0, has cohort).  When no
        subtree holds ``val``: (height of the root, False).  Borrowing limits are not
        considered here, as in Kueue."""
        node = self._cqs[cq]
        has_parent = node.parent is not None
        if not self.is_borrowing(cq, fr, val) or not has_parent:
            return 0, has_parent
        if node.disabled:
            return 0, False
        col = self._cols.get(fr)
        found = None if col is None else self._fit_walk(node, col, val)
        if found is None:
            return self._nodes[node._root].height, False
        return found.height, found.parent is not None

    def assess(self, cq: str, fr: FR, val: int) -> tuple[int, int, int, bool]:
        """What flavor assignment asks of one flavor-resource, from one lookup of the queue and the column:
        ``(potential_available(cq, fr), available(cq, fr), *lowest_subtree_that_fits(cq, fr, val))``."""
        node = self._cqs[cq]
        if self._dirty:
            self.finalize()
        col = self._cols.get(fr)
        i = node.id
        parent = node.parent
        if col is None:
            q = node.quotas.get(fr)
            if val <= (0 if q is None else q.nominal) or parent is None:
                return 0, 0, 0, parent is not None
            if node.disabled:
                return 0, 0, 0, False
            return 0, 0, self._nodes[node._root].height, False
        if node.disabled:
            most = available = 0
        elif col.present[i]:
            root = node._root
            below = node._below
            most = _potential(col, root, below, i)
            available = _available(col, root, below)
            if available < 0:
                available = 0
        else:
            most = available = 0
        q = node.quotas.get(fr)
        if col.usage[i] + val <= (0 if q is None else q.nominal) or parent is None:
            return most, available, 0, parent is not None
        if node.disabled:
            return most, available, 0, False
        found = self._fit_walk(node, col, val)
        if found is None:
            return most, available, self._nodes[node._root].height, False
        return most, available, found.height, found.parent is not None

    def borrowing_level(self, cq: str, fr: FR, val: int) -> int | None:
        """0 if ``usage + val <= nominal``; else the height of the smallest ancestor subtree
        that holds it (1 for a cohort of ClusterQueues); None when no subtree does, including
        for a ClusterQueue without cohort."""
        node = self._cqs[cq]
        if not self.is_borrowing(cq, fr, val):
            return 0
        col = self._cols.get(fr)
        if node.parent is None or node.disabled or col is None:
            return None
        found = self._fit_walk(node, col, val)
        return None if found is None else found.height

    # ----------------------------------------------------------------------------------------
    # fair sharing

    def _lendable_of(self, parent: QuotaNode) -> dict[str, int]:
        # potentialAvailable never depends on usage, so this is static between finalizes.
        lendable = parent.lendable
        if lendable is None:
            lendable = {}
            root = parent._root
            for fr, col in self._cols.items():
                if col.present[root]:
                    r = fr[1]
                    lendable[r] = lendable.get(r, 0) + _potential(col, root, parent._below, parent.id)
            parent.lendable = lendable
        return lendable

    def _drs(self, n: QuotaNode, extra: Mapping[FR, int] | None) -> tuple[int, str | None, bool]:
        if n.parent is None or n.disabled:
            return 0, None, False
        i = n.id
        borrowed: dict[str, int] = {}
        for fr, col in self._cols.items():
            if not col.present[i]:
                continue
            b = col.usage[i] - col.subtree[i]
            if extra:
                b += extra.get(fr, 0)
            if b > 0:
                borrowed[fr[1]] = borrowed.get(fr[1], 0) + b
        if not borrowed:
            return 0, None, False
        lendable = self._lendable_of(n.parent)
        best = -1
        dominant: str | None = None
        # Sorted, with a strict comparison, so that ties go to the alphabetically smallest name.
        for r in sorted(borrowed):
            lr = lendable.get(r, 0)
            if lr > 0:
                ratio = borrowed[r] * 1000 // lr
                if ratio > best:
                    best, dominant = ratio, r
        if dominant is None:
            return 0, None, True
        return best, dominant, True

    def dominant_resource_share(
        self, node: str | QuotaNode, extra: Mapping[FR, int] | None = None
    ) -> tuple[int, str | None]:
        """Unweighted DRS: max over resources of borrowed * 1000 // lendable-in-parent, with the
        dominant resource; (0, None) for roots and nodes that do not borrow."""
        ratio, dominant, _ = self._drs(self._node(node), extra)
        return ratio, dominant

    def weighted_share(self, node: str | QuotaNode, extra: Mapping[FR, int] | None = None) -> float:
        """DRS / weight; +inf for a zero-weight node that borrows."""
        n = self._node(node)
        ratio, _, borrowing = self._drs(n, extra)
        if n.fair_weight == 0:
            return math.inf if borrowing else 0.0
        return ratio / n.fair_weight

    def weighted_share_status(self, node: str | QuotaNode) -> int:
        """The integer reported in status: ceil(DRS / weight), MaxInt64 for zero-weight borrowers."""
        share = self.weighted_share(node)
        return MAX_INT64 if math.isinf(share) else math.ceil(share)

    def fair_sharing_key(self, node: str | QuotaNode, extra: Mapping[FR, int] | None = None) -> tuple[int, float]:
        """Sort key matching Kueue's CompareDRS: zero-weight borrowers after everyone else,
        ordered among themselves by unweighted DRS; others by DRS / weight."""
        n = self._node(node)
        ratio, _, borrowing = self._drs(n, extra)
        if n.fair_weight == 0:
            return (1, float(ratio)) if borrowing else (0, 0.0)
        return 0, ratio / n.fair_weight
