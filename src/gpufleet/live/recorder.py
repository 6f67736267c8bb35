"""What kube-scheduler tells users about pods, told the same way: Events and the PodScheduled condition.

* ``Scheduled`` (Normal) after a bind, ``FailedScheduling`` (Warning) with the reason, ``Preempted``
  (Normal) on each victim pod: events.k8s.io/v1 Events naming the scheduler as reporting controller.
* ``PodScheduled=False``, reason ``Unschedulable``, with the same message, on each pending pod.

A pending pod's condition and its FailedScheduling event are written only when the message changes (the
cached pod shows the condition we wrote last; until the cache has caught up with our write, the recorder
remembers it), so a pod waiting for hours costs two writes, not two per cycle. Failures to record are
logged and dropped: they must never hold up scheduling. Events go through an
:class:`~gpufleet.k8s.eventsink.EventSink` (queued, written by a thread of their own at their own rate,
dropped with a count when too many wait), so recording one never waits on the API server.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Mapping
from typing import Any

from gpufleet.k8s.client import KubeClient, PatchType, make_event
from gpufleet.k8s.errors import KubeError, NotFound
from gpufleet.k8s.eventsink import EventSink
from gpufleet.k8s.resources import PODS
from gpufleet.live.preempted_note import PREEMPTED, preempted_note

log = logging.getLogger(__name__)

UNSCHEDULABLE = "Unschedulable"
# kube-scheduler's message cap for conditions is generous; events cap at 1 kB (make_event cuts there).
_MAX_MESSAGE = 4096
# Conditions written whose watch event may not have arrived yet; beyond this many, the oldest are forgotten.
_REMEMBERED = 100_000


def _stamp(now: float) -> str:
    return dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def scheduled_condition(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled":
            return dict(cond)
    return None


def needs_unschedulable(pod: Mapping[str, Any], message: str) -> bool:
    cond = scheduled_condition(pod)
    return cond is None or (cond.get("status"), cond.get("reason"), cond.get("message")) != (
        "False", UNSCHEDULABLE, message[:_MAX_MESSAGE])


class Recorder:
    """``client`` writes the conditions; ``events`` queues the events (without one, each event is written
    inline, on the caller's thread)."""

    def __init__(self, client: KubeClient, scheduler_name: str, identity: str,
                 events: EventSink | None = None) -> None:
        self.client = client
        self.controller = scheduler_name
        self.instance = identity
        self.events = events
        self._lock = threading.Lock()
        # pod -> (the resourceVersion the cached pod had when we wrote its condition, the message written)
        self._written: dict[str, tuple[str, str]] = {}

    def event(self, pod: Mapping[str, Any], reason: str, note: str, action: str, type: str = "Normal",
              related: Mapping[str, Any] | None = None) -> None:
        event = make_event(pod, reason=reason, note=note, action=action, type=type,
                           reporting_controller=self.controller, reporting_instance=self.instance, related=related)
        if self.events is not None:
            self.events.post(event)
            return
        try:
            self.client.create_event(event)
        except KubeError as e:
            log.warning("event %s for %s not recorded: %s", reason, _key(pod), e)

    def scheduled(self, pod: Mapping[str, Any], node: str) -> None:
        self.event(pod, "Scheduled", f"Successfully assigned {_key(pod)} to {node}", "Binding")

    def preempted(self, pod: Mapping[str, Any], preemptor: str, reason: str, message: str = "") -> None:
        self.event(pod, PREEMPTED, preempted_note(preemptor, reason, message), "Preempting")

    def unschedulable_is_new(self, pod: Mapping[str, Any], message: str) -> bool:
        """Whether :meth:`unschedulable` would write anything: asked before handing it to a writer thread, so
        that thousands of pods waiting with the same message cost no task each, cycle after cycle."""
        message = message[:_MAX_MESSAGE]
        meta = pod.get("metadata") or {}
        key, version = _key(pod), str(meta.get("resourceVersion") or "")
        with self._lock:
            if self._written.get(key) == (version, message):
                return False  # written from this very version: the cache has not shown our write yet
            if not needs_unschedulable(pod, message):
                self._written.pop(key, None)  # the cache shows it: nothing to remember
                return False
        return True

    def unschedulable(self, pod: Mapping[str, Any], message: str, now: float) -> bool:
        """Set PodScheduled=False (Unschedulable) and emit FailedScheduling, if the message is new."""
        if not self.unschedulable_is_new(pod, message):
            return False
        message = message[:_MAX_MESSAGE]
        meta = pod.get("metadata") or {}
        key, version = _key(pod), str(meta.get("resourceVersion") or "")
        condition = {"type": "PodScheduled", "status": "False", "reason": UNSCHEDULABLE, "message": message,
                     "lastProbeTime": None, "lastTransitionTime": _stamp(now)}
        if not self._set_condition(pod, condition):
            return False
        with self._lock:
            self._written.pop(key, None)  # re-inserted last: the dict stays in the order of writing
            self._written[key] = (version, message)
            while len(self._written) > _REMEMBERED:
                del self._written[next(iter(self._written))]
        self.event(pod, "FailedScheduling", message, "Scheduling", type="Warning")
        return True

    def was_ready(self, pod: Mapping[str, Any], condition_type: str, now: float) -> bool:
        """Write the condition ``condition_type`` (True) on the pod's status: its workload was seen with all its pods
        Ready (gpufleet.live.gangs.WAS_READY_CONDITION). Whether it was written."""
        return self._set_condition(pod, {
            "type": condition_type, "status": "True", "reason": "PodsReady",
            "message": "every pod of its workload was Ready: waitForPodsReady's timeout no longer applies",
            "lastProbeTime": None, "lastTransitionTime": _stamp(now)})

    def _set_condition(self, pod: Mapping[str, Any], condition: dict[str, Any]) -> bool:
        """Patch ``condition`` into the pod's status; whether it was written (a pod gone or a refusal: not)."""
        meta = pod.get("metadata") or {}
        try:
            # Strategic merge on status merges conditions by type, leaving the kubelet's own untouched.
            self.client.patch(PODS, str(meta.get("name")), {"status": {"conditions": [condition]}},
                              str(meta.get("namespace")), patch_type=PatchType.STRATEGIC, subresource="status")
        except NotFound:
            return False
        except KubeError as e:
            log.warning("%s condition for %s not written: %s", condition["type"], _key(pod), e)
            return False
        return True


def _key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"
