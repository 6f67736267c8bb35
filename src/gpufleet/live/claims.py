"""DRA ResourceClaims as a scheduler writes them: reserved for the pod it binds, released when that pod is not.

kube-scheduler's DynamicResources plugin allocates a pod's claims in PreBind, before the Binding, because a
pod whose ``spec.nodeName`` is set skips allocation altogether (KEP-4381, "Scheduled pods with unallocated or
unreserved claims"). It adds the finalizer ``resource.kubernetes.io/delete-protection`` in a normal update,
then writes ``status.allocation`` and appends the pod to ``status.reservedFor`` in one status update. Both are
guarded by the claim's resourceVersion: when two schedulers race, the first write wins and the other one reads
the claim again and finds it taken. Its Unreserve takes the pod out of ``reservedFor`` again when the pod is
not bound after all.

This module holds what the binder (:mod:`gpufleet.live.binder`) and the evictor
(:mod:`gpufleet.live.evictor`) share: how a claim is judged, the bodies written, and :func:`release`, which
takes a pod out of a claim's ``reservedFor`` and, when no consumer is left, clears the allocation and the
finalizer in the same order as kube-controller-manager's resourceclaim controller (status first, then the
finalizer, only once nothing is allocated).
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from gpufleet.api.dra_need import ClaimResult
from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.errors import Conflict, KubeError, NotFound
from gpufleet.k8s.resources import RESOURCE_CLAIMS

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]
FINALIZER = "resource.kubernetes.io/delete-protection"
Verdict = Literal["reserved", "write", "refused"]
ResultKey = tuple[str, str, str, str]  # request, driver, pool, device


def result_keys(results: Iterable[Mapping[str, Any]] | Iterable[ClaimResult]) -> list[ResultKey]:
    """The allocation results as sorted (request, driver, pool, device): the API's optional fields (shareID,
    adminAccess...) are not ours to compare, and the order of results carries no meaning for a match."""
    keys: list[ResultKey] = []
    for r in results:
        if isinstance(r, ClaimResult):
            keys.append((r.request, r.driver, r.pool, r.device))
        else:
            keys.append((str(r.get("request") or ""), str(r.get("driver") or ""), str(r.get("pool") or ""),
                         str(r.get("device") or "")))
    return sorted(keys)


def allocated(claim: Mapping[str, Any]) -> list[ResultKey] | None:
    """The claim's allocation results, or None when it is not allocated."""
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        return None
    return result_keys(((allocation.get("devices") or {}).get("results")) or [])


def consumers(claim: Mapping[str, Any]) -> list[JsonDict]:
    return list((claim.get("status") or {}).get("reservedFor") or [])


def judge(claim: Mapping[str, Any], results: Iterable[ClaimResult], pod_uid: str) -> tuple[Verdict, str]:
    """What to do with a claim about to be reserved for the pod ``pod_uid`` with ``results``:

    * ``reserved``: it is allocated to exactly these devices and reserved for the pod already (an earlier
      attempt whose answer was lost, or a scheduler that crashed between the claim and the Binding);
    * ``write``: unallocated, or allocated to exactly these devices with no other consumer: write it;
    * ``refused``, with why: allocated to other devices or in use by another consumer. Never overwritten: an
      allocation is immutable once written, and whoever wrote it (kube-scheduler, another gpufleet) won the race.
    """
    meta = claim.get("metadata") or {}
    wanted = result_keys(results)
    have = allocated(claim)
    entries = consumers(claim)
    others = [e for e in entries if e.get("uid") != pod_uid]
    if have is not None and have != wanted:
        return "refused", (f"already allocated to other devices ({_describe(have)}), by another scheduler or an "
                           f"earlier plan; an allocation is never overwritten")
    if others:
        # Sharing a claim between pods would need the planner to charge its devices once for all of them.
        names = ", ".join(f"{e.get('resource') or '?'}/{e.get('name') or '?'}" for e in others)
        return "refused", f"reserved for other consumers ({names}); a claim shared between pods is not supported"
    if have is not None and len(entries) > len(others):
        return "reserved", ""
    if meta.get("deletionTimestamp"):
        return "refused", "being deleted"  # the API server refuses a new allocation or reservation for it
    return "write", ""


def with_finalizer(claim: Mapping[str, Any]) -> JsonDict:
    """The claim with the delete-protection finalizer, for a PUT guarded by its resourceVersion: a merge patch
    would replace the whole list, racing another controller's finalizer."""
    body: JsonDict = copy.deepcopy(dict(claim))
    meta = body.setdefault("metadata", {})
    meta["finalizers"] = [*(meta.get("finalizers") or []), FINALIZER]
    return body


def reserved(claim: Mapping[str, Any], results: Iterable[ClaimResult], node: str, pod_name: str,
             pod_uid: str) -> JsonDict:
    """The claim with its allocation (when it has none) and the pod appended to ``reservedFor``, for a PUT of
    the status subresource guarded by the claim's resourceVersion."""
    body: JsonDict = copy.deepcopy(dict(claim))
    status = body.get("status") or {}
    body["status"] = status
    if not status.get("allocation"):
        devices: JsonDict = {"results": [{"request": r.request, "driver": r.driver, "pool": r.pool,
                                          "device": r.device} for r in results]}
        # The driver's kubelet plugin reads its opaque configuration (sharing, MIG...) from the allocation, not
        # from the spec: the allocator copies the claim's config in, marked as coming from the claim.
        config = [_claim_config(c) for c in ((body.get("spec") or {}).get("devices") or {}).get("config") or []
                  if c.get("opaque")]
        if config:
            devices["config"] = config
        status["allocation"] = {
            "devices": devices,
            # As the allocator writes it for devices of a node-local pool: usable on that node only.
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]},
        }
    # reservedFor is a map keyed by uid: the pod is listed once, whatever an earlier attempt left.
    status["reservedFor"] = [*(e for e in status.get("reservedFor") or [] if e.get("uid") != pod_uid),
                             {"resource": "pods", "name": pod_name, "uid": pod_uid}]
    return body


def pod_claim_names(pod: Mapping[str, Any]) -> list[str]:
    """The names of the ResourceClaims a pod uses, in its namespace: those it names, those generated from its
    templates (``status.resourceClaimStatuses``; not there until kube-controller-manager created them) and the
    one backing its DRA extended resources (KEP-5004)."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    generated = {s.get("name"): s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []}
    names: list[str] = []
    for ref in spec.get("resourceClaims") or []:
        name = ref.get("resourceClaimName") or (generated.get(ref.get("name")) if ref.get("resourceClaimTemplateName")
                                                else None)
        if name:
            names.append(str(name))
    extended = (status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
    if extended:
        names.append(str(extended))
    return list(dict.fromkeys(names))


def release(client: KubeClient, namespace: str, name: str, pod_uid: str, *, drop_finalizer: bool = False,
            attempts: int = 3, backoff: float = 0.1, sleep: Callable[[float], None] = time.sleep) -> str | None:
    """Take the pod ``pod_uid`` out of the claim's ``reservedFor``; when no consumer is left, clear the
    allocation (and the drivers' device statuses, which must name allocated devices) and then the finalizer.

    ``drop_finalizer``: the caller added the finalizer itself and wrote no allocation after it, so it is
    removed from an unallocated claim too. Otherwise the finalizer is removed only after this call cleared the
    allocation: on a claim that is not allocated, it may be another scheduler's, added a moment before its own
    allocation. Each write is guarded by the resourceVersion; a Conflict reads the claim again.

    None when nothing is left reserved for the pod (or the claim is gone), else why not."""
    deallocated = False
    failures = 0
    claim: JsonDict | None = None
    while True:
        try:
            if claim is None:
                claim = client.get(RESOURCE_CLAIMS, name, namespace)
            status = claim.get("status") or {}
            entries = consumers(claim)
            keep = [e for e in entries if e.get("uid") != pod_uid]
            if len(keep) < len(entries):
                body: JsonDict = copy.deepcopy(dict(claim))
                new_status = dict(status)
                if keep:
                    new_status["reservedFor"] = keep
                else:
                    # Unreserved and unallocated in one write, as the resourceclaim controller does: the API server
                    # refuses to clear an allocation that is still reserved.
                    for field in ("reservedFor", "allocation", "devices"):
                        new_status.pop(field, None)
                body["status"] = new_status
                claim = client.update_status(RESOURCE_CLAIMS, body, namespace)
                deallocated = not keep
                continue
            finalizers = list((claim.get("metadata") or {}).get("finalizers") or [])
            if FINALIZER in finalizers and not status.get("allocation") and (deallocated or drop_finalizer):
                body = copy.deepcopy(claim)
                body["metadata"]["finalizers"] = [f for f in finalizers if f != FINALIZER]
                claim = client.replace(RESOURCE_CLAIMS, body, namespace)
                continue
            return None
        except NotFound:
            return None  # no claim, nothing reserved
        except KubeError as e:
            failures += 1
            claim = None  # read it again: a Conflict means someone wrote it, any other error leaves it unknown
            if failures >= attempts:
                return f"claim {namespace}/{name} not released after {failures} failed writes: {e}"
            if not isinstance(e, Conflict):
                sleep(backoff * 2 ** (failures - 1))


def release_all(client: KubeClient, claims: Iterable[str], pod_uid: str, *, why: str,
                drop_finalizer: Iterable[str] = (), attempts: int = 3, backoff: float = 0.1,
                sleep: Callable[[float], None] = time.sleep) -> None:
    """:func:`release` of each claim (``namespace/name``), best effort: a claim left reserved only blocks its
    devices until kube-controller-manager's resourceclaim controller finds the pod gone; logged, never raised."""
    dropping = set(drop_finalizer)
    for key in claims:
        namespace, name = key.split("/", 1)
        failed = release(client, namespace, name, pod_uid, drop_finalizer=key in dropping, attempts=attempts,
                         backoff=backoff, sleep=sleep)
        if failed:
            log.warning("%s: %s", why, failed)
        else:
            log.debug("%s: claim %s released", why, key)


def _claim_config(config: Mapping[str, Any]) -> JsonDict:
    out: JsonDict = {"source": "FromClaim", "opaque": copy.deepcopy(config["opaque"])}
    if config.get("requests"):
        out["requests"] = list(config["requests"])
    return out


def _describe(keys: list[ResultKey]) -> str:
    return ", ".join(f"{driver}/{pool}/{device}" for _, driver, pool, device in keys) or "no device"
