"""The fragmentation benchmark through the scheduler's own placement engine (the Placer protocol).

The openb nodes become a :class:`~gpufleet.cluster.state.ClusterState` of whole-mode GPUs; each arriving pod
is a :class:`~gpufleet.scheduling.types.PodRequest` whose template carries CPU and memory requests and a
``GpuDemand`` (``fraction`` with its milli-GPU, or ``gpu`` with its count) restricted to the trace's
``gpu_spec`` models. The placer runs the profile of the policy's name (``make_profile``) with the trace's
typical pods as FGD's target workload.

Node names get the prefix ``NNNN-`` of their position in the seed-shuffled order, as the reference simulator
names them (``%04d-`` from ``rand.Perm``), so the placer's ``name`` tie-break takes the first tied node of
the shuffled order (see :mod:`gpufleet.sim.fragbench.bench` for why that is the reference's behaviour).

Each pod goes through ``placer.place([PodRequest])`` exactly as the scheduler places a one-pod workload:
filters, scorers, tie-break, device choice and ``ClusterState.allocate`` are the placement engine's own.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from gpufleet.api.objects import CPU, PodTemplate
from gpufleet.cluster.state import ClusterState, NodeState
from gpufleet.scheduling.fragmentation import FragmentationModel
from gpufleet.scheduling.placement import GpuPlacer, TieBreak, make_placer, make_profile
from gpufleet.scheduling.types import PodRequest
from gpufleet.sim.fragbench.trace import BenchNode, BenchPod, build_cluster, pod_request_template

__all__ = ["OUR_POLICY", "PlacerEngine", "fleet_gpus", "ordered_name"]

OUR_POLICY = "fgdplus"


def ordered_name(position: int, name: str) -> str:
    """The node's name in the cluster: its position in the shuffled order first, as the reference does."""
    return f"{position:04d}-{name}"


def fleet_gpus(cluster: ClusterState) -> dict[str, int]:
    """GPUs per model (catalog key) in the cluster: what FGD+'s model-pressure term weighs demand against."""
    return cluster.gpus_per_model()


class PlacerEngine:
    """Places bench pods one at a time through the placement engine; node ``i`` is ``nodes[i]``."""

    def __init__(self, nodes: Sequence[BenchNode], policy: str, fm: FragmentationModel, rng: random.Random,
                 *, tie_break: str = "first", indexed: bool = True) -> None:
        renamed = [replace(n, name=ordered_name(i, n.name)) for i, n in enumerate(nodes)]
        self.cluster = build_cluster(renamed)
        profile = make_profile(policy, typical=fm.typical)
        tb: TieBreak = "name" if tie_break == "first" else "random"
        self.placer: GpuPlacer = make_placer(self.cluster, profile, rng, tie_break=tb, fragmentation=fm,
                                             indexed=indexed)
        self._nodes: list[NodeState] = [self.cluster.nodes[n.name] for n in renamed]
        self._index = {n.name: i for i, n in enumerate(renamed)}
        self._templates: dict[tuple[int, int, int, int, tuple[str, ...]], PodTemplate] = {}

    def _template(self, pod: BenchPod) -> PodTemplate:
        key = (pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli, pod.models)
        t = self._templates.get(key)
        if t is None:
            # Pods of one shape share a template; nothing downstream mutates it.
            t = self._templates[key] = pod_request_template(pod)
        return t

    def place(self, pod: BenchPod) -> int | None:
        placed = self.placer.place([PodRequest(pod.name, self._template(pod))])
        if placed is None:
            return None
        return self._index[placed[0].node]

    def frag_view(self, i: int) -> tuple[Sequence[int], int, str]:
        node = self._nodes[i]
        return [g.free_milli for g in node.gpus], node.free(CPU), node.gpu_model or ""
