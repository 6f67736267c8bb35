"""gpufleet.node: the node agent (``gpufleet node discover|agent``, docs/node-agent.md).

* :mod:`~gpufleet.node.contract`: NVML behind one interface (what a backend reports); backends in
  :mod:`~gpufleet.node.nvml_real` (nvidia-ml-py) and :mod:`~gpufleet.node.nvml_fake` (a NodePool file), chosen by
  :mod:`~gpufleet.node.backends`;
* :mod:`~gpufleet.node.dpconfig`: NVIDIA's device-plugin config file; :mod:`~gpufleet.node.discovery`: GFD labels,
  the ``gpufleet.io/gpus`` inventory and the devices each resource advertises;
* the kubelet side: :mod:`~gpufleet.node.deviceplugin` (one gRPC device plugin), :mod:`~gpufleet.node.plugins`
  (the set of them, re-registered after kubelet restarts), :mod:`~gpufleet.node.allocation` (whose pod is
  admitted and which devices it gets), :mod:`~gpufleet.node.pods` (this node's pods in arrival order),
  :mod:`~gpufleet.node.podresources` (the kubelet's record), :mod:`~gpufleet.node.protos` (the kubelet's APIs);
* :mod:`~gpufleet.node.health` (XIDs), :mod:`~gpufleet.node.publisher` (the Node's labels and inventory),
  :mod:`~gpufleet.node.metrics` (dcgm-exporter names), and :mod:`~gpufleet.node.agent`, the process.

Nothing is imported here, so ``import gpufleet`` needs neither grpcio nor NVML.
"""
