"""What the policy learns of GPU memory, and what it does with it: the :class:`MemoryBook`.

Time-sliced GPUs isolate no memory, and a MIG instance has the memory it has: a pod whose memory does not fit
is OOM-killed. The book keeps, per workload class, the memory its pods were seen to use, and per workload what
an OOM taught, so that placement can keep pods off GPUs that cannot hold them:

* **hints**: a pod's expected memory on a time-sliced GPU is what it declares (``gpufleet.io/gpu-memory``),
  else the larger of what its class was seen to use (a high quantile of the last observations, once there are
  enough) and what an OOM of this very workload showed it needs; nothing known, no hint;
* **observations**: a running pod's memory (the node agent's per-pod ``DCGM_FI_DEV_FB_USED``; the simulator's
  model) replaces its hint on the GPUs it holds (``ClusterState.observe_memory``);
* **after an OOM on a shared GPU** the workload is not placed on that GPU again (``PodRequest.avoid_gpus``);
* **after an OOM on a MIG instance** the workload is offered the next larger MIG profile of the same GPU that
  its ClusterQueue covers (:func:`next_larger_profile`) when the queue opts in (``gpufleet.io/mig-resize-on-oom``),
  and says so in its admission (``resized``).

A workload's class is its ``gpufleet.io/workload-class`` label, else the simulator's ``sim.gpufleet.io/class``,
else its namespace and kind: what a platform team would group by.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpufleet.api.mig_resized import RESIZE_ON_OOM_ANNOTATION, Resize, resized_template
from gpufleet.api.objects import PodTemplate
from gpufleet.cluster.state import ClusterState
from gpufleet.cluster.workloads import Workload
from gpufleet.gpu.mig import geometry_for, profile_from_resource_name

CLASS_LABEL = "gpufleet.io/workload-class"
SIM_CLASS_LABEL = "sim.gpufleet.io/class"
QUANTILE = 0.9  # of a class's observed memory: the hint of a pod of that class that declares none
MIN_SAMPLES = 3  # observations before a class's quantile is trusted
HISTORY = 64  # observations kept per class (the most recent)


def workload_class(workload: Workload) -> str:
    labels = workload.labels
    for pod in workload.pods[:1]:
        labels = {**pod.template.labels, **labels}
    found = labels.get(CLASS_LABEL) or labels.get(SIM_CLASS_LABEL)
    return f"{workload.namespace}/{found or workload.kind}"


@dataclass(slots=True)
class _ClassMemory:
    """A class's observations, one per pod (a pod seen again replaces its own: a driver that reports a pod's
    peak as it grows must weigh it once, as one that reports it once does)."""

    recent: dict[str, int] = field(default_factory=dict)  # pod -> MiB, least recently reported first; at most HISTORY
    ordered: list[int] = field(default_factory=list)  # the values, sorted

    def add(self, pod: str, mib: int) -> None:
        old = self.recent.pop(pod, None)
        if old is not None:
            del self.ordered[bisect.bisect_left(self.ordered, old)]
        self.recent[pod] = mib
        bisect.insort(self.ordered, mib)
        if len(self.recent) > HISTORY:
            first = next(iter(self.recent))
            del self.ordered[bisect.bisect_left(self.ordered, self.recent.pop(first))]

    def estimate(self) -> int:
        if len(self.ordered) < MIN_SAMPLES:
            return 0
        return self.ordered[min(len(self.ordered) - 1, int(QUANTILE * len(self.ordered)))]


@dataclass(frozen=True, slots=True)
class OomLesson:
    """What one OOM taught of a workload: the shared GPUs it is kept off and the memory it is now expected to need
    beyond (0: nothing known to have been free there), or, on a MIG instance, the next larger profile its queue
    covers (``offered``: the queue opts in, ``gpufleet.io/mig-resize-on-oom``, and its next attempt asks it; else
    only named)."""

    workload: str
    gpus: tuple[str, ...] = ()
    needs_more_than: int = 0
    mig: Resize | None = None
    mig_from: str | None = None  # the MIG resource it ran out of memory on
    offered: bool = False

    def text(self) -> str:
        if self.mig_from is not None:
            if self.mig is None:
                return (f"ran out of GPU memory on {self.mig_from}, and its ClusterQueue covers no larger MIG "
                        "profile of that GPU")
            if self.offered:
                return f"ran out of GPU memory on {self.mig_from}: its next attempt is offered {self.mig.new}"
            return (f"ran out of GPU memory on {self.mig_from}; its ClusterQueue covers {self.mig.new}, the next "
                    f"larger profile, and does not resize ({RESIZE_ON_OOM_ANNOTATION} is not \"true\"): ask for "
                    f"{self.mig.new} in the pod template")
        where = ", ".join(self.gpus)
        need = f", and is expected to need more than {self.needs_more_than} MiB" if self.needs_more_than else ""
        return f"ran out of GPU memory on the shared GPU {where}: it is not placed there again{need}"


@dataclass(frozen=True, slots=True)
class MemoryLessons:
    """What OOMs taught a :class:`MemoryBook` of workloads, to be given to another book (a live scheduler's next
    policy). What pods were seen to use is not among them: it is read again from the running pods."""

    floor: Mapping[str, int] = field(default_factory=dict)
    avoid: Mapping[str, frozenset[str]] = field(default_factory=dict)
    resize: Mapping[str, tuple[Resize, ...]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.floor or self.avoid or self.resize)


class MemoryBook:
    """What one policy knows of GPU memory. What an OOM taught of a workload is kept for the policy's life: the
    workload's next attempt, submitted again under the same key after ``finish``, needs it; only workloads an OOM
    killed have such entries."""

    def __init__(self, cluster: ClusterState | None) -> None:
        self.cluster = cluster
        self._classes: dict[str, _ClassMemory] = {}
        self._floor: dict[str, int] = {}  # workload -> MiB an OOM showed it needs at least
        self._avoid: dict[str, frozenset[str]] = {}  # workload -> GPUs ("node/index") that OOM-killed it
        self._resize: dict[str, tuple[Resize, ...]] = {}  # workload -> its MIG resizes so far

    # ---- what placement reads ----------------------------------------------------------------------------------
    def hint(self, workload: Workload, template: PodTemplate) -> int:
        declared = template.gpu.memory_mib
        if declared:
            return declared
        memory = self._classes.get(workload_class(workload))
        return max(memory.estimate() if memory is not None else 0, self._floor.get(workload.key, 0))

    def avoid(self, workload: str) -> frozenset[str]:
        return self._avoid.get(workload, frozenset())

    def resizes(self, workload: str) -> tuple[Resize, ...]:
        return self._resize.get(workload, ())

    # ---- carried from one book to the next ----------------------------------------------------------------------
    def lessons(self) -> MemoryLessons:
        if not (self._floor or self._avoid or self._resize):
            return MemoryLessons()
        return MemoryLessons(dict(self._floor), dict(self._avoid), dict(self._resize))

    def learn(self, lessons: MemoryLessons) -> None:
        """Take what another book's OOMs taught (this one's own lessons kept: the larger floor, both GPU sets)."""
        for key, mib in lessons.floor.items():
            self._floor[key] = max(self._floor.get(key, 0), mib)
        for key, gpus in lessons.avoid.items():
            self._avoid[key] = self.avoid(key) | gpus
        for key, resizes in lessons.resize.items():
            self._resize.setdefault(key, resizes)

    # ---- what the driver reports -------------------------------------------------------------------------------
    def observed(self, workload: Workload, pod: str, mib: int) -> None:
        """A running pod of ``workload`` uses ``mib`` on each GPU device it holds."""
        self._classes.setdefault(workload_class(workload), _ClassMemory()).add(pod, mib)
        if self.cluster is not None:
            self.cluster.observe_memory(pod, mib)

    def oom_on_shared(self, workload: Workload, gpus: Collection[str], needed_more_than: int) -> None:
        """A pod of ``workload`` was OOM-killed on the software-shared ``gpus``, where at least ``needed_more_than``
        MiB were free by what is known: keep it off them, and expect more than that of this workload (a bound, not
        an observation: its class's figures are not changed; nothing is learnt of it when nothing was known to be
        free)."""
        self._avoid[workload.key] = self.avoid(workload.key) | frozenset(gpus)
        if needed_more_than > 0:
            self._floor[workload.key] = max(self._floor.get(workload.key, 0), needed_more_than + 1)

    def oom_on_mig(self, workload: Workload, resize: Resize | None) -> None:
        if resize is not None:
            self._resize[workload.key] = (*self.resizes(workload.key), resize)


def next_larger_profile(resource: str, gpu_model: str, covered: Collection[str]) -> str | None:
    """The MIG resource of the smallest profile of ``gpu_model`` with more memory than ``resource``'s that the
    queue covers (``covered``: resource names), or None."""
    profile = profile_from_resource_name(resource)
    geometry = geometry_for(gpu_model)
    if profile is None or geometry is None or not geometry.has_profile(profile):
        return None
    current = geometry.profile(profile)
    larger = sorted((p for p in geometry.profiles if p.memory_mib > current.memory_mib
                     and p.resource_name in covered), key=lambda p: (p.memory_mib, p.compute_slices))
    return larger[0].resource_name if larger else None


def resized(workload: Workload, resizes: Sequence[Resize]) -> Workload:
    """``workload`` with every pod (and pod set) asking the resized MIG resources instead."""
    if not resizes:
        return workload
    pods = list(workload.pods)
    sets = list(workload.pod_sets)
    pods = [replace(p, template=resized_template(p.template, resizes)) for p in pods]
    sets = [replace(s, template=resized_template(s.template, resizes)) for s in sets]
    return replace(workload, pods=pods, pod_sets=sets)
