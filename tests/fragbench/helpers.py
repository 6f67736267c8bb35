"""Small hand-made clusters and pod lists for the fragmentation benchmark's tests."""

from __future__ import annotations

from pathlib import Path

from gpufleet.scheduling.fragmentation import TypicalPod
from gpufleet.sim.fragbench.trace import Arrivals, BenchNode, BenchPod

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
POD_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
              "scheduled_time")


def node(name: str, gpus: int, cpu: int = 64000, memory_mib: int = 262144, model: str = "T4") -> BenchNode:
    return BenchNode(name, cpu, memory_mib, gpus, model)


def pod(name: str, milli: int, num: int = 1, cpu: int = 4000, memory_mib: int = 1024,
        models: tuple[str, ...] = ()) -> BenchPod:
    return BenchPod(name, cpu, memory_mib, num if milli else 0, milli, models)


def arrivals(nodes: list[BenchNode], pods: list[BenchPod], seed: int = 0) -> Arrivals:
    """A fixed arrival order (no shuffling), for hand-checked runs."""
    return Arrivals(seed=seed, pods=tuple(pods), nodes=tuple(nodes), originals=len(pods),
                    capacity_milli=sum(n.gpus for n in nodes) * 1000)


def typical(*specs: tuple[int, int, int, int]) -> list[TypicalPod]:
    """(cpu, milli, num_gpu, count) -> typical pods with exact integer weights."""
    total = sum(s[3] for s in specs)
    return [TypicalPod(cpu, milli, num, None, count / total, count) for cpu, milli, num, count in specs]


def write_trace(folder: Path, nodes: int = 12, pods: int = 120) -> tuple[Path, Path]:
    """A small synthetic openb-format trace: T4/G2-like nodes and a mix of shares, whole and CPU-only pods."""
    node_csv = folder / "nodes.csv"
    rows = [NODE_HEADER]
    for i in range(nodes):
        if i % 3 == 0:
            rows.append(f"node-{i:03d},96000,393216,8,G2")
        else:
            rows.append(f"node-{i:03d},104000,524288,2,T4")
    node_csv.write_text("\n".join(rows) + "\n")
    pod_csv = folder / "pods.csv"
    shapes = [(3152, 810, 1), (11300, 1000, 1), (8000, 470, 1), (12500, 0, 0), (4000, 320, 1), (11908, 650, 1),
              (16000, 1000, 2)]
    rows = [POD_HEADER]
    for i in range(pods):
        cpu, milli, num = shapes[i % len(shapes)]
        rows.append(f"pod-{i:04d},{cpu},{4096 + i},{num},{milli},,LS,Running,0,1,0")
    pod_csv.write_text("\n".join(rows) + "\n")
    return node_csv, pod_csv
