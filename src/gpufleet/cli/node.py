"""``gpufleet node``: the node agent. ``discover`` prints what it would publish; ``agent`` runs it on a node.

Registered in :mod:`gpufleet.cli.main` as ``app.add_typer(node_app, name="node")``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from gpufleet.cli import console
from gpufleet.cli.options import EXIT_FINDINGS, examples, new_app, usage_error

if TYPE_CHECKING:
    from gpufleet.node.dpconfig import AgentDeviceConfig

node_app = new_app("The node agent: GPU discovery, GFD labels, the gpufleet.io/gpus inventory, kubelet device "
                   "plugins that carry out the scheduler's device choice, XID health and GPU metrics.",
                   epilog=examples("gpufleet node discover --nvml fake:examples/node/dgx-a100.yaml",
                                   "gpufleet node agent --node-name $NODE_NAME"))


class DocumentFormat(StrEnum):
    json = "json"
    yaml = "yaml"


Nvml = Annotated[str, typer.Option(
    "--nvml", metavar="real|fake:MACHINE",
    help="NVML backend: real (nvidia-ml-py) or fake:MACHINE, a YAML file holding one gpufleet.io/v1alpha1 NodePool "
         "(its first node is the machine; append {\"gpu\": N, \"xid\": X} lines to MACHINE.events for faults).")]
DeviceConfig = Annotated[str | None, typer.Option(
    "--config", metavar="DPCONFIG",
    help="NVIDIA k8s-device-plugin config file (version: v1; migStrategy, timeSlicing, deviceListStrategy, ...); "
         "overrides the machine's own sharing settings.")]


def _check_nvml(spec: str) -> None:
    from gpufleet.node.backends import check_spec

    problem = check_spec(spec)
    if problem is not None:
        raise usage_error(problem, "--nvml")


def _load_config(path: str | None) -> AgentDeviceConfig | None:
    """The --config file (None without one); every problem printed with file, line and field, then exit 1."""
    from gpufleet.node.dpconfig import DpConfigError, load_device_config

    if path is None:
        return None
    try:
        config = load_device_config(path)
    except DpConfigError as e:
        for problem in e.errors:
            (console.error if problem.severity == "error" else console.warning)(str(problem))
        console.error(f"{sum(p.severity == 'error' for p in e.errors)} error(s) in {path}")
        raise typer.Exit(EXIT_FINDINGS) from e
    for warning in config.warnings:
        console.warning(str(warning))
    return config


@node_app.command("discover", epilog=examples(
    "# on a GPU node",
    "gpufleet node discover",
    "# a described machine, under an existing device-plugin ConfigMap's config",
    "gpufleet node discover --nvml fake:examples/node/dgx-a100.yaml --config examples/node/time-slicing.yaml -o yaml",
))
def discover_command(
    nvml: Nvml = "real",
    config: DeviceConfig = None,
    output: Annotated[DocumentFormat, typer.Option(
        "-o", "--output", case_sensitive=False, metavar="json|yaml",
        help="Output format of the document {labels, annotations, resources}.")] = DocumentFormat.json,
) -> None:
    """Print what the agent would publish: GFD labels, the gpufleet.io/gpus annotation and the resources."""
    from gpufleet.node.backends import open_backend
    from gpufleet.node.contract import NvmlError
    from gpufleet.node.discovery import DiscoveryError, discover
    from gpufleet.node.dpconfig import AgentDeviceConfig

    _check_nvml(nvml)
    loaded = _load_config(config)
    device_config = loaded or AgentDeviceConfig()
    try:
        opened = open_backend(nvml, machine_type_file=device_config.machine_type_file)
    except NvmlError as e:
        console.error(str(e))
        raise typer.Exit(EXIT_FINDINGS) from e
    try:
        # Without --config the machine's own sharing holds (a fake MACHINE's NodePool; NVIDIA's defaults on NVML).
        found = discover(opened.backend.machine(), loaded or AgentDeviceConfig(sharing=opened.sharing))
    except (NvmlError, DiscoveryError) as e:
        console.error(str(e))
        raise typer.Exit(EXIT_FINDINGS) from e
    finally:
        opened.backend.close()
    console.emit(found.document(), output.value)
