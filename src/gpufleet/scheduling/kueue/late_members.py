"""Pods that come after their workload was admitted, joining it: a StatefulSet's next ordinal, a Job's next pod when
completions exceed parallelism, the replacement its controller creates for a pod that failed.

Once a Job, a JobSet or a StatefulSet is admitted its controller owns its pods, and Kueue leaves the pods created
later to be scheduled one by one next to the running ones: they hold no quota of their own (the admission charged
the whole workload) and go before any new admission. :func:`join` places such pods, all of one workload together,
with the flavors of its admission (their node labels, taints and tolerations), and records them in the admission.
When they do not fit they wait, with the placer's reason: nothing is evicted for them, and the running pods stay.

The pod-group kinds (Kueue's, Volcano's, KAI's pod groups) are gangs of pods: a member that comes late is a gang
left incomplete, which the driver repairs or evicts as a whole, and never joins here (:data:`JOINING_KINDS`).

:func:`leave` is the other half: one pod of an admitted workload is gone (failed, or finished on its own) while
the workload stays admitted. Its node capacity is freed; the quota stays the workload's.

No I/O and no clock: the simulator calls these through :class:`~gpufleet.scheduling.kueue.KueuePolicy` as the live
driver does.
"""

from __future__ import annotations

from collections.abc import Collection

from gpufleet.api.workloadkinds.table import RULES
from gpufleet.cluster.workloads import Workload
from gpufleet.scheduling.kueue.info import ADMITTED, WorkloadInfo
from gpufleet.scheduling.kueue.state import SchedulerState
from gpufleet.scheduling.types import Joining, PodAssignment

# The workload kinds whose controllers own their pods once admitted: their later pods join the workload (a
# workload's ``kind`` names its kind). Not the pod-group kinds, whose pods are a gang of pods, as Kueue's pod groups.
JOINING_KINDS = frozenset(rule.kind for rule in RULES.values() if rule.grouping != "pod-group")
assert not JOINING_KINDS & {"Pod", "PodGroup", "Workload"}, "a workload kind named as the workloads of pods"


def joins_late(workload: Workload) -> bool:
    """Whether the workload's pods created after its admission join it (:data:`JOINING_KINDS`)."""
    return workload.kind in JOINING_KINDS


def join(state: SchedulerState, info: WorkloadInfo, pods: Collection[str]) -> Joining | None:
    """Place ``pods`` (keys of ``info``'s workload, not placed yet) together with the flavors of its admission, and
    record them in it; their quota is the workload's already. None when there is nothing to decide: the workload is
    not admitted, nothing is asked, or the policy places no pods (quota only)."""
    placer = state.placer
    record = info.admission
    if placer is None or info.state is not ADMITTED or record is None or not pods:
        return None
    keys = set(pods).difference(p.pod for p in record.pods)  # (one placed already is not placed twice)
    if not keys:
        return None
    flavors = {ps.name: ps.flavors for ps in record.podsets}
    # Every pod of each pod set is a candidate (a late pod may sit past the set's admitted count: a replacement
    # carries a new name), and only those asked for are placed.
    everyone = [len(info.workload.pods)] * len(info.podsets)
    groups = [(topology, [req for req in requests if req.key in keys]) for topology, requests in placer.groups(
        info, [flavors.get(ps.name, {}) for ps in info.podsets], everyone)]
    groups = [g for g in groups if g[1]]
    if not groups:
        return None  # none of them is a pod of the workload
    placed, failed = placer.place(groups)
    if placed is None:
        assert failed is not None
        return Joining(info.key, waiting=placer.explain(failed, len(keys)))
    assignments = tuple(PodAssignment(pl.pod, pl.node, pl.device_ids) for pl in placed)
    record.pods.extend(assignments)
    return Joining(info.key, assignments)


def leave(state: SchedulerState, info: WorkloadInfo, pod: str, now: float) -> bool:
    """One pod of the admitted workload is gone and the workload stays admitted: free its node capacity (quota
    stays charged: Kueue's is the workload's), and wake what waited for nodes. Whether it was placed here."""
    record = info.admission
    if info.state is not ADMITTED or record is None:
        return False
    kept = [p for p in record.pods if p.pod != pod]
    if len(kept) == len(record.pods):
        return False
    record.pods[:] = kept
    cluster = state.cluster
    if cluster is not None:
        cluster.forget_memory(pod)  # a replacement of the same name starts afresh
        if pod in cluster.placements:
            cluster.release(pod)
            state.unpark_placement(now)  # node capacity is every queue's: whoever waited for nodes may fit now
    return True
