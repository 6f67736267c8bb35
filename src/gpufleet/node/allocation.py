"""Which devices a container gets: the scheduler's choice when it made one, else an NVLink-aware best effort.

GetPreferredAllocation carries no pod identity (only the devices available, those that must be included, and
how many), so the pod is identified, never locked (HAMi's per-node lock is the source of its stale-lock and
wrong-pod bugs, #1130, #3096/#3097):

1. *Who still waits*: the pods bound to this node that need devices of this resource and do not have them all
   yet, per the kubelet's own record (PodResources ``List``, read at every call, so a restart of the kubelet,
   of the agent or a pod that failed admission leaves nothing stale) plus the answers given since.
2. *In the kubelet's order*: the kubelet admits one pod at a time, in the order its watch delivers them; this
   agent's watch of the same API server delivers them in the same order (:mod:`gpufleet.node.pods`). The first
   waiting pod whose container sizes and already-held devices fit the request is the one being admitted
   (two pods of equal size are told apart by order, which HAMi's and Volcano's size or time matching cannot).
3. *The answer*: that pod's ``gpufleet.io/devices`` for this resource, when the kubelet offers them all. Else
   (another scheduler's pod, or devices gone) an NVLink-aware best effort that first takes devices the
   scheduler chose for a pod admitted with others (so the set in use stays the scheduler's), avoids devices
   other waiting pods were promised, and never touches a GPU that fractional pods use.
4. *Verified afterwards*: PodResources says which pod got what; a pod whose devices differ from the scheduler's
   choice is logged and counted (``gpufleet_node_allocation_mismatches_total``).

Allocate returns NVIDIA's answer: ``NVIDIA_VISIBLE_DEVICES`` (UUIDs, or indexes with deviceIDStrategy index),
the ``/var/run/nvidia-container-devices`` mounts, CDI annotations or CDI device names, per deviceListStrategy,
and refuses (the kubelet fails the pod with UnexpectedAdmissionError) a device of a GPU that fractional pods
use, an unknown device, or more than one replica when failRequestsGreaterThanOne is set.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gpufleet.node.discovery import Discovery, PluginDevice
from gpufleet.node.metrics import AgentMetrics
from gpufleet.node.podresources import Allocations
from gpufleet.node.pods import PodView

log = logging.getLogger(__name__)

VISIBLE_ENV = "NVIDIA_VISIBLE_DEVICES"
DEVICE_LIST_ROOT = "/var/run/nvidia-container-devices"
EXHAUSTIVE_LIMIT = 5000  # subsets scored exhaustively; beyond, a greedy pass (like go-gpuallocator's padding)


class AllocationRefused(Exception):
    """Allocate cannot hand these devices out; the message is what the kubelet reports on the pod."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class PodSource(Protocol):
    def pods(self) -> list[PodView]: ...

    def refresh(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Claim:
    """A pod waiting for devices of one resource."""

    pod: str
    intent: tuple[str, ...]  # the scheduler's device IDs of this resource (empty without a gpufleet choice)
    remaining: tuple[str, ...]  # ... not yet given to the pod
    held: frozenset[str]  # devices of this resource the pod already has (e.g. its init container's)
    pending: int  # devices it still needs
    sizes: frozenset[int]  # its containers' requests of this resource


def waiting_claims(pods: Sequence[PodView], resource: str, resource_ids: Collection[str],
                   allocated: Allocations | None, answered: Mapping[str, Mapping[str, Sequence[str]]]) -> list[Claim]:
    """Pods (in arrival order) that still need devices of ``resource``."""
    claims = []
    for pod in pods:
        need = pod.need(resource)
        if need == 0 or pod.deleting:
            continue
        recorded = (allocated or {}).get(pod.key, {}).get(resource, [])
        given = answered.get(pod.key, {}).get(resource, [])
        if allocated is None and pod.started and not given:
            continue  # no kubelet record to ask, but its containers ran: admitted long ago
        held = frozenset(recorded) | frozenset(given)
        pending = need - len(held)
        if pending <= 0:
            continue
        intent = tuple(i for i in pod.intent or () if i in resource_ids)
        claims.append(Claim(pod.key, intent, tuple(i for i in intent if i not in held), held, pending,
                            frozenset(pod.container_sizes(resource))))
    return claims


def orphaned_choices(pods: Sequence[PodView], resource: str, resource_ids: Collection[str],
                     allocated: Allocations | None, answered: Mapping[str, Mapping[str, Sequence[str]]]) -> set[str]:
    """Devices the scheduler chose for pods that were admitted with other devices (the kubelet's order was not
    the watch's). Handing them out first keeps the *set* of devices in use equal to the scheduler's account,
    so its next placements stay right even though two pods swapped devices."""
    out: set[str] = set()
    for pod in pods:
        intent = [i for i in pod.intent or () if i in resource_ids]
        if not intent:
            continue
        held = set((allocated or {}).get(pod.key, {}).get(resource, [])) | set(answered.get(pod.key, {}).get(
            resource, []))
        if held and len(held) >= pod.need(resource):
            out.update(i for i in intent if i not in held)
    return out


def identify(claims: Sequence[Claim], must_include: Collection[str], size: int) -> Claim | None:
    """The waiting pod this request is for: the first, in the kubelet's order, that the request fits."""
    must = set(must_include)
    for claim in claims:
        if size not in claim.sizes or size - len(must) > claim.pending:
            continue
        if not must <= claim.held | set(claim.remaining):
            continue
        return claim
    return None


def pair_score(a: PluginDevice, b: PluginDevice, nvlinks: Mapping[tuple[int, int], int]) -> int:
    """go-gpuallocator's scale: 100 per NVLink between two GPUs, plus 20 on the same NUMA node, else 10."""
    i, j = sorted((a.gpu_index, b.gpu_index))
    numa = 20 if a.numa_node is not None and a.numa_node == b.numa_node else 10
    return 100 * nvlinks.get((i, j), 0) + numa


def best_whole_gpus(candidates: Sequence[PluginDevice], must: Sequence[PluginDevice], size: int,
                    nvlinks: Mapping[tuple[int, int], int]) -> list[PluginDevice]:
    """``size`` GPUs including ``must``, maximising the summed pair scores (ties: lowest indexes)."""
    free = [d for d in candidates if d not in must]
    k = size - len(must)
    if k <= 0:
        return list(must)[:size]
    if k > len(free):
        return []

    def score(group: Sequence[PluginDevice]) -> int:
        return sum(pair_score(a, b, nvlinks) for a, b in itertools.combinations(group, 2))

    if math.comb(len(free), k) <= EXHAUSTIVE_LIMIT:
        best = max(itertools.combinations(free, k), key=lambda extra: (score([*must, *extra]),
                                                                       [-d.gpu_index for d in extra]))
        return [*must, *best]
    chosen = list(must)
    pool = list(free)
    while len(chosen) < size:
        pick = max(pool, key=lambda d: (sum(pair_score(d, c, nvlinks) for c in chosen), -d.gpu_index))
        chosen.append(pick)
        pool.remove(pick)
    return chosen


def best_shared(candidates: Sequence[PluginDevice], must: Sequence[PluginDevice], size: int,
                in_use: Mapping[str, int], policy: str) -> list[PluginDevice]:
    """Replicas or MIG devices: ``distributed`` prefers the GPU with the fewest devices in use, ``packed`` the most
    (NVIDIA's sharedDevicesAllocationPolicy); ties go to the GPU picked least this round, then the lowest index."""
    chosen = list(must)
    pool = [d for d in candidates if d not in must]
    picked: dict[str, int] = {}
    for d in chosen:
        picked[d.gpu_uuid] = picked.get(d.gpu_uuid, 0) + 1
    sign = -1 if policy == "distributed" else 1
    while len(chosen) < size and pool:
        pick = max(pool, key=lambda d: (sign * (in_use.get(d.gpu_uuid, 0) + picked.get(d.gpu_uuid, 0)),
                                        -picked.get(d.gpu_uuid, 0), -d.gpu_index, d.id))
        chosen.append(pick)
        pool.remove(pick)
        picked[pick.gpu_uuid] = picked.get(pick.gpu_uuid, 0) + 1
    return chosen if len(chosen) == size else []


@dataclass(slots=True)
class _Answer:
    pod: str
    ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ContainerAnswer:
    envs: dict[str, str] = field(default_factory=dict)
    mounts: tuple[tuple[str, str], ...] = ()  # (container path, host path), read-only
    annotations: dict[str, str] = field(default_factory=dict)
    cdi_devices: tuple[str, ...] = ()


class Allocator:
    """Answers the device plugins' GetPreferredAllocation and Allocate for every resource of the node."""

    def __init__(self, pods: PodSource, pod_resources: Callable[[], Allocations | None],
                 metrics: AgentMetrics | None = None) -> None:
        self.pods = pods
        self.pod_resources = pod_resources
        self.metrics = metrics or AgentMetrics()
        self._lock = threading.RLock()
        self._discovery: Discovery | None = None
        self._withheld: dict[str, list[str]] = {}  # GPU UUID -> fractional pods on it
        self._answered: dict[str, dict[str, list[str]]] = {}  # pod -> resource -> devices given, not yet recorded
        self._last: dict[str, _Answer] = {}  # resource -> the last preferred answer (to attribute its Allocate)
        self._mismatched: set[tuple[str, str]] = set()
        self.on_allocated: Callable[[], None] = lambda: None

    # --- state from the agent ------------------------------------------------------------------------

    def set_discovery(self, discovery: Discovery) -> None:
        with self._lock:
            self._discovery = discovery

    def set_withheld(self, holders: Mapping[str, Sequence[str]]) -> None:
        """GPUs fractional pods use: never handed to a whole-GPU or replica pod."""
        with self._lock:
            self._withheld = {uuid: list(pods) for uuid, pods in holders.items() if pods}

    def withheld(self) -> dict[str, list[str]]:
        with self._lock:
            return dict(self._withheld)

    def _devices(self, resource: str) -> dict[str, PluginDevice]:
        found = self._discovery
        return {d.id: d for d in found.devices.get(resource, ())} if found is not None else {}

    # --- GetPreferredAllocation ----------------------------------------------------------------------

    def preferred(self, resource: str, available: Sequence[str], must_include: Sequence[str], size: int) -> list[str]:
        with self._lock:
            devices = self._devices(resource)
            allocated = self.pod_resources()
            self._forget_recorded(allocated)
            claims = waiting_claims(self.pods.pods(), resource, devices, allocated, self._answered)
            claim = identify(claims, must_include, size)
            if claim is None:
                # The kubelet may have seen the pod before our watch did: read the node's pods now and look again.
                try:
                    self.pods.refresh()
                except Exception as e:  # the API being down must not stop admission: fall back
                    log.warning("reading this node's pods failed (%s); choosing devices without them", e)
                claims = waiting_claims(self.pods.pods(), resource, devices, allocated, self._answered)
                claim = identify(claims, must_include, size)
            answer = self._choose(resource, devices, claim, claims, allocated, available, must_include, size)
            self._last[resource] = _Answer(claim.pod if claim else "", tuple(answer))
            return answer

    def _choose(self, resource: str, devices: Mapping[str, PluginDevice], claim: Claim | None,
                claims: Sequence[Claim], allocated: Allocations | None, available: Sequence[str],
                must_include: Sequence[str], size: int) -> list[str]:
        offered = [i for i in available if i in devices]
        withheld = set(self._withheld)
        if claim is not None and claim.intent:
            extra = [i for i in claim.remaining if i in offered and i not in must_include]
            chosen = [*must_include, *extra][:size]
            bad = [i for i in chosen if devices[i].gpu_uuid in withheld]
            if len(chosen) == size and not bad:
                self.metrics.allocations.labels(resource, "scheduler").inc()
                log.info("pod %s gets the scheduler's devices %s", claim.pod, ",".join(chosen),
                         extra={"pod": claim.pod, "resource": resource})
                return chosen
            log.warning("pod %s: the scheduler's devices %s are not all on offer (offered: %s; fractional GPUs: %s); "
                        "choosing others", claim.pod, ",".join(claim.remaining), ",".join(offered),
                        ",".join(sorted(withheld)) or "none", extra={"pod": claim.pod, "resource": resource})
        promised = {i for c in claims if c is not claim for i in c.remaining}
        orphaned = orphaned_choices(self.pods.pods(), resource, devices, allocated, self._answered)
        must = [devices[i] for i in must_include if i in devices]
        usable = [devices[i] for i in offered if devices[i].gpu_uuid not in withheld]
        picked: list[PluginDevice] = []
        # Devices whose pod got others first, then anything not promised to a waiting pod, then anything.
        for pool in ([d for d in usable if d.id in orphaned], [d for d in usable if d.id not in promised], usable):
            picked = self._best(resource, pool, must, size, devices, offered)
            if picked:
                break
        self.metrics.allocations.labels(resource, "fallback").inc()
        ids = [d.id for d in picked] if picked else list(must_include) + [
            i for i in offered if i not in must_include][: size - len(must_include)]
        log.info("%s: no scheduler choice for this request%s; best effort %s", resource,
                 f" (pod {claim.pod})" if claim else "", ",".join(ids), extra={"resource": resource})
        return ids

    def _best(self, resource: str, pool: Sequence[PluginDevice], must: Sequence[PluginDevice], size: int,
              devices: Mapping[str, PluginDevice], offered: Sequence[str]) -> list[PluginDevice]:
        found = self._discovery
        assert found is not None
        shared = any(d.replica is not None or d.mig is not None for d in devices.values())
        if not shared:
            return best_whole_gpus(pool, must, size, found.machine.nvlinks)
        in_use: dict[str, int] = {}
        offered_set = set(offered)
        for d in devices.values():
            if d.id not in offered_set:
                in_use[d.gpu_uuid] = in_use.get(d.gpu_uuid, 0) + 1
        return best_shared(pool, must, size, in_use, found.config.plugin.shared_allocation_policy)

    def _forget_recorded(self, allocated: Allocations | None) -> None:
        """Drop answers the kubelet has recorded, and pods that are gone."""
        live = {p.key for p in self.pods.pods()}
        for pod in list(self._answered):
            if pod not in live or (allocated is not None and pod in allocated):
                del self._answered[pod]

    # --- Allocate ------------------------------------------------------------------------------------

    def allocate(self, resource: str, ids: Sequence[str]) -> ContainerAnswer:
        with self._lock:
            found = self._discovery
            devices = self._devices(resource)
            unknown = [i for i in ids if i not in devices]
            if found is None or unknown:
                self.metrics.refusals.labels(resource, "unknown").inc()
                raise AllocationRefused(f"unknown device ID(s) for {resource}: {', '.join(unknown)}", "unknown")
            chosen = [devices[i] for i in ids]
            if found.config.sharing.fail_requests_greater_than_one and len(ids) > 1 and any(
                    d.replica is not None for d in chosen):
                self.metrics.refusals.labels(resource, "shared-greater-than-one").inc()
                raise AllocationRefused(f"maximum request size for shared resources is 1; found {len(ids)}",
                                        "shared-greater-than-one")
            taken = {d.gpu_uuid: self._withheld[d.gpu_uuid] for d in chosen if d.gpu_uuid in self._withheld}
            if taken:
                self.metrics.refusals.labels(resource, "fractions").inc()
                raise AllocationRefused(
                    "GPU(s) used by fractional pods cannot be handed to a whole-GPU or replica pod: " + "; ".join(
                        f"{uuid} ({', '.join(pods)})" for uuid, pods in sorted(taken.items())), "fractions")
            last = self._last.pop(resource, None)
            if last is not None and last.pod and set(last.ids) == set(ids):
                self._answered.setdefault(last.pod, {}).setdefault(resource, []).extend(ids)
            answer = container_answer(chosen, found)
        self.on_allocated()
        return answer

    # --- verification --------------------------------------------------------------------------------

    def verify(self) -> list[tuple[str, str, tuple[str, ...], tuple[str, ...]]]:
        """Compare the kubelet's record with the scheduler's choices; (pod, resource, chose, got) per new mismatch."""
        with self._lock:
            allocated = self.pod_resources()
            if allocated is None or self._discovery is None:
                return []
            self._forget_recorded(allocated)
            live = self.pods.pods()
            self._mismatched = {(p, r) for p, r in self._mismatched if p in {v.key for v in live}}
            out = []
            for pod in live:
                got_by_resource = allocated.get(pod.key, {})
                for resource, got in got_by_resource.items():
                    ids = self._devices(resource)
                    chose = tuple(i for i in pod.intent or () if i in ids)
                    if not chose or not got or set(got) <= set(chose) or (pod.key, resource) in self._mismatched:
                        continue
                    self._mismatched.add((pod.key, resource))
                    self.metrics.mismatches.labels(resource).inc()
                    log.warning("pod %s got %s %s, not the scheduler's %s (the kubelet admitted pods in another "
                                "order than this node's watch delivered them)", pod.key, resource, ",".join(got),
                                ",".join(chose), extra={"pod": pod.key, "resource": resource})
                    out.append((pod.key, resource, chose, tuple(got)))
            return out


def container_answer(chosen: Sequence[PluginDevice], found: Discovery) -> ContainerAnswer:
    """NVIDIA's Allocate answer for one container (replicas of one GPU collapse to that GPU)."""
    options = found.config.plugin
    visible: list[str] = []
    for d in chosen:
        value = d.index if options.device_id_strategy == "index" else d.visible
        if value not in visible:
            visible.append(value)
    envs: dict[str, str] = {}
    mounts: list[tuple[str, str]] = []
    annotations: dict[str, str] = {}
    cdi: list[str] = []
    strategies = options.device_list_strategy
    if "envvar" in strategies:
        envs[VISIBLE_ENV] = ",".join(visible)
    if "volume-mounts" in strategies:
        envs[VISIBLE_ENV] = DEVICE_LIST_ROOT
        mounts = [(f"{DEVICE_LIST_ROOT}/{v}", "/dev/null") for v in visible]
    names = [f"nvidia.com/gpu={v}" for v in visible]
    if "cdi-annotations" in strategies:
        annotations[f"{options.cdi_annotation_prefix}gpufleet-node_{chosen[0].resource.rsplit('/', 1)[-1]}"] = \
            ",".join(names)
    if "cdi-cri" in strategies:
        cdi = names
    for enabled, name in ((options.gdrcopy, "NVIDIA_GDRCOPY"), (options.gds, "NVIDIA_GDS"),
                          (options.mofed, "NVIDIA_MOFED")):
        if enabled:
            envs[name] = "enabled"
    return ContainerAnswer(envs, tuple(mounts), annotations, tuple(cdi))
