"""The dashboard over manifests: the cluster as ``gpufleet plan --until-stable`` sees it.

The manifests are planned once, by :func:`gpufleet.scheduling.snapshot_plan.run_cycles` (the very code ``plan``
runs), and the view never changes: pods already bound in the input show as running (or idle, when their phase
is not Running), pods the plan placed as planned, and every workload still pending with the plan's reason.
"""

from __future__ import annotations

import time
from collections import defaultdict

from gpufleet.api.manifests import Manifests
from gpufleet.scheduling.snapshot_plan import run_cycles, settled
from gpufleet.web.clusterview import PlannerFacts, build_view
from gpufleet.web.contract import ClusterView, PreemptionView, SimulationView, SourceKind
from gpufleet.web.source_static import StaticSource

QUOTA_ONLY = ("quota only: the input has no nodes, so workloads are admitted against their ClusterQueues' quota and "
              "placed on no node; give Nodes or NodePools to plan placement too")


class FilesSource(StaticSource):
    kind: SourceKind = "files"

    def __init__(self, manifests: Manifests, title: str, *, clock: float | None = None) -> None:
        super().__init__()
        self.title = title
        result = settled(run_cycles(manifests, 1, until_stable=True))  # the cycles gpufleet plan prints
        policy = result.policy
        assert policy is not None
        pending = {p.workload: p.reason for p in (result.cycles[-1].pending if result.cycles else [])}
        preemptions: dict[str, list[PreemptionView]] = defaultdict(list)
        for i, c in enumerate(result.cycles, 1):
            for p in c.decisions.preempted:
                preemptions[p.workload].append(PreemptionView(f"cycle {i}", p.preemptor, p.reason))
        bound = {p.key for w in result.workloads for p in w.pods if p.node_name}
        planned = frozenset(a.pod for c in result.cycles for adm in c.decisions.admitted for a in adm.pods
                            if a.node is not None and a.pod not in bound)
        notes = [str(p) for p in manifests.problems.all]
        if policy.cluster is None:  # as gpufleet plan says it
            notes.insert(0, QUOTA_ONLY)
        cycles = len(result.cycles)
        notes.append(f"planned as gpufleet plan --until-stable: {cycles} cycle{'s' if cycles != 1 else ''}")
        facts = PlannerFacts(policy, policy.cluster, result.workloads, pending, planned=planned,
                             preemptions=preemptions)
        self._view = build_view("files", title, facts, generated=time.time() if clock is None else clock,
                                notes=notes)

    def cluster(self) -> ClusterView:
        return self._view

    def simulation(self) -> SimulationView | None:
        return None
