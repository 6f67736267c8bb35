"""XID health, as NVIDIA's device plugin judges it (``internal/rm/health.go``).

* XIDs 13, 31, 43, 45, 68 and 109 are application errors (a kernel fault, a page fault, a stopped or preempted
  context, a video exception, a context-switch timeout): they say nothing about the GPU and are ignored.
* ``DP_DISABLE_HEALTHCHECKS``: ``all`` or ``xids`` disables XID health checks; otherwise a comma-separated list
  of further XIDs to ignore. ``DP_ENABLE_HEALTHCHECKS``: XIDs that always count, even if ignored above.
* Any other XID marks the device Unhealthy: the whole GPU (and its MIG devices) when the event concerns the
  whole GPU, else the MIG devices of the event's GPU instance (and compute instance, when given).
* Unhealthy stays unhealthy until the agent restarts, as in NVIDIA's plugin: a GPU that raised an XID needs a
  person (or a reset) before it is trusted again.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpufleet.node.contract import ALL_INSTANCES, Machine, XidEvent

APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
DISABLE_ENV = "DP_DISABLE_HEALTHCHECKS"
ENABLE_ENV = "DP_ENABLE_HEALTHCHECKS"


class HealthPolicyError(ValueError):
    """A malformed health-check environment variable; the message names it and its value."""


def _xid_list(name: str, text: str) -> frozenset[int]:
    out = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit():
            raise HealthPolicyError(f"{name}={text!r}: {part!r} is not an XID number; write a comma-separated list "
                                    "such as 48,79" + (" or all" if name == DISABLE_ENV else ""))
        out.add(int(part))
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class HealthPolicy:
    disabled: bool = False  # DP_DISABLE_HEALTHCHECKS=all|xids
    ignored: frozenset[int] = APPLICATION_XIDS  # NVIDIA's list plus DP_DISABLE_HEALTHCHECKS' XIDs
    forced: frozenset[int] = frozenset()  # DP_ENABLE_HEALTHCHECKS

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> HealthPolicy:
        disable = env.get(DISABLE_ENV, "").strip()
        disabled = disable.lower() in ("all", "xids")
        extra = frozenset() if disabled else _xid_list(DISABLE_ENV, disable)
        return cls(disabled, APPLICATION_XIDS | extra, _xid_list(ENABLE_ENV, env.get(ENABLE_ENV, "")))

    def is_critical(self, xid: int) -> bool:
        """Whether this XID makes its device Unhealthy."""
        if xid in self.forced:
            return True
        return not self.disabled and xid not in self.ignored


@dataclass(slots=True)
class DeviceHealth:
    """Which GPU and MIG devices (by UUID) are Unhealthy, and why."""

    policy: HealthPolicy = field(default_factory=HealthPolicy)
    _reasons: dict[str, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def apply(self, event: XidEvent, machine: Machine) -> set[str]:
        """Mark what ``event`` breaks; returns the UUIDs that became Unhealthy (empty: nothing changed)."""
        if not self.policy.is_critical(event.xid):
            return set()
        gpu = machine.gpu_by_uuid(event.gpu_uuid)
        if gpu is None:
            return set()
        if event.gi_id == ALL_INSTANCES or not gpu.mig_enabled:
            hit = {gpu.uuid, *(d.uuid for d in gpu.mig)}
        else:
            hit = {d.uuid for d in gpu.mig if d.gi_id == event.gi_id
                   and (event.ci_id == ALL_INSTANCES or d.ci_id == event.ci_id)}
        reason = f"XID {event.xid}"
        with self._lock:
            new = {u for u in hit if u not in self._reasons}
            for uuid in new:
                self._reasons[uuid] = reason
        return new

    def mark_all(self, machine: Machine, reason: str) -> set[str]:
        """Every device Unhealthy (NVML's event wait itself failed: nothing can be trusted)."""
        every = {u for g in machine.gpus for u in (g.uuid, *(d.uuid for d in g.mig))}
        with self._lock:
            new = {u for u in every if u not in self._reasons}
            for uuid in new:
                self._reasons[uuid] = reason
        return new

    def is_unhealthy(self, uuid: str) -> bool:
        with self._lock:
            return uuid in self._reasons

    def reason(self, uuid: str) -> str | None:
        with self._lock:
            return self._reasons.get(uuid)

    def unhealthy_gpus(self, machine: Machine) -> set[int]:
        """GPU indexes the inventory marks Unhealthy: the GPU itself or any of its MIG devices (the scheduler
        tracks health per GPU, so a broken MIG device takes its whole GPU out of placement)."""
        with self._lock:
            return {g.index for g in machine.gpus
                    if g.uuid in self._reasons or any(d.uuid in self._reasons for d in g.mig)}
