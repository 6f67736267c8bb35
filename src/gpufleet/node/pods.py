"""The pods bound to this node, as the device plugins need them: who waits for devices, in the kubelet's order.

The kubelet passes no pod identity to ``GetPreferredAllocation`` or ``Allocate``, so the agent has to know which
pod is being admitted. It keeps, per pod bound here, what each container requests of every device resource,
the scheduler's intent (``gpufleet.io/node`` + ``gpufleet.io/devices``), the GPU a fractional pod uses, and the
*arrival order*: the order in which this agent's watch saw each pod become bound to the node. The kubelet
admits pods one at a time in the order its own watch of the same API server delivers them, so arrival order
is the kubelet's admission order whenever the two watches agree (pods created in one batch are sorted by
creation time by the kubelet, which breaks ties here too).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.api.gpushare import pod_is_fractional
from gpufleet.api.kinds import parse_timestamp
from gpufleet.api.quantity import QuantityError, parse_quantity
from gpufleet.k8s.annotations import VISIBLE_DEVICES_ANNOTATION, read_intent
from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.informer import CacheChange, Informer, ObjectCache
from gpufleet.k8s.resources import PODS

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]
TERMINAL_PHASES = ("Succeeded", "Failed")


def _requests(container: Mapping[str, Any]) -> dict[str, int]:
    resources = container.get("resources") or {}
    out: dict[str, int] = {}
    # Extended resources have requests equal to limits (the API server enforces it); take either.
    for section in ("requests", "limits"):
        for name, value in (resources.get(section) or {}).items():
            if "/" not in str(name) or name in out:
                continue
            try:
                amount = parse_quantity(value)
            except QuantityError:
                continue
            if amount > 0 and amount.denominator == 1:
                out[str(name)] = int(amount)
    return out


@dataclass(frozen=True, slots=True)
class PodView:
    key: str  # namespace/name
    uid: str
    arrival: tuple[int, float, float, str]  # (sequence seen bound, assigned-at, created, key): sort key
    deleting: bool
    started: bool  # a container has run: the kubelet admitted it long ago
    init_requests: tuple[Mapping[str, int], ...]
    app_requests: tuple[Mapping[str, int], ...]
    intent: tuple[str, ...] | None  # the scheduler's device IDs for this node
    fraction_gpus: tuple[str, ...]  # GPU UUIDs a fractional pod uses

    def need(self, resource: str) -> int:
        """Devices of ``resource`` the pod holds once admitted: init containers' devices are reused."""
        app = sum(c.get(resource, 0) for c in self.app_requests)
        init = max((c.get(resource, 0) for c in self.init_requests), default=0)
        return max(app, init)

    def container_sizes(self, resource: str) -> set[int]:
        return {c[resource] for c in (*self.init_requests, *self.app_requests) if c.get(resource, 0) > 0}


def pod_view(pod: Mapping[str, Any], node: str, sequence: int) -> PodView:
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    status = pod.get("status") or {}
    annotations = meta.get("annotations") or {}
    key = f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
    intent = read_intent(annotations)
    visible = str(annotations.get(VISIBLE_DEVICES_ANNOTATION) or "")
    fractions = tuple(v.strip() for v in visible.split(",") if v.strip()) if pod_is_fractional(pod) else ()
    started = any((s.get("state") or {}).keys() - {"waiting"} or s.get("lastState")
                  for s in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []))
    return PodView(
        key=key, uid=str(meta.get("uid") or ""),
        arrival=(sequence, (intent.at if intent and intent.at else 0.0),
                 parse_timestamp(meta.get("creationTimestamp")) or 0.0, key),
        deleting=bool(meta.get("deletionTimestamp")),
        started=bool(started),
        init_requests=tuple(_requests(c) for c in spec.get("initContainers") or []),
        app_requests=tuple(_requests(c) for c in spec.get("containers") or []),
        intent=intent.devices if intent is not None and intent.node == node else None,
        fraction_gpus=fractions,
    )


class PodTracker:
    """An informer on this node's pods (``spec.nodeName``), with each pod's arrival order."""

    def __init__(self, client: KubeClient, node: str, **informer_options: Any) -> None:
        self.client = client
        self.node = node
        self.cache = ObjectCache()
        self._lock = threading.Lock()
        self._arrival: dict[str, int] = {}
        self._sequence = 0
        self._listeners: list[Callable[[], None]] = []
        self.cache.add_listener(self._on_change)
        self.informer = Informer(client, PODS, self.cache, field_selector=f"spec.nodeName={node}",
                                 **informer_options)

    def _bound_here(self, obj: Mapping[str, Any] | None) -> bool:
        return obj is not None and (obj.get("spec") or {}).get("nodeName") == self.node

    def _on_change(self, change: CacheChange) -> None:
        with self._lock:
            if change.type == "DELETED" or not self._bound_here(change.new):
                self._arrival.pop(change.key, None)
            elif change.key not in self._arrival:
                # Pods listed before the first sync arrived in an order nobody saw: all get 0, and their
                # scheduler decision time and creation time order them.
                self._sequence += 1
                self._arrival[change.key] = self._sequence if self.informer.synced else 0
        for listener in list(self._listeners):
            listener()

    def add_listener(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def start(self) -> None:
        self.informer.start()

    def stop(self) -> None:
        self.informer.stop()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return self.informer.wait_for_sync(timeout)

    @property
    def synced(self) -> bool:
        return self.informer.synced

    def refresh(self) -> None:
        """Read this node's pods from the API now (a quorum read), for when the watch may lag the kubelet's."""
        found = self.client.list(PODS, field_selector=f"spec.nodeName={self.node}")
        for obj in found.items:
            if self._bound_here(obj):
                self.cache.apply(PODS, "MODIFIED", obj)

    def pods(self) -> list[PodView]:
        """Every pod bound here that is not finished, in arrival order."""
        with self._lock:
            arrival = dict(self._arrival)
        views = [pod_view(obj, self.node, arrival.get(PODS.object_key(obj), 0)) for obj in self.cache.objects(PODS)
                 if self._bound_here(obj) and (obj.get("status") or {}).get("phase") not in TERMINAL_PHASES]
        return sorted(views, key=lambda v: v.arrival)

    def fraction_holders(self) -> dict[str, list[str]]:
        """GPU UUID -> pods using it as a fraction (pods being deleted still run, so they still count)."""
        out: dict[str, list[str]] = {}
        for view in self.pods():
            for uuid in view.fraction_gpus:
                out.setdefault(uuid, []).append(view.key)
        return out
