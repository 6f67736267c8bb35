"""Small builders for placement tests: NodeStates built directly (fast) and PodRequests."""

from __future__ import annotations

import random
from collections.abc import Sequence
from itertools import combinations
from pathlib import Path

from gpufleet.api.kinds import FRACTION_RESOURCE
from gpufleet.api.manifests import load_manifest_text
from gpufleet.api.objects import (
    CPU,
    GPU,
    MEMORY,
    PODS,
    GpuDemand,
    NodeSelectorTerm,
    PodTemplate,
    Requirement,
    Taint,
    Toleration,
)
from gpufleet.cluster.devices import GpuSlot
from gpufleet.cluster.state import SHARED_GPU, ClusterState, NodeState
from gpufleet.gpu.catalog import DEFAULT_CATALOG
from gpufleet.scheduling.placement import GpuPlacer, make_placer
from gpufleet.scheduling.types import PodRequest

GIB = 2**30
CASESTUDY = Path(__file__).resolve().parents[2] / "src" / "gpufleet" / "data" / "casestudy" / "cluster.yaml"


def gpu_node(name: str, model: str = "A100-SXM4-80GB", gpus: int = 8, *, cpu: int = 64000, mem_gib: int = 512,
             labels: dict[str, str] | None = None, taints: Sequence[Taint] = (), mode: str = "whole",
             replicas: int = 1, fail_gt1: bool = False, nvlinks: dict[tuple[int, int], int] | None = None,
             pods: int = 110, ready: bool = True, unschedulable: bool = False,
             memory_mib: int | None = None) -> NodeState:
    memory = memory_mib if memory_mib is not None else DEFAULT_CATALOG.get(model).memory_mib if gpus else 0
    slots = []
    for i in range(gpus):
        if mode == "replicas":
            slots.append(GpuSlot(i, f"{name}/gpu-{i}", model, memory, "replicas", SHARED_GPU, replicas,
                                 replica_holders=[None] * replicas))
        else:
            slots.append(GpuSlot(i, f"{name}/gpu-{i}", model, memory, "whole", GPU))
    alloc = {CPU: cpu, MEMORY: mem_gib * GIB, PODS: pods}
    if gpus:
        alloc[SHARED_GPU if mode == "replicas" else GPU] = gpus * (replicas if mode == "replicas" else 1)
    all_labels = {"kubernetes.io/hostname": name}
    all_labels.update(labels or {})
    return NodeState(name=name, labels=all_labels, taints=tuple(taints), allocatable=alloc, used={}, gpus=slots,
                     unschedulable=unschedulable, ready=ready, gpu_model=model if gpus else None,
                     fail_requests_greater_than_one=fail_gt1, nvlinks=dict(nvlinks or {}))


def all_pairs(n: int, links: int) -> dict[tuple[int, int], int]:
    return {(i, j): links for i, j in combinations(range(n), 2)}


def pod(key: str, *, cpu: int = 1000, mem_gib: int = 1, gpus: int = 0, shared: int = 0, mig: str | None = None,
        milli: int = 0, gpu_memory_mib: int | None = None, models: Sequence[str] = (),
        selector: dict[str, str] | None = None, affinity: Sequence[Sequence[Requirement]] = (),
        tolerations: Sequence[Toleration] = (), node_labels: Sequence[tuple[str, str]] = (),
        extra_tolerations: Sequence[Toleration] = ()) -> PodRequest:
    requests = {CPU: cpu, MEMORY: mem_gib * GIB}
    if gpus:
        requests[GPU] = gpus
        gpu = GpuDemand("gpu", gpus, GPU, memory_mib=gpu_memory_mib, models=tuple(models))
    elif shared:
        requests[SHARED_GPU] = shared
        gpu = GpuDemand("shared", shared, SHARED_GPU, memory_mib=gpu_memory_mib, models=tuple(models))
    elif mig:
        resource = f"nvidia.com/mig-{mig}"
        requests[resource] = 1
        gpu = GpuDemand("mig", 1, resource, mig_profile=mig, memory_mib=gpu_memory_mib, models=tuple(models))
    elif milli or gpu_memory_mib:
        requests[FRACTION_RESOURCE] = milli
        gpu = GpuDemand("fraction", 1, milli=milli, memory_mib=gpu_memory_mib, models=tuple(models))
    else:
        gpu = GpuDemand()
    template = PodTemplate(labels={}, annotations={}, requests=requests, limits={},
                           node_selector=dict(selector or {}),
                           required_affinity=tuple(NodeSelectorTerm(tuple(t)) for t in affinity),
                           tolerations=tuple(tolerations), gpu=gpu)
    return PodRequest(key, template, node_labels=tuple(node_labels), extra_tolerations=tuple(extra_tolerations))


def placer(nodes: Sequence[NodeState], profile: str = "binpack", seed: int = 0, **options: object) -> GpuPlacer:
    return make_placer(ClusterState(nodes), profile, random.Random(seed), **options)  # type: ignore[arg-type]


def casestudy() -> ClusterState:
    m = load_manifest_text(CASESTUDY.read_text(), str(CASESTUDY))
    assert not m.problems.errors
    return ClusterState.from_nodes(m.nodes)


def snapshot(cluster: ClusterState) -> tuple[object, ...]:
    """Everything placement can change, to assert a cluster is exactly as before."""
    return (
        {k: (p.node, p.grants) for k, p in cluster.placements.items()},
        {n.name: ({r: a for r, a in n.used.items() if a}, sorted(n.pods),
                  [(g.holder, dict(g.fractions), list(g.replica_holders), [s.holder for s in g.mig])
                   for g in n.gpus]) for n in cluster},
    )
