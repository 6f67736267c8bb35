"""Carrying out one admitted workload: POST each pod's Binding, carrying its intent; all pods or retry.

Each Binding carries the pod's intent in its ``metadata.annotations`` (device IDs, node, decision time; for a
fractional pod the GPU its container will see), which the API server writes onto the pod in the same update
that binds it: the scheduler patches no pod. For a gang, every Binding up to and including the first that
succeeds also carries the plan of the whole gang (``gpufleet.io/gang-plan``). A crash before the first
Binding leaves nothing bound and nothing written; a crash after it leaves a partial gang whose first bound
member records where every other member goes, and the next cycle completes it there
(:mod:`gpufleet.kube.gangs`). The order of the Bindings is the job's order.

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
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from gpufleet.kube.annotations import GANG_PLAN_ANNOTATION, PlannedPod, gang_plan, intent_annotations
from gpufleet.kube.client import KubeClient
from gpufleet.kube.errors import (
    ApiConnectionError,
    ApiError,
    Conflict,
    KubeError,
    NotFound,
    ServerError,
    TooManyRequests,
)
from gpufleet.kube.recorder import Recorder
from gpufleet.kube.resources import PODS
from gpufleet.scheduler_metrics import SchedulerMetrics

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]
BindState = Literal["bound", "elsewhere", "gone", "unbound", "unknown"]


@dataclass(frozen=True, slots=True)
class PodBind:
    key: str
    uid: str | None
    node: str
    devices: tuple[str, ...]
    visible: str | None  # NVIDIA_VISIBLE_DEVICES for a fractional pod
    annotate: bool  # the Binding carries the intent annotations (GPU pods and gang members)
    raw: JsonDict  # the cached pod, for events

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
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.client = client
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
            result.client_cpu_seconds = time.thread_time() - cpu
        return result

    def _run(self, job: BindJob, now: float, result: BindResult) -> None:
        if not self.may_write():
            result.failed = {p.key: "not the leader" for p in job.pods}
            return
        plan = self._plan(job, now)
        anchored = plan is None  # until one Binding with the plan succeeds, each carries it
        for p in job.pods:
            if not self.may_write():
                result.failed[p.key] = "lost the leadership mid-bind"  # never sent: certainly not bound
                continue
            notes = intent_annotations(p.node, p.devices, now, p.visible) if p.annotate else {}
            if not anchored:
                assert plan is not None
                notes[GANG_PLAN_ANNOTATION] = plan
            state, why = self._bind(p, notes)
            if state == "bound":
                result.bound.append(p.key)
                anchored = True
            elif state == "elsewhere":
                result.elsewhere.append(p.key)
            else:
                result.failed[p.key] = why
                if state == "unknown":
                    result.uncertain.add(p.key)
        self.metrics.pods_scheduled.inc(len(result.bound))
        for key in result.bound:
            pod = next(p for p in job.pods if p.key == key)
            self.recorder.scheduled(pod.raw, pod.node)
        if result.failed:
            log.warning("workload %s: %d of %d pods not bound: %s", job.workload, len(result.failed), len(job.pods),
                        "; ".join(f"{k}: {v}" for k, v in sorted(result.failed.items())))

    # --- one pod ----------------------------------------------------------------------------------------

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
