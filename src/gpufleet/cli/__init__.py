"""gpufleet.cli"""
