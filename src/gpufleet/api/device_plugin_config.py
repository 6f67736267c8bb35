"""NVIDIA's k8s-device-plugin configuration file (``version: v1``), read as users already have it (``--config``).

The whole schema of the file is accepted, so an existing ConfigMap moves over unchanged; every field either
changes what the agent does or is named in a warning that says it has no effect here. Errors name the file,
line and field, all at once, and the agent does not start.

What acts::

    version: v1
    flags:
      migStrategy: none|single|mixed
      plugin:
        deviceListStrategy: envvar | [envvar, volume-mounts, cdi-annotations, cdi-cri]
        deviceIDStrategy: uuid|index
        cdiAnnotationPrefix: cdi.k8s.io/
        sharedDevicesAllocationPolicy: distributed|packed
      gdrcopyEnabled / gdsEnabled / mofedEnabled: true      # NVIDIA_GDRCOPY/GDS/MOFED=enabled in containers
      gfd: {noTimestamp: true, machineTypeFile: /sys/class/dmi/id/product_name}
    sharing:
      timeSlicing:
        renameByDefault: false
        failRequestsGreaterThanOne: false
        resources: [{name: nvidia.com/gpu, replicas: 4}]

As in NVIDIA's plugin (``DisableResourceNamingInConfig``), a resource's own ``rename`` and ``devices`` are not
honoured (every device is shared, renamed only by ``renameByDefault``): they are accepted with a warning.
MPS sharing is refused: the agent has no MPS control daemon; keep NVIDIA's plugin (``--inventory-only``).

`gpufleet plan` reads the same file from the device plugin's ConfigMap of a GPU Operator cluster
(:mod:`gpufleet.api.nvidia_config`), for what a node offers only: there the agent's own options are not
mentioned, and MPS is a warning (such a node is read from its resources, MPS is not modelled).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from gpufleet.api import limits
from gpufleet.api.errors import ManifestError, ManifestErrors, Problems
from gpufleet.api.reader import FieldReader
from gpufleet.api.source import Document, InputBudget, load_text, read_file_text
from gpufleet.gpu.sharing import GPU_RESOURCE, DevicePluginConfig

DeviceListStrategy = Literal["envvar", "volume-mounts", "cdi-annotations", "cdi-cri"]
LIST_STRATEGIES: tuple[str, ...] = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
KIND = "device-plugin config"
DEFAULT_MACHINE_TYPE_FILE = "/sys/class/dmi/id/product_name"


class DpConfigError(ManifestErrors):
    """The config file is invalid; ``errors`` lists every problem with its file, line, field and fix."""


@dataclass(frozen=True, slots=True)
class PluginOptions:
    """How Allocate answers and how devices are chosen when the scheduler did not choose."""

    device_list_strategy: tuple[str, ...] = ("envvar",)
    device_id_strategy: Literal["uuid", "index"] = "uuid"
    cdi_annotation_prefix: str = "cdi.k8s.io/"
    shared_allocation_policy: Literal["distributed", "packed"] = "distributed"
    gdrcopy: bool = False
    gds: bool = False
    mofed: bool = False


@dataclass(frozen=True, slots=True)
class AgentDeviceConfig:
    """Everything the config file decides, with NVIDIA's defaults."""

    sharing: DevicePluginConfig = field(default_factory=DevicePluginConfig)
    plugin: PluginOptions = field(default_factory=PluginOptions)
    no_timestamp: bool = False
    machine_type_file: str = DEFAULT_MACHINE_TYPE_FILE
    source: str | None = None  # the file it came from; None: defaults (or the fake machine's own sharing)
    warnings: tuple[ManifestError, ...] = ()
    mps: bool = False  # MPS sharing configured (read for `plan` only: the node agent refuses it)
    # Where each time-sliced resource's replicas are written (field path, line): a limit that depends on the
    # machine (devices per node) is only checked once the machine is known, and must still point at the field.
    replicas_at: Mapping[str, tuple[str, int]] = field(default_factory=dict)


_TOP = ("version", "flags", "resources", "sharing", "imex")
_FLAGS = ("migStrategy", "failOnInitError", "nvidiaDriverRoot", "nvidiaDevRoot", "mpsRoot", "gdrcopyEnabled",
          "gdsEnabled", "mofedEnabled", "useNodeFeatureAPI", "deviceDiscoveryStrategy", "plugin", "gfd")
_PLUGIN = ("passDeviceSpecs", "deviceListStrategy", "deviceIDStrategy", "cdiAnnotationPrefix", "nvidiaCTKPath",
           "containerDriverRoot", "sharedDevicesAllocationPolicy", "nvidiaDevRoot")
_GFD = ("oneshot", "noTimestamp", "sleepInterval", "outputFile", "machineTypeFile")
_SHARING = ("timeSlicing", "mps")
_TIME_SLICING = ("renameByDefault", "failRequestsGreaterThanOne", "resources")
_RESOURCE = ("name", "rename", "devices", "replicas")
# Accepted because NVIDIA's file has them, but nothing here reads them: say so, never silently.
_NO_EFFECT = {
    "failOnInitError": "the agent always exits non-zero when NVML or the config fails",
    "nvidiaDriverRoot": "the container runtime mounts the driver", "nvidiaDevRoot": "device nodes are not passed",
    "useNodeFeatureAPI": "labels are written on the Node directly", "deviceDiscoveryStrategy": "NVML is used",
    "passDeviceSpecs": "device nodes are left to the NVIDIA container runtime",
    "nvidiaCTKPath": "no CDI spec is generated here", "containerDriverRoot": "no CDI spec is generated here",
    "oneshot": "the agent keeps labels current", "sleepInterval": "the agent rediscovers on its own period",
    "outputFile": "labels are written on the Node directly",
}


def _unknown(r: FieldReader, known: tuple[str, ...]) -> None:
    if not isinstance(r.value, dict):
        return
    for key in r.value:
        if key not in known:
            r.error(f"unknown field {key}", str(key),
                    fix=f"remove it or fix its spelling; known fields here: {', '.join(known)}")


def _no_effect(r: FieldReader, keys: tuple[str, ...], agent: bool) -> None:
    if not agent:
        return  # what the node agent does with these does not change what a node offers
    for key in keys:
        if key in _NO_EFFECT and r.has(key):
            r.warning(f"{key} has no effect in gpufleet node ({_NO_EFFECT[key]})", key)


def _flags(r: FieldReader, agent: bool) -> tuple[str, PluginOptions, bool, str]:
    defaults = PluginOptions()
    _unknown(r, _FLAGS)
    _no_effect(r, _FLAGS, agent)
    mig = r.enum("migStrategy", ("none", "single", "mixed"), "none")
    if r.has("mpsRoot") and agent:
        r.warning("mpsRoot has no effect: MPS sharing is not supported by gpufleet node", "mpsRoot")
    plugin = r.obj("plugin")
    options = defaults
    if plugin is not None:
        _unknown(plugin, _PLUGIN)
        _no_effect(plugin, _PLUGIN, agent)
        options = PluginOptions(
            device_list_strategy=_list_strategy(plugin),
            device_id_strategy=cast(Any, plugin.enum("deviceIDStrategy", ("uuid", "index"), "uuid")),
            cdi_annotation_prefix=plugin.text("cdiAnnotationPrefix", defaults.cdi_annotation_prefix) or "",
            shared_allocation_policy=cast(Any, plugin.enum("sharedDevicesAllocationPolicy",
                                                           ("distributed", "packed"), "distributed")),
        )
    options = PluginOptions(options.device_list_strategy, options.device_id_strategy, options.cdi_annotation_prefix,
                            options.shared_allocation_policy, gdrcopy=r.flag("gdrcopyEnabled"),
                            gds=r.flag("gdsEnabled"), mofed=r.flag("mofedEnabled"))
    gfd = r.obj("gfd")
    no_timestamp, machine_file = False, DEFAULT_MACHINE_TYPE_FILE
    if gfd is not None:
        _unknown(gfd, _GFD)
        _no_effect(gfd, _GFD, agent)
        no_timestamp = gfd.flag("noTimestamp")
        machine_file = gfd.text("machineTypeFile", machine_file) or machine_file
    return mig, options, no_timestamp, machine_file


def _list_strategy(r: FieldReader) -> tuple[str, ...]:
    raw = r.raw("deviceListStrategy")
    if raw is None:
        return ("envvar",)
    values = [raw] if isinstance(raw, str) else raw
    if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
        r.error("expected a strategy or a list of strategies", "deviceListStrategy",
                fix=f"use one or more of {', '.join(LIST_STRATEGIES)}")
        return ("envvar",)
    bad = [v for v in values if v not in LIST_STRATEGIES]
    if bad:
        r.error(f"unknown device list strategy {', '.join(map(repr, bad))}", "deviceListStrategy",
                fix=f"use one or more of {', '.join(LIST_STRATEGIES)}")
        return ("envvar",)
    return tuple(dict.fromkeys(values))


def _time_slicing(r: FieldReader, mig_strategy: str, at: dict[str, tuple[str, int]], agent: bool
                  ) -> tuple[dict[str, int], bool, bool]:
    """The replicas per resource (``at`` gets where each is written), renameByDefault, failRequestsGreaterThanOne.

    More than 64 replicas is refused where the node agent reads its --config (it makes a device per replica);
    for what a node offers (``agent`` False: plan, validate) it is only a warning, as NVIDIA's plugin has no such
    limit, below the devices a node may advertise (4,096), which bounds what a plan makes."""
    _unknown(r, _TIME_SLICING)
    replicas: dict[str, int] = {}
    for item in r.items("resources"):
        if not isinstance(item.value, dict):
            item.error("expected a mapping with name and replicas", fix="write - {name: nvidia.com/gpu, replicas: 4}")
            continue
        _unknown(item, _RESOURCE)
        name = item.text("name", required=True)
        # Bounded here, before anything is made per replica: 1,000,000 replicas would otherwise become a million
        # devices on every GPU of every node running the agent.
        count = item.integer("replicas", required=True,
                             maximum=limits.REPLICAS_PER_GPU if agent else limits.DEVICES_PER_NODE)
        if name is None or count is None:
            continue
        if count > limits.MAX_REPLICAS_PER_GPU:
            item.warning(f"{count:,} replicas are more than gpufleet's node agent takes: "
                         f"{limits.REPLICAS_PER_GPU.says()}; NVIDIA's device plugin has no such limit, and plan "
                         "and validate read the config as it is", "replicas")
        if name != GPU_RESOURCE and not name.startswith("nvidia.com/mig-"):
            item.error(f"{name} cannot be time-sliced", "name",
                       fix="name nvidia.com/gpu or a MIG resource such as nvidia.com/mig-1g.10gb")
            continue
        if name.startswith("nvidia.com/mig-") and mig_strategy != "mixed":
            item.error(f"{name} exists only with flags.migStrategy mixed", "name",
                       fix="set flags.migStrategy: mixed, or time-slice nvidia.com/gpu")
            continue
        if count < 2:
            item.error(f"replicas must be at least 2, got {count}", "replicas",
                       fix="use 2 or more, or remove the entry to stop sharing")
            continue
        if name in replicas:
            item.error(f"{name} is listed twice", "name", fix="keep one entry per resource")
            continue
        for key in ("rename", "devices"):
            if item.has(key):
                item.warning(f"{key} is not honoured (NVIDIA's plugin ignores it too): every device of {name} is "
                             "shared, renamed only by renameByDefault", key)
        replicas[name] = count
        at[name] = item.where("replicas")
    return replicas, r.flag("renameByDefault"), r.flag("failRequestsGreaterThanOne")


def config_from_text(text: str, file: str) -> tuple[AgentDeviceConfig, Problems]:
    problems = Problems()
    docs = load_text(text, file, problems)
    if problems.errors:
        return AgentDeviceConfig(source=file), problems
    if len(docs) != 1 or not isinstance(docs[0].data, dict):
        problems.error("expected one YAML mapping (version: v1, flags: ..., sharing: ...)", file=file,
                       line=docs[0].line if docs else 1, fix="see NVIDIA's device plugin configuration format")
        return AgentDeviceConfig(source=file), problems
    return read_config(docs[0], problems), problems


def read_config(doc: Document, problems: Problems, *, for_node_agent: bool = True, kind: str = KIND,
                name: str | None = None) -> AgentDeviceConfig:
    """The config in ``doc`` (one YAML mapping); problems go to ``problems``, labelled ``kind``/``name``.

    ``for_node_agent`` False reads it for what a node offers (`gpufleet plan`): the agent's own options are
    not mentioned, and MPS sharing is a warning rather than an error."""
    file = doc.file
    agent = for_node_agent
    before = len(problems.warnings)
    r = FieldReader(doc, problems, kind=kind, name=name)
    _unknown(r, _TOP)
    version = r.text("version", "v1")
    if version != "v1":
        r.error(f"unsupported version {version!r}", "version", fix="write version: v1")
    mig, options, no_timestamp, machine_file = "none", PluginOptions(), False, DEFAULT_MACHINE_TYPE_FILE
    flags = r.obj("flags")
    if flags is not None:
        mig, options, no_timestamp, machine_file = _flags(flags, agent)
    if r.has("resources") and agent:
        r.warning("resources has no effect (NVIDIA's plugin ignores custom resource names too)", "resources")
    if r.has("imex") and agent:
        r.warning("imex has no effect: IMEX channels are not handed out by gpufleet node", "imex")
    replicas: dict[str, int] = {}
    replicas_at: dict[str, tuple[str, int]] = {}
    rename, fail_gt1, uses_mps = False, False, False
    sharing = r.obj("sharing")
    if sharing is not None:
        _unknown(sharing, _SHARING)
        mps = sharing.obj("mps")
        uses_mps = bool(mps is not None and mps.value.get("resources"))
        if uses_mps and not agent:
            sharing.warning("MPS sharing is not modelled by gpufleet: its nodes are read from their resources "
                            "and labels", "mps")
        elif mps is not None and mps.value.get("resources"):
            sharing.error("MPS sharing is not supported by gpufleet node", "mps",
                          fix="use sharing.timeSlicing, or keep NVIDIA's device plugin and run the agent with "
                              "--inventory-only")
        ts = sharing.obj("timeSlicing")
        if ts is not None:
            replicas, rename, fail_gt1 = _time_slicing(ts, mig, replicas_at, agent)
    config = AgentDeviceConfig(
        sharing=DevicePluginConfig(mig_strategy=cast(Any, mig), time_slicing=replicas, rename_by_default=rename,
                                   fail_requests_greater_than_one=fail_gt1),
        plugin=options, no_timestamp=no_timestamp, machine_type_file=machine_file, source=file,
        warnings=tuple(problems.warnings[before:]),
        mps=uses_mps, replicas_at=replicas_at)
    return config


def load_device_config(path: str) -> AgentDeviceConfig:
    """The config of ``path``; raises :class:`DpConfigError` listing every error (warnings ride along).

    The file is read as the manifest reader reads its files (:func:`gpufleet.api.source.read_file_text`): a
    regular file only (a FIFO would block the agent, ``/dev/zero`` never ends), at most 1 MiB (a ConfigMap's
    own limit), UTF-8."""
    problems = Problems()
    budget = InputBudget(limits.MAX_CONFIG_BYTES, limit="the limit on a device-plugin config (a ConfigMap holds "
                         "at most 1 MiB)")
    text = read_file_text(path, problems, budget, skip_irregular=False)
    if text is None:
        raise DpConfigError(problems.all)
    config, problems = config_from_text(text, path)
    if problems.errors:
        raise DpConfigError(problems.all)
    return config
