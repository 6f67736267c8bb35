"""Where simulated jobs come from: manifests with ``sim.gpufleet.io/*`` annotations, the synthetic
generator (which writes such manifests), and the openb trace."""
