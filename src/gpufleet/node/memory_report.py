"""The GPU memory each pod was seen to use, written on the pod for the scheduler: ``gpufleet.io/gpu-memory-used``.

dcgm-exporter puts a pod's labels on a device's series exactly when one pod holds the device
(:mod:`gpufleet.node.attribution`); its ``DCGM_FI_DEV_FB_USED`` is then that pod's memory. The agent makes the same
reading for the scheduler: for each GPU, and each MIG instance, that one pod holds alone, NVML's framebuffer use
(of the GPU, or of the instance's memory) is the pod's use of that device; a pod holding several devices alone
uses the most it uses on any of them. The agent keeps each pod's peak and writes it on the pod when it has grown
by a step (:data:`STEP_RATIO` of the value the pod carries, at least :data:`STEP_MIB`) since what the pod
carries: a few writes in a pod's life, never one per reading. The value the pod carries is read from the API,
so a restarted agent does not write again what is there.

A GPU several pods share (time-slice replicas, fractions) tells nothing per pod in its framebuffer total; there
NVML's running compute processes are read instead, each with the framebuffer it uses, and each process is mapped
to its pod through its cgroup (``/proc/<pid>/cgroup`` names the pod's UID under the kubelet's hierarchy, with the
``systemd`` or the ``cgroupfs`` driver: :class:`ProcessPods`). A pod's use of the GPU is the sum of its
processes'; a process that maps to no pod holding that GPU is left out. NVML names processes by their PIDs in the
host's PID namespace, so this needs the agent to share it (``hostPID: true``, the chart's
``nodeAgent.hostPID``); without it no process maps and a shared GPU tells nothing, as before.

The scheduler reads the annotation (``Pod.gpu_memory_used_mib``) into its memory book
(:mod:`gpufleet.live.observed_memory`): the pod's expected memory on a shared GPU, and its workload class's
figures for the pods of the class that declare none.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.api.objects import GPU_MEMORY_USED_ANNOTATION
from gpufleet.api.quantity import QuantityError, mib_value
from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.errors import KubeError, NotFound
from gpufleet.k8s.resources import PODS
from gpufleet.node.attribution import Attribution
from gpufleet.node.contract import Gpu, GpuMemory

log = logging.getLogger(__name__)

STEP_RATIO = 0.10  # of the value a pod carries: a peak this much higher is written
STEP_MIB = 256  # and at least this many MiB higher (a CUDA context alone is a few hundred)

JsonDict = dict[str, Any]


# A pod's UID in a cgroup path: "pod<uid>" with dashes (cgroupfs driver) or underscores (systemd driver's
# "kubepods-burstable-pod<uid>.slice")
_POD_UID = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
CGROUP_READ_LIMIT = 64 * 1024  # bytes of /proc/<pid>/cgroup read (a few hundred in practice)


@dataclass(frozen=True, slots=True)
class ProcessPods:
    """Which pod a process of this node runs in, by the UID its cgroup path names (None: none, or no such process
    visible here: the agent sees the node's processes only in the host's PID namespace)."""

    root: Path = Path("/proc")

    def uid_of(self, pid: int) -> str | None:
        try:
            with open(self.root / str(pid) / "cgroup", "rb") as f:
                text = f.read(CGROUP_READ_LIMIT).decode("utf-8", "replace")
        except OSError:
            return None
        found = _POD_UID.search(text)
        return found.group(1).replace("_", "-") if found else None


def readings(attribution: Attribution, samples: Iterable[tuple[Gpu, GpuMemory]], *,
             processes: ProcessPods | None = None, uids: Mapping[str, str] | None = None) -> dict[str, int]:
    """Pod key ("namespace/name") -> MiB it uses now of a device it holds alone, or, with ``processes`` (and
    ``uids``: pod UID -> key, this node's pods), of a shared GPU by its own processes (the most over such
    devices)."""
    out: dict[str, int] = {}

    def seen(key: str, mib: float) -> None:
        if math.isfinite(mib) and mib > 0:
            out[key] = max(out.get(key, 0), math.ceil(mib))

    for gpu, sample in samples:
        used: list[tuple[int | None, float]] = [(None, sample.fb_used_mib)]
        used += [(i.gi_id, i.fb_used_mib) for i in sample.instances]
        for gi_id, mib in used:
            ref = attribution.pod_of(gpu.uuid, gi_id)
            if ref is not None:
                seen(f"{ref[0]}/{ref[1]}", mib)
        if processes is None or not uids or not sample.processes or attribution.pod_of(gpu.uuid) is not None:
            continue
        holders = {f"{h.namespace}/{h.pod}" for h in attribution.holders.get(gpu.uuid, ())}
        per_pod: dict[str, float] = {}
        for p in sample.processes:
            uid = processes.uid_of(p.pid)
            key = uids.get(uid) if uid is not None else None
            if key in holders and math.isfinite(p.used_mib) and p.used_mib > 0:
                assert key is not None
                per_pod[key] = per_pod.get(key, 0.0) + p.used_mib
        for key, mib in per_pod.items():
            seen(key, mib)
    return out


def carried(pod: Mapping[str, Any]) -> int:
    """The MiB ``pod`` carries in its annotation (0: none, or a value that does not read)."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(GPU_MEMORY_USED_ANNOTATION)
    if not isinstance(text, str):
        return 0
    try:
        return max(0, mib_value(text))
    except QuantityError:
        return 0


def worth_writing(peak: int, have: int) -> bool:
    """Whether a pod carrying ``have`` MiB (0: nothing) is written ``peak``: the first time once it uses more than a
    bare CUDA context, then at each step."""
    if have == 0:
        return peak >= STEP_MIB
    return peak - have >= max(STEP_MIB, STEP_RATIO * have)


RETRY_S = 30.0  # after a write that failed, the pod is written again no sooner than this, doubled each time
RETRY_MAX_S = 900.0


@dataclass(slots=True)
class MemoryReporter:
    """Each pod's peak, and the writes it takes. One per agent; called from the agent's loop alone."""

    client: KubeClient
    peaks: dict[tuple[str, str], int] = field(default_factory=dict)  # (pod key, uid) -> MiB, the peak seen
    writes: int = 0  # sent and accepted
    readings: int = 0  # taken (tests wait on it)
    # (pod key, uid) -> (when it may be written again, the wait after the next failure): writes that failed
    retry: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)

    def report(self, now: Mapping[str, int], pods: Mapping[str, JsonDict], clock: float) -> list[str]:
        """Take this reading (:func:`readings`) of this node's ``pods`` (key -> object, the agent's informer) and
        write each pod whose peak grew by a step over what it carries; the pods written. ``clock``: monotonic
        seconds, for the backoff of pods whose write failed (a refusal is not asked again every reading)."""
        self.readings += 1
        written: list[str] = []
        alive: set[tuple[str, str]] = set()
        for key, obj in pods.items():
            uid = str((obj.get("metadata") or {}).get("uid") or "")
            alive.add((key, uid))
            mib = now.get(key)
            if mib is not None:
                self.peaks[(key, uid)] = max(self.peaks.get((key, uid), 0), mib)
            peak = self.peaks.get((key, uid), 0)
            if not peak or not worth_writing(peak, carried(obj)) or self.retry.get((key, uid), (0.0, 0.0))[0] > clock:
                continue
            if self._write(key, uid, peak):
                self.retry.pop((key, uid), None)
                written.append(key)
            else:
                wait = self.retry.get((key, uid), (0.0, RETRY_S))[1]
                self.retry[(key, uid)] = (clock + wait, min(wait * 2, RETRY_MAX_S))
        for gone in set(self.peaks) - alive:  # (a pod deleted, or made again under its name)
            del self.peaks[gone]
        for gone in set(self.retry) - alive:
            del self.retry[gone]
        return written

    def _write(self, key: str, uid: str, mib: int) -> bool:
        namespace, _, name = key.partition("/")
        # The UID makes the patch conditional: a pod made again under the name since is not written the old one's.
        meta: JsonDict = {"annotations": {GPU_MEMORY_USED_ANNOTATION: f"{mib}Mi"}}
        if uid:
            meta["uid"] = uid
        try:
            self.client.patch(PODS, name, {"metadata": meta}, namespace)
        except NotFound:
            return False  # gone meanwhile
        except KubeError as e:
            log.warning("pod %s: writing %s failed (%s); trying again later", key, GPU_MEMORY_USED_ANNOTATION, e)
            return False
        self.writes += 1
        log.info("pod %s: GPU memory used %d MiB (%s)", key, mib, GPU_MEMORY_USED_ANNOTATION)
        return True
