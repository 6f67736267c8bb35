"""Bindings carried out while scheduling goes on: kube-scheduler's binding cycles.

kube-scheduler's scheduling cycle is serial and its binding cycles concurrent: a pod assumed on its node is
handed to a goroutine that binds it, and the next pod is scheduled at once. Here a cycle hands each admitted
workload's job (one pod, or a gang's pods in order, gpufleet.live.binder) to ``binding.workers`` threads and
returns without waiting for any of them; unrelated pods never wait on each other, and the next cycle may run
while they are bound, because every pod handed over is assumed where it is going (gpufleet.live.assumed) and
the next cycle counts it there.

When a job ends its outcome is *settled*:

* bound pods stay assumed until the cache shows them bound;
* pods certainly not bound are forgotten, so their capacity is free again, and the loop is woken to use it;
* pods whose Binding may still land (no answer) stay assumed for another assume timeout from now, so their
  GPUs are not handed out twice; so do the pods of a job that raised (a bug: what it did is unknown);
* the cycle's report gets the outcome, and when all the cycle's jobs have ended, the callbacks registered
  with :meth:`BindQueue.after` run and one log line sums the cycle's binds up.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from gpufleet.live.assumed import AssumedPods
from gpufleet.live.binder import Binder, BindJob, BindResult
from gpufleet.scheduler_metrics import SchedulerMetrics

log = logging.getLogger(__name__)


class BindReport(Protocol):
    """The part of a cycle's report that its binds fill in (gpufleet.live.cycle.CycleReport)."""

    number: int
    bound: list[str]
    bind_failed: dict[str, str]
    bind_cpu_s: float


@dataclass(slots=True)
class _Cycle:
    report: BindReport
    jobs: int
    pods: int
    bound: int = 0
    failed: int = 0
    then: list[Callable[[], None]] = field(default_factory=list)


class BindQueue:
    def __init__(self, binder: Binder, assumed: AssumedPods, *, workers: int, metrics: SchedulerMetrics,
                 on_release: Callable[[], None] = lambda: None, clock: Callable[[], float] = time.time) -> None:
        self.binder = binder
        self.assumed = assumed
        self.metrics = metrics
        self.on_release = on_release
        self.clock = clock
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="gpufleet-bind")
        self._lock = threading.Condition()
        self._cycles: dict[int, _Cycle] = {}
        self._in_flight = 0  # pods

    def submit(self, report: BindReport, jobs: list[BindJob], now: float) -> None:
        """Start binding ``jobs`` (their pods assumed already); returns at once."""
        if not jobs:
            return
        pods = sum(len(j.pods) for j in jobs)
        with self._lock:
            # A cycle may hand over jobs more than once (its round's early ones, gpufleet.live.bindstream).
            cycle = self._cycles.get(report.number)
            if cycle is not None and cycle.report is report:
                cycle.jobs += len(jobs)
                cycle.pods += pods
            else:
                self._cycles[report.number] = _Cycle(report, len(jobs), pods)
            self._in_flight += pods
        self.metrics.binds_in_flight.inc(pods)
        for job in jobs:
            future = self._pool.submit(self.binder.run, job, now)
            future.add_done_callback(functools.partial(self._settle, report, job))

    def after(self, report: BindReport, then: Callable[[], None]) -> None:
        """Run ``then`` once every bind job of ``report``'s cycle has ended (now, if none is left)."""
        with self._lock:
            cycle = self._cycles.get(report.number)
            if cycle is not None and cycle.report is report:
                cycle.then.append(then)
                return
        then()

    def in_flight(self) -> int:
        """Pods whose bind job has not ended."""
        with self._lock:
            return self._in_flight

    def drain(self, timeout: float) -> bool:
        """Wait until no bind job runs and every ended job is settled (its cycle's callbacks run); False if
        ``timeout`` passed first."""
        with self._lock:
            return self._lock.wait_for(lambda: self._in_flight == 0, timeout)

    def close(self) -> None:
        """Finish the jobs handed over (every gang to its end), then stop the workers."""
        self._pool.shutdown(wait=True)

    # --- settling ------------------------------------------------------------------------------------------

    def _settle(self, report: BindReport, job: BindJob, future: Future[BindResult]) -> None:
        try:
            self._record(report, job, future)
        except Exception:  # a callback that raises is swallowed by the executor: say so at least
            log.exception("settling the bind job of %s failed", job.workload)
        finally:
            self._done(report, job)

    def _record(self, report: BindReport, job: BindJob, future: Future[BindResult]) -> None:
        now = self.clock()
        try:
            result = future.result()
        except Exception:
            # A bug in a bind job: what it did is unknown, so every pod of it stays assumed where it was going
            # until the cache shows the truth or the assumption times out.
            log.exception("bind job for %s failed", job.workload)
            result = BindResult(job.workload, failed={p.key: "internal error" for p in job.pods},
                                uncertain={p.key for p in job.pods})
        with self._lock:
            # Report first, assumptions after: a cycle that sees a pod free again finds its report filled.
            report.bound.extend(result.bound + result.elsewhere)
            report.bind_failed.update(result.failed)
            report.bind_cpu_s += result.client_cpu_seconds
            cycle = self._cycles.get(report.number)
            if cycle is not None:
                cycle.bound += len(result.bound) + len(result.elsewhere)
                cycle.failed += len(result.failed)
        released = False
        for key in result.failed:
            if key in result.uncertain:
                self.assumed.renew(key, now)
            else:
                self.assumed.forget(key)
                released = True
        if released:
            self.on_release()

    def _done(self, report: BindReport, job: BindJob) -> None:
        try:
            finished: _Cycle | None = None
            with self._lock:
                cycle = self._cycles.get(report.number)
                if cycle is not None:
                    cycle.jobs -= 1
                    if cycle.jobs == 0:
                        finished = self._cycles.pop(report.number)
            self.metrics.binds_in_flight.dec(len(job.pods))
            if finished is None:
                return
            if finished.failed:
                log.info("cycle %d: binds done, %d of %d pods bound, %d not", report.number, finished.bound,
                         finished.pods, finished.failed, extra={"cycle": report.number})
            for then in finished.then:
                try:
                    then()
                except Exception:
                    log.exception("a callback after the binds of cycle %d failed", report.number)
        finally:
            # Counted out last: drain() returns once every job's settling, callbacks included, has run.
            with self._lock:
                self._in_flight -= len(job.pods)
                self._lock.notify_all()
