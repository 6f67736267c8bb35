"""Container images whose GPU memory need is known, for the rule that finds small pods holding whole GPUs.

Deliberately short: an image is listed only when what it needs is not in doubt. A pod says its need itself with
the ``gpufleet.io/gpu-memory`` annotation, which always wins over this table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# (image repository, MiB of GPU memory it needs at most). A repository matches with any registry mirror prefix
# and any tag or digest.
KNOWN_IMAGES: tuple[tuple[str, int], ...] = (
    # NVIDIA's CUDA samples (the GPU Operator's and device plugin's test pods): vectorAdd, nbody, deviceQuery
    # allocate a few MiB to a few hundred MiB.
    ("nvcr.io/nvidia/k8s/cuda-sample", 1024),
    ("nvidia/samples", 1024),
    ("k8s.gcr.io/cuda-vector-add", 1024),
    ("registry.k8s.io/cuda-vector-add", 1024),
)


def _repository(image: str) -> str:
    base = image.split("@", 1)[0]
    head, _, tail = base.rpartition(":")
    return head if head and "/" not in tail else base


def known_memory_mib(images: Iterable[Any]) -> tuple[int, str] | None:
    """The largest known need among ``images`` (with the image it comes from), or None when one is unknown."""
    best: tuple[int, str] | None = None
    for image in images:
        if not isinstance(image, str):
            return None
        repo = _repository(image.strip())
        found = next((mib for name, mib in KNOWN_IMAGES if repo == name or repo.endswith("/" + name)), None)
        if found is None:
            return None
        if best is None or found > best[0]:
            best = (found, image)
    return best


def images_of(containers: Iterable[Mapping[str, Any]]) -> list[Any]:
    return [c.get("image") for c in containers]
