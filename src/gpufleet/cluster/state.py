"""Cluster state: nodes with their devices, the pods placed on them, and an undo log for what-if search.

Every allocation and release goes through :class:`ClusterState`, which checks the invariants and raises
:class:`InvariantError` when one would break: a whole GPU or a MIG instance held by at most one pod; time-slice
replicas within the configured count; fractions on a GPU summing to at most 1000 thousandths and their
memory to at most the GPU's; CPU, memory, pods and extended resources within allocatable.

What-if search (placement of a gang, preemption victims) opens a checkpoint, allocates and releases freely,
then rolls back: the undo log replays inverse operations, so a rollback costs what the search did, not a copy
of the cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from gpufleet.api.gpushare import placed_requests
from gpufleet.api.kinds import FRACTION_RESOURCE
from gpufleet.api.objects import (
    GPU,
    HOSTNAME_LABEL,
    PRODUCT_LABEL,
    Node,
    ResourceList,
    Taint,
)
from gpufleet.api.reader import parse_int_text
from gpufleet.cluster.devices import DeviceGrant, GpuSlot, InvariantError, MigSlot, grant_device_id
from gpufleet.cluster.dra_devices import dra_gpu_slots

# The first-fit device search lives with the other free-device answers; importers find it here too.
from gpufleet.cluster.free_devices import first_free_grants as first_free_grants
from gpufleet.gpu.catalog import DEFAULT_CATALOG, Catalog
from gpufleet.gpu.constants import DEFAULT_MAX_PODS, MILLI, PODS
from gpufleet.gpu.constants import SHARED_GPU as SHARED_GPU
from gpufleet.gpu.mig import MigPlacement, geometry_for, profile_from_resource_name


@dataclass(slots=True)
class NodeState:
    name: str
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    allocatable: ResourceList
    used: ResourceList
    gpus: list[GpuSlot]
    unschedulable: bool = False
    ready: bool = True
    pool: str | None = None
    gpu_model: str | None = None
    fail_requests_greater_than_one: bool = False
    nvlinks: dict[tuple[int, int], int] = field(default_factory=dict)
    pods: set[str] = field(default_factory=set)
    generation: int = 0  # bumped on every change; placement indexes key their caches on it

    def free(self, resource: str) -> int:
        return self.allocatable.get(resource, 0) - self.used.get(resource, 0)

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    @property
    def gpu_mode(self) -> str | None:
        return self.gpus[0].mode if self.gpus else None

    def free_whole_gpus(self) -> list[int]:
        return [g.index for g in self.gpus if g.mode == "whole" and g.is_free and g.healthy]


@dataclass(slots=True)
class Placement:
    """Where one pod runs: its node, its device grants and the resources it charges there."""

    pod: str
    node: str
    requests: ResourceList
    grants: tuple[DeviceGrant, ...]
    device_ids: tuple[str, ...]


def _label_int(labels: dict[str, str], key: str, default: int) -> int:
    """A GFD number label (checked by the Node parser); ``default`` when absent or empty."""
    value = parse_int_text(labels.get(key) or "")
    return value if value is not None and value > 0 else default


def _gpu_slots_from_node(node: Node, catalog: Catalog) -> tuple[list[GpuSlot], str | None]:
    """Build the node's GPU slots from its DRA ResourceSlices, else its inventory annotation, else its resources
    and GFD labels."""
    if node.dra_gpus:
        return dra_gpu_slots(node.dra_gpus), node.dra_gpus[0].model
    inv = node.gpus
    labels = node.labels
    if inv is not None:
        model = catalog.resolve(inv.model, inv.memory_mib)
        sharing = inv.sharing
        geometry = geometry_for(model.key)
        slots: list[GpuSlot] = []
        for i, uuid in enumerate(inv.uuids):
            instances = inv.mig[i] if i < len(inv.mig) else ()
            if instances and sharing.mig_strategy != "none" and geometry is not None:
                migs = []
                for placement, mig_uuid in instances:
                    prof = geometry.profile(placement.profile)
                    resource = GPU if sharing.mig_strategy == "single" else prof.resource_name
                    migs.append(MigSlot(placement, mig_uuid or f"{uuid}/{placement}", resource, prof.memory_mib,
                                        prof.compute_slices))
                slots.append(GpuSlot(i, uuid, model.key, model.memory_mib, "mig", GPU, mig=migs))
                continue
            replicas = sharing.replicas_for(GPU)
            if replicas > 1:
                resource = SHARED_GPU if sharing.rename_by_default else GPU
                slots.append(GpuSlot(i, uuid, model.key, model.memory_mib, "replicas", resource, replicas,
                                     replica_holders=[None] * replicas))
            else:
                slots.append(GpuSlot(i, uuid, model.key, model.memory_mib, "whole", GPU))
        for gpu_slot in slots:
            gpu_slot.healthy = gpu_slot.index not in inv.unhealthy
        return slots, model.key

    # No inventory: derive logical devices from the advertised resources and GFD labels.
    product = labels.get(PRODUCT_LABEL)
    model_obj = catalog.find(product) if product else None
    memory = _label_int(labels, "nvidia.com/gpu.memory", 0) or (model_obj.memory_mib if model_obj else 0)
    model_key = model_obj.key if model_obj else (product or None)
    slots = []
    for resource in (GPU, SHARED_GPU):
        count = node.allocatable.get(resource, 0)
        if count <= 0:
            continue
        replicas = _label_int(labels, "nvidia.com/gpu.replicas", 1)
        physical = _label_int(labels, "nvidia.com/gpu.count", 0)
        if replicas > 1 and physical > 0:
            for _ in range(physical):
                base = f"{node.name}/gpu-{len(slots)}"
                slots.append(GpuSlot(len(slots), base, model_key or "unknown", memory, "replicas", resource,
                                     replicas, replica_holders=[None] * replicas))
        else:
            for _ in range(count):
                slots.append(GpuSlot(len(slots), f"{node.name}/gpu-{len(slots)}", model_key or "unknown", memory,
                                     "whole", resource))
    for resource, count in sorted(node.allocatable.items()):
        profile = profile_from_resource_name(resource)
        if profile is None or count <= 0:
            continue
        # Each instance stands alone: without an inventory its parent GPU is unknown.
        for k in range(count):
            base = f"{node.name}/gpu-{len(slots)}"
            mem = 0
            compute = 1
            geometry = geometry_for(model_key or "")
            if geometry is not None and geometry.has_profile(profile):
                mem = geometry.profile(profile).memory_mib
                compute = geometry.profile(profile).compute_slices
            slot = MigSlot(MigPlacement(profile, k), f"{base}/{profile}@0", resource, mem, compute)
            slots.append(GpuSlot(len(slots), base, model_key or "unknown", mem, "mig", resource, mig=[slot]))
    return slots, model_key


def device_resources(gpus: Iterable[GpuSlot]) -> dict[str, int]:
    """The resources a device plugin would advertise for these GPUs: one per whole GPU or MIG instance."""
    out: dict[str, int] = {}
    for g in gpus:
        # A dynamic MIG GPU counts as itself and as each MIG device that could be carved from it: which of those
        # can be had together is the counters' business (GpuSlot.partition_free), not the counts'.
        for resource in ([s.resource for s in g.mig] if g.mode == "mig" else [g.resource]) + [
                p.resource for p in g.partitions]:
            out[resource] = out.get(resource, 0) + 1
    return out


def node_state_from(node: Node, catalog: Catalog = DEFAULT_CATALOG) -> NodeState:
    gpus, model = _gpu_slots_from_node(node, catalog)
    labels = dict(node.labels)
    labels.setdefault(HOSTNAME_LABEL, node.name)
    # The inventory's sharing describes the device plugin's GPUs, not those DRA publishes; its NVLink pairs are
    # the physical GPUs', found among the DRA GPUs by UUID.
    inventory = node.gpus if not node.dra_gpus else None
    nvlinks = dict(inventory.nvlinks) if inventory else _dra_nvlinks(node, gpus)
    fail_gt1 = inventory.sharing.fail_requests_greater_than_one if inventory else False
    allocatable = dict(node.allocatable)
    if node.dra_gpus:
        # What the device plugin would advertise for the same devices: so a pod placed through its claims is
        # counted, scored and packed exactly as a pod asking nvidia.com/gpu on a device-plugin node (one fleet
        # whichever way a node publishes). Only pods with DRA claims take these devices (placement's DraDevices).
        for resource, count in device_resources(gpus).items():
            allocatable[resource] = allocatable.get(resource, 0) + count
    return NodeState(
        name=node.name, labels=labels, taints=node.taints, allocatable=allocatable, used={},
        gpus=gpus, unschedulable=node.unschedulable, ready=node.ready, pool=node.pool, gpu_model=model,
        fail_requests_greater_than_one=fail_gt1, nvlinks=nvlinks,
    )


def _dra_nvlinks(node: Node, gpus: Sequence[GpuSlot]) -> dict[tuple[int, int], int]:
    """The node inventory's NVLink pairs (the node agent's, by GPU index) between the GPUs DRA publishes, by their
    slots' indices: the inventory and the slices name the same physical GPUs by UUID."""
    inventory = node.gpus
    if inventory is None or not inventory.nvlinks:
        return {}
    slot_of = {g.device_id: g.index for g in gpus}
    out: dict[tuple[int, int], int] = {}
    for (i, j), links in inventory.nvlinks.items():
        if max(i, j) >= len(inventory.uuids):
            continue
        a, b = slot_of.get(inventory.uuids[i]), slot_of.get(inventory.uuids[j])
        if a is not None and b is not None and a != b:
            out[(min(a, b), max(a, b))] = links
    return out


# ---- undo log entries ------------------------------------------------------------------------------------------
_ALLOC = 0
_RELEASE = 1


class ClusterState:
    """Nodes, placements and the invariants that bind them."""

    def __init__(self, nodes: Iterable[NodeState] = (), catalog: Catalog = DEFAULT_CATALOG) -> None:
        self.catalog = catalog
        self.nodes: dict[str, NodeState] = {}
        self.placements: dict[str, Placement] = {}
        self._log: list[tuple[int, Placement]] | None = None
        self._marks: list[int] = []
        self.listeners: list[Callable[[NodeState], None]] = []
        # Observed GPU memory of pods on time-sliced GPUs (observe_memory), kept apart from the grants so that a
        # what-if release and its rollback restore what was observed, not what was expected.
        self.observed_memory: dict[str, int] = {}
        for n in nodes:
            self.add_node(n)

    @classmethod
    def from_nodes(cls, nodes: Iterable[Node], catalog: Catalog = DEFAULT_CATALOG) -> ClusterState:
        return cls((node_state_from(n, catalog) for n in nodes), catalog)

    def add_node(self, node: NodeState) -> None:
        if node.name in self.nodes:
            raise InvariantError(f"node {node.name} added twice")
        self.nodes[node.name] = node
        self._changed(node)

    def remove_node(self, name: str) -> NodeState:
        """Drop a node that holds no pods (release them first); listeners see it with ``ready`` False."""
        node = self.nodes.get(name)
        if node is None:
            raise InvariantError(f"node {name} does not exist")
        if node.pods:
            raise InvariantError(f"node {name} still runs {len(node.pods)} pod(s)")
        del self.nodes[name]
        node.ready = False
        self._changed(node)
        return node

    def touch(self, name: str) -> None:
        """Tell indexes that a node changed in place (readiness, cordon, labels, taints, GPU health)."""
        self._changed(self.nodes[name])

    def __iter__(self) -> Iterator[NodeState]:
        return iter(self.nodes.values())

    # ---- transactions --------------------------------------------------------------------------------------
    def checkpoint(self) -> int:
        if self._log is None:
            self._log = []
        self._marks.append(len(self._log))
        return len(self._marks)

    def rollback(self, mark: int) -> None:
        """Undo everything since checkpoint ``mark`` (and close it and any inner checkpoint)."""
        assert self._log is not None and 0 < mark <= len(self._marks), "rollback without checkpoint"
        target = self._marks[mark - 1]
        log = self._log
        self._log = None  # inverse operations are not themselves logged
        try:
            while len(log) > target:
                op, placement = log.pop()
                if op == _ALLOC:
                    self._release(placement)
                else:
                    self._apply(placement)
        finally:
            del self._marks[mark - 1:]
            self._log = log if self._marks else None

    def commit(self, mark: int) -> None:
        """Keep the changes since ``mark`` (closing it); an outer checkpoint can still roll them back."""
        assert 0 < mark <= len(self._marks), "commit without checkpoint"
        del self._marks[mark - 1:]
        if not self._marks:
            self._log = None

    # ---- allocation ----------------------------------------------------------------------------------------
    def allocate(self, pod: str, node: str, requests: ResourceList, grants: Sequence[DeviceGrant]) -> Placement:
        if pod in self.placements:
            raise InvariantError(f"pod {pod} is already placed on {self.placements[pod].node}")
        ns = self.nodes.get(node)
        if ns is None:
            raise InvariantError(f"node {node} does not exist")
        for g in grants:
            if not 0 <= g.gpu < len(ns.gpus):
                raise InvariantError(f"{node} has no GPU {g.gpu} (pod {pod})")
            gpu = ns.gpus[g.gpu]
            if (g.kind == "mig" and not 0 <= g.slot < len(gpu.mig)) or (
                    g.kind == "replica" and not 0 <= g.slot < len(gpu.replica_holders)) or (
                    g.kind == "partition" and not 0 <= g.slot < len(gpu.partitions)):
                raise InvariantError(f"{node} GPU {g.gpu} has no {g.kind} slot {g.slot} (pod {pod})")
        ids = tuple(grant_device_id(ns.gpus[g.gpu], g) for g in grants)
        # What the node is charged: the requests less what only quota is charged (a pod holding only fractions of
        # GPUs: HAMi's nvidia.com/gpu too, which its share stands for)
        fraction = bool(grants) and all(g.kind == "fraction" for g in grants)
        placement = Placement(pod, node, placed_requests(requests, fraction), tuple(grants), ids)
        self._apply(placement)
        if self._log is not None:
            self._log.append((_ALLOC, placement))
        return placement

    def release(self, pod: str) -> Placement:
        placement = self.placements.get(pod)
        if placement is None:
            raise InvariantError(f"pod {pod} is not placed")
        self._release(placement)
        if self._log is not None:
            self._log.append((_RELEASE, placement))
        return placement

    def _apply(self, p: Placement) -> None:
        ns = self.nodes[p.node]
        for resource, amount in p.requests.items():
            if amount < 0:
                raise InvariantError(f"pod {p.pod}: negative request {resource}={amount}")
            if resource == FRACTION_RESOURCE:
                continue  # charged against a GPU's thousandths below, not against allocatable
            if amount and ns.used.get(resource, 0) + amount > ns.allocatable.get(resource, 0):
                raise InvariantError(
                    f"pod {p.pod} on {p.node}: {resource} {ns.used.get(resource, 0)}+{amount} exceeds allocatable "
                    f"{ns.allocatable.get(resource, 0)}")
        if ns.used.get(PODS, 0) + 1 > ns.allocatable.get(PODS, DEFAULT_MAX_PODS):
            raise InvariantError(f"pod {p.pod} on {p.node}: node already runs its maximum of pods")
        done: list[DeviceGrant] = []
        try:
            for g in p.grants:
                self._grant(ns, p.pod, g, self.observed_memory)
                done.append(g)
        except InvariantError:
            for g in reversed(done):
                self._revoke(ns, p.pod, g)
            raise
        for resource, amount in p.requests.items():
            if resource != FRACTION_RESOURCE and amount:
                ns.used[resource] = ns.used.get(resource, 0) + amount
        ns.used["pods"] = ns.used.get("pods", 0) + 1
        ns.pods.add(p.pod)
        self.placements[p.pod] = p
        self._changed(ns)

    def _release(self, p: Placement) -> None:
        ns = self.nodes[p.node]
        for g in reversed(p.grants):
            self._revoke(ns, p.pod, g)
        for resource, amount in (*p.requests.items(), ("pods", 1)):
            if resource != FRACTION_RESOURCE:
                left = ns.used.get(resource, 0) - amount
                if left:
                    ns.used[resource] = left
                else:
                    ns.used.pop(resource, None)  # keep usage maps free of zeros so states compare equal
        ns.pods.discard(p.pod)
        del self.placements[p.pod]
        self._changed(ns)

    def _changed(self, ns: NodeState) -> None:
        ns.generation += 1
        for listener in self.listeners:
            listener(ns)

    @staticmethod
    def _grant(ns: NodeState, pod: str, g: DeviceGrant, observed: dict[str, int] | None = None) -> None:
        if not 0 <= g.gpu < len(ns.gpus):
            raise InvariantError(f"{ns.name} has no GPU {g.gpu}")
        gpu = ns.gpus[g.gpu]
        if g.kind == "whole":
            if gpu.mode != "whole" or not gpu.is_free:
                raise InvariantError(f"{ns.name} GPU {g.gpu} is not a free whole GPU (pod {pod})")
            gpu.holder = pod
        elif g.kind == "fraction":
            if gpu.mode != "whole" or gpu.holder is not None:
                raise InvariantError(f"{ns.name} GPU {g.gpu} cannot take a fraction (pod {pod})")
            if g.milli <= 0 or gpu.used_milli + g.milli > MILLI:
                raise InvariantError(f"{ns.name} GPU {g.gpu}: fractions would exceed one GPU (pod {pod})")
            if gpu.used_memory_mib + g.memory_mib > gpu.memory_mib:
                raise InvariantError(f"{ns.name} GPU {g.gpu}: fractions' memory would exceed the GPU's (pod {pod})")
            if pod in gpu.fractions:
                raise InvariantError(f"pod {pod} already holds a fraction of {ns.name} GPU {g.gpu}")
            gpu.fractions[pod] = (g.milli, g.memory_mib)
        elif g.kind == "replica":
            if gpu.mode != "replicas" or not 0 <= g.slot < gpu.replicas:
                raise InvariantError(f"{ns.name} GPU {g.gpu} has no replica {g.slot} (pod {pod})")
            if gpu.replica_holders[g.slot] is not None:
                raise InvariantError(f"{ns.name} GPU {g.gpu} replica {g.slot} is held (pod {pod})")
            gpu.replica_holders[g.slot] = pod
            memory = observed.get(pod, g.memory_mib) if observed else g.memory_mib
            if memory > 0:
                gpu.replica_memory[pod] = memory
        elif g.kind == "partition":
            if not 0 <= g.slot < len(gpu.partitions):
                raise InvariantError(f"{ns.name} GPU {g.gpu} has no partition {g.slot} (pod {pod})")
            if not gpu.partition_free(g.slot):
                raise InvariantError(f"{ns.name} GPU {g.gpu} partition {g.slot} cannot be carved: held, the GPU "
                                     f"held whole, or its counters spent (pod {pod})")
            gpu.partitions[g.slot].holder = pod
        else:
            if gpu.mode != "mig" or not 0 <= g.slot < len(gpu.mig):
                raise InvariantError(f"{ns.name} GPU {g.gpu} has no MIG instance {g.slot} (pod {pod})")
            if gpu.mig[g.slot].holder is not None:
                raise InvariantError(f"{ns.name} GPU {g.gpu} MIG instance {g.slot} is held (pod {pod})")
            gpu.mig[g.slot].holder = pod

    @staticmethod
    def _revoke(ns: NodeState, pod: str, g: DeviceGrant) -> None:
        gpu = ns.gpus[g.gpu]
        if g.kind == "whole":
            if gpu.holder != pod:
                raise InvariantError(f"{ns.name} GPU {g.gpu} is not held by {pod}")
            gpu.holder = None
        elif g.kind == "fraction":
            if pod not in gpu.fractions:
                raise InvariantError(f"{ns.name} GPU {g.gpu} has no fraction of {pod}")
            del gpu.fractions[pod]
        elif g.kind == "replica":
            if gpu.replica_holders[g.slot] != pod:
                raise InvariantError(f"{ns.name} GPU {g.gpu} replica {g.slot} is not held by {pod}")
            gpu.replica_holders[g.slot] = None
            if pod not in gpu.replica_holders:
                gpu.replica_memory.pop(pod, None)
        elif g.kind == "partition":
            if gpu.partitions[g.slot].holder != pod:
                raise InvariantError(f"{ns.name} GPU {g.gpu} partition {g.slot} is not held by {pod}")
            gpu.partitions[g.slot].holder = None
        else:
            if gpu.mig[g.slot].holder != pod:
                raise InvariantError(f"{ns.name} GPU {g.gpu} MIG instance {g.slot} is not held by {pod}")
            gpu.mig[g.slot].holder = None

    def observe_memory(self, pod: str, mib: int) -> bool:
        """What a placed pod uses of each time-sliced GPU it holds replicas of (the node agent's per-pod
        ``DCGM_FI_DEV_FB_USED``, the simulator's model): it replaces the expected use its grant recorded. Whether
        a GPU's known memory changed (placement indexes then see the node change)."""
        placement = self.placements.get(pod)
        if placement is None:
            return False
        self.observed_memory[pod] = mib
        ns = self.nodes[placement.node]
        changed = False
        for index in {g.gpu for g in placement.grants if g.kind == "replica"}:
            gpu = ns.gpus[index]
            if gpu.replica_memory.get(pod) != mib:
                gpu.replica_memory[pod] = mib
                changed = True
        if changed:
            self._changed(ns)
        return changed

    def forget_memory(self, pod: str) -> None:
        """Drop what was observed of a pod that is gone for good (a later pod of the same name starts afresh)."""
        self.observed_memory.pop(pod, None)

    # ---- views ---------------------------------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Recompute every node's usage from its placements and compare (for tests and debugging)."""
        for ns in self.nodes.values():
            used: dict[str, int] = {}
            for pod in ns.pods:
                for r, a in self.placements[pod].requests.items():
                    if r != FRACTION_RESOURCE:
                        used[r] = used.get(r, 0) + a
            used["pods"] = len(ns.pods)
            for r, a in used.items():
                if a != ns.used.get(r, 0):
                    raise InvariantError(f"{ns.name}: {r} used {ns.used.get(r, 0)} but placements sum to {a}")
                if r != "pods" and a > ns.allocatable.get(r, 0) and a > 0:
                    raise InvariantError(f"{ns.name}: {r} used {a} exceeds allocatable")
            for gpu in ns.gpus:
                if gpu.used_milli > MILLI or gpu.used_memory_mib > gpu.memory_mib > 0:
                    raise InvariantError(f"{ns.name} GPU {gpu.index} over-committed")
                if gpu.holder is not None and gpu.fractions:
                    raise InvariantError(f"{ns.name} GPU {gpu.index} held whole and by fractions")
                for holder in gpu.holders():
                    if holder not in ns.pods:
                        raise InvariantError(f"{ns.name} GPU {gpu.index} held by {holder}, not placed here")

    def gpus_per_model(self) -> dict[str, int]:
        """Physical GPUs per model key in the cluster."""
        out: dict[str, int] = {}
        for node in self.nodes.values():
            if node.gpu_model is not None and node.gpus:
                out[node.gpu_model] = out.get(node.gpu_model, 0) + len(node.gpus)
        return out

    def gpu_capacity(self) -> float:
        """Physical GPUs in the cluster."""
        return float(sum(len(ns.gpus) for ns in self.nodes.values()))

    def gpu_allocated(self) -> float:
        """GPUs held, counting fractions, replicas and MIG instances by their share."""
        return sum(g.used_milli for ns in self.nodes.values() for g in ns.gpus) / MILLI
