"""The advisor's proposal: what both sides of the boundary import (the search that makes proposals; the command
line, the reports and the files that show and apply them).

A :class:`Proposal` says, for every pool of identical GPU nodes, how its nodes are configured
(:class:`NodeConfig`: every GPU exclusive, time-sliced into replicas, or cut by a MIG mix), which device
each class of the demand asks for (:class:`ClassForm`), and the ClusterQueues' GPU quotas per ResourceFlavor
(:class:`QuotaLine`). A :class:`Judged` proposal carries the simulator's figures on the demand; an
:class:`Advice` holds the given configuration and the chosen proposal judged side by side, the others that
were tried, the reasons in words and the time each step took.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from gpufleet.gpu.constants import GPU, SHARED_GPU
from gpufleet.gpu.mig import RESOURCE_PREFIX

Mode = Literal["exclusive", "time-sliced", "mig"]
Objective = Literal["cost", "wait", "balanced"]
OBJECTIVES: tuple[Objective, ...] = ("cost", "wait", "balanced")
# The objective of gpufleet.advise.fragmentation, a search of its own (which nodes stay whole), not one of the above.
FRAGMENTATION = "fragmentation"


@dataclass(frozen=True, slots=True, order=True)
class NodeConfig:
    """How every GPU of one node is offered.

    ``exclusive``: each GPU whole (``nvidia.com/gpu``; fractional pods may share it); ``time-sliced``:
    ``replicas`` interchangeable replicas per GPU, renamed ``nvidia.com/gpu.shared``; ``mig``: each GPU cut into
    the instances of ``mig`` ((profile, count) pairs, sorted), offered as ``nvidia.com/mig-<profile>``.
    """

    mode: Mode
    replicas: int = 1
    mig: tuple[tuple[str, int], ...] = ()

    @property
    def slug(self) -> str:
        """A name for the configuration, usable in Kubernetes names and labels."""
        if self.mode == "exclusive":
            return "exclusive"
        if self.mode == "time-sliced":
            return f"time-sliced-{self.replicas}"
        return "mig-" + "-".join(f"{p}-x{n}" for p, n in self.mig)

    @property
    def text(self) -> str:
        """The configuration as people say it."""
        if self.mode == "exclusive":
            return "whole GPUs"
        if self.mode == "time-sliced":
            return f"time-sliced, {self.replicas} replicas per GPU"
        return "MIG " + " + ".join(f"{n}x {p}" for p, n in self.mig)

    def devices_per_gpu(self) -> dict[str, int]:
        """Extended resource -> devices each GPU offers under this configuration."""
        if self.mode == "exclusive":
            return {GPU: 1}
        if self.mode == "time-sliced":
            return {SHARED_GPU: self.replicas}
        return {RESOURCE_PREFIX + p.replace("+", "."): n for p, n in self.mig}


EXCLUSIVE = NodeConfig("exclusive")


@dataclass(frozen=True, slots=True)
class PoolConfig:
    """The nodes of one pool that a proposal gives one configuration."""

    pool: str
    model: str
    gpus_per_node: int
    config: NodeConfig
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ClassForm:
    """The device a class of the demand asks for, per pod."""

    klass: str
    namespace: str
    queue: str | None  # LocalQueue name
    resource: str  # nvidia.com/gpu, nvidia.com/gpu.shared, nvidia.com/mig-<profile>, gpufleet.io/gpu-milli
    count: int
    given: str  # the resource it asks as written

    @property
    def changed(self) -> bool:
        return self.resource != self.given


@dataclass(frozen=True, slots=True)
class QuotaLine:
    """A ClusterQueue's nominal quota of one resource in one ResourceFlavor."""

    cluster_queue: str
    flavor: str
    resource: str
    nominal: int


@dataclass(slots=True)
class Proposal:
    name: str  # "given", or how the search found it ("plan", "plan, one node moved", ...)
    pools: tuple[PoolConfig, ...]
    forms: tuple[ClassForm, ...]
    quotas: tuple[QuotaLine, ...] = ()  # empty for the given configuration: its queues as written
    given: bool = False
    notes: tuple[str, ...] = ()

    def key(self) -> tuple[Any, ...]:
        """What makes two proposals the same configuration (their names aside)."""
        return (tuple(sorted((p.pool, p.config, len(p.nodes)) for p in self.pools)),
                tuple(sorted((f.klass, f.resource) for f in self.forms)), self.given)


@dataclass(slots=True)
class Judged:
    """A proposal with the simulator's figures on the demand."""

    proposal: Proposal
    kpis: Mapping[str, Any]
    per_queue: Mapping[str, Any]
    score: float  # the objective's value (lower is better)
    feasible: bool  # within the guards the objective keeps on the other figures (and the budget)
    why_not: str | None = None
    wall_s: float = 0.0


@dataclass(slots=True)
class Advice:
    objective: Objective
    budget: float | None  # CHF per hour the held GPUs may cost on average
    given: Judged
    chosen: Judged
    tried: list[Judged]
    reasons: list[str]
    timings: dict[str, float] = field(default_factory=dict)  # step -> seconds
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return not self.chosen.proposal.given
