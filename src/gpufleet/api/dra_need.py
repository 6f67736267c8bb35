"""What a pod's DRA claims ask, once resolved against the input (gpufleet.cluster.dra_claims): the GPU demands
placement places, each with the devices allowed to meet it. Data only, kept on the pod's template."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpufleet.api.objects import GpuDemand

DeviceKey = tuple[str, str, str]  # (driver, pool, device): a DRA device's identity, cluster-wide


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """One request of one of the pod's claims, as allocation results name it (``main/sub`` for a firstAvailable
    entry), and how many devices it takes."""

    claim: str  # namespace/name of the ResourceClaim
    request: str
    count: int


@dataclass(frozen=True, slots=True, eq=False)
class DistinctValues:
    """A ``distinctAttribute`` constraint, resolved: each allowed device's value of the attribute; the pod's devices
    must all differ in it. Compared by identity (one object per attribute and set of devices, shared by the pods
    asking the same), so it hashes fast as part of a placement key."""

    attribute: str
    values: Mapping[DeviceKey, object]


@dataclass(frozen=True, slots=True)
class DraChoice:
    """One way to meet every claim of the pod: the demand placed, the devices allowed (the pod's devices all come
    from one group), and the requests in order (the devices are handed to them in that order)."""

    demand: GpuDemand
    groups: tuple[frozenset[DeviceKey], ...]
    requests: tuple[ClaimRequest, ...]
    # The device plugin's way, not a claim's: an extended resource a DeviceClass backs (extendedResourceName) is
    # tried first where a device plugin offers it.
    plugin: bool = False
    # Requests of the pod this way meets with its devices instead (an extended resource named otherwise than the
    # devices count under on a DRA node, as deviceclass.resource.kubernetes.io/<class>): placement does not ask
    # a node for them.
    drop_requests: frozenset[str] = frozenset()
    distinct: DistinctValues | None = None  # distinctAttribute: the devices must differ in it


@dataclass(frozen=True, slots=True)
class DraNeed:
    """What a pod's claims ask, resolved: ``choices`` best first, or a ``problem`` that keeps the pod pending."""

    claims: tuple[str, ...]
    choices: tuple[DraChoice, ...] = ()
    problem: str | None = None
    # Live, a claim the pod needs does not exist yet (the resourceclaim controller still to make it from the
    # template, or a claim it names not created yet): the pod is kept out of its queue until it does, as
    # kube-scheduler's PreEnqueue keeps it (its workload is held: gpufleet.cluster.dra_claims).
    awaiting: bool = False


@dataclass(frozen=True, slots=True)
class ClaimResult:
    """One device allocated to a pod's claim, as ``status.allocation.devices.results[]`` writes it, with the claim."""

    claim: str  # namespace/name
    request: str  # ``main/sub`` for a firstAvailable entry
    driver: str
    pool: str
    device: str

    def to_json(self) -> dict[str, str]:
        return {"claim": self.claim, "request": self.request, "driver": self.driver, "pool": self.pool,
                "device": self.device}
