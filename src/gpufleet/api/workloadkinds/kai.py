"""NVIDIA KAI Scheduler's scheduling.run.ai Queue (v2). Its PodGroup (v2alpha2) is read by
:func:`gpufleet.api.workloadkinds.volcano.parse_pod_group`, the same shape as Volcano's; its queue label
``kai.scheduler/queue`` by :func:`gpufleet.api.workloadkinds.common.queue_label`.

A KAI Queue gives per resource (``gpu`` in devices, ``cpu`` in millicores, ``memory`` in megabytes) a ``quota``
(its deserved share, a plain number: unset is 0; -1: unlimited), a ``limit`` (the cap on its use; -1: no limit; 0
or unset: nothing above the quota) and an ``overQuotaWeight`` (its share of what is left over); ``parentQueue``
builds a hierarchy in which only leaf queues take work. :mod:`.queues` says how they become Kueue's quota tree
(:func:`.queues.kai_quota`): the queue's ``nominal`` holds its quota, its ``limit`` the cap (absent: none).
"""

from __future__ import annotations

from fractions import Fraction

from gpufleet.api.kinds import parse_meta
from gpufleet.api.objects import CPU, GPU, MEMORY, ResourceList
from gpufleet.api.reader import FieldReader
from gpufleet.api.workloadkinds.model import ForeignQueue
from gpufleet.api.workloadkinds.queues import UNLIMITED

# KAI's queue resource -> (gpufleet's resource, canonical units per KAI unit)
_RESOURCES = {"gpu": (GPU, 1), "cpu": (CPU, 1), "memory": (MEMORY, 10**6)}


def parse_kai_queue(r: FieldReader) -> ForeignQueue | None:
    meta = parse_meta(r, namespaced=False)
    if meta is None:
        return None
    spec = r.obj("spec")
    nominal: ResourceList = {}
    limit: ResourceList = {}
    weights: dict[str, float] = {}
    resources = spec.obj("resources") if spec else None
    if resources is not None:
        for key, (resource, scale) in _RESOURCES.items():
            rr = resources.obj(key)
            if rr is None:
                continue
            weight = rr.number("overQuotaWeight")
            if weight is not None and weight >= 0:
                weights[key] = float(weight)
            # KAI's quota and limit are plain numbers: an unset quota is 0 (nothing deserved), not "no quota"
            quota = rr.number("quota")
            cap = rr.number("limit")
            if quota is not None and quota < 0:
                nominal[resource] = UNLIMITED  # -1: all of it deserved
            else:
                amount = Fraction(quota or 0) * scale
                if resource == GPU and amount.denominator != 1:
                    rr.warning(f"a quota of {quota:g} GPUs is read as {int(amount)}: gpufleet's quotas hold whole "
                               "GPUs on nvidia.com/gpu", "quota", fix="give a whole number of GPUs")
                nominal[resource] = int(amount)
            if cap is None or cap >= 0:  # -1: no limit; unset or 0: nothing above the quota
                limit[resource] = max(int(Fraction(cap or 0) * scale), nominal[resource])
    weight = weights.get("gpu", next(iter(weights.values()), None))
    return ForeignQueue(meta, "kai", nominal, limit, spec.text("parentQueue") if spec else None, weight)
