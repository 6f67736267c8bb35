"""Lint's fractional rule is the parser's and the webhook's (gpufleet.api.gpushare.is_fractional), in Python and in
CEL, and the containers that use a GPU are each named once (review of issue 29)."""

from __future__ import annotations

from typing import Any

import celpy
import pytest
from celpy.adapter import json_to_cel

from gpufleet.api import gpushare
from gpufleet.api.workloadkinds.templates import RawTemplate
from gpufleet.policy import cel
from gpufleet.policy import containers as pc

_GPU = {"resources": {"limits": {"nvidia.com/gpu": 1}}}
_HAMI = {"resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 2000}}}

# (annotations, containers, init containers, the containers using a GPU, fractional)
CASES: list[tuple[dict[str, str], list[dict[str, Any]], list[dict[str, Any]], list[str], bool]] = [
    # a memory hint on a whole-GPU pod: its sidecar uses no GPU
    ({"gpufleet.io/gpu-memory": "20000"}, [{"name": "trainer", **_GPU}, {"name": "log-sidecar"}], [],
     ["trainer"], False),
    ({"gpu-memory": "2000"}, [{"name": "trainer", **_GPU}, {"name": "log-sidecar"}], [], ["trainer"], False),
    # a memory annotation on a pod asking no device: a fraction (gpufleet's: every container; KAI's: the first)
    ({"gpufleet.io/gpu-memory": "20Gi"}, [{"name": "a"}, {"name": "b"}], [], ["a", "b"], True),
    ({"gpu-memory": "2000"}, [{"name": "a"}, {"name": "b"}], [], ["a"], True),
    # HAMi's share is no device (gpumem alone: fractional); beside nvidia.com/gpu the annotation is a hint (the
    # parser refuses both: a HAMi share and an annotation)
    ({"gpu-memory": "2000"}, [{"name": "c", "resources": {"limits": {"nvidia.com/gpumem": 2000}}}, {"name": "s"}],
     [], ["c"], True),
    ({"gpu-memory": "2000"}, [{"name": "c", **_HAMI}, {"name": "s"}], [], ["c"], False),
    # KAI's first container also asks an nvidia.com/ resource: named once
    ({"gpu-fraction": "0.5"}, [{"name": "a", **_GPU}, {"name": "b"}, {"name": "c", **_GPU}], [], ["a", "c"], True),
    # the named container (an init container) also asks one: named once, first
    ({"gpu-fraction": "0.5", "gpu-fraction-container-name": "init"}, [{"name": "a", **_GPU}],
     [{"name": "init", **_GPU}], ["init", "a"], True),
    ({}, [{"name": "a", **_GPU}, {"name": "b"}], [], ["a"], False),
]


def _template(case: tuple[dict[str, str], list[dict[str, Any]], list[dict[str, Any]], list[str], bool]) -> (
        dict[str, Any]):
    annotations, regular, init, _, _ = case
    spec: dict[str, Any] = {"containers": regular}
    if init:
        spec["initContainers"] = init
    return {"metadata": {"annotations": annotations}, "spec": spec}


@pytest.mark.parametrize("case", CASES)
def test_lint_the_parser_and_the_webhook_share_one_fractional_rule(
        case: tuple[dict[str, str], list[dict[str, Any]], list[dict[str, Any]], list[str], bool]) -> None:
    t = _template(case)
    raw = RawTemplate("spec", t["metadata"], t["spec"])
    devices = [r for c in case[1] + case[2] for r in c.get("resources", {}).get("limits", {})]
    assert pc.is_fractional(raw) is case[4]
    assert gpushare.is_fractional(case[0], devices) is case[4]
    assert gpushare.pod_is_fractional(t) is case[4]
    assert [c.get("name") for _, c in pc.gpu_containers(raw)] == case[3]


@pytest.mark.parametrize("case", CASES)
def test_the_cel_twins_answer_as_python(
        case: tuple[dict[str, str], list[dict[str, Any]], list[dict[str, Any]], list[str], bool]) -> None:
    env = celpy.Environment()
    activation: dict[str, Any] = {"t": json_to_cel(_template(case))}
    fractional = env.program(env.compile(cel.FRACTIONAL)).evaluate(activation)
    names: Any = env.program(env.compile(f"{cel.GPU_CONTAINERS}.map(c, c.name)")).evaluate(activation)
    assert bool(fractional) is case[4]
    assert [str(n) for n in names] == case[3]
