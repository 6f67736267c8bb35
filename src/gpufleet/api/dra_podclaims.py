"""A pod's DRA claims: ``spec.resourceClaims`` and its containers' ``resources.claims``, read onto the pod.

Checked as the API server checks a pod: each entry names one claim (``resourceClaimName``) or one template
(``resourceClaimTemplateName``), never both; names are DNS labels, each once; a container uses only claims the
pod lists, each (claim, request) once. The claims become :class:`~gpufleet.api.objects.PodResourceClaim` refs on
the pod's template, with the containers that use each.

Their devices are planned by gpufleet.cluster.dra_claims and charged to quota by gpufleet.cluster.dra_quota;
what is not done yet (live allocation) is said on every pod with claims, as left out (``--strict`` refuses it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace

from gpufleet.api.errors import shown
from gpufleet.api.objects import ContainerClaim, PodResourceClaim
from gpufleet.api.reader import FieldReader

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")

# A container's use of a claim, with the reader of its entry (for the error when the pod lists no such claim).
ClaimUse = tuple[FieldReader, str, ContainerClaim]


def container_claims(c: FieldReader, into: list[ClaimUse]) -> None:
    """Add the claims container ``c`` uses (``resources.claims[]``) to ``into``."""
    resources = c.raw("resources")
    if not isinstance(resources, Mapping):
        return  # not a mapping: the resources reader already said so
    res = c.child("resources", resources)
    container = str(c.raw("name") or "?")
    seen: set[tuple[str, str | None]] = set()
    for item in res.items("claims"):
        name = item.text("name", required=True)
        request = item.text("request") or None
        if name is None:
            continue
        if (name, request) in seen:
            what = f"claim {name}" + (f" request {request}" if request else "")
            item.error(f"container {container} uses {what} twice", "name", fix="list each claim (and request) once")
            continue
        seen.add((name, request))
        into.append((item, name, ContainerClaim(container, request)))


def read_pod_claims(spec: FieldReader, uses: list[ClaimUse]) -> tuple[PodResourceClaim, ...]:
    """The pod's claims (``spec.resourceClaims``) with the containers that use each (``uses``, from
    :func:`container_claims`); every problem reported at its field."""
    listed: dict[str, tuple[str | None, str | None]] = {}
    for entry in spec.items("resourceClaims"):
        name = entry.text("name", required=True)
        by_name = entry.text("resourceClaimName") or None
        by_template = entry.text("resourceClaimTemplateName") or None
        if name is None:
            continue
        if not DNS_LABEL.match(name):
            entry.error(f"claim name {shown(name)} is not a DNS label", "name",
                        fix="use at most 63 lower-case letters, digits and '-', starting and ending with a letter or "
                            "digit")
            continue
        if name in listed:
            entry.error(f"claim {name} is listed twice", "name", fix="give each of the pod's claims its own name")
            continue
        if (by_name is None) == (by_template is None):
            entry.error("a pod's claim names exactly one of resourceClaimName and resourceClaimTemplateName"
                        + (", not both" if by_name else ""),
                        "resourceClaimName" if by_name else "name",
                        fix="resourceClaimName for a claim that exists, resourceClaimTemplateName for one made per pod")
            continue
        listed[name] = (by_name, by_template)
    used: dict[str, list[ContainerClaim]] = {name: [] for name in listed}
    for item, name, use in uses:
        if name not in used:
            item.error(f"container {use.container} uses claim {name}, which spec.resourceClaims does not list", "name",
                       fix=f"add {name} to spec.resourceClaims (with resourceClaimName or resourceClaimTemplateName), "
                           "or correct the name")
            continue
        used[name].append(use)
    claims = tuple(PodResourceClaim(name, by_name, by_template, tuple(used[name]))
                   for name, (by_name, by_template) in listed.items())
    return claims


def generated_claim_names(status: FieldReader, claims: tuple[PodResourceClaim, ...]) -> tuple[PodResourceClaim, ...]:
    """The pod's template claims with the names the resourceclaim controller gave them (``status.
    resourceClaimStatuses[]``: ``name`` the pod's claim, ``resourceClaimName`` the claim made for it)."""
    made: dict[str, str] = {}
    for entry in status.items("resourceClaimStatuses"):
        name = entry.text("name")
        claim = entry.text("resourceClaimName")
        if name and claim:
            made[name] = claim
    if not made:
        return claims
    return tuple(replace(c, generated_name=made.get(c.name)) if c.resource_claim_template_name else c
                 for c in claims)
