"""The ``gpufleet scheduler`` process: informers, leader election, the cycle loop, the HTTP endpoints.

Threads: one per informer (shared cache), the leader elector, the cycle loop, the binding workers, a pool of
other API writers, the event writer, the operations server and (when enabled) the webhook server. Only the
loop runs cycles, and it runs them only while this replica holds the Lease; every write re-checks
leadership, so a replica that loses the Lease mid-cycle stops writing at once. Followers keep their caches
warm so a takeover costs no relist.

Shutdown (SIGTERM, :meth:`Scheduler.request_stop`): the loop finishes the cycle in progress, the Bindings in
flight end (a gang being bound is bound to the end), then the Lease is released so a standby takes over at
its next retry, then informers and servers stop. Losing the Lease ends the process with status 1, as
kube-scheduler does: a fresh process rebuilds everything from the API instead of acting on decisions made
under a lost Lease.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from gpufleet.admission.mig_resize import CacheResizeSource
from gpufleet.admission.validating import CacheClusterSource
from gpufleet.admission.webhook_server import WebhookServer
from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.health import Endpoints, OpsServer, Probe
from gpufleet.k8s.informer import InformerSet
from gpufleet.k8s.leader import LeaderElectionConfig, LeaderElector
from gpufleet.k8s.resources import ResourceType
from gpufleet.live import collector
from gpufleet.live.cycle import CycleReport, CycleRunner
from gpufleet.live.ops import ops_servers
from gpufleet.live.settings import SchedulerSettings
from gpufleet.live.workloadsource import watched_resources
from gpufleet.scheduler_metrics import SchedulerMetrics

log = logging.getLogger(__name__)

_UNHEALTHY_AFTER = 10
_TIMERS_WAIT_BINDS = 3  # cycle periods a timers-only cycle may wait for the Bindings in flight (at most ...)
_TIMER_PERIOD = 5.0  # ... periods of this many seconds; also the retry pace after a failed cycle
_TIMER_LATE = 0.01  # seconds after a timer's time that its cycle starts


class Scheduler:
    def __init__(self, client: KubeClient, settings: SchedulerSettings, *, identity: str, leader_elect: bool,
                 serve: bool = True, informer_options: dict[str, Any] | None = None,
                 clock: Callable[[], float] = time.time, resources: tuple[ResourceType, ...] | None = None,
                 own_process: bool = False) -> None:
        self.client = client
        # The process is this scheduler's (the CLI): its garbage collector is set for it (gpufleet.live.collector).
        self.own_process = own_process
        self._synced_once = False
        self.settings = settings
        self.identity = identity
        self.metrics = SchedulerMetrics()
        # What to watch: the queue kinds of queues.source and the workload kinds, as this cluster serves them (asks
        # the API server once).
        self.resources = resources if resources is not None else watched_resources(client, settings)
        self.informers = InformerSet(client, self.resources, **(informer_options or {}))
        self.cache = self.informers.cache
        self.elector: LeaderElector | None = None
        if leader_elect:
            le = settings.leader_election
            self.elector = LeaderElector(client, LeaderElectionConfig(
                le.lease_name, le.namespace, identity, lease_duration=le.lease_duration,
                renew_deadline=le.renew_deadline, retry_period=le.retry_period))
        self.runner = CycleRunner(client, self.cache, settings, identity=identity, metrics=self.metrics,
                                  may_write=self.may_write, clock=clock, resources=self.resources)
        self.reports: deque[CycleReport] = deque(maxlen=10_000)
        self.exit_code = 0
        self.failures = 0  # cycles failed in a row
        self._stop = threading.Event()
        self._done = threading.Event()
        self._led = False
        self._loop_thread: threading.Thread | None = None
        self.servers: list[OpsServer] = []
        self.webhook: WebhookServer | None = None
        if serve:
            self.servers = ops_servers(settings, Endpoints(self.healthz, self.readyz, self.metrics.exposition),
                                       client)
        if settings.webhook.enabled:
            # The lint rules of the validating path judge against this replica's cache (leader or not).
            self.webhook = WebhookServer.from_settings(settings.webhook, settings.scheduler_name, settings.lint,
                                                       CacheClusterSource(self.cache, self.resources),
                                                       CacheResizeSource(self.cache.get, self.resources))

    # --- state ------------------------------------------------------------------------------------------

    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader()

    def may_write(self) -> bool:
        """Writes are allowed only while leading; without leader election the single replica always may."""
        return self.is_leader()

    def healthz(self) -> Probe:
        thread = self._loop_thread
        if thread is not None and not thread.is_alive() and not self._stop.is_set():
            return Probe(False, f"the scheduling loop has stopped (exit code {self.exit_code})")
        if self.failures >= _UNHEALTHY_AFTER:
            # A restart may clear what keeps failing (a poisoned cache); let the kubelet do it.
            return Probe(False, f"{self.failures} scheduling cycles failed in a row; see the logs")
        return Probe(True, "ok")

    def readyz(self) -> Probe:
        missing = self.informers.unsynced()
        if missing:
            return Probe(False, "waiting for informer caches: " + ", ".join(missing))
        if self.elector is None:
            return Probe(True, "ok: caches synced; leader (no leader election)")
        if self.elector.is_leader():
            return Probe(True, "ok: caches synced; leader")
        return Probe(True, f"ok: caches synced; follower (leader: {self.elector.leader or 'none'})")

    # --- lifecycle --------------------------------------------------------------------------------------

    def start(self) -> None:
        if self.own_process:
            collector.tune()
        for server in self.servers:
            server.start()
        if self.webhook is not None:
            self.webhook.start()
            # The port it listens on, said once: with bindAddress ":0" (tests) nothing else tells it.
            log.info("webhook serving HTTPS on port %d", self.webhook.port, extra={"webhook_port": self.webhook.port})
        self.informers.start()
        if self.elector is not None:
            self.elector.start()
        self._loop_thread = threading.Thread(target=self._loop, name="gpufleet-cycles", daemon=True)
        self._loop_thread.start()
        log.info("scheduler %s started", self.settings.scheduler_name,
                 extra={"identity": self.identity, "leader_election": self.elector is not None})

    def request_stop(self) -> None:
        """Ask for a graceful stop (signal-handler safe: it only sets a flag)."""
        self._stop.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._loop_thread is not None:
            self._loop_thread.join(timeout)
        # Bindings of the last cycles may still be in flight: end them while we still hold the Lease.
        if not self.runner.binds.drain(timeout):
            log.warning("%d pods were still being bound after %gs; stopping anyway", self.runner.binds.in_flight(),
                        timeout)
        if self.elector is not None:
            self.elector.stop()  # releases the Lease: the standby takes over after one retry period
        self.informers.stop()
        self.runner.close()
        for server in self.servers:
            server.stop()
        if self.webhook is not None:
            self.webhook.stop()
        self._done.set()

    def run(self) -> int:
        """Start, block until stopped or the Lease is lost, shut down; the process exit code."""
        self.start()
        while not self._stop.is_set() and not self._done.is_set():
            self._stop.wait(0.2)
            if self._loop_thread is not None and not self._loop_thread.is_alive():
                break
        self.stop()
        return self.exit_code

    # --- the loop ---------------------------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                self.metrics.informers_synced.set(1 if self.informers.synced else 0)
                self.metrics.is_leader.set(1 if self.elector is not None and self.elector.is_leader() else 0)
                if not self.informers.synced:
                    self._stop.wait(0.05)
                    continue
                if not self._synced_once:
                    self._synced_once = True
                    if self.own_process:
                        collector.freeze_synced()
                if not self.is_leader():
                    assert self.elector is not None
                    if self._led and not self.elector.running:
                        log.error("lost the Lease; exiting so that a fresh process rebuilds from the API")
                        self.exit_code = 1
                        return
                    self.runner.changes.clear()  # a follower runs no cycle: it keeps no changes for one
                    self._stop.wait(0.05)
                    continue
                if not self._led:
                    log.info("leading: scheduling starts", extra={"identity": self.identity})
                self._led = True
                seen = self.runner.wakeup.version
                try:
                    report = self.runner.run()
                    self.reports.append(report)
                    self.failures = 0
                except Exception:
                    # One bad object or a bug must not take scheduling down for every pod: log it, count it,
                    # retry soon (the next cycle rebuilds everything from the cache anyway).
                    self.failures += 1
                    self.metrics.cycle_failures.inc()
                    log.exception("scheduling cycle failed (%d in a row)", self.failures)
                    self._stop.wait(min(self.settings.cycle_period, _TIMER_PERIOD))
                    continue
                self._wait_for_work(seen, report.next_due)
        except Exception:
            log.exception("the scheduling loop failed")
            self.exit_code = 1
        finally:
            if self._stop.is_set() or self.exit_code:
                self._done.set()

    def _wait_for_work(self, seen: int, due: float | None) -> None:
        """Until there is work (gpufleet.live.wakeup: a change in the cluster other than our own Bindings
        landing, a failed Binding, a round stopped at its budget; then a short pause to gather related events),
        a timer of the last cycle falls due (``due``, wall clock: CycleReport.next_due), or a cycle period
        passes (a resync, for what no timer tells). Nothing new and no timer due: no cycle. A cycle for the
        timers alone (backoffs and timeouts of seconds to minutes) waits while Bindings are in flight, a little
        longer: it would decide nothing they do not, and rebuild the world with the CPU they need."""
        started = time.monotonic()
        deadline = started + self.settings.cycle_period
        if due is not None:
            # A hair late rather than early: a cycle run just before its timer would find it not yet due.
            deadline = min(deadline, started + max(0.0, due - self.runner.clock()) + _TIMER_LATE)
        latest = deadline + (_TIMERS_WAIT_BINDS - 1) * min(self.settings.cycle_period, _TIMER_PERIOD)
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= deadline and (now >= latest or not self.runner.binds.in_flight()):
                return
            left = (deadline if now < deadline else latest) - now
            if self.runner.wakeup.wait(seen, timeout=min(left, 0.1)) > seen:
                self._stop.wait(self.settings.min_cycle_interval)
                return
