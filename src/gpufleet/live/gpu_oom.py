"""Pods that ran out of GPU memory, read from their containers' termination messages, told to the policy.

A GPU out-of-memory is not the kubelet's ``OOMKilled`` (that reason is the node's memory cgroup, host memory): CUDA
fails the allocation, the framework raises, and the container exits with an error. Only its termination message
says why, when the pod lets the message carry the end of its log (``terminationMessagePolicy:
FallbackToLogsOnError``) or the program writes it to ``/dev/termination-log``. :data:`GPU_OOM` recognises what
PyTorch, TensorFlow, JAX/XLA and the CUDA libraries write then.

What the policy does with it is the core's rule, the simulator's too (``KueuePolicy.oom_at``,
:class:`gpufleet.scheduling.memory.MemoryBook`): the workload is kept off the shared GPU that ran out and is
expected to need more than was free there; on a MIG instance, the next larger profile its ClusterQueue covers is
named. Live the policy does not resize the workload to it (``mig_resize=False``): a Job's next pod asks what its
template asks, and the kubelet allocates what the pod asks, so the Warning event says which profile to ask for.

Each termination is told once (by the pod's UID, the container and when it ended), to whichever policy the cycle
runs, full or carried on. What the policies learnt is kept in the scheduler process (:class:`GpuOomMemory`) and
given to each policy a full cycle builds, as Kueue keeps what it knows of its workloads in memory; a restarted
scheduler learns again from the failed pods still in the API, but not from those already deleted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from gpufleet.cluster.devices import DeviceGrant
from gpufleet.cluster.recorded import grants_from_ids
from gpufleet.live.world import World
from gpufleet.scheduling.kueue import KueuePolicy
from gpufleet.scheduling.memory import MemoryLessons, OomLesson

JsonDict = dict[str, Any]

# What a program writes when CUDA cannot allocate device memory (Python's and Java's own OutOfMemoryError, host
# memory, are left out: only torch's is the GPU's).
GPU_OOM = re.compile(
    r"CUDA out of memory|CUDA error: out of memory|torch\.(?:cuda\.)?OutOfMemoryError|cudaErrorMemoryAllocation"
    r"|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED|RESOURCE_EXHAUSTED: Out of memory"
    r"|OOM when allocating tensor")
REASON = "GPUOutOfMemory"  # the Warning event's reason


def gpu_ooms(pod: Mapping[str, Any]) -> frozenset[str]:
    """The terminations of ``pod``'s containers whose message says the GPU ran out of memory, each named by its
    container and when it ended (the current state, and the last one before a restart)."""
    status = pod.get("status") or {}
    found: set[str] = set()
    for field in ("containerStatuses", "initContainerStatuses"):
        for cs in status.get(field) or ():
            if not isinstance(cs, dict):
                continue
            for state_field in ("state", "lastState"):
                ended = (cs.get(state_field) or {}).get("terminated")
                if isinstance(ended, dict) and GPU_OOM.search(str(ended.get("message") or "")):
                    found.add(f"{cs.get('name')}@{ended.get('finishedAt') or ended.get('containerID') or ''}")
    return frozenset(found)


class GpuOomMemory:
    """The terminations told so far and what the policies learnt of them (see the module doc)."""

    def __init__(self) -> None:
        self._told: set[tuple[str, str]] = set()  # (pod UID, termination)
        self.lessons = MemoryLessons()

    def copy(self) -> GpuOomMemory:
        """For a trial decision (the search for an object that makes the cycle fail), which must change nothing."""
        out = GpuOomMemory()
        out._told = set(self._told)
        out.lessons = self.lessons
        return out

    def apply(self, policy: KueuePolicy) -> None:
        """Give a policy a full cycle built what the earlier ones learnt."""
        if policy.memory is not None and self.lessons:
            policy.memory.learn(self.lessons)

    def keep(self, policy: KueuePolicy) -> None:
        """What the cycle's policy knows now (its own lessons and those it was given)."""
        if policy.memory is not None:
            self.lessons = policy.memory.lessons()

    def learn(self, world: World, policy: KueuePolicy, only: Iterable[str] | None = None,
              *, forget_gone: bool = False) -> list[tuple[JsonDict, OomLesson]]:
        """Tell ``policy`` the terminations not told yet of ``world``'s pods (``only``: of those pods), before
        their devices are released; each pod told with what it taught (for its event). ``forget_gone``: drop
        what is remembered of pods no longer in the world (a full cycle, which sees them all)."""
        out: list[tuple[JsonDict, OomLesson]] = []
        if forget_gone:
            uids = {e.uid for e in world.pods.values()}
            self._told = {t for t in self._told if t[0] in uids}
        for key in world.pods if only is None else only:
            entry = world.pods.get(key)
            if entry is None or not entry.ours or entry.pod is None or not entry.uid:
                continue
            new = [t for t in gpu_ooms(entry.raw) if (entry.uid, t) not in self._told]
            workload = world.workload_of.get(key)
            if not new or workload is None:
                continue
            held = _held(world, key)
            if held is None:
                continue
            self._told.update((entry.uid, t) for t in new)
            lesson = policy.oom_at(workload, key, *held)
            if lesson is not None:
                out.append((entry.raw, lesson))
        return out


def _held(world: World, key: str) -> tuple[str, list[DeviceGrant]] | None:
    """Where the pod is, and its devices: its placement while it holds them, else the devices its Binding
    recorded (a pod that failed: released already)."""
    cluster = world.cluster
    placement = cluster.placements.get(key)
    if placement is not None:
        return placement.node, list(placement.grants)
    entry = world.pods[key]
    node_name = (entry.raw.get("spec") or {}).get("nodeName")
    node = cluster.nodes.get(node_name or "")
    if node is None or not entry.devices or entry.pod is None:
        return None
    grants = grants_from_ids(node, entry.pod.template.gpu, entry.devices)
    return (node.name, grants) if grants else None
