"""One fleet published both ways gives the same placements: GPUs offered by the device plugin to pods asking
``nvidia.com/gpu``, or published in ResourceSlices to pods claiming ``gpu.nvidia.com`` devices. Whether the claims
are placed, every pod gets the same node and the same GPUs, scored and packed alike."""

from __future__ import annotations

import random
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.cluster.state import ClusterState

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from dra_allocation import dra_cluster, dra_pods, plugin_cluster, plugin_pods
from gpufleet.scheduling.placement import make_placer


def _placements(cluster: ClusterState, pods: list, releases: list[bool]) -> list[tuple[str, tuple[int, ...]] | None]:
    placer = make_placer(cluster, "gpufleet", random.Random(7))
    out: list[tuple[str, tuple[int, ...]] | None] = []
    live: list[str] = []
    for p, release in zip(pods, releases, strict=True):
        got = placer.place([p])
        out.append(None if got is None else (got[0].node, tuple(sorted(g.gpu for g in got[0].grants))))
        if got is not None:
            live.append(p.key)
        if release and live:
            cluster.release(live.pop(0))
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 4), st.integers(1, 8), st.lists(st.tuples(st.integers(1, 4), st.booleans()), min_size=1,
                                                        max_size=30))
def test_the_same_fleet_both_ways_places_every_pod_alike(nodes: int, gpus: int, pods: list[tuple[int, bool]]) -> None:
    counts = [min(c, gpus) for c, _ in pods]
    releases = [r for _, r in pods]
    plugin = [p for p in plugin_pods(len(counts))]
    plugin = [_with_count(p, c) for p, c in zip(plugin, counts, strict=True)]
    dra, catalog = dra_cluster(nodes, gpus)
    claimed = [_with_count(p, c) for p, c in zip(dra_pods(len(counts), catalog), counts, strict=True)]
    assert _placements(plugin_cluster(nodes, gpus), plugin, releases) == _placements(dra, claimed, releases)


def _with_count(pod, count: int):  # type: ignore[no-untyped-def]
    """The pod asking ``count`` GPUs instead of one, both ways (its request, or its claim's demand)."""
    from dataclasses import replace

    from gpufleet.api.objects import GPU

    t = pod.template
    requests = {**t.requests, GPU: count} if GPU in t.requests else t.requests
    need = t.dra
    if need is not None:
        need = replace(need, choices=tuple(replace(c, demand=replace(c.demand, count=count)) for c in need.choices))
    return replace(pod, template=replace(t, requests=requests, gpu=replace(t.gpu, count=count), dra=need))


def test_in_a_mixed_fleet_each_way_keeps_to_its_own_nodes() -> None:
    from dataclasses import replace

    dra, catalog = dra_cluster(2, 4)
    renamed = [replace(n, name=f"d{i}", labels={"kubernetes.io/hostname": f"d{i}"}) for i, n in enumerate(dra)]
    mixed = ClusterState([*plugin_cluster(2, 4), *renamed])
    placer = make_placer(mixed, "gpufleet", random.Random(0))
    claimed = [replace(p, key=f"ml/claimed-{i}") for i, p in enumerate(dra_pods(9, catalog))]
    plugin = plugin_pods(9)
    for p in plugin[:8]:
        got = placer.place([p])
        assert got is not None and got[0].node.startswith("n")  # device-plugin GPUs only
    for p in claimed[:8]:
        got = placer.place([p])
        assert got is not None and got[0].node.startswith("d")  # DRA GPUs only
    # Both ways full: neither kind of pod spills onto the other's GPUs.
    assert placer.place([plugin[8]]) is None and placer.place([claimed[8]]) is None
