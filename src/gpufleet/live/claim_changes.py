"""DRA ResourceClaims changing between two cycles, as a cycle that carries on takes them (gpufleet.live.increment).

On a DRA cluster every pod of ours brings claim changes of its own: the resourceclaim controller creates its claim
from the template (unallocated), then the binder writes the finalizer and the allocation with the pod in
``reservedFor`` (gpufleet.live.claims), before the Binding. None of these decides anything new about what the kept
world holds: a claim created is only read by the pod that names it (still off the books, or arriving), and our own
allocation names the devices the kept cluster placed the pod on already. :class:`ClaimChanges` takes those in place
and refuses (a full cycle) everything else: a claim allocated or reserved by someone else (kube-scheduler, another
gpufleet), one allocated to other devices than the kept placement, a claim named by a pod the kept world resolved
without it, any allocated claim deleted or released, and one that does not parse.
"""

from __future__ import annotations

from typing import Any

from gpufleet.api.dra_objects import ResourceClaim
from gpufleet.cluster.dra_claims import claim_names
from gpufleet.k8s import resources as r
from gpufleet.k8s.informer import CacheChange
from gpufleet.k8s.parsing import ParseCache
from gpufleet.live.claims import allocated, result_keys
from gpufleet.live.world import World
from gpufleet.scheduling.kueue import KueuePolicy
from gpufleet.scheduling.placement.dra_results import assignment_claims

JsonDict = dict[str, Any]


def claim_statuses(obj: JsonDict | None) -> Any:
    """The pod's ``status.resourceClaimStatuses``: the claims the resourceclaim controller made for it, by name."""
    return ((obj or {}).get("status") or {}).get("resourceClaimStatuses")


class ClaimChanges:
    """The claim changes of one batch, judged one by one (:meth:`take`) and written on the world at the end
    (:meth:`apply`), as a full cycle would list the claims."""

    def __init__(self, world: World, policy: KueuePolicy, parse: ParseCache) -> None:
        self.world = world
        self.policy = policy
        self.parse = parse
        self.changed: dict[str, ResourceClaim | None] = {}  # key -> the claim now (None: deleted)
        self._named: set[str] | None = None

    def take(self, c: CacheChange) -> bool:
        """Take one ResourceClaim change in place; False when it needs a full cycle."""
        if c.type == "DELETED" or c.new is None:
            old = self._parsed(c.key, c.old) if c.old is not None else None
            if old is None or old.allocation is not None or old.reserved_for or self._named_by_world(c.key):
                return False  # (an allocation gone frees devices a full cycle counted held)
            self.changed[c.key] = None
            return True
        new = self._parsed(c.key, c.new)
        if new is None:
            return False
        old = self._parsed(c.key, c.old) if c.old is not None else None
        if old is None:
            # Created (by the resourceclaim controller, for a pod still to come or waiting off the books); one made
            # allocated, or for a pod the kept world resolved without it, is a full cycle's to read.
            if new.allocation is not None or new.reserved_for or self._named_by_world(c.key):
                return False
        elif (new.allocation, new.reserved_for) != (old.allocation, old.reserved_for) and not (
                old.allocation is None and not old.reserved_for and self._our_allocation(c.new)):
            return False
        self.changed[c.key] = new
        return True

    def apply(self) -> None:
        """Write the claims changed on the world's DRA objects, sorted by key as a full cycle lists them."""
        if not self.changed:
            return
        changed = dict(self.changed)
        claims: list[ResourceClaim] = []
        for claim in self.world.dra.resource_claims:
            if claim.key in changed:
                now = changed.pop(claim.key)
                if now is not None:
                    claims.append(now)
            else:
                claims.append(claim)
        added = [claim for claim in changed.values() if claim is not None]
        if added:
            claims.extend(added)
            claims.sort(key=lambda claim: claim.key)
        self.world.dra.resource_claims = claims

    def _parsed(self, key: str, raw: JsonDict | None) -> ResourceClaim | None:
        parsed = self.parse.one(r.RESOURCE_CLAIMS, key, raw) if raw is not None else None
        return parsed.obj if parsed is not None and isinstance(parsed.obj, ResourceClaim) else None

    def _named_by_world(self, key: str) -> bool:
        """Whether a pod the kept world knows names the claim: it was resolved without this claim as it is now."""
        if self._named is None:
            self._named = {name for e in self.world.pods.values() if e.pod is not None
                           and e.pod.template.resource_claims
                           for name in claim_names(e.namespace, e.pod.template.resource_claims)}
        return key in self._named

    def _our_allocation(self, raw: JsonDict) -> bool:
        """Whether the claim's allocation is the one our binder writes for the pod it is now reserved for: a pod of
        ours the kept cluster placed, the claim's results those devices (gpufleet.live.cycle._claim_writes)."""
        consumers = (raw.get("status") or {}).get("reservedFor") or []
        namespace = (raw.get("metadata") or {}).get("namespace") or ""
        if len(consumers) != 1 or (consumers[0].get("resource") or "") != "pods":
            return False
        pod = f"{namespace}/{consumers[0].get('name') or ''}"
        world = self.world
        entry = world.pods.get(pod)
        placement = world.cluster.placements.get(pod)
        workload = world.workload_of.get(pod)
        info = self.policy.info(workload) if workload is not None else None
        if entry is None or not entry.ours or placement is None or info is None or (
                consumers[0].get("uid") not in (None, entry.uid)):
            return False
        need = next((p.template.dra for p in info.workload.pods if p.key == pod), None)
        if need is None:
            return False
        key = f"{namespace}/{(raw.get('metadata') or {}).get('name') or ''}"
        wanted = [res for res in assignment_claims({pod: need}, world.cluster, pod, placement.node,
                                                   placement.device_ids) if res.claim == key]
        return bool(wanted) and allocated(raw) == result_keys(wanted)
