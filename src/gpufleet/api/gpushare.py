"""What makes a pod ask for a share of one GPU: the single rule the parser (:mod:`gpufleet.api.kinds`) and the
mutating webhook (:mod:`gpufleet.admission.webhook`) both call.

* gpufleet's and KAI's annotations: ``gpufleet.io/gpu-fraction`` / ``gpu-fraction`` (a share of one GPU), or
  ``gpufleet.io/gpu-memory`` / ``gpu-memory`` on a pod that requests no GPU device. Such a pod requests no device:
  gpufleet places it and its webhook tells it its GPU (:func:`is_fractional`).
* HAMi's resources: ``nvidia.com/gpu`` with ``nvidia.com/gpucores`` (percent of one GPU's compute),
  ``nvidia.com/gpumem`` (MiB per GPU) or ``nvidia.com/gpumem-percentage`` (percent of one GPU's memory). HAMi's
  device plugin hands out the GPU, so such a pod is not fractional in the webhook's sense; the parser reads it as
  a share of one GPU all the same (:func:`hami_share`). HAMi's resources stay in the pod's requests: a
  ClusterQueue is charged them as the pod asks them (as Kueue charges them), while placement leaves them out
  (:func:`placed_requests`): the share is placed on one GPU's thousandths and memory.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.api.objects import (
    GPU_FRACTION_ANNOTATION,
    GPU_MEMORY_ANNOTATION,
    KAI_FRACTION_ANNOTATION,
    KAI_MEMORY_ANNOTATION,
)
from gpufleet.gpu.constants import FRACTION_RESOURCE

FRACTION_KEYS = (GPU_FRACTION_ANNOTATION, KAI_FRACTION_ANNOTATION)
MEMORY_KEYS = (GPU_MEMORY_ANNOTATION, KAI_MEMORY_ANNOTATION)
GPU_PREFIX = "nvidia.com/"

# HAMi's resource names (its defaults: resourceCoreName, resourceMemoryName, resourceMemoryPercentageName)
HAMI_CORES = "nvidia.com/gpucores"
HAMI_MEMORY = "nvidia.com/gpumem"
HAMI_MEMORY_PERCENT = "nvidia.com/gpumem-percentage"
HAMI_RESOURCES = (HAMI_CORES, HAMI_MEMORY, HAMI_MEMORY_PERCENT)

# What a pod is charged against ClusterQueue quota that no node's allocatable offers: gpufleet's fraction
# (thousandths of a GPU) and HAMi's share. Placement leaves them out; the GPU's own thousandths and memory hold
# the share (gpufleet.cluster.state).
QUOTA_ONLY: frozenset[str] = frozenset({FRACTION_RESOURCE, *HAMI_RESOURCES})


def placed_requests(requests: Mapping[str, int], fraction: bool) -> dict[str, int]:
    """What a pod takes of a node's allocatable, from its ``requests`` (which are also what its ClusterQueue is
    charged): less the quota-only resources (:data:`QUOTA_ONLY`) and, for a pod placed as a share of one GPU
    (``fraction``: HAMi's ``nvidia.com/gpu`` beside its share), its GPU devices, which the share's grant on one
    GPU stands for. The one rule for every placement: the fit check and the allocation."""
    if fraction:
        return {r: v for r, v in requests.items() if r not in QUOTA_ONLY and not r.startswith(GPU_PREFIX)}
    if QUOTA_ONLY.isdisjoint(requests):
        return dict(requests)
    return {r: v for r, v in requests.items() if r not in QUOTA_ONLY}


def is_fractional(annotations: Mapping[str, object], gpu_devices: Collection[str]) -> bool:
    """A pod whose ``annotations`` declare a share of one GPU, given the GPU device resources it requests
    (``nvidia.com/...``, HAMi's share resources aside): a fraction annotation, or a GPU memory annotation on a pod
    that requests no device."""
    if any(key in annotations for key in FRACTION_KEYS):
        return True
    return any(key in annotations for key in MEMORY_KEYS) and not any(
        r.startswith(GPU_PREFIX) and r not in HAMI_RESOURCES for r in gpu_devices)


def spec_containers(spec: Mapping[str, Any]) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """The init containers and containers of a pod spec as written, with their section and index; what is not shaped
    as the API shapes it is passed over."""
    for section in ("initContainers", "containers"):
        items = spec.get(section)
        if type(items) is not list:
            continue
        for i, c in enumerate(items):
            if type(c) is dict:
                yield section, i, c


def requested_gpu_resources(spec: Mapping[str, Any]) -> list[str]:
    """The ``nvidia.com/`` resources the containers (init containers included) of a pod spec as written request or
    limit, sorted; malformed parts are passed over (the webhook and the node agent read pods nobody validated)."""
    found: set[str] = set()
    for _, _, c in spec_containers(spec):
        resources = c.get("resources")
        if type(resources) is not dict:
            continue
        for kind in ("requests", "limits"):
            amounts = resources.get(kind)
            if type(amounts) is dict:
                found.update(name for name in amounts if str(name).startswith(GPU_PREFIX))
    return sorted(found)


def pod_is_fractional(pod: Mapping[str, Any]) -> bool:
    """:func:`is_fractional` of a pod as written (a manifest or an API object): what the mutating webhook, the live
    scheduler's world and the node agent read."""
    meta = pod.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    spec = pod.get("spec")
    return is_fractional(annotations if isinstance(annotations, dict) else {},
                         requested_gpu_resources(spec if isinstance(spec, dict) else {}))


def hami_conflict(annotations: Mapping[str, object], resources: Collection[str]) -> tuple[str, str] | None:
    """Why a pod may not be read (the parser's error, the webhook's denial): it asks a HAMi share among
    ``resources`` and carries a gpufleet or KAI fraction annotation, so two sharers would each split its GPU;
    (reason, fix), or None when it does not."""
    hami = [r for r in HAMI_RESOURCES if r in resources]
    keys = [k for k in (*FRACTION_KEYS, *MEMORY_KEYS) if k in annotations]
    if not hami or not keys:
        return None
    return (f"the pod asks a HAMi share ({', '.join(hami)}) and the annotation {keys[0]}: HAMi and gpufleet (or "
            f"KAI) would each share its GPU", f"keep one: HAMi's resources or the {keys[0]} annotation")


@dataclass(frozen=True, slots=True)
class HamiShare:
    """What a pod's HAMi resources ask, per GPU (HAMi's semantics): ``gpus`` devices, of each ``cores`` percent of
    its compute and ``memory_mib`` MiB or ``memory_percent`` percent of its memory (None: not given)."""

    gpus: int
    cores: int | None
    memory_mib: int | None
    memory_percent: int | None

    @property
    def exclusive(self) -> bool:
        """No memory share given: HAMi gives the pod all of each GPU's memory (and, without gpucores, its compute),
        so no other pod shares the GPU."""
        return self.memory_mib is None and (self.memory_percent is None or self.memory_percent >= 100)

    @property
    def milli(self) -> int:
        """The share of one GPU in thousandths that gpufleet places: the compute share, or the memory percentage
        where it is larger (no more pods share the GPU than its memory allows)."""
        return min(1000, max(self.cores or 0, self.memory_percent or 0) * 10)


def hami_share(requests: Mapping[str, int]) -> HamiShare | None:
    """The HAMi share ``requests`` ask (canonical amounts: whole counts), None when they name no HAMi resource.
    ``nvidia.com/gpu`` defaults to 1, as HAMi's webhook sets it (defaultGPUNum)."""
    if not any(requests.get(r, 0) > 0 for r in HAMI_RESOURCES):
        return None
    return HamiShare(requests.get("nvidia.com/gpu", 0) or 1, requests.get(HAMI_CORES) or None,
                     requests.get(HAMI_MEMORY) or None, requests.get(HAMI_MEMORY_PERCENT) or None)
