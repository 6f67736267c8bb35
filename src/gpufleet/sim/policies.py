"""The policies a simulation can run, by name, each on its own fresh copy of the cluster.

* ``kube-default``: :class:`~gpufleet.scheduling.kubedefault.KubeDefaultPolicy`, the guide's "Kubernetes
  standard" (pods one by one, no queues, no gangs, the placement engine's kube-default profile);
* ``kueue``: what a Kueue user runs: Kueue's admission (the same :class:`~gpufleet.scheduling.kueue.KueuePolicy`
  core: queues, quotas, cohorts, preemption, all-or-nothing admission of a workload's pods) with the default
  scheduler's placement (the placement engine's kube-default profile: GPUs as counts, LeastAllocated on cpu and
  memory, lowest free GPU index), nothing learnt of GPU memory, and none of gpufleet's annotations on Kueue's
  objects (a gang reservation, ``gpufleet.io/reserve-after``, is read by gpufleet only);
* ``gpufleet``: the same admission core on the placement engine's gpufleet profile (cheapest model, FGD+,
  memory-aware time-slicing) with what it learns of GPU memory (:mod:`gpufleet.scheduling.memory`: hints,
  GPUs an OOM ruled out, a larger MIG profile after an OOM on one).

The simulator talks to either only through :class:`~gpufleet.scheduling.types.Policy`.
"""

from __future__ import annotations

from gpufleet.api.manifests import Manifests
from gpufleet.cluster.state import ClusterState
from gpufleet.scheduling.types import Policy

POLICY_NAMES = ("kube-default", "kueue", "gpufleet")


class UnknownPolicy(ValueError):
    pass


def make_policy(name: str, manifests: Manifests, *, seed: int = 0) -> Policy:
    """A new policy over a new ClusterState built from ``manifests``' nodes."""
    cluster = ClusterState.from_nodes(manifests.nodes)
    key = name.strip().lower()
    if key == "kube-default":
        from gpufleet.scheduling.kubedefault import KubeDefaultPolicy

        return KubeDefaultPolicy.for_cluster(cluster, seed=seed, topologies=manifests.topologies)
    if key in ("gpufleet", "kueue"):
        from gpufleet.scheduling.kueue import KueuePolicy
        from gpufleet.scheduling.kueue.policy import engine_placer_factory

        if key == "kueue":
            return KueuePolicy(manifests, cluster, seed=seed, placer_factory=engine_placer_factory("kube-default"),
                               memory_aware=False, extensions=False, name="kueue")
        policy: Policy = KueuePolicy(manifests, cluster, seed=seed)
        return policy
    raise UnknownPolicy(f"unknown policy {name!r}; expected one of {', '.join(POLICY_NAMES)}")
