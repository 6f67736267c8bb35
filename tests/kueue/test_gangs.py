"""Gangs on nodes: every pod of a workload placed in the cycle it is admitted, or none (kueue.md §1.15 plus
gpufleet's placement), placement preemption, flavors steering placement, TAS topology requests, pods already
bound, pre-admitted Workloads, and quota-only mode."""

from __future__ import annotations

import pytest

from gpufleet.cluster.state import ClusterState
from gpufleet.scheduling.kueue import KueuePolicy, PlacerFactory, first_fit_factory
from tests.kueue.scenario import Scenario, job, names, preempted
from tests.kueue.test_cohorts import FLAVOR, cq

PLACERS = [pytest.param(None, id="engine"), pytest.param(first_fit_factory, id="first-fit")]


def node(name: str, cpu: int = 4, labels: str = "") -> str:
    extra = f", {labels}" if labels else ""
    return f"""---
apiVersion: v1
kind: Node
metadata: {{name: {name}, labels: {{kubernetes.io/hostname: {name}{extra}}}}}
status:
  allocatable: {{cpu: "{cpu}", memory: 64Gi, pods: "20"}}
"""


TWO_NODES = node("n1") + node("n2")
PRIO = """---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: high}
value: 100
"""


def placed_pods(s: Scenario, workload: str) -> dict[str, str]:
    """pod -> node, from the cluster state."""
    cluster = s.policy.cluster
    assert cluster is not None
    prefix = f"default/{workload}-"
    return {p.pod: p.node for p in cluster.placements.values() if p.pod.startswith(prefix)}


@pytest.mark.parametrize("placer", PLACERS)
def test_a_gang_is_placed_entirely_or_not_at_all(placer: PlacerFactory | None) -> None:
    s = Scenario(FLAVOR + cq("team", 100, None) + TWO_NODES + job("fits", "team", cpu="2", count=3, created=1) +
                 job("too-big", "team", cpu="2", count=5, created=2), cluster=True, placer_factory=placer)
    d = s.cycle()
    assert names(d.admitted) == ["fits"]
    assert len(d.admitted[0].pods) == 3 and all(p.node in ("n1", "n2") for p in d.admitted[0].pods)
    assert len(placed_pods(s, "fits")) == 3
    s.run(2)
    assert "too-big" in s.pending() and placed_pods(s, "too-big") == {}
    assert s.usage("team") == 6000  # quota is only charged for what was admitted


@pytest.mark.parametrize("placer", PLACERS)
def test_quota_fits_but_nodes_do_not_then_placement_preemption(placer: PlacerFactory | None) -> None:
    text = FLAVOR + PRIO + cq("team", 100, None, spec="\n  preemption: {withinClusterQueue: LowerPriority}")
    s = Scenario(text + TWO_NODES + job("low", "team", cpu="2", count=4, created=1), cluster=True,
                 placer_factory=placer)
    s.cycle()
    assert len(placed_pods(s, "low")) == 4
    s.add(job("high", "team", cpu="2", count=2, priority_class="high", created=2))
    d = s.cycle()
    assert preempted(d) == {"low": ("high", "InClusterQueue")}
    assert placed_pods(s, "low") == {}  # the eviction was confirmed: the whole gang is gone
    d = s.cycle()
    assert names(d.admitted) == ["high"] and len(placed_pods(s, "high")) == 2


@pytest.mark.parametrize("placer", PLACERS)
def test_nodes_short_and_no_preemption_allowed_leaves_it_pending_with_the_reason(
        placer: PlacerFactory | None) -> None:
    s = Scenario(FLAVOR + PRIO + cq("team", 100, None) + TWO_NODES +
                 job("low", "team", cpu="4", count=2, created=1), cluster=True, placer_factory=placer)
    s.cycle()
    s.add(job("high", "team", cpu="1", priority_class="high", created=2))
    d = s.cycle()
    assert not d.preempted and not d.admitted
    assert "nodes are available" in s.pending()["high"]
    s.policy.finish("default/low", s.now)  # node capacity is released: the parked workload is retried
    assert names(s.cycle().admitted) == ["high"]


POOLS = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: pool-a}
spec: {nodeLabels: {pool: a}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: pool-b}
spec: {nodeLabels: {pool: b}, topologyName: racks}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: Topology
metadata: {name: racks}
spec:
  levels: [{nodeLabel: example.com/rack}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: pool-a
      resources: [{name: cpu, nominalQuota: 2}]
    - name: pool-b
      resources: [{name: cpu, nominalQuota: 100}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: team, namespace: default}
spec: {clusterQueue: team}
""" + node("a1", labels="pool: a") + node("b1", labels="pool: b, example.com/rack: r1") + node(
    "b2", labels="pool: b, example.com/rack: r1") + node("b3", labels="pool: b, example.com/rack: r2") + node(
    "b4", labels="pool: b, example.com/rack: r2")


@pytest.mark.parametrize("placer", PLACERS)
def test_the_assigned_flavor_steers_placement(placer: PlacerFactory | None) -> None:
    s = Scenario(POOLS + job("w", "team", cpu="2", count=2), cluster=True, placer_factory=placer)
    s.cycle()
    assert s.flavors_of("w") == {"cpu": "pool-b"}  # pool-a's quota is too small
    assert set(placed_pods(s, "w").values()) <= {"b1", "b2", "b3", "b4"}


@pytest.mark.parametrize("placer", PLACERS)
def test_required_topology_keeps_the_gang_in_one_rack(placer: PlacerFactory | None) -> None:
    bound = """---
apiVersion: v1
kind: Pod
metadata: {name: squatter}
spec:
  nodeName: b1
  containers: [{name: c, image: x, resources: {requests: {cpu: "2"}}}]
"""
    tas = "kueue.x-k8s.io/podset-required-topology: example.com/rack"
    s = Scenario(POOLS + bound + job("gang", "team", cpu="2", count=4, annotations=tas), cluster=True,
                 placer_factory=placer)
    s.cycle()
    # Rack r1 has 6 free cpu after the squatter, r2 has 8: only r2 holds the whole gang.
    assert set(placed_pods(s, "gang").values()) == {"b3", "b4"}


def test_a_topology_request_needs_a_flavor_with_a_topology() -> None:
    tas = "kueue.x-k8s.io/podset-preferred-topology: example.com/rack"
    s = Scenario(POOLS + job("w", "team", cpu="1", annotations=tas))
    s.cycle()
    assert s.flavors_of("w") == {"cpu": "pool-b"}  # pool-a has quota but no topology


def test_bound_pods_hold_node_capacity_and_count_as_usage() -> None:
    bound = """---
apiVersion: v1
kind: Pod
metadata: {name: running, labels: {kueue.x-k8s.io/queue-name: team}}
spec:
  nodeName: n1
  containers: [{name: c, image: x, resources: {requests: {cpu: "3"}}}]
status: {phase: Running}
"""
    s = Scenario(FLAVOR + cq("team", 10, None) + TWO_NODES + bound + job("pair", "team", cpu="2", count=2),
                 cluster=True)
    assert s.usage("team") == 3000
    assert s.policy.cluster is not None and s.policy.cluster.nodes["n1"].used["cpu"] == 3000
    s.cycle()
    assert set(placed_pods(s, "pair").values()) == {"n2"}


def test_pre_admitted_workload_holds_its_quota_from_the_start() -> None:
    admitted = """---
apiVersion: kueue.x-k8s.io/v1beta1
kind: Workload
metadata: {name: old, namespace: default, creationTimestamp: "2024-01-01T00:00:00Z"}
spec:
  queueName: team
  podSets:
  - name: main
    count: 2
    template:
      spec:
        containers: [{name: c, image: x, resources: {requests: {cpu: "2"}}}]
status:
  admission:
    clusterQueue: team
    podSetAssignments:
    - name: main
      count: 2
      flavors: {cpu: default}
      resourceUsage: {cpu: "4"}
"""
    s = Scenario(FLAVOR + cq("team", 5, None) + admitted + job("new", "team", cpu="2", created=1))
    assert s.usage("team") == 4000
    s.cycle()
    assert "new" in s.pending() and s.admitted() == {"old"}
    s.policy.finish("default/old", s.now)
    assert names(s.cycle().admitted) == ["new"]


def test_quota_only_mode_returns_no_pods() -> None:
    s = Scenario(FLAVOR + cq("team", 10, None) + job("w", "team", count=3))
    d = s.cycle()
    assert names(d.admitted) == ["w"] and d.admitted[0].pods == []
    assert s.policy.cluster is None


def test_a_cluster_without_nodes_leaves_the_pods_waiting_for_nodes() -> None:
    # No node is not "admitted": quota-only decisions are for a policy given no ClusterState at all.
    s = Scenario(FLAVOR + cq("team", 10, None) + job("w", "team", count=2))
    policy = KueuePolicy(s.manifests, ClusterState())
    for w in s.workloads:
        policy.submit(w, s.now)
    d = policy.cycle(s.now)
    assert d.admitted == [] and d.preempted == []
    assert [p.workload for p in d.pending] == ["default/w"]
    assert "0/0 nodes are available" in d.pending[0].reason
    assert policy.usage() == {"team": {"default": {"cpu": 0}}}  # no quota charged
    info = policy.info("default/w")
    assert info is not None and info.placement_parked  # waits for nodes, not for quota
    assert not policy.cycle(s.now + 1)


def test_a_release_wakes_the_workloads_parked_for_nodes_but_not_those_larger_than_any_node() -> None:
    # Two 4-CPU nodes. "first" and "second" take them; "later" (3 CPUs) waits for room; "huge" asks 6 CPUs in one
    # pod: no node has that many, whatever is released.
    s = Scenario(FLAVOR + cq("team", 100, None) + TWO_NODES + job("first", "team", cpu="4", created=1)
                 + job("second", "team", cpu="4", created=2) + job("huge", "team", cpu="6", created=3)
                 + job("later", "team", cpu="3", created=4), cluster=True)
    s.until_stable()
    assert s.admitted() == {"first", "second"}
    parked = s.policy.state.placement_parked
    assert set(parked) == {"default/huge", "default/later"}
    s.policy.finish("default/first", s.now)
    assert set(parked) == {"default/huge"}  # woken: "later", which the freed node can hold
    s.until_stable()
    assert s.admitted() == {"second", "later"} and "huge" in s.pending()


def test_quota_released_in_the_tree_leaves_a_workload_larger_than_any_node_parked() -> None:
    # Kueue requeues every parked workload of a cohort tree when quota is released there; one with a pod larger than
    # any node cannot be helped by that either, and trying it again at each release cost a backlog of them a whole
    # round. It stays parked; the others return.
    s = Scenario(FLAVOR + cq("team", 100, None) + TWO_NODES + job("first", "team", cpu="4", created=1)
                 + job("second", "team", cpu="4", created=2) + job("huge", "team", cpu="6", created=3)
                 + job("later", "team", cpu="3", created=4), cluster=True)
    s.until_stable()
    queue = s.policy.state.queues.queues["team"]
    assert {"default/huge", "default/later"} <= set(queue.parked)
    s.policy.finish("default/first", s.now)  # quota released in the tree (and a node's room)
    assert s.policy.state.queues.releases_pending
    s.policy.cycle(s.now)
    assert "default/huge" in queue.parked and "default/huge" not in s.policy.state.last_evaluated
    assert s.admitted() == {"second", "later"}
