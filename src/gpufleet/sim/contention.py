"""Contention on software-shared GPUs: tenants of a time-sliced (or fractionally shared) GPU take turns, so when
what they would keep busy alone adds up to more than the GPU, each runs at its share of the GPU's busy time.

Each working pod on such a GPU is a tenant with a demand (busy whole-GPU equivalents, split evenly over the shared
GPUs it holds). A GPU's load is the sum of its tenants' demands; a tenant on a GPU loaded above 1 gets
``demand / load`` of it, so its work advances at ``1 / load`` of its own pace (processor sharing, which is what
CUDA time-slicing approaches for kernels of equal length). A pod on several shared GPUs goes at the pace of its
most loaded one. Exclusive devices (whole GPUs, MIG instances) are never contended.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence


class Contention:
    __slots__ = ("_load",)

    def __init__(self) -> None:
        self._load: dict[str, dict[str, float]] = {}  # GPU -> tenant (a pod) -> demand on that GPU

    def add(self, tenant: str, gpus: Sequence[str], demand: float) -> None:
        if not gpus:
            return
        part = demand / len(gpus)
        for g in gpus:
            self._load.setdefault(g, {})[tenant] = part

    def remove(self, tenant: str, gpus: Iterable[str]) -> None:
        for g in gpus:
            tenants = self._load.get(g)
            if tenants is not None:
                tenants.pop(tenant, None)
                if not tenants:
                    del self._load[g]

    def load(self, gpu: str) -> float:
        tenants = self._load.get(gpu)
        return sum(tenants.values()) if tenants else 0.0

    def pace(self, gpus: Iterable[str]) -> float:
        """The share of its own pace a tenant on ``gpus`` runs at now: 1 unless one of them is loaded above 1."""
        worst = max((self.load(g) for g in gpus), default=0.0)
        return 1.0 / worst if worst > 1.0 else 1.0

    def tenants(self, gpus: Iterable[str]) -> set[str]:
        out: set[str] = set()
        for g in gpus:
            out.update(self._load.get(g, ()))
        return out


class Work:
    """One piece of work that ends on its own: a gang's (every pod working together) or one pod's of a job whose
    pods work apart. ``remaining``: seconds of work left at its own pace (None: it runs until the end of the
    run); ``timed``: whether contention moves its end (a batch job's work) or not (a service or a notebook stays
    as long whatever share it gets; it still loads the GPUs it shares). ``done``: seconds of work done at its own
    pace so far; ``version`` changes whenever its end moves."""

    __slots__ = ("done", "key", "pace", "remaining", "since", "tenants", "timed", "version")

    def __init__(self, key: tuple[str, str], tenants: Sequence[tuple[str, Sequence[str], float]],
                 remaining: float | None, timed: bool) -> None:
        self.key = key  # (job, pod): the pod is "" for a gang's work
        self.tenants = [(pod, tuple(gpus), demand) for pod, gpus, demand in tenants if gpus]
        self.remaining = remaining
        self.timed = timed
        self.pace = 1.0
        self.since = 0.0
        self.done = 0.0
        self.version = 0

    @property
    def gpus(self) -> list[str]:
        return [g for _, gpus, _ in self.tenants for g in gpus]

    def advance(self, t: float) -> None:
        step = max(0.0, t - self.since) * self.pace
        self.done += step
        if self.remaining is not None:
            self.remaining = max(0.0, self.remaining - step)
        self.since = t


class WorkClock:
    """Works and the contention between them: starting or stopping one re-paces the works sharing its GPUs, and
    ``reschedule(work, end)`` is called for every timed work whose end moved (and for every new work)."""

    def __init__(self, reschedule: Callable[[Work, float], None]) -> None:
        self.contention = Contention()
        self._reschedule = reschedule
        self._of_tenant: dict[str, Work] = {}

    def start(self, work: Work, t: float) -> None:
        work.since = t
        for pod, gpus, demand in work.tenants:
            self.contention.add(pod, gpus, demand)
            self._of_tenant[pod] = work
        work.pace = self.contention.pace(work.gpus)
        if work.remaining is not None:
            # An untimed work's end is fixed from now (it is there that long): only its pace, the work done, varies.
            self._reschedule(work, t + work.remaining / work.pace if work.timed else t + work.remaining)
        self._repace(self.contention.tenants(work.gpus), t, skip=work)

    def stop(self, work: Work, t: float) -> None:
        work.advance(t)
        gpus = work.gpus
        for pod, pod_gpus, _ in work.tenants:
            self.contention.remove(pod, pod_gpus)
            self._of_tenant.pop(pod, None)
        self._repace(self.contention.tenants(gpus), t, skip=work)

    def _repace(self, tenants: Iterable[str], t: float, skip: Work) -> None:
        seen: set[tuple[str, str]] = {skip.key}
        for tenant in tenants:
            work = self._of_tenant.get(tenant)
            if work is None or work.key in seen:
                continue
            seen.add(work.key)
            work.advance(t)
            pace = self.contention.pace(work.gpus)
            if pace == work.pace:
                continue
            work.pace = pace
            if work.timed and work.remaining is not None:
                work.version += 1
                self._reschedule(work, t + work.remaining / pace)
