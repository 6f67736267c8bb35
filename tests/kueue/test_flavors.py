"""Flavor assignment (kueue.md §1.1, §1.10): fallback, fungibility, node labels and taints, pods quota."""

from __future__ import annotations

from tests.kueue.scenario import Scenario, job, preempted

FLAVORS = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: spot}
spec: {nodeLabels: {capacity: spot}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: on-demand}
spec: {nodeLabels: {capacity: on-demand}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: main, namespace: default}
spec: {clusterQueue: team}
"""


def team(spot: int, on_demand: int, extra: str = "", cohort: str = "") -> str:
    return f"""---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {{name: team}}
spec:
  namespaceSelector: {{}}{cohort}{extra}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: spot
      resources: [{{name: cpu, nominalQuota: {spot}}}]
    - name: on-demand
      resources: [{{name: cpu, nominalQuota: {on_demand}}}]
"""


def test_falls_back_to_the_next_flavor_when_the_first_is_full() -> None:
    s = Scenario(FLAVORS + team(2, 10) + job("a", "main", cpu="2", created=1) + job("b", "main", cpu="2", created=2))
    s.run(2)
    assert s.flavors_of("a") == {"cpu": "spot"}
    assert s.flavors_of("b") == {"cpu": "on-demand"}
    assert s.usage("team", "spot") == 2000 and s.usage("team", "on-demand") == 2000


def test_no_flavor_is_large_enough() -> None:
    s = Scenario(FLAVORS + team(2, 3) + job("big", "main", cpu="4"))
    s.cycle()
    reason = s.pending()["big"]
    assert "insufficient quota for cpu in flavor spot" in reason
    assert "insufficient quota for cpu in flavor on-demand" in reason and "maximum capacity (3)" in reason


LENDER = """---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: lender}
spec:
  namespaceSelector: {}
  cohort: pool
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: spot
      resources: [{name: cpu, nominalQuota: 4}]
    - name: on-demand
      resources: [{name: cpu, nominalQuota: 0}]
"""


def test_when_can_borrow_borrow_takes_the_first_flavor_that_fits_with_borrowing() -> None:
    s = Scenario(FLAVORS + LENDER + team(2, 4, cohort="\n  cohort: pool") + job("w", "main", cpu="4"))
    s.cycle()
    assert s.flavors_of("w") == {"cpu": "spot"}  # borrows 2 from the lender


def test_when_can_borrow_try_next_flavor_prefers_a_flavor_without_borrowing() -> None:
    fungibility = "\n  flavorFungibility: {whenCanBorrow: TryNextFlavor}"
    s = Scenario(FLAVORS + LENDER + team(2, 4, fungibility, cohort="\n  cohort: pool") + job("w", "main", cpu="4"))
    s.cycle()
    assert s.flavors_of("w") == {"cpu": "on-demand"}


PRIORITIES = """---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: low}
value: 10
"""


def test_when_can_preempt_try_next_flavor_avoids_preemption() -> None:
    extra = "\n  preemption: {withinClusterQueue: LowerPriority}"
    s = Scenario(FLAVORS + PRIORITIES + team(4, 4, extra) + job("low", "main", cpu="4", priority_class="low",
                                                                  created=1))
    s.cycle()
    assert s.flavors_of("low") == {"cpu": "spot"}
    s.add(job("high", "main", cpu="4", priority_class="high", created=2))
    d = s.cycle()
    assert not d.preempted
    assert s.flavors_of("high") == {"cpu": "on-demand"}


def test_when_can_preempt_preempt_stops_at_the_flavor_that_can_preempt() -> None:
    extra = "\n  preemption: {withinClusterQueue: LowerPriority}\n  flavorFungibility: {whenCanPreempt: Preempt}"
    base = FLAVORS + PRIORITIES + team(4, 4, extra)
    s = Scenario(base + job("low", "main", cpu="4", priority_class="low", created=1))
    s.cycle()
    s.add(job("high", "main", cpu="4", priority_class="high", created=2))
    d = s.cycle()
    assert preempted(d) == {"low": ("high", "InClusterQueue")}
    assert "Pending the preemption of 1 workload(s)" in s.pending()["high"]
    s.cycle()  # the eviction was confirmed: the preemptor is admitted on the flavor it preempted for
    assert s.flavors_of("high") == {"cpu": "spot"}


ZONES = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: zone-a}
spec:
  nodeLabels: {topology.kubernetes.io/zone: a}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: zone-b}
spec:
  nodeLabels: {topology.kubernetes.io/zone: b}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: tainted}
spec:
  nodeLabels: {topology.kubernetes.io/zone: c}
  nodeTaints: [{key: reserved, value: ml, effect: NoSchedule}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: tainted
      resources: [{name: cpu, nominalQuota: 10}]
    - name: zone-a
      resources: [{name: cpu, nominalQuota: 10}]
    - name: zone-b
      resources: [{name: cpu, nominalQuota: 10}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: main, namespace: default}
spec: {clusterQueue: team}
"""


def test_untolerated_taints_and_node_selectors_rule_flavors_out() -> None:
    selector = "\n      nodeSelector: {topology.kubernetes.io/zone: b, unrelated-key: x}"
    tolerant = "\n      tolerations: [{key: reserved, operator: Exists, effect: NoSchedule}]"
    s = Scenario(ZONES + job("plain", "main", ns="default", created=1) +
                 job("picky", "main", extra_spec=selector, created=2) +
                 job("tolerant", "main", extra_spec=tolerant, created=3))
    s.run(3)
    assert s.flavors_of("plain") == {"cpu": "zone-a"}  # the tainted flavor is skipped
    # Only keys that flavors of the group use are matched; unrelated-key is ignored.
    assert s.flavors_of("picky") == {"cpu": "zone-b"}
    assert s.flavors_of("tolerant") == {"cpu": "tainted"}


def test_required_node_affinity_terms_restricted_to_flavor_label_keys() -> None:
    affinity = """
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions:
              - {key: topology.kubernetes.io/zone, operator: NotIn, values: [a, c]}"""
    any_term = """
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions:
              - {key: topology.kubernetes.io/zone, operator: In, values: [b]}
            - matchExpressions:
              - {key: gpu-family, operator: In, values: [hopper]}"""
    s = Scenario(ZONES + job("not-a", "main", extra_spec=affinity, created=1) +
                 job("or-term", "main", extra_spec=any_term, created=2))
    s.run(2)
    assert s.flavors_of("not-a") == {"cpu": "zone-b"}
    # The second term has no flavor label key left: it matches every flavor, so the first one is used
    # (the tainted flavor still needs a toleration).
    assert s.flavors_of("or-term") == {"cpu": "zone-a"}


def test_flavor_tolerations_tolerate_its_own_taints_and_prefer_no_schedule_is_ignored() -> None:
    text = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: self-tolerating}
spec:
  nodeTaints: [{key: a, effect: NoSchedule}, {key: b, effect: PreferNoSchedule}]
  tolerations: [{key: a, operator: Exists}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: self-tolerating, resources: [{name: cpu, nominalQuota: 1}]}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: main, namespace: default}
spec: {clusterQueue: team}
"""
    s = Scenario(text + job("w", "main"))
    s.cycle()
    assert s.flavors_of("w") == {"cpu": "self-tolerating"}


def test_pods_resource_is_charged_when_covered() -> None:
    text = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, pods]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 100}, {name: pods, nominalQuota: 3}]}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: main, namespace: default}
spec: {clusterQueue: team}
"""
    s = Scenario(text + job("two", "main", count=2, created=1) + job("four", "main", count=4, created=2))
    s.run(2)
    assert s.admitted() == {"two"}
    assert s.usage("team", resource="pods") == 2
    assert "insufficient quota for pods in flavor default" in s.pending()["four"]


def test_a_resource_no_group_covers_makes_the_workload_inadmissible() -> None:
    gpu_job = job("gpu", "main", gpu=1)
    s = Scenario(FLAVORS + team(2, 2) + gpu_job)
    s.cycle()
    assert "resource nvidia.com/gpu unavailable in ClusterQueue" in s.pending()["gpu"]
