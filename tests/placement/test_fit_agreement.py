"""The one node-fit check against the three checks it replaced, and against what placers actually do
(issue 15, item 6).

Whether a pod fits a node was decided by the placement filters, by ``placement/stranded.fits_alone`` and by the
reference first-fit placer (``kueue/firstfit``, through the first-fit device search). They drifted: GPU model
aliases, the pod-count limit, device-level checks. Now all three ask the placement filters' ``unfit_reason``,
and the first-fit search takes its devices from ``cluster.free_devices``.

* The former code, kept verbatim in ``former_fit_checks.py``, must agree with the one check wherever it was
  right; each ``assume`` names a case where it was not (``test_fit_check.py`` pins the right answers there).
* The one check must agree with what placing the pod does: the placement engine and the first-fit placer
  place it exactly when the check says it fits, the first-fit devices are there, and the cluster's invariants
  hold after the allocation.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, assume, event, given, settings

from gpufleet.cluster.free_devices import first_free_grants
from gpufleet.scheduling.kueue.firstfit import FirstFitPlacer
from gpufleet.scheduling.placement import make_placer
from gpufleet.scheduling.placement.filters import pod_unfit_reason
from gpufleet.scheduling.placement.stranded import fits_alone
from tests.placement import former_fit_checks as former
from tests.placement.fit_cases import MODELS, NodeCase, PodCase, build_node, node_and_pod, request

SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def _exact_models(pod: PodCase) -> bool:
    return all(m in MODELS for m in pod.models)  # catalog keys only: no alias to resolve


def _closed_to(node: NodeCase, pod: PodCase) -> bool:
    """The former checks predate the gpufleet.io/gpu-fractions label (a node closed to fractional pods)."""
    return node.fractions == "false" and pod.kind == "fraction"


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
    assume(not _closed_to(node, pod))
    # It counted nvidia.com/gpu in allocatable only: a GPU holding fractions looked free to a whole-GPU pod.
    assume(pod.kind != "gpu" or not any(g.fractions for g in ns.gpus))
    req = request(pod)
    fits = pod_unfit_reason(req, ns) is None
    event(f"{pod.kind} {'fits' if fits else 'does not fit'}")
    assert former.stranded_fits_alone(ns, req.template) == fits
    assert fits_alone(ns, req.template) == fits


@SETTINGS
@given(node_and_pod())
def test_first_fit_placer_agreed_where_it_was_right(case: tuple[NodeCase, PodCase]) -> None:
    node, pod = case
    cluster = build_node(node)
    ns = cluster.nodes["n"]
    assume(_exact_models(pod) and pod.gpu_memory_gib is None)
    assume(node.mode != "mig-single" and not (node.fail_gt1 and pod.count > 1))
    assume(not _closed_to(node, pod))
    req = request(pod)
    fits = pod_unfit_reason(req, ns) is None
    event(f"{pod.kind} {'fits' if fits else 'does not fit'}")
    assert (former.first_fit_why_not(req, ns) is None) == fits


@SETTINGS
@given(node_and_pod())
def test_first_free_grants_agreed_where_it_was_right(case: tuple[NodeCase, PodCase]) -> None:
    node, pod = case
    ns = build_node(node).nodes["n"]
    assume(node.mode != "mig-single" and pod.gpu_memory_gib is None)
    demand = request(pod).template.gpu
    grants = first_free_grants(ns, demand)
    event(f"{pod.kind} {'granted' if grants is not None else 'not granted'}")
    assert former.first_free_grants(ns, demand) == grants


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node_and_pod())
def test_the_fit_check_says_exactly_when_placers_place_the_pod(case: tuple[NodeCase, PodCase]) -> None:
    node, pod = case
    req = request(pod)
    ns = build_node(node).nodes["n"]
    reason = pod_unfit_reason(req, ns)
    event(f"{pod.kind} {'fits' if reason is None else 'does not fit'}")
    if _closed_to(node, pod):
        event("fraction on a node closed to fractions")
    assert fits_alone(ns, req.template) == (reason is None)
    grants = first_free_grants(ns, req.template.gpu)
    if reason is None:
        assert grants is not None and len(grants) == (0 if pod.kind == "none" else
                                                      1 if pod.kind == "fraction" else pod.count)
    for place in ("engine", "first-fit"):
        cluster = build_node(node)
        placer = (make_placer(cluster, "gpufleet", random.Random(0)) if place == "engine"
                  else FirstFitPlacer(cluster))
        placed = placer.place([req])
        assert (placed is not None) == (reason is None), (place, reason)
        cluster.check_invariants()
        if placed is not None:
            assert [p.node for p in placed] == ["n"]
            assert placer.explain(req)  # it can say why the next copy would (not) fit, without raising
