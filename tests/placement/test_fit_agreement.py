"""The three former node-fit checks against the one that replaces them (issue 15, item 6).

Whether a pod fits a node was decided by the placement filters, by ``sim/stranded.fits_alone`` and by the
reference first-fit placer (``kueue/firstfit``, through ``cluster.state.first_free_grants``). They drifted: GPU
model aliases, the pod-count limit, device-level checks. Written against the former code: on the cases where
it was right the former checks must agree with the one check (the placement filters' ``unfit_reason``) and the
first-fit device search with ``cluster.free_devices.first_free_grants``. Outside those cases (each ``assume``
names one) they differ: that is the drift the one check removes.
"""

from __future__ import annotations

from hypothesis import HealthCheck, assume, event, given, settings

from gpufleet.cluster import free_devices
from gpufleet.cluster.state import first_free_grants as former_first_free_grants
from gpufleet.scheduling.kueue.firstfit import FirstFitPlacer
from gpufleet.scheduling.placement.filters import pod_unfit_reason
from gpufleet.sim.stranded import fits_alone as former_fits_alone
from tests.placement.fit_cases import MODELS, NodeCase, PodCase, build_node, node_and_pod, request

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _exact_models(pod: PodCase) -> bool:
    return all(m in MODELS for m in pod.models)  # catalog keys only: no alias to resolve


@SETTINGS
@given(node_and_pod())
def test_stranded_fits_alone_agreed_where_it_was_right(case: tuple[NodeCase, PodCase]) -> None:
    node, pod = case
    cluster = build_node(node)
    ns = cluster.nodes["n"]
    # Where the former check was blind: the pod-count limit, unhealthy GPUs (allocatable still counts them),
    # device shapes it never looked at (MIG single strategy, declared GPU memory, time-slice request limit).
    assume(ns.used.get("pods", 0) < ns.allocatable["pods"])
    assume(node.healthy and _exact_models(pod) and pod.gpu_memory_gib is None)
    assume(node.mode != "mig-single" and not (node.fail_gt1 and pod.count > 1))
    # It counted nvidia.com/gpu in allocatable only: a GPU holding fractions looked free to a whole-GPU pod.
    assume(pod.kind != "gpu" or not any(g.fractions for g in ns.gpus))
    req = request(pod)
    fits = pod_unfit_reason(req, ns) is None
    event(f"{pod.kind} {'fits' if fits else 'does not fit'}")
    assert former_fits_alone(ns, req.template) == fits


@SETTINGS
@given(node_and_pod())
def test_first_fit_placer_agreed_where_it_was_right(case: tuple[NodeCase, PodCase]) -> None:
    node, pod = case
    cluster = build_node(node)
    ns = cluster.nodes["n"]
    assume(_exact_models(pod) and pod.gpu_memory_gib is None)
    assume(node.mode != "mig-single" and not (node.fail_gt1 and pod.count > 1))
    req = request(pod)
    former = FirstFitPlacer(cluster)._why_not(req, ns)
    fits = pod_unfit_reason(req, ns) is None
    event(f"{pod.kind} {'fits' if fits else 'does not fit'}")
    assert (former is None) == fits, (former, pod_unfit_reason(req, ns))


@SETTINGS
@given(node_and_pod())
def test_first_free_grants_agreed_where_it_was_right(case: tuple[NodeCase, PodCase]) -> None:
    node, pod = case
    ns = build_node(node).nodes["n"]
    assume(node.mode != "mig-single" and pod.gpu_memory_gib is None)
    demand = request(pod).template.gpu
    grants = free_devices.first_free_grants(ns, demand)
    event(f"{pod.kind} {'granted' if grants is not None else 'not granted'}")
    assert former_first_free_grants(ns, demand) == grants
