"""Which workloads a policy left parked, carried into a policy built afresh for the next cycle.

Kueue parks a BestEffortFIFO head that does not fit, so that the next head gets its turn, and wakes parked
workloads only when capacity or quota is released. A policy that lives on (the simulator's, the live scheduler's
kept one) remembers that in its queues. A policy rebuilt from the cluster's objects, as a restart or the live
scheduler's full cycle builds it, would forget, and re-evaluate the same unfit heads first every cycle: behind a
backlog deeper than one cycle's budget, the workloads queued after it would starve. :class:`ParkedMemory` carries
the parked set from the policy a cycle ends with into the one the next cycle builds, for as long as nothing was
released in between.

The heads a queue keeps first (:class:`Heads`: a BestEffortFIFO head waiting for its preemptions, Kueue's sticky
workload; a gang reserving its queue's quota, kueue.reservation) are carried too, whatever was released: what they
wait for is a release.

"Nothing released" is judged on a :class:`Releases`: what the driver sees of the things whose change could wake a
parked workload (the queue objects' generation, the nodes, the pods holding capacity). The memory holds while the
queues and the nodes are the same and every pod that held capacity still does; new pods holding capacity release
nothing. How the driver measures these is its own affair (gpufleet.live.planner); the rule is here.

No I/O and no clock. A driver whose policy lives on needs none of it: its policy's queues are the memory.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

from gpufleet.api.dra_need import DraNeed
from gpufleet.cluster.workloads import Workload
from gpufleet.scheduling.kueue.pending import PendingReason
from gpufleet.scheduling.kueue.policy import KueuePolicy
from gpufleet.scheduling.kueue.state import SchedulerState


class Parked(NamedTuple):
    """One workload left parked: in which ClusterQueue, why it waits, and whether it waits for nodes (not quota).
    (A tuple: a carried live cycle remembers every parked workload, thousands in a backlog, each time.)"""

    cluster_queue: str
    message: str
    reason: PendingReason
    for_nodes: bool
    workload: Workload  # as it was parked: one whose DRA claims now read otherwise is evaluated afresh


class Heads(NamedTuple):
    """What a ClusterQueue keeps first: its sticky workload, and the workload reserving its quota (None: none)."""

    sticky: str | None
    reserving: str | None


@dataclass(frozen=True, slots=True)
class Releases:
    """What a release would change, as the driver sees it at one moment."""

    queues: int  # the queue objects' generation; 0: unknown (the memory never holds against it)
    nodes: int  # a fingerprint of the nodes (what a scheduler reads of them)
    holders: frozenset[str]  # the pods holding capacity

    def released_since(self, before: Releases) -> bool:
        """Whether something may have been released between ``before`` and this: a queue or a node changed, or a
        pod that held capacity then holds none now."""
        return not (self.queues == before.queues != 0 and self.nodes == before.nodes
                    and before.holders <= self.holders)


def parked_in(state: SchedulerState) -> dict[str, Parked]:
    """The workloads ``state``'s queues hold parked, with why they wait."""
    return {key: Parked(name, info.message, info.pending, info.placement_parked, info.workload)
            for name, q in state.queues.queues.items() for key, info in q.parked.items()}


def heads_in(state: SchedulerState) -> dict[str, Heads]:
    """The ClusterQueues of ``state`` that keep a workload first, and which."""
    reservations = state.reservations
    return {name: Heads(q.sticky, reservations.get(name)) for name, q in state.queues.queues.items()
            if q.sticky is not None or name in reservations}


def hold_heads(state: SchedulerState, heads: dict[str, Heads]) -> int:
    """Keep first in ``state`` the workloads of ``heads`` still waiting, active, in the same ClusterQueue (the others
    are gone, admitted or moved, and left as they are), as the policy that kept them did; how many."""
    count = 0
    queues = state.queues.queues
    for name, h in heads.items():
        q = queues.get(name)
        if q is None:
            continue
        if h.reserving is not None and h.reserving in q.active:
            state.reservations[name] = h.reserving
        if h.sticky is not None and (item := q.active.get(h.sticky)) is not None:
            q.sticky = h.sticky
            q.push(item[5])  # (its heap item made again: the sticky one ranks first)
            count += 1
    return count


def park_again(state: SchedulerState, parked: dict[str, Parked]) -> int:
    """Park in ``state`` the workloads of ``parked`` that are waiting, active, in the same ClusterQueue, their DRA
    claims resolved as they were (the others are gone, admitted, moved, or ask otherwise: they are left as they
    are), as they were parked; how many."""
    count = 0
    queues = state.queues.queues
    for key, p in parked.items():
        info = state.infos.get(key)
        q = queues.get(p.cluster_queue)
        if info is not None and q is not None and key in q.active and (
                p.workload is info.workload or _claims(p.workload) == _claims(info.workload)):
            q.park(info)
            info.message = p.message  # why it waits, for its pods' condition and the pending gauge
            info.pending = p.reason
            if p.for_nodes:
                info.placement_parked = True
                state.placement_parked[key] = info
            count += 1
    return count


def _claims(workload: Workload) -> tuple[tuple[str, object], ...]:
    """The workload's pods' DRA claims as resolved (what the claims' objects, not a release, change: a claim the
    resourceclaim controller made, a slice published), comparable across rebuilds: a ``distinctAttribute``'s values
    are one object per catalog, compared by identity, so the attribute stands for them (the devices they are of
    are in the choice's groups)."""
    return tuple((p.key, _comparable(p.template.dra)) for p in workload.pods if p.template.dra is not None)


def _comparable(need: DraNeed) -> object:
    return (need.claims, need.problem, need.awaiting,
            tuple(c if c.distinct is None else (replace(c, distinct=None), c.distinct.attribute) for c in need.choices))


class ParkedMemory:
    """The parked set a cycle's policy ended with, and what it was judged against (see the module doc)."""

    def __init__(self) -> None:
        self.parked: dict[str, Parked] = {}
        self.heads: dict[str, Heads] = {}
        self.seen: Releases | None = None  # what the driver saw when it last looked

    def carry(self, policy: KueuePolicy, now: Releases) -> int:
        """Park again in ``policy`` (one just built) what the last cycle left parked, unless something was
        released since (judged on ``now``); how many. ``now`` is what a later :meth:`carry` is judged against,
        unless :meth:`note_holders` brings the holders up to date first."""
        valid = self.seen is not None and not now.released_since(self.seen)
        count = park_again(policy.state, self.parked) if valid else 0
        hold_heads(policy.state, self.heads)  # (whatever was released: a release is what they wait for)
        self.seen = now
        return count

    def nodes_changed(self) -> None:
        """The nodes changed outside a rebuild (a policy that lives on took them in place): what was seen of them no
        longer says what the next rebuild will see, so that one evaluates the parked workloads afresh."""
        self.seen = None

    def owners_changed(self) -> None:
        """A workload-kind object changed in a way that moves or shrinks what admitted workloads are charged (its
        queue label, its template), which :class:`Releases` does not see: the next rebuild evaluates the parked
        workloads afresh (a quota freed in a ClusterQueue by a Deployment moved to another)."""
        self.seen = None

    def queues_changed(self, generation: int) -> None:
        """The queue objects changed outside a rebuild, and the policy that lives on took the change in place and
        tried again the workloads it could concern (a Namespace relabelled, a LocalQueue created): what it leaves
        parked is judged against the queue objects of ``generation``."""
        if self.seen is not None:
            self.seen = Releases(generation, self.seen.nodes, self.seen.holders)

    def remember_parked(self, policy: KueuePolicy) -> None:
        """What the round just run left parked, and the heads its queues keep first."""
        self.parked = parked_in(policy.state)
        self.heads = heads_in(policy.state)

    def note_holders(self, holders: frozenset[str]) -> None:
        """The pods holding capacity as the round ends (those it placed included): a later cycle re-parks only while
        none of them is gone. (Holders taken at the round's start would miss the pods it placed: one of them
        ending would not wake what it kept out.)"""
        if self.seen is not None:
            self.seen = Releases(self.seen.queues, self.seen.nodes, holders)
        else:
            self.seen = Releases(0, 0, holders)
