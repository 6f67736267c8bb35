"""Objects the live scheduler sets aside so that one of them can never stop scheduling for everybody else.

Two ways in:

* **Invalid**: an object of ours that does not parse (a pod with a 5,000-digit fraction, a node with a broken
  inventory, a ClusterQueue naming a missing flavor). The parsers already keep such objects out of the world;
  here they are counted, and told about once per version (a Warning event on the object, a log line).
* **Cycle failure**: an object whose mere presence makes the scheduling core raise (a bug reached through
  odd but valid input). When a cycle fails, :func:`find_culprit` bisects the snapshot: it reruns the
  side-effect-free core on halves of the objects until one object is found without which the core succeeds.
  That object is quarantined at its resourceVersion and the cycle goes on without it; an edited object (a
  new resourceVersion) gets another chance. A failure that no object explains (the core fails even on an
  empty cluster) is a bug of ours: it is counted and the health probe says so after a few in a row.

Both are exported as ``gpufleet_rejected_objects{kind, reason}``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.k8s.informer import CacheSnapshot
from gpufleet.k8s.resources import ResourceType

log = logging.getLogger(__name__)

ObjectRef = tuple[str, str]  # (resource key, "namespace/name" or "name")

INVALID = "Invalid"
CYCLE_FAILURE = "CycleFailure"


def resource_version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


@dataclass(frozen=True, slots=True)
class Rejection:
    kind: str
    key: str
    reason: str  # INVALID or CYCLE_FAILURE
    message: str
    version: str  # the resourceVersion it was rejected at
    resource: str = ""  # its resource key (two kinds may share a name: a batch Job and a Volcano Job)


class Quarantine:
    """Objects set aside by cycle failures (by resourceVersion), and this cycle's invalid objects."""

    def __init__(self) -> None:
        self._held: dict[ObjectRef, Rejection] = {}
        self._invalid: dict[ObjectRef, Rejection] = {}
        self._told: dict[ObjectRef, str] = {}  # what was last told about each object (version + message)

    # --- cycle failures ---------------------------------------------------------------------------------

    def hold(self, resource: ResourceType, key: str, obj: Mapping[str, Any], message: str) -> Rejection:
        rejection = Rejection(resource.kind, key, CYCLE_FAILURE, message, resource_version(obj), resource.key)
        self._held[(resource.key, key)] = rejection
        return rejection

    def filter(self, snapshot: CacheSnapshot) -> CacheSnapshot:
        """The snapshot without the objects held at the version they still have; held objects that changed or
        disappeared are released (they get another chance)."""
        if not self._held:
            return snapshot
        objects: dict[str, Mapping[str, Any]] = dict(snapshot.objects)
        for ref in list(self._held):
            resource_key, key = ref
            current = snapshot.objects.get(resource_key, {}).get(key)
            if current is None or resource_version(current) != self._held[ref].version:
                del self._held[ref]
                continue
            objects[resource_key] = {k: v for k, v in objects[resource_key].items() if k != key}
        return CacheSnapshot(snapshot.version, objects)

    @property
    def held(self) -> list[Rejection]:
        return list(self._held.values())

    # --- invalid objects --------------------------------------------------------------------------------

    def set_invalid(self, rejections: Iterable[tuple[ResourceType, str, Mapping[str, Any], str]], *,
                    tell: bool = True) -> list[tuple[Rejection, Mapping[str, Any]]]:
        """Replace this cycle's invalid objects; return those not told about yet at their version/message
        (and, with ``tell``, remember them as told: a follower tells nothing and remembers nothing)."""
        fresh: list[tuple[Rejection, Mapping[str, Any]]] = []
        current: dict[ObjectRef, Rejection] = {}
        for resource, key, obj, message in rejections:
            rejection = Rejection(resource.kind, key, INVALID, message, resource_version(obj), resource.key)
            ref = (resource.key, key)
            current[ref] = rejection
            said = f"{rejection.version}\0{message}"
            if tell and self._told.get(ref) != said:
                self._told[ref] = said
                fresh.append((rejection, obj))
        for ref in [r for r in self._told if r not in current and r not in self._held]:
            del self._told[ref]
        self._invalid = current
        return fresh

    def counts(self) -> dict[tuple[str, str], int]:
        out: dict[tuple[str, str], int] = {}
        for rejection in [*self._invalid.values(), *self._held.values()]:
            k = (rejection.kind, rejection.reason)
            out[k] = out.get(k, 0) + 1
        return out


def _without(snapshot: CacheSnapshot, excluded: set[ObjectRef]) -> CacheSnapshot:
    objects: dict[str, Mapping[str, Any]] = {}
    for resource_key, items in snapshot.objects.items():
        objects[resource_key] = {k: v for k, v in items.items() if (resource_key, k) not in excluded}
    return CacheSnapshot(snapshot.version, objects)


def find_culprit(snapshot: CacheSnapshot, fails: Callable[[CacheSnapshot], bool]) -> ObjectRef | None:
    """One object without which ``fails`` (the cycle's core, run on a snapshot) no longer fails, found by
    bisection in about 2·log2(n) runs; None when even the empty snapshot fails (not the input's fault).

    Invariant: with ``excluded`` left out the core still fails, with ``excluded`` and all of ``suspects``
    left out it succeeds; halving ``suspects`` keeps it. With several culprits the one found is one of them;
    the caller quarantines it and tries again.
    """
    suspects: list[ObjectRef] = [(rk, k) for rk, items in sorted(snapshot.objects.items()) for k in sorted(items)]
    if not suspects or fails(_without(snapshot, set(suspects))):
        return None
    excluded: set[ObjectRef] = set()
    while len(suspects) > 1:
        half = len(suspects) // 2
        first, second = suspects[:half], suspects[half:]
        if not fails(_without(snapshot, excluded | set(first))):
            suspects = first  # leaving out the first half is enough: a culprit is in it
        else:
            excluded |= set(first)  # still failing without it: a culprit is in the second half
            suspects = second
    return suspects[0]
