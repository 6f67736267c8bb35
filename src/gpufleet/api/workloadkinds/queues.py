"""Volcano and KAI Queues read as Kueue's objects, so that the workloads naming them are admitted against them by
the same admission every other workload goes through.

Each queue becomes a ClusterQueue named ``volcano:<queue>`` or ``kai:<queue>`` with one flavor,
``gpufleet:any-node`` (no node labels), covering every resource the input requests (unlimited where the queue
names no quota); every namespace that sends work to it gets a LocalQueue of the same name. Every object made here
has a colon in its name, which no Kubernetes name has: none can collide with an object of the input (a Kueue
Cohort ``kai``, a ClusterQueue of a Volcano queue's name, a ResourceFlavor ``gpufleet-any-node``).

* Volcano: nominal quota ``deserved`` (else ``capability``), borrowing up to ``capability`` from the other Volcano
  queues (Cohort ``volcano:(root)``); a resource neither names is unlimited, as in Volcano. The queue ``default``,
  which Volcano creates itself, is unlimited when the input does not define it.
* KAI (:func:`kai_quota`): a leaf queue's ``quota`` (its deserved share, a plain number: unset is 0, unlike
  Volcano's queue with only ``capability``, which deserves it) is the nominal quota, its ``limit`` the cap on its
  use (borrowing limit ``limit - quota``; -1: none; unset or 0: nothing above the quota); a parent queue
  (``parentQueue``) is a Cohort whose subtree holds the parent's quota (its own nominal quota is what the parent
  deserves beyond its children's quotas) and whose borrowing limit is the parent's ``limit``. The top-level queues
  share the cluster, as in KAI: they all sit in the Cohort ``kai:(root)``, whose quota is the cluster's capacity
  beyond what they deserve (their quotas only; unlimited when the input has no nodes), so a queue of quota 0 and
  limit -1 (KAI's quick-start queues) runs on what is idle, and a queue under its quota reclaims from those over
  theirs. ``overQuotaWeight`` is the fair-sharing weight (Kueue's ``fairSharing.weight``, used when the
  Configuration enables fair sharing). Only leaf queues take work, as in KAI.

Both reclaim what they lend (Kueue's ``reclaimWithinCohort: Any``). Approximated, said once per run: Volcano's
proportion and capacity plugins and KAI's division of idle capacity (over-quota ``priority`` first, then weight
per resource) differ from Kueue's borrowing; Kueue has one weight per queue, so KAI's weight of ``gpu`` (else of
the first resource giving one) is taken.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from gpufleet.api.errors import Problems
from gpufleet.api.objects import (
    CPU,
    GPU,
    MEMORY,
    ClusterQueue,
    Cohort,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    ObjectMeta,
    PreemptionPolicy,
    Quota,
    ResourceFlavor,
    ResourceGroup,
    SourceRef,
)
from gpufleet.api.workloadkinds.common import pod_queue
from gpufleet.api.workloadkinds.model import ForeignQueue, QueueSystem
from gpufleet.api.workloadkinds.table import VOLCANO_GROUP_ANNOTATIONS
from gpufleet.api.workloadkinds.volcano import DEFAULT_QUEUE
from gpufleet.gpu.constants import FRACTION_RESOURCE

if TYPE_CHECKING:
    from gpufleet.api.manifests import Manifests

# The objects made here are named with a colon, which no Kubernetes object name has: none can be mistaken for
# (or collide with) an object of the input, a Kueue Cohort "kai" or a ResourceFlavor "gpufleet-any-node" included.
ANY_NODE_FLAVOR = "gpufleet:any-node"
UNLIMITED = 10**15  # in canonical units: far above any cluster (a petabyte, a trillion cores)
VOLCANO_COHORT = "volcano:(root)"  # the Cohort of every Volcano queue
KAI_COHORT = "kai:(root)"  # the cluster, which KAI's top-level queues divide
_VOLCANO_POD_GROUP = ("scheduling.volcano.sh", "PodGroup")
VOLCANO_JOB_LABEL = "volcano.sh/job-name"  # on the pods of a Volcano Job, which gives their queue


def translate_queues(m: Manifests) -> None:
    """Add the ClusterQueues, Cohorts, LocalQueues and flavor that the input's Volcano and KAI queues stand for."""
    wanted: dict[tuple[QueueSystem, str], set[str]] = defaultdict(set)  # queue -> namespaces sending work
    # Every resource the input requests: a queue covers them all (unlimited where it names no quota), so that a
    # workload is never refused for a resource its Volcano or KAI queue does not limit.
    requested: set[str] = set()
    naming: dict[tuple[QueueSystem, str], SourceRef] = {}  # queue -> where a workload first names it
    for owner in m.controllers.owners:
        for plan in owner.workloads:
            for ps in plan.pod_sets:
                requested.update(ps.template.requests)
        key = _foreign(owner.queue)
        if key is not None:
            wanted[key].add(owner.namespace)
            if owner.meta.source is not None:
                naming.setdefault(key, owner.meta.source)
    groups = {(o.namespace, o.meta.name) for o in m.controllers.owners if o.rule.key == _VOLCANO_POD_GROUP}
    for pod in m.pods:
        requested.update(pod.template.requests)
        # a pod that Volcano schedules is in Volcano's queue default unless a group of the input gives its queue
        # (as cluster.workloads reads it): a pod of no group, or of a PodGroup the input lacks
        ns = pod.meta.namespace or "default"
        group = next((pod.meta.annotations[a] for a in VOLCANO_GROUP_ANNOTATIONS if pod.meta.annotations.get(a)), None)
        alone = group is None or ((ns, group) not in groups and not pod.meta.labels.get(VOLCANO_JOB_LABEL))
        label, label_system = pod_queue(pod.meta.labels, pod.meta.annotations,
                                        pod.template.scheduler_name if alone else None)
        if label is not None and label_system != "kueue":
            wanted[(label_system, label)].add(pod.meta.namespace or "default")
            if pod.meta.source is not None:
                naming.setdefault((label_system, label), pod.meta.source)
    queues = {(q.system, q.name): q for q in m.controllers.queues}
    if not wanted and not queues:
        return
    problems = m.problems
    if ("volcano", DEFAULT_QUEUE) in wanted and ("volcano", DEFAULT_QUEUE) not in queues:
        queues[("volcano", DEFAULT_QUEUE)] = ForeignQueue(ObjectMeta(DEFAULT_QUEUE), "volcano", {}, {})
    parents = {(q.system, q.parent) for q in queues.values() if q.parent}
    before = (len(m.cluster_queues), len(m.local_queues), len(m.cohorts))
    added: list[str] = []
    kai = _KaiTree(queues, requested)
    for (system, name), q in sorted(queues.items()):
        covered = _covered(q, requested)
        if system == "kai":
            if q.parent and q.parent not in kai.by_name:
                _warn(problems, q, f"KAI Queue {name} names parentQueue {q.parent}, which is not in the input: read as "
                      "a top-level queue", "add the parent Queue to the input, or fix the name", "spec.parentQueue")
            above = f"kai:{q.parent}" if q.parent and q.parent in kai.by_name else KAI_COHORT
            if (system, name) in parents:  # a KAI parent queue: a Cohort whose subtree holds the parent's quota
                m.cohorts.append(Cohort(ObjectMeta(f"kai:{name}", source=q.meta.source), above,
                                        [_group(covered, kai.cohort_quotas(q, covered))], _weight(q)))
                continue
            cohort: str | None = above
            quotas = {res: kai_quota(q, res) for res in covered}
        else:
            quotas = {res: _quota(q, res) for res in covered}
            if (system, name) in parents:  # a Volcano parent queue: a Cohort of its quota
                m.cohorts.append(Cohort(ObjectMeta(f"volcano:{name}", source=q.meta.source),
                                        f"volcano:{q.parent}" if q.parent else None, [_group(covered, quotas)]))
                continue
            cohort = VOLCANO_COHORT
        m.cluster_queues.append(ClusterQueue(
            meta=ObjectMeta(f"{system}:{name}", source=q.meta.source, order=q.meta.order),
            resource_groups=[_group(covered, quotas)], cohort=cohort, namespace_selector=LabelSelector(),
            preemption=PreemptionPolicy(reclaim_within_cohort="Any"), fair_weight=_weight(q)))
        added.append(f"{'Volcano' if system == 'volcano' else 'KAI'} Queue {name}")
    if kai.queues:
        covered_all = sorted(set().union(*(_covered(q, requested) for q in kai.queues)))
        m.cohorts.append(Cohort(ObjectMeta(KAI_COHORT), None,
                                [_group(covered_all, {res: Quota(UNLIMITED) for res in covered_all})]))
        m.controllers.kai_deserved = kai.deserved(covered_all)
    # Every namespace of the input may send work to every queue (the live scheduler parses queues apart from pods).
    known_namespaces = {ns.meta.name for ns in m.namespaces}
    for key in queues:
        if key not in parents and known_namespaces:
            wanted[key] |= known_namespaces
    for (system, name), namespaces in sorted(wanted.items()):
        if (system, name) in parents:
            _warn(problems, queues[(system, name)], f"{'Volcano' if system == 'volcano' else 'KAI'} Queue {name} "
                  "has child queues; only leaf queues take work, so the workloads naming it stay pending",
                  "name a leaf queue")
            continue
        if (system, name) not in queues:
            src = naming.get((system, name))
            problems.warning(f"{'Volcano' if system == 'volcano' else 'KAI'} Queue {name} is named by workloads in "
                             f"{', '.join(sorted(namespaces))} but is not in the input; they stay pending",
                             file=src.file if src else None, line=src.line if src else None,
                             kind="Queue", name=name, fix="add the Queue to the input")
            continue
        for ns in sorted(namespaces):
            m.local_queues.append(LocalQueue(ObjectMeta(f"{system}:{name}", ns), f"{system}:{name}"))
    if added and not any(f.name == ANY_NODE_FLAVOR for f in m.flavors):
        m.flavors.append(ResourceFlavor(ObjectMeta(ANY_NODE_FLAVOR)))
        _count(m, "ResourceFlavor", 1)
    _count(m, "ClusterQueue", len(m.cluster_queues) - before[0])
    _count(m, "LocalQueue", len(m.local_queues) - before[1])
    _count(m, "Cohort", len(m.cohorts) - before[2])
    if added:
        first = min((q for q in queues.values() if q.meta.source is not None),
                    key=lambda q: q.meta.order, default=None)
        src = first.meta.source if first is not None else None
        problems.warning(
            f"read as Kueue ClusterQueues (see docs/peers.md): {', '.join(added)}; Volcano's and KAI's division of "
            "idle capacity (KAI: over-quota priority, then weight per resource) differs from Kueue's borrowing, which "
            "gpufleet applies", file=src.file if src else None, line=src.line if src else None,
            kind="Queue", fix="compare with the scheduler's own view before relying on borrowed capacity")


def _foreign(queue: str | None) -> tuple[QueueSystem, str] | None:
    """(system, queue) of a Volcano or KAI queue's LocalQueue name (``volcano:default``); None for Kueue's."""
    if queue is None:
        return None
    system, _, name = queue.partition(":")
    if system == "volcano":
        return "volcano", name
    if system == "kai":
        return "kai", name
    return None


def _covered(q: ForeignQueue, requested: set[str]) -> list[str]:
    return sorted((requested | set(q.nominal) | set(q.limit) | {GPU}) - {FRACTION_RESOURCE})


def _group(covered: list[str], quotas: dict[str, Quota]) -> ResourceGroup:
    return ResourceGroup(tuple(covered), [FlavorQuotas(ANY_NODE_FLAVOR, quotas)])


def _weight(q: ForeignQueue) -> float:
    return q.weight if q.weight is not None else 1.0


class _KaiTree:
    """KAI's queue hierarchy: what each queue's subtree deserves, per resource."""

    def __init__(self, queues: dict[tuple[QueueSystem, str], ForeignQueue], requested: set[str]) -> None:
        self.by_name = {name: q for (system, name), q in queues.items() if system == "kai"}
        self.queues = list(self.by_name.values())
        self.children: dict[str, list[ForeignQueue]] = defaultdict(list)
        for q in self.queues:
            if q.parent:
                self.children[q.parent].append(q)
        self._memo: dict[tuple[str, str], int] = {}

    def subtree(self, q: ForeignQueue, resource: str, depth: int = 0) -> int:
        """What ``q`` and its descendants deserve of ``resource``: its quota, or its children's together when
        they deserve more (KAI divides a parent's share among its children)."""
        key = (q.name, resource)
        if key in self._memo:
            return self._memo[key]
        own = _deserved(q, resource)
        kids = self.children.get(q.name, [])
        if kids and depth < 64:  # a cycle of parentQueue is refused with the cohort tree; stop here too
            own = max(own, min(UNLIMITED, sum(self.subtree(c, resource, depth + 1) for c in kids)))
        self._memo[key] = own
        return own

    def cohort_quotas(self, q: ForeignQueue, covered: list[str]) -> dict[str, Quota]:
        """A parent queue's Cohort: its own nominal quota is what it deserves beyond its children's quotas (so
        that its subtree holds its quota), its borrowing limit what its ``limit`` leaves above that."""
        out: dict[str, Quota] = {}
        for res in covered:
            total = self.subtree(q, res)
            kids = min(UNLIMITED, sum(self.subtree(c, res) for c in self.children.get(q.name, [])))
            cap = q.limit.get(res)
            out[res] = Quota(max(0, total - kids), None if cap is None else max(0, cap - total))
        return out

    def deserved(self, covered: list[str]) -> dict[str, int]:
        """What the top-level queues deserve together, per resource they name."""
        tops = [q for q in self.queues if not q.parent or q.parent not in self.by_name]
        return {res: min(UNLIMITED, sum(self.subtree(q, res) for q in tops)) for res in covered}


def size_kai_pool(m: Manifests) -> None:
    """Give the Cohort ``kai:(root)`` (the cluster KAI's top-level queues divide) the cluster's capacity beyond what
    those queues deserve, once the input's nodes are known; without nodes it stays unlimited."""
    if not m.controllers.kai_deserved or not m.nodes:
        return
    root = next((c for c in m.cohorts if c.name == KAI_COHORT and c.meta.source is None), None)
    if root is None:
        return
    capacity: dict[str, int] = defaultdict(int)
    for node in m.nodes:
        for res, amount in node.allocatable.items():
            capacity[res] += amount
    for group in root.resource_groups:
        for fq in group.flavors:
            for res, quota in fq.resources.items():
                if res in _KAI_SIZED:
                    quota.nominal = max(0, capacity.get(res, 0) - m.controllers.kai_deserved.get(res, 0))


_KAI_SIZED = frozenset({GPU, CPU, MEMORY})  # the resources a KAI Queue divides (others stay unlimited)


def _count(m: Manifests, kind: str, n: int) -> None:
    if n:
        m.controllers.translated[kind] = m.controllers.translated.get(kind, 0) + n


def kai_quota(q: ForeignQueue, resource: str) -> Quota:
    """A KAI leaf queue's quota of ``resource``: nominal its ``quota`` (a plain number: unset is 0, nothing
    deserved; -1 unlimited), borrowing up to its ``limit`` (-1: no limit; unset or 0: nothing above the quota).
    A resource the queue does not name is unlimited."""
    if resource not in q.nominal:
        return Quota(UNLIMITED)
    nominal = q.nominal[resource]
    if nominal >= UNLIMITED:
        return Quota(UNLIMITED)
    cap = q.limit.get(resource)
    return Quota(nominal, None if cap is None else max(0, cap - nominal))


def _deserved(q: ForeignQueue, resource: str) -> int:
    """What a KAI queue deserves of ``resource`` by itself: its quota only (what it may borrow is not deserved)."""
    return min(UNLIMITED, q.nominal.get(resource, 0))


def _quota(q: ForeignQueue, resource: str) -> Quota:
    """A Volcano queue's quota of ``resource``: nominal ``deserved`` (else ``capability``), borrowing up to
    ``capability``; unlimited when it names neither."""
    nominal = q.nominal.get(resource)
    limit = q.limit.get(resource)
    if nominal is None and limit is None:
        return Quota(UNLIMITED)
    if nominal is None:
        return Quota(limit or 0, 0)
    if limit is None:
        return Quota(nominal, None)
    return Quota(nominal, max(0, limit - nominal))


def _warn(problems: Problems, q: ForeignQueue, message: str, fix: str, field: str | None = None) -> None:
    src = q.meta.source
    problems.warning(message, file=src.file if src else None, line=src.line if src else None, kind="Queue",
                     name=q.name, field=field, fix=fix)
