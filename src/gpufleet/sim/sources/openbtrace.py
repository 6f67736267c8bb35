"""The openb trace (Alibaba cluster-trace-gpu-v2023) as a simulator input: nodes and jobs.

Rows are read by :mod:`gpufleet.sim.openb` (a colleague's reader, which reports every unreadable row with
its line). Here each pod becomes a one-pod job:

* arrival = creation_time − the earliest creation_time; duration = deletion_time − creation_time (a pod
  without times arrives at 0 and runs until the end, and is counted in the notes);
* ``num_gpu`` whole GPUs when ``gpu_milli`` is 1000, else a fraction of one GPU of ``gpu_milli``
  thousandths (the trace's GPU-sharing pods); CPU-only pods keep their CPU and memory;
* ``gpu_spec`` → the allowed GPU models (``GpuDemand.models``), matched through the catalog's aliases
  (``V100M32`` is ``V100-32GB``); undisclosed models (G1, G2, G3) keep their trace names;
* the ``qos`` column becomes the job's class (per-class GPU-hours and cost).

A row whose deletion precedes its creation is rejected here with its line and counted in the same report,
never dropped silently. Nodes become Nodes of one pool per GPU model (``openb-G2``), with the catalog's
product label where the model is known; the trace gives no GPU memory for undisclosed models, so memory
checks do not apply to them.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.api.kinds import FRACTION_RESOURCE
from gpufleet.api.nodepool import POOL_LABEL
from gpufleet.api.objects import (
    CPU,
    GPU,
    HOSTNAME_LABEL,
    MEMORY,
    NO_GPU,
    PRODUCT_LABEL,
    GpuDemand,
    Node,
    ObjectMeta,
    PodTemplate,
)
from gpufleet.cluster.workloads import PodSet, Workload, WorkloadPod
from gpufleet.gpu.catalog import DEFAULT_CATALOG, Catalog
from gpufleet.gpu.constants import MILLI
from gpufleet.sim.model import SimJob
from gpufleet.sim.openb import OpenbNode, OpenbPod, TraceReadReport

NAMESPACE = "openb"
MIB = 2**20
PODS_PER_NODE = 256  # the trace packs many small CPU pods on a node; kubelet's 110 would be the bottleneck


def _model_key(name: str, catalog: Catalog) -> str:
    found = catalog.find(name)
    return found.key if found is not None else name


def openb_nodes(rows: Sequence[OpenbNode], catalog: Catalog = DEFAULT_CATALOG) -> list[Node]:
    nodes: list[Node] = []
    for row in rows:
        labels = {HOSTNAME_LABEL: row.name}
        allocatable = {CPU: row.cpu_milli, MEMORY: row.memory_mib * MIB, "pods": PODS_PER_NODE}
        pool = "openb-cpu"
        if row.gpus > 0 and row.model is not None:
            found = catalog.find(row.model)
            labels[PRODUCT_LABEL] = found.product if found is not None else row.model
            labels["nvidia.com/gpu.count"] = str(row.gpus)
            labels["nvidia.com/gpu.present"] = "true"
            if found is not None:
                labels["nvidia.com/gpu.memory"] = str(found.memory_mib)
            allocatable[GPU] = row.gpus
            pool = f"openb-{row.model}"
        labels[POOL_LABEL] = pool
        nodes.append(Node(ObjectMeta(row.name, labels=labels), capacity=dict(allocatable),
                          allocatable=allocatable, pool=pool))
    return nodes


def _template(pod: OpenbPod, catalog: Catalog, cache: dict[tuple[object, ...], PodTemplate]) -> PodTemplate:
    key = (pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli, pod.gpu_spec)
    t = cache.get(key)
    if t is not None:
        return t
    models = tuple(dict.fromkeys(_model_key(m, catalog) for m in pod.gpu_spec))
    requests = {CPU: pod.cpu_milli, MEMORY: pod.memory_mib * MIB}
    if pod.num_gpu == 0:
        demand = NO_GPU
    elif pod.gpu_milli >= MILLI:
        requests[GPU] = pod.num_gpu
        demand = GpuDemand(kind="gpu", count=pod.num_gpu, resource=GPU, models=models)
    else:
        requests[FRACTION_RESOURCE] = pod.gpu_milli
        demand = GpuDemand(kind="fraction", count=1, milli=pod.gpu_milli, models=models)
    t = PodTemplate(labels={}, annotations={}, requests=requests,
                    limits={r: a for r, a in requests.items() if r != FRACTION_RESOURCE}, gpu=demand,
                    restart_policy="Never")
    cache[key] = t
    return t


def openb_jobs(rows: Sequence[OpenbPod], report: TraceReadReport, catalog: Catalog = DEFAULT_CATALOG,
               notes: list[str] | None = None) -> list[SimJob]:
    """One job per pod; rows this step cannot use are added to ``report`` (problem with line, rejected)."""
    stamps = [p.creation_time for p in rows if p.creation_time is not None]
    t0 = min(stamps) if stamps else 0
    cache: dict[tuple[object, ...], PodTemplate] = {}
    jobs: list[SimJob] = []
    untimed = 0
    for order, pod in enumerate(rows):
        if (pod.creation_time is not None and pod.deletion_time is not None
                and pod.deletion_time < pod.creation_time):
            report.rows_rejected += 1
            report.problems.append(f"{report.file}:{pod.line}: deletion_time: {pod.deletion_time} is before "
                                   f"creation_time {pod.creation_time}")
            continue
        if pod.creation_time is None or pod.deletion_time is None:
            untimed += 1
        t = _template(pod, catalog, cache)
        key = f"{NAMESPACE}/{pod.name}"
        arrival = float(pod.creation_time - t0) if pod.creation_time is not None else 0.0
        duration = float(pod.deletion_time - pod.creation_time) \
            if pod.creation_time is not None and pod.deletion_time is not None else None
        w = Workload(key=key, namespace=NAMESPACE, name=pod.name, kind="Pod", queue=None, priority=0,
                     created=arrival, pod_sets=[PodSet("main", 1, t)], pods=[WorkloadPod(key, t, "main")],
                     order=order)
        jobs.append(SimJob(w, arrival, duration, gang=False, backoff_limit=0, team=NAMESPACE,
                           klass=pod.qos or "(none)"))
    if untimed and notes is not None:
        notes.append(f"{untimed} openb pod(s) have no creation or deletion time: they arrive at 0 or run until "
                     "the end")
    return jobs
