"""Why a workload is pending, as a word the core sets when it decides, never read back from a message.

The words are those of the pending-workloads gauge (``gpufleet_pending_workloads{reason}``): Kueue's statuses split
finer, so that a platform team sees whether quota, nodes or a preemption keeps work waiting. The message beside it
(the pod's PodScheduled condition, ``gpufleet plan``'s reason) says the rest.
"""

from __future__ import annotations

from enum import StrEnum


class PendingReason(StrEnum):
    QUEUED = "Queued"  # in its ClusterQueue, not evaluated yet or waiting behind others
    PREEMPTING = "Preempting"  # its preemption targets are being evicted
    INSUFFICIENT_QUOTA = "InsufficientQuota"  # no flavor assignment fits its ClusterQueue's quota
    INSUFFICIENT_NODES = "InsufficientNodes"  # quota fits, the nodes do not (all pods at once)
    HELD = "Held"  # Kueue would hold it as it stands (admission checks, suspension...)
    UNQUEUED = "Unqueued"  # it cannot be queued at all (no LocalQueue, an incomplete pod group...)
    OTHER = "Other"  # inactive, namespace mismatch, no longer fits, waiting for PodsReady, reserving...
    UNKNOWN = "Unknown"  # the policy does not hold the workload
