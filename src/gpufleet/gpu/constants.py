"""Names and units that every layer shares, defined once.

Imports nothing: ``gpufleet.gpu`` is the bottom of the package graph, so the API parser, the cluster state, the
scheduling core and the simulator can all read these from here.
"""

from __future__ import annotations

# Thousandths of a GPU in one GPU: the unit of fractions (gpufleet.io/gpu-fraction "0.5" is 500), of per-GPU
# free capacity in the fragmentation model, and of nvidia.com/gpu in quota.
MILLI = 1000
