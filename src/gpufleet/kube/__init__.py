"""gpufleet.kube"""
