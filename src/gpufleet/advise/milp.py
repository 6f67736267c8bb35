"""The integer program that proposes configurations: which configuration each pool's nodes get, which device
each class asks for, how many devices each class is planned on each kind of device.

Variables (``scipy.optimize.milp``, HiGHS):

* ``x[p, c]`` integer: nodes of pool ``p`` in configuration ``c``; they sum to the pool's nodes;
* ``z[k, f]`` binary: class ``k`` asks for resource ``f`` (one per class: a pod asks one resource name);
* ``y[k, o] <= w[k, o]`` continuous: devices of offer ``o`` (a pool, a configuration, a resource) that class
  ``k`` holds on average (``y``) and at its peak (``w``); the peaks of all classes on an offer fit its
  capacity, ``w`` only where ``z`` allows the offer's resource;
* ``s1[k]``, ``s2[k]``: the class's average and peak demand left unserved.

Demand is in the devices a class holds when nothing waits (:mod:`gpufleet.advise.demand`), longer on a device
where its work is slower: ``sum_o y[k, o] / stretch[k, o] + s1[k] >= mean[k]``, the same for ``w`` and the
peak. The objective, in CHF over the window: what the held devices cost (their GPU share times the model's
price), unserved demand valued at the dearest device the class could use times a weight (the objective
``cost`` weighs the peak lightly, ``wait`` heavily; the average, which jobs that never run would leave
unserved, at ten times the fleet's dearest GPU at least), the expected failed jobs (the memory risk of where they run)
at twice a job's cost, and a small price per node reconfigured and per class asked to change its request, so
that ties keep what is there, and per configuration a pool uses, so that pools stay simple to run.
``--budget`` bounds the average held cost per hour.

The program only proposes: the simulator judges (:mod:`gpufleet.advise.search`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array

from gpufleet.advise.contract import NodeConfig, Objective
from gpufleet.advise.demand import DemandClass
from gpufleet.advise.fit import DeviceFit, NotOffered, device_fit
from gpufleet.advise.fleet import HardwarePool
from gpufleet.gpu.constants import FRACTION_RESOURCE, GPU
from gpufleet.gpu.mig import geometry_for, profile_from_resource_name

TIME_LIMIT_S = 20.0  # the program proposes; past this HiGHS answers with the best it has
MIP_GAP = 0.005  # the program proposes and the simulator judges: half a percent from the optimum is plenty
UNSERVED = 10.0  # average demand unserved, per device, costs this many times the fleet's dearest GPU


@dataclass(frozen=True, slots=True)
class Weights:
    mean: float  # unserved average demand, per device-hour, times the class's dearest device
    peak: float  # unserved peak demand, likewise
    node_change: float = 0.02  # per node reconfigured, as a share of the fleet's cost per hour
    form_change: float = 0.02  # per class asked to change its request, likewise
    config_used: float = 0.01  # per configuration a pool uses: one configuration per pool is simpler to run


WEIGHTS: Mapping[Objective, Weights] = {
    "cost": Weights(mean=3.0, peak=0.25),
    "balanced": Weights(mean=3.0, peak=1.0),
    "wait": Weights(mean=4.0, peak=3.0),
}


@dataclass(frozen=True, slots=True)
class Offer:
    pool: int
    config: int
    resource: str
    per_node: int  # devices one node of the pool offers
    share: float  # the GPU share one device counts as (cost), as the simulator counts it
    price: float  # the model's price per GPU-hour


@dataclass(slots=True)
class Problem:
    """What the program is built from: pools with their configurations, classes, and the fits between them."""

    pools: list[HardwarePool]
    configs: list[list[NodeConfig]]
    classes: list[DemandClass]
    window_h: float
    offers: list[Offer] = field(default_factory=list)
    fits: dict[tuple[int, int], DeviceFit] = field(default_factory=dict)  # (class, offer) -> fit
    refused: dict[tuple[int, str], str] = field(default_factory=dict)  # (class, resource) -> why not offered

    def __post_init__(self) -> None:
        for p, pool in enumerate(self.pools):
            for c, config in enumerate(self.configs[p]):
                for resource, per_gpu in config.devices_per_gpu().items():
                    self.offers.append(Offer(p, c, resource, per_gpu * pool.gpus_per_node,
                                             _share(pool, config, resource), pool.model.price_per_hour))
        for k, cls in enumerate(self.classes):
            for o, offer in enumerate(self.offers):
                pool = self.pools[offer.pool]
                config = self.configs[offer.pool][offer.config]
                fit = device_fit(cls, pool.model, pool.gpus_per_node, config, offer.resource,
                                 now=config in pool.given.values())
                form = FRACTION_RESOURCE if cls.form.kind == "fraction" and offer.resource == GPU \
                    else offer.resource
                if isinstance(fit, NotOffered):
                    self.refused.setdefault((k, form), f"{offer.resource} on {pool.model.key} ({config.text}) for "
                                                       f"{cls.name}: {fit.reason}")
                else:
                    self.fits[(k, o)] = fit

    def form_of(self, k: int, o: int) -> str:
        """The resource class ``k`` asks for to get offer ``o``."""
        if self.classes[k].form.kind == "fraction":
            return FRACTION_RESOURCE
        return self.offers[o].resource


def _share(pool: HardwarePool, config: NodeConfig, resource: str) -> float:
    if config.mode == "time-sliced":
        return 1.0 / config.replicas
    if config.mode == "mig":
        geometry = geometry_for(pool.model.key)
        profile = profile_from_resource_name(resource)
        if geometry is None or profile is None:
            return 1.0
        total = sum(geometry.profile(p).compute_slices * n for p, n in config.mig)
        return geometry.profile(profile).compute_slices / max(total, 1)
    return 1.0


@dataclass(slots=True)
class Solution:
    counts: list[dict[NodeConfig, int]]  # per pool: configuration -> nodes
    forms: dict[int, str]  # class -> resource
    reserved: dict[tuple[int, int], float]  # (class, offer) -> devices at the peak (w)
    used: dict[tuple[int, int], float]  # (class, offer) -> devices on average (y)
    unserved: dict[int, tuple[float, float]]  # class -> (average, peak) devices not served
    cost_per_hour: float
    objective: float
    wall_s: float


class Infeasible(Exception):
    """No assignment satisfies the constraints (a budget below what the demand must cost, say)."""


def solve(problem: Problem, objective: Objective, *, budget: float | None = None,
          fixed_counts: Sequence[Mapping[NodeConfig, int] | None] | None = None,
          fixed_forms: Mapping[int, str] | None = None, stay: float = 1.0,
          time_limit: float = TIME_LIMIT_S) -> Solution:
    """The program's optimum for ``objective``; pools in ``fixed_counts`` (not None) keep those counts, classes in
    ``fixed_forms`` that resource; ``stay`` multiplies the price of reconfiguring a node (a large one changes
    only what the rest requires). Raises :class:`Infeasible`."""
    started = time.perf_counter()
    w = WEIGHTS[objective]
    w = Weights(w.mean, w.peak, w.node_change * stay, w.form_change, w.config_used)
    pools, configs, classes, offers = problem.pools, problem.configs, problem.classes, problem.offers
    hours = max(problem.window_h, 1e-9)
    names: list[str] = []
    lower: list[float] = []
    upper: list[float] = []
    integral: list[int] = []
    cost: list[float] = []

    def var(name: str, lo: float, hi: float, integer: bool, c: float) -> int:
        names.append(name)
        lower.append(lo)
        upper.append(hi)
        integral.append(1 if integer else 0)
        cost.append(c)
        return len(names) - 1

    fleet_per_hour = sum(p.gpus * p.model.price_per_hour for p in pools) or 1.0
    top_price = max((p.model.price_per_hour for p in pools), default=1.0) or 1.0
    x: dict[tuple[int, int], int] = {}
    moved: dict[tuple[int, int], int] = {}
    used: dict[tuple[int, int], int] = {}
    for p, pool in enumerate(pools):
        given = pool.given_counts()
        fixed = fixed_counts[p] if fixed_counts is not None else None
        if not pool.configurable:
            fixed = dict(given)
        for c, config in enumerate(configs[p]):
            n = len(pool.nodes)
            lo, hi = (float(fixed.get(config, 0)),) * 2 if fixed is not None else (0.0, float(n))
            x[(p, c)] = var(f"x[{pool.name},{config.slug}]", lo, hi, True, 0.0)
            moved[(p, c)] = var(f"moved[{pool.name},{config.slug}]", 0.0, float(n), False,
                                w.node_change * fleet_per_hour * hours / 2)
            used[(p, c)] = var(f"used[{pool.name},{config.slug}]", 0.0, 1.0, True,
                               w.config_used * fleet_per_hour * hours)
    forms: dict[int, list[str]] = {}
    for (k, o) in problem.fits:
        f = problem.form_of(k, o)
        if f not in forms.setdefault(k, []):
            forms[k].append(f)
    z: dict[tuple[int, str], int] = {}
    y: dict[tuple[int, int], int] = {}
    wv: dict[tuple[int, int], int] = {}
    s1: dict[int, int] = {}
    s2: dict[int, int] = {}
    for k, cls in enumerate(classes):
        jobs = max(len(cls.jobs), 1)
        value = max((offers[o].share * offers[o].price for (kk, o) in problem.fits if kk == k), default=0.0)
        value = max(value, 0.01)
        job_hours = cls.mean * hours / jobs  # device-hours a job holds on average
        for f in sorted(forms.get(k, [])):
            fixed_form = fixed_forms.get(k) if fixed_forms else None
            lo, hi = (float(f == fixed_form),) * 2 if fixed_form is not None else (0.0, 1.0)
            penalty = 0.0 if f == cls.resource else w.form_change * fleet_per_hour * hours
            z[(k, f)] = var(f"z[{cls.name},{f}]", lo, hi, True, penalty)
        for (kk, o), fit in problem.fits.items():
            if kk != k:
                continue
            offer = offers[o]
            per_device = offer.share * offer.price * hours
            failures = fit.risk * jobs * 2 * job_hours * value / max(cls.mean, 1e-9)
            y[(k, o)] = var(f"y[{cls.name},{o}]", 0.0, np.inf, False, per_device + failures)
            wv[(k, o)] = var(f"w[{cls.name},{o}]", 0.0, np.inf, False, 1e-6)
        # Average demand left unserved means jobs that never run: dearer than any reconfiguration.
        s1[k] = var(f"s1[{cls.name}]", 0.0, np.inf, False, w.mean * max(value, top_price) * hours * UNSERVED)
        s2[k] = var(f"s2[{cls.name}]", 0.0, np.inf, False, w.peak * value * hours)

    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    lo_c: list[float] = []
    hi_c: list[float] = []

    def row(entries: Sequence[tuple[int, float]], lo: float, hi: float) -> None:
        r = len(lo_c)
        for col, v in entries:
            rows.append(r)
            cols.append(col)
            vals.append(v)
        lo_c.append(lo)
        hi_c.append(hi)

    for p, pool in enumerate(pools):
        row([(x[(p, c)], 1.0) for c in range(len(configs[p]))], len(pool.nodes), len(pool.nodes))
        given = pool.given_counts()
        for c, config in enumerate(configs[p]):
            g = float(given.get(config, 0))
            row([(moved[(p, c)], 1.0), (x[(p, c)], -1.0)], -g, np.inf)  # moved >= x - g
            row([(moved[(p, c)], 1.0), (x[(p, c)], 1.0)], g, np.inf)  # moved >= g - x
            row([(x[(p, c)], 1.0), (used[(p, c)], -float(len(pool.nodes)))], -np.inf, 0.0)  # used if any node
    by_offer: dict[int, list[int]] = {}
    for (k, o) in problem.fits:
        by_offer.setdefault(o, []).append(k)
    for o, ks in by_offer.items():
        offer = offers[o]
        entries = [(wv[(k, o)], problem.fits[(k, o)].size) for k in ks]
        row([*entries, (x[(offer.pool, offer.config)], -float(offer.per_node))], -np.inf, 0.0)
    for (k, o) in problem.fits:
        row([(y[(k, o)], 1.0), (wv[(k, o)], -1.0)], -np.inf, 0.0)
    for k, cls in enumerate(classes):
        mine = [(o, fit) for (kk, o), fit in problem.fits.items() if kk == k]
        row([*((y[(k, o)], 1.0 / fit.stretch) for o, fit in mine), (s1[k], 1.0)], cls.mean, np.inf)
        row([*((wv[(k, o)], 1.0 / fit.stretch) for o, fit in mine), (s2[k], 1.0)], cls.peak, np.inf)
        if forms.get(k):
            row([(z[(k, f)], 1.0) for f in forms[k]], 1.0, 1.0)
            for f in forms[k]:
                # The most devices of this form the class could want: its peak, as slow as it gets there.
                stretch = max((fit.stretch for o, fit in mine if problem.form_of(k, o) == f), default=1.0)
                capacity = sum(offers[o].per_node * len(pools[offers[o].pool].nodes) / fit.size
                               for o, fit in mine if problem.form_of(k, o) == f)
                big = min(capacity, cls.peak * stretch + 1.0)
                row([*((wv[(k, o)], 1.0) for o, _ in mine if problem.form_of(k, o) == f),
                     (z[(k, f)], -max(big, 1.0))], -np.inf, 0.0)
    if budget is not None:
        row([(y[(k, o)], offers[o].share * offers[o].price) for (k, o) in problem.fits], -np.inf, budget)

    a = coo_array((vals, (rows, cols)), shape=(len(lo_c), len(names)))
    result = milp(np.array(cost), constraints=LinearConstraint(a, np.array(lo_c), np.array(hi_c)),
                  integrality=np.array(integral), bounds=Bounds(np.array(lower), np.array(upper)),
                  options={"time_limit": time_limit, "disp": False, "mip_rel_gap": MIP_GAP})
    if result.x is None:
        raise Infeasible(result.message)
    v = result.x
    counts = [{config: round(v[x[(p, c)]]) for c, config in enumerate(configs[p])
               if round(v[x[(p, c)]]) > 0} for p in range(len(pools))]
    chosen = {}
    for k, cls in enumerate(classes):
        options = [(v[z[(k, f)]], f) for f in forms.get(k, [])]
        chosen[k] = max(options)[1] if options else cls.resource
    reserved = {key: float(v[i]) for key, i in wv.items() if v[i] > 1e-6}
    held = {key: float(v[i]) for key, i in y.items() if v[i] > 1e-6}
    unserved = {k: (float(v[s1[k]]), float(v[s2[k]])) for k in range(len(classes))}
    per_hour = sum(val * offers[o].share * offers[o].price for (k, o), val in held.items())
    return Solution(counts, chosen, reserved, held, unserved, per_hour, float(result.fun),
                    time.perf_counter() - started)
