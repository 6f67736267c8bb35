"""The simulator on DRA input: claimed pods get the devices their claims select, their GPU-hours and job sizes are
counted, and stranded capacity asks placement's one fit rule, so GPUs published through DRA (which only claims
hand out) are never capacity a pending fractional pod could use.

The cluster is the one of examples/dra (its Nodes, ResourceSlices and NVIDIA's DeviceClasses): 8 whole H100s on
h100-node-0, two A100s in MIG mode on a100-node-0 (seven 1g.10gb; 2g.20gb + 2x 1g.10gb + 3g.40gb).
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from gpufleet.api.manifests import Manifests, load_manifests
from gpufleet.api.objects import PodTemplate
from gpufleet.cli.main import app
from gpufleet.cluster.build import build_workloads
from gpufleet.cluster.devices import DeviceGrant
from gpufleet.cluster.state import ClusterState
from gpufleet.scheduling.placement import make_placer
from gpufleet.scheduling.placement.stranded import could_use, fit_needs, fits_alone, stranded_by_node, stranded_gpus
from gpufleet.scheduling.types import PodRequest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "dra"
runner = CliRunner()

CLAIMS = """\
apiVersion: v1
kind: Namespace
metadata: {name: ml}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: pair, namespace: ml}
spec:
  spec:
    devices:
      requests:
      - name: gpus
        exactly: {deviceClassName: gpu.nvidia.com, count: 2}
      constraints:
      - {requests: [gpus], matchAttribute: resource.kubernetes.io/pcieRoot}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: h100, namespace: ml}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
          selectors:
          - cel: {expression: "device.attributes['gpu.nvidia.com'].productName.matches('H100')"}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: mig-1g, namespace: ml}
spec:
  spec:
    devices:
      requests:
      - name: mig
        exactly:
          deviceClassName: mig.nvidia.com
          selectors:
          - cel: {expression: "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"}
---
"""

# A device-plugin node beside the DRA ones: two A100s offered as nvidia.com/gpu (fractions may share them).
DEVICE_PLUGIN_NODE = """\
apiVersion: gpufleet.io/v1alpha1
kind: NodePool
metadata: {name: dp}
spec:
  count: 1
  namePrefix: dp
  gpu: {model: A100-SXM4-80GB, count: 2}
  cpu: "64"
  memory: 512Gi
---
"""


def _claiming_job(name: str, template: str, duration: str) -> str:
    return f"""\
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: ml
  annotations: {{sim.gpufleet.io/duration: {duration}}}
spec:
  template:
    spec:
      restartPolicy: Never
      resourceClaims:
      - {{name: dev, resourceClaimTemplateName: {template}}}
      containers:
      - name: main
        image: trainer
        resources: {{requests: {{cpu: "4", memory: 16Gi}}, claims: [{{name: dev}}]}}
---
"""


def _plain_job(name: str, *, fraction: str | None = None, gpus: int = 0) -> str:
    annotations = f"{{gpufleet.io/gpu-fraction: \"{fraction}\"}}" if fraction else "{}"
    limits = f"{{nvidia.com/gpu: {gpus}}}" if gpus else "{}"
    return f"""\
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: ml
  annotations: {{sim.gpufleet.io/duration: 1h}}
spec:
  template:
    metadata:
      annotations: {annotations}
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: trainer
        resources: {{requests: {{cpu: "1", memory: 1Gi}}, limits: {limits}}}
---
"""


def _dra_input(folder: Path, *texts: str) -> Path:
    """examples/dra's cluster (Nodes, slices, DeviceClasses, read from the example) and ``texts`` as one more
    file: a test input of its own, the example's workloads left out."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("nodes.yaml", "slices.yaml", "deviceclasses.yaml"):
        shutil.copy(EXAMPLES / name, folder / name)
    (folder / "test.yaml").write_text(CLAIMS + "".join(texts), encoding="utf-8")
    return folder


# ---- the simulator, end to end ----------------------------------------------------------------------------------

def test_claimed_pods_run_on_their_devices_under_both_policies(tmp_path: Path) -> None:
    # Six jobs of a GPU pair on one PCIe root for 1 h: the H100 node has four roots of two GPUs, so four pairs
    # run at once and two wait an hour. Three 1g.10gb jobs for 2 h on the A100s' MIG devices. A fractional job
    # that nothing can take: the DRA GPUs are handed out by claims alone.
    folder = _dra_input(tmp_path / "in", *(_claiming_job(f"pair-{i}", "pair", "1h") for i in range(6)),
                        *(_claiming_job(f"tok-{i}", "mig-1g", "2h") for i in range(3)),
                        _plain_job("frac", fraction="0.5"))
    out, jobs_out = tmp_path / "out.json", tmp_path / "jobs.jsonl"
    got = runner.invoke(app, ["simulate", str(folder), "--compare", "kube-default,gpufleet", "--json", str(out),
                              "--jobs-out", str(jobs_out)])
    assert got.exit_code == 0, got.output
    runs = json.loads(out.read_text())["runs"]
    assert [r["policy"] for r in runs] == ["kube-default", "gpufleet"]
    for run in runs:
        k = run["kpis"]
        assert (k["jobs"], k["jobs_succeeded"], k["jobs_unfinished"]) == (10, 9, 1)
        # 6 pairs x 2 GPUs x 1 h, and 3 MIG devices of 1/7 of an A100 for 2 h; the run lasts 2 h on 10 GPUs
        assert k["gpu_hours"] == round(12 + 3 * 2 / 7, 3) and k["makespan_s"] == 7200.0
        assert k["gpu_allocation_pct"] == round(100 * (12 + 6 / 7) / 20, 2)
        # The fractional pod waits all along, yet no idle GPU is stranded: every idle GPU is published through
        # DRA, which no fraction ever gets (the former count called the idle H100s stranded: 20%).
        assert k["fragmentation_pct"] == 0.0
    records: dict[tuple[str, str], dict[str, Any]] = {}
    for line in jobs_out.read_text().splitlines():
        r = json.loads(line)
        records[(r["policy"], r["job"])] = r
    for policy in ("kube-default", "gpufleet"):
        pairs = [records[(policy, f"ml/pair-{i}")] for i in range(6)]
        # a claimed job weighs the devices it held: two GPUs, a MIG device its seventh of an A100
        assert all(p["gpus"] == 2.0 and p["gpuSecondsHeld"] == 7200.0 for p in pairs)
        assert sorted(p["firstStart"] for p in pairs) == [0.0] * 4 + [3600.0] * 2
        toks = [records[(policy, f"ml/tok-{i}")] for i in range(3)]
        assert all(t["outcome"] == "succeeded" and t["gpus"] == round(1 / 7, 4) for t in toks)
        assert records[(policy, "ml/frac")]["firstStart"] is None


# ---- stranded capacity asks placement's fit rule ----------------------------------------------------------------

def _cluster_and_pending(tmp_path: Path, *jobs: str) -> tuple[Manifests, ClusterState, dict[str, PodTemplate]]:
    folder = _dra_input(tmp_path / "in", DEVICE_PLUGIN_NODE, *jobs)
    manifests = load_manifests([str(folder)])
    assert not manifests.problems.errors, manifests.problems.errors
    templates = {w.name: w.pods[0].template for w in build_workloads(manifests)}
    return manifests, ClusterState.from_nodes(manifests.nodes), templates


def _placed_alone(manifests: Manifests, node: str, key: str, template: PodTemplate) -> bool:
    """Whether placement puts the pod on ``node`` when it is the cluster's only node and nothing is held."""
    fresh = ClusterState.from_nodes([n for n in manifests.nodes if n.name == node])
    return make_placer(fresh, "gpufleet", random.Random(0)).place([PodRequest(key, template)]) is not None


def test_idle_dra_gpus_are_spare_for_a_pending_fraction(tmp_path: Path) -> None:
    _, cluster, t = _cluster_and_pending(tmp_path, _plain_job("frac", fraction="0.5"), _plain_job("two", gpus=2))
    # dp-0: GPU 0 held whole, GPU 1 three quarters held by a fraction: neither pending pod fits there now.
    cluster.allocate("ml/whole", "dp-0", {"nvidia.com/gpu": 1}, [DeviceGrant("whole", 0)])
    cluster.allocate("ml/share", "dp-0", {}, [DeviceGrant("fraction", 1, milli=750, memory_mib=1024)])
    pending = [t["frac"], t["two"]]
    by_node = stranded_by_node(cluster, pending)
    # The fraction could use dp-0 were it empty: its idle quarter is stranded. Nothing pending can ever use the
    # idle DRA GPUs (a fraction never goes on them, a device-plugin pod finds no nvidia.com/gpu there): spare.
    assert by_node == {"dp-0": (0.25, 0.25), "h100-node-0": (0.0, 8.0), "a100-node-0": (0.0, 2.0)}
    assert stranded_gpus(cluster, pending) == (0.25, 10.25)
    for node in ("h100-node-0", "a100-node-0"):
        assert not any(could_use(n, cluster.nodes[node]) for n in fit_needs(t["frac"]))


def test_a_claimed_pod_fits_only_where_its_claims_select_devices(tmp_path: Path) -> None:
    _, cluster, t = _cluster_and_pending(tmp_path, _claiming_job("one-h100", "h100", "1h"),
                                         _plain_job("two", gpus=2))
    cluster.allocate("ml/held", "h100-node-0", {}, [DeviceGrant("whole", i) for i in range(8)])
    cluster.allocate("ml/whole", "dp-0", {"nvidia.com/gpu": 1}, [DeviceGrant("whole", 0)])
    claimed = t["one-h100"]
    assert claimed.dra is not None and claimed.gpu.kind == "gpu"
    # dp-0's free A100 is no device the claim selects (not published through DRA, and no H100), so the claimed
    # pod does not fit there, and dp-0's idle GPU is stranded for the pod of two that could use dp-0 empty.
    # (Asked without its claims' devices, the claimed pod "fitted" dp-0, which hid that.)
    assert not fits_alone(cluster.nodes["dp-0"], claimed)
    assert stranded_by_node(cluster, [claimed, t["two"]])["dp-0"] == (1.0, 1.0)
    # The MIG node's devices are no H100s: spare for both.
    assert stranded_by_node(cluster, [claimed, t["two"]])["a100-node-0"] == (0.0, 2.0)
    # Freed, one H100 takes the claimed pod again.
    cluster.release("ml/held")
    assert fits_alone(cluster.nodes["h100-node-0"], claimed)


def test_could_use_agrees_with_placement_on_the_emptied_node(tmp_path: Path) -> None:
    manifests, cluster, t = _cluster_and_pending(
        tmp_path, _plain_job("frac", fraction="0.5"), _plain_job("two", gpus=2), _plain_job("three", gpus=3),
        _claiming_job("pair", "pair", "1h"), _claiming_job("one-h100", "h100", "1h"),
        _claiming_job("mig", "mig-1g", "1h"))
    # What is held does not matter to could_use: hold everything that can be held, one way or another.
    cluster.allocate("ml/h", "h100-node-0", {}, [DeviceGrant("whole", i) for i in range(8)])
    cluster.allocate("ml/a", "a100-node-0", {}, [DeviceGrant("mig", 0, k) for k in range(7)])
    cluster.allocate("ml/d", "dp-0", {"nvidia.com/gpu": 2}, [DeviceGrant("whole", 0), DeviceGrant("whole", 1)])
    for name, template in t.items():
        for node in cluster.nodes.values():
            usable = any(could_use(n, node) for n in fit_needs(template))
            assert usable == _placed_alone(manifests, node.name, f"ml/{name}", template), (name, node.name)
            assert not fits_alone(node, template) or usable
    assert {n for n, node in cluster.nodes.items() if any(could_use(x, node) for x in fit_needs(t["mig"]))} == {
        "a100-node-0"}
    assert {n for n, node in cluster.nodes.items() if any(could_use(x, node) for x in fit_needs(t["frac"]))} == {
        "dp-0"}


def test_jobs_carved_from_dynamic_mig_gpus_are_simulated_and_counted(tmp_path: Path) -> None:
    # One A100 in dynamic MIG mode: two 3g.40gb jobs carve it for 2 h, then the whole-GPU job gets it.
    from tests.dra.dynamic_mig import CLASSES, dynamic_mig_slices, node, profile_template, template

    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "cluster.yaml").write_text(node("n1") + dynamic_mig_slices("n1") + CLASSES, encoding="utf-8")
    (folder / "jobs.yaml").write_text(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: ml}\n" + profile_template("three-g", "3g.40gb")
        + template("whole", "gpu", "gpu.nvidia.com") + "---\n" + _claiming_job("half-0", "three-g", "2h")
        + _claiming_job("half-1", "three-g", "2h") + _claiming_job("all", "whole", "1h"), encoding="utf-8")
    out, jobs_out = tmp_path / "out.json", tmp_path / "jobs.jsonl"
    got = runner.invoke(app, ["simulate", str(folder), "--compare", "kube-default,gpufleet", "--json", str(out),
                              "--jobs-out", str(jobs_out)])
    assert got.exit_code == 0, got.output
    for run in json.loads(out.read_text())["runs"]:
        assert run["kpis"]["jobs_succeeded"] == 3
        # two 3/7 devices for 2 h, then the whole GPU for 1 h
        assert run["kpis"]["gpu_hours"] == round(2 * 2 * 3 / 7 + 1, 3)
    starts = {(r["policy"], r["job"]): r["firstStart"] for r in map(json.loads, jobs_out.read_text().splitlines())}
    for policy in ("kube-default", "gpufleet"):
        halves = sorted(starts[(policy, f"ml/half-{i}")] for i in range(2))
        assert halves == [0.0, 0.0] and starts[(policy, "ml/all")] == 7200.0
