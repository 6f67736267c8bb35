"""NodePool expansion: what a cluster would show for each device-plugin setting, and the inventory annotation."""

from __future__ import annotations

import json

from gpufleet.api.nodepool import DEFAULT_EPHEMERAL_STORAGE
from gpufleet.api.objects import GPU_INVENTORY_ANNOTATION
from gpufleet.cluster.state import ClusterState
from gpufleet.gpu.mig import geometry_for, validate_layout
from gpufleet.scheduling.snapshot_plan import run_cycles
from gpufleet.sim.casestudy import load_casestudy
from tests.conftest import REPO, manifests


def test_casestudy_validates_and_offers_what_the_guide_describes() -> None:
    m = load_casestudy()
    assert not m.problems.errors, [str(e) for e in m.problems.errors]
    by_pool: dict[str, dict[str, int]] = {}
    for node in m.nodes:
        pool = by_pool.setdefault(node.pool or "", {})
        for res, amount in node.allocatable.items():
            pool[res] = pool.get(res, 0) + amount
    assert len(m.nodes) == 4 + 8 + 6
    assert by_pool["h100-training"]["nvidia.com/gpu"] == 16
    assert by_pool["l40s-dev"]["nvidia.com/gpu.shared"] == 48
    assert by_pool["a100-mig-halves"]["nvidia.com/mig-3g.40gb"] + by_pool["a100-mig-balanced"][
        "nvidia.com/mig-3g.40gb"] == 14
    assert by_pool["a100-mig-balanced"]["nvidia.com/mig-1g.10gb"] == 4
    assert {cq.name for cq in m.cluster_queues} == {"production", "research", "dev"}
    assert {lq.key for lq in m.local_queues} == {"research/research", "production/production", "data-science/dev"}


def test_examples_casestudy_is_the_packaged_one() -> None:
    example = REPO / "examples" / "casestudy"
    packaged = REPO / "src" / "gpufleet" / "data" / "casestudy"
    assert sorted(p.name for p in packaged.glob("*.yaml")) == ["cluster.yaml", "queues.yaml", "workload.yaml"]
    for f in packaged.glob("*.yaml"):
        assert (example / f.name).read_text() == f.read_text()


def test_time_sliced_pool_labels_and_capacity() -> None:
    m = load_casestudy()
    node = next(n for n in m.nodes if n.pool == "l40s-dev")
    assert node.labels["nvidia.com/gpu.product"] == "NVIDIA-L40S"  # renamed: no -SHARED
    assert node.labels["nvidia.com/gpu.replicas"] == "8"
    assert node.labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert node.allocatable["nvidia.com/gpu.shared"] == 8 and "nvidia.com/gpu" not in node.allocatable


def test_topology_labels_by_domain_size() -> None:
    m = load_casestudy()
    racks = [n.labels["topology.gpufleet.io/rack"] for n in m.nodes if n.pool == "h100-training"]
    assert racks == ["h100-training-rack-0", "h100-training-rack-0", "h100-training-rack-1", "h100-training-rack-1"]


POOL = """apiVersion: gpufleet.io/v1alpha1
kind: NodePool
metadata: {name: p}
spec:
  count: 3
  namePrefix: gpu
  cpu: "64"
  memory: 512Gi
  gpu: {model: H100-SXM5-80GB, count: 8}
  taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
  labels: {team: ml}
  topology:
  - {nodeLabel: example.com/block, values: [b0, b1, b2]}
"""


def test_inventory_annotation_round_trips_into_cluster_state() -> None:
    m = manifests(POOL)
    assert not m.problems.errors
    node = m.nodes[1]
    assert node.name == "gpu-1" and node.labels["team"] == "ml" and node.labels["example.com/block"] == "b1"
    assert node.taints[0].key == "nvidia.com/gpu"
    inv = json.loads(node.meta.annotations[GPU_INVENTORY_ANNOTATION])
    assert inv["model"] == "H100-SXM5-80GB" and len(inv["gpus"]) == 8
    assert len(inv["nvlinks"]) == 28  # NVSwitch board: every pair connected
    state = ClusterState.from_nodes(m.nodes)
    gpus = state.nodes["gpu-1"].gpus
    assert [g.device_id for g in gpus] == [g["uuid"] for g in inv["gpus"]]
    assert all(g.mode == "whole" and g.memory_mib == 81559 for g in gpus)


def test_unknown_model_with_memory_renders() -> None:
    m = manifests(POOL.replace("{model: H100-SXM5-80GB, count: 8}", "{model: G2, count: 8, memory: 32Gi}"))
    assert not m.problems.errors, [str(e) for e in m.problems.errors]
    state = ClusterState.from_nodes(m.nodes)
    assert state.nodes["gpu-0"].gpus[0].memory_mib == 32768
    m = manifests(POOL.replace("{model: H100-SXM5-80GB, count: 8}", "{model: G2, count: 8}"))
    assert any("unknown GPU model 'G2'" in e.message for e in m.problems.errors)


def test_mig_pool_devices_in_cluster_state() -> None:
    m = load_casestudy()
    state = ClusterState.from_nodes(m.nodes)
    node = state.nodes["a100-b-0"]
    (gpu,) = node.gpus
    assert gpu.mode == "mig"
    placements = [s.placement for s in gpu.mig]
    assert sorted(p.profile for p in placements) == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    geometry = geometry_for("A100-SXM4-80GB")
    assert geometry is not None and validate_layout(geometry, placements) == []
    assert {s.resource for s in gpu.mig} == {"nvidia.com/mig-3g.40gb", "nvidia.com/mig-2g.20gb",
                                            "nvidia.com/mig-1g.10gb"}
    assert all(s.device_id.startswith("MIG-") for s in gpu.mig)
    shared = state.nodes["l40s-0"].gpus[0]
    assert shared.mode == "replicas" and shared.replicas == 8 and shared.resource == "nvidia.com/gpu.shared"


def test_node_without_inventory_gets_logical_devices() -> None:
    m = manifests("""apiVersion: v1
kind: Node
metadata:
  name: plain
  labels: {nvidia.com/gpu.product: Tesla-T4}
status:
  allocatable: {cpu: "16", memory: 64Gi, nvidia.com/gpu: "2", nvidia.com/mig-1g.10gb: "1", pods: "110"}
""")
    state = ClusterState.from_nodes(m.nodes)
    ids = [g.device_id for g in state.nodes["plain"].gpus]
    assert ids == ["plain/gpu-0", "plain/gpu-1", "plain/gpu-2"]
    assert state.nodes["plain"].gpus[0].model == "T4"
    assert state.nodes["plain"].gpus[2].mig[0].device_id == "plain/gpu-2/1g.10gb@0"


POOL_AND_PODS = """apiVersion: gpufleet.io/v1alpha1
kind: NodePool
metadata: {name: gpu}
spec: {count: 2, cpu: 8, memory: 64Gi, gpu: {model: A100-SXM4-80GB, count: 1}}
---
apiVersion: v1
kind: Pod
metadata: {name: scratch, namespace: default}
spec:
  containers:
  - name: c
    image: x
    resources: {requests: {cpu: 2, memory: 8Gi, ephemeral-storage: 50Gi}, limits: {nvidia.com/gpu: 1}}
---
apiVersion: v1
kind: Pod
metadata: {name: too-big, namespace: default}
spec:
  containers:
  - name: c
    image: x
    resources: {requests: {cpu: 20, memory: 8Gi, ephemeral-storage: 5Ti}, limits: {nvidia.com/gpu: 2}}
"""


def test_pool_nodes_report_what_a_kubelet_reports() -> None:
    """Issue 29, item 10: ephemeral-storage and hugepages by default, beside cpu, memory and pods."""
    m = manifests(POOL_AND_PODS)
    assert not m.problems.errors, m.problems.all
    for node in m.nodes:
        assert node.allocatable["ephemeral-storage"] == DEFAULT_EPHEMERAL_STORAGE == 2**40
        assert node.allocatable["hugepages-1Gi"] == node.allocatable["hugepages-2Mi"] == 0
        assert node.allocatable["pods"] == 110


def test_a_pod_asking_for_ephemeral_storage_is_placed_and_every_short_resource_is_named() -> None:
    plan = run_cycles(manifests(POOL_AND_PODS), 1, until_stable=False)
    [cycle] = plan.cycles
    assert [a.workload for a in cycle.decisions.admitted] == ["default/scratch"]
    [pending] = cycle.pending
    assert pending.workload == "default/too-big"
    assert pending.reason == ("0/2 nodes are available: 2 Insufficient nvidia.com/gpu, cpu and ephemeral-storage.")


def test_a_pool_whose_nodes_would_advertise_too_many_devices_is_refused_before_any_node_is_made() -> None:
    # 64 A100s cut in seven 1g.10gb instances, each time-sliced 64 ways: 28,672 devices per node. Each of the 5,000
    # nodes used to be made (its devices listed) and refused one by one; the pool is now refused as it is read.
    text = """apiVersion: gpufleet.io/v1alpha1
kind: NodePool
metadata: {name: huge}
spec:
  count: 5000
  cpu: "64"
  memory: 512Gi
  gpu: {model: A100-SXM4-80GB, count: 64, migLayout: "1g.10gb:7"}
  sharing:
    migStrategy: mixed
    timeSlicing:
      resources:
      - {name: nvidia.com/mig-1g.10gb, replicas: 64}
"""
    m = manifests(text)
    assert m.node_pools == [] and m.nodes == []
    [error] = [e for e in m.problems.errors if e.kind == "NodePool"]
    assert "28,672 GPU devices" in error.message and "at most 4,096" in error.message
    assert error.field is not None and error.field.endswith("sharing") and error.line == 9
    fits = text.replace("replicas: 64", "replicas: 9")  # 64 x 7 x 9 = 4,032
    assert len(manifests(fits.replace("count: 5000", "count: 1")).nodes) == 1
