"""One smallest-victim search for every placer: the placement engine and the first-fit reference placer name the
same victims, and none when the pods already fit."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.cluster.state import ClusterState
from gpufleet.scheduling.kueue.firstfit import FirstFitPlacer
from gpufleet.scheduling.placement import make_placer
from tests.placement.placement_helpers import gpu_node, pod


def _cluster(nodes: int, gpus: int) -> ClusterState:
    return ClusterState([gpu_node(f"n{i}", gpus=gpus) for i in range(nodes)])


def test_no_victims_when_the_pods_already_fit() -> None:
    cluster = _cluster(1, 8)
    first_fit = FirstFitPlacer(cluster)
    assert first_fit.place([pod("ns/a", gpus=4)]) is not None
    # Before the one search, the first-fit placer removed a candidate even when nothing needed to go.
    assert first_fit.find_victims([pod("ns/b", gpus=4)], ["ns/a"]) == []
    assert make_placer(cluster, "gpufleet", random.Random(0)).find_victims([pod("ns/b", gpus=4)], ["ns/a"]) == []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(1, 4), min_size=1, max_size=8), st.integers(1, 8), st.randoms(use_true_random=False))
def test_both_placers_name_the_same_smallest_victims(sizes: list[int], want: int, rng: random.Random) -> None:
    cluster = _cluster(2, 4)
    placer = FirstFitPlacer(cluster)
    placed = [f"ns/p{i}" for i, n in enumerate(sizes) if placer.place([pod(f"ns/p{i}", gpus=n)]) is not None]
    candidates = list(placed)
    rng.shuffle(candidates)
    before = dict(cluster.placements)
    incoming = [pod("ns/new", gpus=min(want, 4))]
    ours = FirstFitPlacer(cluster).find_victims(incoming, candidates)
    engine = make_placer(cluster, "gpufleet", random.Random(0)).find_victims(incoming, candidates)
    assert cluster.placements == before  # the search leaves the cluster as it was
    if ours is None:
        assert engine is None or engine == []
        return
    assert ours == [k for k in candidates if k in set(ours)]  # in candidate order
    # Removing them makes room for the first-fit placer.
    for key in ours:
        cluster.release(key)
    assert FirstFitPlacer(cluster).place(incoming) is not None
