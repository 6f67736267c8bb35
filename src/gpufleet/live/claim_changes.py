"""DRA ResourceClaims changing between two cycles, as a cycle that carries on takes them (gpufleet.live.increment).

On a DRA cluster every pod of ours brings claim changes of its own: the resourceclaim controller creates its claim
from the template (unallocated), then the binder writes the finalizer and the allocation with the pod in
``reservedFor`` (gpufleet.live.claims), before the Binding. None of these decides anything new about what the kept
world holds: a claim created is only read by the pod that names it (still off the books, or arriving), and our own
allocation names the devices the kept cluster placed the pod on already. Once the pod has ended, its claim
released (unreserved and deallocated at once, by gpufleet.live.claim_release or the controller) frees the devices a
placeholder held for it meanwhile, and the claim deleted then is nobody's. :class:`ClaimChanges` takes those in
place and refuses (a full cycle) everything else: a claim allocated or reserved by someone else (kube-scheduler,
another gpufleet), one allocated to other devices than the kept placement, a claim named by a pod the kept world
resolved without it, a claim released while a pod still holds it, an allocated claim deleted, and one that does not
parse.
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
from gpufleet.scheduling.placement.dra import CLAIM_HOLD_PREFIX
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
        self.freed: list[str] = []  # the placeholders of the claims released (cluster placement keys)
        # Claims allocated for another scheduler's pods (kube-scheduler's), their devices to hold until the pods
        # bind (gpufleet.live.increment.charge_claimed)
        self.held: list[str] = []
        self.awaited: list[str] = []  # pods of the world that name a claim created now: resolved again
        self._named: dict[str, list[str]] | None = None  # claim -> the world's pods (short of finished) naming it

    def take(self, c: CacheChange) -> bool:
        """Take one ResourceClaim change in place; False when it needs a full cycle."""
        if c.type == "DELETED" or c.new is None:
            old = self._parsed(c.key, c.old) if c.old is not None else None
            if c.old is None or old is None or old.allocation is not None or old.reserved_for or self._naming(
                    c.key, c.old):
                return False  # (an allocation gone frees devices a full cycle counted held)
            self.changed[c.key] = None
            return True
        new = self._parsed(c.key, c.new)
        if new is None:
            return False
        old = self._parsed(c.key, c.old) if c.old is not None else None
        if c.old is not None and (old is None or old.meta.uid != new.meta.uid or old.spec != new.spec):
            # Read before as invalid, or made again under its name (a relist shows a deletion and a creation as one
            # change), or changed in what it asks: a full cycle resolves the pods naming it against it.
            return False
        if old is None:
            # Created (by the resourceclaim controller, for a pod arriving or already waiting for it); one made
            # allocated is a full cycle's to read. The pods that name it wait for it: they are resolved again.
            if new.allocation is not None or new.reserved_for:
                return False
            self.awaited.extend(self._naming(c.key, c.new))
        elif (new.allocation, new.reserved_for) != (old.allocation, old.reserved_for):
            if old.allocation is None and not old.reserved_for and self._our_allocation(c.new):
                pass  # (our binder's allocation, on the devices the kept cluster placed its pod on)
            elif old.allocation is None and not old.reserved_for and new.allocation is not None and (
                    new.reserved_for) and all(self._anothers_to_bind(f"{new.meta.namespace or ''}/{consumer.name}")
                                              for consumer in new.reserved_for):
                self.held.append(c.key)  # (another scheduler's allocation, its pod to bind: its devices held)
            elif old.allocation is not None and new.allocation is None and not new.reserved_for and not any(
                    self._holds(f"{old.meta.namespace or ''}/{consumer.name}") for consumer in old.reserved_for):
                # Released once its pod ended (gpufleet.live.claim_release, the resourceclaim controller): the
                # devices a placeholder held for it are free (hold_left_claims).
                self.freed.append(CLAIM_HOLD_PREFIX + c.key)
            else:
                return False
        self.changed[c.key] = new
        return True

    def apply(self) -> None:
        """Write the claims changed on the world: its DRA objects' list (a claim changed in its place, one created
        last, one deleted replaced by the last: a full cycle lists them afresh) and its catalog's claims."""
        if not self.changed:
            return
        world = self.world
        claims = world.dra.resource_claims
        if world.claim_at is None:
            world.claim_at = {claim.key: i for i, claim in enumerate(claims)}
        at = world.claim_at
        catalog = world.dra_catalog
        by_key = catalog.claims if catalog is not None else None
        assert by_key is None or isinstance(by_key, dict)
        for key, claim in self.changed.items():
            i = at.get(key)
            if claim is None:
                if i is not None:
                    last = claims.pop()
                    del at[key]
                    if last.key != key:
                        claims[i] = last
                        at[last.key] = i
                if by_key is not None:
                    by_key.pop(key, None)
                continue
            if i is None:
                at[key] = len(claims)
                claims.append(claim)
            else:
                claims[i] = claim
            if by_key is not None:
                by_key[key] = claim

    def _parsed(self, key: str, raw: JsonDict | None) -> ResourceClaim | None:
        parsed = self.parse.one(r.RESOURCE_CLAIMS, key, raw) if raw is not None else None
        return parsed.obj if parsed is not None and isinstance(parsed.obj, ResourceClaim) else None

    def _anothers_to_bind(self, pod: str) -> bool:
        """Whether ``pod`` is none of ours and holds no node in the world (another scheduler's pod, pending)."""
        entry = self.world.pods.get(pod)
        return entry is None or (not entry.ours and not entry.holds_capacity)

    def _holds(self, pod: str) -> bool:
        entry = self.world.pods.get(pod)
        return entry is not None and entry.holds_capacity

    def _naming(self, key: str, raw: JsonDict) -> list[str]:
        """The pods the kept world knows, short of finished, that name the claim (they were resolved without it as
        it is now). A claim the resourceclaim controller made for a pod (its controller owner) is named by that
        pod alone, once its status says so; another is looked for among every pod of the world."""
        world = self.world
        meta = raw.get("metadata") or {}
        owner = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
        if owner is not None and owner.get("kind") == "Pod" and owner.get("apiVersion") == "v1":
            pod = f"{meta.get('namespace') or ''}/{owner.get('name') or ''}"
            entry = world.pods.get(pod)
            named = entry is not None and not entry.terminal and entry.pod is not None and key in claim_names(
                entry.namespace, entry.pod.template.resource_claims)
            return [pod] if named else []
        if self._named is None:
            self._named = {}
            for e in world.pods.values():
                if e.pod is not None and not e.terminal and e.pod.template.resource_claims:
                    for name in claim_names(e.namespace, e.pod.template.resource_claims):
                        self._named.setdefault(name, []).append(e.key)
        return self._named.get(key, [])

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
