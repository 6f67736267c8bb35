"""The search: proposals from the integer program, judged by the simulator, improved by local moves.

1. The given configuration is simulated first: its figures are the reference, and it stays a candidate.
2. The integer program (:mod:`gpufleet.advise.milp`) is solved for the objective asked, and for variants that
   each keep something as it is: the classes' requests (only node configurations move), the nodes'
   configurations (only requests and quotas move), and the other objectives' weights. Each distinct answer is
   simulated.
3. Local search from the best simulated proposal (the given configuration, if nothing beat it): one class asks
   for another device it may use (the other requests as they are; the program reconfiguring mostly the nodes
   that needs, or as many nodes as its peak needs given that device where it is cheapest), or one node of a
   pool moves to another configuration (one the proposal or the given
   configuration uses, a replica count one up or down, whole GPUs; the requests as they are); the program
   re-plans the quotas. The moves are simulated in the order of the program's own objective; the first that
   improves the objective within its guards is taken, and the search goes on from there until no move
   improves or the budget of simulations is spent.
4. The best simulated proposal within its guards wins; the given configuration wins ties.

Deterministic: the program (HiGHS) and the simulator are, for a seed, and moves are tried in a fixed order.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from gpufleet.advise.contract import OBJECTIVES, Advice, ClassForm, Judged, NodeConfig, Objective, PoolConfig, Proposal
from gpufleet.advise.demand import DemandClass, classify
from gpufleet.advise.fleet import HardwarePool, configurations, hardware_pools
from gpufleet.advise.inputs import AdviseInput
from gpufleet.advise.judge import cost_per_hour, judged, run
from gpufleet.advise.milp import Infeasible, Problem, Solution, solve
from gpufleet.advise.queues import check_kueue, cluster_queue_of, flavor_of, flavors_of, synthesise_quotas
from gpufleet.advise.realise import assign_nodes, manifests_of, realise, rewrite_jobs
from gpufleet.gpu.constants import FRACTION_RESOURCE, MILLI
from gpufleet.sim.model import SimulationError
from gpufleet.sim.scenario import Scenario

DEFAULT_EVALUATIONS = 24  # simulations of proposals, the given configuration's not counted
STAY = 5.0  # when one class changes its request, the program reconfigures mostly the nodes that change needs

Progress = Callable[[str], None]


class NoProposal(SimulationError):
    """Nothing satisfies the budget, the given configuration included."""


@dataclass(slots=True)
class Context:
    inp: AdviseInput
    pools: list[HardwarePool]
    configs: list[list[NodeConfig]]
    classes: list[DemandClass]
    problem: Problem
    queue_of: dict[int, str]
    notes: list[str] = field(default_factory=list)

    @property
    def by_name(self) -> dict[str, HardwarePool]:
        return {p.name: p for p in self.pools}


def prepare(inp: AdviseInput) -> Context:
    pools = hardware_pools(inp.manifests)
    if not pools:
        raise SimulationError("no GPU nodes in the input: nothing to configure")
    classes = classify(inp.jobs, window_s=inp.window_s, default_util=inp.config.default_gpu_util)
    if not classes:
        raise SimulationError("no job in the input asks for a GPU: nothing to plan for")
    configs = [configurations(p.model, list(p.given.values())) if p.configurable else
               sorted(set(p.given.values())) for p in pools]
    problem = Problem(pools, configs, classes, inp.window_s / 3600.0)
    local = {(lq.meta.namespace or "", lq.meta.name): lq.cluster_queue for lq in inp.manifests.local_queues}
    notes = [f"pool {p.name} is left as it is: {p.why_fixed}" for p in pools if not p.configurable]
    return Context(inp, pools, configs, classes, problem, cluster_queue_of(classes, local), notes)


def given_proposal(ctx: Context) -> Proposal:
    groups = []
    for pool in ctx.pools:
        for config, nodes in sorted(_by_config(pool).items()):
            groups.append(PoolConfig(pool.name, pool.model.key, pool.gpus_per_node, config, tuple(nodes)))
    forms = tuple(ClassForm(c.name, c.namespace, c.queue, c.resource, c.count, c.resource) for c in ctx.classes)
    return Proposal("given", tuple(groups), forms, (), given=True)


def _by_config(pool: HardwarePool) -> dict[NodeConfig, list[str]]:
    out: dict[NodeConfig, list[str]] = {}
    for n in sorted(pool.names):
        out.setdefault(pool.given[n], []).append(n)
    return out


def proposal_from(ctx: Context, sol: Solution, name: str) -> Proposal:
    """A program's solution as a proposal: nodes assigned, forms, quotas shared out."""
    groups = []
    for p, pool in enumerate(ctx.pools):
        for config, nodes in sorted(assign_nodes(pool, sol.counts[p]).items()):
            groups.append(PoolConfig(pool.name, pool.model.key, pool.gpus_per_node, config, tuple(nodes)))
    forms = []
    for k, c in enumerate(ctx.classes):
        resource = sol.forms[k]
        count = c.count if resource in (c.resource, FRACTION_RESOURCE) else 1
        forms.append(ClassForm(c.name, c.namespace, c.queue, resource, count, c.resource))
    reserved: dict[tuple[int, str, str], float] = {}
    for (k, o), devices in sol.reserved.items():
        offer = ctx.problem.offers[o]
        pool = ctx.pools[offer.pool]
        flavor = flavor_of(pool, ctx.configs[offer.pool][offer.config])
        resource = forms[k].resource
        amount = devices * ctx.problem.fits[(k, o)].size * MILLI if resource == FRACTION_RESOURCE else devices
        reserved[(k, flavor, resource)] = reserved.get((k, flavor, resource), 0.0) + amount
    flavors = flavors_of(ctx.by_name, groups)
    quotas = synthesise_quotas(flavors, ctx.classes, forms, reserved, ctx.queue_of)
    return Proposal(name, tuple(groups), tuple(forms), tuple(quotas))


def scenario_of(ctx: Context, proposal: Proposal) -> Scenario:
    """The proposal as the simulator runs it: its documents checked against Kueue's rules and read by the same
    loader as any input (MIG layouts and device-plugin settings are checked there), its demand rewritten."""
    if proposal.given:
        return Scenario("given", ctx.inp.manifests, ctx.inp.jobs, ctx.inp.config, (ctx.inp.policy,))
    realised = realise(ctx.inp, ctx.pools, proposal, ctx.classes)
    broken = check_kueue(realised.flavors, realised.cluster_queues, realised.flavor_objects, proposal.quotas,
                         ctx.classes, proposal.forms, ctx.queue_of)
    if broken:
        raise ValueError("gpufleet advise wrote Kueue objects that break Kueue's rules (a bug): " + "; ".join(broken))
    jobs = rewrite_jobs(ctx.inp.jobs, ctx.classes, proposal.forms)
    return Scenario(proposal.name, manifests_of(realised), jobs, ctx.inp.config, (ctx.inp.policy,))


@dataclass(slots=True)
class _Search:
    ctx: Context
    objective: Objective
    budget: float | None
    evaluations: int
    progress: Progress | None
    given: Judged | None = None
    tried: list[Judged] = field(default_factory=list)
    seen: set[object] = field(default_factory=set)
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    failed: list[Proposal] = field(default_factory=list)  # proposals the advisor could not write (its own bug)
    last_objective: float = 0.0  # the last program's objective value

    def _time(self, step: str, seconds: float) -> None:
        self.timings[step] = self.timings.get(step, 0.0) + seconds

    def say(self, text: str) -> None:
        if self.progress is not None:
            self.progress(text)

    def judge(self, proposal: Proposal) -> Judged | None:
        key = proposal.key()
        if key in self.seen:
            return None
        if not proposal.given and len(self.tried) + len(self.failed) >= self.evaluations:
            return None
        self.seen.add(key)
        started = time.perf_counter()
        try:
            scenario = scenario_of(self.ctx, proposal)
        except ValueError as exc:  # the advisor's own bug: said in the advice, the search goes on
            if proposal.given:
                raise
            self.notes.append(f"{proposal.name}: left out: {exc}")
            self.failed.append(proposal)
            return None
        self._time("realise", time.perf_counter() - started)
        try:
            k, q, wall = run(scenario, self.ctx.inp.policy, self.ctx.inp.seed)
        except SimulationError as exc:
            if proposal.given:
                raise
            # The simulator stops a run only for a defect of the scheduler (its guard against a policy that keeps
            # deciding in one instant, a decision about a job in the wrong state): never a proposal to leave out
            # quietly, the advice stops and says which proposal met it.
            raise SimulationError(f"the simulator stopped on the proposal '{proposal.name}': {exc}. This is a "
                                  "defect of gpufleet's scheduler, not of the input: please report it with this "
                                  "input") from exc
        self._time("simulate", wall)
        reference = k if self.given is None else self.given.kpis
        j = judged(proposal, self.objective, k, q, reference, self.budget, wall)
        if proposal.given:
            self.given = j
        else:
            self.tried.append(j)
        self.say(f"{proposal.name}: {self.objective} {j.score:,.1f}" + ("" if j.feasible else f" ({j.why_not})"))
        return j

    def solve(self, objective: Objective, name: str, **kw: object) -> Proposal | None:
        started = time.perf_counter()
        try:
            sol = solve(self.ctx.problem, objective, budget=self.budget, **kw)  # type: ignore[arg-type]
            self.last_objective = sol.objective
        except Infeasible as exc:
            self.notes.append(f"{name}: the program has no solution ({exc})")
            return None
        finally:
            self._time("program", time.perf_counter() - started)
            self._time("programs", 1.0)
        return proposal_from(self.ctx, sol, name)

    def ranked(self, moves: Sequence[_Move], base: str) -> list[Proposal]:
        """The moves' proposals not simulated yet, best first by the program's own objective (the simulator's
        budget goes to the moves the program thinks best)."""
        scored: list[tuple[float, int, Proposal]] = []
        for move in moves:
            proposal = self.solve(self.objective, f"{base}; {move.text}", fixed_counts=move.counts,
                                  fixed_forms=move.forms, stay=STAY if move.counts is None else 1.0)
            if proposal is not None and proposal.key() not in self.seen:
                scored.append((self.last_objective, len(scored), proposal))
        return [p for _, _, p in sorted(scored, key=lambda t: (t[0], t[1]))]

    def better(self, a: Judged, b: Judged | None) -> bool:
        return a.feasible and (b is None or not b.feasible or a.score < b.score - 1e-9)

    def best(self) -> Judged | None:
        out: Judged | None = None
        for j in self.tried:
            if self.better(j, out):
                out = j
        return out


def _given_counts(ctx: Context) -> list[dict[NodeConfig, int]]:
    return [dict(p.given_counts()) for p in ctx.pools]


def _counts_of(ctx: Context, proposal: Proposal) -> list[dict[NodeConfig, int]]:
    out: list[dict[NodeConfig, int]] = [{} for _ in ctx.pools]
    index = {p.name: i for i, p in enumerate(ctx.pools)}
    for g in proposal.pools:
        out[index[g.pool]][g.config] = out[index[g.pool]].get(g.config, 0) + len(g.nodes)
    return out


@dataclass(frozen=True, slots=True)
class _Move:
    text: str
    counts: list[dict[NodeConfig, int]] | None  # None: the program re-plans the nodes
    forms: dict[int, str]  # every class's request


def _make_room(ctx: Context, counts: Sequence[Mapping[NodeConfig, int]], k: int,
               form: str) -> tuple[str, list[dict[NodeConfig, int]]] | None:
    """Nodes for class ``k`` asking ``form``, everything else as it is: in the pool whose device of that form is
    cheapest for it, as many nodes as its peak needs are given the cheapest configuration offering the form,
    taken from the pool's most common other configuration."""
    cls = ctx.classes[k]
    best = None
    for (kk, o), fit in ctx.problem.fits.items():
        if kk != k or ctx.problem.form_of(k, o) != form:
            continue
        offer = ctx.problem.offers[o]
        if not ctx.pools[offer.pool].configurable:
            continue
        price = offer.share * offer.price * fit.stretch
        if best is None or price < best[0]:
            best = (price, o, fit)
    if best is None:
        return None
    _, o, fit = best
    offer = ctx.problem.offers[o]
    target = ctx.configs[offer.pool][offer.config]
    have = counts[offer.pool].get(target, 0)
    needed = max(1, -(-int(cls.peak * fit.stretch * fit.size + 0.999) // max(offer.per_node, 1))) - have
    others = sorted((n, c) for c, n in counts[offer.pool].items() if c != target and n > 0)
    if needed <= 0 or not others:
        return None
    moved = [dict(x) for x in counts]
    taken = min(needed, others[-1][0])
    source = others[-1][1]
    moved[offer.pool][source] -= taken
    moved[offer.pool][target] = have + taken
    pool = ctx.pools[offer.pool].name
    return f"{pool}: {taken} node{'s' if taken > 1 else ''} {source.slug} -> {target.slug}", moved


def _moves(ctx: Context, current: Proposal) -> list[_Move]:
    """Neighbours of a proposal, in a fixed order (module doc): one class asks for another device it may use,
    the other requests as they are, the program re-planning the nodes, or nodes made for it where that device
    is cheapest (:func:`_make_room`); one node of a pool to another configuration, the requests as they are."""
    counts = _counts_of(ctx, current)
    forms = {k: f.resource for k, f in enumerate(current.forms)}
    out = []
    for k, cls in enumerate(ctx.classes):
        options = sorted({ctx.problem.form_of(kk, o) for (kk, o) in ctx.problem.fits if kk == k} - {forms[k]})
        for f in options:
            out.append(_Move(f"{cls.name} asks {f}", None, {**forms, k: f}))
            room = _make_room(ctx, counts, k, f)
            if room is not None:
                text, moved = room
                out.append(_Move(f"{cls.name} asks {f}; {text}", moved, {**forms, k: f}))
    for p, pool in enumerate(ctx.pools):
        if not pool.configurable:
            continue
        present = sorted(c for c, n in counts[p].items() if n > 0)
        targets = [*present, *sorted(set(pool.given.values())), ctx.configs[p][0]]
        for c in present:
            near = list(targets)
            if c.mode == "time-sliced":
                near += [x for x in ctx.configs[p] if x.mode == "time-sliced" and abs(x.replicas - c.replicas) == 1]
            for t in dict.fromkeys(near):
                if t != c and t in ctx.configs[p]:
                    moved = [dict(x) for x in counts]
                    moved[p][c] -= 1
                    moved[p][t] = moved[p].get(t, 0) + 1
                    out.append(_Move(f"{pool.name}: one node {c.slug} -> {t.slug}", moved, forms))
    return out


def search(inp: AdviseInput, objective: Objective, *, budget: float | None = None,
           evaluations: int = DEFAULT_EVALUATIONS, progress: Progress | None = None) -> Advice:
    """Advice for ``inp`` on ``objective`` (module doc)."""
    from gpufleet.advise.reasons import reasons

    started = time.perf_counter()
    ctx = prepare(inp)
    s = _Search(ctx, objective, budget, evaluations, progress, notes=list(ctx.notes))
    s.timings["prepare"] = time.perf_counter() - started
    given = s.judge(given_proposal(ctx))
    assert given is not None
    forms_given = {k: c.resource for k, c in enumerate(ctx.classes)
                   if any(ctx.problem.form_of(kk, o) == c.resource for (kk, o) in ctx.problem.fits if kk == k)}
    variants: list[tuple[Objective, str, dict[str, object]]] = [
        (objective, f"plan for {objective}", {}),
        (objective, f"plan for {objective}, requests kept", {"fixed_forms": forms_given}),
        (objective, f"plan for {objective}, nodes kept", {"fixed_counts": _given_counts(ctx)}),
        *((o, f"plan for {o}", {}) for o in OBJECTIVES if o != objective),
    ]
    for obj, name, kw in variants:
        if len(s.tried) + len(s.failed) >= evaluations:
            break
        proposal = s.solve(obj, name, **kw)
        if proposal is not None:
            s.judge(proposal)
    current = s.best()
    if current is None or s.better(given, current):
        current = given  # nothing beat it yet: look around the given configuration itself
    while len(s.tried) + len(s.failed) < evaluations:
        improved = False
        for proposal in s.ranked(_moves(ctx, current.proposal), current.proposal.name):
            if len(s.tried) + len(s.failed) >= evaluations:
                break
            j = s.judge(proposal)
            if j is not None and s.better(j, current):
                current, improved = j, True
                break
        if not improved:
            break
    best = s.best()
    chosen = best if best is not None and s.better(best, given) else given
    if not chosen.feasible:
        cheapest = min([given, *s.tried], key=lambda j: cost_per_hour(j.kpis))
        raise NoProposal(f"no configuration meets the budget of {budget:g} CHF/h: the given configuration "
                         f"{given.why_not}; the cheapest of {len(s.tried) + 1} simulated costs "
                         f"{cost_per_hour(cheapest.kpis):.2f} CHF/h")
    s.timings["total"] = time.perf_counter() - started
    advice = Advice(objective, budget, given, chosen, s.tried, [], dict(s.timings), s.notes)
    advice.reasons = reasons(ctx, advice)
    return advice
