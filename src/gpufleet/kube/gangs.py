"""Keeping gangs whole on a live cluster: finish or undo partial binds, and time out gangs that never get ready.

A gang is bound in one cycle, but the API server can fail some of its Bindings, and a scheduler can die
between two of them. A gang left partially bound holds its nodes while it cannot run, so each cycle looks
for pod groups with some members holding nodes and others not:

* every unbound member has a placement recorded (the cut-short binds of an earlier cycle: the gang plan that
  the first bound member's Binding carried, :func:`gpufleet.kube.annotations.read_gang_plan`, or an intent
  annotation an older gpufleet wrote on the pod itself) and its node still has room → **complete**: bind
  them there, this cycle, before anything else is planned;
* otherwise (a member has no intent, e.g. it was recreated, or its node is gone or full) → once the gang
  has been incomplete for ``timeout`` seconds, **evict** the members that hold nodes, so the whole gang is
  planned again from scratch. The wait absorbs a member that is being recreated right now.

waitForPodsReady, Kueue's gang timeout, is carried out here too (the policy is rebuilt every cycle, so its
own timers do not survive): a workload whose pods are not all Ready ``timeout`` seconds after it was
bound is evicted with reason ``PodsReadyTimeout``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from gpufleet.api.objects import PodsReadyPolicy
from gpufleet.kube.annotations import Intent, read_gang_plan
from gpufleet.kube.world import PodEntry, World, account, expected_size

PODS_READY_TIMEOUT = "PodsReadyTimeout"
GANG_INCOMPLETE = "GangIncomplete"


@dataclass(frozen=True, slots=True)
class GangAction:
    workload: str
    kind: Literal["complete", "evict"]
    pods: tuple[str, ...]  # to bind (complete) or to evict (evict)
    reason: str  # a CamelCase code: the metric label and the event's reason
    message: str = ""


def _created(e: PodEntry) -> float:
    stamp = e.pod.meta.creation_timestamp if e.pod is not None else None
    return stamp if stamp is not None else 0.0


def repair(world: World, timeout: float) -> list[GangAction]:
    """Complete or evict partially bound gangs; completed members are charged in ``world.cluster``."""
    actions: list[GangAction] = []
    for (ns, group), members in sorted(world.gangs().items()):
        held = [m for m in members if m.node is not None]
        unbound = [m for m in members if m.node is None and not m.deleting and not m.gated]
        if not held or not unbound:
            continue
        key = f"{ns}/{group}"
        _recall_plans(held, unbound)
        if _complete(world, unbound):
            actions.append(GangAction(key, "complete", tuple(m.key for m in unbound), "PartialBind",
                                      "completing a partial bind on the nodes chosen before"))
            continue
        since = max([*(_created(m) for m in unbound),
                     min((m.intent.at for m in held if m.intent and m.intent.at), default=0.0)])
        if world.now - since >= timeout:
            victims = tuple(m.key for m in held if not m.deleting)
            if victims:
                actions.append(GangAction(key, "evict", victims, GANG_INCOMPLETE,
                                          f"{len(held)} of {expected_size(members)} pods hold nodes and the rest "
                                          f"could not join them for {timeout:g}s"))
    return actions


def _recall_plans(held: list[PodEntry], unbound: list[PodEntry]) -> None:
    """Give each unbound member the placement a bound member's gang plan records for it (same UID: a
    recreated pod is another pod); the newest plan wins where several name the same pod."""
    planned: dict[str, tuple[str | None, Intent]] = {}
    for m in held:
        for name, (uid, intent) in read_gang_plan((m.raw.get("metadata") or {}).get("annotations") or {}).items():
            seen = planned.get(name)
            if seen is None or (intent.at or 0.0) > (seen[1].at or 0.0):
                planned[name] = (uid, intent)
    for m in unbound:
        found = planned.get(m.key.split("/", 1)[1])
        if found is not None and (found[0] is None or m.uid is None or found[0] == m.uid):
            m.intent = found[1]


def _complete(world: World, unbound: list[PodEntry]) -> bool:
    cluster = world.cluster
    if any(m.intent is None or m.intent.node not in cluster.nodes for m in unbound):
        return False
    mark = cluster.checkpoint()
    for m in unbound:
        assert m.intent is not None
        m.node, m.devices = m.intent.node, m.intent.devices
        if not account(cluster, m):
            cluster.rollback(mark)
            for u in unbound:
                u.node, u.devices = None, None
            return False
    cluster.commit(mark)
    for m in unbound:
        m.completing = True
    return True


def _ready(e: PodEntry) -> bool:
    for cond in (e.raw.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def timed_out(world: World, policy_for: Callable[[str], PodsReadyPolicy | None]) -> list[GangAction]:
    """Workloads past their waitForPodsReady timeout; ``policy_for`` gives a workload's policy (None: off)."""
    actions: list[GangAction] = []
    for workload, keys in sorted(world.pods_of.items()):
        policy = policy_for(workload)
        if policy is None or not policy.enable:
            continue
        pods = [world.pods[k] for k in keys if k in world.pods]
        live = [p for p in pods if not p.terminal]
        if not live or any(p.node is None or p.deleting for p in live) or all(_ready(p) for p in live):
            continue
        if any(p.assumed for p in live):
            continue  # still being bound (gpufleet.kube.bindqueue): the cache has no start time for it yet
        started = min((p.intent.at for p in live if p.intent and p.intent.at), default=None)
        if started is None:
            started = min(_created(p) for p in live)
        if world.now - started >= policy.timeout_s:
            actions.append(GangAction(workload, "evict", tuple(p.key for p in live), PODS_READY_TIMEOUT,
                                      f"not all pods were ready {policy.timeout_s:g}s after the workload was bound"))
    return actions
