"""Names and units that every layer shares, defined once.

Imports nothing: ``gpufleet.gpu`` is the bottom of the package graph, so the API parser, the cluster state, the
scheduling core, the node agent and the simulator all read these from here (``gpufleet.api.objects`` and
``gpufleet.api.kinds`` re-export the resource names under their old homes).
"""

from __future__ import annotations

# ---- Kubernetes resource names ---------------------------------------------------------------------------------
CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
GPU = "nvidia.com/gpu"  # a whole GPU (or, time-sliced or single-strategy MIG, a replica or an instance)
SHARED_GPU = "nvidia.com/gpu.shared"  # a time-slice replica when the device plugin renames shared GPUs
# Quota resource charged by fractional pods (gpufleet.io/gpu-fraction), in thousandths of a GPU.
FRACTION_RESOURCE = "gpufleet.io/gpu-milli"

# ---- units and defaults -----------------------------------------------------------------------------------------
# Thousandths of a GPU in one GPU: the unit of fractions (gpufleet.io/gpu-fraction "0.5" is 500), of per-GPU
# free capacity in the fragmentation model, and of nvidia.com/gpu in quota.
MILLI = 1000

# Pods a node takes when it does not publish allocatable "pods" (the kubelet's --max-pods default).
DEFAULT_MAX_PODS = 110
