"""Keeping gangs whole on a live cluster: finish or undo partial binds, place the pods that come after their
workload's admission, and tell the core which gangs are not ready yet.

A gang is bound in one cycle, but the API server can fail some of its Bindings, and a scheduler can die
between two of them. A gang left partially bound holds its nodes while it cannot run, so each cycle looks
for gangs (Kueue pod groups and the workloads of the gang kinds: a JobSet, a PyTorchJob, a Job...; see
:meth:`gpufleet.live.world.World.gangs`) with some members holding nodes and others not:

* every unbound member has a placement recorded (the cut-short binds of an earlier cycle: the gang plan that
  the first bound member's Binding carried, :func:`gpufleet.k8s.annotations.read_gang_plan`, or an intent
  annotation an older gpufleet wrote on the pod itself) and its node still has room → **complete**: bind
  them there, this cycle, before anything else is planned;
* otherwise (a member has no intent, e.g. it was recreated, or its node is gone or full), for a pod group
  (Kueue's, Volcano's, KAI's) → once the gang has been incomplete for ``timeout`` seconds, **evict** the members
  that hold nodes, so the whole gang is planned again from scratch. The wait absorbs a member that is being
  recreated right now.

The workload of a workload kind's object (a Job, a JobSet, a StatefulSet...) is different: once admitted, its
controller owns its pods, and Kueue leaves the pods it creates later to be scheduled one by one (a Job's next pod
when completions exceed parallelism, a replacement for a failed pod, a StatefulSet's next ordinal, which comes
only once the one before is ready: Kueue admits StatefulSets and LeaderWorkerSets with their first pod). Such a
workload is completed from a recorded plan like any gang, but never evicted for being partial; its pods that
came after its admission, with no plan, are placed by :func:`join` once the cycle's policy has admitted it again,
next to the ones bound, with its flavors, before anything new is admitted (their quota is the workload's
already); they wait (their condition says why) while they do not fit. That rule is the core's
(:mod:`gpufleet.scheduling.kueue.late_members`, which the simulator runs too); :func:`join` finds the late pods in
the world and carries the answer back to them. ``KueuePolicy.submit`` ignores every change to an admitted
workload, so without this step they would never be bound. One exception keeps a gang whole: when every pod of the
workload that holds a node is being deleted (a JobSet restarting all its Jobs), the new pods wait for them to go
and are then placed together, as a new gang.

waitForPodsReady, Kueue's gang timeout, is the core's rule, live as in the simulator: :func:`tell_readiness` tells
the policy what the pods say (Ready or not, and since when they are bound), and the policy's round evicts a
workload whose pods are not all Ready ``timeout`` seconds after they were bound, with reason ``PodsReadyTimeout``.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal

from gpufleet.cluster.workloads import Workload
from gpufleet.k8s.annotations import Intent, read_gang_plan
from gpufleet.live.world import PodEntry, World, account, expected_size
from gpufleet.scheduling.kueue import KueuePolicy
from gpufleet.scheduling.kueue.info import State
from gpufleet.scheduling.kueue.late_members import joins_late

# The core's reason, re-exported: one word for one eviction, whichever side decides it.
from gpufleet.scheduling.kueue.state import PODS_READY_TIMEOUT as PODS_READY_TIMEOUT

JsonDict = dict[str, Any]

GANG_INCOMPLETE = "GangIncomplete"
# A pod condition the scheduler writes on the pods of a workload it saw with all its pods Ready, once one of them is
# not Ready any more: what Kueue keeps on its Workload (PodsReady), kept in the API for a scheduler that starts
# later (a new leader) to read.
WAS_READY_CONDITION = "gpufleet.io/PodsReady"
LATE_MEMBERS = "LateMembers"


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


def repair(world: World, timeout: float, due: list[float] | None = None) -> list[GangAction]:
    """Complete or evict partially bound gangs; completed members are charged in ``world.cluster``. When a
    partial gang's timeout is still to come, its time is appended to ``due`` (the cycle must run again then)."""
    actions: list[GangAction] = []
    workloads = {w.key: w for w in world.workloads}
    for key, members in sorted(world.gangs().items()):
        held = [m for m in members if m.node is not None]
        unbound = [m for m in members if m.node is None and not m.deleting and not m.gated]
        if not held or not unbound:
            continue
        _recall_plans(held, unbound)
        if _complete(world, unbound):
            _seen_bound(workloads.get(key), unbound)
            actions.append(GangAction(key, "complete", tuple(m.key for m in unbound), "PartialBind",
                                      "completing a partial bind on the nodes chosen before"))
            continue
        if key in workloads and joins_late(workloads[key]):
            continue  # its controller's later pods join it (join): never evicted for being partial
        since = max([*(_created(m) for m in unbound),
                     min((m.intent.at for m in held if m.intent and m.intent.at), default=0.0)])
        if world.now - since < timeout:
            if due is not None:
                due.append(since + timeout)
        else:
            victims = tuple(m.key for m in held if not m.deleting)
            if victims:
                w = workloads.get(key)
                total = (w.expected_pods or w.size) if w is not None else expected_size(members)
                actions.append(GangAction(key, "evict", victims, GANG_INCOMPLETE,
                                          f"{len(held)} of {total} pods hold nodes and the rest "
                                          f"could not join them for {timeout:g}s"))
    return actions


def _seen_bound(workload: Workload | None, entries: list[PodEntry]) -> None:
    """The pods ``entries`` now hold nodes: the workload built before this cycle completed them sees them bound
    (as its pods bound before), so the policy admits it with them."""
    if workload is None:
        return
    nodes = {e.key: e.node for e in entries}
    for p in workload.pods:
        if p.key in nodes:
            p.node_name = nodes[p.key]


def join(world: World, policy: KueuePolicy, only: Collection[str] | None = None) -> list[GangAction]:
    """The pods that came after their workload was admitted (a StatefulSet's next ordinal, a Job's replacement pod;
    see the module doc), handed to the core's rule (:func:`gpufleet.scheduling.kueue.late_members.join`): all of
    one workload together, with the flavors of its admission, on the policy's nodes. Call it after the policy has
    every workload and before it runs: these pods already have their quota and go before any new admission. Placed
    pods are charged and marked ``completing`` (this cycle binds them); the others wait with ``PodEntry.waiting``
    saying why, their workload in ``World.late``. ``only``: these workloads (a cycle that carries on: the ones with
    pods created since, and ``World.late``), not all."""
    if policy.state.placer is None:
        return []  # quotaOnly: no nodes to place on
    actions: list[GangAction] = []
    chosen = world.workloads if only is None else [w for w in world.workloads if w.key in only]
    for w in chosen:
        world.late.discard(w.key)
        if not joins_late(w):
            continue
        info = policy.info(w.key)
        if info is None or info.state is not State.ADMITTED or info.admission is None:
            continue
        late = [e for p in w.pods if (e := world.pods.get(p.key)) is not None and e.pod is not None
                and e.node is None and not e.terminal and not e.deleting and not e.gated and e.problem is None]
        if not late:
            continue
        holding = [e for p in w.pods if (e := world.pods.get(p.key)) is not None and e.node is not None
                   and not e.terminal and not e.completing]
        if holding and all(e.deleting for e in holding):
            # (deletion is what the API server shows of a restart: the core sees pods, not their deletion)
            for e in late:
                e.waiting = (f"the pods of {w.kind} {w.key} that hold nodes are being deleted (a restart): its new "
                             "pods are placed together once they are gone")
            world.late.add(w.key)
            continue
        keys = {e.key for e in late}
        joining = policy.join(w.key, sorted(keys), world.now)
        if joining is None:
            continue
        if joining.waiting is not None:
            for e in late:
                e.waiting = joining.message(w.kind)
            world.late.add(w.key)
            continue
        for pa in joining.placed:
            e = world.pods[pa.pod]
            e.node, e.devices, e.completing, e.waiting = pa.node, pa.devices, True, None
        _seen_bound(w, late)
        actions.append(GangAction(w.key, "complete", tuple(sorted(keys)), LATE_MEMBERS,
                                  f"placing {len(keys)} pod(s) created after the workload was admitted"))
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


def _condition(e: PodEntry, kind: str) -> bool:
    """Whether the pod's condition ``kind`` is True."""
    for cond in (e.raw.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return bool(cond.get("status") == "True")
    return False


def _ready(e: PodEntry) -> bool:
    return _condition(e, "Ready")


def all_ready(world: World, workload: str) -> bool:
    """Whether every live pod of the workload is bound (not on its way) and Ready: Kueue's PodsReady."""
    for key in world.pods_of.get(workload, ()):
        e = world.pods.get(key)
        if e is None or e.terminal:
            continue
        if e.node is None or e.assumed or e.completing or e.deleting or not _ready(e):
            return False
    return True


def tell_readiness(world: World, policy: KueuePolicy, now: float, only: Collection[str] | None = None,
                   seen_ready: set[str] | None = None) -> list[JsonDict]:
    """What the pods say of each admitted workload's readiness, told to the core, which keeps waitForPodsReady's
    rule for the live scheduler as for the simulator (``KueuePolicy.pods_ready``, ``pods_not_ready``): a workload
    whose pods are all Ready stops waiting; one whose pods are not waits (blockAdmission holds its blocking queues
    back meanwhile, as Kueue holds them), with a deadline once its pods are all on their nodes: ``timeout`` after
    the latest of their binds (a pod that joined the running workload later, a Job's next pod or a replacement,
    gets the timeout from its own bind, not from the workload's first, while the workload was never seen with all
    its pods Ready). Past it, the core's round evicts the workload with ``PodsReadyTimeout``. A workload once seen
    with all its pods Ready gets no deadline again when one is not Ready (a container restarting, a readiness
    probe failing, a next pod starting): Kueue evicts such a workload only under ``recoveryTimeout``, which
    gpufleet does not read; with blockAdmission it holds the blocking queues back until its pods are Ready again,
    as in Kueue. ``seen_ready``: the UIDs of the pods seen Ready with all of their workload's, kept between cycles
    by the caller (None: none kept); a pod carrying :data:`WAS_READY_CONDITION` counts as seen so. ``only``: these
    workloads (those whose pods changed), not every admitted one. Returns the pods to mark with
    :data:`WAS_READY_CONDITION`: those of a workload seen Ready, not all Ready now, that do not carry it yet (so
    that a scheduler starting later, which has not seen them, does not time it out)."""
    marks: list[JsonDict] = []
    state = policy.state
    keys = [k for admitted in (*state.admitted.values(), state.running_free) for k in admitted] if only is None \
        else list(only)
    for key in keys:
        info = policy.info(key)
        # (one on its way out too: its pods being deleted are not Ready, and hold blockAdmission's queues back)
        if info is None or info.state is not State.ADMITTED or info.admission is None:
            continue
        timeout = policy.config.pods_ready_for(info.admission.cluster_queue)
        if not timeout.enable:
            continue  # (waitForPodsReady off for it: nothing waits for its pods, nothing times out)
        if all_ready(world, key):
            if not info.ready:
                policy.pods_ready(key, now)
            if seen_ready is not None:
                seen_ready.update(e.uid for k in world.pods_of.get(key, ())
                                  if (e := world.pods.get(k)) is not None and e.uid and not e.terminal)
            continue
        pods = [e for k in world.pods_of.get(key, ()) if (e := world.pods.get(k)) is not None]
        recovering = any(_was_ready(e) or (seen_ready is not None and e.uid in seen_ready) for e in pods)
        policy.pods_not_ready(key, None if recovering else _deadline(world, key, timeout.timeout_s))
        if recovering:
            marks += [e.raw for e in pods if not e.terminal and not e.deleting and not _was_ready(e)]
    return marks


def _was_ready(e: PodEntry) -> bool:
    """Whether the pod carries :data:`WAS_READY_CONDITION`: its workload was seen with all its pods Ready."""
    return _condition(e, WAS_READY_CONDITION)


def _deadline(world: World, workload: str, timeout: float) -> float | None:
    """When the workload's waitForPodsReady timeout runs out, counted from the latest of its pods' binds; None while
    a pod is still being bound (by the binding workers, or by this cycle) or is being deleted (no clock yet)."""
    live = [e for k in world.pods_of.get(workload, ()) if (e := world.pods.get(k)) is not None and not e.terminal]
    if not live or any(e.node is None or e.deleting or e.assumed or e.completing for e in live):
        return None
    return max((e.intent.at if e.intent and e.intent.at else _created(e)) for e in live) + timeout
