"""Where the three former node-fit checks drifted, the answer of the one check (issue 15, item 6).

Each example is a case the former code got wrong (``former_fit_checks.py`` shows what it said); the callers
(the simulator's stranded-capacity metric, the first-fit placer, the first-fit device search used by the live
driver's accounting) now give the placement engine's answer.
"""

from __future__ import annotations

from gpufleet.cluster.free_devices import first_free_grants
from gpufleet.scheduling.kueue.firstfit import FirstFitPlacer
from gpufleet.scheduling.placement.filters import pod_unfit_reason
from gpufleet.scheduling.placement.stranded import fits_alone, stranded_gpus
from tests.placement import former_fit_checks as former
from tests.placement.fit_cases import A100_ALIAS, NodeCase, PodCase, build_node, request

HEALTHY = (False,) * 4


def node_case(mode: str, *, model: str = "A100-SXM4-80GB", gpus: int = 1, pods: int = 8, fail_gt1: bool = False,
              unhealthy: tuple[bool, ...] = HEALTHY, fillers: tuple[PodCase, ...] = ()) -> NodeCase:
    return NodeCase(mode, model, gpus, 2, unhealthy, pods, False, fail_gt1, fillers)


def pod_case(kind: str, *, count: int = 1, profile: str = "3g.40gb", milli: int = 500,
             gpu_memory_gib: int | None = None, models: tuple[str, ...] = ()) -> PodCase:
    return PodCase(kind, count, profile, milli, gpu_memory_gib, 500, models, True)


def test_a_node_at_its_pod_limit_strands_its_idle_gpus() -> None:
    cluster = build_node(node_case("whole", pods=1, fillers=(pod_case("none"),)))
    ns = cluster.nodes["n"]
    t = request(pod_case("gpu")).template
    assert former.stranded_fits_alone(ns, t)  # it never looked at the pod-count limit
    assert pod_unfit_reason(request(pod_case("gpu")), ns) == "Too many pods"
    assert not fits_alone(ns, t)
    assert stranded_gpus(cluster, [t]) == (1.0, 1.0)


def test_an_allowed_model_named_by_its_product_name_matches() -> None:
    cluster = build_node(node_case("whole"))
    ns = cluster.nodes["n"]
    req = request(pod_case("gpu", models=(A100_ALIAS,)))
    assert not former.stranded_fits_alone(ns, req.template)
    assert former.first_fit_why_not(req, ns) is not None
    assert fits_alone(ns, req.template)
    placed = FirstFitPlacer(cluster).place([req])
    assert placed is not None and placed[0].node == "n"


def test_a_gpu_holding_fractions_is_not_free_for_a_whole_gpu_pod() -> None:
    cluster = build_node(node_case("whole", fillers=(pod_case("fraction", milli=250),)))
    ns = cluster.nodes["n"]
    t = request(pod_case("gpu")).template
    assert former.stranded_fits_alone(ns, t)  # allocatable nvidia.com/gpu still showed 1 free
    assert not fits_alone(ns, t)
    assert pod_unfit_reason(request(pod_case("gpu")), ns) == "Insufficient nvidia.com/gpu"


def test_an_unhealthy_gpu_is_no_room() -> None:
    cluster = build_node(node_case("whole", unhealthy=(True, False, False, False)))
    ns = cluster.nodes["n"]
    t = request(pod_case("gpu")).template
    assert former.stranded_fits_alone(ns, t)
    assert not fits_alone(ns, t)


def test_single_strategy_mig_instances_serve_nvidia_com_gpu() -> None:
    cluster = build_node(node_case("mig-single"))
    ns = cluster.nodes["n"]
    req = request(pod_case("gpu"))
    assert former.first_free_grants(ns, req.template.gpu) is None
    [grant] = first_free_grants(ns, req.template.gpu) or []
    assert (grant.kind, grant.gpu, grant.slot) == ("mig", 0, 0)
    placed = FirstFitPlacer(cluster).place([req])
    assert placed is not None and placed[0].grants == (grant,)


def test_a_mig_resource_the_node_does_not_advertise_is_not_granted() -> None:
    # The single strategy advertises its 3g.40gb instances as nvidia.com/gpu, never as nvidia.com/mig-3g.40gb.
    ns = build_node(node_case("mig-single")).nodes["n"]
    demand = request(pod_case("mig")).template.gpu
    assert former.first_free_grants(ns, demand) is not None  # it matched instances by profile alone
    assert first_free_grants(ns, demand) is None


def test_declared_gpu_memory_rules_out_smaller_mig_instances() -> None:
    ns = build_node(node_case("mig-mixed")).nodes["n"]
    demand = request(pod_case("mig", profile="2g.20gb", gpu_memory_gib=30)).template.gpu
    assert former.first_free_grants(ns, demand) is not None
    assert first_free_grants(ns, demand) is None


def test_a_node_refusing_requests_of_several_replicas_is_refused_by_first_fit_too() -> None:
    cluster = build_node(node_case("replicas", fail_gt1=True))
    ns = cluster.nodes["n"]
    req = request(pod_case("shared", count=2))
    assert former.first_fit_why_not(req, ns) is None
    assert pod_unfit_reason(req, ns) == "node(s) refuse requests of more than one time-slice replica"
    assert FirstFitPlacer(cluster).place([req]) is None
    assert FirstFitPlacer(cluster).place([request(pod_case("shared", count=1))]) is not None
