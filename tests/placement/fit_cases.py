"""Random nodes (every device mode, some GPUs unhealthy, some capacity already taken) and random pods, for the
property tests of the one node-fit check (issue 15, item 6)."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from gpufleet.api.kinds import FRACTION_RESOURCE
from gpufleet.api.objects import CPU, GPU, GPU_FRACTIONS_LABEL, MEMORY, PODS, GpuDemand, PodTemplate, Taint, Toleration
from gpufleet.cluster.devices import GpuSlot, InvariantError, MigSlot
from gpufleet.cluster.state import SHARED_GPU, ClusterState, NodeState, first_free_grants
from gpufleet.gpu.mig import MigPlacement, geometry_for
from gpufleet.scheduling.types import PodRequest

MIG_MODEL = "A100-SXM4-80GB"
MIXED_LAYOUT = (("3g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6))
SINGLE_LAYOUT = (("3g.40gb", 0), ("3g.40gb", 4))
MODELS = ("T4", "A100-SXM4-80GB", "H100-SXM5-80GB")
# A name the catalog resolves to A100-SXM4-80GB without being its key.
A100_ALIAS = "NVIDIA-A100-SXM4-80GB"
TAINT = Taint("dedicated", "gpu", "NoSchedule")
GIB = 2**30


@dataclass(frozen=True)
class NodeCase:
    mode: str  # whole | replicas | mig-mixed | mig-single | cpu
    model: str
    gpus: int
    replicas: int
    unhealthy: tuple[bool, ...]
    pods: int  # allocatable pods
    tainted: bool
    fail_gt1: bool
    fillers: tuple[PodCase, ...]
    fractions: str | None = None  # the node's gpufleet.io/gpu-fractions label (None: absent)

    @property
    def healthy(self) -> bool:
        return not any(self.unhealthy)


@dataclass(frozen=True)
class PodCase:
    kind: str  # none | gpu | shared | mig | fraction
    count: int
    profile: str
    milli: int
    gpu_memory_gib: int | None
    cpu: int
    models: tuple[str, ...]
    tolerates: bool


def _mig_slots(i: int, name: str, layout: tuple[tuple[str, int], ...], single: bool) -> list[MigSlot]:
    geometry = geometry_for(MIG_MODEL)
    assert geometry is not None
    out = []
    for profile, start in layout:
        prof = geometry.profile(profile)
        resource = GPU if single else prof.resource_name
        out.append(MigSlot(MigPlacement(profile, start), f"{name}/gpu-{i}/{profile}@{start}", resource,
                           prof.memory_mib, prof.compute_slices))
    return out


def build_node(case: NodeCase, name: str = "n") -> ClusterState:
    """The node in a cluster of its own, with its filler pods placed first-fit."""
    model = MIG_MODEL if case.mode.startswith("mig") else case.model
    geometry = geometry_for(MIG_MODEL)
    assert geometry is not None
    memory = {"T4": 15360, "A100-SXM4-80GB": 81920, "H100-SXM5-80GB": 81920}[model]
    slots: list[GpuSlot] = []
    alloc: dict[str, int] = {CPU: 16000, MEMORY: 64 * GIB, PODS: case.pods}
    gpus = 0 if case.mode == "cpu" else case.gpus
    for i in range(gpus):
        healthy = not case.unhealthy[i] if i < len(case.unhealthy) else True
        if case.mode == "whole":
            slots.append(GpuSlot(i, f"{name}/gpu-{i}", model, memory, "whole", GPU, healthy=healthy))
            alloc[GPU] = alloc.get(GPU, 0) + 1
        elif case.mode == "replicas":
            slots.append(GpuSlot(i, f"{name}/gpu-{i}", model, memory, "replicas", SHARED_GPU, case.replicas,
                                 replica_holders=[None] * case.replicas, healthy=healthy))
            alloc[SHARED_GPU] = alloc.get(SHARED_GPU, 0) + case.replicas
        else:
            single = case.mode == "mig-single"
            migs = _mig_slots(i, name, SINGLE_LAYOUT if single else MIXED_LAYOUT, single)
            slots.append(GpuSlot(i, f"{name}/gpu-{i}", model, memory, "mig", GPU, mig=migs, healthy=healthy))
            for s in migs:
                alloc[s.resource] = alloc.get(s.resource, 0) + 1
    labels = {"kubernetes.io/hostname": name}
    if case.fractions is not None:
        labels[GPU_FRACTIONS_LABEL] = case.fractions
    ns = NodeState(name=name, labels=labels, taints=(TAINT,) if case.tainted else (),
                   allocatable=alloc, used={}, gpus=slots, gpu_model=model if gpus else None,
                   fail_requests_greater_than_one=case.fail_gt1)
    cluster = ClusterState([ns])
    for k, filler in enumerate(case.fillers):
        t = template(filler)
        grants = first_free_grants(ns, t.gpu)
        if grants is None:
            continue
        try:
            cluster.allocate(f"filler-{k}", name, t.requests, grants)
        except InvariantError:
            continue  # not room for it: the node simply stays emptier
    return cluster


def template(case: PodCase) -> PodTemplate:
    requests: dict[str, int] = {CPU: case.cpu, MEMORY: GIB}
    memory = case.gpu_memory_gib * 1024 if case.gpu_memory_gib else None
    if case.kind == "gpu":
        requests[GPU] = case.count
        demand = GpuDemand("gpu", case.count, GPU, memory_mib=memory, models=case.models)
    elif case.kind == "shared":
        requests[SHARED_GPU] = case.count
        demand = GpuDemand("shared", case.count, SHARED_GPU, memory_mib=memory, models=case.models)
    elif case.kind == "mig":
        resource = f"nvidia.com/mig-{case.profile}"
        requests[resource] = case.count
        demand = GpuDemand("mig", case.count, resource, mig_profile=case.profile, memory_mib=memory,
                           models=case.models)
    elif case.kind == "fraction":
        requests[FRACTION_RESOURCE] = case.milli
        demand = GpuDemand("fraction", 1, milli=case.milli, memory_mib=memory, models=case.models)
    else:
        demand = GpuDemand()
    tolerations = (Toleration("dedicated", "Equal", "gpu", "NoSchedule"),) if case.tolerates else ()
    return PodTemplate(labels={}, annotations={}, requests=requests, limits={}, tolerations=tolerations, gpu=demand)


def request(case: PodCase, key: str = "default/p") -> PodRequest:
    return PodRequest(key, template(case))


pod_cases = st.builds(
    PodCase,
    kind=st.sampled_from(["none", "gpu", "gpu", "shared", "shared", "mig", "mig", "fraction", "fraction"]),
    count=st.integers(1, 3),
    profile=st.sampled_from(["3g.40gb", "2g.20gb", "1g.10gb"]),
    milli=st.sampled_from([100, 250, 333, 500, 750, 1000]),
    gpu_memory_gib=st.sampled_from([None, None, None, 8, 30]),
    cpu=st.sampled_from([500, 4000, 15000]),
    models=st.sampled_from([(), (), (), (), ("T4",), ("A100-SXM4-80GB",), ("H100-SXM5-80GB", "T4"), (A100_ALIAS,)]),
    tolerates=st.booleans(),
)

filler_cases = st.builds(
    PodCase, kind=st.sampled_from(["none", "gpu", "shared", "mig", "fraction"]), count=st.just(1),
    profile=st.sampled_from(["3g.40gb", "2g.20gb", "1g.10gb"]), milli=st.sampled_from([250, 500, 750]),
    gpu_memory_gib=st.just(None), cpu=st.sampled_from([500, 4000]), models=st.just(()), tolerates=st.just(True))

node_cases = st.builds(
    NodeCase,
    mode=st.sampled_from(["whole", "whole", "replicas", "mig-mixed", "mig-single", "cpu"]),
    model=st.sampled_from(MODELS),
    gpus=st.integers(1, 4),
    replicas=st.integers(2, 4),
    unhealthy=st.one_of(st.just((False,) * 4), st.lists(st.booleans(), min_size=4, max_size=4).map(tuple)),
    pods=st.integers(1, 8),
    tainted=st.sampled_from([False, False, True]),
    fail_gt1=st.booleans(),
    fillers=st.lists(filler_cases, max_size=6).map(tuple),
    # Fillers are placed before the label is read (first-fit devices): fractions a node took before it was closed.
    fractions=st.sampled_from([None, None, "true", "false", "false", "no"]),
)

_NATURAL = {"whole": ("gpu", "fraction"), "replicas": ("shared",), "mig-mixed": ("mig",), "mig-single": ("gpu",),
            "cpu": ("none",)}


@st.composite
def node_and_pod(draw: st.DrawFn) -> tuple[NodeCase, PodCase]:
    """A node and a pod; half the time the pod asks for what that node offers, so that many do fit."""
    node = draw(node_cases)
    pod = draw(pod_cases)
    if draw(st.booleans()):
        kind = draw(st.sampled_from(_NATURAL[node.mode]))
        pod = PodCase(kind, pod.count, pod.profile, pod.milli, pod.gpu_memory_gib, pod.cpu, (), True)
    return node, pod
