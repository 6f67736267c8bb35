"""``gpufleet snapshot``: write a live cluster's scheduling-relevant objects as manifests ``plan`` reads.

What is taken and what is stripped: :mod:`gpufleet.k8s.snapshot`. Registered in :mod:`gpufleet.cli.main`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpufleet.cli import console
from gpufleet.cli.options import EXIT_FINDINGS, Namespace, examples, usage_error

EPILOG = examples(
    "# everything plan needs, one file per kind, from the current kubeconfig context",
    "gpufleet snapshot -o snap/",
    "# then: gpufleet plan snap/ --until-stable -o wide",
    "# one namespace (other namespaces' running pods are kept: they hold node capacity)",
    "gpufleet snapshot -n research -o research/",
    "# straight into plan, as one YAML stream",
    "gpufleet snapshot --kubeconfig admin.conf --context prod -o -",
)


def snapshot(
    output: Annotated[str, typer.Option(
        "-o", "--output", metavar="DIR",
        help="Folder to write the manifests to (created; one file per kind, one document per object), or - for "
             "one YAML stream on standard output.")],
    namespace: Namespace = None,
    kubeconfig: Annotated[str | None, typer.Option(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, in-cluster, then ~/.kube/config).")] = None,
    context: Annotated[str | None, typer.Option("--context", help="kubeconfig context to use.")] = None,
) -> None:
    """Read a live cluster's Nodes, Pods, workload objects, Kueue and gpufleet queue objects, NVIDIA's GPU
    configuration and Namespaces, and write them as manifests that plan and simulate read. Running pods keep
    their nodes and devices; finished pods and Jobs are left out; secrets never leave the cluster (container env,
    commands and volumes are not written)."""
    from gpufleet.k8s import snapshot as snap
    from gpufleet.k8s.client import KubeClient
    from gpufleet.k8s.config import ClusterConfig
    from gpufleet.k8s.errors import ConfigError, KubeError

    folder = None if output == "-" else Path(output)
    if folder is not None and folder.exists() and not folder.is_dir():
        raise usage_error(f"{output} is not a folder; give a folder to write the manifests to, or - for stdout",
                          "-o")
    try:
        cluster = ClusterConfig.load(kubeconfig, context=context)
    except ConfigError as e:  # no kubeconfig, or one that does not parse: the input, not the command line
        console.error(str(e))
        raise typer.Exit(EXIT_FINDINGS) from e
    try:
        with KubeClient(cluster, user_agent="gpufleet-snapshot") as client:
            taken = snap.take(client, namespace)
    except KubeError as e:
        console.error(f"reading the cluster failed: {e}")
        raise typer.Exit(EXIT_FINDINGS) from e
    for what in taken.skipped:
        console.warning(f"not read: {what}")
    if folder is None:
        console.write(snap.stream(taken))
        total = sum(len(text.encode()) for t in taken.taken for text in snap.documents(t))
    else:
        written = snap.write(taken, folder)
        table = console.make_table(f"snapshot of the cluster in {folder}", "KIND",
                                   console.Column("OBJECTS", justify="right"),
                                   console.Column("LEFT OUT", justify="right"), "FILE")
        for w in written:
            table.add_row(w.kind, str(w.count), str(w.left_out) if w.left_out else "", w.file)
        console.show(table)
        total = sum(w.bytes for w in written)
    problem = snap.over_limits(total, taken.documents)
    if problem is not None:
        console.warning(problem)
