"""`gpufleet demo`: the embedded case study, shown with what gpufleet can do today.

Until the simulator runs it, the demo validates the case study shipped inside the package and shows what its
node pools offer (the resources the device plugin would advertise, per pool) and the ClusterQueues' quotas.
"""

from __future__ import annotations

from collections import Counter
from importlib import resources
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gpufleet.api.kinds import format_amount
from gpufleet.api.manifests import Manifests, load_manifests


def casestudy_dir() -> Path:
    """The case study files inside the installed package."""
    return Path(str(resources.files("gpufleet") / "data" / "casestudy"))


def load_casestudy() -> Manifests:
    folder = casestudy_dir()
    return load_manifests([str(folder / "cluster.yaml"), str(folder / "queues.yaml")])


def run_demo(console: Console) -> None:
    m = load_casestudy()
    for p in m.problems.all:
        console.print(str(p), style="red" if p.severity == "error" else "yellow")
    pools: dict[str, Counter[str]] = {}
    for node in m.nodes:
        c = pools.setdefault(node.pool or "-", Counter())
        c["nodes"] += 1
        for res, amount in node.allocatable.items():
            if res.startswith("nvidia.com/"):
                c[res] += amount
    table = Table(title="Case study: what each node pool offers (as the NVIDIA device plugin advertises it)")
    table.add_column("pool")
    table.add_column("nodes", justify="right")
    table.add_column("GPU resources")
    for pool, c in pools.items():
        gpu = ", ".join(f"{n}x {r}" for r, n in sorted(c.items()) if r != "nodes")
        table.add_row(pool, str(c["nodes"]), gpu)
    console.print(table)
    q = Table(title="ClusterQueues (Kueue v1beta1) in cohort 'company'")
    q.add_column("queue")
    q.add_column("nominal quota (flavor: resource=amount)")
    for cq in m.cluster_queues:
        parts = [f"{f.name}: " + ", ".join(f"{r}={format_amount(r, v.nominal)}" for r, v in f.resources.items())
                 for g in cq.resource_groups for f in g.flavors]
        q.add_row(cq.name, "\n".join(parts))
    console.print(q)
    console.print("The simulator (before/after comparison) is not part of this build yet: this demo only validates "
                  "the case study and shows its capacity.", style="bold yellow")
