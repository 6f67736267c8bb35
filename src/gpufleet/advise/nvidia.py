"""A proposal in NVIDIA's own configuration files, as GPU Operator users apply them.

* **mig-parted**: one configuration per MIG mix (``version: v1``, ``mig-configs``), named ``all-<mix>``, each
  ``devices: all`` with ``mig-enabled: true`` and its ``mig-devices``; ``all-disabled`` for every node that keeps
  MIG off. Held in the ConfigMap ``gpufleet-mig-parted-config`` (key ``config.yaml``), which mig-manager reads.
* **device plugin**: ``default`` (``flags.migStrategy: mixed``, nothing shared: whole GPUs and MIG instances)
  and ``time-sliced-<r>`` (``sharing.timeSlicing`` with ``renameByDefault: true``, so replicas are
  ``nvidia.com/gpu.shared`` and never an ambiguous ``nvidia.com/gpu``, the guide's advice, and
  ``failRequestsGreaterThanOne: true``), one key each in the ConfigMap ``gpufleet-device-plugin-config``.
* **node labels**: ``nvidia.com/mig.config`` and ``nvidia.com/device-plugin.config`` select the two per node;
  ``gpu-mode`` (exclusive, mig, time-sliced) is what the ResourceFlavors select.
* **ClusterPolicy**: a merge patch that points the operator at the two ConfigMaps, with ``mig.strategy:
  mixed`` (whole GPUs and MIG instances side by side).

The same names are used by the NodePools a proposal writes, so the files describe exactly what was simulated;
``gpufleet.api.nvidia_config`` reads them back (tests/advise: the round trip).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from gpufleet.advise.contract import NodeConfig
from gpufleet.advise.fleet import MODE_LABEL
from gpufleet.api.nvidia_config import DEVICE_PLUGIN_CONFIG_LABEL, MIG_CONFIG_LABEL, MIG_PARTED_KEY
from gpufleet.gpu.constants import GPU
from gpufleet.gpu.sharing import DevicePluginConfig

NAMESPACE = "gpu-operator"
MIG_PARTED_CONFIG_MAP = "gpufleet-mig-parted-config"
DEVICE_PLUGIN_CONFIG_MAP = "gpufleet-device-plugin-config"
CLUSTER_POLICY = "cluster-policy"  # the GPU Operator's Helm chart names its ClusterPolicy so
MIG_DISABLED = "all-disabled"
PLUGIN_DEFAULT = "default"
MAX_LABEL_VALUE = 63


def mig_config_name(config: NodeConfig) -> str:
    """The mig-parted configuration a node of ``config`` is labelled with."""
    if config.mode != "mig":
        return MIG_DISABLED
    name = "all-" + "-".join(f"{p}-x{n}" for p, n in config.mig).replace("+", ".")
    if len(name) > MAX_LABEL_VALUE:  # a label value has at most 63 characters
        name = "all-" + "-".join(f"{n}x{p.split('.')[0]}" for p, n in config.mig)
    return name


def device_plugin_config_name(config: NodeConfig) -> str:
    return f"time-sliced-{config.replicas}" if config.mode == "time-sliced" else PLUGIN_DEFAULT


def mode_label(config: NodeConfig) -> str:
    return config.mode


def node_labels(config: NodeConfig) -> dict[str, str]:
    """The labels that select a node's MIG and device-plugin configurations and its flavor."""
    return {MIG_CONFIG_LABEL: mig_config_name(config), DEVICE_PLUGIN_CONFIG_LABEL: device_plugin_config_name(config),
            MODE_LABEL: mode_label(config)}


def sharing_of(config: NodeConfig) -> DevicePluginConfig:
    """What the device plugin does on a node of ``config`` (as the cluster model and NodePools read it)."""
    if config.mode == "time-sliced":
        return DevicePluginConfig("none", {GPU: config.replicas}, rename_by_default=True,
                                  fail_requests_greater_than_one=True)
    if config.mode == "mig":
        return DevicePluginConfig("mixed")
    return DevicePluginConfig("none")


def mig_parted_config(configs: Iterable[NodeConfig]) -> dict[str, Any]:
    """mig-parted's file: ``all-disabled`` and one configuration per MIG mix."""
    out: dict[str, Any] = {MIG_DISABLED: [{"devices": "all", "mig-enabled": False}]}
    for config in sorted(set(configs)):
        if config.mode == "mig":
            out[mig_config_name(config)] = [{"devices": "all", "mig-enabled": True,
                                             "mig-devices": {p: n for p, n in config.mig}}]
    return {"version": "v1", "mig-configs": out}


def device_plugin_configs(configs: Iterable[NodeConfig]) -> dict[str, dict[str, Any]]:
    """The device plugin's files by name: ``default`` and one per replica count."""
    out: dict[str, dict[str, Any]] = {PLUGIN_DEFAULT: {"version": "v1", "flags": {"migStrategy": "mixed"}}}
    for config in sorted(set(configs)):
        if config.mode == "time-sliced":
            out[device_plugin_config_name(config)] = {
                "version": "v1", "flags": {"migStrategy": "mixed"},
                "sharing": {"timeSlicing": {"renameByDefault": True, "failRequestsGreaterThanOne": True,
                                            "resources": [{"name": GPU, "replicas": config.replicas}]}}}
    return out


def _yaml(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


def config_map(name: str, data: Mapping[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NAMESPACE},
            "data": {k: _yaml(v) for k, v in data.items()}}


def mig_parted_config_map(configs: Iterable[NodeConfig]) -> dict[str, Any]:
    return config_map(MIG_PARTED_CONFIG_MAP, {MIG_PARTED_KEY: mig_parted_config(configs)})


def device_plugin_config_map(configs: Iterable[NodeConfig]) -> dict[str, Any]:
    return config_map(DEVICE_PLUGIN_CONFIG_MAP, device_plugin_configs(configs))


def cluster_policy_patch() -> dict[str, Any]:
    """A merge patch for the GPU Operator's ClusterPolicy (``kubectl patch clusterpolicy cluster-policy
    --type merge --patch-file``), also a ClusterPolicy document gpufleet reads."""
    return {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": CLUSTER_POLICY},
            "spec": {"mig": {"strategy": "mixed"},
                     "devicePlugin": {"config": {"name": DEVICE_PLUGIN_CONFIG_MAP, "default": PLUGIN_DEFAULT}},
                     "migManager": {"config": {"name": MIG_PARTED_CONFIG_MAP, "default": MIG_DISABLED}}}}


def label_script(labels: Mapping[str, Mapping[str, str]], what: str | None = None) -> str:
    """``kubectl label`` commands that give each node its labels (mig-manager then reconfigures it); ``what``:
    what the labels say, when they are not the MIG and device-plugin configuration."""
    if what is None:
        lines = ["#!/bin/sh",
                 "# Written by gpufleet advise: each node's MIG and device-plugin configuration and GPU mode.",
                 "# mig-manager drains and reconfigures a node whose nvidia.com/mig.config changes.", "set -e"]
    else:
        lines = ["#!/bin/sh", f"# Written by gpufleet advise: {what}.", "set -e"]
    for node, values in sorted(labels.items()):
        pairs = " ".join(f"{k}={v}" for k, v in sorted(values.items()))
        lines.append(f"kubectl label node {node} {pairs} --overwrite")
    return "\n".join(lines) + "\n"
