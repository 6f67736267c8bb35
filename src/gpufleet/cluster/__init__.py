"""gpufleet.cluster"""
