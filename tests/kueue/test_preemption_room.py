"""A preemption makes room for its preemptor on nodes, not only in quota (DESIGN.md, the cycle's step 5; Kueue's
preemption with topology-aware scheduling asks that the preemptor fit in quota and topology once its targets are
gone).

The livelock these tests pin down: a reclamation chosen on quota alone evicted notebooks whose nodes the preemptor
still could not use; the preemptor failed placement, the notebooks were admitted again in the same instant, and the
next cycle evicted them again, without end (``policy gpufleet kept deciding`` in the simulator; ``gpufleet plan
--until-stable`` ran to its cap). Ways the room could still be lost are pinned down too: a later entry of the same
cycle, or a victim coming back in the next, placed in it (the room is held until its preemptor is processed), and
the preemptor's next flavor search starting over at a flavor that fits in quota but not on nodes (it resumes at the
flavor it made room in).
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpufleet.api.objects import GPU
from gpufleet.cluster.devices import DeviceGrant
from gpufleet.cluster.state import ClusterState, Placement
from gpufleet.scheduling.kueue import KueuePolicy, PlacerFactory
from gpufleet.scheduling.kueue.cycle import NO_ROOM_MESSAGE
from gpufleet.scheduling.kueue.preemption import IN_COHORT_FAIR_SHARING
from gpufleet.scheduling.kueue.room import HOLD_PREFIX, Room, hold_room, release_holds
from gpufleet.scheduling.types import Decisions
from gpufleet.sim.engine import simulate_jobs
from gpufleet.sim.model import SimConfig, SimulationError
from gpufleet.sim.policies import make_policy
from tests.kueue.scenario import Scenario, job, names, preempted
from tests.kueue.test_cohorts import FLAVOR, cq
from tests.kueue.test_fair_sharing import FAIR
from tests.kueue.test_gangs import PLACERS, TWO_NODES, node, placed_pods
from tests.sim.helpers import cluster_of, jobs_of, load, pool

RECLAIM = "\n  preemption: {reclaimWithinCohort: Any}"
STRICT = "\n  queueingStrategy: StrictFIFO"

# Two nodes of 4 CPUs. research (nominal 8) runs "base", one 3-CPU pod on each node; dev (nominal 0) borrows
# research's last 2 CPUs for two 1-CPU notebooks, one beside each "base" pod. Every node is full.
FULL = (TWO_NODES + job("base", "research", cpu="3", count=2, created=1) + job("nb-1", "dev", cpu="1", created=2)
        + job("nb-2", "dev", cpu="1", created=3))


def test_a_reclaim_that_frees_no_room_on_nodes_evicts_nothing() -> None:
    # "train" (2 CPUs) is research's own quota: reclaiming both notebooks makes it fit in quota, but leaves 1 CPU
    # free on each node, and it needs 2 on one node. Before the fix: the notebooks were evicted, "train" failed
    # placement, the notebooks came back, and StrictFIFO kept "train" at the head to evict them again.
    s = Scenario(FLAVOR + cq("research", 8, spec=STRICT + RECLAIM) + cq("dev", 0) + FULL, cluster=True)
    s.run(2)
    assert s.admitted() == {"base", "nb-1", "nb-2"}
    s.add(job("train", "research", cpu="2", created=4))
    cycles = s.until_stable(cap=20)
    assert len(cycles) <= 2 and s.policy.settled()
    assert [preempted(d) for d in cycles] == [{}] * len(cycles)
    assert s.admitted() == {"base", "nb-1", "nb-2"}
    why = s.pending()["train"]
    assert "no preemption makes room on nodes" in why and "2 Insufficient cpu" in why
    # Room on nodes appears: it is admitted.
    s.policy.finish("default/base", s.now)
    s.until_stable()
    assert s.admitted() == {"train", "nb-1", "nb-2"}


FLAVORS_AB = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: pool-a}
spec: {nodeLabels: {pool: a}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: pool-b}
spec: {nodeLabels: {pool: b}}
"""


def queue(name: str, flavors: list[tuple[str, int]], spec: str = "") -> str:
    listed = ", ".join(f"{{name: {f}, resources: [{{name: cpu, nominalQuota: {n}}}]}}" for f, n in flavors)
    return f"""---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {{name: {name}}}
spec:
  namespaceSelector: {{}}
  cohort: pool{spec}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{listed}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {{name: {name}, namespace: default}}
spec: {{clusterQueue: {name}}}
"""


def test_best_effort_fifo_with_a_second_flavor_does_not_loop_either() -> None:
    # BestEffortFIFO (the case study's strategy): "train" fits pool-a's quota but not its node, so it is requeued
    # at once to try pool-b, where it needs a reclaim that frees no room on pool-b's nodes. Before the fix the two
    # alternated for ever: evict the notebooks on pool-b, fail on pool-a's node, the notebooks come back, ...
    text = (FLAVORS_AB + queue("research", [("pool-a", 8), ("pool-b", 8)], RECLAIM) + queue("dev", [("pool-b", 0)])
            + node("a1", labels="pool: a") + node("b1", labels="pool: b") + node("b2", labels="pool: b")
            + job("base-a", "research", cpu="3", created=1) + job("base-b", "research", cpu="3", count=2, created=2)
            + job("nb-1", "dev", cpu="1", created=3) + job("nb-2", "dev", cpu="1", created=4))
    s = Scenario(text, cluster=True)
    s.run(3)
    assert s.admitted() == {"base-a", "base-b", "nb-1", "nb-2"}
    assert s.flavors_of("nb-1") == s.flavors_of("nb-2") == {"cpu": "pool-b"}
    s.add(job("train", "research", cpu="2", created=5))
    cycles = s.until_stable(cap=20)
    assert len(cycles) <= 3 and s.policy.settled()
    assert all(not d.preempted and not d.admitted for d in cycles)
    assert "no preemption makes room on nodes" in s.pending()["train"]
    info = s.policy.info("default/train")
    assert info is not None and info.placement_parked  # it waits for nodes: a release of nodes wakes it


@pytest.mark.parametrize("research_b", [4, 8], ids=["quota-reclaim", "placement-only"])
def test_a_preemptor_comes_back_to_the_flavor_it_made_room_in(research_b: int) -> None:
    # "train" (2 CPUs) fits pool-a's quota but not its node (1 CPU free beside "base-a"), and nothing there may be
    # evicted; in pool-b the notebooks borrow the whole node: evicting one makes room. With research's pool-b quota
    # at 4 the eviction is a quota reclaim, at 8 a placement preemption. Before the fix the next search started over
    # at pool-a (fits in quota, not on nodes), the notebook came back into its room, and "train" evicted it again.
    text = (FLAVORS_AB + queue("research", [("pool-a", 8), ("pool-b", research_b)], RECLAIM)
            + queue("dev", [("pool-b", 0)]) + node("a1", labels="pool: a") + node("b1", labels="pool: b")
            + job("base-a", "research", cpu="3", created=1) + job("nb-1", "dev", cpu="2", created=2)
            + job("nb-2", "dev", cpu="2", created=3))
    s = Scenario(text, cluster=True)
    s.run(2)
    assert s.admitted() == {"base-a", "nb-1", "nb-2"}
    s.add(job("train", "research", cpu="2", created=4))
    cycles = s.until_stable(cap=20)
    assert s.policy.settled() and len(cycles) <= 4
    evictions = [p for d in cycles for p in d.preempted]
    assert [(p.workload, p.preemptor) for p in evictions] == [("default/nb-2", "default/train")]
    assert s.admitted() == {"base-a", "nb-1", "train"}
    assert s.flavors_of("train") == {"cpu": "pool-b"}


def test_victims_do_not_come_back_into_the_room_before_their_preemptor() -> None:
    # One node of 4 CPUs; research (nominal 2) borrows a third CPU from dev (nominal 4). dev's "gang" (3 pods of 1
    # CPU) fits dev's quota but not the node: it reclaims "r-2" and "r-3". In the next cycle "r-2", older and of
    # the same priority, is processed first and fits research's quota again: before the fix it was placed in the
    # room, "gang" waited for nodes and the evictions were for nothing. The room is held for "gang" until it is
    # processed (kube-scheduler's nominated node).
    s = Scenario(FLAVOR + cq("research", 2, spec=RECLAIM) + cq("dev", 4, spec=RECLAIM) + node("n1")
                 + job("r-1", "research", created=1) + job("r-2", "research", created=2)
                 + job("r-3", "research", created=3), cluster=True)
    s.run(3)
    assert s.admitted() == {"r-1", "r-2", "r-3"}
    s.add(job("gang", "dev", count=3, created=4))
    d = s.cycle()
    assert preempted(d) == {"r-2": ("gang", "InCohortReclamation"), "r-3": ("gang", "InCohortReclamation")}
    d = s.cycle()
    assert names(d.admitted) == ["gang"]
    s.until_stable()
    assert s.admitted() == {"r-1", "gang"}
    assert "nodes are available" in s.pending()["r-2"]


def test_a_held_room_does_not_stop_a_workload_of_higher_priority() -> None:
    # As above, but before "gang" is processed again a workload of higher priority arrives in a third queue: it is
    # processed first, ignores the room held for "gang" (kube-scheduler's rule for nominated pods) and is placed
    # there.
    urgent = ("---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: WorkloadPriorityClass\nmetadata: {name: urgent}\n"
              "value: 1000\n")
    s = Scenario(FLAVOR + urgent + cq("research", 2, spec=RECLAIM) + cq("dev", 4, spec=RECLAIM) + cq("ops", 3)
                 + node("n1")
                 + job("r-1", "research", created=1) + job("r-2", "research", created=2)
                 + job("r-3", "research", created=3), cluster=True)
    s.run(3)
    s.add(job("gang", "dev", count=3, created=4))
    assert set(preempted(s.cycle())) == {"r-2", "r-3"}
    s.add(job("hurry", "ops", count=3, created=5, priority_class="urgent"))
    d = s.cycle()
    assert names(d.admitted) == ["hurry"]


@pytest.mark.parametrize("placer", PLACERS)
def test_the_victims_are_those_whose_nodes_the_preemptor_can_use(placer: PlacerFactory | None) -> None:
    # research needs 1 CPU of quota back: Kueue's candidate order picks the newest notebook, "nb-small" (1 CPU),
    # which frees 1 CPU, on a node where "train" (2 CPUs) still does not fit. "nb-big" (3 CPUs) frees a node and
    # makes quota fit too, so it alone is evicted, and "nb-small" keeps running.
    s = Scenario(FLAVOR + cq("research", 8, spec=RECLAIM) + cq("dev", 0) + TWO_NODES
                 + job("base", "research", cpu="3", created=1) + job("nb-big", "dev", cpu="3", created=2),
                 cluster=True, placer_factory=placer)
    s.run(2)
    s.add(job("nb-small", "dev", cpu="1", created=3))
    s.run(1)
    assert s.admitted() == {"base", "nb-big", "nb-small"}
    s.add(job("train", "research", cpu="2", created=4))
    d = s.cycle()
    assert preempted(d) == {"nb-big": ("train", "InCohortReclamation")}
    assert "Pending the preemption of 1 workload(s)" in s.pending()["train"]
    d = s.cycle()
    assert names(d.admitted) == ["train"]
    assert set(placed_pods(s, "train").values()) == set(placed_pods(s, "base").values()) ^ {"n1", "n2"}
    assert s.admitted() == {"base", "nb-small", "train"}


def _devices(cluster: ClusterState) -> list[tuple[str | None, dict[str, tuple[int, int]]]]:
    return [(g.holder, dict(g.fractions)) for ns in cluster for g in ns.gpus]


@pytest.mark.parametrize("third", ["fraction", "whole"])
def test_a_hold_takes_what_the_plan_needs_beyond_what_its_targets_free(third: str) -> None:
    # One node of 4 H100s: the target holds GPU 0 and 300 thousandths (20 GiB) of GPU 2. The preemptor's plan takes
    # GPUs 0 and 1, and of GPU 2 half (30 GiB) or all of it. The hold leaves the target's devices alone and takes
    # GPU 1 and what the plan takes of GPU 2 beyond the target's fraction; GPU 3 stays free for others.
    cluster = cluster_of(pool("n", 1, 4, model="H100-SXM5-80GB"))
    before = (_devices(cluster), dict(cluster.nodes["n-0"].used))
    freed = [cluster.allocate("ns/t-0", "n-0", {GPU: 1, "cpu": 1000}, [DeviceGrant("whole", 0)]),
             cluster.allocate("ns/t-1", "n-0", {"cpu": 1000}, [DeviceGrant("fraction", 2, milli=300,
                                                                             memory_mib=20480)])]
    held_before = (_devices(cluster), dict(cluster.nodes["n-0"].used))
    gpu2 = (DeviceGrant("fraction", 2, milli=500, memory_mib=30720) if third == "fraction"
            else DeviceGrant("whole", 2))
    plan = [Placement("ns/p-0", "n-0", {GPU: 2, "cpu": 3000}, (DeviceGrant("whole", 0), DeviceGrant("whole", 1)), ()),
            Placement("ns/p-1", "n-0", {GPU: 1 if third == "whole" else 0, "cpu": 500}, (gpu2,), ())]
    holds = hold_room(cluster, "ns/p", Room([], plan=plan, freed=freed))
    assert holds == [HOLD_PREFIX + "ns/p@n-0"]
    hold = cluster.placements[holds[0]]
    memory = cluster.nodes["n-0"].gpus[2].memory_mib
    expected_gpu2 = (DeviceGrant("fraction", 2, milli=200, memory_mib=10240) if third == "fraction"
                     else DeviceGrant("fraction", 2, milli=700, memory_mib=memory - 20480))
    assert hold.grants == (DeviceGrant("whole", 1), expected_gpu2)
    assert hold.requests == ({GPU: 1, "cpu": 1500} if third == "fraction" else {GPU: 2, "cpu": 1500})
    assert cluster.nodes["n-0"].gpus[3].is_free and cluster.nodes["n-0"].gpus[0].holder == "ns/t-0"
    cluster.check_invariants()
    release_holds(cluster, holds)
    assert (_devices(cluster), dict(cluster.nodes["n-0"].used)) == held_before
    for p in freed:
        cluster.release(p.pod)
    assert (_devices(cluster), dict(cluster.nodes["n-0"].used)) == before


# ---- the simulator: notebooks borrowing H100s, reclaimed for research --------------------------------------

SIM_QUEUES = """
apiVersion: v1
kind: Namespace
metadata: {name: research}
---
apiVersion: v1
kind: Namespace
metadata: {name: data-science}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: research-training}
value: 500
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: dev-best-effort}
value: 100
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: h100}
spec: {nodeLabels: {pool: h100}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: research}
spec:
  cohort: company
  namespaceSelector: {}
  queueingStrategy: STRATEGY
  preemption: {withinClusterQueue: LowerPriority, reclaimWithinCohort: Any}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: h100
      resources:
      - {name: cpu, nominalQuota: 1000}
      - {name: memory, nominalQuota: 10Ti}
      - {name: nvidia.com/gpu, nominalQuota: 8}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: dev}
spec:
  cohort: company
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: h100
      resources:
      - {name: cpu, nominalQuota: 1000}
      - {name: memory, nominalQuota: 10Ti}
      - {name: nvidia.com/gpu, nominalQuota: 0}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: research, namespace: research}
spec: {clusterQueue: research}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: dev, namespace: data-science}
spec: {clusterQueue: dev}
---
"""

H100_NODES = """
apiVersion: gpufleet.io/v1alpha1
kind: NodePool
metadata: {name: h100}
spec:
  count: 2
  namePrefix: h100
  gpu: {model: H100-SXM5-80GB, count: 4}
  cpu: "64"
  memory: 512Gi
  labels: {pool: h100}
---
"""


def sim_job(name: str, namespace: str, queue: str, priority: str, *, gpus: int, pods: int = 1, arrival: str,
            duration: str) -> str:
    return f"""
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: {namespace}
  labels: {{kueue.x-k8s.io/queue-name: {queue}, kueue.x-k8s.io/priority-class: {priority}}}
  annotations: {{sim.gpufleet.io/arrival: "{arrival}", sim.gpufleet.io/duration: "{duration}"}}
spec:
  parallelism: {pods}
  completions: {pods}
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: trainer
        resources:
          limits: {{nvidia.com/gpu: {gpus}, cpu: "1", memory: 1Gi}}
---
"""


@pytest.mark.parametrize("strategy", ["StrictFIFO", "BestEffortFIFO"])
def test_the_simulator_runs_notebooks_borrowing_h100s_through_a_reclaim(strategy: str) -> None:
    # Two nodes of 4 H100s. research's "base" holds 3 GPUs on each node for 2 h; two notebooks borrow the last GPU
    # of each node. "train" asks 2 GPUs on one node at 10 min: reclaiming the notebooks would give it quota but no
    # node. It must wait for "base" to end; the notebooks keep running.
    text = (H100_NODES + SIM_QUEUES.replace("STRATEGY", strategy)
            + sim_job("base", "research", "research", "research-training", gpus=3, pods=2, arrival="0s",
                      duration="2h")
            + sim_job("nb-1", "data-science", "dev", "dev-best-effort", gpus=1, arrival="1m", duration="4h")
            + sim_job("nb-2", "data-science", "dev", "dev-best-effort", gpus=1, arrival="2m", duration="4h")
            + sim_job("train", "research", "research", "research-training", gpus=2, arrival="10m", duration="1h"))
    m = load(text)
    result = simulate_jobs(make_policy("gpufleet", m), jobs_of(text), SimConfig(max_cycles_per_instant=100))
    by_key = {j.key: j for j in result.jobs}
    for notebook in ("data-science/nb-1", "data-science/nb-2"):
        assert [a.outcome for a in by_key[notebook].attempts] == ["succeeded"]
    train = by_key["research/train"]
    assert train.outcome == "succeeded"
    assert [a.started for a in train.attempts] == [7200.0]


PRIORITIES = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: high}
value: 500
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: low}
value: 100
---
"""


def gpu_pool(name: str, count: int, gpus: int) -> str:
    return f"""apiVersion: gpufleet.io/v1alpha1
kind: NodePool
metadata: {{name: {name}}}
spec: {{count: {count}, namePrefix: {name}, gpu: {{model: H100-SXM5-80GB, count: {gpus}}}, cpu: "64", memory: 512Gi,
        labels: {{pool: {name}}}}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {{name: {name}}}
spec: {{nodeLabels: {{pool: {name}}}}}
---
"""


def cohort_queue(name: str, quotas: list[tuple[str, int]], *, strategy: str = "BestEffortFIFO",
                 preemption: str = "withinClusterQueue: LowerPriority, reclaimWithinCohort: Any") -> str:
    """A namespace ``name`` whose LocalQueue ``q`` feeds ClusterQueue ``name`` of cohort "company", with the GPU
    quota of each flavor in order."""
    listed = "".join(f"\n    - {{name: {f}, resources: [{{name: cpu, nominalQuota: 1000}}, {{name: memory, "
                     f"nominalQuota: 10Ti}}, {{name: nvidia.com/gpu, nominalQuota: {n}}}]}}" for f, n in quotas)
    return f"""apiVersion: v1
kind: Namespace
metadata: {{name: {name}}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {{name: q, namespace: {name}}}
spec: {{clusterQueue: {name}}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {{name: {name}}}
spec:
  cohort: company
  namespaceSelector: {{}}
  queueingStrategy: {strategy}
  preemption: {{{preemption}}}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:{listed}
---
"""


def test_the_room_a_preemption_makes_is_held_for_the_rest_of_the_cycle() -> None:
    # Three nodes of 2 H100s; research (nominal 2) and dev (nominal 3) share them. At 10 min "r0" ends, freeing a
    # GPU on a node where "nb-pair" (two 1-GPU pods, low priority) has one pod, and "nb-big" (2 GPUs on one node,
    # high) arrives: it evicts "nb-pair" for that node's two GPUs. In the same cycle "r-low" (research, waiting for
    # quota until "r0" ends) is placed: before the fix it took the free GPU of that very node, "nb-big" found no
    # node once "nb-pair" was gone, and "nb-pair" had been evicted for nothing. The room is held for "nb-big" now.
    text = PRIORITIES + gpu_pool("h100", 3, 2) + cohort_queue("research", [("h100", 2)]) + cohort_queue(
        "dev", [("h100", 3)])
    for name, ns, priority, gpus, pods, arrival, duration in [
            ("r0", "research", "high", 1, 1, "0m", "10m"), ("r1", "research", "high", 1, 1, "0m", "20m"),
            ("r-low", "research", "low", 1, 1, "0m", "10m"), ("d0", "dev", "high", 1, 1, "0m", "20m"),
            ("nb-big", "dev", "high", 2, 1, "10m", "10m"), ("nb-pair", "dev", "low", 1, 2, "0m", "20m")]:
        text += sim_job(name, ns, "q", priority, gpus=gpus, pods=pods, arrival=arrival, duration=duration)
    result = simulate_jobs(make_policy("gpufleet", load(text)), jobs_of(text), SimConfig(max_cycles_per_instant=100))
    by_key = {j.key: j for j in result.jobs}
    first = by_key["dev/nb-pair"].attempts[0]
    assert (first.started, first.ended, first.outcome) == (0.0, 600.0, "preempted")
    assert [a.started for a in by_key["research/r-low"].attempts] == [600.0]
    assert [a.started for a in by_key["dev/nb-big"].attempts] == [600.0]


# ---- property: a preemption is followed by its preemptor's progress -----------------------------------------


@st.composite
def setups(draw: st.DrawFn) -> str:
    """Two ClusterQueues in a cohort over one or two flavors of GPU nodes, random quotas, strategies and preemption
    policies, and a dozen jobs (gangs included) of two priorities arriving within an hour. Classical preemption
    only: under fair sharing Kueue's own rules can loop in quota, nodes aside
    (:func:`test_fair_sharing_victims_win_the_next_tournament_as_in_kueue`), which this property would report."""
    two = draw(st.booleans())
    flavors = ["big", "small"] if two else ["big"]
    nodes = {"big": (draw(st.integers(1, 3)), draw(st.sampled_from([2, 4, 8]))),
             "small": (draw(st.integers(1, 3)), draw(st.sampled_from([1, 2, 4])))}
    text = PRIORITIES + "".join(gpu_pool(f, *nodes[f]) for f in flavors)
    for name in ("research", "dev"):
        order = draw(st.permutations(flavors))
        quotas = [(f, draw(st.integers(0, nodes[f][0] * nodes[f][1]))) for f in order]
        reclaim = draw(st.sampled_from(["Any", "LowerPriority", "Never"]))
        within = draw(st.sampled_from(["LowerPriority", "Never"]))
        borrow = reclaim != "Never" and draw(st.booleans())
        bwc = ", borrowWithinCohort: {policy: LowerPriority}" if borrow else ""
        strategy = draw(st.sampled_from(["BestEffortFIFO", "BestEffortFIFO", "StrictFIFO"]))
        text += cohort_queue(name, quotas, strategy=strategy,
                             preemption=f"withinClusterQueue: {within}, reclaimWithinCohort: {reclaim}{bwc}")
    for i in range(draw(st.integers(3, 12))):
        namespace, priority = draw(st.sampled_from(["research", "dev"])), draw(st.sampled_from(["high", "low"]))
        text += sim_job(f"j{i}", namespace, "q", priority,
                        gpus=draw(st.sampled_from([1, 1, 2, 4])), pods=draw(st.sampled_from([1, 1, 2, 3])),
                        arrival=f"{draw(st.integers(0, 6)) * 10}m", duration=f"{draw(st.integers(1, 12)) * 10}m")
    return text


# Kueue's own code, read for the two tests below (kubernetes-sigs/kueue): the fair-sharing preemption
# pkg/scheduler/preemption/fair_strategy.go (iterateWithFirstFsStrategy, iterateWithSecondFsStrategy), its rules
# pkg/scheduler/preemption/fairsharing/strategy.go (LessThanOrEqualToFinalShare: preemptor's share with its
# workload <= the target queue's share without the candidate; LessThanInitialShare: < the target's share before)
# and fairsharing/target.go (ComputeShares, ComputeTargetShareAfterRemoval); the admission order
# pkg/scheduler/fair_sharing_iterator.go (computeDRS adds each head's usage, entryComparer.less: share, priority,
# queue-order timestamp); a head with no candidates reserves nothing when reclaimWithinCohort is Any
# (scheduler.go reserveCapacityForUnreclaimablePreempt, preemption.CanAlwaysReclaim).
KUEUE_FS_LOOP = ("Kueue's own behaviour, kept: its fair-sharing rules judge each victim with the other victims of "
                 "its queue still admitted, so the first victim to come back can show a lower share than the "
                 "preemptor (site/content/en/docs/concepts/fair_sharing.md proves only that two workloads do not "
                 "preempt each other; kubernetes-sigs/kueue#14543, open, reports preemptees admitted instead of their "
                 "preemptor, there through same-queue targets and fill-back)")


def test_fair_sharing_victims_win_the_next_tournament_as_in_kueue() -> None:
    """The quota loop behind :func:`test_a_fair_sharing_reclaim_lost_to_its_victims_loops`, cycle by cycle and
    without nodes, as Kueue decides it (the references above). Cohort of 13 CPUs: research (nominal 11,
    reclaimWithinCohort Any) and dev (nominal 2), where "dev-pair" (2) and "dev-four" (4) run: dev borrows 4,
    share 4000 * 1000 // 13000 = 307. "big-job" (12) would leave research borrowing 1: share 76.

    1. Preemption: "dev-four" (most recently admitted) fails LessThanOrEqualToFinalShare, 76 > 0 (dev keeps only
       its nominal 2 without it); "dev-pair" passes it, 76 <= 153 (dev keeps 4 without it); "dev-four" then passes
       LessThanInitialShare, 76 < 153. Both are evicted; every rule held at the step it was checked.
    2. Tournament: "dev-pair" alone fits dev's nominal quota, share 0 < 76: it is admitted first, and "big-job"
       no longer fits.
    3. "big-job" finds no candidate (dev is within its nominal quota) and, with reclaimWithinCohort Any, reserves
       nothing; "dev-four" borrows again. The next cycle is step 1 again.

    The preemption search and the tournament read one share function (QuotaTree.fair_sharing_key); the loop is
    not a difference between them, nor a tie: it is Kueue's, and gpufleet keeps it rather than invent a rule."""
    s = Scenario(FLAVOR + FAIR + cq("research", 11, spec=STRICT + RECLAIM) + cq("dev", 2)
                 + job("dev-pair", "dev", count=2, created=1) + job("dev-four", "dev", cpu="4", created=2))
    s.run(2)
    assert s.admitted() == {"dev-pair", "dev-four"}
    tree = s.policy.state.tree
    cpu = ("default", "cpu")
    assert tree.fair_sharing_key("dev") == (0, 307.0)
    assert tree.fair_sharing_key("research", {cpu: 12_000}) == (0, 76.0)
    s.add(job("big-job", "research", cpu="4", count=3, created=3))
    for _ in range(2):
        d = s.cycle()
        assert preempted(d) == {"dev-pair": ("big-job", IN_COHORT_FAIR_SHARING),
                                "dev-four": ("big-job", IN_COHORT_FAIR_SHARING)}
        assert tree.fair_sharing_key("dev", {cpu: 2_000}) == (0, 0.0)  # "dev-pair" coming back
        d = s.cycle()
        assert names(d.admitted) == ["dev-pair"]
        assert s.pending()["big-job"] == "Workload no longer fits after processing another workload"
        d = s.cycle()
        assert names(d.admitted) == ["dev-four"] and not d.preempted
        assert "insufficient unused quota for cpu" in s.pending()["big-job"]
        assert s.admitted() == {"dev-pair", "dev-four"}


@pytest.mark.xfail(strict=True, raises=SimulationError, reason=KUEUE_FS_LOOP)
def test_a_fair_sharing_reclaim_lost_to_its_victims_loops() -> None:
    """In the simulator (evictions complete at once, victims are requeued in the same instant) the loop of
    :func:`test_fair_sharing_victims_win_the_next_tournament_as_in_kueue` runs until the engine's "kept deciding"
    guard. It is not a defect of gpufleet's against Kueue: Kueue decides the same on this example (see that test
    and the references above it), so it stays a strict xfail, which fails if the loop ever stops.

    research (nominal 11, StrictFIFO) has "big-job" (3 pods of 4 GPUs) at its head, before its four 1-GPU jobs;
    dev (nominal 2) runs "dev-pair" within its quota and "dev-four" on 4 borrowed GPUs. Ten nodes of 8 GPUs: nodes
    are never short."""
    text = PRIORITIES + """apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
fairSharing: {enable: true}
---
""" + gpu_pool("big", 10, 8) + cohort_queue("research", [("big", 11)], strategy="StrictFIFO") + cohort_queue(
        "dev", [("big", 2)])
    for name, ns, gpus, pods in [("big-job", "research", 4, 3), ("r1", "research", 1, 1), ("r2", "research", 1, 1),
                                 ("r3", "research", 1, 1), ("r4", "research", 1, 1), ("dev-pair", "dev", 1, 2),
                                 ("dev-four", "dev", 4, 1)]:
        text += sim_job(name, ns, "q", "high", gpus=gpus, pods=pods, arrival="0m", duration="10m")
    simulate_jobs(make_policy("gpufleet", load(text)), jobs_of(text), SimConfig(max_cycles_per_instant=200))


def short_of_nodes(reason: str) -> bool:
    """Whether a pending reason says the workload waits for nodes (the placer's "0/3 nodes are available: ...",
    alone or for a gang, or no preemption making room), not for quota."""
    return "nodes are available" in reason or NO_ROOM_MESSAGE in reason


# derandomize: the same 150 examples on every run. Random exploration (about 1 in 6,000 examples, 2026-12-06)
# reaches a reclaim loop in quota alone that Kueue's rules make too (a borrowing head admitted first, reclaimed by
# a lower-priority workload within its nominal quota, which its own queue's head then evicts while borrowing):
# that is Kueue's behaviour, not this property's subject, and must not make CI fail at random.
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True,
          database=None)
@given(setup=setups())
def test_no_workload_is_preempted_twice_by_the_same_preemptor_without_progress(setup: str) -> None:
    """Whatever the cohort, in the simulator (evictions complete at once): no (preemptor, victim) pair comes back
    within one instant; once its victims are gone, a preemptor does not wait for nodes in that instant unless a
    workload other than its victims was admitted first, or one of higher priority in the same cycle (the room it
    made was on nodes it can use, and held for it against all others); and the run never hits the engine's "kept
    deciding" guard (a SimulationError).

    Waiting for quota after a preemption is not asked against: Kueue's quota rules allow it (a head of another
    ClusterQueue ordered first may take or reserve the quota the evictions freed)."""
    m = load(setup)
    policy = make_policy("gpufleet", m)
    assert isinstance(policy, KueuePolicy)
    history: list[tuple[float, Decisions]] = []
    priority: dict[str, int] = {}  # of the preemptors and the admitted workloads
    cycle = policy.cycle

    def recorded(now: float) -> Decisions:
        d = cycle(now)
        history.append((now, d))
        for key in [a.workload for a in d.admitted] + [p.preemptor for p in d.preempted if p.preemptor]:
            info = policy.info(key)
            assert info is not None
            priority[key] = info.priority
        return d

    policy.cycle = recorded  # type: ignore[method-assign]
    simulate_jobs(policy, jobs_of(setup), SimConfig(max_cycles_per_instant=200, samples=0))
    pairs: Counter[tuple[float, str, str]] = Counter()
    for i, (now, d) in enumerate(history):
        victims: dict[str, set[str]] = {}
        for p in d.preempted:
            if p.preemptor:  # waitForPodsReady evictions have none
                victims.setdefault(p.preemptor, set()).add(p.workload)
                pairs[(now, p.preemptor, p.workload)] += 1
        for preemptor, gone in victims.items():
            event("preemption")
            for later_now, later in history[i + 1:]:
                if later_now != now:
                    break
                admitted = {a.workload for a in later.admitted}
                if preemptor in admitted:
                    event("preemptor admitted in the same instant")
                    break
                waiting = [x.reason for x in later.pending if x.workload == preemptor]
                if any(priority[w] > priority[preemptor] for w in admitted - gone):
                    # Processed before it maybe: a workload of higher priority ignores the room held for it (as
                    # kube-scheduler's nominated pods bind only those of lower or equal priority) and may take it.
                    event("room taken by a workload of higher priority")
                    break
                assert not any(short_of_nodes(r) for r in waiting), (
                    f"{preemptor} preempted {sorted(gone)} at t={now:.0f}s, then waited for nodes: {waiting}")
                if admitted - gone:
                    break  # another workload was admitted first: it may have taken the room
    repeated = {k: n for k, n in pairs.items() if n > 1}
    assert not repeated, f"preempted more than once by the same preemptor in one instant: {repeated}"


def test_a_preemptor_skipped_for_quota_comes_back_to_the_flavor_it_made_room_in() -> None:
    """The example hypothesis found for the property above. Flavors "small" (one node of 4 H100s) and "big" (two
    nodes of 8); research (small 3, big 2) and dev (small 2, big 8) share them, neither reclaiming in the cohort.

    At 30 min research runs "j0" on the whole small node (borrowing 1 GPU) and borrows all of big's quota ("j3",
    "j8", and "j5" of low priority). "j1" (high, 1 GPU) first gets "small", fits its quota but not its node, then
    "big", where it evicts "j5" (room on big, whose nodes have GPUs to spare). In the next cycle dev's "j2" (4 GPUs,
    within dev's nominal quota, no candidates) is processed first and reserves big's quota: "j1" no longer fits
    and is skipped. Kueue's setSkipped starts its flavor search over, and ours, knowing quota only, took it back
    to "small", where it waited for nodes while its room on big was free. It resumes at "big" and is admitted in
    the same instant."""
    text = (PRIORITIES + gpu_pool("big", 2, 8) + gpu_pool("small", 1, 4)
            + cohort_queue("research", [("small", 3), ("big", 2)],
                           preemption="withinClusterQueue: LowerPriority, reclaimWithinCohort: Never")
            + cohort_queue("dev", [("small", 2), ("big", 8)],
                           preemption="withinClusterQueue: LowerPriority, reclaimWithinCohort: Never"))
    for name, ns, priority, gpus, pods, arrival, duration in [
            ("j0", "research", "high", 4, 1, "0m", "40m"), ("j1", "research", "high", 1, 1, "30m", "10m"),
            ("j2", "dev", "high", 4, 1, "10m", "10m"), ("j3", "research", "high", 2, 2, "0m", "40m"),
            ("j4", "dev", "high", 1, 1, "30m", "10m"), ("j5", "research", "low", 2, 1, "0m", "10m"),
            ("j6", "research", "high", 1, 1, "0m", "10m"), ("j7", "research", "high", 1, 1, "0m", "20m"),
            ("j8", "research", "high", 4, 1, "0m", "40m")]:
        text += sim_job(name, ns, "q", priority, gpus=gpus, pods=pods, arrival=arrival, duration=duration)
    policy = make_policy("gpufleet", load(text))
    history: list[tuple[float, Decisions]] = []
    cycle = policy.cycle

    def recorded(now: float) -> Decisions:
        d = cycle(now)
        history.append((now, d))
        return d

    policy.cycle = recorded  # type: ignore[method-assign]
    result = simulate_jobs(policy, jobs_of(text), SimConfig(max_cycles_per_instant=100, samples=0))
    instant = [d for now, d in history if now == 1800.0]
    first = next(i for i, d in enumerate(instant) if d.preempted)
    assert [(p.workload, p.preemptor) for d in instant for p in d.preempted] == [("research/j5", "research/j1")]
    after = [([a.workload for a in d.admitted], {x.workload: x.reason for x in d.pending}.get("research/j1"))
             for d in instant[first + 1:]]
    # Skipped for quota (dev's "j2" reserves big's), then admitted in the room, never waiting for nodes.
    assert after[0] == ([], "Workload no longer fits after processing another workload")
    assert after[1] == (["research/j1"], None)
    admission = next(a for a in instant[first + 2].admitted if a.workload == "research/j1")
    assert admission.flavors == {"cpu": "big", "memory": "big", "nvidia.com/gpu": "big"}
    j1 = next(j for j in result.jobs if j.key == "research/j1")
    assert j1.outcome == "succeeded" and [a.started for a in j1.attempts] == [1800.0]
