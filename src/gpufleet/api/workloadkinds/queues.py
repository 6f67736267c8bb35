"""Volcano and KAI Queues read as Kueue's objects, so that the workloads naming them are admitted against them by
the same admission every other workload goes through.

Each queue becomes a ClusterQueue named ``volcano:<queue>`` or ``kai:<queue>`` (the prefix keeps it apart from
Kueue's own queues of the same name) with one flavor, ``gpufleet-any-node`` (no node labels), covering every
resource the input requests (unlimited where the queue names no quota); every namespace that sends work to it
gets a LocalQueue of the same name.

* Volcano: nominal quota ``deserved`` (else ``capability``), borrowing up to ``capability`` from the other Volcano
  queues (cohort ``volcano``); a resource neither names is unlimited, as in Volcano. The queue ``default``, which
  Volcano creates itself, is unlimited when the input does not define it.
* KAI: nominal quota ``quota``, borrowing up to ``limit``; ``parentQueue`` becomes the cohort tree, a parent's
  quota the pool its children borrow from (a Kueue Cohort with that quota). Only leaf queues take work, as in KAI.

Both reclaim what they lend (Kueue's ``reclaimWithinCohort: Any``). Their fair-share plugins (Volcano's proportion
and capacity, KAI's over-quota weights) divide idle capacity differently from Kueue's borrowing: said once per run.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from gpufleet.api.errors import Problems
from gpufleet.api.objects import (
    GPU,
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
)
from gpufleet.api.workloadkinds.common import queue_label
from gpufleet.api.workloadkinds.model import ForeignQueue, QueueSystem
from gpufleet.api.workloadkinds.volcano import DEFAULT_QUEUE
from gpufleet.gpu.constants import FRACTION_RESOURCE

if TYPE_CHECKING:
    from gpufleet.api.manifests import Manifests

ANY_NODE_FLAVOR = "gpufleet-any-node"
UNLIMITED = 10**15  # in canonical units: far above any cluster (a petabyte, a trillion cores)
VOLCANO_COHORT = "volcano"


def translate_queues(m: Manifests) -> None:
    """Add the ClusterQueues, Cohorts, LocalQueues and flavor that the input's Volcano and KAI queues stand for."""
    wanted: dict[tuple[QueueSystem, str], set[str]] = defaultdict(set)  # queue -> namespaces sending work
    # Every resource the input requests: a queue covers them all (unlimited where it names no quota), so that a
    # workload is never refused for a resource its Volcano or KAI queue does not limit.
    requested: set[str] = set()
    for owner in m.controllers.owners:
        for plan in owner.workloads:
            for ps in plan.pod_sets:
                requested.update(ps.template.requests)
        key = _foreign(owner.queue)
        if key is not None:
            wanted[key].add(owner.namespace)
    for pod in m.pods:
        requested.update(pod.template.requests)
        label, label_system = queue_label(pod.meta.labels)
        if label is not None and label_system != "kueue":
            wanted[(label_system, label)].add(pod.meta.namespace or "default")
    queues = {(q.system, q.name): q for q in m.controllers.queues}
    if not wanted and not queues:
        return
    problems = m.problems
    if ("volcano", DEFAULT_QUEUE) in wanted and ("volcano", DEFAULT_QUEUE) not in queues:
        queues[("volcano", DEFAULT_QUEUE)] = ForeignQueue(ObjectMeta(DEFAULT_QUEUE), "volcano", {}, {})
    parents = {(q.system, q.parent) for q in queues.values() if q.parent}
    before = (len(m.cluster_queues), len(m.local_queues), len(m.cohorts))
    added: list[str] = []
    for (system, name), q in sorted(queues.items()):
        covered = sorted((requested | set(q.nominal) | set(q.limit) | {GPU}) - {FRACTION_RESOURCE})
        quotas = {res: _quota(q, res) for res in covered}
        if (system, name) in parents:  # a KAI parent queue: its quota is what its children borrow from
            m.cohorts.append(Cohort(ObjectMeta(f"{system}:{name}", source=q.meta.source),
                                    f"{system}:{q.parent}" if q.parent else None,
                                    [ResourceGroup(tuple(covered), [FlavorQuotas(ANY_NODE_FLAVOR, quotas)])]))
            continue
        cohort = f"kai:{q.parent}" if system == "kai" and q.parent else (
            VOLCANO_COHORT if system == "volcano" else None)
        m.cluster_queues.append(ClusterQueue(
            meta=ObjectMeta(f"{system}:{name}", source=q.meta.source, order=q.meta.order),
            resource_groups=[ResourceGroup(tuple(covered), [FlavorQuotas(ANY_NODE_FLAVOR, quotas)])],
            cohort=cohort, namespace_selector=LabelSelector(),
            preemption=PreemptionPolicy(reclaim_within_cohort="Any" if cohort else "Never")))
        added.append(f"{'Volcano' if system == 'volcano' else 'KAI'} Queue {name}")
    # Every namespace of the input may send work to every queue (the live scheduler parses queues apart from pods).
    known_namespaces = {ns.meta.name for ns in m.namespaces}
    for key in queues:
        if key not in parents and known_namespaces:
            wanted[key] |= known_namespaces
    for (system, name), namespaces in sorted(wanted.items()):
        if (system, name) in parents:
            _warn(problems, queues[(system, name)], f"KAI Queue {name} has child queues; only leaf queues take "
                  "work, so the workloads naming it stay pending", "name a leaf queue")
            continue
        if (system, name) not in queues:
            problems.warning(f"{'Volcano' if system == 'volcano' else 'KAI'} Queue {name} is named by workloads in "
                             f"{', '.join(sorted(namespaces))} but is not in the input; they stay pending",
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
        problems.warning(
            f"read as Kueue ClusterQueues (see README, 'The manifests gpufleet reads'): {', '.join(added)}; Volcano's "
            "and KAI's fair sharing of idle capacity differs from Kueue's borrowing, which gpufleet applies",
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


def _count(m: Manifests, kind: str, n: int) -> None:
    if n:
        m.controllers.translated[kind] = m.controllers.translated.get(kind, 0) + n


def _quota(q: ForeignQueue, resource: str) -> Quota:
    nominal = q.nominal.get(resource)
    limit = q.limit.get(resource)
    if nominal is None and limit is None:
        return Quota(UNLIMITED)
    if nominal is None:
        return Quota(limit or 0, 0)
    if limit is None:
        return Quota(nominal, None)
    return Quota(nominal, max(0, limit - nominal))


def _warn(problems: Problems, q: ForeignQueue, message: str, fix: str) -> None:
    src = q.meta.source
    problems.warning(message, file=src.file if src else None, line=src.line if src else None, kind="Queue",
                     name=q.name, fix=fix)
