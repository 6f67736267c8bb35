"""The policies a simulation can run, by name, each on its own fresh copy of the cluster.

* ``kube-default``: :class:`~gpufleet.scheduling.kubedefault.KubeDefaultPolicy`, the guide's "Kubernetes
  standard" (pods one by one, no queues, no gangs, the placement engine's kube-default profile);
* ``gpufleet``: the Kueue admission core (:class:`~gpufleet.scheduling.kueue.KueuePolicy`: queues, quotas,
  cohorts, preemption, waitForPodsReady, all-or-nothing gangs) on the placement engine's gpufleet profile.

The simulator talks to either only through :class:`~gpufleet.scheduling.types.Policy`.
"""

from __future__ import annotations

from gpufleet.api.manifests import Manifests
from gpufleet.cluster.state import ClusterState
from gpufleet.scheduling.types import Policy

POLICY_NAMES = ("kube-default", "gpufleet")


class UnknownPolicy(ValueError):
    pass


def make_policy(name: str, manifests: Manifests, *, seed: int = 0) -> Policy:
    """A new policy over a new ClusterState built from ``manifests``' nodes."""
    cluster = ClusterState.from_nodes(manifests.nodes)
    key = name.strip().lower()
    if key == "kube-default":
        from gpufleet.scheduling.kubedefault import KubeDefaultPolicy

        return KubeDefaultPolicy.for_cluster(cluster, seed=seed, topologies=manifests.topologies)
    if key == "gpufleet":
        from gpufleet.scheduling.kueue import KueuePolicy

        policy: Policy = KueuePolicy(manifests, cluster, seed=seed)
        return policy
    raise UnknownPolicy(f"unknown policy {name!r}; expected one of {', '.join(POLICY_NAMES)}")
