"""Each filter plugin on small hand-built nodes, and explain()'s kube-style summary."""

from __future__ import annotations

import random
from collections.abc import Sequence

from gpufleet.api.objects import Requirement, Taint, Toleration
from gpufleet.cluster.devices import DeviceGrant
from gpufleet.cluster.state import ClusterState, NodeState
from gpufleet.scheduling.placement import make_placer
from gpufleet.scheduling.placement.filters import fit_count
from gpufleet.scheduling.placement.need import Interner, compile_need
from gpufleet.scheduling.types import PodRequest
from tests.placement.placement_helpers import casestudy, gpu_node, placer, pod


def reason(nodes: Sequence[NodeState], p: PodRequest) -> str | None:
    return placer(nodes).why_not(p, nodes[0].name)


def test_node_selector_and_required_affinity_operators() -> None:
    n = gpu_node("n", labels={"zone": "a", "gen": "5"})
    assert reason([n], pod("p", selector={"zone": "a"})) is None
    assert reason([n], pod("p", selector={"zone": "b"})) == "node(s) didn't match Pod's node affinity/selector"
    cases = [
        (Requirement("zone", "In", ("a", "b")), True),
        (Requirement("zone", "In", ("b",)), False),
        (Requirement("zone", "NotIn", ("b",)), True),
        (Requirement("zone", "NotIn", ("a",)), False),
        (Requirement("zone", "Exists"), True),
        (Requirement("rack", "Exists"), False),
        (Requirement("rack", "DoesNotExist"), True),
        (Requirement("zone", "DoesNotExist"), False),
        (Requirement("gen", "Gt", ("4",)), True),
        (Requirement("gen", "Gt", ("5",)), False),
        (Requirement("gen", "Lt", ("6",)), True),
        (Requirement("gen", "Lt", ("5",)), False),
    ]
    for req, ok in cases:
        got = reason([n], pod("p", affinity=[[req]]))
        assert (got is None) == ok, req
    # Terms are ORed, requirements inside a term ANDed.
    bad, good = Requirement("zone", "In", ("b",)), Requirement("gen", "Gt", ("1",))
    assert reason([n], pod("p", affinity=[[bad], [good]])) is None
    assert reason([n], pod("p", affinity=[[bad, good]])) is not None


def test_taints_need_tolerations_prefer_no_schedule_ignored() -> None:
    n = gpu_node("n", taints=[Taint("gpu", "true", "NoSchedule"), Taint("soft", "", "PreferNoSchedule")])
    assert reason([n], pod("p")) == "node(s) had untolerated taint {gpu: true}"
    assert reason([n], pod("p", tolerations=[Toleration("gpu", "Equal", "true")])) is None
    assert reason([n], pod("p", tolerations=[Toleration("gpu", "Equal", "false")])) is not None
    # The flavor's tolerations count as the pod's own.
    assert reason([n], pod("p", extra_tolerations=[Toleration("gpu", "Exists")])) is None
    ne = gpu_node("e", taints=[Taint("evict", "x", "NoExecute")])
    assert reason([ne], pod("p")) == "node(s) had untolerated taint {evict: x}"
    assert reason([ne], pod("p", tolerations=[Toleration("evict", "Exists", effect="NoSchedule")])) is not None


def test_flavor_node_labels_must_all_be_present() -> None:
    n = gpu_node("n", labels={"pool": "a100", "tier": "gold"})
    assert reason([n], pod("p", node_labels=[("pool", "a100"), ("tier", "gold")])) is None
    assert reason([n], pod("p", node_labels=[("pool", "a100"), ("tier", "silver")])) == \
        "node(s) didn't match the flavor's node labels"


def test_cpu_memory_pods_and_gpu_counts() -> None:
    n = gpu_node("n", gpus=2, cpu=4000, mem_gib=8, pods=2)
    assert reason([n], pod("p", cpu=4000, mem_gib=8, gpus=2)) is None
    assert reason([n], pod("p", cpu=4001)) == "Insufficient cpu"
    assert reason([n], pod("p", mem_gib=9)) == "Insufficient memory"
    assert reason([n], pod("p", gpus=3)) == "Insufficient nvidia.com/gpu"
    pl = placer([n])
    assert pl.place([pod("a", cpu=1)]) and pl.place([pod("b", cpu=1)])
    assert pl.why_not(pod("c", cpu=1), "n") == "Too many pods"
    # A node without the extended resource is insufficient for it.
    cpu_only = gpu_node("c", gpus=0)
    assert reason([cpu_only], pod("p", gpus=1)) == "Insufficient nvidia.com/gpu"


def test_gpu_model_constraint() -> None:
    t4 = gpu_node("t4", "T4", 1)
    assert reason([t4], pod("p", gpus=1, models=["T4", "L4"])) is None
    assert reason([t4], pod("p", gpus=1, models=["A100-SXM4-80GB"])) == "node(s) didn't have an allowed GPU model"
    assert reason([t4], pod("p", gpus=1)) is None


def test_whole_gpus_busy_with_fractions_are_not_free() -> None:
    n = gpu_node("n", gpus=1)
    cluster = ClusterState([n])
    cluster.allocate("f", "n", {}, [DeviceGrant("fraction", 0, milli=100, memory_mib=8192)])
    pl = make_placer(cluster, "binpack", random.Random(0))
    # The count resource still says 1 free; the device filter knows better.
    assert pl.why_not(pod("p", gpus=1), "n") == "Insufficient nvidia.com/gpu"


def test_fraction_fits_on_one_gpu_by_milli_and_memory() -> None:
    n = gpu_node("n", gpus=2)  # A100-80GB: 81920 MiB
    cluster = ClusterState([n])
    cluster.allocate("x", "n", {}, [DeviceGrant("fraction", 0, milli=600, memory_mib=49152)])
    cluster.allocate("y", "n", {}, [DeviceGrant("fraction", 1, milli=600, memory_mib=49152)])
    pl = make_placer(cluster, "binpack", random.Random(0))
    assert pl.why_not(pod("a", milli=400), "n") is None
    # 0.5 fits on neither GPU (0.4 left on each), though 0.8 is free in total.
    assert pl.why_not(pod("b", milli=500), "n") == "node(s) had no GPU with room for the pod's GPU fraction"
    # Memory alone decides the share: 40 GiB of 80 is 0.5 of a GPU.
    assert pl.why_not(pod("c", gpu_memory_mib=40960), "n") is not None
    assert pl.why_not(pod("d", gpu_memory_mib=30000), "n") is None


def test_declared_gpu_memory_never_above_the_device() -> None:
    t4 = gpu_node("t4", "T4", 1)  # 15360 MiB
    assert reason([t4], pod("p", gpus=1, gpu_memory_mib=15360)) is None
    assert reason([t4], pod("p", gpus=1, gpu_memory_mib=20000)) == \
        "node(s) had GPUs with less memory than the pod's 20000 MiB"
    assert reason([t4], pod("p", gpu_memory_mib=20000)) is not None  # a fraction bigger than the GPU


def test_time_slice_replicas_and_fail_requests_greater_than_one() -> None:
    strict = gpu_node("s", "L40S", 1, mode="replicas", replicas=4, fail_gt1=True)
    lax = gpu_node("l", "L40S", 1, mode="replicas", replicas=4)
    assert reason([strict], pod("p", shared=1)) is None
    assert reason([strict], pod("p", shared=2)) == "node(s) refuse requests of more than one time-slice replica"
    assert reason([lax], pod("p", shared=2)) is None
    pl = placer([lax])
    for i in range(4):
        assert pl.place([pod(f"r{i}", shared=1)]) is not None
    assert pl.why_not(pod("x", shared=1), "l") == "Insufficient nvidia.com/gpu.shared"


def test_mig_profile_availability_and_memory() -> None:
    cluster = casestudy()
    pl = make_placer(cluster, "binpack", random.Random(0))
    assert pl.why_not(pod("p", mig="3g.40gb"), "a100-h-0") is None
    assert pl.why_not(pod("p", mig="1g.10gb"), "a100-h-0") == "Insufficient nvidia.com/mig-1g.10gb"
    assert pl.why_not(pod("p", mig="1g.10gb"), "a100-b-0") is None
    assert pl.why_not(pod("p", mig="1g.10gb", gpu_memory_mib=20000), "a100-b-0") == \
        "node(s) had GPUs with less memory than the pod's 20000 MiB"
    # Both instances of a100-h-0 taken: the count resource and the devices agree.
    for k in range(2):
        assert pl.place([pod(f"m{k}", mig="3g.40gb", selector={"kubernetes.io/hostname": "a100-h-0"})])
    assert pl.why_not(pod("q", mig="3g.40gb"), "a100-h-0") == "Insufficient nvidia.com/mig-3g.40gb"


def test_not_ready_and_unschedulable_nodes() -> None:
    assert reason([gpu_node("n", ready=False)], pod("p")) == "node(s) were not ready"
    assert reason([gpu_node("n", unschedulable=True)], pod("p")) == "node(s) were unschedulable"


def test_fit_count_counts_copies() -> None:
    n = gpu_node("n", gpus=8, cpu=10_000, mem_gib=64)
    intern = Interner()
    assert fit_count(compile_need(pod("p", cpu=3000, gpus=2), intern), n) == 3  # CPU binds: 10/3
    assert fit_count(compile_need(pod("p", cpu=1000, gpus=3), intern), n) == 2  # GPUs bind: 8/3
    assert fit_count(compile_need(pod("p", cpu=100, milli=300), intern), n) == 8 * 3  # 3 per GPU


def test_explain_counts_each_node_under_its_first_failing_filter() -> None:
    nodes = [gpu_node(f"full-{i}", gpus=1) for i in range(4)]
    nodes += [gpu_node(f"other-{i}", labels={"team": "b"}) for i in range(8)]
    nodes += [gpu_node(f"tainted-{i}", labels={"team": "a"}, taints=[Taint("dedicated", "ml")]) for i in range(6)]
    for i in range(4):
        nodes[i].labels["team"] = "a"
    pl = placer(nodes)
    for i in range(4):
        assert pl.place([pod(f"fill-{i}", gpus=1, selector={"kubernetes.io/hostname": f"full-{i}"})])
    text = pl.explain(pod("p", gpus=1, selector={"team": "a"}))
    assert text == ("0/18 nodes are available: 4 Insufficient nvidia.com/gpu, "
                    "6 node(s) had untolerated taint {dedicated: ml}, "
                    "8 node(s) didn't match Pod's node affinity/selector.")
    # The naive placer says the same.
    naive = make_placer(pl.cluster, "binpack", random.Random(0), indexed=False)
    assert naive.explain(pod("p", gpus=1, selector={"team": "a"})) == text
    assert pl.explain(pod("q", gpus=1)).startswith("8/18 nodes are available: ")


def test_identity_label_selectors_are_checked_per_node() -> None:
    nodes = [gpu_node(f"n{i}") for i in range(5)]  # one class: they differ only by hostname
    pl = placer(nodes)
    assert pl.index is not None and pl.index.class_count() == 1
    placed = pl.place([pod("p", gpus=1, selector={"kubernetes.io/hostname": "n3"})])
    assert placed is not None and placed[0].node == "n3"
    aff = [[Requirement("kubernetes.io/hostname", "In", ("n1",))]]
    placed = pl.place([pod("a", gpus=1, affinity=aff)])
    assert placed is not None and placed[0].node == "n1"
    assert pl.explain(pod("q", gpus=1, selector={"kubernetes.io/hostname": "nx"})) == \
        "0/5 nodes are available: 5 node(s) didn't match Pod's node affinity/selector."
