"""Partitionable devices (NVIDIA's dynamic MIG, KEP-4815): a GPU published whole and as the MIG devices that could be
carved from it, all drawing on its counter set. gpufleet offers it whole or carved, never both, and never carves more
than the counters hold; the MIG geometry of the catalog checks the counters independently."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpufleet.api.errors import LEFT_OUT
from gpufleet.api.manifests import Manifests
from gpufleet.api.objects import GpuDemand, PodResourceClaim
from gpufleet.cli.main import app
from gpufleet.cluster.devices import DeviceGrant, InvariantError
from gpufleet.cluster.dra_claims import DraCatalog, published_devices, resolve_pod_claims
from gpufleet.cluster.free_devices import free_device_count
from gpufleet.cluster.state import ClusterState, first_free_grants
from gpufleet.gpu.mig import MigPlacement, check_layout, geometry_for
from gpufleet.scheduling.placement import make_placer
from gpufleet.scheduling.types import PodRequest
from tests.conftest import manifests
from tests.dra.dynamic_mig import CLASSES, allocated_claim, dynamic_mig_slices, node, profile_template, template
from tests.placement.placement_helpers import pod

runner = CliRunner()
TEMPLATES = (template("whole", "gpu", "gpu.nvidia.com") + profile_template("one-g", "1g.10gb")
             + profile_template("two-g", "2g.20gb") + profile_template("three-g", "3g.40gb")
             + profile_template("seven-g", "7g.80gb") + profile_template("pair-1g", "1g.10gb", count=2))


def _load(text: str) -> Manifests:
    m = manifests(text, "dynamic.yaml")
    assert not m.problems.errors, [str(e) for e in m.problems.errors]
    return m


def test_a_dynamic_mig_gpu_is_offered_whole_with_every_placement_it_could_carve() -> None:
    m = _load(node("n1") + dynamic_mig_slices("n1", gpus=2))
    assert not m.problems.warnings, [w.message for w in m.problems.warnings]
    (ns,) = ClusterState.from_nodes(m.nodes).nodes.values()
    assert [(g.mode, g.dra_device) for g in ns.gpus] == [("whole", "gpu-0"), ("whole", "gpu-1")]
    g = ns.gpus[0]
    # 7 x 1g.10gb, 4 x 1g.20gb, 3 x 2g.20gb, 2 x 3g.40gb, 4g.40gb, 7g.80gb
    assert len(g.partitions) == 18
    assert g.partitions[0].dra_device == "gpu-0-mig-1g10gb-19-0"
    assert g.counters["gpu-0-counter-set/memory-slice-7"] == 1
    assert g.whole_consumes == g.counters
    # counted as the resources a device plugin would advertise (the counters decide what goes together)
    assert ns.allocatable["nvidia.com/gpu"] == 2 and ns.allocatable["nvidia.com/mig-3g.40gb"] == 4


def test_counter_sets_several_gpus_share_are_not_carved_and_said() -> None:
    m = _load(node("n1") + dynamic_mig_slices("n1", gpus=2, shared_set=True))
    (ns,) = ClusterState.from_nodes(m.nodes).nodes.values()
    assert all(g.mode == "whole" and not g.partitions for g in ns.gpus)
    assert len(m.problems.warnings) == 2
    w = m.problems.warnings[0]
    assert w.code == LEFT_OUT and w.kind == "ResourceSlice" and w.field.startswith("spec.devices[")
    assert "consumed by the devices of several GPUs" in w.message and "the GPU is offered without them" in w.message


def test_a_counter_set_missing_from_the_pool_is_named() -> None:
    text = dynamic_mig_slices("n1", gpus=1).replace("name: gpu-0-counter-set", "name: other-set", 1)
    m = _load(node("n1") + text)
    (w,) = m.problems.warnings
    assert "consumes counter set gpu-0-counter-set, which no slice of pool n1 has" in w.message


def _partition(ns: Any, gpu: int, profile: str, start: int) -> int:
    return next(k for k, p in enumerate(ns.gpus[gpu].partitions)
                if p.placement == MigPlacement(profile, start))


def test_carving_and_the_whole_gpu_exclude_each_other_within_the_counters() -> None:
    cluster = ClusterState.from_nodes(_load(node("n1") + dynamic_mig_slices("n1")).nodes)
    ns = cluster.nodes["n1"]
    three_at_0 = DeviceGrant("partition", 0, _partition(ns, 0, "3g.40gb", 0))
    cluster.allocate("ml/a", "n1", {}, [three_at_0])
    assert not ns.gpus[0].is_free and ns.gpus[0].carved
    with pytest.raises(InvariantError):
        cluster.allocate("ml/whole", "n1", {}, [DeviceGrant("whole", 0)])
    with pytest.raises(InvariantError):  # 4g.40gb@0 needs memory slices 0-3, which 3g.40gb@0 holds
        cluster.allocate("ml/b", "n1", {}, [DeviceGrant("partition", 0, _partition(ns, 0, "4g.40gb", 0))])
    cluster.allocate("ml/c", "n1", {}, [DeviceGrant("partition", 0, _partition(ns, 0, "3g.40gb", 4))])
    with pytest.raises(InvariantError):  # 6 of 7 compute slices and every memory slice are carved
        cluster.allocate("ml/d", "n1", {}, [DeviceGrant("partition", 0, _partition(ns, 0, "1g.10gb", 6))])
    cluster.release("ml/a")
    cluster.release("ml/c")
    assert ns.gpus[0].is_free
    cluster.allocate("ml/whole", "n1", {}, [DeviceGrant("whole", 0)])
    with pytest.raises(InvariantError):
        cluster.allocate("ml/e", "n1", {}, [DeviceGrant("partition", 0, _partition(ns, 0, "1g.10gb", 0))])


def test_devices_of_one_profile_are_counted_by_what_can_be_carved_together() -> None:
    # A counter set of 28 multiprocessors holds two 1g.10gb devices (14 each), whatever memory slices are free.
    cluster = ClusterState.from_nodes(_load(node("n1") + dynamic_mig_slices("n1", multiprocessors=28)).nodes)
    ns = cluster.nodes["n1"]
    one_g = GpuDemand(kind="mig", count=1, resource="nvidia.com/mig-1g.10gb", mig_profile="1g.10gb")
    assert free_device_count(ns, one_g) == 2
    assert first_free_grants(ns, replace(one_g, count=3)) is None
    grants = first_free_grants(ns, replace(one_g, count=2))
    assert grants is not None
    cluster.allocate("ml/two", "n1", {}, grants)
    assert free_device_count(ns, one_g) == 0


# ---- placement: counters never exceeded, whatever comes and goes ------------------------------------------------

FLEET = _load(node("n1") + node("n2") + dynamic_mig_slices("n1", gpus=2) + dynamic_mig_slices("n2", gpus=1)
              + CLASSES + TEMPLATES)
CATALOG = DraCatalog(classes={c.name: c for c in FLEET.device_classes},
                     templates={t.key: t for t in FLEET.resource_claim_templates},
                     devices=published_devices(FLEET.nodes, FLEET.resource_slices))


def _claimed(key: str, template_name: str) -> PodRequest:
    namespace, name = key.split("/")
    refs = (PodResourceClaim("gpus", resource_claim_template_name=template_name),)
    need = resolve_pod_claims(namespace, name, refs, CATALOG)
    assert need.problem is None, need.problem
    base = pod(key)
    return replace(base, template=replace(base.template, resource_claims=refs, dra=need,
                                          gpu=need.choices[0].demand))


def _check_invariants(cluster: ClusterState) -> None:
    for ns in cluster.nodes.values():
        for g in ns.gpus:
            used = g.counters_used()
            assert all(amount <= g.counters.get(name, 0) for name, amount in used.items()), (ns.name, g.index, used)
            carved = [p.placement for p in g.partitions if p.holder is not None]
            assert not (g.holder is not None and carved)
            geometry = geometry_for(g.model)
            assert geometry is not None
            check_layout(geometry, carved)  # the MIG geometry agrees: the carved devices can exist together


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["whole", "one-g", "two-g", "three-g", "seven-g", "pair-1g"]),
                          st.integers(min_value=0, max_value=2)), min_size=1, max_size=30),
       st.sampled_from(["gpufleet", "binpack", "spread"]))
def test_counters_are_never_exceeded_and_no_device_is_held_twice(steps: list[tuple[str, int]], profile: str) -> None:
    cluster = ClusterState.from_nodes(FLEET.nodes)
    placer = make_placer(cluster, profile, random.Random(0))
    live: list[str] = []
    placed_any = False
    for i, (template_name, releases) in enumerate(steps):
        key = f"ml/p{i}"
        if placer.place([_claimed(key, template_name)]) is not None:
            live.append(key)
            placed_any = True
            held = cluster.placements[key].device_ids
            assert len(held) == (2 if template_name == "pair-1g" else 1)
        _check_invariants(cluster)
        for _ in range(min(releases, len(live))):
            cluster.release(live.pop(0))
    every = [d for key in live for d in cluster.placements[key].device_ids]
    assert len(every) == len(set(every))
    assert placed_any  # the fleet is empty at first: the first pod always fits


def test_seven_one_g_devices_fill_a_gpu_and_an_eighth_goes_elsewhere() -> None:
    cluster = ClusterState.from_nodes(FLEET.nodes)
    placer = make_placer(cluster, "binpack", random.Random(0))
    for i in range(7):
        assert placer.place([_claimed(f"ml/s{i}", "one-g")]) is not None
    first = {(cluster.placements[f"ml/s{i}"].node, cluster.placements[f"ml/s{i}"].grants[0].gpu) for i in range(7)}
    assert len(first) == 1  # packed onto one GPU, seven of its seven compute slices
    (node_name, gpu), = first
    assert placer.place([_claimed("ml/s7", "one-g")]) is not None
    assert (cluster.placements["ml/s7"].node, cluster.placements["ml/s7"].grants[0].gpu) != (node_name, gpu)
    _check_invariants(cluster)


# ---- plan ---------------------------------------------------------------------------------------------------------

def _pod(name: str, template_name: str) -> str:
    return f"""---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: ml}}
spec:
  resourceClaims: [{{name: gpus, resourceClaimTemplateName: {template_name}}}]
  containers: [{{name: c, image: x, resources: {{requests: {{cpu: "1"}}, claims: [{{name: gpus}}]}}}}]
"""


def test_plan_carves_mig_devices_and_keeps_the_carved_gpu_from_a_whole_gpu_claim(tmp_path: Path) -> None:
    path = tmp_path / "dynamic.yaml"
    path.write_text(node("n1") + dynamic_mig_slices("n1", gpus=1) + CLASSES + TEMPLATES
                    + _pod("small", "three-g") + _pod("big", "whole"), encoding="utf-8")
    got = runner.invoke(app, ["plan", str(path), "--until-stable", "-o", "json"])
    assert got.exit_code == 0, got.output
    doc = json.loads(got.stdout)
    admitted = {p["pod"]: p for c in doc["cycles"] for a in c["admitted"] for p in a["pods"]}
    assert [c["device"] for c in admitted["ml/small"]["claims"]] == ["gpu-0-mig-3g40gb-9-0"]
    assert "ml/big" not in admitted
    assert doc["draNodes"][0]["dynamicMigGpus"] == 1
    assert "ml/big" in {p["workload"] for p in doc["cycles"][-1]["pending"]}


def _orphan(name: str, device: str) -> str:
    return allocated_claim(name, [device], request="mig", cls="mig.nvidia.com")


def test_a_claim_allocated_for_no_pod_holds_its_device_and_its_counters(tmp_path: Path) -> None:
    # An allocated claim whose pod is gone holds 1g.10gb@0 (memory slice 0) until it is deallocated: the whole GPU
    # is not to be had, nor 4g.40gb@0 (memory slices 0-3); 3g.40gb@4 is.
    path = tmp_path / "orphan.yaml"
    path.write_text(node("n1") + dynamic_mig_slices("n1", gpus=1) + CLASSES + TEMPLATES
                    + profile_template("four-g", "4g.40gb") + _orphan("gone-gpus-zzzzz", "gpu-0-mig-1g10gb-19-0")
                    + _pod("whole", "whole") + _pod("four", "four-g") + _pod("three", "three-g"), encoding="utf-8")
    got = runner.invoke(app, ["plan", str(path), "--until-stable", "-o", "json"])
    assert got.exit_code == 0, got.output
    doc = json.loads(got.stdout)
    admitted = {p["pod"]: p for c in doc["cycles"] for a in c["admitted"] for p in a["pods"]}
    assert sorted(admitted) == ["ml/three"]
    assert [c["device"] for c in admitted["ml/three"]["claims"]] == ["gpu-0-mig-3g40gb-9-4"]


PREEMPTION = """---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: low}
value: 1
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: high}
value: 100
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: a}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 64}]}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: a, namespace: ml}
spec: {clusterQueue: a}
"""


def _queued_pod(name: str, template_name: str, priority: str, *, running: str | None = None,
                created: str = "2026-01-01T00:00:00Z") -> str:
    text = _pod(name, template_name).replace(
        "namespace: ml}", f"namespace: ml, creationTimestamp: '{created}', labels: {{kueue.x-k8s.io/queue-name: a, "
                          f"kueue.x-k8s.io/priority-class: {priority}}}}}", 1)
    if running:
        text = text.replace("spec:\n", "spec:\n  nodeName: n1\n", 1) + (
            f"status:\n  phase: Running\n  resourceClaimStatuses: [{{name: gpus, resourceClaimName: {running}}}]\n")
    return text


@pytest.mark.parametrize(("low_template", "low_device", "high_template"), [
    ("three-g", "gpu-0-mig-3g40gb-9-0", "whole"),  # a whole GPU preempts a carved one
    ("whole", "gpu-0", "three-g"),  # a MIG device preempts the pod holding its GPU whole
])
def test_preemption_frees_a_dynamic_mig_gpu_for_the_other_way(tmp_path: Path, low_template: str, low_device: str,
                                                              high_template: str) -> None:
    whole = low_template == "whole"
    claim = allocated_claim("low-gpus-aaaaa", [low_device], request="gpu" if whole else "mig",
                            cls="gpu.nvidia.com" if whole else "mig.nvidia.com", reserved_for="low")
    path = tmp_path / "preempt.yaml"
    path.write_text(node("n1") + dynamic_mig_slices("n1", gpus=1) + CLASSES + TEMPLATES + PREEMPTION + claim
                    + _queued_pod("low", low_template, "low", running="low-gpus-aaaaa")
                    + _queued_pod("high", high_template, "high", created="2026-01-01T01:00:00Z"), encoding="utf-8")
    got = runner.invoke(app, ["plan", str(path), "--cycles", "3", "-o", "json"])
    assert got.exit_code == 0, got.output
    doc = json.loads(got.stdout)
    assert [p["workload"] for p in doc["cycles"][0]["preempted"]] == ["ml/low"]
    admitted = {p["pod"]: p for c in doc["cycles"] for a in c["admitted"] for p in a["pods"]}
    assert "ml/high" in admitted


def test_a_carved_gpu_is_carved_further_before_a_whole_one_is() -> None:
    cluster = ClusterState.from_nodes(_load(node("n1") + dynamic_mig_slices("n1", gpus=2)).nodes)
    ns = cluster.nodes["n1"]
    cluster.allocate("ml/first", "n1", {}, [DeviceGrant("partition", 1, _partition(ns, 1, "3g.40gb", 0))])
    one_g = GpuDemand(kind="mig", count=1, resource="nvidia.com/mig-1g.10gb", mig_profile="1g.10gb")
    grants = first_free_grants(ns, one_g)
    assert grants is not None and grants[0].gpu == 1  # GPU 0 stays whole for a whole-GPU claim
