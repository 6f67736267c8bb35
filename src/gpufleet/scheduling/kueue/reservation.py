"""Gang reservation: a workload that has waited too long holds its quota, and only work that fits beside it is
admitted meanwhile (backfill). gpufleet's, opt-in per ClusterQueue (annotation ``gpufleet.io/reserve-after``);
Kueue has no such thing.

Why: under BestEffortFIFO a head that does not fit is set aside and the workloads behind it are admitted when
they fit, so a 16-GPU gang in a queue of 8-GPU gangs waits until the queue happens to drain, which a busy queue
never does (the case study measured 21 h and more). StrictFIFO would make every small workload wait behind it
from the start.

How, in each cycle, for a ClusterQueue with a reservation time ``T``:

1. its head, if not admitted and pending for ``T`` or more (since its queue-order timestamp), reserves: it stays
   the head (sticky), so the queue's other workloads are no longer nominated in its place;
2. its quota is held in the cycle's snapshot (:func:`quota_hold`: what it takes once its queue drains, on the
   first flavor of each resource group), and the queue's next workloads, in queue order, are each nominated
   against that snapshot: one that fits beside the hold, without preemption, is admitted (backfill); the others
   stay where they are;
3. the reservation ends when the workload is admitted or leaves the queue.

The hold is on quota, not on nodes: a queue whose quota its nodes match (the case study's research queue and its
H100s) drains for the reserved workload; where other queues' work shares the same nodes, the nodes may still be
taken meanwhile (a reservation of nodes is not built yet).
"""

from __future__ import annotations

from gpufleet.scheduling.charges import charge
from gpufleet.scheduling.kueue.config import CQSpec
from gpufleet.scheduling.kueue.info import WorkloadInfo
from gpufleet.scheduling.quota import FR

BACKFILL_LIMIT = 16  # workloads behind a reservation tried per cycle


def starving(info: WorkloadInfo, cq: CQSpec, now: float) -> bool:
    """Whether the workload has waited long enough to reserve in its ClusterQueue."""
    after = cq.reserve_after_s
    return after is not None and now - info.queue_ts >= after


def quota_hold(info: WorkloadInfo, cq: CQSpec) -> dict[FR, int]:
    """The quota the workload takes once its queue drains: every pod set's requests, charged as its queue charges
    them, on the first flavor of each resource's group (where the flavor search starts)."""
    out: dict[FR, int] = {}
    for ps in info.podsets:
        amounts = charge(ps.total(), cq.group_of)
        if cq.covers_pods:
            amounts["pods"] = ps.count
        for resource, amount in amounts.items():
            group = cq.group_of.get(resource)
            if group is None or not group.flavors or amount <= 0:
                continue
            fr = (group.flavors[0], resource)
            out[fr] = out.get(fr, 0) + amount
    return out


def message(info: WorkloadInfo, cq: CQSpec, now: float) -> str:
    assert cq.reserve_after_s is not None
    hours = (now - info.queue_ts) / 3600
    return (f"Reserving its quota in ClusterQueue {cq.name}: pending {hours:.1f} h, more than its "
            f"{cq.reserve_after_s / 3600:g} h (gpufleet.io/reserve-after); only workloads that fit beside it are "
            "admitted meanwhile")
