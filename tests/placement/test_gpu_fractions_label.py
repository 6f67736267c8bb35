"""The node label ``gpufleet.io/gpu-fractions: "false"``: a node closed to fractional pods (issue 18).

It goes through the one fit check (the placement filters' ``unfit_reason``), so the placement engine, the
first-fit placer and the simulator's stranded-capacity metric agree on it; whole GPUs, MIG instances and
time-slice replicas are unaffected.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings

from gpufleet.api.manifests import load_manifests
from gpufleet.api.objects import GPU_FRACTIONS_LABEL
from gpufleet.cluster.state import ClusterState
from gpufleet.scheduling.kueue.firstfit import FirstFitPlacer
from gpufleet.scheduling.placement import make_placer
from gpufleet.scheduling.placement.filters import pod_unfit_reason
from gpufleet.scheduling.placement.stranded import fits_alone, stranded_gpus
from tests.placement.fit_cases import NodeCase, PodCase, build_node, node_and_pod, request

CLOSED_REASON = "node(s) closed to fractional GPUs (gpufleet.io/gpu-fractions=false)"


def _node(fractions: str | None, *, mode: str = "whole", gpus: int = 2) -> NodeCase:
    return NodeCase(mode, "A100-SXM4-80GB", gpus, 2, (False,) * 4, 8, False, False, (), fractions)


def _pod(kind: str, *, milli: int = 500, count: int = 1, profile: str = "3g.40gb") -> PodCase:
    return PodCase(kind, count, profile, milli, None, 500, (), True)


def _two_nodes(closed: str, open_: str) -> ClusterState:
    """Two identical whole-GPU nodes, the first (by name) closed to fractions."""
    a = build_node(_node("false"), closed).nodes[closed]
    b = build_node(_node(None), open_).nodes[open_]
    return ClusterState([a, b])


def test_a_fractional_pod_is_refused_on_a_closed_node_with_the_label_named() -> None:
    ns = build_node(_node("false")).nodes["n"]
    req = request(_pod("fraction"))
    assert pod_unfit_reason(req, ns) == CLOSED_REASON
    assert not fits_alone(ns, req.template)
    placer = make_placer(build_node(_node("false")), "gpufleet", random.Random(0))
    assert placer.place([req]) is None
    assert CLOSED_REASON in str(placer.explain(req))


def test_the_engine_and_first_fit_put_the_fraction_on_the_open_node() -> None:
    req = request(_pod("fraction", milli=250))
    for make in (lambda c: make_placer(c, "gpufleet", random.Random(0)), FirstFitPlacer):
        cluster = _two_nodes("a-closed", "b-open")
        placed = make(cluster).place([req])
        assert placed is not None and placed[0].node == "b-open"


def test_whole_gpus_still_go_to_the_closed_node() -> None:
    cluster = _two_nodes("a-closed", "b-open")
    placer = FirstFitPlacer(cluster)  # first fit: the first node by name, the closed one
    placed = placer.place([request(_pod("gpu", count=2))])
    assert placed is not None and placed[0].node == "a-closed"
    assert pod_unfit_reason(request(_pod("gpu", count=2)), build_node(_node("false")).nodes["n"]) is None


def test_mig_instances_and_replicas_on_a_closed_node_are_unaffected() -> None:
    mig = build_node(_node("false", mode="mig-mixed")).nodes["n"]
    assert pod_unfit_reason(request(_pod("mig", profile="1g.10gb")), mig) is None
    shared = build_node(_node("false", mode="replicas")).nodes["n"]
    assert pod_unfit_reason(request(_pod("shared")), shared) is None


def test_true_and_other_values_leave_the_node_open() -> None:
    req = request(_pod("fraction"))
    for value in (None, "true", "False", "no", ""):
        assert pod_unfit_reason(req, build_node(_node(value)).nodes["n"]) is None, value


def test_a_closed_node_is_spare_not_stranded_for_fractional_demand() -> None:
    # No fractional pod may ever use a closed node, so its idle GPUs are spare for them, not stranded (the
    # stranded measure counts only capacity a pending pod could use were it free).
    cluster = build_node(_node("false"))
    fraction = request(_pod("fraction")).template
    whole = request(_pod("gpu")).template
    assert stranded_gpus(cluster, [fraction]) == (0.0, 2.0)  # (stranded, idle)
    assert stranded_gpus(cluster, [fraction, whole]) == (0.0, 2.0)
    assert not fits_alone(cluster.nodes["n"], fraction) and fits_alone(cluster.nodes["n"], whole)


def test_validate_warns_on_another_value_naming_node_and_label(tmp_path: Path) -> None:
    path = tmp_path / "node.yaml"
    path.write_text(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: gpu-a\n  labels:\n"
        f"    {GPU_FRACTIONS_LABEL}: \"nope\"\n"
        "status:\n  allocatable: {cpu: \"8\", memory: 32Gi, nvidia.com/gpu: \"2\", pods: \"110\"}\n",
        encoding="utf-8")
    m = load_manifests([str(path)])
    [warning] = m.problems.warnings
    text = str(warning)
    assert "gpu-a" in text and GPU_FRACTIONS_LABEL in text and '"true"' in text and '"false"' in text
    assert ":6:" in text  # the label's line
    assert not m.problems.errors and len(m.nodes) == 1
    assert m.nodes[0].meta.labels[GPU_FRACTIONS_LABEL] == "nope"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node_and_pod())
def test_closing_a_node_changes_only_fractional_pods_and_every_fit_check_agrees(
        case: tuple[NodeCase, PodCase]) -> None:
    node, pod = case
    req = request(pod)
    opened = build_node(replace(node, fractions=None)).nodes["n"]
    closed_cluster = build_node(replace(node, fractions="false"))
    closed = closed_cluster.nodes["n"]
    was = pod_unfit_reason(req, opened)
    now = pod_unfit_reason(req, closed)
    event(f"{pod.kind}: {'closed' if now == CLOSED_REASON else 'same' if now == was else 'other'}")
    if pod.kind != "fraction":
        assert now == was
    else:
        # Refused, by the label unless an earlier static filter (readiness, selector, taints, model) refused it.
        assert now is not None
        assert now in (CLOSED_REASON, was)
    # The simulator's metric, the first-fit placer and the placement engine give the same answer.
    assert fits_alone(closed, req.template) == (now is None)
    for placer in (make_placer(closed_cluster, "gpufleet", random.Random(0)),
                   FirstFitPlacer(build_node(replace(node, fractions="false")))):
        assert (placer.place([req]) is not None) == (now is None)
