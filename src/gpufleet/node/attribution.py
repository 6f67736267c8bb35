"""Which pods hold each GPU and MIG instance: dcgm-exporter's pod labels, and the shares of shared GPUs.

Two sources, as the kubelet and the scheduler know them:

* the kubelet's PodResources ``List`` (what dcgm-exporter reads): which container was given which device ID.
  IDs are NVIDIA's, whichever plugin serves them: a GPU UUID, a MIG UUID, either with ``::<replica>`` for a
  time-slice replica (gpufleet's and NVIDIA's plugin use the same IDs; the ``index`` device ID strategy is not
  mapped);
* fractional pods (``gpufleet.io/gpu-fraction``, KAI's ``gpu-fraction``), which hold no device the kubelet
  knows of: the node's pod tracker knows their GPU from ``gpufleet.io/visible-devices``, and their share and
  declared memory come from the pod's annotations, read by the API parser.

A GPU or MIG instance held by exactly one pod gets that pod's ``pod``/``namespace``/``container`` labels on
its dcgm-exporter series, as dcgm-exporter gives them; a shared GPU (several replicas or fractions) gets none
there, and each holder shows in ``gpufleet_node_gpu_holder_share`` (and ``_memory_bytes`` when it declared its
GPU memory) instead, so a sum over a GPU's series never counts it twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from gpufleet.api.objects import Pod
from gpufleet.gpu.constants import MILLI
from gpufleet.node.contract import Machine
from gpufleet.node.podresources import Assignment

PodRef = tuple[str, str, str]  # namespace, pod, container ("" when not one container)
DeviceKey = tuple[str, int | None]  # GPU UUID, GPU instance id (None: the whole GPU)


@dataclass(frozen=True, slots=True)
class Holder:
    namespace: str
    pod: str
    container: str
    kind: str  # "replica" (a time-slice replica) or "fraction" (a fractional pod)
    share: float | None  # of the GPU; None when the replica count is unknown
    memory_mib: int | None  # declared with gpufleet.io/gpu-memory (KAI: gpu-memory); None: not declared


@dataclass(slots=True)
class Attribution:
    """Who holds what on this node, at one instant."""

    owner: dict[DeviceKey, PodRef] = field(default_factory=dict)  # devices held by exactly one pod
    holders: dict[str, list[Holder]] = field(default_factory=dict)  # GPU UUID -> replica and fraction holders

    def pod_of(self, gpu_uuid: str, gi_id: int | None = None) -> PodRef | None:
        return self.owner.get((gpu_uuid, gi_id))


def attribute(machine: Machine, assignments: Iterable[Assignment] | None,
              fractions: Mapping[str, Iterable[str]], pod: Callable[[str], Pod | None],
              replicas: Mapping[str, int]) -> Attribution:
    """``assignments``: PodResources (None: the kubelet did not answer); ``fractions``: GPU UUID -> fractional
    pod keys; ``pod``: a pod key's parsed pod (None if unknown or invalid); ``replicas``: GPU UUID -> its
    time-slice replicas."""
    gpus = {g.uuid for g in machine.gpus}
    instances = {m.uuid: (g.uuid, m.gi_id) for g in machine.gpus for m in g.mig}
    held: dict[DeviceKey, dict[tuple[str, str], set[str]]] = {}
    out = Attribution()
    for a in assignments or ():
        base, sep, _ = a.device_id.partition("::")
        key: DeviceKey
        if base in gpus:
            key = (base, None)
        elif base in instances:
            key = instances[base]
        else:
            continue  # another resource's device, or an ID strategy this does not map
        held.setdefault(key, {}).setdefault((a.namespace, a.pod), set()).add(a.container)
        if sep and key[1] is None:
            parsed = pod(f"{a.namespace}/{a.pod}")
            count = replicas.get(base, 0)
            out.holders.setdefault(base, []).append(Holder(
                a.namespace, a.pod, a.container, "replica", 1.0 / count if count else None,
                parsed.template.gpu.memory_mib if parsed is not None else None))
    for uuid, keys in fractions.items():
        if uuid not in gpus:
            continue
        for pod_key in keys:
            namespace, _, name = pod_key.partition("/")
            held.setdefault((uuid, None), {}).setdefault((namespace, name), set()).add("")
            parsed = pod(pod_key)
            demand = parsed.template.gpu if parsed is not None else None
            out.holders.setdefault(uuid, []).append(Holder(
                namespace, name, "", "fraction", demand.milli / MILLI if demand and demand.milli else None,
                demand.memory_mib if demand else None))
    for key, pods in held.items():
        if len(pods) == 1:
            ((namespace, name), containers), = pods.items()
            out.owner[key] = (namespace, name, next(iter(containers)) if len(containers) == 1 else "")
    return out
