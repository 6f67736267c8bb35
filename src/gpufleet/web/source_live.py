"""The dashboard over a live cluster: the scheduler's informer cache and its cycle's world, read-only.

The same pieces as ``gpufleet scheduler``, without a single write:

* :func:`gpufleet.live.workloadsource.watched_resources` decides what to watch (Kueue's queue kinds or gpufleet's,
  and the workload kinds the cluster serves),
  an :class:`~gpufleet.k8s.informer.InformerSet` keeps the cache (list, then watch);
* each change of the cache rebuilds the view (at most every ``min_interval`` seconds): :func:`gpufleet.live.world.
  assemble` and :func:`~gpufleet.live.world.finish` make the cycle's world (nodes, devices held, our workloads),
  :func:`gpufleet.live.planner.make_policy` and :func:`~gpufleet.live.planner.run` say what the next cycle would
  do, and why each workload waits. Placements of that next cycle show as *planned*; nothing is bound;
* Preempted Events (``events.k8s.io/v1``, written by the scheduler on each victim pod) give the preemption
  history; when Events cannot be listed the history is empty and the view says why.

The client is used for discovery, lists and watches only (tests check that no other request is sent).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gpufleet.k8s import resources as r
from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.informer import CacheSnapshot, Informer, InformerSet, ObjectCache
from gpufleet.k8s.parsing import ParseCache
from gpufleet.live.decide import decide
from gpufleet.live.preempted_note import PREEMPTED, parse_preempted_note
from gpufleet.live.queuesource import QueueChooser
from gpufleet.live.settings import SchedulerSettings
from gpufleet.live.workloadsource import watched_resources
from gpufleet.live.world import World
from gpufleet.web.clusterview import PlannerFacts, build_view
from gpufleet.web.contract import ClusterView, PreemptionView, SimulationView, SourceKind

log = logging.getLogger(__name__)


def preemption_history(snapshot: CacheSnapshot, world: World) -> dict[str, list[PreemptionView]]:
    """Preempted Events of the cache by workload (through the pods they name), oldest first."""
    out: dict[str, list[PreemptionView]] = defaultdict(list)
    events = sorted(snapshot.of(r.EVENTS).values(),
                    key=lambda e: str(e.get("eventTime") or (e.get("metadata") or {}).get("creationTimestamp") or ""))
    for e in events:
        if e.get("reason") != PREEMPTED:
            continue
        regarding = e.get("regarding") or {}
        pod = f"{regarding.get('namespace') or ''}/{regarding.get('name') or ''}"
        workload = world.workload_of.get(pod)
        if workload is None:
            continue
        note = str(e.get("note") or "")
        by, reason = parse_preempted_note(note) or ("", note)
        when = str(e.get("eventTime") or (e.get("metadata") or {}).get("creationTimestamp") or "")
        out[workload].append(PreemptionView(when, by, reason))
    return out


def _phases(world: World) -> dict[str, str]:
    return {key: str((e.raw.get("status") or {}).get("phase") or "Pending") for key, e in world.pods.items()}


class LiveSource:
    kind: SourceKind = "live"

    def __init__(self, client: KubeClient, *, settings: SchedulerSettings | None = None, title: str = "live cluster",
                 min_interval: float = 0.5, informer_options: Mapping[str, Any] | None = None,
                 sync_timeout: float = 60.0, owns_client: bool = False) -> None:
        self.title = title
        self.client = client
        self.owns_client = owns_client  # close() closes it too
        self.settings = settings or SchedulerSettings()
        self.min_interval = min_interval
        resources = watched_resources(client, self.settings)
        self.informers = InformerSet(client, resources, **dict(informer_options or {}))
        self.cache: ObjectCache = self.informers.cache
        # Events are a history, not an input: their informer is not waited for, and failing to list them
        # (RBAC) leaves the history empty rather than the dashboard down.
        self.events = Informer(client, r.EVENTS, self.cache, **dict(informer_options or {}))
        self.queues = QueueChooser(resources)
        self.parse = ParseCache()
        self._lock = threading.Condition()
        self._view: ClusterView | None = None
        self._version = 0
        self._stop = threading.Event()
        self.rebuilds = 0
        self.informers.start()
        self.events.start()
        if not self.informers.wait_for_sync(sync_timeout):
            missing = ", ".join(self.informers.unsynced())
            self.close()
            raise TimeoutError(f"the cluster's {missing} could not be listed within {sync_timeout:g}s")
        self._rebuild()
        self._thread = threading.Thread(target=self._loop, name="dashboard-live", daemon=True)
        self._thread.start()

    # --- DataSource ------------------------------------------------------------------------------------------

    def cluster(self) -> ClusterView | None:
        with self._lock:
            return self._view

    def simulation(self) -> SimulationView | None:
        return None

    @property
    def version(self) -> int:
        with self._lock:
            return self._version

    def wait_for_change(self, since: int, timeout: float) -> int:
        with self._lock:
            self._lock.wait_for(lambda: self._version > since or self._stop.is_set(), timeout)
            return self._version

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            self._lock.notify_all()
        self.events.request_stop()
        self.informers.stop()
        self.events.stop(1.0)
        if self.owns_client:
            self.client.close()

    # --- the view ------------------------------------------------------------------------------------------

    def _loop(self) -> None:
        seen = self.cache.version
        while not self._stop.is_set():
            now_version = self.cache.wait_for_change(seen, timeout=1.0)
            if now_version == seen or self._stop.is_set():
                continue
            self._stop.wait(self.min_interval)  # a burst of changes is one rebuild
            seen = self.cache.version
            self._rebuild()

    def _rebuild(self) -> None:
        started = time.perf_counter()
        try:
            view = self._build(self.cache.snapshot(), time.time())
        except Exception as e:  # a bug reached through odd objects: keep the last view, and say so on it
            log.exception("dashboard: rebuilding the view failed")
            failure = (f"the view could not be rebuilt at {time.strftime('%H:%M:%S')} ({type(e).__name__}: {e}); "
                       "this is the last one built")
            with self._lock:
                if self._view is not None:
                    self._view = replace(self._view, notes=(*self._view.notes, failure))
                    self._version += 1
                    self._lock.notify_all()
            return
        with self._lock:
            self._view = view
            self._version += 1
            self.rebuilds += 1
            self._lock.notify_all()
        log.debug("dashboard view rebuilt in %.3fs", time.perf_counter() - started)

    def _build(self, snapshot: CacheSnapshot, now: float) -> ClusterView:
        s = self.settings
        kinds = self.queues.kinds(snapshot)
        # The scheduler's own decide (gpufleet.live.decide), with none of its memory: what it would do next.
        d = decide(snapshot, now, replace(s, beside_kueue=replace(s.beside_kueue, enabled=False)), parse=self.parse,
                   queue_resources=kinds.resources)
        world, policy, plan = d.world, d.policy, d.plan
        assert policy is not None and plan is not None  # decided as on its own (not beside Kueue)
        bound = {k for k, e in world.pods.items() if e.node is not None and not e.completing and not e.claim_bound}
        planned = frozenset(a.pod for adm in plan.admitted for a in adm.pods if a.node and a.pod not in bound)
        planned |= frozenset(k for repair in d.repairs if repair.kind == "complete" for k in repair.pods)
        planned |= frozenset(world.claim_bound)  # bound next where their allocated claims are
        notes = [f"live: {len(world.nodes)} nodes, {len(world.pods)} pods, queues from {kinds.source}; "
                 f"placements marked planned are the next cycle's, not bound yet"]
        notes += [f"{res.kind} {key} left out: {why}" for res, key, _, why in world.invalid]
        if not self.events.synced:
            notes.append("preemption history unavailable: Events (events.k8s.io/v1) not listed"
                         + (f" ({self.events.stats.errors[-1]})" if self.events.stats.errors else ""))
        facts = PlannerFacts(policy, policy.cluster, world.workloads, plan.pending, phases=_phases(world),
                             planned=planned, preemptions=preemption_history(snapshot, world))
        return build_view("live", self.title, facts, generated=now, notes=notes)

