"""NVIDIA's GPU configuration read as the GPU Operator keeps it, so a snapshot of such a cluster needs no NodePool.

Three objects describe what a GPU node offers:

* the **device plugin's ConfigMap**: each data key is a named configuration in NVIDIA's device-plugin format
  (``version: v1``, ``flags.migStrategy``, ``sharing.timeSlicing``; read by
  :mod:`gpufleet.api.device_plugin_config`); a node's label ``nvidia.com/device-plugin.config`` names the key
  that applies to it;
* **mig-parted's ConfigMap** (the GPU Operator's ``default-mig-parted-config``, key ``config.yaml``):
  ``version: v1`` and ``mig-configs: {NAME: [{devices: all|[0, 1], mig-enabled: true, mig-devices:
  {"3g.40gb": 2}, device-filter: ["0x20B210DE"]}]}``; a node's label ``nvidia.com/mig.config`` names the
  configuration, and ``nvidia.com/mig.config.state`` says whether mig-manager has applied it (``success``);
* the operator's **ClusterPolicy** (``nvidia.com/v1``): ``spec.mig.strategy`` (given to the device plugin as
  ``MIG_STRATEGY``, which takes precedence over the file's ``flags.migStrategy``, as NVIDIA's plugin ranks its
  environment above its config file), ``spec.devicePlugin.config.{name, default}`` (the ConfigMap, and the
  key for nodes without the label) and ``spec.migManager.config.{name, default}`` (default
  ``default-mig-parted-config`` and ``all-disabled``).

A node that carries gpufleet's own inventory (``gpufleet.io/gpus``, published by the node agent) is measured,
not configured: it is left as it is. Any other GPU node with the GFD labels ``nvidia.com/gpu.product`` and
``nvidia.com/gpu.count`` gets an inventory built from the configuration that applies to it: its GPUs, each
MIG GPU's instances (the profiles and counts mig-parted creates; their starts are chosen by gpufleet, as the
driver does when mig-parted gives none), time-slicing replicas, renaming and ``failRequestsGreaterThanOne``.
That inventory must advertise exactly the GPU resources the node's ``status.capacity`` shows; when it does not
(a configuration being applied, a node the configuration does not describe), the node is read from its
resources and labels as before, and a warning says why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from gpufleet.api.device_plugin_config import read_config
from gpufleet.api.errors import LEFT_OUT, Problems
from gpufleet.api.kinds import parse_meta
from gpufleet.api.objects import GPU, PRODUCT_LABEL, GpuInventory, Node, ObjectMeta
from gpufleet.api.reader import FieldReader, parse_int_text
from gpufleet.api.source import load_text
from gpufleet.gpu.catalog import DEFAULT_CATALOG, GpuModel
from gpufleet.gpu.constants import SHARED_GPU
from gpufleet.gpu.mig import MigError, MigPlacement, geometry_for, pack_profiles
from gpufleet.gpu.pci import matches, normalise_device_id
from gpufleet.gpu.sharing import (
    DevicePluginConfig,
    MigInstance,
    MigStrategy,
    PhysicalGpu,
    SharingError,
    advertised_resources,
)

DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
DEFAULT_MIG_PARTED_CONFIG = "default-mig-parted-config"  # the ClusterPolicy CRD's default
DEFAULT_MIG_CONFIG = "all-disabled"  # the ClusterPolicy CRD's default for nodes without the label
DEFAULT_MIG_STRATEGY: MigStrategy = "single"  # the ClusterPolicy CRD's default
MIG_PARTED_KEY = "config.yaml"

ConfigKind = Literal["device-plugin", "mig-parted"]
_ENTRY_KEYS = ("devices", "mig-enabled", "mig-devices", "device-filter")


# --- the objects ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MigPartedEntry:
    """One item of a mig-parted configuration: which GPUs (indexes; None for all, optionally only some PCI
    device IDs) get MIG on or off, and which instances."""

    devices: tuple[int, ...] | None
    device_filter: tuple[str, ...]
    mig_enabled: bool
    mig_devices: Mapping[str, int]


@dataclass(slots=True)
class NvidiaConfigMap:
    """A ConfigMap that holds NVIDIA configuration: named device-plugin configurations, mig-parted ones."""

    meta: ObjectMeta
    device_plugin: dict[str, DevicePluginConfig] = field(default_factory=dict)  # data key -> configuration
    mps: frozenset[str] = frozenset()  # data keys configuring MPS sharing, which gpufleet does not model
    mig_parted: dict[str, dict[str, tuple[MigPartedEntry, ...]]] = field(default_factory=dict)  # key -> name -> ...

    @property
    def name(self) -> str:
        return self.meta.name

    @property
    def key(self) -> str:
        return self.meta.key


@dataclass(slots=True)
class ClusterPolicy:
    """The GPU Operator's ClusterPolicy, the fields that decide what a node offers."""

    meta: ObjectMeta
    mig_strategy: MigStrategy = DEFAULT_MIG_STRATEGY
    device_plugin_config: str | None = None
    device_plugin_default: str | None = None
    mig_parted_config: str = DEFAULT_MIG_PARTED_CONFIG
    mig_default: str = DEFAULT_MIG_CONFIG

    @property
    def name(self) -> str:
        return self.meta.name


# --- recognising and naming ----------------------------------------------------------------------------------


def nvidia_config_kind(text: str) -> ConfigKind | None:
    """What NVIDIA configuration a ConfigMap value holds: a device-plugin one (``version`` with ``flags`` or
    ``sharing``), a mig-parted one (``mig-configs``), or neither (None)."""
    if "version" not in text:
        return None  # both formats have it: most ConfigMaps are rejected without parsing
    docs = load_text(text, "<configmap>", Problems())
    if len(docs) != 1 or not isinstance(docs[0].data, Mapping):
        return None
    return nvidia_shape(docs[0].data)


def nvidia_shape(data: Mapping[Any, Any]) -> Literal["device-plugin", "mig-parted"] | None:
    """Which NVIDIA configuration a parsed document is by its shape: the device plugin's (``version`` with
    ``flags`` or ``sharing``), mig-parted's (``version`` with ``mig-configs``), or neither (None)."""
    if "version" not in data:
        return None
    if "mig-configs" in data:
        return "mig-parted"
    if "flags" in data or "sharing" in data:
        return "device-plugin"
    return None


def config_map_names(policy: Mapping[str, Any]) -> set[str]:
    """The ConfigMaps a raw ClusterPolicy names: the device plugin's and mig-parted's (its default included)."""
    spec = policy.get("spec") if isinstance(policy.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    names = {DEFAULT_MIG_PARTED_CONFIG}
    for section in ("devicePlugin", "migManager"):
        part = spec.get(section)
        config = part.get("config") if isinstance(part, Mapping) else None
        name = config.get("name") if isinstance(config, Mapping) else None
        if isinstance(name, str) and name:
            names.add(name)
    return names


# --- parsers -------------------------------------------------------------------------------------------------


def _value_line(r: FieldReader, key: str, value: str) -> int:
    """Lines of the embedded text start on the line after the key for a block scalar, on its line otherwise."""
    line = r.doc.line_of("data", key)
    return line if "\n" in value else line - 1


def parse_config_map(r: FieldReader) -> NvidiaConfigMap | None:
    """A ConfigMap holding NVIDIA's device-plugin or mig-parted configuration; another ConfigMap is named and
    left out (gpufleet reads no other). Errors in the embedded YAML name the manifest's own file and line."""
    meta = parse_meta(r, namespaced=True)
    if meta is None:
        return None
    data = r.obj("data")
    out = NvidiaConfigMap(meta)
    for key, value in (data.value.items() if data is not None else ()):
        if not isinstance(value, str):
            continue
        kind = nvidia_config_kind(value)
        if kind is None:
            continue
        offset = _value_line(r, str(key), value)
        docs = load_text("\n" * offset + value, r.doc.file, r.problems)
        if len(docs) != 1:
            continue  # a syntax error, reported by the loader at its line
        reader_kind, name = "ConfigMap", meta.key
        if kind == "device-plugin":
            config = read_config(docs[0], r.problems, for_node_agent=False, kind=reader_kind, name=name)
            out.device_plugin[str(key)] = config.sharing
            if config.mps:
                out.mps = out.mps | {str(key)}
        else:
            out.mig_parted[str(key)] = _mig_parted(FieldReader(docs[0], r.problems, kind=reader_kind, name=name))
    if not out.device_plugin and not out.mig_parted:
        r.warning("no NVIDIA device-plugin or mig-parted configuration here; left out (gpufleet reads no other "
                  "ConfigMap)", "data", fix="nothing to do: it changes no placement (remove it to silence this)",
                  code=LEFT_OUT)
        return None
    return out


def _mig_parted(r: FieldReader) -> dict[str, tuple[MigPartedEntry, ...]]:
    version = r.text("version", required=True)
    if version is not None and version != "v1":
        r.error(f"unsupported mig-parted config version {version!r}", "version", fix="write version: v1")
    configs = r.obj("mig-configs", required=True)
    out: dict[str, tuple[MigPartedEntry, ...]] = {}
    if configs is None:
        return out
    for name in configs.value:
        entries: list[MigPartedEntry] = []
        for item in configs.items(str(name)):
            entry = _mig_entry(item)
            if entry is not None:
                entries.append(entry)
        out[str(name)] = tuple(entries)
    return out


def _mig_entry(r: FieldReader) -> MigPartedEntry | None:
    for key in r.value:
        if key not in _ENTRY_KEYS:
            r.error(f"unknown field {key}", str(key),
                    fix=f"remove it or fix its spelling; known: {', '.join(_ENTRY_KEYS)}")
    raw_devices = r.raw("devices")
    devices: tuple[int, ...] | None = None
    if raw_devices == "all":
        devices = None
    elif isinstance(raw_devices, list) and all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 64
                                               for d in raw_devices):
        devices = tuple(raw_devices)
    else:
        r.error("devices must be all or a list of GPU indexes", "devices", fix="write devices: all or devices: [0, 1]")
        return None
    if r.raw("mig-enabled") is None:
        r.error("missing required field mig-enabled", "mig-enabled", fix="add mig-enabled: true or false")
        return None
    enabled = r.flag("mig-enabled")
    raw_filter = r.raw("device-filter")
    filters: tuple[str, ...] = ()
    if isinstance(raw_filter, str):
        filters = (normalise_device_id(raw_filter),)
    elif isinstance(raw_filter, list) and all(isinstance(f, str) for f in raw_filter):
        filters = tuple(normalise_device_id(f) for f in raw_filter)
    elif raw_filter is not None:
        r.error("device-filter must be a PCI device ID or a list of them", "device-filter",
                fix='e.g. device-filter: ["0x20B210DE"]')
    counts: dict[str, int] = {}
    mig_devices = r.obj("mig-devices")
    if mig_devices is not None:
        for profile in mig_devices.value:
            count = mig_devices.integer(str(profile), minimum=0, maximum=7)
            if count is not None:
                counts[str(profile)] = count
    return MigPartedEntry(devices, filters, enabled, counts)


def parse_cluster_policy(r: FieldReader) -> ClusterPolicy | None:
    meta = parse_meta(r, namespaced=False)
    if meta is None:
        return None
    out = ClusterPolicy(meta)
    spec = r.obj("spec")
    if spec is None:
        return out
    mig = spec.obj("mig")
    if mig is not None:
        out.mig_strategy = cast(MigStrategy, mig.enum("strategy", ("none", "single", "mixed"), DEFAULT_MIG_STRATEGY))
    plugin = spec.obj("devicePlugin")
    config = plugin.obj("config") if plugin is not None else None
    if config is not None:
        out.device_plugin_config = config.text("name") or None
        out.device_plugin_default = config.text("default") or None
    manager = spec.obj("migManager")
    config = manager.obj("config") if manager is not None else None
    if config is not None:
        out.mig_parted_config = config.text("name") or DEFAULT_MIG_PARTED_CONFIG
        out.mig_default = config.text("default") or DEFAULT_MIG_CONFIG
    return out


PARSERS = {("", "ConfigMap"): parse_config_map, ("nvidia.com", "ClusterPolicy"): parse_cluster_policy}


# --- what a node offers --------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Setup:
    policy: ClusterPolicy | None
    device_plugin: NvidiaConfigMap | None
    mig_parted: dict[str, tuple[MigPartedEntry, ...]] | None
    mig_source: str  # "ConfigMap ns/name" for messages


class _NodeSkipped(Exception):
    """Why a node is read from its resources and labels instead (the message completes "node N: ...")."""


def _one(config_maps: Sequence[NvidiaConfigMap], name: str | None, has: str) -> NvidiaConfigMap | None:
    with_it = [c for c in config_maps if getattr(c, has)]
    if name is not None:
        named = [c for c in config_maps if c.name == name]
        return named[0] if named else None
    return with_it[0] if len(with_it) == 1 else None


def _setup(config_maps: Sequence[NvidiaConfigMap], policies: Sequence[ClusterPolicy], problems: Problems) -> _Setup:
    policy = policies[0] if policies else None
    if len(policies) > 1:
        problems.warning(f"{len(policies)} ClusterPolicies: the GPU Operator uses one and ignores the others; "
                         f"gpufleet reads {policies[0].name}", kind="ClusterPolicy", name=policies[1].name,
                         code=LEFT_OUT)
    dp = _one(config_maps, policy.device_plugin_config if policy else None, "device_plugin")
    mig_name = policy.mig_parted_config if policy else None
    mp = _one(config_maps, mig_name, "mig_parted")
    if mp is None and policy is not None and mig_name == DEFAULT_MIG_PARTED_CONFIG:
        mp = _one(config_maps, None, "mig_parted")  # the operator's default ConfigMap may be saved under another name
    mig = None
    if mp is not None and mp.mig_parted:
        mig = mp.mig_parted.get(MIG_PARTED_KEY) or next(iter(mp.mig_parted.values()))
    return _Setup(policy, dp, mig, f"ConfigMap {mp.key}" if mp is not None else "")


def _sharing(node: Node, setup: _Setup) -> tuple[DevicePluginConfig, str]:
    """The device-plugin configuration of ``node``, and its name for messages."""
    policy, cm = setup.policy, setup.device_plugin
    strategy = policy.mig_strategy if policy is not None else None
    base = DevicePluginConfig(mig_strategy=strategy or "none")
    if cm is None:
        if policy is not None and policy.device_plugin_config:
            raise _NodeSkipped(f"the ClusterPolicy names device-plugin ConfigMap {policy.device_plugin_config}, "
                               "which is not in the input")
        return base, "the device plugin's defaults"
    label = node.labels.get(DEVICE_PLUGIN_CONFIG_LABEL)
    keys = list(cm.device_plugin)
    if label:
        key = label
    elif policy is not None and policy.device_plugin_default:
        key = policy.device_plugin_default
    elif "default" in cm.device_plugin:
        key = "default"
    elif len(keys) == 1:
        key = keys[0]
    else:
        raise _NodeSkipped(f"no label {DEVICE_PLUGIN_CONFIG_LABEL} and no default among {', '.join(keys)} in "
                           f"ConfigMap {cm.key}")
    if key in cm.mps:
        raise _NodeSkipped(f"device-plugin config {key} shares GPUs with MPS, which gpufleet does not model")
    config = cm.device_plugin.get(key)
    if config is None:
        raise _NodeSkipped(f"device-plugin config {key} is not in ConfigMap {cm.key} (it has {', '.join(keys)})")
    if strategy is not None:
        config = DevicePluginConfig(strategy, config.time_slicing, config.rename_by_default,
                                    config.fail_requests_greater_than_one)
    return config, f"device-plugin config {key} of ConfigMap {cm.key}"


def _mig_layouts(node: Node, model: GpuModel, setup: _Setup) -> tuple[Any, str]:
    """A function GPU index -> (MIG enabled, layout) for ``node``, and the configuration's name; None when the
    node's MIG layout is not configured here (MIG stays as its resources show it)."""
    state = node.labels.get(MIG_CONFIG_STATE_LABEL)
    if state is not None and state != "success":
        raise _NodeSkipped(f"its MIG configuration is being applied ({MIG_CONFIG_STATE_LABEL}={state})")
    name = node.labels.get(MIG_CONFIG_LABEL) or (setup.policy.mig_default if setup.policy is not None else None)
    if name is None or not model.mig_capable:
        return (lambda index: (False, ())), "no MIG"
    entries = setup.mig_parted.get(name) if setup.mig_parted is not None else None
    if entries is None and name == DEFAULT_MIG_CONFIG:
        # mig-manager's default needs no ConfigMap to be understood: MIG off on every GPU.
        entries = (MigPartedEntry(None, (), False, {}),)
    if entries is None and setup.mig_parted is None:
        raise _NodeSkipped(f"MIG configuration {name} is named but no mig-parted ConfigMap is in the input")
    if entries is None:
        raise _NodeSkipped(f"MIG configuration {name} is not in {setup.mig_source}")
    geometry = geometry_for(model.key)

    def layout(index: int) -> tuple[bool, tuple[MigPlacement, ...]]:
        applying = []
        for e in entries:
            fits = matches(model.key, e.device_filter)
            if fits is None:
                raise _NodeSkipped(f"MIG configuration {name} filters devices by PCI ID, and the IDs of {model.key} "
                                   "are not known to gpufleet")
            if fits and (e.devices is None or index in e.devices):
                applying.append(e)
        if not applying:
            raise _NodeSkipped(f"MIG configuration {name} says nothing about GPU {index} ({model.key})")
        entry = applying[-1]
        if not entry.mig_enabled:
            return False, ()
        if geometry is None:
            raise _NodeSkipped(f"MIG configuration {name} enables MIG on {model.key}, which has no MIG")
        try:
            packed = pack_profiles(geometry, entry.mig_devices)
        except MigError as exc:
            raise _NodeSkipped(f"MIG configuration {name}: {exc}") from exc
        if packed is None:
            raise _NodeSkipped(f"MIG configuration {name} asks {model.key} for more instances than it has room for")
        return True, packed

    return layout, f"MIG configuration {name} of {setup.mig_source}"


def _gpu_resources(resources: Mapping[str, int]) -> dict[str, int]:
    return {k: v for k, v in resources.items() if k in (GPU, SHARED_GPU) or k.startswith("nvidia.com/mig-")}


def _inventory(node: Node, setup: _Setup) -> GpuInventory | None:
    product = node.labels.get(PRODUCT_LABEL)
    if not product:
        return None  # not a GPU node (or one GFD has not labelled): nothing to configure
    model = DEFAULT_CATALOG.find(product)
    if model is None:
        raise _NodeSkipped(f"its GPU model {product} is not in gpufleet's catalog")
    sharing, sharing_name = _sharing(node, setup)
    layout, mig_name = _mig_layouts(node, model, setup)
    labelled = parse_int_text(node.labels.get(GPU_COUNT_LABEL) or "")
    if labelled is None or labelled <= 0:
        raise _NodeSkipped(f"it has no {GPU_COUNT_LABEL} label")
    # GFD counts MIG devices, not GPUs, under the single strategy: find the GPU count that gives the label.
    layouts: list[tuple[bool, tuple[MigPlacement, ...]]] = []
    while len(layouts) < 64:
        layouts.append(layout(len(layouts)))
        shown = sum(len(lay) for on, lay in layouts) if sharing.mig_strategy == "single" and layouts[0][0] \
            else len(layouts)
        if shown >= labelled:
            break
    gpus = tuple(PhysicalGpu(i, f"{node.name}/gpu-{i}", model, on,
                             tuple(MigInstance(p, f"{node.name}/gpu-{i}/{p}") for p in lay))
                 for i, (on, lay) in enumerate(layouts))
    if sharing.mig_strategy != "none" and any(g.mig_enabled for g in gpus) and sharing.time_slicing:
        # A replica of a MIG instance is a device the cluster model does not have (whole GPUs only are sliced).
        raise _NodeSkipped(f"{sharing_name} time-slices MIG devices ({mig_name}), which gpufleet does not model")
    try:
        offered = advertised_resources(gpus, sharing)
    except SharingError as exc:
        raise _NodeSkipped(f"{sharing_name} with {mig_name}: {exc}") from exc
    shows = _gpu_resources(node.capacity)
    if offered != shows:
        def text(d: Mapping[str, int]) -> str:
            return ", ".join(f"{k}: {v}" for k, v in sorted(d.items())) or "no GPU resource"
        raise _NodeSkipped(f"{sharing_name} with {mig_name} gives {text(offered)}; the node's capacity shows "
                           f"{text(shows)}")
    return GpuInventory(model=model.key, memory_mib=model.memory_mib, uuids=tuple(g.uuid for g in gpus),
                        mig=tuple(tuple((i.placement, i.uuid) for i in g.mig) for g in gpus), nvlinks={},
                        sharing=sharing)


def configure_nodes(nodes: Sequence[Node], config_maps: Sequence[NvidiaConfigMap], policies: Sequence[ClusterPolicy],
                    problems: Problems) -> int:
    """Give every GPU node without an inventory the one its NVIDIA configuration describes (module doc); how
    many got one. Nothing happens when the input holds no NVIDIA configuration at all."""
    if not config_maps and not policies:
        return 0
    setup = _setup(config_maps, policies, problems)
    skipped: dict[str, list[str]] = {}
    done = 0
    for node in nodes:
        if node.gpus is not None:
            continue
        try:
            inventory = _inventory(node, setup)
        except _NodeSkipped as skip:
            skipped.setdefault(str(skip), []).append(node.name)
            continue
        if inventory is not None:
            node.gpus = inventory
            done += 1
    for reason, names in skipped.items():
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        many = len(names) > 1
        problems.warning(f"node{'s' if many else ''} {shown}: {reason}; read from {'their' if many else 'its'} "
                         "resources and labels instead", kind="Node", name=names[0],
                         fix="check the node's nvidia.com/* labels and the NVIDIA ConfigMaps in the input",
                         code=LEFT_OUT)
    return done
