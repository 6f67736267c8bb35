"""The advisor's search on a small cluster: valid proposals (MIG layouts, device-plugin settings, Kueue quotas),
never worse than the given configuration on the objective asked, deterministic for a seed, the budget held."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpufleet.advise import search as search_module
from gpufleet.advise.contract import Advice, Judged
from gpufleet.advise.fleet import layout_of
from gpufleet.advise.inputs import read_input
from gpufleet.advise.queues import check_kueue, cluster_queue_of
from gpufleet.advise.realise import manifests_of, realise
from gpufleet.advise.search import NoProposal, prepare, search
from gpufleet.gpu.catalog import DEFAULT_CATALOG
from gpufleet.gpu.mig import geometry_for, validate_layout
from gpufleet.sim.model import SimulationError
from gpufleet.sim.scenario import Scenario

SMALL = str(Path(__file__).parent / "small.yaml")


@pytest.fixture(scope="module")
def advice() -> Advice:
    return search(read_input([SMALL]), "balanced", evaluations=8)


def _judged(advice: Advice) -> list[Judged]:
    return [advice.given, *advice.tried]


def test_the_given_configuration_is_a_candidate_and_never_beaten_by_a_worse_one(advice: Advice) -> None:
    assert advice.given.proposal.given and advice.given.feasible
    assert advice.chosen.score <= advice.given.score
    assert all(advice.chosen.score <= j.score for j in advice.tried if j.feasible)
    # Here inference holds whole A30s and waits for them (the gpufleet policy already keeps the notebooks on the
    # time-sliced L40S from running out of memory): the proposal shares GPUs for it, shorter waits for less.
    assert advice.changed
    g, c = advice.given.kpis, advice.chosen.kpis
    assert c["wait_p95_s"] < g["wait_p95_s"] and c["demand_cost_per_work"] < g["demand_cost_per_work"]
    assert c["job_success_pct"] >= g["job_success_pct"]
    assert advice.reasons[0].startswith("On the same demand")
    assert {"program", "simulate", "total"} <= set(advice.timings)


def test_every_proposed_mig_layout_is_valid_for_its_model(advice: Advice) -> None:
    checked = 0
    for j in _judged(advice):
        for group in j.proposal.pools:
            model = DEFAULT_CATALOG.get(group.model)
            geometry = geometry_for(model.key)
            if group.config.mode == "mig":
                assert geometry is not None
                assert validate_layout(geometry, layout_of(model, group.config)) == []
                checked += 1
    assert checked > 0


def test_every_proposal_keeps_kueues_quota_rules_and_loads_cleanly(advice: Advice) -> None:
    inp = read_input([SMALL])
    ctx = prepare(inp)
    local = {(lq.meta.namespace or "", lq.meta.name): lq.cluster_queue for lq in inp.manifests.local_queues}
    queue_of = cluster_queue_of(ctx.classes, local)
    for j in advice.tried:
        realised = realise(inp, ctx.pools, j.proposal, ctx.classes)
        problems = check_kueue(realised.flavors, realised.cluster_queues, realised.flavor_objects, j.proposal.quotas,
                               ctx.classes, j.proposal.forms, queue_of)
        assert problems == [], (j.proposal.name, problems)
        manifests = manifests_of(realised)  # gpufleet's own loader: no error in the written objects
        assert {cq.name for cq in manifests.cluster_queues} == {"prod", "dev"}


def test_kueue_rule_checks_catch_broken_objects(advice: Advice) -> None:
    inp = read_input([SMALL])
    ctx = prepare(inp)
    local = {(lq.meta.namespace or "", lq.meta.name): lq.cluster_queue for lq in inp.manifests.local_queues}
    queue_of = cluster_queue_of(ctx.classes, local)
    proposal = next(j.proposal for j in advice.tried if j.proposal.quotas)
    realised = realise(inp, ctx.pools, proposal, ctx.classes)
    cq = realised.cluster_queues[0]
    flavor = cq["spec"]["resourceGroups"][0]["flavors"][0]
    flavor["resources"] = list(reversed(flavor["resources"]))
    cq["spec"]["resourceGroups"].append(cq["spec"]["resourceGroups"][0])
    lines = list(proposal.quotas)
    lines[0] = type(lines[0])(lines[0].cluster_queue, lines[0].flavor, lines[0].resource, lines[0].nominal + 1)
    problems = check_kueue(realised.flavors, realised.cluster_queues, realised.flavor_objects, lines, ctx.classes,
                           proposal.forms, queue_of)
    text = "\n".join(problems)
    assert "not the group's covered resources" in text and "covered by two resource groups" in text
    assert "is in two resource groups" in text and "add up to" in text


def test_the_search_is_deterministic_for_a_seed(advice: Advice) -> None:
    again = search(read_input([SMALL]), "balanced", evaluations=8)
    assert again.chosen.proposal.key() == advice.chosen.proposal.key()
    assert [j.proposal.key() for j in again.tried] == [j.proposal.key() for j in advice.tried]
    assert again.chosen.kpis == advice.chosen.kpis


@pytest.mark.parametrize("objective", ["cost", "wait"])
def test_other_objectives_are_never_worse_than_the_given_configuration(objective: str) -> None:
    result = search(read_input([SMALL]), objective, evaluations=5)  # type: ignore[arg-type]
    assert result.chosen.feasible and result.chosen.score <= result.given.score


def test_a_budget_below_any_configuration_is_refused_with_the_cheapest_figure() -> None:
    with pytest.raises(NoProposal, match=r"no configuration meets the budget of 0.5 CHF/h: the given configuration "
                                         r"held GPUs cost [0-9.]+ CHF/h on average.*the cheapest of"):
        search(read_input([SMALL]), "cost", budget=0.5, evaluations=3)


def test_a_budget_holds_every_proposal() -> None:
    free = search(read_input([SMALL]), "cost", evaluations=3)
    per_hour = free.given.kpis["cost"] / (free.given.kpis["window_s"] / 3600)
    held = search(read_input([SMALL]), "cost", budget=per_hour * 1.02, evaluations=3)
    for j in [held.given, *held.tried]:
        if j.feasible:
            assert j.kpis["cost"] / (j.kpis["window_s"] / 3600) <= per_hour * 1.02 + 1e-9


def test_a_proposal_the_simulator_stops_on_stops_the_advice_and_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    # The simulator's guard (a policy that keeps deciding in one instant) is a scheduler defect, never a proposal
    # to leave out quietly. The real guard is made to trip on every proposal but the given one: one cycle per
    # instant at most.
    real_run = search_module.run

    def run(scenario: Scenario, policy: str, seed: int) -> tuple[dict[str, Any], dict[str, Any], float]:
        if scenario.name != "given":
            scenario = replace(scenario, config=replace(scenario.config, max_cycles_per_instant=1))
        return real_run(scenario, policy, seed)

    monkeypatch.setattr(search_module, "run", run)
    with pytest.raises(SimulationError, match=r"the simulator stopped on the proposal '[^']+': policy gpufleet kept "
                                              r"deciding at t=\d+s .*defect of gpufleet's scheduler"):
        search(read_input([SMALL]), "balanced", evaluations=3)
