"""Leader election on a ``coordination.k8s.io/v1`` Lease, with client-go's semantics.

Only the leader binds pods; the other replicas keep their informers warm so a takeover needs no relist.

* Expiry is judged on the local monotonic clock from the moment *we* last saw the lease record change,
  never from the ``renewTime`` written by another host, so clock skew between nodes cannot make two
  replicas lead at once.
* Every write is a PUT carrying the ``resourceVersion`` we read; a 409 means another replica wrote first
  and this attempt lost.
* The leader steps down when it has not renewed for ``renew_deadline``, which is shorter than the lease
  duration, so it stops acting before anyone else may take the lease. :meth:`LeaderElector.is_leader`
  additionally turns false once ``lease_duration`` has passed since the last renewal, even if the
  elector thread is stuck in a slow call.
* On a graceful shutdown the leader releases the lease (empty holder), so a successor takes over after
  one retry period instead of a whole lease duration.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.errors import Conflict, KubeError, NotFound
from gpufleet.k8s.resources import LEASES

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]


@dataclass(frozen=True, slots=True)
class LeaderElectionConfig:
    lease_name: str
    lease_namespace: str
    identity: str  # unique per replica: the pod name
    lease_duration: float = 15.0  # how long followers wait after the last observed renewal
    renew_deadline: float = 10.0  # how long the leader keeps trying to renew before stepping down
    retry_period: float = 2.0  # pause between attempts
    release_on_shutdown: bool = True

    def __post_init__(self) -> None:
        if not self.identity:
            raise ValueError("leader election needs a non-empty identity")
        if not self.lease_name or not self.lease_namespace:
            raise ValueError("leader election needs a lease name and namespace")
        # client-go's checks: the leader must give up before the lease can expire for the others, and
        # must get more than one attempt within its deadline.
        if self.lease_duration <= self.renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if self.renew_deadline <= 1.2 * self.retry_period or self.retry_period <= 0:
            raise ValueError("renew_deadline must exceed 1.2 x retry_period, and retry_period be positive")


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    holder: str
    lease_duration_seconds: int
    acquire_time: str | None
    renew_time: str | None
    transitions: int

    @classmethod
    def from_lease(cls, lease: Mapping[str, Any]) -> LeaseRecord:
        spec = lease.get("spec") or {}
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            lease_duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            transitions=int(spec.get("leaseTransitions") or 0),
        )

    def to_spec(self) -> JsonDict:
        return {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "acquireTime": self.acquire_time,
            "renewTime": self.renew_time,
            "leaseTransitions": self.transitions,
        }


def _micro_time(now: dt.datetime) -> str:
    # metav1.MicroTime's wire format.
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Campaigns for one Lease. Use :meth:`start`/:meth:`stop`, or call :meth:`run` on your own thread.

    ``on_started_leading`` runs on a thread of its own (it may run the scheduler for as long as it likes;
    renewals continue meanwhile); ``on_stopped_leading`` and ``on_new_leader`` run on the elector thread.
    After leadership is lost, :meth:`run` returns: like kube-scheduler, the process should exit and
    restart rather than resume with decisions made under a lost lease.
    """

    def __init__(
        self,
        client: KubeClient,
        config: LeaderElectionConfig,
        *,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
        on_new_leader: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.client = client
        self.config = config
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.on_new_leader = on_new_leader
        self._clock = clock
        self._wall = wall_clock
        self._lock = threading.Lock()
        self._lease: JsonDict | None = None  # the last lease object read or written (for its RV)
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0
        self._leading = False
        self._last_renew = float("-inf")
        self._leading_event = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # A hung call must not outlive the renew deadline; half leaves room for one more attempt.
        self._call_timeout = max(0.5, min(client.timeout, config.renew_deadline / 2))

    # --- state ----------------------------------------------------------------------------------------

    def is_leader(self) -> bool:
        with self._lock:
            return self._leading and self._clock() - self._last_renew < self.config.lease_duration

    @property
    def last_renewal(self) -> float:
        """The ``clock()`` time of the last successful acquire or renew while leading (-inf before)."""
        with self._lock:
            return self._last_renew

    @property
    def leader(self) -> str | None:
        """The holder we last observed ("" or None when nobody holds the lease)."""
        with self._lock:
            return self._observed.holder if self._observed else None

    def wait_until_leading(self, timeout: float | None = None) -> bool:
        return self._leading_event.wait(timeout)

    # --- one attempt ----------------------------------------------------------------------------------

    def try_acquire_or_renew(self) -> bool:
        """One round trip (or two): True if we hold the lease afterwards."""
        cfg = self.config
        now = self._clock()
        stamp = _micro_time(self._wall())
        with self._lock:
            leading, lease, observed = self._leading, self._lease, self._observed

        if leading and lease is not None and observed is not None and observed.holder == cfg.identity:
            # Fast path, as client-go: renew on the lease we wrote last, skipping the GET.
            record = LeaseRecord(cfg.identity, self._duration_seconds(), observed.acquire_time, stamp,
                                 observed.transitions)
            try:
                self._store(self._put(lease, record), now)
                return True
            except Conflict:
                pass  # someone wrote in between: read and decide below
            except KubeError as e:
                log.warning("lease %s: renew failed: %s", cfg.lease_name, e)
                return False

        try:
            current = self.client.get(LEASES, cfg.lease_name, cfg.lease_namespace, timeout=self._call_timeout)
        except NotFound:
            record = LeaseRecord(cfg.identity, self._duration_seconds(), stamp, stamp, 0)
            body = {"metadata": {"name": cfg.lease_name, "namespace": cfg.lease_namespace},
                    "spec": record.to_spec()}
            try:
                created = self.client.create(LEASES, body, timeout=self._call_timeout)
            except Conflict:
                return False  # another replica created it first
            except KubeError as e:
                log.warning("lease %s: create failed: %s", cfg.lease_name, e)
                return False
            self._store(created, now)
            return True
        except KubeError as e:
            log.warning("lease %s: read failed: %s", cfg.lease_name, e)
            return False

        record = self._store(current, now)
        with self._lock:
            observed_at = self._observed_at
        if record.holder and record.holder != cfg.identity and now < observed_at + record.lease_duration_seconds:
            return False  # held by another replica that renewed within its lease duration
        if record.holder == cfg.identity:
            new = LeaseRecord(cfg.identity, self._duration_seconds(), record.acquire_time or stamp, stamp,
                              record.transitions)
        else:
            new = LeaseRecord(cfg.identity, self._duration_seconds(), stamp, stamp, record.transitions + 1)
        try:
            self._store(self._put(current, new), now)
        except Conflict:
            return False  # lost the race to another replica
        except KubeError as e:
            log.warning("lease %s: update failed: %s", cfg.lease_name, e)
            return False
        return True

    def release(self) -> bool:
        """Give the lease up now (empty holder) so a successor need not wait for it to expire."""
        with self._lock:
            lease, observed, leading = self._lease, self._observed, self._leading
        if not leading or lease is None or observed is None or observed.holder != self.config.identity:
            return False
        stamp = _micro_time(self._wall())
        record = LeaseRecord("", 1, stamp, stamp, observed.transitions)
        try:
            self._store(self._put(lease, record), self._clock())
        except KubeError as e:
            log.warning("lease %s: release failed: %s", self.config.lease_name, e)
            return False
        return True

    # --- the loop -------------------------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None) -> None:
        """Campaign until leading, lead until the lease is lost or ``stop`` is set, then return."""
        stop = stop or self._stop
        cfg = self.config
        while not stop.is_set():
            if self.try_acquire_or_renew():
                break
            stop.wait(cfg.retry_period * (1 + 0.2 * random.random()))
        else:
            return

        with self._lock:
            self._leading = True
            self._last_renew = self._clock()
        self._leading_event.set()
        log.info("lease %s: %s is the leader", cfg.lease_name, cfg.identity)
        if self.on_started_leading is not None:
            threading.Thread(target=self.on_started_leading, name="leader-work", daemon=True).start()

        lost = False
        while not stop.wait(cfg.retry_period):
            if self.try_acquire_or_renew():
                with self._lock:
                    self._last_renew = self._clock()
                continue
            with self._lock:
                since = self._clock() - self._last_renew
            if since >= cfg.renew_deadline:
                lost = True
                log.warning("lease %s: no renewal for %.1fs, stepping down", cfg.lease_name, since)
                break

        if not lost and cfg.release_on_shutdown:
            self.release()
        with self._lock:
            self._leading = False
        self._leading_event.clear()
        if self.on_stopped_leading is not None:
            self.on_stopped_leading()

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("an elector starts once")
        self._thread = threading.Thread(target=self.run, name=f"leader-{self.config.identity}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop campaigning; a leader releases the lease (unless configured not to) before this returns."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # --- helpers --------------------------------------------------------------------------------------

    def _duration_seconds(self) -> int:
        return max(1, math.ceil(self.config.lease_duration))

    def _put(self, lease: Mapping[str, Any], record: LeaseRecord) -> JsonDict:
        meta = lease.get("metadata") or {}
        body: JsonDict = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.config.lease_name,
                "namespace": self.config.lease_namespace,
                # The optimistic-concurrency token: the server refuses the write if the lease moved on.
                "resourceVersion": meta.get("resourceVersion"),
            },
            "spec": record.to_spec(),
        }
        return self.client.replace(LEASES, body, timeout=self._call_timeout)

    def _store(self, lease: JsonDict, now: float) -> LeaseRecord:
        record = LeaseRecord.from_lease(lease)
        with self._lock:
            previous = self._observed
            self._lease = lease
            if previous != record:
                # Any change restarts the expiry clock: that is how followers see the leader is alive.
                self._observed = record
                self._observed_at = now
        if self.on_new_leader is not None and (previous is None or previous.holder != record.holder):
            try:
                self.on_new_leader(record.holder)
            except Exception:
                log.exception("on_new_leader callback failed")
        return record
