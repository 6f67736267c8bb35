"""``gpufleet node``: the node agent. ``discover`` prints what it would publish; ``agent`` runs it on a node.

Registered in :mod:`gpufleet.cli.main` as ``app.add_typer(node_app, name="node")``.
"""

from __future__ import annotations

import os
import signal
from enum import StrEnum
from types import FrameType
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


@node_app.command("agent", epilog=examples(
    "# in the DaemonSet (deploy/node-agent.yaml)",
    "gpufleet node agent --node-name $NODE_NAME --config /etc/gpufleet-node/config.yaml",
    "# on a workstation: a described machine, sockets in a scratch folder",
    "gpufleet node agent --node-name dgx-a100-0 --nvml fake:examples/node/dgx-a100.yaml --device-plugin-dir /tmp/dp",
    "# DRA: ResourceSlices of gpu.nvidia.com instead of device plugins",
    "gpufleet node agent --node-name $NODE_NAME --dra",
))
def agent_command(
    node_name: Annotated[str, typer.Option("--node-name", help="This node's name (the DaemonSet passes "
                                                               "spec.nodeName).", envvar="NODE_NAME")],
    kubeconfig: Annotated[str | None, typer.Option(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, in-cluster, then ~/.kube/config).")] = None,
    nvml: Nvml = "real",
    config: DeviceConfig = None,
    device_plugin_dir: Annotated[str, typer.Option(
        "--device-plugin-dir", help="The kubelet's device-plugin folder (kubelet.sock and the plugins' sockets).")
    ] = "/var/lib/kubelet/device-plugins",
    pod_resources_socket: Annotated[str, typer.Option(
        "--pod-resources-socket", help="The kubelet's PodResources API socket (checks which pod got which devices).")
    ] = "/var/lib/kubelet/pod-resources/kubelet.sock",
    metrics_bind_address: Annotated[str, typer.Option(
        "--metrics-bind-address", help="GPU metrics (dcgm-exporter names) on host:port or :port; 0 disables.")
    ] = ":9400",
    health_probe_bind_address: Annotated[str, typer.Option(
        "--health-probe-bind-address", help="/healthz and /readyz on host:port or :port; 0 disables.")] = ":9401",
    inventory_only: Annotated[bool, typer.Option(
        "--inventory-only", envvar="GPUFLEET_INVENTORY_ONLY",
        help="Publish labels, inventory and metrics but serve no device plugin (clusters that keep NVIDIA's).")
    ] = False,
    dra: Annotated[bool, typer.Option(
        "--dra", envvar="GPUFLEET_DRA",
        help="Publish this node's GPUs as DRA ResourceSlices of NVIDIA's driver gpu.nvidia.com (Kubernetes 1.34+) "
             "instead of serving device plugins; never both on one node.")] = False,
    gpu_memory_report_period: Annotated[float, typer.Option(
        "--gpu-memory-report-period", min=0.0, envvar="GPUFLEET_GPU_MEMORY_REPORT_PERIOD",
        help="Seconds between readings of the GPU memory each pod uses of a device it holds alone, written on the "
             "pod as gpufleet.io/gpu-memory-used when its peak grew (the scheduler's memory-aware sharing reads "
             "it); 0 disables.")] = 15.0,
    log_level: Annotated[str, typer.Option("--log-level", help="debug, info, warning or error.")] = "info",
) -> None:
    """Run the node agent until SIGTERM: labels and inventory on the Node, kubelet device plugins (or, with --dra,
    DRA ResourceSlices), XID health."""
    from gpufleet.k8s.client import KubeClient
    from gpufleet.k8s.config import ClusterConfig
    from gpufleet.k8s.errors import ConfigError
    from gpufleet.k8s.logs import setup_logging
    from gpufleet.k8s.serving import parse_address
    from gpufleet.node.agent import AgentOptions, NodeAgent
    from gpufleet.node.backends import open_backend
    from gpufleet.node.contract import NvmlError
    from gpufleet.node.discovery import DiscoveryError
    from gpufleet.node.dpconfig import DEFAULT_MACHINE_TYPE_FILE
    from gpufleet.node.health import HealthPolicy, HealthPolicyError

    if log_level.lower() not in ("debug", "info", "warning", "error"):
        raise usage_error(f"{log_level!r} is not one of debug, info, warning, error", "--log-level")
    _check_nvml(nvml)
    for flag, value in (("--metrics-bind-address", metrics_bind_address),
                        ("--health-probe-bind-address", health_probe_bind_address)):
        if value != "0" and parse_address(value) is None:
            raise usage_error(f"{value!r} is not a listen address (host:port, :port, or 0 to disable)", flag)
    if not node_name.strip():
        raise usage_error("the node name is empty", "--node-name")
    if dra and inventory_only:
        # Inventory-only means NVIDIA's device plugin serves this node: DRA beside it would offer every GPU twice.
        raise usage_error("--dra and --inventory-only together would offer this node's GPUs through DRA and through "
                          "NVIDIA's device plugin at once; remove NVIDIA's device plugin from the node and drop "
                          "--inventory-only (GPUFLEET_INVENTORY_ONLY=false)", "--dra")
    try:
        policy = HealthPolicy.from_environment(os.environ)
    except HealthPolicyError as e:
        console.error(str(e))
        raise typer.Exit(EXIT_FINDINGS) from e
    loaded = _load_config(config)
    setup_logging(log_level)
    try:
        cluster = ClusterConfig.load(kubeconfig)
    except ConfigError as e:
        console.error(str(e))
        raise typer.Exit(EXIT_FINDINGS) from e
    options = AgentOptions(
        node_name=node_name, device_plugin_dir=device_plugin_dir, pod_resources_socket=pod_resources_socket,
        metrics_bind_address=None if metrics_bind_address == "0" else metrics_bind_address,
        health_probe_bind_address=None if health_probe_bind_address == "0" else health_probe_bind_address,
        inventory_only=inventory_only, health=policy, dra=dra,
        memory_report_period=gpu_memory_report_period or None)
    client = KubeClient(cluster, user_agent=f"gpufleet-node/{node_name}")
    machine_type_file = loaded.machine_type_file if loaded else DEFAULT_MACHINE_TYPE_FILE
    agent = NodeAgent(client, options, loaded,
                      lambda holders: open_backend(nvml, holders=holders, machine_type_file=machine_type_file))
    try:
        agent.start()
    except (NvmlError, DiscoveryError, OSError, ValueError) as e:
        console.error(str(e))
        agent.stop()
        client.close()
        raise typer.Exit(EXIT_FINDINGS) from e

    def on_signal(signum: int, frame: FrameType | None) -> None:
        agent.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        code = agent.wait()
    finally:
        agent.stop()
        client.close()
    if code:
        raise typer.Exit(code)
