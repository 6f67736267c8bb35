"""The supply side: pools of identical GPU nodes, how each node is configured now, and the configurations a
model allows.

Nodes are grouped into **hardware pools** by what a configuration cannot change: GPU model, GPUs per node,
CPU, memory, taints and their own labels (GPU Feature Discovery's, the ``gpu-mode`` label and the pool label
aside). Two NodePools that differ only by their MIG layout or sharing (the case study's two A100 pools) are one
hardware pool of eight nodes with two configurations: the search may give any node of it any configuration.

A model's configurations (:func:`configurations`): every GPU whole; time-sliced into 2 to 8 replicas (and the
replica count a node has now, if higher); for a MIG-capable model, every distinct instance mix among its
maximal layouts (``gpu.mig.enumerate_maximal_layouts``: 19 layouts on an A100-80GB) and the mixes nodes have
now (which may leave room unused). A configuration is the same on every GPU of a node: mig-parted could cut
the GPUs of one node differently, the search does not.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpufleet.advise.contract import EXCLUSIVE, NodeConfig
from gpufleet.api.manifests import Manifests
from gpufleet.api.nodepool import POOL_LABEL
from gpufleet.api.objects import GPU_FRACTIONS_LABEL, HOSTNAME_LABEL, Node
from gpufleet.cluster.devices import GpuSlot
from gpufleet.cluster.state import node_state_from
from gpufleet.gpu.catalog import DEFAULT_CATALOG, GpuModel
from gpufleet.gpu.mig import MigPlacement, enumerate_maximal_layouts, geometry_for, layout_mix, pack_profiles

MAX_REPLICAS = 8  # time-slicing beyond 8 replicas is the guide's "practical" limit (8-16); more are kept if given
MODE_LABEL = "gpu-mode"  # the guide's label for a node's GPU mode: exclusive, mig, time-sliced
MODE_VALUES = {"exclusive": "exclusive", "time-sliced": "time-sliced", "mig": "mig"}

# Labels a configuration writes, so they do not tell hardware apart.
_CONFIG_LABEL_PREFIXES = ("nvidia.com/", "feature.node.kubernetes.io/")
# gpufleet.io/gpu-fractions: a node closed to fractional pods is the same hardware as its open neighbours
_IGNORED_LABELS = {MODE_LABEL, POOL_LABEL, HOSTNAME_LABEL, GPU_FRACTIONS_LABEL}


@dataclass(slots=True)
class HardwarePool:
    """Identical GPU nodes, whatever their configuration now."""

    name: str
    model: GpuModel
    gpus_per_node: int
    nodes: list[Node]
    given: dict[str, NodeConfig]  # node name -> its configuration now
    node_pools: list[str] = field(default_factory=list)  # NodePools merged here (empty: Nodes of the input)
    configurable: bool = True  # False: its model is not in the catalog (no memory, no geometry): left as it is
    why_fixed: str = ""

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * len(self.nodes)

    def given_counts(self) -> Counter[NodeConfig]:
        return Counter(self.given[n.name] for n in self.nodes)


def node_config(node: Node, slots: Sequence[GpuSlot], physical: int) -> NodeConfig:
    """A node's configuration now (its first GPU's when they differ), from its GPU slots; without an inventory,
    from its resources: MIG instances counted per GPU."""
    if not slots:
        return EXCLUSIVE
    first = slots[0]
    if first.mode == "replicas":
        return NodeConfig("time-sliced", first.replicas)
    if first.mode != "mig":
        return EXCLUSIVE
    if node.gpus is not None:
        return NodeConfig("mig", 1, tuple(sorted(layout_mix(m.placement for m in first.mig).items())))
    counts = Counter(m.placement.profile for s in slots for m in s.mig)
    return NodeConfig("mig", 1, tuple(sorted((p, max(1, n // max(physical, 1))) for p, n in counts.items())))


def _hardware_key(node: Node, model: str, gpus: int) -> tuple[object, ...]:
    own = tuple(sorted((k, v) for k, v in node.labels.items()
                       if k not in _IGNORED_LABELS and not k.startswith(_CONFIG_LABEL_PREFIXES)
                       and not k.startswith("topology.")))
    non_gpu = tuple(sorted((k, v) for k, v in node.allocatable.items() if not k.startswith("nvidia.com/")))
    return (model, gpus, non_gpu, node.taints, own)


def hardware_pools(manifests: Manifests) -> list[HardwarePool]:
    """The input's GPU nodes grouped into hardware pools (module doc), in the input's order."""
    pools: dict[tuple[object, ...], HardwarePool] = {}
    node_pools = {p.name for p in manifests.node_pools}  # a node's pool label alone (openb's) is not a NodePool
    for node in manifests.nodes:
        state = node_state_from(node)
        if not state.gpus or state.gpu_model is None:
            continue
        model = DEFAULT_CATALOG.find(state.gpu_model)
        physical = len(node.gpus.uuids) if node.gpus is not None else _physical_gpus(node, state.gpus)
        key = _hardware_key(node, state.gpu_model, physical)
        pool = pools.get(key)
        if pool is None:
            name = node.pool or node.labels.get(POOL_LABEL) or f"{state.gpu_model.lower()}-x{physical}"
            fixed = model is None
            pool = HardwarePool(name, model or DEFAULT_CATALOG.resolve(state.gpu_model, state.gpus[0].memory_mib or 1),
                                physical, [], {}, configurable=not fixed,
                                why_fixed=f"{state.gpu_model} is not in gpufleet's GPU catalog (no memory or MIG "
                                          "geometry to judge a configuration by)" if fixed else "")
            pools[key] = pool
        pool.nodes.append(node)
        pool.given[node.name] = node_config(node, state.gpus, physical)
        if node.pool in node_pools and node.pool not in pool.node_pools:
            pool.node_pools.append(node.pool)
    out = list(pools.values())
    seen: Counter[str] = Counter()
    for pool in out:  # two hardware pools of the same NodePool (nodes that differ) keep apart names
        if len(pool.node_pools) > 1:
            pool.name = "+".join(pool.node_pools)
        seen[pool.name] += 1
        if seen[pool.name] > 1:
            pool.name = f"{pool.name}-{seen[pool.name]}"
    return out


def _physical_gpus(node: Node, slots: Sequence[GpuSlot]) -> int:
    count = node.labels.get("nvidia.com/gpu.count")
    if count is not None and count.isdigit() and int(count) > 0:
        return int(count)
    return len(slots)


def configurations(model: GpuModel, given: Sequence[NodeConfig] = ()) -> list[NodeConfig]:
    """Every configuration the search may give a node of ``model`` (module doc), in a fixed order."""
    out: list[NodeConfig] = [EXCLUSIVE]
    top = max([MAX_REPLICAS, *(c.replicas for c in given if c.mode == "time-sliced")])
    out += [NodeConfig("time-sliced", r) for r in range(2, top + 1)]
    geometry = geometry_for(model.key)
    if geometry is not None and model.mig_capable:
        mixes = {tuple(sorted(layout_mix(layout).items())) for layout in enumerate_maximal_layouts(geometry)}
        mixes |= {c.mig for c in given if c.mode == "mig"}
        out += [NodeConfig("mig", 1, mix) for mix in sorted(mixes)]
    return list(dict.fromkeys(out))


def layout_of(model: GpuModel, config: NodeConfig) -> tuple[MigPlacement, ...]:
    """The MIG placements of a configuration on one GPU of ``model`` (starts chosen by ``pack_profiles``)."""
    geometry = geometry_for(model.key)
    if config.mode != "mig" or geometry is None:
        return ()
    packed = pack_profiles(geometry, dict(config.mig))
    if packed is None:  # a given mix that does not fit is refused where it is read; this is a bug
        raise ValueError(f"MIG mix {config.text} does not fit one {model.key}")
    return packed
