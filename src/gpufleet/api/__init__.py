"""gpufleet.api"""
