"""Which devices a class may be offered (advise/fit.py) and the integer program built on it (advise/milp.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.advise.contract import NodeConfig
from gpufleet.advise.fit import DeviceFit, NotOffered, device_fit
from gpufleet.advise.inputs import read_input
from gpufleet.advise.milp import Infeasible, solve
from gpufleet.advise.search import prepare
from gpufleet.gpu.catalog import DEFAULT_CATALOG

SMALL = str(Path(__file__).parent / "small.yaml")
L40S = DEFAULT_CATALOG.get("L40S")
A30 = DEFAULT_CATALOG.get("A30")


@pytest.fixture(scope="module")
def ctx():  # type: ignore[no-untyped-def]
    return prepare(read_input([SMALL]))


def by_name(ctx, name):  # type: ignore[no-untyped-def]
    return next(c for c in ctx.classes if c.name == name)


def test_busy_classes_get_no_replicas_that_would_contend(ctx) -> None:  # type: ignore[no-untyped-def]
    finetuning = by_name(ctx, "finetuning")  # busy 0.6-0.9 of a GPU
    refused = device_fit(finetuning, L40S, 1, NodeConfig("time-sliced", 2), "nvidia.com/gpu.shared")
    assert isinstance(refused, NotOffered) and "would contend" in refused.reason
    notebooks = by_name(ctx, "notebooks")  # busy 0.02-0.15 (0.14 at the 90th percentile); 8 GiB median
    two = device_fit(notebooks, L40S, 1, NodeConfig("time-sliced", 2), "nvidia.com/gpu.shared")
    assert isinstance(two, DeviceFit) and two.risk < 0.05
    eight = device_fit(notebooks, L40S, 1, NodeConfig("time-sliced", 8), "nvidia.com/gpu.shared")
    assert isinstance(eight, NotOffered) and "would contend" in eight.reason
    six = device_fit(notebooks, L40S, 1, NodeConfig("time-sliced", 6), "nvidia.com/gpu.shared")
    assert isinstance(six, NotOffered) and "run out of GPU memory" in six.reason  # six notebooks fill 48 GB
    # ... unless it is what the pool has now: keeping what is there is always allowed, its risk priced
    kept = device_fit(notebooks, L40S, 1, NodeConfig("time-sliced", 8), "nvidia.com/gpu.shared", now=True)
    assert isinstance(kept, DeviceFit) and kept.risk > 0.05


def test_mig_instances_slow_busy_work_and_too_small_ones_are_refused(ctx) -> None:  # type: ignore[no-untyped-def]
    finetuning = by_name(ctx, "finetuning")  # 10 GiB median, up to 22 GiB; busy 0.6-0.9
    half = device_fit(finetuning, A30, 1, NodeConfig("mig", 1, (("2g.12gb", 2),)), "nvidia.com/mig-2g.12gb")
    assert isinstance(half, NotOffered) and "run out of GPU memory" in half.reason
    whole = device_fit(finetuning, A30, 1, NodeConfig("mig", 1, (("4g.24gb", 1),)), "nvidia.com/mig-4g.24gb")
    assert isinstance(whole, DeviceFit) and whole.stretch == 1.0 and whole.risk == 0.0
    small = replace(finetuning, memory_mib=[4096] * 10, need=[0.8] * 10)  # fits half an A30, busy 0.8
    slower = device_fit(small, A30, 1, NodeConfig("mig", 1, (("2g.12gb", 2),)), "nvidia.com/mig-2g.12gb")
    assert isinstance(slower, DeviceFit) and slower.risk == 0.0 and slower.stretch == pytest.approx(1.6)


def test_a_class_whose_memory_is_unknown_keeps_whole_gpus_or_what_it_asks(ctx) -> None:  # type: ignore[no-untyped-def]
    notebooks = by_name(ctx, "notebooks")
    blind = type(notebooks)(notebooks.name, notebooks.namespace, notebooks.queue, notebooks.role, notebooks.form,
                            notebooks.jobs, [], notebooks.need)
    assert isinstance(device_fit(blind, L40S, 1, NodeConfig("exclusive"), "nvidia.com/gpu"), DeviceFit)
    refused = device_fit(blind, A30, 1, NodeConfig("mig", 1, (("1g.6gb", 4),)), "nvidia.com/mig-1g.6gb")
    assert isinstance(refused, NotOffered) and "memory use is not known" in refused.reason
    assert isinstance(device_fit(blind, L40S, 1, NodeConfig("time-sliced", 2), "nvidia.com/gpu.shared"), DeviceFit)


@settings(max_examples=20, deadline=None)
@given(st.integers(min_value=2, max_value=7))
def test_time_slicing_risk_grows_with_replicas(replicas: int) -> None:
    ctx = prepare(read_input([SMALL]))
    notebooks = by_name(ctx, "notebooks")
    low = device_fit(notebooks, L40S, 1, NodeConfig("time-sliced", replicas), "nvidia.com/gpu.shared", now=True)
    high = device_fit(notebooks, L40S, 1, NodeConfig("time-sliced", replicas + 1), "nvidia.com/gpu.shared",
                      now=True)
    assert isinstance(low, DeviceFit) and isinstance(high, DeviceFit)
    assert high.risk >= low.risk


def test_the_program_keeps_what_it_is_told_holds_a_budget_and_refuses_the_impossible(ctx) -> None:  # type: ignore[no-untyped-def]
    given_counts = [dict(p.given_counts()) for p in ctx.pools]
    forms = {k: c.resource for k, c in enumerate(ctx.classes)}
    kept = solve(ctx.problem, "balanced", fixed_counts=given_counts, fixed_forms=forms)
    assert kept.counts == [{c: n for c, n in counts.items() if n} for counts in given_counts]
    assert kept.forms == forms
    free = solve(ctx.problem, "balanced")
    assert all(sum(c.values()) == len(p.nodes) for c, p in zip(free.counts, ctx.pools, strict=True))
    assert all(unserved[0] < 1e-6 for unserved in free.unserved.values())  # the average demand is served
    starved = solve(ctx.problem, "cost", budget=0.01)  # a budget leaves demand unserved; the simulator says so
    assert starved.cost_per_hour <= 0.01 + 1e-6 and any(u[0] > 0 for u in starved.unserved.values())
    with pytest.raises(Infeasible):  # no node at all in any configuration: not a plan
        solve(ctx.problem, "cost", fixed_counts=[{} for _ in ctx.pools])
    assert solve(ctx.problem, "balanced").counts == free.counts  # deterministic


def test_a_fraction_that_declares_only_memory_is_sized_by_it(ctx) -> None:  # type: ignore[no-untyped-def]
    # Issue 30, item 1: a pod declaring gpufleet.io/gpu-memory and no share made the program divide by zero.
    from gpufleet.api.objects import GpuDemand
    from gpufleet.gpu.constants import GPU

    notebooks = by_name(ctx, "notebooks")
    memory_only = replace(notebooks, form=GpuDemand("fraction", 1, memory_mib=10 * 1024), milli=[0] * 4)
    fit = device_fit(memory_only, L40S, 1, NodeConfig("whole", 1), GPU)
    assert isinstance(fit, DeviceFit) and fit.size == pytest.approx(-(-1000 * 10240 // L40S.memory_mib) / 1000)
    too_big = replace(memory_only, form=GpuDemand("fraction", 1, memory_mib=L40S.memory_mib + 1))
    refused = device_fit(too_big, L40S, 1, NodeConfig("whole", 1), GPU)
    assert isinstance(refused, NotOffered) and "more GPU memory than" in refused.reason


@given(st.integers(0, 1000), st.integers(1, 200_000))
@settings(max_examples=200, deadline=None)
def test_every_fraction_fit_has_a_positive_size_or_is_refused(milli: int, memory: int) -> None:
    from gpufleet.advise.demand import DemandClass
    from gpufleet.api.objects import GpuDemand
    from gpufleet.gpu.constants import GPU

    c = DemandClass("c", "ns", None, None, GpuDemand("fraction", 1, milli=milli, memory_mib=memory), milli=[milli])
    for model in (L40S, A30):
        fit = device_fit(c, model, 1, NodeConfig("whole", 1), GPU)
        assert isinstance(fit, NotOffered) or 0 < fit.size <= 1
