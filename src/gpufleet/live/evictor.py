"""Preemption through the Eviction API, so PodDisruptionBudgets are honoured.

A victim workload (a pod, or every pod of a gang) is first evicted in *dry run*: the API server runs the
same PodDisruptionBudget check without deleting anything. If any pod is refused (429), none is evicted:
half of a gang evicted would waste the other half. The workload is then *shielded* for a while (the
server's Retry-After, else a configured backoff), which takes it out of the preemption candidates of the
next cycles (:mod:`gpufleet.scheduling.kueue.shields`), so the preemptor picks other victims.

Pods already terminating are not evicted again; their resources stay charged until they are gone, as
kube-scheduler counts terminating pods.

An evicted pod's DRA claims are released (the pod out of ``reservedFor``, the allocation cleared when no consumer
is left: :func:`gpufleet.live.claims.release`) only when the pod is gone or finished. A pod that is still
terminating runs on its devices until its grace period ends, and a claim released then would hand them to the
preemptor while still in use; its claims are left to kube-controller-manager's resourceclaim controller, which
releases them once the pod is gone, as it does for every pod.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.errors import KubeError, NotFound, TooManyRequests
from gpufleet.k8s.resources import PODS
from gpufleet.live.claims import pod_claim_names, release_all
from gpufleet.live.recorder import Recorder
from gpufleet.live.world import TERMINAL_PHASES
from gpufleet.scheduler_metrics import SchedulerMetrics

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]
Outcome = Literal["evicted", "refused", "failed"]


@dataclass(frozen=True, slots=True)
class Victim:
    workload: str
    preemptor: str
    reason: str
    pods: tuple[JsonDict, ...]  # cached pods of the workload
    message: str = ""


@dataclass(frozen=True, slots=True)
class EvictResult:
    workload: str
    outcome: Outcome
    retry_after: float | None = None
    message: str = ""
    api_seconds: float = 0.0


def _name(pod: JsonDict) -> tuple[str, str, str | None]:
    meta = pod.get("metadata") or {}
    return str(meta.get("namespace")), str(meta.get("name")), meta.get("uid")


class Evictor:
    def __init__(self, client: KubeClient, recorder: Recorder, metrics: SchedulerMetrics, *,
                 may_write: Callable[[], bool]) -> None:
        self.client = client
        self.recorder = recorder
        self.metrics = metrics
        self.may_write = may_write

    def evict(self, victim: Victim) -> EvictResult:
        started = time.perf_counter()
        outcome, retry_after, message = self._evict(victim)
        if outcome == "evicted" and victim.preemptor:
            self.metrics.preemptions.labels(victim.reason).inc()
        elif outcome == "refused":
            self.metrics.eviction_refusals.inc()
        return EvictResult(victim.workload, outcome, retry_after, message, time.perf_counter() - started)

    def _evict(self, victim: Victim) -> tuple[Outcome, float | None, str]:
        if not self.may_write():
            return "failed", None, "not the leader"
        live = [p for p in victim.pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
        for dry_run in (True, False):
            for pod in live:
                ns, name, uid = _name(pod)
                try:
                    self.client.evict(ns, name, pod_uid=uid, dry_run=dry_run)
                except NotFound:
                    if not dry_run:
                        self._release_claims(pod)
                    continue  # already gone
                except TooManyRequests as e:
                    log.info("eviction of %s/%s (workload %s) refused: %s", ns, name, victim.workload, e)
                    return "refused", e.retry_after, str(e)
                except KubeError as e:
                    log.warning("eviction of %s/%s (workload %s) failed: %s", ns, name, victim.workload, e)
                    return "failed", None, str(e)
                if not dry_run:
                    self.recorder.preempted(pod, victim.preemptor, victim.reason, victim.message)
                    self._release_claims(pod)
        return "evicted", None, ""

    def _release_claims(self, pod: JsonDict) -> None:
        """Release the claims reserved for an evicted pod, if it is gone already (see the module's docstring)."""
        names = pod_claim_names(pod)
        ns, name, uid = _name(pod)
        if not names or not uid:
            return
        if not self._gone(ns, name, uid):
            log.debug("pod %s/%s is still terminating: its claims %s are released once it is gone", ns, name, names)
            return
        release_all(self.client, [f"{ns}/{claim}" for claim in names], uid, why=f"evicted pod {ns}/{name}")

    def _gone(self, ns: str, name: str, uid: str) -> bool:
        """The pod no longer runs: deleted, replaced by another of its name, finished, or deleted before it was
        ever bound (the resourceclaim controller's test). Unreadable counts as running: releasing is not urgent,
        releasing too early hands out devices in use."""
        try:
            pod = self.client.get(PODS, name, ns)
        except NotFound:
            return True
        except KubeError as e:
            log.info("pod %s/%s not read after its eviction (%s): its claims are left to the resourceclaim "
                     "controller", ns, name, e)
            return False
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        return (meta.get("uid") != uid or status.get("phase") in TERMINAL_PHASES
                or bool(meta.get("deletionTimestamp") and not spec.get("nodeName")))
