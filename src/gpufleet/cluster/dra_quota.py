"""DRA claims charged to ClusterQueue quota as Kueue charges them (its ``deviceClassMappings``).

Kueue reads a workload's claims before it queues the workload (its workload controller, pkg/dra/claims.go). For
each pod set, each ``spec.resourceClaims`` entry made from a ResourceClaimTemplate, each request of the template:

* ``firstAvailable``: the workload is inadmissible ("FirstAvailable device selection is not supported");
* ``exactly`` with ``adminAccess``: charged nothing (checked before the allocation mode);
* ``exactly`` with ``allocationMode: All``: inadmissible ("AllocationMode 'All' is not supported");
* ``exactly`` with ``ExactCount``: ``count`` devices of its DeviceClass per pod;

then each DeviceClass counted is looked up in the mappings: an unmapped one makes the workload inadmissible, a
mapped one adds its count to the mapping's resource, per pod, beside the pod's cpu and memory. Quota multiplies
it by the pod set's count, as for any per-pod request. A pod set's entries that name a ResourceClaim directly
(``resourceClaimName``) are not charged, but Kueue does not admit such a workload at all ("KueueDRAIntegration
feature does not support use of resource claims", checked before any charge).

Kueue writes these refusals on the Workload as ``QuotaReserved: False`` with the field errors' text; gpufleet keeps
the workload pending with the same text (:attr:`~gpufleet.cluster.workloads.Workload.hold`), and names the claim,
the request and the DeviceClass after it.

This applies to the workloads Kueue manages (a queue label, or a ``default`` LocalQueue in the namespace) that
are not admitted yet, and only while Kueue's DRA integration is on
(:attr:`~gpufleet.api.objects.SchedulerConfig.dra_integration`): off, the claims are charged to no quota, and the
workload says so (:attr:`~gpufleet.cluster.workloads.Workload.claim_quota_note`).

The charges are kept on the pod set (:attr:`~gpufleet.cluster.workloads.PodSet.claim_charges`): they are quota
only. Placement counts the claimed devices its own way (as the resources a DRA node counts its devices under:
gpufleet.scheduling.placement.need.with_claimed_devices), whatever name the mapping charges them under.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpufleet.api.dra_objects import ResourceClaimTemplate
from gpufleet.api.manifests import Manifests
from gpufleet.api.objects import PodResourceClaim, SchedulerConfig, dra_gate

if TYPE_CHECKING:
    from gpufleet.cluster.workloads import PodSet, Workload

# Kueue's messages (QuotaReserved=False), word for word
RESOURCE_CLAIMS_REFUSED = "KueueDRAIntegration feature does not support use of resource claims"
FIRST_AVAILABLE_REFUSED = "FirstAvailable device selection is not supported"
ALL_REFUSED = "AllocationMode 'All' is not supported"


@dataclass(frozen=True, slots=True)
class ClaimCharge:
    """What one request of a pod set's claim adds to the quota of each of its pods: ``count`` of ``resource``,
    the mapping's name for the request's DeviceClass."""

    claim: str  # the pod's spec.resourceClaims entry
    template: str  # namespace/name of its ResourceClaimTemplate
    request: str
    device_class: str
    resource: str
    count: int

    def to_json(self, pods: int) -> dict[str, Any]:
        return {"claim": self.claim, "resourceClaimTemplate": self.template, "request": self.request,
                "deviceClass": self.device_class, "resource": self.resource, "perPod": self.count, "pods": pods,
                "charged": self.count * pods}


def _field_path(pod_set: int, claim: int, rest: str = "") -> str:
    return f"spec.podSets[{pod_set}].template.spec.resourceClaims[{claim}]{rest}"


def _invalid(path: str, value: str | None, detail: str) -> str:
    """A field error as Kubernetes writes it (Kueue's condition message is the error list's text)."""
    return f"{path}: Invalid value: {json.dumps(value if value is not None else 'null')}: {detail}"


@dataclass(frozen=True, slots=True)
class _Refusal:
    kueue: str  # Kueue's message
    why: str  # the same in gpufleet's words, naming the claim, the request and the DeviceClass


def _pod_set_charges(index: int, ps: PodSet, namespace: str, templates: Mapping[str, ResourceClaimTemplate],
                     mapped: Mapping[str, str]) -> tuple[ClaimCharge, ...] | _Refusal:
    """The charges of one pod set's claims, or why Kueue refuses the workload, in Kueue's order: the requests of
    a claim first, then its DeviceClasses against the mappings, then the next claim."""
    out: list[ClaimCharge] = []
    for j, ref in enumerate(ps.template.resource_claims):
        if ref.resource_claim_template_name is None:
            continue  # named claims: never charged (and refused before this, see claim_quota)
        name = ref.resource_claim_template_name
        key = f"{namespace}/{name}"
        template = templates.get(key)
        if template is None:
            return _Refusal(
                f"{_field_path(index, j)}: Internal error: failed to get claim spec for ResourceClaimTemplate "
                f"{name} in podset {ps.name}: resourceclaimtemplates.resource.k8s.io {json.dumps(name)} not found",
                f"claim {ref.name}: ResourceClaimTemplate {key} is not in the input, so Kueue cannot charge it")
        counted: list[ClaimCharge] = []
        for k, q in enumerate(template.spec.requests):
            where = f"claim {ref.name}, request {q.name}, of ResourceClaimTemplate {key}:"
            if q.exactly is None:
                return _Refusal(_invalid(_field_path(index, j, f".devices.requests[{k}]"), None,
                                         f"ResourceClaimTemplate {name}: {FIRST_AVAILABLE_REFUSED}"),
                                f"{where} it lists firstAvailable devices, which Kueue cannot charge")
            s = q.exactly
            if s.admin_access:
                continue  # admin access to devices others use: charged nothing
            if s.allocation_mode == "All":
                return _Refusal(_invalid(_field_path(index, j, f".devices.requests[{k}].exactly.allocationMode"),
                                         "All", f"ResourceClaimTemplate {name}: {ALL_REFUSED}"),
                                f"{where} it asks for every device of DeviceClass {s.device_class_name} "
                                "(allocationMode All), which Kueue cannot charge")
            counted.append(ClaimCharge(ref.name, key, q.name, s.device_class_name, "", s.count))
        for c in counted:
            resource = mapped.get(c.device_class)
            if resource is None:
                return _Refusal(f"{_field_path(index, j, '.resourceClaimTemplateName.deviceClassName')}: Not found: "
                                f"{json.dumps(c.device_class)}",
                                f"claim {c.claim}, request {c.request}, of ResourceClaimTemplate {key}: its "
                                f"DeviceClass {c.device_class} is in no resources.deviceClassMappings entry of the "
                                "Kueue Configuration")
            out.append(ClaimCharge(c.claim, c.template, c.request, c.device_class, resource, c.count))
    return tuple(out)


def _managed(w: Workload, local_queues: set[tuple[str, str]]) -> bool:
    """Whether Kueue manages ``w``: a Kueue queue label (not a KAI or Volcano queue, which gpufleet keys as
    ``system:name``), or none and a ``default`` LocalQueue in its namespace."""
    if w.queue is not None:
        return ":" not in w.queue
    return (w.namespace, "default") in local_queues


def _off_note(config: SchedulerConfig | None) -> str:
    if config is None:
        return ("its DRA claims are charged to no quota: the input has no Kueue Configuration (Kueue's DRA "
                "integration is off by default before Kueue 0.18; from 0.18 it is on, and Kueue holds the workload "
                "until resources.deviceClassMappings maps its DeviceClasses)")
    gate = dra_gate(config.feature_gates)
    if gate is not None:
        return f"its DRA claims are charged to no quota: the Kueue Configuration turns {gate} off (featureGates)"
    return ("its DRA claims are charged to no quota: the Kueue Configuration maps no DeviceClass "
            "(resources.deviceClassMappings); Kueue 0.18 and later, where KueueDRAIntegration is on by default, "
            "would hold the workload until they are mapped")


def claim_quota(workloads: Sequence[Workload], manifests: Manifests) -> int:
    """Charge the claims of every workload Kueue manages, or hold it with Kueue's message; how many were held."""
    claiming = [w for w in workloads if any(ps.template.resource_claims for ps in w.pod_sets)]
    if not claiming:
        return 0
    local_queues = {(lq.meta.namespace or "default", lq.meta.name) for lq in manifests.local_queues}
    config = manifests.config
    on = config is not None and config.dra_integration
    mapped = {dc: m.name for m in config.device_class_mappings for dc in m.device_class_names} if config else {}
    templates = {t.key: t for t in manifests.resource_claim_templates}
    held = 0
    for w in claiming:
        if not _managed(w, local_queues):
            continue
        if not on:
            w.claim_quota_note = _off_note(config)
            continue
        named = next((ref for ps in w.pod_sets for ref in ps.template.resource_claims
                      if ref.resource_claim_name is not None), None)
        refusal = _Refusal(RESOURCE_CLAIMS_REFUSED, _named_why(named)) if named is not None else None
        charges: list[tuple[PodSet, tuple[ClaimCharge, ...]]] = []
        for i, ps in enumerate(w.pod_sets):
            if refusal is not None:
                break
            found = _pod_set_charges(i, ps, w.namespace, templates, mapped)
            if isinstance(found, _Refusal):
                refusal = found
            else:
                charges.append((ps, found))
        if refusal is not None:
            if w.admission is None and w.hold is None:  # an admitted workload keeps the quota it holds
                w.hold = f"{refusal.kueue} ({refusal.why})"
                held += 1
            continue
        for ps, found in charges:
            ps.claim_charges = found
    return held


def _named_why(ref: PodResourceClaim) -> str:
    return (f"claim {ref.name} names the ResourceClaim {ref.resource_claim_name}; Kueue admits no workload whose "
            "pods name a claim directly, only claims made from a ResourceClaimTemplate")


def charge_lines(w: Workload) -> list[str]:
    """What the claims of ``w`` are charged, a line per pod set and resource, with the mapping that charged it:
    "nvidia.com/gpu 4: pod set main, 2 pod(s) × 2 (claim gpus request gpus; deviceClassMappings: gpu.nvidia.com →
    nvidia.com/gpu)"."""
    lines: list[str] = []
    for ps in w.pod_sets:
        by_resource: dict[str, list[ClaimCharge]] = {}
        for c in ps.claim_charges:
            by_resource.setdefault(c.resource, []).append(c)
        for resource, cs in by_resource.items():
            per_pod = sum(c.count for c in cs)
            sources = "; ".join(f"claim {c.claim} request {c.request}: {c.count}" for c in cs) if len(cs) > 1 else \
                f"claim {cs[0].claim} request {cs[0].request}"
            classes = ", ".join(dict.fromkeys(c.device_class for c in cs))
            lines.append(f"{resource} {per_pod * ps.count}: pod set {ps.name}, {ps.count} pod(s) × {per_pod} "
                         f"({sources}; deviceClassMappings: {classes} → {resource})")
    if w.claim_quota_note is not None:
        lines.append(w.claim_quota_note)
    return lines
