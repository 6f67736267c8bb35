"""Reading the containers of a pod template as written: the helpers the container rules share, each the Python twin
of a CEL snippet of :mod:`.cel` (tests/policy/test_parity.py holds them to the same answers)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from gpufleet.api import gpushare
from gpufleet.api.objects import GPU_FRACTION_ANNOTATION, GPU_MEMORY_ANNOTATION
from gpufleet.api.workloadkinds.templates import RawTemplate

GPU_PREFIX = "nvidia.com/"  # the parser's GPU resources (gpufleet.api.kinds): every nvidia.com/ resource
GPUFLEET_FRACTION_ANNOTATIONS = (GPU_FRACTION_ANNOTATION, GPU_MEMORY_ANNOTATION)
# KAI's: the one container a KAI fraction (gpu-fraction, gpu-memory) is given to; without it, the first container.
KAI_FRACTION_CONTAINER_ANNOTATION = "gpu-fraction-container-name"


def mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def containers(t: RawTemplate, *, init: bool = True) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(field path, container) for every container (then init container) of the template."""
    for section in ("containers", "initContainers") if init else ("containers",):
        items = t.spec.get(section)
        if isinstance(items, list):
            for i, c in enumerate(items):
                if isinstance(c, Mapping):
                    yield f"{t.spec_path}.{section}[{i}]", c


def named(path: str, c: Mapping[str, Any]) -> str:
    name = c.get("name")
    return f"{path} ({name})" if isinstance(name, str) and name else path


def resources(c: Mapping[str, Any], section: str) -> Mapping[str, Any]:
    return mapping(mapping(c.get("resources")).get(section))


def gpu_resources(c: Mapping[str, Any]) -> list[str]:
    """The nvidia.com/ resources the container names in its requests or limits."""
    names = {str(k) for section in ("requests", "limits") for k in resources(c, section)}
    return sorted(k for k in names if k.startswith(GPU_PREFIX))


def is_fractional(t: RawTemplate) -> bool:
    """The parser's and the webhook's rule (gpufleet.api.gpushare.is_fractional): a GPU share annotation, or a GPU
    memory annotation on a pod that asks no GPU device (gpufleet's or KAI's annotations; on a pod asking
    nvidia.com/gpu, the memory annotation is a hint for its whole GPUs)."""
    annotations = mapping(t.metadata.get("annotations"))
    return gpushare.is_fractional(annotations, [r for _, c in containers(t) for r in gpu_resources(c)])


def is_gpu_pod(t: RawTemplate) -> bool:
    return is_fractional(t) or any(gpu_resources(c) for _, c in containers(t))


def gpu_containers(t: RawTemplate) -> list[tuple[str, Mapping[str, Any]]]:
    """The containers that use a GPU: those naming an nvidia.com/ resource; in a fractional pod (:func:`is_fractional`)
    with gpufleet's annotations, every (regular) container, since gpufleet's webhook shows each the shared GPU; with
    only KAI's, the one container KAI gives the fraction to: the one ``gpu-fraction-container-name`` names (a
    regular or an init container), else the first (KAI's convention), beside any naming an nvidia.com/ resource;
    each once."""
    if not is_fractional(t):
        return [(p, c) for p, c in containers(t) if gpu_resources(c)]
    annotations = mapping(t.metadata.get("annotations"))
    if any(key in annotations for key in GPUFLEET_FRACTION_ANNOTATIONS):
        return list(containers(t, init=False))
    name = annotations.get(KAI_FRACTION_CONTAINER_ANNOTATION)
    chosen = ([(p, c) for p, c in containers(t) if c.get("name") == name] if isinstance(name, str)
              else list(containers(t, init=False))[:1])
    paths = {p for p, _ in chosen}
    return chosen + [(p, c) for p, c in containers(t) if gpu_resources(c) and p not in paths]


def declares(c: Mapping[str, Any], resource: str) -> bool:
    """The container has a request for ``resource``, given or defaulted from its limit."""
    return resource in resources(c, "requests") or resource in resources(c, "limits")
