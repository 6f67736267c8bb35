"""From the input's ResourceSlices to each node's GPUs, as kube-scheduler's allocator reads pools.

Pools (reference §1.1): the slices of one (driver, pool name) are a pool; only the slices at its highest
``pool.generation`` count (a driver bumps the generation on every change, and older slices are on their way out);
the pool is complete when ``resourceSliceCount`` slices are seen at that generation. An incomplete pool, one whose
slices disagree on the count, or one naming a device twice, gives no devices, and says so.

Nodes: devices local to one node (``spec.nodeName``, what NVIDIA's driver writes) go to that node. ``nodeSelector``,
``allNodes`` and ``perDeviceNodeSelection`` are not implemented: such a slice's devices are left out, said.

GPUs: NVIDIA's driver (``gpu.nvidia.com``, reference §2.2-2.3) publishes a whole GPU as ``gpu-<minor>`` (``type``
gpu, ``uuid``, ``productName``, capacity ``memory``) and a MIG device as
``gpu-<minor>-mig-<profile>-<profile id>-<placement start>`` (``type`` mig, ``parentUUID``, ``profile``). They become
:class:`~gpufleet.api.dra_objects.DraGpu` records on the :class:`~gpufleet.api.objects.Node`, which the cluster
state turns into the same GPU slots device-plugin GPUs get (gpufleet.cluster.dra_devices), so placement,
fragmentation and metrics see one fleet. A GPU with static MIG devices is a MIG-mode GPU holding them. A GPU
whose MIG devices are partitionable (NVIDIA's dynamic MIG, KEP-4815: each consumes counters of the GPU's counter
set, which the whole GPU consumes entirely) is offered whole or carved into those devices, as far as the counters
allow; its counter sets come from the pool's slices (1.35 puts them in a slice of their own). Counter sets shared
by several GPUs are not planned: such a GPU is offered whole, said. The model comes from ``productName`` through
the GPU catalog.

Done here, in the input's reader rather than in the cluster state, because every driver (plan, simulate, the
dashboard, advise) builds its cluster from the Nodes, and the warnings name the slices' files and lines.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpufleet.api.dra_objects import (
    NVIDIA_GPU_DRIVER,
    CounterSet,
    Device,
    DraGpu,
    DraMigDevice,
    ResourceSlice,
)
from gpufleet.api.errors import LEFT_OUT, Problems
from gpufleet.api.limits import MAX_GPUS_PER_NODE
from gpufleet.api.objects import GPU, Node
from gpufleet.gpu.catalog import DEFAULT_CATALOG, AmbiguousModelError
from gpufleet.gpu.constants import SHARED_GPU
from gpufleet.gpu.mig import RESOURCE_PREFIX as MIG_RESOURCE_PREFIX
from gpufleet.gpu.mig import MigError, MigPlacement, check_layout, geometry_for

_GPU_NAME = re.compile(r"^gpu-([0-9]{1,6})$")
# gpu-<minor>-mig-<profile>-<profile id>-<start>; the profile id is left out where the driver has none
_MIG_NAME = re.compile(r"^gpu-([0-9]{1,6})-mig-[a-z0-9-]+?-([0-9]{1,2})$")
_MIB = 2**20


@dataclass(frozen=True, slots=True)
class Pool:
    """A complete pool: its slices at its highest generation."""

    driver: str
    name: str
    generation: int
    slices: tuple[ResourceSlice, ...]

    @property
    def devices(self) -> tuple[Device, ...]:
        return tuple(d for s in self.slices for d in s.devices)


def _warn(problems: Problems, s: ResourceSlice, message: str, field_: str, fix: str, *, line: int | None = None,
          code: str | None = None) -> None:
    src = s.meta.source
    problems.warning(message, file=src.file if src else None, line=line if line is not None else
                     (src.line if src else None), kind="ResourceSlice", name=s.name, field=field_, fix=fix, code=code)


def complete_pools(slices: Sequence[ResourceSlice], problems: Problems) -> list[Pool]:
    """The complete pools of ``slices``, each at its highest generation; what is not used is said."""
    by_pool: dict[tuple[str, str], list[ResourceSlice]] = {}
    for s in slices:
        by_pool.setdefault((s.driver, s.pool.name), []).append(s)
    out: list[Pool] = []
    for (driver, name), group in sorted(by_pool.items()):
        top = max(s.pool.generation for s in group)
        current = sorted((s for s in group if s.pool.generation == top), key=lambda s: s.name)
        first = current[0]
        counts = sorted({s.pool.resource_slice_count for s in current})
        what = f"pool {name} of driver {driver}"
        if len(counts) > 1:
            _warn(problems, first, f"{what}: its ResourceSlices at generation {top} disagree on resourceSliceCount "
                  f"({', '.join(str(c) for c in counts)}); its devices are not used", "spec.pool.resourceSliceCount",
                  "give the pool's slices as the driver published them, all at once")
            continue
        if len(current) != counts[0]:
            _warn(problems, first, f"{what} is incomplete: {len(current)} ResourceSlice(s) at generation {top}, "
                  f"resourceSliceCount says {counts[0]}; its devices are not used (as kube-scheduler does not use "
                  "them)", "spec.pool", "give every slice of the pool, e.g. from kubectl get resourceslices -o yaml")
            continue
        seen = Counter(d.name for s in current for d in s.devices)
        twice = sorted(n for n, c in seen.items() if c > 1)
        if twice:
            _warn(problems, first, f"{what} lists device {twice[0]} in more than one slice"
                  + (f" (and {len(twice) - 1} more)" if len(twice) > 1 else "") + "; the pool is invalid and its "
                  "devices are not used", "spec.devices", "a device name is unique within its pool")
            continue
        out.append(Pool(driver, name, top, tuple(current)))
    return out


@dataclass(slots=True)
class NodeDevices:
    """What a node's slices give it: its GPUs, and the first slice naming it (where to point a message)."""

    first: ResourceSlice
    gpus: list[DraGpu] = field(default_factory=list)


@dataclass(slots=True)
class _Said:
    """What was said once for the whole input (per driver, per product name), not per device."""

    drivers: dict[str, tuple[ResourceSlice, int]] = field(default_factory=dict)
    products: set[str] = field(default_factory=set)


def node_devices(pools: Sequence[Pool], problems: Problems) -> dict[str, NodeDevices]:
    """The GPUs each node gets from the complete ``pools``, by node name."""
    said = _Said()
    placed: dict[str, list[tuple[ResourceSlice, Device]]] = {}
    firsts: dict[str, ResourceSlice] = {}
    # Counter sets by pool, then by name (names are unique in a pool; the slice holding them may hold no device).
    counter_sets: dict[str, dict[str, CounterSet]] = {}
    for pool in pools:
        if pool.driver == NVIDIA_GPU_DRIVER:
            counter_sets[pool.name] = {cs.name: cs for s in pool.slices for cs in s.shared_counters}
    for pool in pools:
        for s in pool.slices:
            if s.node_selection != "nodeName" or s.node_name is None:
                _warn(problems, s, f"{s.node_selection} is not implemented: gpufleet reads devices local to one node "
                      f"(spec.nodeName); the {len(s.devices)} device(s) of this slice are left out",
                      f"spec.{s.node_selection}", "expect these devices to be missing from the plan", code=LEFT_OUT)
                continue
            firsts.setdefault(s.node_name, s)
            if not s.devices:
                continue
            if pool.driver != NVIDIA_GPU_DRIVER:
                first, count = said.drivers.get(pool.driver, (s, 0))
                said.drivers[pool.driver] = (first, count + len(s.devices))
                continue
            placed.setdefault(s.node_name, []).extend((s, d) for d in s.devices)
    for driver, (s, count) in sorted(said.drivers.items()):
        _warn(problems, s, f"{count} device(s) of driver {driver} are read; gpufleet plans the GPUs and MIG devices "
              f"of {NVIDIA_GPU_DRIVER} only (left out)", "spec.driver",
              "expect claims for these devices to stay unplanned", code=LEFT_OUT)
    out = {name: NodeDevices(s) for name, s in firsts.items()}
    for name, entries in sorted(placed.items()):
        out[name].gpus = _nvidia_gpus(entries, problems, said, counter_sets)
    return out


def _minor(name: str, pattern: re.Pattern[str]) -> int | None:
    m = pattern.match(name)
    return int(m.group(1)) if m else None


def _memory_mib(d: Device, driver: str) -> int | None:
    q = d.capacity.get(f"{driver}/memory")
    return int(q // _MIB) if q is not None and q > 0 else None


def _device_warning(problems: Problems, s: ResourceSlice, d: Device, message: str, fix: str, *,
                    code: str | None = LEFT_OUT) -> None:
    _warn(problems, s, message, f"spec.devices[{d.index}]", fix, line=d.line, code=code)


def _model(problems: Problems, said: _Said, s: ResourceSlice, d: Device, memory_mib: int | None
           ) -> tuple[str, int] | None:
    """(model key, memory MiB) of the GPU ``d`` describes: a catalog model by its productName, else a model of
    that name sized by the device's memory capacity (said once per product); None when neither is known."""
    product = d.text("productName", s.driver)
    try:
        found = DEFAULT_CATALOG.lookup(product) if product else None
    except AmbiguousModelError:
        found = None
    if found is not None:
        return found.key, memory_mib or found.memory_mib
    shown_product = product or "(no productName)"
    if memory_mib is None:
        _device_warning(problems, s, d, f"device {d.name}: productName {shown_product} is not in gpufleet's GPU "
                        "catalog and the device has no memory capacity; its GPU is left out",
                        "publish capacity memory, or add the model to the catalog (catalog overrides)")
        return None
    if shown_product not in said.products:
        said.products.add(shown_product)
        _device_warning(problems, s, d, f"productName {shown_product} is not in gpufleet's GPU catalog: its GPUs "
                        f"are planned as model {shown_product} with {memory_mib:,} MiB (the device's memory "
                        "capacity), unpriced and without MIG geometry",
                        "add the model to the catalog (catalog overrides) to price it", code=None)
    return shown_product, memory_mib


def _mig_devices(problems: Problems, s: ResourceSlice, model: str, children: list[tuple[ResourceSlice, Device]]
                 ) -> tuple[DraMigDevice, ...] | None:
    """The static MIG devices of one GPU of ``model``, in placement order; None when they cannot be planned."""
    geometry = geometry_for(model)
    if geometry is None:
        cs, cd = children[0]
        _device_warning(problems, cs, cd, f"MIG device {cd.name}: gpufleet knows no MIG geometry for {model}; the "
                        "GPU and its MIG devices are left out", "use a MIG-capable model of the catalog")
        return None
    out: list[DraMigDevice] = []
    for cs, cd in children:
        profile_text = cd.text("profile", cs.driver)
        m = _MIG_NAME.match(cd.name)
        if profile_text is None or m is None:
            _device_warning(problems, cs, cd, f"MIG device {cd.name}: "
                            + ("no profile attribute" if profile_text is None else "its name does not end in the "
                               "placement start (gpu-<minor>-mig-<profile>-<profile id>-<start>)")
                            + "; it is left out", "publish MIG devices as NVIDIA's driver names them")
            continue
        try:
            profile = geometry.profile(profile_text)
        except MigError as exc:
            _device_warning(problems, cs, cd, f"MIG device {cd.name}: {exc}; it is left out",
                            f"use a profile of {geometry.model}")
            continue
        uuid = cd.text("uuid", cs.driver)
        out.append(DraMigDevice(cd.name, profile.name, int(m.group(2)), _memory_mib(cd, cs.driver)
                                or profile.memory_mib, profile.compute_slices, uuid))
    out.sort(key=lambda x: (x.start, x.profile))
    try:
        check_layout(geometry, [MigPlacement(x.profile, x.start) for x in out])
    except MigError as exc:
        cs, cd = children[0]
        _device_warning(problems, cs, cd, f"the MIG devices of GPU {cd.text('parentUUID', cs.driver)} do not fit "
                        f"together on one {geometry.model}: {exc}; the GPU is left out",
                        "publish the MIG devices the GPU holds")
        return None
    return tuple(out)


def _set_owners(entries: Sequence[tuple[ResourceSlice, Device]]) -> dict[tuple[str, str], set[str]]:
    """(pool, counter set) -> the GPUs (UUIDs) whose devices consume it."""
    owners: dict[tuple[str, str], set[str]] = {}
    for s, d in entries:
        gpu = d.text("uuid" if d.text("type", s.driver) == "gpu" else "parentUUID", s.driver)
        for c in d.consumes_counters:
            owners.setdefault((s.pool.name, c.counter_set), set()).add(gpu or f"{s.pool.name}/{d.name}")
    return owners


def _partitions(s: ResourceSlice, whole: Device, model: str, kids: list[tuple[ResourceSlice, Device]],
                sets: Mapping[str, CounterSet], owners: Mapping[tuple[str, str], set[str]]
                ) -> tuple[tuple[DraMigDevice, ...], tuple[CounterSet, ...]] | str:
    """The dynamic MIG devices of one GPU of ``model`` (published whole as ``whole``) and the counter sets they and
    the whole GPU draw from; or why they cannot be planned."""
    geometry = geometry_for(model)
    if geometry is None:
        return f"gpufleet knows no MIG geometry for {model}"
    used: dict[str, CounterSet] = {}
    for d in (whole, *(cd for _, cd in kids)):
        for c in d.consumes_counters:
            found = sets.get(c.counter_set)
            if found is None:
                return f"device {d.name} consumes counter set {c.counter_set}, which no slice of pool {s.pool.name} has"
            unknown = sorted(set(c.counters) - set(found.counters))
            if unknown:
                return f"device {d.name} consumes counter {unknown[0]}, which counter set {c.counter_set} does not have"
            if len(owners.get((s.pool.name, c.counter_set), ())) > 1:
                return (f"counter set {c.counter_set} is consumed by the devices of several GPUs; gpufleet carves MIG "
                        "devices from counters of one GPU")
            used[c.counter_set] = found
    out: list[DraMigDevice] = []
    for cs, cd in kids:
        profile_text = cd.text("profile", cs.driver)
        m = _MIG_NAME.match(cd.name)
        if profile_text is None or m is None:
            return (f"MIG device {cd.name}: " + ("no profile attribute" if profile_text is None else
                    "its name does not end in the placement start (gpu-<minor>-mig-<profile>-<profile id>-<start>)"))
        try:
            profile = geometry.profile(profile_text)
        except MigError as exc:
            return f"MIG device {cd.name}: {exc}"
        out.append(DraMigDevice(cd.name, profile.name, int(m.group(2)), _memory_mib(cd, cs.driver)
                                or profile.memory_mib, profile.compute_slices, cd.text("uuid", cs.driver),
                                counters=cd.consumes_counters))
    out.sort(key=lambda x: (x.start, x.profile))
    return tuple(out), tuple(used[name] for name in sorted(used))


def _nvidia_gpus(entries: list[tuple[ResourceSlice, Device]], problems: Problems, said: _Said,
                 counter_sets: Mapping[str, Mapping[str, CounterSet]]) -> list[DraGpu]:
    """One node's GPUs from the devices of NVIDIA's driver on it."""
    whole: dict[str, tuple[ResourceSlice, Device]] = {}
    children: dict[str, list[tuple[ResourceSlice, Device]]] = {}
    others: Counter[str] = Counter()
    for s, d in entries:
        kind = d.text("type", s.driver)
        if kind == "gpu":
            whole.setdefault(d.text("uuid", s.driver) or f"{s.pool.name}/{d.name}", (s, d))
        elif kind == "mig":
            parent = d.text("parentUUID", s.driver)
            if parent is None:
                _device_warning(problems, s, d, f"MIG device {d.name} has no parentUUID attribute; it is left out",
                                "publish MIG devices as NVIDIA's driver does")
                continue
            children.setdefault(parent, []).append((s, d))
        else:
            others[kind or "(no type)"] += 1
    if others:
        s0 = entries[0][0]
        _warn(problems, s0, f"{sum(others.values())} device(s) of {NVIDIA_GPU_DRIVER} of type "
              f"{', '.join(sorted(others))} are read; gpufleet plans devices of type gpu and mig only (left out)",
              "spec.devices", "expect claims for these devices to stay unplanned", code=LEFT_OUT)
    owners = _set_owners(entries)
    gpus: list[DraGpu] = []
    for uuid in sorted(set(whole) | set(children)):
        gpu = whole.get(uuid)
        kids = children.get(uuid, [])
        static = [(cs, cd) for cs, cd in kids if not cd.consumes_counters]
        partitionable = [(cs, cd) for cs, cd in kids if cd.consumes_counters]
        source = gpu or (static[0] if static else None)
        if source is None:
            continue  # partitionable MIG devices of a GPU not published whole: nothing to plan them on
        s, d = source
        memory = _memory_mib(gpu[1], s.driver) if gpu is not None else None
        model = _model(problems, said, s, d, memory)
        if model is None:
            continue
        key, memory_mib = model
        minor = _minor(d.name, _GPU_NAME) if gpu is not None else _minor(d.name, _MIG_NAME)
        mig: tuple[DraMigDevice, ...] = ()
        partitions: tuple[DraMigDevice, ...] = ()
        sets: tuple[CounterSet, ...] = ()
        if partitionable:
            ps, pd = partitionable[0]
            carved: tuple[tuple[DraMigDevice, ...], tuple[CounterSet, ...]] | str
            if static:
                carved = "the GPU also has static MIG devices"
            elif gpu is None:
                carved = "the GPU is not published whole"
            else:
                carved = _partitions(s, gpu[1], key, partitionable, counter_sets.get(s.pool.name, {}), owners)
            if isinstance(carved, str):
                _device_warning(problems, ps, pd, f"pool {ps.pool.name}: {len(partitionable)} partitionable MIG "
                                f"device(s) of GPU {uuid} (dynamic MIG) are left out: {carved}; the GPU is offered "
                                "without them",
                                "publish dynamic MIG devices as NVIDIA's driver does (a counter set per GPU)")
            else:
                partitions, sets = carved
        if static:
            # a GPU in static MIG mode is offered as its MIG devices: the whole device, when also published, is
            # the same GPU and is not offered beside them
            found = _mig_devices(problems, s, key, static)
            if found is None:
                continue
            mig = found
        gpus.append(DraGpu(driver=s.driver, pool=s.pool.name, device=gpu[1].name if gpu is not None else None,
                           uuid=uuid, model=key, memory_mib=memory_mib,
                           minor=minor if minor is not None else len(gpus) + 10**6, mig=mig,
                           counters=gpu[1].consumes_counters if gpu is not None else (),
                           partitions=partitions, counter_sets=sets))
    gpus.sort(key=lambda g: (g.minor, g.uuid))
    return gpus


def _device_plugin_resources(node: Node) -> dict[str, int]:
    return {k: v for k, v in node.allocatable.items()
            if v > 0 and (k in (GPU, SHARED_GPU) or k.startswith(MIG_RESOURCE_PREFIX))}


def attach_dra_gpus(nodes: Sequence[Node], slices: Sequence[ResourceSlice], problems: Problems) -> int:
    """Give each node the GPUs the input's slices publish for it (``Node.dra_gpus``); how many nodes got some.

    A node that also offers GPUs through the device plugin (``nvidia.com/gpu`` and the like in its allocatable)
    keeps the DRA devices alone, said: NVIDIA's chart refuses its DRA driver's GPU plugin beside the device plugin
    (reference §2.1), so one of the two is a stale view, and counting both would count each GPU twice."""
    if not slices:
        return 0
    by_node = node_devices(complete_pools(slices, problems), problems)
    named = {n.name: n for n in nodes}
    done = 0
    for name, found in sorted(by_node.items()):
        if not found.gpus:
            continue
        node = named.get(name)
        if node is None:
            _warn(problems, found.first, f"{len(found.gpus)} GPU(s) are published for node {name}, which is not in "
                  "the input; they are left out", "spec.nodeName", "add the Node to the input", code=LEFT_OUT)
            continue
        gpus = found.gpus
        if len(gpus) > MAX_GPUS_PER_NODE:
            _warn(problems, found.first, f"node {name}: {len(gpus)} GPUs are published; gpufleet plans at most "
                  f"{MAX_GPUS_PER_NODE} per node and leaves out the rest", "spec.devices",
                  "see docs/limits.md", code=LEFT_OUT)
            gpus = gpus[:MAX_GPUS_PER_NODE]
        plugin = _device_plugin_resources(node)
        if plugin:
            src = node.meta.source
            offered = ", ".join(f"{k}: {v}" for k, v in sorted(plugin.items()))
            problems.warning(
                f"node {name} offers {offered} through the device plugin and {len(gpus)} GPU(s) through DRA "
                f"ResourceSlices of {gpus[0].driver}; NVIDIA's chart refuses both on one node: gpufleet uses the DRA "
                "devices and drops the device-plugin resources", file=src.file if src else None,
                line=src.line if src else None, kind="Node", name=name, field="status.allocatable",
                fix="run either NVIDIA's device plugin or its DRA driver's GPU plugin on a node, not both")
            node.allocatable = {k: v for k, v in node.allocatable.items() if k not in plugin}
            node.capacity = {k: v for k, v in node.capacity.items() if k not in plugin}
        node.dra_gpus = tuple(gpus)
        done += 1
    return done
