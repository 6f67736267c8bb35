"""The discrete-event engine: drives a scheduling :class:`~gpufleet.scheduling.types.Policy` on a virtual clock.

The engine owns time and the life of pods; the policy owns queues, quota and the cluster state. Each instant
the engine handles its due events (arrivals, pod starts, ends of work, failures, timers), then runs policy
cycles until one decides nothing, and carries the decisions out: admitted pods start (after the configured
start delay), preempted workloads have their pods stopped and are handed back through ``evicted``. Work
begins when every pod of a gang runs (each pod on its own for jobs that are not gangs) and lasts the job's
duration, longer when a MIG instance gives it less compute than it needs. The failure models
(:class:`~gpufleet.sim.model.FailureModels`) end attempts early; a failed attempt is finished with the
policy and resubmitted while the job's backoff limit allows. With ``replace_pods``, a pod of a Job or a
StatefulSet whose pods work apart fails alone instead: the policy is told it left (``LateMembers.leave``), and its
replacement joins the admitted workload (``LateMembers.join``, gpufleet.scheduling.kueue.late_members) before the
instant's cycles, as the live scheduler joins the pods created after their workload's admission.

A run is deterministic: events at one instant are taken in a fixed order and nothing reads the wall clock
except to report how long the run took.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from gpufleet.api.objects import PodTemplate
from gpufleet.cluster.holdings import Holding, holding_of, unplaced_holding
from gpufleet.gpu.constants import MILLI
from gpufleet.scheduling.kueue.late_members import joins_late
from gpufleet.scheduling.placement.stranded import stranded_by_node
from gpufleet.scheduling.types import Decisions, LateMembers, MemoryFeedback, PodAssignment, Policy
from gpufleet.sim.contention import Work, WorkClock
from gpufleet.sim.events import Event, EventQueue, Kind
from gpufleet.sim.model import SimConfig, SimJob, SimulationError
from gpufleet.sim.records import Attempt, JobRecord, Outcome, PodSpan, PoolInfo, SimResult

Progress = Callable[[float, float], None]  # (virtual now, virtual end) -> None

# Events that can change what happens next; timers of the engine itself (ticks, samples) do not.
_LIVE = frozenset({Kind.ARRIVAL, Kind.POD_START, Kind.WORK_DONE, Kind.POD_DONE, Kind.MEMORY_PEAK,
                   Kind.RENDEZVOUS, Kind.RETRY, Kind.WAKEUP, Kind.CRASH, Kind.REPLACE})
_IDLE_WAKEUPS = 1000  # wake-ups in a row that change nothing while nothing else is left: the run is over
# Cycles in a row that decide nothing at one instant while the policy still has heads to try (each cycle tries one
# per ClusterQueue): a queue of thousands of workloads none of which fits is not walked through at every event.
_UNDECIDED_CYCLES = 64


@dataclass(slots=True)
class _PodRun:
    key: str
    holding: Holding
    span: PodSpan
    memory_mib: int | None
    running: bool = False
    resident: bool = False  # its memory counts on its shared devices


@dataclass(slots=True)
class _JobRun:
    job: SimJob
    record: JobRecord
    pod_keys: frozenset[str]
    state: str = "waiting"  # waiting (not arrived) | active (in the policy's hands) | retrying | done
    attempt: Attempt | None = None
    token: int = 0
    failures: int = 0
    pods: dict[str, _PodRun] = field(default_factory=dict)
    running: int = 0
    first_start: float | None = None
    working: bool = False
    pods_done: int = 0
    works: dict[str, Work] = field(default_factory=dict)  # its works under way, by pod ("" for a gang's)
    # The version a pod's next work starts at: past the last of a pod that failed alone (FailureModels.replace_pods),
    # so that the failed pod's end event, still queued, is stale for its replacement's work.
    work_versions: dict[str, int] = field(default_factory=dict)

    def record_work(self, key: str, work: Work) -> None:
        """Write the work done so far on the pods it runs on: pod ``key``'s, or every pod's for a gang's ("")."""
        for pod in [self.pods[key]] if key else self.pods.values():
            pod.span.work_s = work.done


class Simulator:
    def __init__(self, policy: Policy, jobs: Sequence[SimJob], config: SimConfig | None = None, *,
                 scenario: str = "", progress: Progress | None = None) -> None:
        self.policy = policy
        self.config = config or SimConfig()
        self.scenario = scenario
        self.progress = progress
        self.queue = EventQueue()
        self.now = 0.0
        self._jobs = sorted(jobs, key=lambda j: (j.arrival, j.workload.order, j.key))
        self._runs: dict[str, _JobRun] = {}
        self._pending: dict[str, None] = {}  # jobs submitted and not yet admitted, in submission order
        self._resident: dict[str, int] = {}  # memory in use on software-shared devices (MiB)
        self._spans: list[PodSpan] = []
        self._stranded: list[tuple[float, float, float, int]] = []
        self._stranded_by: list[tuple[float, dict[tuple[str, str], float]]] = []  # per (pool, model)
        self._live = 0
        self._held = 0.0  # GPUs held by placed pods (kept here: summing the cluster's GPUs costs O(GPUs))
        self._capacity = policy.cluster.gpu_capacity() if policy.cluster is not None else 0.0
        self._next_tick: float | None = None
        self._next_wakeup: float | None = None
        self._clock = WorkClock(self._push_end)  # contention on software-shared GPUs (sim/contention.py)
        self._pods_ready = getattr(policy, "pods_ready", None)
        settled = getattr(policy, "settled", None)
        self._settled: Callable[[], bool] | None = settled if callable(settled) else None
        # What the node agent would report of GPU memory (per-pod use, OOM kills), to a policy that learns from it.
        self._feedback = policy if isinstance(policy, MemoryFeedback) else None
        # A policy that takes pods joining an admitted workload (FailureModels.replace_pods), and per job the
        # replacements waiting to join it, in the order they were created.
        self._members = policy if isinstance(policy, LateMembers) and policy.cluster is not None else None
        self._joining: dict[str, list[str]] = {}
        self.events = 0
        self.cycles = 0
        self.last_pending_reason: dict[str, str] = {}

    # ---- scheduling events ---------------------------------------------------------------------------------
    def _push(self, at: float, kind: Kind, job: str = "", token: int = 0, pod: str = "", version: int = 0) -> None:
        if kind in _LIVE:
            self._live += 1
        self.queue.push(at, kind, job, token, pod, version)

    def _push_end(self, work: Work, at: float) -> None:
        """A work's end (WorkClock's callback): when it starts, and whenever contention moves it."""
        job, pod = work.key
        run = self._runs[job]
        self._push(at, Kind.POD_DONE if pod else Kind.WORK_DONE, job, run.token, pod, work.version)

    def _pop(self) -> Event:
        ev = self.queue.pop()
        if ev.kind in _LIVE:
            self._live -= 1
        return ev

    # ---- the run -------------------------------------------------------------------------------------------
    def run(self) -> SimResult:
        started = time.perf_counter()
        cfg = self.config
        horizon = cfg.horizon_s
        not_simulated = 0
        for job in self._jobs:
            if job.key in self._runs:
                raise SimulationError(f"two jobs are named {job.key}")
            if horizon is not None and job.arrival > horizon:
                not_simulated += 1
                continue
            w = job.workload
            record = JobRecord(job.key, w.namespace, job.team or w.namespace, job.queue, job.klass, job.role,
                               len(w.pods), w.gpu_equivalent, job.arrival)
            self._runs[job.key] = _JobRun(job, record, frozenset(p.key for p in w.pods))
            self._push(job.arrival, Kind.ARRIVAL, job.key)
        end = horizon + cfg.drain_s if horizon is not None else None
        if end is not None:
            self.queue.push(end, Kind.END)
        last_arrival = max((r.job.arrival for r in self._runs.values()), default=0.0)
        # Without a horizon the run's length is unknown: start from its shortest possible length (every job
        # running on arrival) and double the step whenever the samples outnumber twice the target.
        guess = horizon if horizon is not None else max(
            (r.job.arrival + (r.job.duration or 0.0) for r in self._runs.values()), default=1.0)
        sample_step = max(guess, 1.0) / max(cfg.samples, 1)
        if cfg.samples > 0:
            self.queue.push(0.0, Kind.SAMPLE)
        idle_wakeups = 0
        progress_every = 2000
        stopped = False
        last_change = 0.0
        while len(self.queue):
            t = self.queue.peek_time()
            assert t is not None
            if end is None and self._live == 0:
                break  # nothing left that could change anything: only ticks and samples remain
            self.now = t
            need_cycle = False
            only_wakeups = True
            while len(self.queue) and self.queue.peek_time() == t:
                ev = self._pop()
                self.events += 1
                if ev.kind == Kind.END:
                    stopped = True
                    continue
                if ev.kind == Kind.SAMPLE:
                    self._sample(t)
                    if len(self._stranded) >= 2 * cfg.samples and len(self._stranded) % cfg.samples == 0:
                        sample_step *= 2
                    # Pending jobs keep the samples going too: at an instant when only arrivals happen, the
                    # sample comes before that instant's cycle, so what the cycle starts is not live yet (a run
                    # whose jobs all arrive at 0 was sampled once, before anything was placed).
                    if self._live or self._pending or (end is not None and t + sample_step <= end):
                        self.queue.push(t + sample_step, Kind.SAMPLE)
                    continue
                if ev.kind not in (Kind.WAKEUP, Kind.TICK):
                    only_wakeups = False
                need_cycle |= self._handle(ev)
            if stopped:
                break
            # Replacements join their admitted workloads first: their quota is theirs already (the live order).
            joined = self._join(t) if need_cycle and self._joining else False
            decided = (self._cycles(t) if need_cycle else False) or joined
            if need_cycle or decided:
                last_change = t  # timers that found their attempt already over change nothing
            if end is None and only_wakeups and not decided and self._live == 0:
                idle_wakeups += 1
                if idle_wakeups >= _IDLE_WAKEUPS:
                    break  # the policy keeps asking to be woken and never decides anything
            else:
                idle_wakeups = 0
            self._timers(t)
            if self.progress is not None and self.events >= progress_every:
                progress_every = self.events + 2000
                self.progress(t, end if end is not None else max(last_arrival, t))
        # Without a horizon the run is over at the last instant that changed something.
        run_end = end if end is not None else last_change
        return self._result(run_end, horizon, not_simulated, time.perf_counter() - started)

    def _timers(self, t: float) -> None:
        """A periodic cycle while work is pending, and a wake-up when the policy wants one."""
        if self._pending and (self._next_tick is None or self._next_tick <= t):
            self._next_tick = t + self.config.tick_s
            self.queue.push(self._next_tick, Kind.TICK)
        wake = self.policy.next_wakeup(t)
        if wake is not None and wake > t and wake != self._next_wakeup:
            self._next_wakeup = wake
            self._push(wake, Kind.WAKEUP)

    def _cycles(self, t: float) -> bool:
        """Cycles at instant ``t`` until one decides nothing and the policy, when it can say, has nothing left to
        try: Kueue's scheduler loops while it has heads, so a BestEffortFIFO head that does not fit gives way to
        the next workload at once, not at the next event."""
        decided = False
        undecided = 0
        for _ in range(self.config.max_cycles_per_instant):
            d = self.policy.cycle(t)
            self.cycles += 1
            for p in d.pending:
                self.last_pending_reason[p.workload] = p.reason
            if not d:
                undecided += 1
                if self._settled is None or self._settled() or undecided >= _UNDECIDED_CYCLES:
                    return decided  # past the bound, the rest waits for the next event or tick
                continue
            undecided = 0
            decided = True
            self._apply(d, t)
        raise SimulationError(f"policy {self.policy.name} kept deciding at t={t:.0f}s "
                              f"({self.config.max_cycles_per_instant} cycles in one instant)")

    # ---- events --------------------------------------------------------------------------------------------
    def _handle(self, ev: Event) -> bool:
        """Carry one event out; whether a scheduling cycle should follow."""
        kind = ev.kind
        if kind in (Kind.TICK, Kind.WAKEUP):
            if kind == Kind.TICK:
                self._next_tick = None
            else:
                self._next_wakeup = None
            return True
        run = self._runs[ev.job]
        if kind in (Kind.ARRIVAL, Kind.RETRY):
            self._submit(run, ev.time)
            return True
        if ev.token != run.token:
            return False  # scheduled for an attempt that is over
        if kind == Kind.POD_START:
            self._start_pod(run, run.pods[ev.pod], ev.time)
            return True
        if kind == Kind.REPLACE:
            self._joining.setdefault(run.job.key, []).append(ev.pod)
            self._pending[run.job.key] = None  # waiting again, for its replacement pod
            return True
        if kind in (Kind.WORK_DONE, Kind.POD_DONE):
            work = run.works.get(ev.pod)
            if work is None or work.version != ev.version:
                return False  # its end moved (contention) since this event was scheduled
        if kind == Kind.WORK_DONE:
            self._end_attempt(run, ev.time, "succeeded", None)
            return True
        if kind == Kind.POD_DONE:
            self._stop_work(run, ev.pod, ev.time)
            run.pods[ev.pod].span.busy_to = ev.time
            run.pods_done += 1
            if run.pods_done == len(run.pod_keys):
                self._end_attempt(run, ev.time, "succeeded", None)
                return True
            return False
        if kind == Kind.RENDEZVOUS:
            if not run.working:
                self._end_attempt(run, ev.time, "failed", "RendezvousTimeout")
                return True
            return False
        if kind == Kind.MEMORY_PEAK:
            pod = run.pods[ev.pod]
            if not self._memory_fits(pod):
                if self._feedback is not None:  # told while its devices are still held
                    self._feedback.oom_killed(run.job.key, pod.key, ev.time)
                if self._replaces(run, pod):
                    self._pod_failed(run, pod, ev.time, "OOMKilled")
                else:
                    self._end_attempt(run, ev.time, "failed", "OOMKilled")
                return True
            if self._feedback is not None and pod.memory_mib is not None:
                self._feedback.observe_memory(run.job.key, pod.key, pod.memory_mib, ev.time)
            return False
        if kind == Kind.CRASH:
            self._end_attempt(run, ev.time, "failed", "Error")
            return True
        raise SimulationError(f"unexpected event {ev}")  # pragma: no cover - every kind is handled above

    def _submit(self, run: _JobRun, t: float) -> None:
        self._new_attempt(run, t)
        self.policy.submit(run.job.workload, t)

    def _new_attempt(self, run: _JobRun, t: float) -> None:
        run.state = "active"
        run.attempt = Attempt(submitted=t)
        run.record.attempts.append(run.attempt)
        self._pending[run.job.key] = None

    # ---- decisions -----------------------------------------------------------------------------------------
    def _apply(self, d: Decisions, t: float) -> None:
        for p in d.preempted:
            run = self._run_of(p.workload, "preempted")
            if run.state != "active":
                raise SimulationError(f"policy {self.policy.name} preempted {p.workload}, which is {run.state}")
            if not run.pods:
                # Nothing of it runs: the policy only takes its admission back; it stays in the same attempt.
                self.policy.evicted(p.workload, t, requeue=True, reason=p.reason)
                continue
            self._end_attempt(run, t, "preempted", p.reason, tell_policy=False)
            self.policy.evicted(p.workload, t, requeue=True, reason=p.reason)
            self._new_attempt(run, t)  # requeued by the policy itself: waiting again from now
        for a in d.admitted:
            run = self._run_of(a.workload, "admitted")
            if run.state != "active":
                raise SimulationError(f"policy {self.policy.name} admitted {a.workload}, which is {run.state}")
            for pa in a.pods:
                if pa.pod not in run.pod_keys:
                    raise SimulationError(f"policy {self.policy.name} placed {pa.pod}, not a pod of {a.workload}")
                if pa.pod in run.pods:
                    raise SimulationError(f"policy {self.policy.name} placed {pa.pod} twice")
                self._place_pod(run, pa, t)
            if len(run.pods) == len(run.pod_keys):
                self._pending.pop(run.job.key, None)

    def _place_pod(self, run: _JobRun, pa: PodAssignment, t: float) -> None:
        """A pod the policy placed holds what it was given from now, and starts (after the start delay)."""
        cluster = self.policy.cluster
        placement = cluster.placements.get(pa.pod) if cluster is not None and pa.node else None
        holding = holding_of(cluster, placement) if cluster is not None and placement is not None \
            else unplaced_holding(self._template(run, pa.pod).gpu.gpu_equivalent)
        span = PodSpan(run.job.key, pa.pod, holding.node, holding.pool, holding.model, holding.share,
                       holding.price, held_from=t, shared_gpus=holding.shared_gpus,
                       attempt=len(run.record.attempts) - 1, equivalent=holding.equivalent)
        pod = _PodRun(pa.pod, holding, span, run.job.profile(pa.pod).memory_mib)
        run.pods[pa.pod] = pod
        self._held += holding.share
        self._spans.append(span)
        if self.config.pod_start_s > 0:
            self._push(t + self.config.pod_start_s, Kind.POD_START, run.job.key, run.token, pa.pod)
        else:
            self._start_pod(run, pod, t)

    # ---- pods that fail alone, and their replacements (FailureModels.replace_pods) ----------------------------
    def _replaces(self, run: _JobRun, pod: _PodRun) -> bool:
        """Whether the failed ``pod`` is replaced while its job runs on, rather than ending the attempt: its job's
        pods work apart, its controller owns its pods once admitted, the policy takes late members, and the pod is
        still at work (one whose own work is over leaves nothing to replace)."""
        return (self.config.failures.replace_pods and self._members is not None and not run.job.gang
                and joins_late(run.job.workload) and pod.key in run.works)

    def _pod_failed(self, run: _JobRun, pod: _PodRun, t: float, cause: str) -> None:
        """``pod`` failed alone: it stops and leaves its workload (its node is free, its quota stays the job's), and
        its controller creates a replacement after the backoff, while the job's failures stay within its backoff
        limit; past it the job fails for good."""
        assert self._members is not None
        work = run.works[pod.key]
        self._stop_work(run, pod.key, t)
        run.work_versions[pod.key] = work.version + 1
        self._release_pod(pod, t)
        del run.pods[pod.key]
        if pod.running:
            run.running -= 1
        self._members.leave(run.job.key, pod.key, t)
        failures = self.config.failures
        if failures.retries and run.failures + 1 <= run.job.backoff_limit:
            run.failures += 1
            pod.span.failed = cause  # (a failure that ends the attempt is the attempt's, and counted there)
            self._push(t + failures.retry_delay(run.failures), Kind.REPLACE, run.job.key, run.token, pod.key)
        else:
            self._end_attempt(run, t, "failed", cause)  # (it counts this failure, and gives up)

    def _join(self, t: float) -> bool:
        """Ask the policy to place the replacements waiting to join their admitted jobs; whether any joined."""
        assert self._members is not None
        joined = False
        for key, pods in list(self._joining.items()):
            run = self._runs[key]
            got = self._members.join(key, pods, t)
            if got is None:
                raise SimulationError(f"policy {self.policy.name} does not take the late pods of {key}, which it "
                                      "admitted")
            if got.waiting is not None:
                self.last_pending_reason[key] = got.message(run.job.workload.kind)
                continue
            del self._joining[key]
            for pa in got.placed:
                self._place_pod(run, pa, t)
            if len(run.pods) == len(run.pod_keys):
                self._pending.pop(key, None)
            joined = True
        return joined

    def _run_of(self, key: str, what: str) -> _JobRun:
        run = self._runs.get(key)
        if run is None:
            raise SimulationError(f"policy {self.policy.name} {what} {key}, which the simulation does not know")
        return run

    @staticmethod
    def _template(run: _JobRun, pod: str) -> PodTemplate:
        for p in run.job.workload.pods:
            if p.key == pod:
                return p.template
        raise SimulationError(f"{pod} is not a pod of {run.job.key}")  # pragma: no cover - checked by caller

    # ---- pods and work -------------------------------------------------------------------------------------
    def _start_pod(self, run: _JobRun, pod: _PodRun, t: float) -> None:
        cfg = self.config
        job = run.job
        pod.running = True
        run.running += 1
        if run.first_start is None:
            run.first_start = t
            if job.gang and len(run.pod_keys) > 1 and cfg.failures.rendezvous:
                self._push(t + cfg.failures.rendezvous_timeout_s, Kind.RENDEZVOUS, job.key, run.token)
        if cfg.failures.oom and pod.memory_mib is not None and pod.holding.devices:
            self._push(t + cfg.failures.memory_ramp_s, Kind.MEMORY_PEAK, job.key, run.token, pod.key)
        pod.span.demand, stretch = self._demand(job, pod)
        all_running = run.running == len(run.pod_keys)
        if job.gang:
            if all_running:
                self._begin_work(run, t)
            return
        pod.span.busy_from = t
        self._start_work(run, pod.key, [pod], job.duration * stretch if job.duration is not None else None, t)
        if job.duration is not None and run.first_start == t and run.running == 1:
            self._push_crash(run, t, job.duration * stretch)
        if all_running:
            self._all_running(run, t)

    def _demand(self, job: SimJob, pod: _PodRun) -> tuple[float, float]:
        """(busy GPUs while working, slow-down factor) of a pod on what it holds."""
        profile = job.profile(pod.key)
        h = pod.holding
        if profile.gpu_demand is not None:
            need = profile.gpu_demand
        else:
            util = profile.gpu_util if profile.gpu_util is not None else self.config.default_gpu_util
            need = h.share * util
        if h.mig_compute > 0:
            # A MIG instance is a hard partition: work that needs more compute than it has takes longer.
            return h.share * min(1.0, need / h.mig_compute), max(1.0, need / h.mig_compute)
        if h.shared_gpus:
            return min(need, float(len(h.shared_gpus))), 1.0
        return min(need, h.share), 1.0

    def _begin_work(self, run: _JobRun, t: float) -> None:
        run.working = True
        stretch = 1.0
        for pod in run.pods.values():
            pod.span.busy_from = t
            stretch = max(stretch, self._demand(run.job, pod)[1])
        length = run.job.duration * stretch if run.job.duration is not None else None
        self._start_work(run, "", list(run.pods.values()), length, t)
        if length is not None:
            self._push_crash(run, t, length)
        self._all_running(run, t)

    def _start_work(self, run: _JobRun, key: str, pods: list[_PodRun], length: float | None, t: float) -> None:
        """Work of ``length`` seconds at its own pace (None: until the end) by ``pods``; on software-shared GPUs
        it loads them and, for a batch job, slows down when they are over-busy (sim/contention.py)."""
        work = Work((run.job.key, key), [(p.key, p.holding.shared_gpus, p.span.demand) for p in pods], length,
                    run.job.work_bound)
        if run.work_versions:
            work.version = run.work_versions.get(key, 0)
        run.works[key] = work
        self._clock.start(work, t)

    def _stop_work(self, run: _JobRun, key: str, t: float) -> None:
        work = run.works.pop(key)
        self._clock.stop(work, t)
        run.record_work(key, work)

    def _push_crash(self, run: _JobRun, t: float, length: float) -> None:
        """The attempt's own failure, when its job has one drawn for this attempt (SimJob.crashes)."""
        index = len(run.record.attempts) - 1
        crashes = run.job.crashes
        at = crashes[index] if 0 <= index < len(crashes) else None
        if at is not None:
            self._push(t + at * length, Kind.CRASH, run.job.key, run.token)

    def _all_running(self, run: _JobRun, t: float) -> None:
        assert run.attempt is not None
        if run.attempt.started is not None:
            return  # a replacement pod completed the set again (FailureModels.replace_pods): the work began before
        run.attempt.started = t
        run.attempt.outcome = "running"
        if callable(self._pods_ready):
            self._pods_ready(run.job.key, t)

    def _memory_fits(self, pod: _PodRun) -> bool:
        need = pod.memory_mib or 0
        for dev in pod.holding.devices:
            if dev.memory_mib <= 0:
                continue  # the device's memory is unknown (an undisclosed trace model)
            used = self._resident.get(dev.key, 0) if dev.shared else 0
            if used + need > dev.memory_mib:
                return False
        pod.resident = True
        for dev in pod.holding.devices:
            if dev.shared:
                self._resident[dev.key] = self._resident.get(dev.key, 0) + need
        return True

    def _stop_pods(self, run: _JobRun, t: float) -> None:
        for key in list(run.works):
            self._stop_work(run, key, t)
        for pod in run.pods.values():
            self._release_pod(pod, t)
        run.pods = {}
        run.work_versions.clear()
        self._joining.pop(run.job.key, None)  # its replacements' attempt is over: the next one places every pod
        run.running = 0
        run.first_start = None
        run.working = False
        run.pods_done = 0
        run.token += 1

    def _release_pod(self, pod: _PodRun, t: float) -> None:
        """The pod holds nothing from ``t``: its span ends and its memory leaves the devices it shared."""
        self._held -= pod.holding.share
        pod.span.held_to = t
        if pod.span.busy_from is not None and pod.span.busy_to is None:
            pod.span.busy_to = t
        if pod.resident:
            for dev in pod.holding.devices:
                if dev.shared:
                    self._resident[dev.key] -= pod.memory_mib or 0
            pod.resident = False

    def _end_attempt(self, run: _JobRun, t: float, outcome: Outcome, cause: str | None, *,
                     tell_policy: bool = True) -> None:
        attempt = run.attempt
        assert attempt is not None
        attempt.ended = t
        attempt.outcome = outcome
        attempt.cause = cause
        self._stop_pods(run, t)
        self._pending.pop(run.job.key, None)
        if not tell_policy:
            return
        self.policy.finish(run.job.key, t)
        if outcome == "succeeded":
            run.state = "done"
            run.record.outcome = "succeeded"
            run.record.ended = t
            return
        run.failures += 1
        failures = self.config.failures
        if failures.retries and run.failures <= run.job.backoff_limit:
            run.state = "retrying"
            self._push(t + failures.retry_delay(run.failures), Kind.RETRY, run.job.key)
        else:
            run.state = "done"
            run.record.outcome = "failed"
            run.record.ended = t

    # ---- sampling and results ------------------------------------------------------------------------------
    def _pending_templates(self) -> Iterator[PodTemplate]:
        for key in self._pending:
            run = self._runs[key]
            for p in run.job.workload.pods:
                if p.key not in run.pods:
                    yield p.template

    def _sample(self, t: float) -> None:
        cluster = self.policy.cluster
        if cluster is None:
            return
        pending = sum(len(self._runs[k].pod_keys) - len(self._runs[k].pods) for k in self._pending)
        by: dict[tuple[str, str], float] = {}
        if pending:
            stranded = idle = 0.0
            for name, (node_stranded, node_idle) in stranded_by_node(cluster, self._pending_templates()).items():
                stranded += node_stranded
                idle += node_idle
                if node_stranded > 0:
                    ns = cluster.nodes[name]
                    for g in ns.gpus:
                        if g.healthy and g.free_milli:
                            key = (ns.pool or "(none)", g.model)
                            by[key] = by.get(key, 0.0) + g.free_milli / MILLI
        else:
            stranded, idle = 0.0, max(0.0, self._capacity - self._held)
        self._stranded.append((t, stranded, idle, pending))
        self._stranded_by.append((t, by))

    def _result(self, run_end: float, horizon: float | None, not_simulated: int, wall: float) -> SimResult:
        for run in self._runs.values():
            for pod_key, work in run.works.items():  # still under way: the work done until the end
                work.advance(run_end)
                run.record_work(pod_key, work)
            for pod in run.pods.values():
                pod.span.held_to = run_end
                if pod.span.busy_from is not None and pod.span.busy_to is None:
                    pod.span.busy_to = run_end
        cluster = self.policy.cluster
        pools: dict[str, tuple[int, set[str]]] = {}
        gpus: dict[tuple[str, str], int] = {}
        prices: dict[str, float] = {}
        gpu_nodes: dict[str, tuple[str, str | None, int]] = {}
        capacity = 0.0
        if cluster is not None:
            for ns in cluster.nodes.values():
                if not ns.gpus:
                    continue
                gpu_nodes[ns.name] = (ns.pool or "(none)", ns.gpu_model, len(ns.gpus))
                for g in ns.gpus:
                    key = (ns.pool or "(none)", g.model)
                    gpus[key] = gpus.get(key, 0) + 1
                    prices.setdefault(g.model, cluster.catalog.price(g.model))
                name = ns.pool or "(none)"
                count, models = pools.get(name, (0, set()))
                pools[name] = (count + len(ns.gpus), models | ({ns.gpu_model} if ns.gpu_model else set()))
            capacity = cluster.gpu_capacity()
        notes: list[str] = []
        if self._pending:
            first = next(iter(self._pending))
            why = self.last_pending_reason.get(first)
            notes.append(f"{len(self._pending)} job(s) still waiting for pods at the end, e.g. {first}"
                         + (f": {why}" if why else ""))
        return SimResult(
            scenario=self.scenario, policy=self.policy.name,
            window_s=horizon if horizon is not None else run_end, run_end=run_end, capacity=capacity,
            pools=[PoolInfo(n, c, tuple(sorted(m))) for n, (c, m) in sorted(pools.items())],
            jobs=[r.record for r in self._runs.values()], spans=self._spans, stranded=self._stranded,
            events=self.events, cycles=self.cycles, wall_s=wall, not_simulated=not_simulated, notes=notes,
            gpus=gpus, prices=prices, stranded_by=self._stranded_by, gpu_nodes=gpu_nodes)


def simulate_jobs(policy: Policy, jobs: Sequence[SimJob], config: SimConfig | None = None, *,
                  scenario: str = "", progress: Progress | None = None) -> SimResult:
    """Run ``jobs`` under ``policy`` and return what happened."""
    return Simulator(policy, jobs, config, scenario=scenario, progress=progress).run()
