"""The placement index follows nodes added, removed and changed in place through ClusterState."""

from __future__ import annotations

import random

from gpufleet.api.objects import GpuDemand, PodTemplate, Taint
from gpufleet.cluster.state import ClusterState
from gpufleet.scheduling.placement import make_placer
from gpufleet.scheduling.types import PodRequest
from tests.conftest import manifests

POOL = """apiVersion: gpufleet.io/v1alpha1
kind: NodePool
metadata: {name: p}
spec: {count: 2, namePrefix: n, cpu: "8", memory: 64Gi, gpu: {model: T4, count: 1}}
"""


def _pod(key: str) -> PodRequest:
    t = PodTemplate(labels={}, annotations={}, requests={"cpu": 1000, "nvidia.com/gpu": 1},
                    limits={"nvidia.com/gpu": 1}, gpu=GpuDemand(kind="gpu", count=1, resource="nvidia.com/gpu"))
    return PodRequest(key, t)


def test_touch_and_remove_node_are_seen_by_the_index() -> None:
    cluster = ClusterState.from_nodes(manifests(POOL).nodes)
    placer = make_placer(cluster, "binpack", random.Random(1))
    # Taint n-0 in place: only n-1 may take the next pod.
    n0 = cluster.nodes["n-0"]
    n0.taints = (Taint("maintenance", "", "NoSchedule"),)
    cluster.touch("n-0")
    placed = placer.place([_pod("a")])
    assert placed is not None and placed[0].node == "n-1"
    assert placer.place([_pod("b")]) is None  # n-1 is full, n-0 is tainted
    # Removing the tainted node keeps the index consistent; untainting a node brought back works too.
    cluster.remove_node("n-0")
    assert placer.place([_pod("c")]) is None
    n0.taints = ()
    n0.ready = True
    cluster.add_node(n0)
    placed = placer.place([_pod("d")])
    assert placed is not None and placed[0].node == "n-0"
