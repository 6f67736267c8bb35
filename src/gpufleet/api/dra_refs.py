"""What the DRA objects of an input say about each other: checks no single object can make.

* a pod's claim names a ResourceClaim or ResourceClaimTemplate of its namespace that the input holds (kube-scheduler
  keeps a pod whose claim does not exist pending: its PreEnqueue check);
* a container's ``resources.claims[].request`` names a request of that claim (else the kubelet fails the pod);
* a request's ``deviceClassName`` names a DeviceClass of the input, when the input holds DeviceClasses at all (a
  snapshot of claims alone is not a mistake).

All warnings: an input is often a part of a cluster; a pod whose claim cannot be met stays pending with the reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from gpufleet.api.dra_objects import ClaimSpec, DeviceSelection, ResourceClaim, ResourceClaimTemplate
from gpufleet.api.errors import Problems
from gpufleet.api.objects import ObjectMeta, PodResourceClaim

if TYPE_CHECKING:
    from gpufleet.api.manifests import Manifests


def _selections(spec: ClaimSpec) -> Iterator[tuple[str, DeviceSelection]]:
    for q in spec.requests:
        if q.exactly is not None:
            yield q.name, q.exactly
        for sub in q.first_available:
            yield f"{q.name}/{sub.name}", sub.selection


def _warn(problems: Problems, meta: ObjectMeta, kind: str, message: str, field_: str, fix: str) -> None:
    src = meta.source
    problems.warning(message, file=src.file if src else None, line=src.line if src else None, kind=kind,
                     name=meta.key, field=field_, fix=fix)


def _check_classes(m: Manifests) -> None:
    classes = {c.name for c in m.device_classes}
    if not classes:
        return
    holders: list[ResourceClaim | ResourceClaimTemplate] = [*m.resource_claims, *m.resource_claim_templates]
    for obj in holders:
        field_ = "spec.devices.requests" if isinstance(obj, ResourceClaim) else "spec.spec.devices.requests"
        for name, selection in _selections(obj.spec):
            if selection.device_class_name not in classes:
                _warn(m.problems, obj.meta, obj.kind, f"request {name} names DeviceClass "
                      f"{selection.device_class_name}, which is not in the input", field_,
                      "add the DeviceClass (NVIDIA's chart creates gpu.nvidia.com and mig.nvidia.com) or correct the "
                      "name")


def _check_pod(m: Manifests, specs: dict[tuple[str, str], ClaimSpec], meta: ObjectMeta, kind: str,
               claims: tuple[PodResourceClaim, ...], said: set[tuple[str, str, str]]) -> None:
    namespace = meta.namespace or "default"
    for claim in claims:
        if claim.resource_claim_name is not None:
            what, name = "ResourceClaim", claim.resource_claim_name
        else:
            what, name = "ResourceClaimTemplate", claim.resource_claim_template_name or ""
        spec = specs.get((what, f"{namespace}/{name}"))
        if spec is None:
            if (meta.key, what, name) not in said:  # once per object, however many templates it has
                said.add((meta.key, what, name))
                _warn(m.problems, meta, kind, f"claim {claim.name} names {what} {namespace}/{name}, which is not in "
                      "the input; kube-scheduler keeps the pod pending until it exists", "spec.resourceClaims",
                      f"add the {what} to the input or correct the name")
            continue
        requests = {q for q, _ in _selections(spec)} | {q.name for q in spec.requests}
        for use in claim.used_by:
            if use.request is not None and use.request not in requests and (meta.key, claim.name, use.request) \
                    not in said:
                said.add((meta.key, claim.name, use.request))
                _warn(m.problems, meta, kind, f"container {use.container} uses request {use.request} of claim "
                      f"{claim.name}, which {what} {namespace}/{name} does not have",
                      "spec.containers.resources.claims", "name one of " + (", ".join(sorted(requests)) or
                                                                           "its requests"))


def check_claim_references(m: Manifests) -> None:
    """Warn about the references between DRA objects that do not resolve within the input (module doc)."""
    _check_classes(m)
    specs: dict[tuple[str, str], ClaimSpec] = {("ResourceClaim", c.key): c.spec for c in m.resource_claims}
    specs.update({("ResourceClaimTemplate", t.key): t.spec for t in m.resource_claim_templates})
    said: set[tuple[str, str, str]] = set()
    for pod in m.pods:
        _check_pod(m, specs, pod.meta, "Pod", pod.resource_claims, said)
    for workload in m.workloads:
        for ps in workload.pod_sets:
            _check_pod(m, specs, workload.meta, "Workload", ps.template.resource_claims, said)
    for owner in m.controllers.owners:
        for plan in owner.workloads[:1]:  # the groups of a per-group kind share their templates
            for pod_set in plan.pod_sets:
                _check_pod(m, specs, owner.meta, owner.kind, pod_set.template.resource_claims, said)
