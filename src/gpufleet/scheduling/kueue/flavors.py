"""Flavor assignment (§1.10): for each pod set and resource group, the flavor its requests go to.

Flavors of a group are walked in list order, from where the last search of this workload stopped. Each
flavor's requests are checked against the ClusterQueue's quota through the cohort tree:

* more than the most the ClusterQueue could ever hold (potential available) → no fit;
* within what is available now → fit, at the borrowing level of the smallest subtree that holds it;
* otherwise, if the request alone is within nominal, or a cohort subtree could hold it, or the ClusterQueue
  may preempt while borrowing → the preemption oracle decides: reclaim (targets only in other queues),
  preempt (targets in its own queue) or no candidates;
* else → no fit.

A flavor's mode is its worst resource's. The walk stops at the first flavor that fits without borrowing;
flavor fungibility decides whether borrowing or preemption stops it too; otherwise the best flavor seen is
kept (better mode first, then lower borrowing).

A :class:`FlavorAssigner` serves one ClusterQueue for the life of the policy: what depends only on the queue's
spec and the flavors (resource groups, which flavors no pod set could be refused by its taints) is worked out
once, and each quota check is one query of the tree (:meth:`QuotaTree.assess`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gpufleet.api.kinds import FRACTION_RESOURCE
from gpufleet.api.objects import GPU, ResourceFlavor, Topology
from gpufleet.scheduling.charges import charge, format_quota
from gpufleet.scheduling.kueue.config import CQSpec, GroupSpec
from gpufleet.scheduling.kueue.info import AdmissionShape, PodSetAdmission, PodSetRequest, WorkloadInfo
from gpufleet.scheduling.kueue.modes import (
    BEST,
    MODE_OUTCOME,
    WORST,
    Granular,
    Mode,
    Outcome,
    is_preferred,
    should_try_next_flavor,
)
from gpufleet.scheduling.kueue.selection import flavor_rejection
from gpufleet.scheduling.quota import FR, QuotaTree

# The preemption oracle: for one flavor-resource and quantity, what preemption could achieve and the
# borrowing level after it.
Oracle = Callable[[FR, int], Granular]


@dataclass(slots=True)
class ResourceChoice:
    flavor: str
    mode: Mode
    borrow: int


@dataclass(slots=True)
class PodSetAssignment:
    name: str
    count: int
    choices: dict[str, ResourceChoice] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    failed: bool = False
    # The worst outcome of its choices (NO_FIT when it failed), set once the assigner is done with it.
    outcome: Outcome = Outcome.FIT

    def flavors(self) -> dict[str, str]:
        return {r: c.flavor for r, c in self.choices.items()}


@dataclass(slots=True)
class Assignment:
    podsets: list[PodSetAssignment] = field(default_factory=list)
    usage: dict[FR, int] = field(default_factory=dict)
    borrowing: int = 0
    last_tried: list[dict[int, int]] = field(default_factory=list)
    # The worst outcome of its pod sets (NO_FIT without any), set once the assigner is done with it.
    outcome: Outcome = Outcome.NO_FIT
    # What admissions made from it record (admission_shape), once one is.
    _shape: AdmissionShape | None = field(default=None, compare=False, repr=False)

    def admission_shape(self) -> AdmissionShape:
        """What an admission made from this assignment records, worked out on the first admission and shared by
        the others (the assignment is final by then; the nomination memo may hand it to many heads)."""
        shape = self._shape
        if shape is None:
            shape = self._shape = AdmissionShape.of(
                [PodSetAdmission(ps.name, ps.count, ps.flavors()) for ps in self.podsets], self.usage)
        return shape

    def frs_needing_preemption(self) -> set[FR]:
        return {(c.flavor, r) for ps in self.podsets for r, c in ps.choices.items()
                if c.mode.outcome is Outcome.PREEMPT}

    def counts(self) -> list[int]:
        return [ps.count for ps in self.podsets]

    def message(self) -> str:
        parts = []
        for ps in self.podsets:
            if ps.outcome is Outcome.FIT:
                continue
            parts.append(f"couldn't assign flavors to pod set {ps.name}: {', '.join(sorted(ps.reasons))}")
        return "; ".join(parts)


def _blocking_taints(flavor: ResourceFlavor | None) -> bool:
    return flavor is None or any(t.effect != "PreferNoSchedule" for t in flavor.node_taints)


class FlavorAssigner:
    """Flavor assignment for the workloads of one ClusterQueue against the live quota tree."""

    def __init__(self, tree: QuotaTree, cq: CQSpec, flavors: Mapping[str, ResourceFlavor],
                 topologies: Mapping[str, Topology], fair_sharing: bool) -> None:
        self.tree = tree
        self.cq = cq
        self.flavors = flavors
        self.topologies = topologies
        self.fair_sharing = fair_sharing
        # Flavors that refuse no pod set without a topology request, node selector or required affinity: found,
        # and without a taint that would need tolerating (flavor_rejection has nothing to say about them).
        self._open = frozenset(f for g in cq.groups for f in g.flavors if not _blocking_taints(flavors.get(f)))
        p = cq.preemption
        # Kueue's canPreemptWhileBorrowing, fixed by the spec.
        self._preempt_while_borrowing = p.borrow_within_cohort.policy != "Never" or (
            fair_sharing and p.reclaim_within_cohort != "Never")

    def assign(self, info: WorkloadInfo, oracle: Oracle, counts: list[int] | None = None) -> Assignment:
        out = Assignment()
        group_of = self.cq.group_of
        covers_pods = "pods" in group_of
        outcome = Outcome.FIT
        for ps in info.podsets:
            count = ps.count if counts is None else counts[ps.index]
            requests = ps.total(count)
            if FRACTION_RESOURCE in requests:
                requests = charge(requests, group_of)
            if covers_pods:
                requests["pods"] = count
            psa, tried = self._assign_podset(info, ps, count, requests, out.usage, oracle)
            out.podsets.append(psa)
            out.last_tried.append(tried)
            if psa.outcome < outcome:
                outcome = psa.outcome
            if psa.failed:
                break
            for r, c in psa.choices.items():
                fr = (c.flavor, r)
                out.usage[fr] = out.usage.get(fr, 0) + requests[r]
                if c.borrow > out.borrowing:
                    out.borrowing = c.borrow
        out.outcome = outcome if out.podsets else Outcome.NO_FIT
        return out

    def resume_at(self, assignment: Assignment) -> list[dict[int, int]]:
        """A flavor search state (``WorkloadInfo.last_tried``) that makes the next search start at the flavors
        ``assignment`` chose, pod set by pod set, group by group."""
        out: list[dict[int, int]] = []
        for psa in assignment.podsets:
            tried: dict[int, int] = {}
            for r, c in psa.choices.items():
                group = self.cq.group_of[r]
                tried[group.index] = group.flavors.index(c.flavor) - 1
            out.append(tried)
        return out

    def _assign_podset(self, info: WorkloadInfo, ps: PodSetRequest, count: int, requests: dict[str, int],
                       usage: dict[FR, int], oracle: Oracle) -> tuple[PodSetAssignment, dict[int, int]]:
        psa = PodSetAssignment(ps.name, count)
        tried: dict[int, int] = {}
        group_of = self.cq.group_of
        for res in sorted(requests):
            if res in psa.choices:
                continue  # got its group's flavor already
            group = group_of.get(res)
            if group is None:
                psa.reasons.append(f"resource {res} unavailable in ClusterQueue" + (
                    f" (a GPU fraction is charged on {FRACTION_RESOURCE}, or on {GPU} where the ClusterQueue "
                    f"covers only that)" if res == FRACTION_RESOURCE else ""))
                psa.failed = True
                psa.outcome = Outcome.NO_FIT
                return psa, tried
            if len(group.resources) == 1:
                reqs = {res: requests[res]}
            else:
                reqs = {r: v for r, v in requests.items() if r in group.resources}
            choices, reasons, last = self._find_flavor(info, ps, group, reqs, usage, oracle)
            psa.reasons.extend(reasons)
            if not choices:
                psa.failed = True
                psa.outcome = Outcome.NO_FIT
                return psa, tried
            psa.choices.update(choices)
            tried[group.index] = last
        outcome = Outcome.FIT
        for c in psa.choices.values():
            o = MODE_OUTCOME[c.mode]
            if o < outcome:
                outcome = o
        psa.outcome = outcome
        return psa, tried

    def _find_flavor(self, info: WorkloadInfo, ps: PodSetRequest, group: GroupSpec, reqs: dict[str, int],
                     usage: dict[FR, int], oracle: Oracle) -> tuple[dict[str, ResourceChoice], list[str], int]:
        reasons: list[str] = []
        best: dict[str, ResourceChoice] = {}
        best_mode = WORST
        attempted = -1
        fungibility = self.cq.fungibility
        template = ps.template
        unconstrained = ps.topology is None and not template.node_selector and not template.required_affinity
        flavors = group.flavors
        resources = sorted(reqs) if len(reqs) > 1 else list(reqs)
        for idx in range(info.next_flavor(ps.index, group.index), len(flavors)):
            attempted = idx
            fname = flavors[idx]
            if not (unconstrained and fname in self._open):
                rejection = flavor_rejection(template, ps.topology, fname, self.flavors, group.label_keys,
                                             self.topologies)
                if rejection is not None:
                    reasons.append(rejection)
                    continue
            rep = BEST
            choices: dict[str, ResourceChoice] = {}
            for r in resources:
                fr = (fname, r)
                mode, reason = self._fits_quota(fr, usage.get(fr, 0), reqs[r], oracle)
                if reason:
                    reasons.append(reason)
                if is_preferred(rep, mode):
                    rep = mode  # the flavor is as good as its worst resource
                if rep.mode is Mode.NO_FIT:
                    break
                choices[r] = ResourceChoice(fname, mode.mode, mode.borrow)
            if not should_try_next_flavor(rep, fungibility):
                best, best_mode = choices, rep
                break
            if is_preferred(rep, best_mode):
                best, best_mode = choices, rep
        # Resume after the last tried flavor next time, unless every flavor was tried.
        last = -1 if attempted == len(flavors) - 1 else attempted
        if best_mode.mode is Mode.NO_FIT:
            return {}, reasons, last
        if best_mode.mode is Mode.FIT:
            reasons = []
        return best, reasons, last

    def _fits_quota(self, fr: FR, assumed: int, request: int, oracle: Oracle) -> tuple[Granular, str]:
        val = assumed + request
        most, available, borrow, may_reclaim = self.tree.assess(self.cq.name, fr, val)
        if val > most:
            flavor, resource = fr
            return Granular(Mode.NO_FIT, 0), (
                f"insufficient quota for {resource} in flavor {flavor}, previously considered podsets requests "
                f"({format_quota(resource, assumed)}) + current podset request ({format_quota(resource, request)}) "
                f"> maximum capacity ({format_quota(resource, most)})")
        if val <= available:
            return Granular(Mode.FIT, borrow), ""
        flavor, resource = fr
        reason = (f"insufficient unused quota for {resource} in flavor {flavor}, "
                  f"{format_quota(resource, val - available)} more needed")
        if self.cq.nominal(fr) >= val or may_reclaim or self._preempt_while_borrowing:
            return oracle(fr, val), reason
        return Granular(Mode.NO_FIT, borrow), reason
