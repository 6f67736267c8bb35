"""gpufleet.gpu"""
