"""A scenario: a cluster with its queues, the jobs to run on it, the engine settings, and the policies to
compare; :func:`run_scenario` runs one policy on it from a fresh cluster state."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpufleet.api.manifests import Manifests
from gpufleet.sim.engine import Progress, Simulator
from gpufleet.sim.model import SimConfig, SimJob
from gpufleet.sim.policies import make_policy
from gpufleet.sim.records import SimResult


@dataclass(slots=True)
class Scenario:
    name: str
    manifests: Manifests  # nodes, queues, priority classes (the jobs are in ``jobs``)
    jobs: list[SimJob]
    config: SimConfig
    policies: Sequence[str]
    notes: list[str] = field(default_factory=list)


def run_scenario(scenario: Scenario, policy: str, *, seed: int = 0, progress: Progress | None = None) -> SimResult:
    sim = Simulator(make_policy(policy, scenario.manifests, seed=seed), scenario.jobs, scenario.config,
                    scenario=scenario.name, progress=progress)
    result = sim.run()
    result.notes[:0] = scenario.notes
    return result
