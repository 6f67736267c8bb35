"""Kueue scenarios as users write them: YAML manifests in, admission decisions out.

``Scenario(yaml)`` loads the manifests (failing on any manifest error), submits every workload and runs
cycles like ``gpufleet plan`` does: between cycles the pods of preempted workloads are gone (the driver
confirms the eviction and the workload is requeued).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gpufleet.api.manifests import Manifests
from gpufleet.cluster.build import build_workloads
from gpufleet.cluster.state import ClusterState
from gpufleet.scheduling.kueue import KueuePolicy, PlacerFactory
from gpufleet.scheduling.types import Decisions
from tests.conftest import manifests as load

T0 = "2024-01-01T00:00:"


def ts(second: int) -> str:
    """A creation timestamp ``second`` seconds after a fixed origin (0-59)."""
    return f"{T0}{second:02d}Z"


def job(name: str, queue: str | None, *, cpu: str = "1", count: int = 1, ns: str = "default", created: int = 0,
        priority_class: str | None = None, gpu: int = 0, extra_spec: str = "", annotations: str = "",
        min_parallelism: int | None = None, labels: str = "") -> str:
    """A batch/v1 Job of ``count`` identical pods."""
    label_lines = []
    if queue is not None:
        label_lines.append(f"kueue.x-k8s.io/queue-name: {queue}")
    if priority_class is not None:
        label_lines.append(f"kueue.x-k8s.io/priority-class: {priority_class}")
    if labels:
        label_lines.append(labels)
    meta_labels = ("\n  labels: {" + ", ".join(label_lines) + "}") if label_lines else ""
    meta_ann = f"\n  annotations: {{kueue.x-k8s.io/job-min-parallelism: \"{min_parallelism}\"}}" \
        if min_parallelism is not None else ""
    limits = f", limits: {{nvidia.com/gpu: {gpu}}}" if gpu else ""
    template_ann = f"\n    metadata: {{annotations: {{{annotations}}}}}" if annotations else ""
    return f"""---
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: {ns}
  creationTimestamp: "{ts(created)}"{meta_labels}{meta_ann}
spec:
  parallelism: {count}
  template:{template_ann}
    spec:{extra_spec}
      containers:
      - name: main
        image: busybox
        resources: {{requests: {{cpu: "{cpu}"}}{limits}}}
"""


@dataclass
class Scenario:
    text: str
    cluster: bool = False  # build a ClusterState from the Node objects
    placer_factory: PlacerFactory | None = None
    now: float = 0.0
    history: list[Decisions] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.manifests: Manifests = load(self.text)
        errors = self.manifests.problems.errors
        assert not errors, "\n".join(str(e) for e in errors)
        self.workloads = build_workloads(self.manifests)
        assert not self.manifests.problems.errors
        state = ClusterState.from_nodes(self.manifests.nodes) if self.cluster else None
        self.policy = KueuePolicy(self.manifests, state, placer_factory=self.placer_factory)
        self.now = max((w.created for w in self.workloads), default=0.0) + 1.0
        for w in self.workloads:
            self.policy.submit(w, self.now)

    def add(self, text: str) -> None:
        """Submit the workloads of ``text`` now (read along with the scenario's manifests, so that priority
        classes resolve)."""
        m = load(self.text + text)
        assert not m.problems.errors, "\n".join(str(e) for e in m.problems.errors)
        known = {w.key for w in self.workloads}
        for w in build_workloads(m):
            if w.key not in known:
                self.workloads.append(w)
                self.policy.submit(w, self.now)

    def cycle(self, *, confirm_evictions: bool = True) -> Decisions:
        d = self.policy.cycle(self.now)
        self.history.append(d)
        if confirm_evictions:
            for p in d.preempted:
                self.policy.evicted(p.workload, self.now, requeue=True, reason=p.reason)
        self.now += 1.0
        return d

    def run(self, cycles: int) -> list[Decisions]:
        return [self.cycle() for _ in range(cycles)]

    def until_stable(self, cap: int = 50) -> list[Decisions]:
        """Cycles until the next one would change nothing (``gpufleet plan --until-stable``'s rule)."""
        out = []
        for _ in range(cap):
            out.append(self.cycle())
            if self.policy.settled():
                break
        return out

    # ---- views ---------------------------------------------------------------------------------------------
    def admitted(self) -> set[str]:
        """Workloads holding quota now (names without namespace when it is ``default``)."""
        return {_short(i.key) for i in self.policy.state.admitted_infos()}

    def pending(self) -> dict[str, str]:
        return {_short(p.workload): p.reason for p in self.policy.pending_report()}

    def usage(self, cq: str, flavor: str = "default", resource: str = "cpu") -> int:
        return self.policy.usage()[cq].get(flavor, {}).get(resource, 0)

    def flavors_of(self, workload: str) -> dict[str, str]:
        info = self.policy.info(workload if "/" in workload else f"default/{workload}")
        assert info is not None and info.admission is not None, f"{workload} is not admitted"
        return info.admission.flavors()


def _short(key: str) -> str:
    return key.removeprefix("default/")


class _Named(Protocol):
    @property
    def workload(self) -> str: ...


def names(items: Sequence[_Named]) -> list[str]:
    return [_short(item.workload) for item in items]


def preempted(d: Decisions) -> dict[str, tuple[str, str]]:
    """victim -> (preemptor, reason)."""
    return {_short(p.workload): (_short(p.preemptor), p.reason) for p in d.preempted}
