"""DRA allocation throughput: single-GPU claims on DRA nodes against the same pods asking ``nvidia.com/gpu``.

Issue 28's yardstick: 10,000 pods, each with one claim made from a ResourceClaimTemplate asking one GPU of
NVIDIA's ``gpu.nvidia.com`` DeviceClass (CEL selector), placed one by one on 1,000 nodes whose GPUs come from
ResourceSlices; and, in the same process, the same 10,000 pods asking ``nvidia.com/gpu: 1`` on the same nodes
offered by the device plugin. Each run builds its cluster, resolves the claims (the DRA path's own cost: CEL on
every device, the devices each claim allows), then places every pod with the ``gpufleet`` profile. Reported:
pods/s of each path and the ratio (the goal: the DRA path costs at most 2x).

``--mixed``: half the nodes hold A100s instead; the claim's request selects H100s by ``productName`` (CEL), and
the device-plugin pods name the model (``gpufleet.io/gpu-model``): a fleet of two models, each pod for one.

    .venv/bin/python bench/dra_allocation.py [--nodes 1000] [--gpus 10] [--pods 10000] [--mixed]
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
OTHER = "A100-SXM4-80GB"
PRODUCTS = {MODEL: "NVIDIA H100 80GB HBM3", OTHER: "NVIDIA A100-SXM4-80GB"}
SELECTOR = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
H100_ONLY = "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')"


def _model(i: int, mixed: bool) -> str:
    return OTHER if mixed and i % 2 else MODEL


def _allocatable(gpus: int, plugin: bool) -> dict[str, int]:
    out = {CPU: 256_000, MEMORY: 2048 * GIB, PODS: 110}
    if plugin:
        out[GPU] = gpus
    return out


def plugin_cluster(nodes: int, gpus: int, mixed: bool = False) -> ClusterState:
    return ClusterState([NodeState(name=f"n{i}", labels={"kubernetes.io/hostname": f"n{i}"}, taints=(),
                                   allocatable=_allocatable(gpus, True), used={},
                                   gpus=[GpuSlot(g, f"GPU-n{i}-{g}", _model(i, mixed), 81559, "whole", GPU)
                                         for g in range(gpus)],
                                   gpu_model=_model(i, mixed)) for i in range(nodes)])


def dra_cluster(nodes: int, gpus: int, mixed: bool = False) -> tuple[ClusterState, DraCatalog]:
    states: list[NodeState] = []
    published: list[PublishedDevice] = []
    for i in range(nodes):
        name = f"n{i}"
        model = _model(i, mixed)
        draw = [DraGpu(DRIVER, name, f"gpu-{g}", f"GPU-{name}-{g}", model, 81559, g) for g in range(gpus)]
        slots = dra_gpu_slots(draw)
        states.append(NodeState(name=name, labels={"kubernetes.io/hostname": name}, taints=(),
                                allocatable={**_allocatable(gpus, False), **device_resources(slots)}, used={},
                                gpus=slots, gpu_model=model))
        for g in range(gpus):
            device = Device(f"gpu-{g}", {f"{DRIVER}/type": DeviceAttribute("string", "gpu"),
                                         f"{DRIVER}/productName": DeviceAttribute("string", PRODUCTS[model])},
                            {f"{DRIVER}/memory": Fraction(81559 * 2**20)})
            published.append(PublishedDevice(name, DRIVER, name, device, "whole", model=model))
    selectors = (H100_ONLY,) if mixed else ()
    template = ResourceClaimTemplate(ObjectMeta("one-gpu", "ml"), "resource.k8s.io/v1", ClaimSpec((DeviceRequest(
        "gpu", exactly=DeviceSelection("gpu.nvidia.com", selectors)),)))
    catalog = DraCatalog(classes={"gpu.nvidia.com": DeviceClass(ObjectMeta("gpu.nvidia.com"), "resource.k8s.io/v1",
                                                                (SELECTOR,))},
                         templates={"ml/one-gpu": template}, devices=published)
    return ClusterState(states), catalog


def _template(gpu: GpuDemand, requests: dict[str, int]) -> PodTemplate:
    return PodTemplate({}, {}, requests, dict(requests), gpu=gpu)


def plugin_pods(count: int, mixed: bool = False) -> list[PodRequest]:
    demand = GpuDemand("gpu", 1, GPU, models=(MODEL,) if mixed else ())
    return [PodRequest(f"ml/p{i}", _template(demand, {CPU: 1000, MEMORY: 4 * GIB, GPU: 1})) for i in range(count)]


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
    ap.add_argument("--mixed", action="store_true", help="half the nodes A100s; the pods ask H100s")
    args = ap.parse_args()

    started = time.perf_counter()
    cluster = plugin_cluster(args.nodes, args.gpus, args.mixed)
    placed = place_all(cluster, plugin_pods(args.pods, args.mixed))
    plugin_s = time.perf_counter() - started

    started = time.perf_counter()
    dra, catalog = dra_cluster(args.nodes, args.gpus, args.mixed)
    pods = dra_pods(args.pods, catalog)
    resolved_s = time.perf_counter() - started
    dra_placed = place_all(dra, pods)
    dra_s = time.perf_counter() - started

    print(f"{args.pods:,} single-GPU pods on {args.nodes:,} nodes x {args.gpus} GPUs"
          + (" (half H100, half A100; the pods ask H100s)" if args.mixed else ""))
    print(f"device plugin (nvidia.com/gpu): {placed:,} placed in {plugin_s:.2f} s, {args.pods / plugin_s:,.0f} pods/s")
    print(f"DRA claims (gpu.nvidia.com):    {dra_placed:,} placed in {dra_s:.2f} s, {args.pods / dra_s:,.0f} pods/s "
          f"(claims resolved in {resolved_s:.2f} s)")
    print(f"DRA path / device-plugin path: {dra_s / plugin_s:.2f}x the time (goal: at most 2x)")
    return 0 if placed == dra_placed else 1


if __name__ == "__main__":
    sys.exit(main())
