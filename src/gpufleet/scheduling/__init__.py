"""gpufleet.scheduling"""
