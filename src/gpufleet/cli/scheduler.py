"""``gpufleet scheduler``: run the live scheduler against a Kubernetes API server until SIGTERM.

Exit codes as every command's (:mod:`gpufleet.cli.options`): 2 for the command line itself (an unknown option, a
bad ``--log-level``), 1 for what it points to: a configuration file or kubeconfig that cannot be read or is
invalid, a port already in use, an API server that does not answer.
Registered in :mod:`gpufleet.cli.main` as ``app.command("scheduler")(scheduler)``.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import uuid
from types import FrameType
from typing import Annotated

import typer

from gpufleet.cli import console
from gpufleet.cli.options import EXIT_FINDINGS, usage_error


def _identity() -> str:
    # The Lease holder must be unique per replica: the pod name in a cluster, else host plus a random tail.
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def scheduler(
    kubeconfig: Annotated[str | None, typer.Option(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, in-cluster, then ~/.kube/config).")] = None,
    context: Annotated[str | None, typer.Option("--context", help="kubeconfig context to use.")] = None,
    scheduler_name: Annotated[str | None, typer.Option(
        "--scheduler-name", help="Schedule pods whose spec.schedulerName is this (overrides the config file).")] = None,
    config: Annotated[str | None, typer.Option("--config", help="Scheduler configuration file (YAML).")] = None,
    leader_elect: Annotated[bool, typer.Option(
        "--leader-elect", help="Run leader election on a Lease; only the leader schedules.")] = False,
    log_level: Annotated[str, typer.Option("--log-level", help="debug, info, warning or error.")] = "info",
) -> None:
    """Schedule pods on a live cluster: GPU-aware placement, Kueue queues and quotas, gangs, preemption."""
    import dataclasses

    from gpufleet.k8s.client import KubeClient
    from gpufleet.k8s.config import ClusterConfig
    from gpufleet.k8s.errors import ConfigError, KubeError
    from gpufleet.k8s.logs import setup_logging
    from gpufleet.live.scheduler import Scheduler
    from gpufleet.live.settings import SettingsError, load_settings

    if log_level.lower() not in ("debug", "info", "warning", "error"):
        raise usage_error(f"{log_level!r} is not one of debug, info, warning, error", "--log-level")
    try:
        settings = load_settings(config)
    except SettingsError as e:
        for problem in e.errors:
            console.error(str(problem))
        console.error(f"{len(e.errors)} error(s) in the configuration file {config}: the scheduler did not start")
        raise typer.Exit(EXIT_FINDINGS) from e
    if scheduler_name:
        settings = dataclasses.replace(settings, scheduler_name=scheduler_name)
    setup_logging(log_level)
    try:
        cluster = ClusterConfig.load(kubeconfig, context=context)
    except ConfigError as e:  # no kubeconfig, or one that does not parse
        console.error(str(e))
        raise typer.Exit(EXIT_FINDINGS) from e
    client = KubeClient(cluster, user_agent=f"gpufleet-scheduler/{settings.scheduler_name}")
    try:
        instance = Scheduler(client, settings, identity=_identity(), leader_elect=leader_elect, own_process=True)
    except (OSError, ValueError) as e:  # a port in use, an unreadable webhook certificate
        console.error(str(e))
        raise typer.Exit(EXIT_FINDINGS) from e
    except ConfigError as e:  # the queue API queues.source asks for is not served
        client.close()
        console.error(str(e))
        raise typer.Exit(EXIT_FINDINGS) from e
    except KubeError as e:  # the API server did not answer discovery: a restart tries again
        client.close()
        console.error(f"cannot reach the API server: {e}")
        raise typer.Exit(EXIT_FINDINGS) from e

    def on_signal(signum: int, frame: FrameType | None) -> None:
        instance.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        code = instance.run()
    finally:
        client.close()
    sys.stdout.flush()
    if code:
        raise typer.Exit(code)
