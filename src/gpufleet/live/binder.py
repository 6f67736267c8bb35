"""Carrying out one admitted workload: POST each pod's Binding, carrying its intent; all pods or retry.

Each Binding carries the pod's intent in its ``metadata.annotations`` (device IDs, node, decision time; for a
fractional pod the GPU its container will see), which the API server writes onto the pod in the same update
that binds it: the scheduler patches no pod. For a gang, every Binding up to and including the first that
succeeds also carries the plan of the whole gang (``gpufleet.io/gang-plan``). A crash before the first
Binding leaves nothing bound and nothing written; a crash after it leaves a partial gang whose first bound
member records where every other member goes, and the next cycle completes it there
(:mod:`gpufleet.live.gangs`). The Bindings go in the job's order until one carrying the plan succeeds; the
members after it then go out together (``member_workers`` threads), as kube-scheduler binds pods, so a gang of
16 waits one round trip for them rather than fifteen.

A Binding is retried when the outcome is unknown or transient (5xx, 429, no answer), and every ambiguous
answer is settled by reading the pod back:

* 409 and the pod is bound to *our* node: an earlier attempt succeeded (its answer was lost) → done;
* 409 and bound elsewhere, or replaced by a pod of the same name (UID precondition): not ours to place →
  the next cycle sees the truth and the core re-plans;
* no answer at all: read the pod; bound to our node → done, else retry;
* out of retries after a 5xx, a 429 or no answer: read the pod once more. Bound to our node → done. Unbound
  after an answer (5xx, 429) → not bound: the pod's assumed place is given up (:attr:`BindResult.failed`).
  Unbound or unreadable after *no* answer → the Binding may still land (the server may be processing it):
  the pod stays assumed where it was going (:attr:`BindResult.uncertain`) until the cache shows it or the
  assumption times out, so its GPUs are not handed to another pod meanwhile.

Nothing is bound twice: the API server refuses a second Binding, and a pod the cache shows bound (or that is
assumed, being bound) is never handed to the binder.

A pod with DRA claims has them allocated and reserved for it *before* its Binding, as kube-scheduler's
DynamicResources PreBind does (a pod with ``spec.nodeName`` set is never allocated by anyone):
:mod:`gpufleet.live.claims` adds the delete-protection finalizer, then writes ``status.allocation`` (the planned
devices, usable on the pod's node only) and appends the pod to ``status.reservedFor``, each guarded by the
claim's resourceVersion. A claim that is missing, allocated to other devices or in use by another pod is never
written, and the pod is not bound this time: the Binding goes out only when every claim is reserved for it. A
claim found reserved for the pod with the same devices is an earlier attempt that lost its answer: done. When
the pod is then certainly not bound (the Binding refused, the pod gone), its claims are released again, as
kube-scheduler's Unreserve does, so the next cycle can allocate them anew; a Binding that may still land keeps
them, for the pod would start without them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from gpufleet.api.dra_need import ClaimResult
from gpufleet.k8s.annotations import GANG_PLAN_ANNOTATION, PlannedPod, gang_plan, intent_annotations
from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.errors import (
    ApiConnectionError,
    ApiError,
    Conflict,
    KubeError,
    NotFound,
    ServerError,
    TooManyRequests,
)
from gpufleet.k8s.resources import PODS, RESOURCE_CLAIMS
from gpufleet.live import claims as dra
from gpufleet.live.pending_since import PendingSince
from gpufleet.live.recorder import Recorder
from gpufleet.scheduler_metrics import SchedulerMetrics

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]
BindState = Literal["bound", "elsewhere", "gone", "unbound", "unknown"]


@dataclass(frozen=True, slots=True)
class ClaimWrite:
    """One DRA claim of a pod to allocate before its Binding: the results placement chose for it."""

    namespace: str
    name: str
    results: tuple[ClaimResult, ...]


@dataclass(frozen=True, slots=True)
class PodBind:
    key: str
    uid: str | None
    node: str
    devices: tuple[str, ...]
    visible: str | None  # NVIDIA_VISIBLE_DEVICES for a fractional pod
    raw: JsonDict  # the cached pod, for events
    claims: tuple[ClaimWrite, ...] = ()  # its DRA claims, allocated and reserved for it before the Binding

    @property
    def namespace(self) -> str:
        return self.key.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.key.split("/", 1)[1]


@dataclass(frozen=True, slots=True)
class BindJob:
    workload: str
    pods: tuple[PodBind, ...]


@dataclass(slots=True)
class BindResult:
    workload: str
    bound: list[str] = field(default_factory=list)
    elsewhere: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # pod -> why
    uncertain: set[str] = field(default_factory=set)  # failed pods whose Binding may still land
    api_seconds: float = 0.0  # wall time of the job
    client_cpu_seconds: float = 0.0  # CPU of this thread in it: our client's share, without the server's

    @property
    def partial(self) -> bool:
        return bool(self.bound or self.elsewhere) and bool(self.failed)


class Binder:
    def __init__(self, client: KubeClient, recorder: Recorder, metrics: SchedulerMetrics, *,
                 may_write: Callable[[], bool], retries: int = 5, backoff: float = 0.1,
                 sleep: Callable[[float], None] = time.sleep, pending: PendingSince | None = None,
                 member_workers: int = 8, cached_claim: Callable[[str, str], JsonDict | None] | None = None) -> None:
        self.client = client
        # A claim as the informer's cache holds it (namespace, name), read first instead of asking the API server:
        # every write is guarded by the resourceVersion read, so a stale copy costs a Conflict and a fresh read,
        # as kube-scheduler's allocator writes from its cache.
        self.cached_claim = cached_claim
        # Threads for a gang's members once its plan is recorded (0: one after another, on the job's thread).
        self.member_workers = member_workers
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self.pending = pending  # when each pod was first seen waiting: the pod scheduling SLI
        self.recorder = recorder
        self.metrics = metrics
        self.may_write = may_write
        self.retries = retries
        self.backoff = backoff
        self.sleep = sleep

    def run(self, job: BindJob, now: float) -> BindResult:
        started, cpu = time.perf_counter(), time.thread_time()
        result = BindResult(job.workload)
        try:
            self._run(job, now, result)
        finally:
            result.api_seconds = time.perf_counter() - started
            result.client_cpu_seconds += time.thread_time() - cpu  # with the member threads' own (_run_members)
        return result

    def _run(self, job: BindJob, now: float, result: BindResult) -> None:
        if not self.may_write():
            result.failed = {p.key: "not the leader" for p in job.pods}
            return
        plan = self._plan(job, now)
        anchored = plan is None  # until one Binding with the plan succeeds, each carries it
        for i, p in enumerate(job.pods):
            if anchored and len(job.pods) - i > 1 and self.member_workers > 0:
                # The plan is on a bound member (or there is none): the rest cannot be told apart, so their
                # Bindings go out together, as kube-scheduler binds pods, instead of one round trip after another.
                self._run_members(job.pods[i:], now, result)
                break
            state, why = self._one(p, now, None if anchored else plan)
            self._record(result, p, state, why)
            anchored = anchored or state == "bound"
        self.metrics.pods_scheduled.inc(len(result.bound))
        for key in result.bound:
            pod = next(p for p in job.pods if p.key == key)
            self.recorder.scheduled(pod.raw, pod.node)
        if result.failed:
            log.warning("workload %s: %d of %d pods not bound: %s", job.workload, len(result.failed), len(job.pods),
                        "; ".join(f"{k}: {v}" for k, v in sorted(result.failed.items())))

    def _run_members(self, pods: tuple[PodBind, ...], now: float, result: BindResult) -> None:
        pool = self._members_pool()
        futures = [pool.submit(self._member, p, now) for p in pods]
        for p, future in zip(pods, futures, strict=True):
            state, why, cpu = future.result()
            result.client_cpu_seconds += cpu  # their threads' CPU is the job's too
            self._record(result, p, state, why)

    def _member(self, p: PodBind, now: float) -> tuple[BindState, str, float]:
        cpu = time.thread_time()
        state, why = self._one(p, now, None)
        return state, why, time.thread_time() - cpu

    def _members_pool(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.member_workers, thread_name_prefix="gpufleet-gang-bind")
            return self._pool

    def close(self) -> None:
        """Stop the threads that bind a gang's members (the jobs in flight end first: see BindQueue.close)."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    @staticmethod
    def _record(result: BindResult, p: PodBind, state: BindState, why: str) -> None:
        if state == "bound":
            result.bound.append(p.key)
        elif state == "elsewhere":
            result.elsewhere.append(p.key)
        else:
            result.failed[p.key] = why
            if state == "unknown":
                result.uncertain.add(p.key)

    # --- one pod ----------------------------------------------------------------------------------------

    def _one(self, p: PodBind, now: float, plan: str | None) -> tuple[BindState, str]:
        """One pod: its claims reserved, then its Binding (carrying the gang's ``plan`` when given)."""
        if not self.may_write():
            return "unbound", "lost the leadership mid-bind"  # never sent: certainly not bound
        # Every Binding records where and when it was sent (not only a GPU pod's or a gang member's): a rebuild reads
        # waitForPodsReady's clock off it, as the cycle that sent it does (a pod without a GPU used to time out from
        # its creation in a rebuild, from its bind when carried on: found by a review).
        notes = intent_annotations(p.node, p.devices, now, p.visible)
        if plan is not None:
            notes[GANG_PLAN_ANNOTATION] = plan
        added: set[str] = set()  # the claims this attempt put the finalizer on
        claimed = self._reserve_claims(p, added)
        state, why = claimed if claimed is not None else self._bind(p, notes)
        if p.claims and state in ("unbound", "gone"):
            self._unreserve_claims(p, added, why)
        self._settle_sli(p, state)
        return state, why

    def _settle_sli(self, p: PodBind, state: BindState) -> None:
        """The pod scheduling SLI's end: bound (answered, or found bound on reading back) is observed; a pod still
        unbound keeps waiting (a later Binding ends it); elsewhere, gone or unknown leaves the table."""
        if self.pending is None or state == "unbound":
            return
        if state == "bound":
            if (waited := self.pending.bound(p.key, p.uid)) is not None:
                self.metrics.pod_scheduling_sli.labels("bound").observe(waited)
        else:
            self.pending.forget(p.key)

    @staticmethod
    def _plan(job: BindJob, now: float) -> str | None:
        if len(job.pods) < 2:
            return None
        plan = gang_plan([PlannedPod(p.name, p.uid, p.node, p.devices) for p in job.pods], now)
        if plan is None:
            log.warning("workload %s: the plan of its %d pods is too large to record on a pod; if this scheduler "
                        "stops mid-bind, the partial gang is evicted and planned again instead of completed",
                        job.workload, len(job.pods))
        return plan

    def _bind(self, p: PodBind, annotations: dict[str, str]) -> tuple[BindState, str]:
        """The pod's state after the Binding: bound, elsewhere, gone, unbound (certainly not bound by us) or
        unknown (our Binding may still land)."""
        last = ""
        answered = True  # the last attempt got an answer (an error status), not silence
        for attempt in range(self.retries + 1):
            if attempt and not self.may_write():
                return ("unbound" if answered else "unknown"), "lost the leadership mid-bind"
            try:
                if self.pending is not None and (waited := self.pending.sent(p.key, p.uid)) is not None:
                    self.metrics.pod_scheduling_sli.labels("binding_sent").observe(waited)
                # Fixed values: a retry of an unknown outcome writes the same annotations or meets a 409.
                self.client.bind(p.namespace, p.name, p.node, pod_uid=p.uid, annotations=annotations)
                return "bound", ""
            except Conflict as e:
                self.metrics.bind_errors.labels("409").inc()
                answered = True
                state = self._read_back(p)
                if state in ("bound", "elsewhere", "gone"):
                    return state, f"conflict: {e}"
                last = f"conflict: {e}"  # still unbound (or unreadable): try again
            except NotFound:
                return "gone", "the pod was deleted"
            except (ServerError, TooManyRequests) as e:
                self.metrics.bind_errors.labels(str(e.status)).inc()
                answered = e.status != 504  # a gateway timeout is silence from the server that stores it
                last = str(e)
                if attempt < self.retries:
                    self.sleep(self._delay(attempt, e))  # a 429's Retry-After, else the backoff
                continue
            except ApiConnectionError as e:
                self.metrics.bind_errors.labels("0").inc()
                answered = False
                last = str(e)
                state = self._read_back(p)  # did the Binding land before the connection broke?
                if state in ("bound", "elsewhere", "gone"):
                    return state, last
            except ApiError as e:
                self.metrics.bind_errors.labels(str(e.status)).inc()
                return "unbound", f"binding refused: {e}"  # refused outright: nothing changed
            except KubeError as e:
                return "unknown", f"binding failed: {e}"
            if attempt < self.retries:
                self.sleep(self._delay(attempt, None))
        why = f"binding failed after {self.retries + 1} attempts: {last}"
        state = self._read_back(p)  # the truth, as far as the server knows it now
        if state in ("bound", "elsewhere", "gone"):
            return state, why
        return ("unbound" if answered and state == "unbound" else "unknown"), why

    # --- its DRA claims (kube-scheduler's PreBind and Unreserve) ----------------------------------------------

    def _reserve_claims(self, p: PodBind, added: set[str]) -> tuple[BindState, str] | None:
        """Allocate and reserve each of the pod's claims for it; None when all are, else the pod's state
        ("unbound": its Binding is never sent) and why. ``added`` collects the claims (``namespace/name``) whose
        finalizer this call wrote, so that releasing them may take it off again."""
        if p.claims and not p.uid:
            return "unbound", "a pod without a uid cannot be named in a claim's reservedFor"
        for claim in p.claims:
            refused = self._reserve_claim(p, claim, added)
            if refused is not None:
                return refused
        return None

    def _reserve_claim(self, p: PodBind, claim: ClaimWrite, added: set[str]) -> tuple[BindState, str] | None:
        assert p.uid is not None
        key = f"{claim.namespace}/{claim.name}"
        last = ""
        error: KubeError | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                if not self.may_write():
                    return "unbound", "lost the leadership mid-bind"
                self.sleep(self._delay(attempt - 1, error))
            try:
                # Read it anew each attempt: a Conflict means someone wrote it meanwhile, and an unanswered write
                # may have landed; judging the fresh claim settles both. The first attempt reads the cache's.
                cached = self.cached_claim(claim.namespace, claim.name) if not attempt and self.cached_claim else None
                current = cached if cached is not None else self.client.get(RESOURCE_CLAIMS, claim.name,
                                                                            claim.namespace)
                verdict, why = dra.judge(current, claim.results, p.uid)
                if cached is not None and verdict != "write":
                    # Only a write is guarded by the version read: "reserved" or "refused" from a copy that may lag
                    # (a release by our own Unreserve not seen yet) is confirmed by the server's (a review found a
                    # pod bound on a stale "reserved", its claim unallocated).
                    current = self.client.get(RESOURCE_CLAIMS, claim.name, claim.namespace)
                    verdict, why = dra.judge(current, claim.results, p.uid)
                if verdict == "reserved":
                    return None
                if verdict == "refused":
                    return "unbound", f"claim {key} {why}"
                if dra.FINALIZER not in ((current.get("metadata") or {}).get("finalizers") or []):
                    # First, so that the claim cannot be deleted while allocated: the API server keeps a claim with
                    # this finalizer until the allocation is cleared and the finalizer taken off.
                    current = self.client.replace(RESOURCE_CLAIMS, dra.with_finalizer(current), claim.namespace)
                    added.add(key)
                self.client.update_status(RESOURCE_CLAIMS, dra.reserved(current, claim.results, p.node, p.name, p.uid),
                                          claim.namespace)
                return None
            except NotFound:
                return "unbound", f"claim {key} does not exist (yet)"
            except Conflict as e:
                error, last = e, f"conflict: {e}"
            except (ServerError, TooManyRequests, ApiConnectionError) as e:
                error, last = e, str(e)  # transient, or no answer: the next read tells whether the write landed
            except ApiError as e:
                return "unbound", f"claim {key} refused: {e}"  # 403, 422...: nothing written by this request
            except KubeError as e:
                return "unbound", f"claim {key}: {e}"
        return "unbound", f"claim {key} not reserved after {self.retries + 1} attempts: {last}"

    def _unreserve_claims(self, p: PodBind, added: set[str], why: str) -> None:
        """Release the pod's claims (kube-scheduler's Unreserve) once it is certainly not bound: the pod out of
        ``reservedFor``, the allocation cleared when no consumer is left. Not after losing the leadership: the
        new leader may have reserved the same claims for the same pod and bound it."""
        if not p.uid or not self.may_write():
            return
        dra.release_all(self.client, [f"{c.namespace}/{c.name}" for c in p.claims], p.uid,
                        why=f"pod {p.key} not bound ({why})", drop_finalizer=added, attempts=self.retries + 1,
                        backoff=self.backoff, sleep=self.sleep)

    def _read_back(self, p: PodBind) -> BindState:
        try:
            pod = self.client.get(PODS, p.name, p.namespace)
        except NotFound:
            return "gone"
        except KubeError:
            return "unknown"
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        if p.uid and meta.get("uid") and meta.get("uid") != p.uid:
            return "gone"
        node = spec.get("nodeName")
        if not node:
            return "unbound"
        return "bound" if node == p.node else "elsewhere"

    def _delay(self, attempt: int, error: KubeError | None) -> float:
        if isinstance(error, TooManyRequests) and error.retry_after:
            return min(error.retry_after, 5.0)
        return float(self.backoff * 2**attempt)
