"""The workload kinds gpufleet reads besides Pods and Kueue Workloads, and what each means for scheduling.

``table`` holds the one rule per kind; one module per family parses it (``batch``, ``apps``, ``kubeflow``,
``ray``, ``lws``, ``volcano``, ``kai``); ``intake`` is what :func:`gpufleet.api.manifests.build` calls for every
document (versions, unknown fields, generateName, unread kinds, Kueue features) and once at the end (TrainJob
runtimes, Volcano and KAI queues as ClusterQueues). :mod:`gpufleet.cluster.grouping` turns the owners into
workloads.

For the live scheduler: parse the informers' objects of the kinds :func:`table.api_resources` lists with the
same ``build`` (``Manifests.controllers`` holds them), then group its pods with
``build_workloads(Manifests(pods=..., controllers=..., ...), problems, create_missing=False)``.
"""
