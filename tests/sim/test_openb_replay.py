"""CI smoke test: a few hundred rows of the openb default trace replayed with their timestamps."""

from __future__ import annotations

from itertools import islice
from pathlib import Path

import pytest

from gpufleet.cluster.state import ClusterState
from gpufleet.scheduling.kubedefault import KubeDefaultPolicy
from gpufleet.sim.engine import simulate_jobs
from gpufleet.sim.metrics import kpis
from gpufleet.sim.model import SimConfig
from gpufleet.sim.openb import DEFAULT_POD_FILE, GPU_NODE_FILE, default_openb_dir, read_nodes, read_pods
from gpufleet.sim.sources.openbtrace import openb_jobs, openb_nodes

ROWS = 400


def test_openb_head_replays_under_kube_default(tmp_path: Path) -> None:
    root = default_openb_dir()
    if root is None:
        pytest.skip("openb trace not found (set GPUFLEET_OPENB_DIR)")
    head = tmp_path / "head.csv"
    with open(root / DEFAULT_POD_FILE, encoding="utf-8") as fh:
        head.write_text("".join(islice(fh, ROWS + 1)))
    pods, report = read_pods(head)
    assert report.ok and len(pods) == ROWS
    node_rows, node_report = read_nodes(root / GPU_NODE_FILE)
    assert node_report.ok
    cluster = ClusterState.from_nodes(openb_nodes(node_rows))
    jobs = openb_jobs(pods, report)
    r = simulate_jobs(KubeDefaultPolicy.for_cluster(cluster, seed=1), jobs, SimConfig(samples=50))
    k = kpis(r)
    # The trace's pods were all placed in the real cluster; replayed with their times on the same nodes, they fit.
    assert k["jobs_succeeded"] == ROWS and k["failures"] == {}
    assert k["gpu_hours"] == pytest.approx(sum(j.workload.gpu_equivalent * (j.duration or 0) for j in jobs) / 3600,
                                           rel=1e-6)
    cluster.check_invariants()
    assert cluster.gpu_allocated() == 0
