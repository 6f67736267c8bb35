"""Documents without ``apiVersion`` and ``kind`` that gpufleet recognises by their shape (issue 29, item 7 and 9).

* **mig-parted's configuration file** (``version: v1`` and ``mig-configs:``), as NVIDIA's repository and the GPU
  Operator's docs give it, not wrapped in a ConfigMap: read as the GPU Operator's ConfigMap
  ``gpu-operator/default-mig-parted-config``, key ``config.yaml`` (the ClusterPolicy's default), which is where
  mig-manager reads it from;
* **the NVIDIA device plugin's configuration file** (``version: v1`` with ``flags:`` or ``sharing:``), the file its
  ``--config-file`` names: read as a device-plugin ConfigMap named after the file, key ``default``, the
  configuration of every Node manifest that has no ``nvidia.com/device-plugin.config`` label and no gpufleet
  inventory, when it is the input's only device-plugin ConfigMap (a ClusterPolicy that names another ConfigMap still
  wins, as in a cluster). It has no effect on NodePools' nodes: their ``spec.sharing`` says how they share. A second
  such file is refused: which of two ConfigMaps configures a node is the ClusterPolicy's to say;
* **what gpufleet itself writes**: ``gpufleet advise``'s ``advice.json``, the ``whatif.json`` beside it and
  ``simulate --json``'s KPIs. They are skipped with a warning that says what they are and what reads them, so that
  ``gpufleet validate`` on a folder ``advise -o`` wrote into does not call them broken manifests.

Each warning says what the document was taken for and how to give it to a cluster.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePath

from gpufleet.api.device_plugin_config import read_config
from gpufleet.api.errors import Problems
from gpufleet.api.nvidia_config import (
    DEFAULT_MIG_PARTED_CONFIG,
    DEVICE_PLUGIN_CONFIG_LABEL,
    MIG_PARTED_KEY,
    NvidiaConfigMap,
    _mig_parted,
    nvidia_shape,
)
from gpufleet.api.objects import GPU_INVENTORY_ANNOTATION, ObjectMeta, SourceRef
from gpufleet.api.reader import FieldReader
from gpufleet.api.source import Document

GPU_OPERATOR_NAMESPACE = "gpu-operator"  # the GPU Operator's namespace in NVIDIA's install guide
DEVICE_PLUGIN_KEY = "default"  # the key of a device-plugin ConfigMap nodes without the label use
ADVICE_KEYS = frozenset({"objective", "given", "proposal"})
_DEVICE_PLUGIN_FILE = ("the NVIDIA device plugin's configuration file (version with flags or sharing), not a "
                       "manifest")


@dataclass(frozen=True, slots=True)
class Recognised:
    """A document read by its shape: an NVIDIA configuration (``config_map``) or one to skip (None)."""

    config_map: NvidiaConfigMap | None = None


def _config_map_name(file: str) -> str:
    """A Kubernetes name from the file's name (``time-slicing.yaml`` -> ``time-slicing``)."""
    stem = PurePath(file).stem.lower() if file and not file.startswith("<") else ""
    name = re.sub(r"[^a-z0-9-]+", "-", stem).strip("-")[:63].strip("-")
    return name or "device-plugin-config"


def recognise(doc: Document, problems: Problems) -> Recognised | None:
    """What a document without ``apiVersion`` or ``kind`` is, when its shape says it; None when it is not one
    gpufleet knows (the caller reports the missing fields)."""
    data = doc.data
    if not isinstance(data, Mapping) or "kind" in data or "apiVersion" in data:
        return None
    shape = nvidia_shape(data)
    before = problems.error_count
    if shape == "mig-parted":
        name = DEFAULT_MIG_PARTED_CONFIG
        meta = ObjectMeta(name, GPU_OPERATOR_NAMESPACE, source=SourceRef(doc.file, doc.line))
        configs = _mig_parted(FieldReader(doc, problems, kind="mig-parted config", name=None))
        if problems.error_count > before:
            return Recognised()  # a configuration with errors is not kept; its errors say why
        problems.warning(
            f"mig-parted's configuration file (version, mig-configs), not a manifest: read as the GPU Operator's "
            f"ConfigMap {GPU_OPERATOR_NAMESPACE}/{name}, key {MIG_PARTED_KEY} ({len(configs)} MIG configuration(s); "
            "a node's label nvidia.com/mig.config picks one)",
            file=doc.file, line=doc.line, kind="mig-parted config",
            fix=f"in a cluster: kubectl create configmap {name} -n {GPU_OPERATOR_NAMESPACE} "
                f"--from-file={MIG_PARTED_KEY}={doc.file}")
        return Recognised(NvidiaConfigMap(meta, mig_parted={MIG_PARTED_KEY: configs}))
    if shape == "device-plugin":
        name = _config_map_name(doc.file)
        meta = ObjectMeta(name, GPU_OPERATOR_NAMESPACE, source=SourceRef(doc.file, doc.line))
        config = read_config(doc, problems, for_node_agent=False, kind="device-plugin config", name=None)
        if problems.error_count > before:
            return Recognised()
        first = next((w for w in problems.warnings
                      if w.kind == "device-plugin config" and w.message.startswith(_DEVICE_PLUGIN_FILE)), None)
        if first is not None:
            # Two ConfigMaps that could configure the same nodes: the GPU Operator uses the one its ClusterPolicy
            # names, and the input has no way to say which file that is.
            problems.error(
                f"a second device-plugin configuration file: {first.file}:{first.line} is one already, and gpufleet "
                "cannot tell which of the two configures the nodes",
                file=doc.file, line=doc.line, kind="device-plugin config",
                fix="give one file; to keep several, wrap each in a ConfigMap (kubectl create configmap NAME "
                    f"-n {GPU_OPERATOR_NAMESPACE} --from-file={DEVICE_PLUGIN_KEY}=FILE) and name the one that "
                    "applies in a ClusterPolicy (spec.devicePlugin.config.name)")
            return Recognised()
        problems.warning(
            f"{_DEVICE_PLUGIN_FILE}: read as device-plugin ConfigMap {GPU_OPERATOR_NAMESPACE}/{name}, key "
            f"{DEVICE_PLUGIN_KEY}, which configures the GPU Nodes of the input that have neither the label "
            f"{DEVICE_PLUGIN_CONFIG_LABEL} nor a {GPU_INVENTORY_ANNOTATION} inventory, when it is the input's only "
            "device-plugin ConfigMap or a ClusterPolicy names it; it does not configure NodePools' nodes (a "
            "NodePool's spec.sharing says how they share)",
            file=doc.file, line=doc.line, kind="device-plugin config",
            fix=f"in a cluster: kubectl create configmap {name} -n {GPU_OPERATOR_NAMESPACE} "
                f"--from-file={DEVICE_PLUGIN_KEY}={doc.file}, and name it in the ClusterPolicy "
                f"(spec.devicePlugin.config.name: {name}, default: {DEVICE_PLUGIN_KEY})")
        mps = frozenset({DEVICE_PLUGIN_KEY}) if config.mps else frozenset()
        return Recognised(NvidiaConfigMap(meta, device_plugin={DEVICE_PLUGIN_KEY: config.sharing}, mps=mps))
    if set(map(str, data)) >= ADVICE_KEYS:
        problems.warning("gpufleet advise's advice (-o json, advice.json), not a manifest: skipped", file=doc.file,
                         line=doc.line, fix="nothing to do; gpufleet dashboard --simulation whatif.json shows it")
        return Recognised()
    if isinstance(data.get("runs"), list):
        what = ("gpufleet advise's what-if (whatif.json)" if "advice" in data
                else "gpufleet simulate's KPIs (--json, -o json)")
        problems.warning(f"{what}, not a manifest: skipped", file=doc.file, line=doc.line,
                         fix=f"nothing to do; gpufleet dashboard --simulation {doc.file} shows it")
        return Recognised()
    return None
