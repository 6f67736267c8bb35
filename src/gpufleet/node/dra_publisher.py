"""This node's DRA pool on the API server, kept equal to what the agent discovered (``gpufleet node agent --dra``).

The slices themselves come from :mod:`gpufleet.node.dra_slices`; this module only writes them:

* **generation**: read from the slices already there (a restarted agent goes on from it), kept when they already
  hold exactly the wanted devices, and raised by one whenever anything differs: a device appeared or went (an XID
  made it Unhealthy, the MIG layout changed) or one of its attributes changed. Consumers use only the slices at a
  pool's highest generation, so every slice of the pool is rewritten at the new one, and only then are the slices
  beyond the new count deleted;
* **names**: ``<node>-gpu.nvidia.com-<k>`` (:func:`gpufleet.node.dra_slices.slice_name`), and the label
  ``app.kubernetes.io/managed-by=gpufleet-node-agent``: only slices with that label, this node and this driver are
  ever changed or deleted. Another publisher of ``gpu.nvidia.com`` on this node (NVIDIA's DRA driver) is left
  alone and warned about: one pool with two writers is what NVIDIA's chart refuses;
* **writes**: create, or a PUT carrying the slice's resourceVersion (a concurrent writer gives Conflict, and the
  next call reads the server again); a slice whose immutable fields (driver, pool name, node) differ is deleted and
  created again;
* **withdraw**: on stop every slice of this node's pool is deleted, so the scheduler stops allocating devices
  nobody will prepare.

Between changes nothing is read: the last pool written is remembered, and the server is read again only when the
devices differ, after an error, or every ``resync_period`` (someone deleted a slice).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.errors import NotFound
from gpufleet.k8s.resources import NODES, RESOURCE_SLICES
from gpufleet.node.dra_slices import DRIVER, MANAGED_BY, MANAGED_BY_LABEL, slices

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]

# Set once a slice exists and never changed afterwards (the API rejects an update that changes them).
_IMMUTABLE = (("driver",), ("nodeName",), ("pool", "name"))


def _field(obj: Mapping[str, Any], *path: str) -> Any:
    value: Any = obj
    for key in path:
        value = (value or {}).get(key) if isinstance(value, Mapping) else None
    return value


def generation_of(obj: Mapping[str, Any]) -> int:
    try:
        return int(_field(obj, "spec", "pool", "generation") or 0)
    except (TypeError, ValueError):
        return 0


def _comparable(spec: Mapping[str, Any]) -> JsonDict:
    # The server omits an empty device list (omitempty): an empty pool reads back without "devices".
    return {**spec, "devices": spec.get("devices") or []}


class DraPublisher:
    def __init__(self, client: KubeClient, node_name: str, *, driver: str = DRIVER, resync_period: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.node_name = node_name
        self.driver = driver
        self.resync_period = resync_period
        self._clock = clock
        self._published: list[JsonDict] | None = None  # the devices the server held after the last call
        self._resync_due = 0.0
        self._generation = 0
        self._owner_uid: str | None = None
        self._foreign_warned = False

    @property
    def generation(self) -> int:
        """The pool's generation after the last call (0 before the first, and after a withdrawal)."""
        return self._generation

    # --- the pool ---------------------------------------------------------------------------------------------

    def sync(self, pool_devices: Sequence[JsonDict]) -> bool:
        """Make this node's pool hold exactly ``pool_devices``; True when something was written. Raises the
        client's errors (the caller retries); the next call then reads the server again."""
        wanted = list(pool_devices)
        if self._published is not None and wanted == self._published and self._clock() < self._resync_due:
            return False
        try:
            return self._sync(wanted)
        except Exception:
            self._published = None
            raise

    def _sync(self, wanted: list[JsonDict]) -> bool:
        existing = self._existing()
        current = max((generation_of(o) for o in existing.values()), default=0)
        if current and self._holds(existing, slices(self.node_name, wanted, generation=current,
                                                    driver=self.driver)):
            self._remember(wanted, current)
            return False
        owner = self._owner()
        target = slices(self.node_name, wanted, generation=current + 1, driver=self.driver, owner_uid=owner)
        for obj in target:
            self._write(obj, existing.get(obj["metadata"]["name"]))
        names = {obj["metadata"]["name"] for obj in target}
        for name in sorted(set(existing) - names):  # the old generation's slices beyond the new count
            self._delete(name)
        self._remember(wanted, current + 1)
        log.info("node %s: %s pool at generation %d: %d device(s) in %d ResourceSlice(s)", self.node_name,
                 self.driver, current + 1, len(wanted), len(target),
                 extra={"generation": current + 1, "devices": len(wanted), "slices": len(target)})
        return True

    def withdraw(self) -> int:
        """Delete every slice of this node's pool; how many were deleted. Raises the client's errors."""
        existing = self._existing()
        for name in sorted(existing):
            self._delete(name)
        self._published = None
        self._generation = 0
        if existing:
            log.info("node %s: %d ResourceSlice(s) of %s withdrawn", self.node_name, len(existing), self.driver)
        return len(existing)

    # --- the server -------------------------------------------------------------------------------------------

    def _existing(self) -> dict[str, JsonDict]:
        """This node's slices of this driver that the agent wrote, by name."""
        listed = self.client.list_all(RESOURCE_SLICES,
                                      field_selector=f"spec.nodeName={self.node_name},spec.driver={self.driver}")
        ours: dict[str, JsonDict] = {}
        foreign = []
        for obj in listed.items:
            # Filtered here too: the field selector is the server's, and a test double may not apply it.
            if _field(obj, "spec", "nodeName") != self.node_name or _field(obj, "spec", "driver") != self.driver:
                continue
            name = str(_field(obj, "metadata", "name") or "")
            labels = _field(obj, "metadata", "labels") or {}
            if labels.get(MANAGED_BY_LABEL) == MANAGED_BY:
                ours[name] = obj
            else:
                foreign.append(name)
        if foreign and not self._foreign_warned:
            self._foreign_warned = True
            log.warning("node %s: ResourceSlice(s) %s of %s were written by another publisher (NVIDIA's DRA driver?): "
                        "two writers of one pool confuse the scheduler; run only one of them on this node",
                        self.node_name, ", ".join(sorted(foreign)), self.driver)
        return ours

    def _holds(self, existing: Mapping[str, JsonDict], target: Sequence[JsonDict]) -> bool:
        """Whether the server's slices are exactly ``target`` (same names, same specs)."""
        if set(existing) != {obj["metadata"]["name"] for obj in target}:
            return False
        return all(_comparable(existing[obj["metadata"]["name"]].get("spec") or {}) == _comparable(obj["spec"])
                   for obj in target)

    def _owner(self) -> str | None:
        """The Node's UID, for the slices' owner reference; None while the Node is not there."""
        if self._owner_uid is None:
            try:
                node = self.client.get(NODES, self.node_name)
            except NotFound:
                return None
            self._owner_uid = str(_field(node, "metadata", "uid") or "") or None
        return self._owner_uid

    def _write(self, obj: JsonDict, have: JsonDict | None) -> None:
        if have is not None and any(_field(have, "spec", *path) != _field(obj, "spec", *path) for path in _IMMUTABLE):
            self._delete(obj["metadata"]["name"])
            have = None
        if have is None:
            self.client.create(RESOURCE_SLICES, obj)
            return
        meta = have.get("metadata") or {}
        body = {**obj, "metadata": {**obj["metadata"],
                                    "labels": {**(meta.get("labels") or {}), **obj["metadata"]["labels"]},
                                    "resourceVersion": meta.get("resourceVersion")}}
        if "ownerReferences" not in obj["metadata"] and meta.get("ownerReferences"):
            body["metadata"]["ownerReferences"] = meta["ownerReferences"]
        self.client.replace(RESOURCE_SLICES, body)

    def _delete(self, name: str) -> None:
        with contextlib.suppress(NotFound):  # already gone: what was wanted
            self.client.delete(RESOURCE_SLICES, name)

    def _remember(self, wanted: list[JsonDict], generation: int) -> None:
        self._published = wanted
        self._generation = generation
        self._resync_due = self._clock() + self.resync_period
