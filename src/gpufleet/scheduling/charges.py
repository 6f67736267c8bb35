"""What a workload is charged against ClusterQueue quota, and the integer units quota is kept in.

Quota arithmetic is Kueue's: integers, exact, no rounding. Canonical amounts past the parser are integers too
(millicores, bytes, counts), but a fraction of a GPU is not a whole count of ``nvidia.com/gpu``. So quota keeps
``nvidia.com/gpu`` in thousandths of a GPU (one GPU is 1000, half a GPU 500, written "500m") and every other
resource in its canonical unit; :func:`to_quota` converts on the way in, :func:`format_quota` on the way out.

A fractional pod asks for ``gpufleet.io/gpu-milli`` (its thousandths). It is charged there when its ClusterQueue
covers that resource; on a ClusterQueue that covers ``nvidia.com/gpu`` but not ``gpu-milli`` it is charged the
same thousandths of ``nvidia.com/gpu``, as KAI charges fractions against GPU quota (:func:`charge`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from gpufleet.api.kinds import format_amount
from gpufleet.gpu.constants import CPU, FRACTION_RESOURCE, GPU, MILLI

# Resources quota keeps in thousandths of their canonical unit.
QUOTA_MILLI: frozenset[str] = frozenset({GPU})


def to_quota(resource: str, amount: int) -> int:
    """A canonical amount in quota units."""
    return amount * MILLI if resource in QUOTA_MILLI else amount


def quota_amounts(amounts: Mapping[str, int]) -> dict[str, int]:
    """Canonical amounts in quota units (zero and negative amounts dropped: they carry no quota)."""
    # to_quota inlined: every workload nominated goes through here
    return {r: v * MILLI if r in QUOTA_MILLI else v for r, v in amounts.items() if v > 0}


def charge(requests: Mapping[str, int], covered: Collection[str]) -> dict[str, int]:
    """``requests`` (quota units) as a ClusterQueue covering ``covered`` charges them: a fraction's thousandths go
    to ``nvidia.com/gpu`` when the queue covers it and not ``gpufleet.io/gpu-milli``."""
    milli = requests.get(FRACTION_RESOURCE, 0)
    if not milli or FRACTION_RESOURCE in covered or GPU not in covered:
        return dict(requests)
    out = {r: v for r, v in requests.items() if r != FRACTION_RESOURCE}
    out[GPU] = out.get(GPU, 0) + milli  # nvidia.com/gpu is kept in thousandths: the same number
    return out


def quota_value(resource: str, amount: int) -> float:
    """A quota amount in the resource's own unit, as Kueue's metrics report it: GPUs, CPU cores, bytes, counts."""
    if resource in QUOTA_MILLI or resource == CPU:
        return amount / MILLI
    return float(amount)


def format_quota(resource: str, amount: int) -> str:
    """A quota amount in the notation users write ("2", "500m", "1500m", "4Gi")."""
    if resource in QUOTA_MILLI:
        return str(amount // MILLI) if amount % MILLI == 0 else f"{amount}m"
    return format_amount(resource, amount)
