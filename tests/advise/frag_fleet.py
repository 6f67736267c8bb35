"""A small fleet for the fragmentation objective's tests: 8-GPU and 4-GPU nodes, fractional and whole-GPU Jobs,
written as NodePools or as Nodes (what ``gpufleet advise`` reads)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

# (name, pods, GPUs per pod or a fraction, CPU per pod)
DEMAND: tuple[tuple[str, int, float, int], ...] = (
    ("tenth", 30, 0.1, 1), ("quarter", 40, 0.25, 1), ("half", 40, 0.5, 2), ("one", 40, 1, 4), ("two", 16, 2, 8),
    ("four", 6, 4, 16),
)
POOLS: tuple[tuple[str, int, int], ...] = (("big", 10, 8), ("mid", 8, 4))  # (name, nodes, GPUs per node)


def _job(name: str, pods: int, gpus: float, cpu: int) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": str(cpu), "memory": "8Gi"}}
    annotations = {}
    if gpus < 1:
        annotations["gpufleet.io/gpu-fraction"] = str(gpus)
    else:
        resources["limits"] = {"nvidia.com/gpu": str(int(gpus))}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "default"},
            "spec": {"parallelism": pods, "completions": pods, "template": {
                "metadata": {"annotations": annotations},
                "spec": {"restartPolicy": "Never", "containers": [
                    {"name": "main", "image": "busybox", "resources": resources}]}}}}


def _node_pool(name: str, count: int, gpus: int, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "gpufleet.io/v1alpha1", "kind": "NodePool", "metadata": {"name": name},
            "spec": {"count": count, "namePrefix": name, "gpu": {"model": "A100-SXM4-80GB", "count": gpus},
                     "cpu": "128", "memory": "1Ti", **({"labels": labels} if labels else {})}}


def _node(name: str, gpus: int, labels: dict[str, str]) -> dict[str, Any]:
    alloc = {"cpu": "128", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "A100-SXM4-80GB",
                                                  "nvidia.com/gpu.count": str(gpus), **labels}},
            "status": {"capacity": dict(alloc), "allocatable": alloc}}


def write_fleet(folder: Path, *, nodes: bool = False, closed: tuple[str, ...] = (),
                demand: tuple[tuple[str, int, float, int], ...] = DEMAND) -> list[str]:
    """The fleet (NodePools, or Nodes with ``closed`` labelled gpufleet.io/gpu-fractions=false) and the demand."""
    folder.mkdir(parents=True, exist_ok=True)
    if nodes:
        cluster = [_node(f"{pool}-{i:02d}", gpus, {"gpu.pool": pool, **(
                   {"gpufleet.io/gpu-fractions": "false"} if f"{pool}-{i:02d}" in closed else {})})
                   for pool, count, gpus in POOLS for i in range(count)]
    else:
        cluster = [_node_pool(pool, count, gpus) for pool, count, gpus in POOLS]
    (folder / "cluster.yaml").write_text(yaml.safe_dump_all(cluster), encoding="utf-8")
    (folder / "workload.yaml").write_text(yaml.safe_dump_all([_job(*d) for d in demand]), encoding="utf-8")
    return [str(folder / "cluster.yaml"), str(folder / "workload.yaml")]
