"""gpufleet: a GPU-aware control plane for Kubernetes."""

__version__ = "0.1.0"
