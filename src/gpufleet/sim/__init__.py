"""gpufleet.sim"""
