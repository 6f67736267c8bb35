"""The GPUs DRA ResourceSlices give nodes: pools at their highest generation and only when complete, node-local
devices, NVIDIA's whole GPUs and MIG devices as the same GPU slots device-plugin GPUs get (with their DRA identity),
a node offering GPUs both ways, and the examples in examples/dra through validate and plan."""

from __future__ import annotations

import json
from collections import Counter

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpufleet.api.dra_nodes import complete_pools
from gpufleet.api.dra_objects import Device, DeviceAttribute, ResourcePool, ResourceSlice
from gpufleet.api.errors import LEFT_OUT, Problems
from gpufleet.api.manifests import Manifests, load_manifests
from gpufleet.api.objects import GpuDemand, ObjectMeta
from gpufleet.cli.main import app
from gpufleet.cluster.free_devices import fraction_room, free_device_count
from gpufleet.cluster.state import ClusterState, node_state_from
from tests.conftest import REPO, manifests

runner = CliRunner()
EXAMPLES = str(REPO / "examples" / "dra")
GIB = 2**30


def node(name: str, allocatable: str = "{cpu: '64', memory: 512Gi, pods: '110'}") -> str:
    return f"apiVersion: v1\nkind: Node\nmetadata: {{name: {name}}}\nstatus:\n  allocatable: {allocatable}\n"


def gpu(minor: int, uuid: str, product: str = "NVIDIA H100 80GB HBM3", memory: str = "81559Mi",
        extra: dict[str, object] | None = None) -> dict[str, object]:
    return {"name": f"gpu-{minor}", "attributes": {"type": {"string": "gpu"}, "uuid": {"string": uuid},
                                                   "productName": {"string": product}},
            "capacity": {"memory": {"value": memory}}, **(extra or {})}


def mig(parent_minor: int, parent: str, profile: str, profile_id: int, start: int,
        product: str = "NVIDIA A100-SXM4-80GB", extra: dict[str, object] | None = None) -> dict[str, object]:
    return {"name": f"gpu-{parent_minor}-mig-{profile.replace('.', '')}-{profile_id}-{start}",
            "attributes": {"type": {"string": "mig"}, "uuid": {"string": f"MIG-{parent}-{start}"},
                           "parentUUID": {"string": parent}, "profile": {"string": profile},
                           "productName": {"string": product}}, **(extra or {})}


def slice_doc(name: str, node_name: str, devices: list[dict[str, object]], *, generation: int = 1, count: int = 1,
              pool: str | None = None, driver: str = "gpu.nvidia.com", selection: dict[str, object] | None = None,
              counters: list[dict[str, object]] | None = None) -> str:
    spec: dict[str, object] = {"driver": driver, **(selection or {"nodeName": node_name}),
                               "pool": {"name": pool or node_name, "generation": generation,
                                        "resourceSliceCount": count}, "devices": devices}
    if counters:
        spec["sharedCounters"] = counters
    return yaml.safe_dump({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name},
                           "spec": spec}, sort_keys=False)


def load(*docs: str) -> Manifests:
    m = manifests("---\n".join(docs), "dra.yaml")
    assert not m.problems.errors, [str(e) for e in m.problems.errors]
    return m


def cluster(m: Manifests) -> ClusterState:
    return ClusterState.from_nodes(m.nodes)


# ---- pools --------------------------------------------------------------------------------------------------------

def test_only_the_highest_generation_of_a_pool_counts() -> None:
    m = load(node("n1"),
             slice_doc("old", "n1", [gpu(0, "GPU-a"), gpu(1, "GPU-b")], generation=1),
             slice_doc("new", "n1", [gpu(0, "GPU-a")], generation=2))
    (ns,) = cluster(m)
    assert [g.device_id for g in ns.gpus] == ["GPU-a"]
    assert not m.problems.warnings  # older slices are on their way out: nothing to say


def test_an_incomplete_pool_gives_no_devices_and_says_its_counts() -> None:
    m = load(node("n1"),
             slice_doc("s0", "n1", [gpu(0, "GPU-a")], generation=4, count=2),
             slice_doc("s-old", "n1", [gpu(0, "GPU-a"), gpu(1, "GPU-b")], generation=3, count=1))
    (ns,) = cluster(m)
    assert ns.gpus == []
    (w,) = m.problems.warnings
    assert w.message.startswith("pool n1 of driver gpu.nvidia.com is incomplete: 1 ResourceSlice(s) at generation "
                                "4, resourceSliceCount says 2; its devices are not used")
    assert (w.kind, w.name, w.field, w.file) == ("ResourceSlice", "s0", "spec.pool", "dra.yaml")


def test_a_pool_split_over_slices_is_whole_when_every_slice_is_there() -> None:
    m = load(node("n1"),
             slice_doc("s0", "n1", [gpu(0, "GPU-a")], count=2),
             slice_doc("s1", "n1", [gpu(1, "GPU-b")], count=2))
    (ns,) = cluster(m)
    assert [(g.index, g.dra_device) for g in ns.gpus] == [(0, "gpu-0"), (1, "gpu-1")]


def test_slices_disagreeing_on_the_count_or_repeating_a_device_give_nothing() -> None:
    m = load(node("n1"),
             slice_doc("s0", "n1", [gpu(0, "GPU-a")], count=2),
             slice_doc("s1", "n1", [gpu(1, "GPU-b")], count=3))
    assert cluster(m).nodes["n1"].gpus == [] and "disagree on resourceSliceCount (2, 3)" in \
        m.problems.warnings[0].message
    m = load(node("n1"),
             slice_doc("s0", "n1", [gpu(0, "GPU-a")], count=2),
             slice_doc("s1", "n1", [gpu(0, "GPU-a")], count=2))
    assert cluster(m).nodes["n1"].gpus == [] and "lists device gpu-0 in more than one slice" in \
        m.problems.warnings[0].message


def _slice(serial: int, pool: str, generation: int, count: int, devices: int) -> ResourceSlice:
    return ResourceSlice(ObjectMeta(f"s{serial}"), "resource.k8s.io/v1", "gpu.nvidia.com",
                         ResourcePool(pool, generation, count), "nodeName", pool,
                         tuple(Device(f"d{serial}-{k}") for k in range(devices)))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["p1", "p2", "p3"]), st.integers(0, 3), st.integers(1, 3),
                          st.integers(0, 3)), max_size=12))
def test_only_complete_highest_generations_give_devices_each_once(
        specs: list[tuple[str, int, int, int]]) -> None:
    slices = [_slice(i, *spec) for i, spec in enumerate(specs)]
    problems = Problems()
    pools = complete_pools(slices, problems)
    expected: set[tuple[str, str]] = set()
    incomplete = 0
    for pool in {s.pool.name for s in slices}:
        mine = [s for s in slices if s.pool.name == pool]
        top = max(s.pool.generation for s in mine)
        current = [s for s in mine if s.pool.generation == top]
        counts = {s.pool.resource_slice_count for s in current}
        if len(counts) == 1 and len(current) == counts.pop():
            expected |= {(pool, d.name) for s in current for d in s.devices}
        else:
            incomplete += 1
    found = [(p.name, d.name) for p in pools for d in p.devices]
    assert len(found) == len(set(found))  # never a device twice
    assert set(found) == expected
    assert all(s.pool.generation == max(x.pool.generation for x in slices if x.pool.name == p.name)
               for p in pools for s in p.slices)
    assert len(problems.warnings) == incomplete


# ---- nodes and what is left out ---------------------------------------------------------------------------------

def test_slices_not_local_to_one_node_are_left_out_and_said() -> None:
    m = load(node("n1"),
             slice_doc("everywhere", "n1", [gpu(0, "GPU-a")], selection={"allNodes": True}),
             slice_doc("some", "n1", [gpu(0, "GPU-b")], pool="other",
                       selection={"nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
                           {"key": "zone", "operator": "In", "values": ["a"]}]}]}}))
    assert cluster(m).nodes["n1"].gpus == []
    said = sorted((w.name, w.field, w.message) for w in m.problems.warnings if w.code == LEFT_OUT)
    assert said == [
        ("everywhere", "spec.allNodes", "allNodes is not implemented: gpufleet reads devices local to one node "
         "(spec.nodeName); the 1 device(s) of this slice are left out"),
        ("some", "spec.nodeSelector", "nodeSelector is not implemented: gpufleet reads devices local to one node "
         "(spec.nodeName); the 1 device(s) of this slice are left out")]


def test_other_drivers_devices_and_missing_nodes_are_said() -> None:
    channel: dict[str, object] = {"name": "channel-0", "attributes": {"type": {"string": "channel"}, "id": {"int": 0}}}
    m = load(node("n1"),
             slice_doc("cd", "n1", [channel], driver="compute-domain.nvidia.com"),
             slice_doc("away", "n2", [gpu(0, "GPU-z")]))
    messages = {w.message for w in m.problems.warnings if w.code == LEFT_OUT}
    assert "1 device(s) of driver compute-domain.nvidia.com are read; gpufleet plans the GPUs and MIG devices of " \
        "gpu.nvidia.com only (left out)" in messages
    assert "1 GPU(s) are published for node n2, which is not in the input; they are left out" in messages


# ---- NVIDIA's devices as GPU slots --------------------------------------------------------------------------------

def test_whole_gpus_become_whole_slots_with_their_dra_identity() -> None:
    m = load(node("n1"), slice_doc("s", "n1", [gpu(1, "GPU-b"), gpu(0, "GPU-a")]))
    (ns,) = cluster(m)
    assert ns.gpu_model == "H100-SXM5-80GB"
    assert [(g.index, g.device_id, g.mode, g.resource, g.model, g.memory_mib) for g in ns.gpus] == [
        (0, "GPU-a", "whole", "nvidia.com/gpu", "H100-SXM5-80GB", 81559),
        (1, "GPU-b", "whole", "nvidia.com/gpu", "H100-SXM5-80GB", 81559)]  # in minor order
    assert [(g.dra_driver, g.dra_pool, g.dra_device) for g in ns.gpus] == [
        ("gpu.nvidia.com", "n1", "gpu-0"), ("gpu.nvidia.com", "n1", "gpu-1")]
    assert not m.problems.warnings


def test_static_mig_devices_become_a_mig_slot_per_device_on_their_gpu() -> None:
    devices = [mig(0, "GPU-p", "3g.40gb", 9, 4), mig(0, "GPU-p", "1g.10gb", 19, 0),
               mig(0, "GPU-p", "2g.20gb", 14, 2)]
    m = load(node("n1"), slice_doc("s", "n1", devices))
    (ns,) = cluster(m)
    (g,) = ns.gpus
    assert (g.mode, g.device_id, g.model, g.memory_mib, g.dra_device, g.dra_pool) == (
        "mig", "GPU-p", "A100-SXM4-80GB", 81920, None, "n1")
    assert [(str(s.placement), s.resource, s.memory_mib, s.compute_slices, s.device_id, s.dra_device) for s in g.mig] \
        == [("1g.10gb@0", "nvidia.com/mig-1g.10gb", 9856, 1, "MIG-GPU-p-0", "gpu-0-mig-1g10gb-19-0"),
            ("2g.20gb@2", "nvidia.com/mig-2g.20gb", 19968, 2, "MIG-GPU-p-2", "gpu-0-mig-2g20gb-14-2"),
            ("3g.40gb@4", "nvidia.com/mig-3g.40gb", 40192, 3, "MIG-GPU-p-4", "gpu-0-mig-3g40gb-9-4")]
    # the same fleet: placement's device answers count these instances
    assert free_device_count(ns, GpuDemand(kind="mig", count=1, mig_profile="1g.10gb")) == 1


def test_mig_devices_that_do_not_fit_one_gpu_leave_it_out() -> None:
    devices = [mig(0, "GPU-p", "4g.40gb", 5, 0), mig(0, "GPU-p", "3g.40gb", 9, 0)]
    m = load(node("n1"), slice_doc("s", "n1", devices))
    assert cluster(m).nodes["n1"].gpus == []
    (w,) = m.problems.warnings
    assert "do not fit together on one A100-SXM4-80GB" in w.message and w.field == "spec.devices[0]" and w.line


def test_an_unknown_product_is_planned_by_its_memory_and_said_once() -> None:
    m = load(node("n1"), slice_doc("s", "n1", [gpu(0, "GPU-a", product="NVIDIA Z9000", memory="96Gi"),
                                               gpu(1, "GPU-b", product="NVIDIA Z9000", memory="96Gi")]))
    (ns,) = cluster(m)
    assert [(g.model, g.memory_mib) for g in ns.gpus] == [("NVIDIA Z9000", 98304)] * 2
    (w,) = m.problems.warnings
    assert w.message == ("productName NVIDIA Z9000 is not in gpufleet's GPU catalog: its GPUs are planned as model "
                         "NVIDIA Z9000 with 98,304 MiB (the device's memory capacity), unpriced and without MIG "
                         "geometry")


def test_partitionable_mig_devices_stay_beside_their_whole_gpu_with_the_counters() -> None:
    counters: list[dict[str, object]] = [{"name": "gpu-0-counter-set",
                                          "counters": {"memory": {"value": "40320Mi"}}}]
    whole = gpu(0, "GPU-p", product="NVIDIA A100-SXM4-40GB", memory="40Gi", extra={"consumesCounters": [
        {"counterSet": "gpu-0-counter-set", "counters": {"memory": {"value": "40320Mi"}}}]})
    part = mig(0, "GPU-p", "1g.10gb", 15, 0, product="NVIDIA A100-SXM4-40GB", extra={"consumesCounters": [
        {"counterSet": "gpu-0-counter-set", "counters": {"memory": {"value": "9984Mi"}}}]})
    del part["attributes"]["uuid"]  # type: ignore[attr-defined]  # an abstract device: it does not exist yet
    m = load(node("n1"), slice_doc("s", "n1", [whole, part], counters=counters))
    (ns,) = cluster(m)
    (g,) = ns.gpus
    assert (g.mode, g.dra_device, g.model) == ("whole", "gpu-0", "A100-SXM4-40GB")
    assert [(p.dra_device, p.device_id) for p in g.partitions] == [
        ("gpu-0-mig-1g10gb-15-0", "gpu.nvidia.com/n1/gpu-0-mig-1g10gb-15-0")]
    assert g.counters == {"gpu-0-counter-set/memory": 40320 * 2**20}
    (dra,) = m.nodes[0].dra_gpus
    assert [c.counter_set for c in dra.counters] == ["gpu-0-counter-set"]
    assert not m.problems.warnings  # tests/dra/test_dra_dynamic_mig.py: carving, counters, placement


def test_a_node_offering_gpus_both_ways_keeps_the_dra_devices_and_says_so() -> None:
    m = load(node("n1", "{cpu: '64', memory: 512Gi, nvidia.com/gpu: '8'}"),
             slice_doc("s", "n1", [gpu(0, "GPU-a"), gpu(1, "GPU-b")]))
    (w,) = m.problems.warnings
    assert (w.kind, w.name, w.field) == ("Node", "n1", "status.allocatable")
    assert w.message == ("node n1 offers nvidia.com/gpu: 8 through the device plugin and 2 GPU(s) through DRA "
                         "ResourceSlices of gpu.nvidia.com; NVIDIA's chart refuses both on one node: gpufleet uses "
                         "the DRA devices and drops the device-plugin resources")
    (ns,) = cluster(m)
    assert len(ns.gpus) == 2 and all(g.dra_driver == "gpu.nvidia.com" for g in ns.gpus)
    # Each GPU counted once: the device plugin's 8 dropped, the 2 DRA GPUs counted as the resource they would be
    # advertised as (placement keeps device-plugin pods off them: tests/dra/test_dra_both_ways.py).
    assert ns.allocatable["nvidia.com/gpu"] == 2
    # a device-plugin pod does not get a DRA GPU, nor does a fraction
    assert free_device_count(ns, GpuDemand(kind="fraction", count=1, milli=500)) == 0
    assert fraction_room(ns.gpus[0], 500, None) is None


def test_nodes_without_slices_are_built_as_before() -> None:
    m = load(node("n1", "{cpu: '64', memory: 512Gi, nvidia.com/gpu: '2'}"))
    state = node_state_from(m.nodes[0])
    assert len(state.gpus) == 2 and all(g.dra_driver is None for g in state.gpus)


def test_a_v1beta1_slice_gives_the_same_gpus() -> None:
    v1 = slice_doc("s", "n1", [gpu(0, "GPU-a")])
    data = yaml.safe_load(v1)
    data["apiVersion"] = "resource.k8s.io/v1beta1"
    data["spec"]["devices"] = [{"name": d["name"], "basic": {k: v for k, v in d.items() if k != "name"}}
                               for d in data["spec"]["devices"]]
    a = load(node("n1"), v1).nodes[0].dra_gpus
    b = load(node("n1"), yaml.safe_dump(data)).nodes[0].dra_gpus
    assert a == b and len(a) == 1


def test_devices_keep_their_attributes_for_the_allocation_to_come() -> None:
    m = load(node("n1"), slice_doc("s", "n1", [gpu(0, "GPU-a", extra={})]))
    d = m.resource_slices[0].devices[0]
    assert d.attributes["gpu.nvidia.com/uuid"] == DeviceAttribute("string", "GPU-a")
    assert d.capacity["gpu.nvidia.com/memory"] == 81559 * 2**20


# ---- the examples --------------------------------------------------------------------------------------------------

def test_the_examples_validate_cleanly_even_strict() -> None:
    result = runner.invoke(app, ["validate", EXAMPLES])
    assert result.exit_code == 0, result.output
    assert "2 DeviceClass, 2 ResourceSlice, 1 ResourceClaim, 3 ResourceClaimTemplate" in result.output
    assert "resourceClaims" not in result.output  # claims are planned: nothing said as left out about them
    assert runner.invoke(app, ["validate", EXAMPLES, "--strict"]).exit_code == 0


def test_the_examples_cluster_holds_the_dra_gpus() -> None:
    m = load_manifests([EXAMPLES])
    state = cluster(m)
    h100, a100 = state.nodes["h100-node-0"], state.nodes["a100-node-0"]
    assert [(g.mode, g.model) for g in h100.gpus] == [("whole", "H100-SXM5-80GB")] * 8
    assert [g.mode for g in a100.gpus] == ["mig", "mig"]
    assert Counter(s.placement.profile for g in a100.gpus for s in g.mig) == {"1g.10gb": 9, "2g.20gb": 1,
                                                                             "3g.40gb": 1}
    assert state.gpu_capacity() == 10.0 and state.gpus_per_model() == {"H100-SXM5-80GB": 8, "A100-SXM4-80GB": 2}
    pod = next(p for p in m.pods if p.meta.name == "embeddings")
    assert [(c.name, c.resource_claim_name) for c in pod.resource_claims] == [("mig", "embeddings-mig")]


def test_plan_shows_the_dra_nodes_gpus() -> None:
    result = runner.invoke(app, ["plan", EXAMPLES])
    assert result.exit_code == 0, result.output
    assert "GPUs from DRA ResourceSlices" in result.output
    lines = {line.split()[0]: line.split() for line in result.output.splitlines() if line.endswith(("-", "x1"))}
    assert lines["h100-node-0"][1:6] == ["gpu.nvidia.com", "H100-SXM5-80GB", "8", "8", "-"]
    assert lines["a100-node-0"][1:5] == ["gpu.nvidia.com", "A100-SXM4-80GB", "2", "0"]
    assert "1g.10gb x9, 2g.20gb x1, 3g.40gb x1" in result.output
    doc = yaml.safe_load(runner.invoke(app, ["plan", EXAMPLES, "-o", "json"]).stdout)
    assert [(n["node"], n["gpus"], n["migDevices"]) for n in doc["draNodes"]] == [
        ("a100-node-0", 2, {"1g.10gb": 9, "2g.20gb": 1, "3g.40gb": 1}), ("h100-node-0", 8, {})]


def test_nvlink_pairs_of_the_node_inventory_reach_the_dra_gpus_by_uuid() -> None:
    # The node agent's inventory annotation names the physical GPUs by UUID (its index order need not be the
    # slices'): the NVLink pair GPU-c / GPU-d becomes a pair of the DRA slots, whatever their indices.
    inventory = json.dumps({"model": "H100-SXM5-80GB", "memoryMiB": 81559, "sharing": {"migStrategy": "none"},
                            "gpus": [{"index": i, "uuid": u} for i, u in enumerate(["GPU-d", "GPU-a", "GPU-c",
                                                                                     "GPU-b"])],
                            "nvlinks": [[0, 2, 18]]})
    text = node("n1") + f"metadata:\n  annotations:\n    gpufleet.io/gpus: '{inventory}'\n"
    text = text.replace("metadata: {name: n1}\n", "", 1).replace("metadata:\n", "metadata:\n  name: n1\n", 1)
    m = load(text, slice_doc("s", "n1", [gpu(i, u) for i, u in enumerate(["GPU-a", "GPU-b", "GPU-c", "GPU-d"])]))
    (ns,) = cluster(m)
    assert [g.device_id for g in ns.gpus] == ["GPU-a", "GPU-b", "GPU-c", "GPU-d"]
    assert ns.nvlinks == {(2, 3): 18}
