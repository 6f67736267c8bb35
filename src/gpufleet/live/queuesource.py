"""Whose queue objects the live scheduler reads: Kueue's own (``kueue.x-k8s.io/v1beta1``) or gpufleet's
(``gpufleet.io/v1alpha1``), per the ``queues.source`` setting.

* ``gpufleet``: gpufleet.io's queue kinds, as always.
* ``kueue``: Kueue's. The cluster must serve ``kueue.x-k8s.io/v1beta1`` ClusterQueues, or the scheduler does
  not start (saying so).
* ``auto`` (the default): whatever of the two the cluster serves and the scheduler may list is watched; each
  cycle reads Kueue's objects when at least one Kueue ClusterQueue exists, else gpufleet's. A Kueue user thus
  needs to copy nothing, a gpufleet user without Kueue changes nothing, and installing Kueue's queues later
  switches over without a restart (said once in the log).

Beside Kueue (``besideKueue.enabled``), Kueue's Workloads and AdmissionChecks are watched too.

The choice of informers is made once, at start: what the cluster serves then. A CRD installed later is seen
after a restart (the log says which queue API was found).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.k8s import resources as r
from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.discovery import Discovery, can_list
from gpufleet.k8s.errors import ConfigError
from gpufleet.k8s.informer import CacheSnapshot
from gpufleet.k8s.resources import ResourceType
from gpufleet.live.settings import SchedulerSettings

log = logging.getLogger(__name__)

BASE_RESOURCES: tuple[ResourceType, ...] = (r.NODES, r.PODS, r.PRIORITY_CLASSES, r.NAMESPACES)
BESIDE_KUEUE_RESOURCES: tuple[ResourceType, ...] = (r.KUEUE_WORKLOADS, r.KUEUE_ADMISSION_CHECKS)


@dataclass(frozen=True, slots=True)
class QueueKinds:
    """One source's queue kinds: what a cycle parses, and where queue statuses are written."""

    source: str  # "kueue" or "gpufleet"
    resources: tuple[ResourceType, ...]  # flavors, cluster queues, local queues, cohorts, priority classes

    @property
    def cluster_queues(self) -> ResourceType:
        return self.resources[1]

    @property
    def local_queues(self) -> ResourceType:
        return self.resources[2]


GPUFLEET = QueueKinds("gpufleet", r.GPUFLEET_QUEUE_RESOURCES)
KUEUE = QueueKinds("kueue", r.KUEUE_QUEUE_RESOURCES)


def _served(discovery: Discovery, client: KubeClient, kinds: QueueKinds) -> tuple[ResourceType, ...]:
    """The kinds of ``kinds`` the cluster serves and we may list; () when its ClusterQueues are not served."""
    if not discovery.serves(kinds.cluster_queues):
        return ()
    if not can_list(client, kinds.cluster_queues):
        log.warning("%s ClusterQueues are served but this scheduler may not list them (RBAC): they are not read",
                    kinds.cluster_queues.group)
        return ()
    # Cohort and WorkloadPriorityClass came later to Kueue's API than the rest: watched where they exist.
    return tuple(res for res in kinds.resources if discovery.serves(res))


def scheduler_resources(client: KubeClient, settings: SchedulerSettings) -> tuple[ResourceType, ...]:
    """Every type the scheduler's informers watch, for ``settings`` on this cluster. Raises
    :class:`~gpufleet.k8s.errors.ConfigError` when what the settings need is not served."""
    source = settings.queues.source
    beside = settings.beside_kueue.enabled
    if source == "gpufleet":
        return (*BASE_RESOURCES, *r.GPUFLEET_QUEUE_RESOURCES)
    discovery = Discovery(client)
    kueue = _served(discovery, client, KUEUE)
    if (source == "kueue" or beside) and not kueue:
        raise ConfigError(
            f"queues.source {source}{' with besideKueue' if beside else ''} needs Kueue's kueue.x-k8s.io/v1beta1 "
            "ClusterQueues, which this cluster does not serve or this scheduler may not list: install Kueue's CRDs "
            "and deploy/kueue/ (RBAC), or set queues.source: gpufleet")
    if beside:
        missing = [res.kind for res in BESIDE_KUEUE_RESOURCES if not discovery.serves(res)]
        if missing:
            raise ConfigError(f"besideKueue needs Kueue's {', '.join(missing)} (kueue.x-k8s.io/v1beta1), which this "
                              "cluster does not serve: install Kueue")
        log.info("beside Kueue: Kueue admits, gpufleet places; watching Kueue's queues, Workloads and AdmissionChecks")
        return (*BASE_RESOURCES, *kueue, *BESIDE_KUEUE_RESOURCES)
    if source == "kueue":
        log.info("queues: reading Kueue's objects (kueue.x-k8s.io/v1beta1)")
        return (*BASE_RESOURCES, *kueue)
    ours = _served(discovery, client, GPUFLEET)
    if not kueue and not ours:
        raise ConfigError("queues.source auto: this cluster serves neither Kueue's ClusterQueues "
                          "(kueue.x-k8s.io/v1beta1) nor gpufleet's (gpufleet.io/v1alpha1) that this scheduler may "
                          "list: kubectl apply -f deploy/crds/, or install Kueue and deploy/kueue/")
    log.info("queues: auto; found %s", " and ".join(
        name for name, found in (("Kueue's (kueue.x-k8s.io)", kueue), ("gpufleet's (gpufleet.io)", ours)) if found))
    return (*BASE_RESOURCES, *ours, *kueue)


class QueueChooser:
    """Which source's queue kinds a cycle reads, from what the informers watch (module doc)."""

    def __init__(self, watched: Sequence[ResourceType]) -> None:
        keys = {res.key for res in watched}
        self.kueue = KUEUE.cluster_queues.key in keys
        self.gpufleet = GPUFLEET.cluster_queues.key in keys
        self._last: str | None = None

    def kinds(self, snapshot: CacheSnapshot) -> QueueKinds:
        chosen = GPUFLEET
        if self.kueue and (not self.gpufleet or snapshot.of(KUEUE.cluster_queues)):
            chosen = KUEUE
        if chosen.source != self._last:
            if self._last is not None or (self.kueue and self.gpufleet):
                log.info("queues: reading %s ClusterQueues and LocalQueues", chosen.cluster_queues.group)
            if chosen is KUEUE and self.gpufleet and snapshot.of(GPUFLEET.cluster_queues):
                log.warning("both Kueue's and gpufleet's ClusterQueues exist: Kueue's are read, gpufleet.io's are "
                            "ignored (set queues.source: gpufleet to read them instead)")
            self._last = chosen.source
        return chosen
