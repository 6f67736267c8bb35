"""Pods that ran out of GPU memory, read from their containers' termination messages, told to the policy.

A GPU out-of-memory is not the kubelet's ``OOMKilled`` (that reason is the node's memory cgroup, host memory): CUDA
fails the allocation, the framework raises, and the container exits with an error. Only its termination message
says why, when the pod lets the message carry the end of its log (``terminationMessagePolicy:
FallbackToLogsOnError``) or the program writes it to ``/dev/termination-log``. :data:`GPU_OOM` recognises what
PyTorch, TensorFlow, JAX/XLA and the CUDA libraries write then.

What the policy does with it is the core's rule, the simulator's too (``KueuePolicy.oom_at``,
:class:`gpufleet.scheduling.memory.MemoryBook`): the workload is kept off the shared GPU that ran out and is
expected to need more than was free there; on a MIG instance, the next larger profile its ClusterQueue covers is
offered where the queue opts in. Live the policy does not resize the workload itself (``mig_resize=False``): a Job's
next pod asks what its template asks, so the resize is written on the Job and the webhook rewrites its next pods
(:mod:`gpufleet.live.mig_resize`).

Each termination is told once (by the pod's UID, the container and when it ended), to whichever policy the cycle
runs, full or carried on. What the policies learnt is kept in the scheduler process (:class:`GpuOomMemory`) and
given to each policy a full cycle builds, as Kueue keeps what it knows of its workloads in memory; a restarted
scheduler learns again from the failed pods still in the API, but not from those already deleted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from gpufleet.cluster.devices import DeviceGrant
from gpufleet.cluster.recorded import grants_from_ids
from gpufleet.live.requeues import made_again
from gpufleet.live.world import World, owners_of
from gpufleet.scheduling.kueue import KueuePolicy
from gpufleet.scheduling.memory import MemoryLessons, OomLesson

JsonDict = dict[str, Any]

# What a program writes when CUDA cannot allocate device memory (Python's and Java's own OutOfMemoryError, host
# memory, are left out: only torch's and CuPy's are the GPU's; TensorFlow's names the device, and a CPU's is not).
GPU_OOM = re.compile(
    r"CUDA out of memory|CUDA error: out of memory|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation"
    r"|torch\.(?:cuda\.)?OutOfMemoryError|cupy\.cuda\.memory\.OutOfMemoryError"
    r"|OutOfMemoryError: Out of memory allocating"
    r"|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED|RESOURCE_EXHAUSTED: Out of memory"
    r"|OOM when allocating tensor(?![^\n]*device:CPU)")
# Words one of those messages holds: a message with none of them is not searched (a long log's tail costs the
# search tens of microseconds, and every status change of a restarted pod carries it).
_HINTS = ("memory", "Memory", "MEMORY", "OOM", "ALLOC")
REASON = "GPUOutOfMemory"  # the Warning event's reason


def _terminations(pod: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Each terminated state of the pod's containers (the current one, and the last before a restart), with the
    container's name; what is not shaped as the API shapes it is passed over."""
    status = pod.get("status")
    if not isinstance(status, Mapping):
        return
    for field in ("containerStatuses", "initContainerStatuses"):
        statuses = status.get(field)
        for cs in statuses if isinstance(statuses, list) else ():
            if not isinstance(cs, Mapping):
                continue
            for state_field in ("state", "lastState"):
                state = cs.get(state_field)
                ended = state.get("terminated") if isinstance(state, Mapping) else None
                if isinstance(ended, Mapping):
                    yield str(cs.get("name")), ended


def _named(name: str, ended: Mapping[str, Any]) -> str:
    """A termination's name: its container and when it ended."""
    return f"{name}@{ended.get('finishedAt') or ended.get('containerID') or ''}"


def ended(pod: Mapping[str, Any]) -> frozenset[str]:
    """The pod's containers' terminations, by container and when it ended (cheap: no message is read)."""
    return frozenset(_named(name, t) for name, t in _terminations(pod))


def gpu_ooms(pod: Mapping[str, Any]) -> frozenset[str]:
    """The terminations of ``pod``'s containers (:func:`ended`'s names) whose message says the GPU ran out of
    memory: a failure (a non-zero exit code) whose message :data:`GPU_OOM` recognises."""
    found: set[str] = set()
    for name, t in _terminations(pod):
        message = t.get("message")
        if not isinstance(message, str) or t.get("exitCode") == 0 or not any(h in message for h in _HINTS):
            continue
        if GPU_OOM.search(message):
            found.add(_named(name, t))
    return frozenset(found)


class GpuOomMemory:
    """The terminations told so far and what the policies learnt of them (see the module doc)."""

    def __init__(self) -> None:
        self._told: set[tuple[str, str]] = set()  # (pod UID, termination)
        self.lessons = MemoryLessons()
        # The UIDs of each taught workload's owners (a Job's) when it was taught: a workload of the same name made
        # by another owner (the Job deleted and created again) is a new one, and learns afresh.
        self._owners: dict[str, frozenset[str]] = {}
        self._read: dict[str, Any] = {}  # pod UID -> the resourceVersion read last, with nothing left to tell

    def copy(self) -> GpuOomMemory:
        """For a trial decision (the search for an object that makes the cycle fail), which must change nothing."""
        out = GpuOomMemory()
        out._told = set(self._told)
        out.lessons = self.lessons
        out._owners = dict(self._owners)
        out._read = dict(self._read)
        return out

    def apply(self, policy: KueuePolicy, world: World) -> None:
        """Give a policy a full cycle built what the earlier ones learnt of the workloads still in ``world`` (one
        gone, or made again by another owner, is forgotten)."""
        lessons = self.lessons
        if not lessons:
            return
        alive = {w for w in {*lessons.floor, *lessons.avoid, *lessons.resize}
                 if w in world.pods_of and not made_again(self._owners.get(w, frozenset()), owners_of(world, w))}
        self.lessons = lessons = MemoryLessons({w: v for w, v in lessons.floor.items() if w in alive},
                                               {w: v for w, v in lessons.avoid.items() if w in alive},
                                               {w: v for w, v in lessons.resize.items() if w in alive})
        self._owners = {w: o for w, o in self._owners.items() if w in alive}
        if policy.memory is not None and lessons:
            policy.memory.learn(lessons)

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
        if forget_gone and (self._told or self._read):
            uids = {e.uid for e in world.pods.values()}
            self._told = {t for t in self._told if t[0] in uids}
            self._read = {u: v for u, v in self._read.items() if u in uids}
        entries = world.pods.values() if only is None else [world.pods.get(k) for k in only]
        for entry in entries:
            if entry is None or not entry.ours or entry.pod is None or not entry.uid:
                continue
            key = entry.key
            status = entry.raw.get("status")
            if not isinstance(status, dict) or not (status.get("containerStatuses")
                                                     or status.get("initContainerStatuses")):
                continue  # (no container has run yet: nothing ended; most pods of a full cycle, looked at once)
            version = (entry.raw.get("metadata") or {}).get("resourceVersion")
            if version is not None and self._read.get(entry.uid) == version:
                continue  # (read already as it stands: nothing new to tell)
            new = [t for t in gpu_ooms(entry.raw) if (entry.uid, t) not in self._told]
            workload = world.workload_of.get(key)
            held = _held(world, key) if new and workload is not None else None
            if workload is None or held is None:
                if not new and version is not None:
                    self._read[entry.uid] = version
                continue  # (a termination not told yet is read again next time: it may be told then)
            self._read[entry.uid] = version
            self._told.update((entry.uid, t) for t in new)
            lesson = policy.oom_at(workload, key, *held)
            if lesson is not None:
                self._owners.setdefault(workload, owners_of(world, workload))
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
