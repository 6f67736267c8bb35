"""Expand a ``gpufleet.io/v1alpha1`` NodePool into the Node objects a real cluster would show.

Each node gets what a kubelet reports (cpu, memory and pods from the pool; ephemeral-storage and hugepages by
default, :data:`DEFAULT_EPHEMERAL_STORAGE`), what the NVIDIA device plugin registers (capacity and allocatable of
``nvidia.com/gpu``, ``nvidia.com/gpu.shared`` or ``nvidia.com/mig-<profile>``), the labels GPU Feature Discovery
writes, the pool's own labels, taints and topology labels, and the ``gpufleet.io/gpus`` inventory annotation.
"""

from __future__ import annotations

from typing import Any

from gpufleet.api.inventory import format_inventory, nvlink_pairs
from gpufleet.api.kinds import format_amount
from gpufleet.api.objects import GPU_INVENTORY_ANNOTATION, HOSTNAME_LABEL, NodePool
from gpufleet.gpu.catalog import DEFAULT_CATALOG, Catalog
from gpufleet.gpu.sharing import advertised_resources, gfd_labels, make_gpus

POOL_LABEL = "gpufleet.io/node-pool"

# What a kubelet reports beside cpu, memory and pods (docs/architecture.md): a NodePool's nodes report these, so
# that a pod requesting them is placed as on a real node. ephemeral-storage: the node's root file system, 1Ti (GPU
# images of 10-20 GB and datasets in emptyDir); hugepages: none preallocated, as a kubelet reports them on a node
# without hugepages configured.
DEFAULT_EPHEMERAL_STORAGE = 2**40
DEFAULT_HUGEPAGES = {"hugepages-1Gi": 0, "hugepages-2Mi": 0}


def node_names(pool: NodePool) -> list[str]:
    width = max(1, len(str(max(pool.count - 1, 0))))
    return [f"{pool.name_prefix}-{i:0{width}d}" for i in range(pool.count)]


def _topology_labels(pool: NodePool, index: int) -> dict[str, str]:
    labels = {}
    for label, values in pool.topology.items():
        size = pool.nodes_per_domain.get(label)
        if size is not None:
            suffix = label.rsplit("/", 1)[-1]
            labels[label] = f"{pool.name}-{suffix}-{index // size}"
        elif values:
            labels[label] = values[index * len(values) // max(pool.count, 1)]
    return labels


def expand_node_pool(pool: NodePool, catalog: Catalog = DEFAULT_CATALOG) -> list[dict[str, Any]]:
    """The pool's nodes as Kubernetes Node manifests (plain dicts, ready to dump as YAML)."""
    nodes: list[dict[str, Any]] = []
    for index, name in enumerate(node_names(pool)):
        labels: dict[str, str] = {HOSTNAME_LABEL: name, POOL_LABEL: pool.name}
        annotations: dict[str, str] = {}
        resources: dict[str, int] = {"cpu": pool.cpu_milli, "memory": pool.memory_bytes, "pods": pool.pods,
                                     "ephemeral-storage": DEFAULT_EPHEMERAL_STORAGE, **DEFAULT_HUGEPAGES}
        if pool.gpu is not None:
            model = catalog.resolve(pool.gpu.model, pool.gpu.memory_mib)
            mig_on = pool.gpu.mig_layout is not None and pool.sharing.mig_strategy != "none"
            gpus = make_gpus(name, model, pool.gpu.count, pool.gpu.mig_layout if mig_on else None)
            resources.update(advertised_resources(gpus, pool.sharing))
            labels.update(gfd_labels(gpus, pool.sharing))
            labels["nvidia.com/gpu.present"] = "true"
            mode = pool.gpu.nvlink
            if mode == "auto":
                mode = "all" if any(s in model.key for s in ("SXM", "H200")) else "pairs"
            annotations[GPU_INVENTORY_ANNOTATION] = format_inventory(
                gpus, pool.sharing, nvlink_pairs(len(gpus), model.nvlinks_per_pair, mode))
        labels.update(_topology_labels(pool, index))
        labels.update(pool.node_labels)
        amounts = {res: format_amount(res, amount) for res, amount in sorted(resources.items())}
        node: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": dict(sorted(labels.items())), "annotations": annotations},
            "spec": {},
            "status": {
                "capacity": dict(amounts),
                "allocatable": dict(amounts),
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        if pool.taints:
            node["spec"]["taints"] = [{"key": t.key, "value": t.value, "effect": t.effect} for t in pool.taints]
        nodes.append(node)
    return nodes
