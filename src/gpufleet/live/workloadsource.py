"""Which workload kinds the live scheduler watches, so that it groups its pods by their owners as ``plan`` does.

The kinds are the table's (:func:`gpufleet.api.workloadkinds.table.api_resources`: Jobs, CronJobs, Deployments,
StatefulSets, ReplicaSets, JobSets, Kubeflow's jobs and TrainJobs, Ray's, LeaderWorkerSets, Volcano's and KAI's
kinds) and those they refer to (Volcano's and KAI's Queues, Kubeflow's training runtimes, Kueue's AdmissionChecks).
Each is watched where the cluster serves it, in the first version gpufleet reads that the server serves, and only
when this scheduler may list it: a cluster without JobSet's CRD, or an RBAC that leaves Ray out, still schedules;
pods whose owner is not watched are grouped as before (single pods, Kueue pod groups). Like the queue kinds
(:mod:`gpufleet.live.queuesource`), the choice is made once, at start.

Of the kinds with pod templates, a cycle reads only the objects whose templates name this scheduler
(:meth:`gpufleet.k8s.parsing.ParseCache.ours`): every Deployment and ReplicaSet of the cluster is watched, but
parsing the ones whose pods another scheduler places would cost every cycle and decide nothing. A pod given our
``schedulerName`` by a mutating webhook while its owner's template names another scheduler is therefore read as
a pod of its own.
"""

from __future__ import annotations

import logging

from gpufleet.api.dra_objects import DRA_VERSIONS
from gpufleet.api.workloadkinds.table import versions_of
from gpufleet.k8s import resources as r
from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.discovery import Discovery, can_list
from gpufleet.k8s.resources import ResourceType
from gpufleet.live.queuesource import scheduler_resources
from gpufleet.live.settings import SchedulerSettings

log = logging.getLogger(__name__)

# Resource key -> the table's type: what a snapshot's objects of a workload kind are (the key holds no version).
WORKLOAD_KEYS: dict[str, ResourceType] = {res.key: res for res in r.WORKLOAD_RESOURCES}


def workload_resources(client: KubeClient, discovery: Discovery | None = None) -> tuple[ResourceType, ...]:
    """The workload kinds (and the kinds they refer to) this cluster serves and this scheduler may list."""
    discovery = discovery or Discovery(client)
    found: list[ResourceType] = []
    absent: list[str] = []
    forbidden: list[str] = []
    for res in r.WORKLOAD_RESOURCES:
        served = discovery.find(res.group, res.kind, versions_of(res.group, res.kind) or (res.version,))
        if served is None:
            absent.append(res.kind)
        elif not can_list(client, served):
            forbidden.append(f"{served.kind} ({served.group})")
        else:
            found.append(served)
    if forbidden:
        log.warning("served but not listable by this scheduler (RBAC): %s; their pods are grouped as single pods "
                    "and pod groups, not as their owners' workloads (grant get/list/watch: deploy/rbac.yaml)",
                    ", ".join(forbidden))
    log.info("workload kinds watched: %s", ", ".join(f"{res.kind} ({res.api_version})" for res in found) or "none",
             extra={"not_served": sorted(set(absent))})
    return tuple(found)


def dra_resources(client: KubeClient, discovery: Discovery | None = None) -> tuple[ResourceType, ...]:
    """The DRA kinds (ResourceSlice, DeviceClass, ResourceClaim, ResourceClaimTemplate) at the version this cluster
    serves, when it serves all four and this scheduler may list them; none otherwise (claiming pods then wait, said)."""
    discovery = discovery or Discovery(client)
    found: list[ResourceType] = []
    for res in r.DRA_RESOURCES:
        served = discovery.find(res.group, res.kind, DRA_VERSIONS)
        if served is None:
            log.info("DRA not served (no %s in resource.k8s.io): pods with resource claims wait", res.kind)
            return ()
        if not can_list(client, served):
            log.warning("DRA served but %s not listable by this scheduler (RBAC): pods with resource claims wait "
                        "(grant get/list/watch: deploy/rbac.yaml)", served.kind)
            return ()
        found.append(served)
    return tuple(found)


def watched_resources(client: KubeClient, settings: SchedulerSettings) -> tuple[ResourceType, ...]:
    """Everything the scheduler's informers watch: the queue kinds of ``queues.source``
    (:func:`~gpufleet.live.queuesource.scheduler_resources`), the workload kinds and the DRA kinds, each type
    once."""
    base = scheduler_resources(client, settings)
    keys = {res.key for res in base}
    more = [res for res in (*workload_resources(client), *dra_resources(client)) if res.key not in keys]
    return (*base, *more)


