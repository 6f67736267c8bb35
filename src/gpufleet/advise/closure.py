"""Which nodes a share closes to fractional pods, and the cluster that says so (the fragmentation objective's lever).

The lever is the node label ``gpufleet.io/gpu-fractions: "false"`` (docs/live-scheduler.md). A *share* closes,
in every pool with at least :data:`MIN_GPUS` GPUs per node, ``round(share × nodes)`` of its nodes (halves
rounded up); nodes the input already closed stay closed and count towards it, and none is opened.

* Nodes of the input (a snapshot, an openb node list): per hardware pool (:func:`gpufleet.advise.fleet.hardware_pools`),
  the nodes the input closed, then open ones in name order. Applied with ``node-labels.sh`` (``kubectl label``).
* A NodePool is split: ``<name>`` keeps its open nodes and ``<name>-whole`` (name prefix ``<prefix>-whole``)
  holds the closed ones, with the label among its ``labels``; written in ``cluster.yaml``. A NodePool the input
  closed as a whole stays as it is.

What the fill-up measures is read back from these documents (the split NodePools expanded by the same loader
as any input), so the figures are those of the files written.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpufleet.advise.fleet import hardware_pools
from gpufleet.advise.inputs import AdviseInput
from gpufleet.advise.realise import find_document
from gpufleet.api.errors import Problems
from gpufleet.api.manifests import Manifests, build
from gpufleet.api.objects import GPU_FRACTIONS_LABEL, Node, NodePool
from gpufleet.api.source import Document
from gpufleet.cluster.free_devices import fractions_closed

MIN_GPUS = 2  # a one-GPU node closed to fractions gains nothing a whole-GPU pod of one GPU would not
WHOLE_SUFFIX = "whole"
CLOSED = {GPU_FRACTIONS_LABEL: "false"}


def closed_count(share: float, nodes: int) -> int:
    """``round(share × nodes)``, halves up (Python's round would take 2.5 to 2)."""
    return int(share * nodes + 0.5)


@dataclass(frozen=True, slots=True)
class PoolClosure:
    """One pool's nodes closed to fractions, under the given configuration and under a share."""

    pool: str  # the NodePool's name, or the hardware pool's
    model: str
    gpus_per_node: int
    nodes: int
    given_closed: int
    closed: tuple[str, ...]  # the node names closed, as the files name them
    names: tuple[str, ...] = ()  # every node of the pool, as the files name them


@dataclass(frozen=True, slots=True)
class Closure:
    """A configuration: the pools' closures, the nodes to label, the NodePools (split) and every GPU node."""

    share: float | None  # None: the given configuration
    pools: tuple[PoolClosure, ...]
    labels: Mapping[str, Mapping[str, str]]  # node -> labels to set (nodes of the input only)
    node_pools: tuple[dict[str, Any], ...]  # the NodePool documents, split where the share closes nodes
    nodes: tuple[Node, ...]  # every node as the files make it (NodePools expanded), for the fill-up

    @property
    def closed(self) -> frozenset[str]:
        return frozenset(n for p in self.pools for n in p.closed)

    @property
    def changed(self) -> bool:
        return any(len(p.closed) != p.given_closed for p in self.pools)


def _node_pool_doc(docs: Sequence[Document], name: str) -> dict[str, Any]:
    found = find_document(docs, "NodePool", name)
    if found is not None:
        return found
    raise ValueError(f"NodePool {name} is not among the input's documents (a bug of gpufleet advise)")


def _split(pool: NodePool, doc: dict[str, Any], closed: int) -> list[dict[str, Any]]:
    if closed == 0:
        return [copy.deepcopy(doc)]
    open_part = copy.deepcopy(doc)
    open_part["spec"]["count"] = pool.count - closed
    whole = copy.deepcopy(doc)
    whole["metadata"] = {**whole.get("metadata", {}), "name": f"{pool.name}-{WHOLE_SUFFIX}"}
    whole["spec"]["count"] = closed
    whole["spec"]["namePrefix"] = f"{pool.name_prefix}-{WHOLE_SUFFIX}"
    whole["spec"]["labels"] = {**(whole["spec"].get("labels") or {}), **CLOSED}
    return [open_part, whole] if closed < pool.count else [whole]


def load_node_pools(node_pools: Sequence[dict[str, Any]]) -> Manifests:
    """NodePool documents the advice wrote, read back by the loader of any input (their nodes expanded)."""
    problems = Problems()
    manifests = build([Document(data=d, file="<gpufleet advise>", line=0, index=i)
                       for i, d in enumerate(node_pools)], problems)
    if problems.errors:
        raise ValueError("gpufleet advise wrote NodePools its own loader refuses (a bug): "
                         + "; ".join(str(e) for e in problems.errors[:5]))
    return manifests


def closure(inp: AdviseInput, share: float | None) -> Closure:
    """The configuration ``share`` makes of the input's (None: the input's own)."""
    manifests: Manifests = inp.manifests
    pool_names = {p.name for p in manifests.node_pools}
    pools: list[PoolClosure] = []
    docs: list[dict[str, Any]] = []
    pooled: list[Node] = []
    for np_ in manifests.node_pools:
        doc = _node_pool_doc(inp.docs, np_.name)
        gpus = np_.gpu.count if np_.gpu is not None else 0
        given = np_.count if fractions_closed(np_.node_labels) else 0
        k = closed_count(share, np_.count) if share is not None and gpus >= MIN_GPUS and not given else 0
        split = _split(np_, doc, k)
        docs += split
        expanded = load_node_pools(split).nodes
        pooled += expanded
        if gpus:
            pools.append(PoolClosure(np_.name, np_.gpu.model if np_.gpu else "", gpus, np_.count, given,
                                     tuple(sorted(n.name for n in expanded if fractions_closed(n.labels))),
                                     tuple(sorted(n.name for n in expanded))))
    labels: dict[str, dict[str, str]] = {}
    loose = [n for n in manifests.nodes if n.pool not in pool_names]
    closed_now: set[str] = set()
    for hp in hardware_pools(Manifests(nodes=loose)):
        names = sorted(hp.names)
        by_name = {n.name: n for n in hp.nodes}
        given_closed = [n for n in names if fractions_closed(by_name[n].labels)]
        chosen = list(given_closed)
        if share is not None and hp.gpus_per_node >= MIN_GPUS:
            want = closed_count(share, len(names))
            chosen += [n for n in names if n not in given_closed][: max(0, want - len(given_closed))]
        for n in chosen[len(given_closed):]:
            labels[n] = dict(CLOSED)
        closed_now.update(chosen)
        pools.append(PoolClosure(hp.name, hp.model.key, hp.gpus_per_node, len(names), len(given_closed),
                                 tuple(sorted(chosen)), tuple(names)))
    nodes = [*pooled, *(_with_label(n) if n.name in labels else n for n in loose)]
    return Closure(share, tuple(pools), labels, tuple(docs), tuple(nodes))


def _with_label(node: Node) -> Node:
    return replace(node, meta=replace(node.meta, labels={**node.meta.labels, **CLOSED}))
