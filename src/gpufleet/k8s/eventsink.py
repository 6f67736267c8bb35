"""Events written off the scheduling path: a bounded queue and a writer thread, as client-go's event broadcaster.

kube-scheduler records a ``Scheduled`` event for every pod it binds through client-go's broadcaster, which
queues at most 1,000 events, drops what does not fit, and writes them one at a time on a goroutine of its own
through a client of its own (with its own QPS): recording an event never holds up scheduling. This sink does
the same:

* :meth:`EventSink.post` never blocks: it queues the event, or drops it when :data:`QUEUE_SIZE` events wait
  already; drops are counted (``gpufleet_events_dropped_total``) and logged at most once per
  :data:`DROP_LOG_INTERVAL_S`, with how many;
* an event *isomorphic* to one still waiting (same object, reason, action, type, note and reporter) is merged
  into it instead of queued again: the Event written says how many it stands for in ``series`` (``count``,
  ``lastObservedTime``), as an events.k8s.io/v1 EventSeries does;
* one thread writes the queue in order, each write first taking a token from the events' own bucket
  (:mod:`gpufleet.k8s.ratelimit`). A write that fails is logged (at most once per interval, with a count)
  and the event dropped: events are best effort, and what they say is also in the pod's condition, the
  metrics and the logs;
* :meth:`close` writes what is queued, within a deadline, then stops.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.errors import KubeError

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]

QUEUE_SIZE = 1000  # client-go's maxQueuedEvents
DROP_LOG_INTERVAL_S = 30.0


@dataclass(slots=True)
class _Waiting:
    event: JsonDict
    count: int
    last: float  # when the latest isomorphic event was posted


def isomorphic_key(event: JsonDict) -> str:
    """What makes two events the same one happening again (the object's resourceVersion aside)."""
    regarding = {k: v for k, v in (event.get("regarding") or {}).items() if k != "resourceVersion"}
    return json.dumps([regarding, event.get("reason"), event.get("action"), event.get("type"), event.get("note"),
                       event.get("related"), event.get("reportingController"), event.get("reportingInstance")],
                      sort_keys=True)


class EventSink:
    """``client``: the events' own view of the API client, rate-limited by their own token bucket
    (:meth:`KubeClient.limited`); ``on_drop``: told how many events were just dropped (the metric)."""

    def __init__(self, client: KubeClient, *, on_drop: Callable[[int], None] | None = None,
                 capacity: int = QUEUE_SIZE, clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.capacity = capacity
        self._on_drop = on_drop
        self._clock = clock
        self._cond = threading.Condition()
        self._waiting: OrderedDict[str, _Waiting] = OrderedDict()
        self._closing = False
        self._writing = False
        self.written = 0
        self.merged = 0
        self.dropped = 0
        self.failed = 0
        self._told: dict[str, tuple[float, int]] = {}  # what -> (last warning, occurrences since)
        self._thread = threading.Thread(target=self._run, name="gpufleet-events", daemon=True)
        self._thread.start()

    def post(self, event: JsonDict) -> bool:
        """Queue ``event`` (merged into an isomorphic one still waiting); False when it was dropped."""
        key = isomorphic_key(event)
        with self._cond:
            waiting = self._waiting.get(key)
            if waiting is not None:
                waiting.count += 1
                waiting.last = self._clock()
                self.merged += 1
                return True
            if self._closing or len(self._waiting) >= self.capacity:
                self.dropped += 1
                dropped = True
            else:
                self._waiting[key] = _Waiting(event, 1, self._clock())
                self._cond.notify()
                dropped = False
        if dropped:
            if self._on_drop is not None:
                self._on_drop(1)
            self._tell(f"dropped (the queue held {self.capacity} already)", event)
        return not dropped

    def pending(self) -> int:
        with self._cond:
            return len(self._waiting) + (1 if self._writing else 0)

    def flush(self, timeout: float) -> bool:
        """Wait until every queued event is written (or dropped); False if ``timeout`` passed first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._waiting or self._writing:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued within ``timeout``, drop (and count) the rest, stop the writer."""
        self.flush(timeout)
        with self._cond:
            self._closing = True
            left = len(self._waiting)
            self._waiting.clear()
            self.dropped += left
            self._cond.notify_all()
        if left:
            if self._on_drop is not None:
                self._on_drop(left)
            log.warning("%d events not written: the scheduler is stopping", left)
        self._thread.join(timeout)

    # --- the writer --------------------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._closing:
                    self._cond.wait()
                if not self._waiting:
                    return
                _, waiting = self._waiting.popitem(last=False)
                self._writing = True
            try:
                self._write(waiting)
            finally:
                with self._cond:
                    self._writing = False
                    self._cond.notify_all()

    def _write(self, waiting: _Waiting) -> None:
        event = waiting.event
        if waiting.count > 1:
            last = dt.datetime.fromtimestamp(waiting.last, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            event = {**event, "series": {"count": waiting.count, "lastObservedTime": last}}
        try:
            self.client.create_event(event)
            self.written += 1
        except KubeError as e:
            self.failed += 1
            self._tell("not written", event, e)
        except Exception:  # a bug must not end the writer: every later event would be lost silently
            self.failed += 1
            log.exception("writing event %s for %s failed", event.get("reason"), _regarding(event))

    def _tell(self, what: str, event: JsonDict, error: Exception | None = None) -> None:
        """Warn about an event dropped or not written, at most once per interval, with how many since."""
        now = time.monotonic()
        with self._cond:
            last, count = self._told.get(what, (-DROP_LOG_INTERVAL_S, 0))
            count += 1
            if now - last < DROP_LOG_INTERVAL_S:
                self._told[what] = (last, count)
                return
            self._told[what] = (now, 0)
        log.warning("%d events %s since the last warning; the latest: %s for %s%s", count, what,
                    event.get("reason"), _regarding(event), f": {error}" if error is not None else "")


def _regarding(event: JsonDict) -> str:
    ref = event.get("regarding") or {}
    return f"{ref.get('kind', '')} {ref.get('namespace', '')}/{ref.get('name', '')}".strip()
