"""GPU-aware placement: filters, scorers, device choice, gangs and topology, behind the Placer protocol.

    placer = make_placer(cluster, "gpufleet", random.Random(seed), topologies)
    placements = placer.place([PodRequest(...), ...], TopologyRequest(...))   # all or none
    placer.explain(pod)            # "0/18 nodes are available: 4 Insufficient nvidia.com/gpu, ..."
    placer.find_victims(pods, candidates)
"""

from gpufleet.scheduling.placement.placer import GpuPlacer, TieBreak, make_placer
from gpufleet.scheduling.placement.profiles import DEFAULT_TYPICAL, PROFILE_NAMES, Profile, make_profile

__all__ = ["DEFAULT_TYPICAL", "PROFILE_NAMES", "GpuPlacer", "Profile", "TieBreak", "make_placer", "make_profile"]
