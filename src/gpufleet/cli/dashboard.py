"""``gpufleet dashboard``: the fleet, the queues, the workloads and the simulator in a browser.

One source at a time: manifests (as ``gpufleet plan`` sees them), a live cluster (the scheduler's informer cache,
read-only, updating the pages as objects change), or a simulation result (``simulate --json``). The server and
the pages: :mod:`gpufleet.web`. Registered in :mod:`gpufleet.cli.main`.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer

from gpufleet.cli import console
from gpufleet.cli.options import EXIT_FINDINGS, Strict, examples, usage_error

if TYPE_CHECKING:
    from gpufleet.web.contract import DataSource

EPILOG = examples(
    "# the case study's cluster and a snapshot of running and waiting work, as plan sees them",
    "gpufleet dashboard examples/casestudy examples/plan/snapshot.yaml",
    "# a live cluster (the current kubeconfig context), read-only; pages update as objects change",
    "gpufleet dashboard --kubeconfig ~/.kube/config",
    "# a simulation result (from: gpufleet simulate --json sim.json): KPIs before/after, a replay",
    "gpufleet dashboard --simulation sim.json",
    "# another port (the default address is loopback only)",
    "gpufleet dashboard examples/casestudy --address 127.0.0.1:9090",
)


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6); a usage error for anything else."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]") if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isascii() or not port.isdigit() or int(port) > 65535 or (
            ":" in host and not text.startswith("[")):
        raise usage_error(f"{text!r} is not HOST:PORT, e.g. 127.0.0.1:8080 or [::1]:8080", "--address")
    return host, int(port)


def dashboard(
    files: Annotated[list[str] | None, typer.Argument(
        help="Manifest files or folders (- reads stdin): show the cluster as gpufleet plan sees it. None: a live "
             "cluster, or --simulation.", metavar="FILE", show_default=False)] = None,
    kubeconfig: Annotated[str | None, typer.Option(
        "--kubeconfig", help="kubeconfig file of the live cluster (default: $KUBECONFIG, in-cluster, then "
        "~/.kube/config).")] = None,
    context: Annotated[str | None, typer.Option("--context", help="kubeconfig context to use.")] = None,
    simulation: Annotated[Path | None, typer.Option(
        "--simulation", metavar="RESULT.json", help="A result of gpufleet simulate --json: KPIs before/after, wait "
        "distributions, cost per team, fragmentation over time, a replay.", dir_okay=False)] = None,
    address: Annotated[str, typer.Option(
        "--address", help="Where to listen, HOST:PORT. Loopback by default; any other address lets everyone who can "
        "reach it read what the dashboard shows.")] = "127.0.0.1:8080",
    strict: Strict = False,
) -> None:
    """Serve a read-only dashboard of the fleet (GPUs, MIG slices, replicas, fractions and their holders), the
    queues (quota, borrowing, lending, fair share), the workloads (why each waits) and what-if simulations, with
    its JSON API under /api/ (OpenAPI at /api/openapi.json)."""
    from gpufleet.web.server import Dashboard, is_loopback

    host, port = parse_address(address)
    chosen = [name for name, given in (("FILES", bool(files)), ("--simulation", simulation is not None)) if given]
    if len(chosen) > 1 or (chosen and (kubeconfig or context)):
        raise usage_error("give one source: FILES, --simulation RESULT.json, or a cluster (--kubeconfig/--context)",
                          "--simulation" if simulation is not None else "--kubeconfig")
    source: DataSource
    if simulation is not None:
        source = _simulation_source(simulation)
    elif files:
        source = _files_source(files, strict)
    else:
        source = _live_source(kubeconfig, context)
    try:
        server = Dashboard(source, host, port)
    except OSError as e:
        source.close()
        console.error(f"--address {address}: cannot listen there: {e.strerror or e}")
        raise typer.Exit(EXIT_FINDINGS) from e
    if not is_loopback(host):
        console.warning(f"listening on {host}, not a loopback address: anyone who can reach it can read the "
                        "dashboard (names, queues, placements); there is no authentication")
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server.start()
    console.say(f"gpufleet dashboard of {source.kind} source ({source.title}) at {server.url}/ (Ctrl-C stops it)")
    sys.stdout.flush()
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.stop()
    console.note("dashboard stopped")


def _files_source(files: list[str], strict: bool) -> DataSource:
    from gpufleet.cli.validate import load, print_problems
    from gpufleet.web.source_files import FilesSource

    manifests = load(files, strict)
    print_problems(manifests)
    # A path that could not be read at all (missing, unreadable, not UTF-8, over the input limit) is refused as
    # validate and plan refuse it: serving the rest would show a cluster without it. An error inside a document
    # has a line; a folder without manifests is a warning, as for validate.
    unread = [e for e in manifests.problems.errors if e.line is None and e.kind is None]
    if unread:
        console.error(f"{len(unread)} input path(s) could not be read ({', '.join(str(e.file) for e in unread)}): "
                      "no dashboard served")
        raise typer.Exit(EXIT_FINDINGS)
    if manifests.problems.errors:
        console.warning(f"{len(manifests.problems.errors)} error(s) in the input: the objects in error are left out "
                        "of the dashboard, which lists the errors on every page")
    return FilesSource(manifests, ", ".join(files))


def _simulation_source(path: Path) -> DataSource:
    from gpufleet.web.source_simulation import SimulationResultError, SimulationSource, load_result

    try:
        return SimulationSource(load_result(path))
    except SimulationResultError as e:
        console.error(str(e))
        raise typer.Exit(EXIT_FINDINGS) from None


def _live_source(kubeconfig: str | None, context: str | None) -> DataSource:
    from gpufleet.k8s.client import KubeClient
    from gpufleet.k8s.config import ClusterConfig
    from gpufleet.k8s.errors import ConfigError, KubeError
    from gpufleet.web.source_live import LiveSource

    try:
        cluster = ClusterConfig.load(kubeconfig, context=context)
    except ConfigError as e:  # no kubeconfig, or one that does not parse: the input, not the command line
        console.error(str(e))
        raise typer.Exit(EXIT_FINDINGS) from e
    client = KubeClient(cluster, user_agent="gpufleet-dashboard")
    try:
        return LiveSource(client, title=cluster.host, owns_client=True)
    except ConfigError as e:
        client.close()
        console.error(str(e))
        raise typer.Exit(EXIT_FINDINGS) from e
    except (KubeError, TimeoutError) as e:
        client.close()
        console.error(f"reading the cluster failed: {e}")
        raise typer.Exit(EXIT_FINDINGS) from e
