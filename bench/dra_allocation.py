"""DRA allocation throughput: single-GPU claims on DRA nodes against the same pods asking ``nvidia.com/gpu``.

Issue 28's yardstick: 10,000 pods, each with one claim made from a ResourceClaimTemplate asking one GPU of
NVIDIA's ``gpu.nvidia.com`` DeviceClass (CEL selector), placed one by one on 1,000 nodes whose GPUs come from
ResourceSlices; and, in the same process, the same 10,000 pods asking ``nvidia.com/gpu: 1`` on the same nodes
offered by the device plugin. Each run builds its cluster, resolves the claims (the DRA path's own cost: CEL on
every device, the devices each claim allows), then places every pod with the ``gpufleet`` profile. Reported:
pods/s of each path and the ratio (the goal: the DRA path costs at most 2x).

    .venv/bin/python bench/dra_allocation.py [--nodes 1000] [--gpus 10] [--pods 10000]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import replace
from fractions import Fraction

from gpufleet.api.dra_objects import (
    ClaimSpec,
    Device,
    DeviceAttribute,
    DeviceClass,
    DeviceRequest,
    DeviceSelection,
    DraGpu,
    ResourceClaimTemplate,
)
from gpufleet.api.objects import CPU, GPU, MEMORY, PODS, GpuDemand, ObjectMeta, PodResourceClaim, PodTemplate
from gpufleet.cluster.devices import GpuSlot
from gpufleet.cluster.dra_claims import DraCatalog, PublishedDevice, resolve_pod_claims
from gpufleet.cluster.dra_devices import dra_gpu_slots
from gpufleet.cluster.state import ClusterState, NodeState, device_resources
from gpufleet.scheduling.placement import make_placer
from gpufleet.scheduling.types import PodRequest

GIB = 2**30
DRIVER = "gpu.nvidia.com"
MODEL = "H100-SXM5-80GB"
SELECTOR = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"


def _allocatable(gpus: int, plugin: bool) -> dict[str, int]:
    out = {CPU: 256_000, MEMORY: 2048 * GIB, PODS: 110}
    if plugin:
        out[GPU] = gpus
    return out


def plugin_cluster(nodes: int, gpus: int) -> ClusterState:
    return ClusterState([NodeState(name=f"n{i}", labels={"kubernetes.io/hostname": f"n{i}"}, taints=(),
                                   allocatable=_allocatable(gpus, True), used={},
                                   gpus=[GpuSlot(g, f"GPU-n{i}-{g}", MODEL, 81559, "whole", GPU) for g in range(gpus)],
                                   gpu_model=MODEL) for i in range(nodes)])


def dra_cluster(nodes: int, gpus: int) -> tuple[ClusterState, DraCatalog]:
    states: list[NodeState] = []
    published: list[PublishedDevice] = []
    for i in range(nodes):
        name = f"n{i}"
        draw = [DraGpu(DRIVER, name, f"gpu-{g}", f"GPU-{name}-{g}", MODEL, 81559, g) for g in range(gpus)]
        slots = dra_gpu_slots(draw)
        states.append(NodeState(name=name, labels={"kubernetes.io/hostname": name}, taints=(),
                                allocatable={**_allocatable(gpus, False), **device_resources(slots)}, used={},
                                gpus=slots, gpu_model=MODEL))
        for g in range(gpus):
            device = Device(f"gpu-{g}", {f"{DRIVER}/type": DeviceAttribute("string", "gpu"),
                                         f"{DRIVER}/productName": DeviceAttribute("string", "NVIDIA H100 80GB HBM3")},
                            {f"{DRIVER}/memory": Fraction(81559 * 2**20)})
            published.append(PublishedDevice(name, DRIVER, name, device, "whole"))
    template = ResourceClaimTemplate(ObjectMeta("one-gpu", "ml"), "resource.k8s.io/v1", ClaimSpec((DeviceRequest(
        "gpu", exactly=DeviceSelection("gpu.nvidia.com")),)))
    catalog = DraCatalog(classes={"gpu.nvidia.com": DeviceClass(ObjectMeta("gpu.nvidia.com"), "resource.k8s.io/v1",
                                                                (SELECTOR,))},
                         templates={"ml/one-gpu": template}, devices=published)
    return ClusterState(states), catalog


def _template(gpu: GpuDemand, requests: dict[str, int]) -> PodTemplate:
    return PodTemplate({}, {}, requests, dict(requests), gpu=gpu)


def plugin_pods(count: int) -> list[PodRequest]:
    return [PodRequest(f"ml/p{i}", _template(GpuDemand("gpu", 1, GPU), {CPU: 1000, MEMORY: 4 * GIB, GPU: 1}))
            for i in range(count)]


def dra_pods(count: int, catalog: DraCatalog) -> list[PodRequest]:
    refs = (PodResourceClaim("gpu", resource_claim_template_name="one-gpu"),)
    out = []
    for i in range(count):
        need = resolve_pod_claims("ml", f"p{i}", refs, catalog)
        assert need.choices, need.problem
        t = _template(need.choices[0].demand, {CPU: 1000, MEMORY: 4 * GIB})
        out.append(PodRequest(f"ml/p{i}", replace(t, resource_claims=refs, dra=need)))
    return out


def place_all(cluster: ClusterState, pods: list[PodRequest]) -> int:
    placer = make_placer(cluster, "gpufleet", random.Random(0))
    return sum(1 for p in pods if placer.place([p]) is not None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--gpus", type=int, default=10, help="GPUs per node")
    ap.add_argument("--pods", type=int, default=10_000)
    args = ap.parse_args()

    started = time.perf_counter()
    cluster = plugin_cluster(args.nodes, args.gpus)
    placed = place_all(cluster, plugin_pods(args.pods))
    plugin_s = time.perf_counter() - started

    started = time.perf_counter()
    dra, catalog = dra_cluster(args.nodes, args.gpus)
    pods = dra_pods(args.pods, catalog)
    resolved_s = time.perf_counter() - started
    dra_placed = place_all(dra, pods)
    dra_s = time.perf_counter() - started

    print(f"{args.pods:,} single-GPU pods on {args.nodes:,} nodes x {args.gpus} GPUs")
    print(f"device plugin (nvidia.com/gpu): {placed:,} placed in {plugin_s:.2f} s, {args.pods / plugin_s:,.0f} pods/s")
    print(f"DRA claims (gpu.nvidia.com):    {dra_placed:,} placed in {dra_s:.2f} s, {args.pods / dra_s:,.0f} pods/s "
          f"(claims resolved in {resolved_s:.2f} s)")
    print(f"DRA path / device-plugin path: {dra_s / plugin_s:.2f}x the time (goal: at most 2x)")
    return 0 if placed == dra_placed else 1


if __name__ == "__main__":
    sys.exit(main())
