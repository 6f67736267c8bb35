"""Whether a pod set may use a ResourceFlavor at all, before any quota is looked at (§1.1).

* Taints: the flavor's ``NoSchedule``/``NoExecute`` taints must be tolerated by the pod's tolerations plus the
  flavor's own; ``PreferNoSchedule`` is ignored.
* Node affinity: the pod's nodeSelector and required node affinity, restricted to the node label keys that
  some flavor of the same resource group uses, must match the flavor's nodeLabels as if they were a node's.
  A required-affinity term left empty by the restriction matches every flavor (terms are ORed).
* Topology (TAS): a pod set asking for a topology needs a flavor with a ``topologyName`` whose Topology has
  the requested level.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpufleet.api.objects import NodeSelectorTerm, PodTemplate, Requirement, ResourceFlavor, Topology
from gpufleet.scheduling.kueue.info import TopologyAsk


def untolerated_taint(template: PodTemplate, flavor: ResourceFlavor) -> str | None:
    tolerations = (*template.tolerations, *flavor.tolerations)
    for taint in flavor.node_taints:
        if taint.effect == "PreferNoSchedule":
            continue
        if not any(t.tolerates(taint) for t in tolerations):
            value = f"={taint.value}" if taint.value else ""
            return f"untolerated taint {taint.key}{value}:{taint.effect} in flavor {flavor.name}"
    return None


def _restricted_terms(terms: tuple[NodeSelectorTerm, ...], keys: frozenset[str]) -> list[list[Requirement]]:
    out: list[list[Requirement]] = []
    for term in terms:
        kept = [r for r in term.requirements if r.key in keys]
        if not kept:
            return []  # an empty term matches everything, and terms are ORed
        out.append(kept)
    return out


def matches_affinity(template: PodTemplate, flavor: ResourceFlavor, keys: frozenset[str]) -> bool:
    labels = flavor.node_labels
    for k, v in template.node_selector.items():
        if k in keys and labels.get(k) != v:
            return False
    terms = _restricted_terms(template.required_affinity, keys)
    if not terms:
        return True
    return any(all(r.matches(labels) for r in reqs) for reqs in terms)


def topology_mismatch(ask: TopologyAsk | None, flavor: ResourceFlavor,
                      topologies: Mapping[str, Topology]) -> str | None:
    if ask is None:
        return None
    if flavor.topology_name is None:
        return f"Flavor {flavor.name} does not support TopologyAwareScheduling"
    topology = topologies.get(flavor.topology_name)
    if topology is not None and ask.level not in topology.levels:
        return f"Flavor {flavor.name} does not contain the requested level {ask.level}"
    return None


def flavor_rejection(template: PodTemplate, ask: TopologyAsk | None, flavor_name: str,
                     flavors: Mapping[str, ResourceFlavor], keys: frozenset[str],
                     topologies: Mapping[str, Topology]) -> str | None:
    """Why the pod set cannot use the flavor, or None when it can."""
    flavor = flavors.get(flavor_name)
    if flavor is None:
        return f"flavor {flavor_name} not found"
    topo = topology_mismatch(ask, flavor, topologies)
    if topo is not None:
        return topo
    taint = untolerated_taint(template, flavor)
    if taint is not None:
        return taint
    if not matches_affinity(template, flavor, keys):
        return f"flavor {flavor_name} doesn't match node affinity"
    return None
