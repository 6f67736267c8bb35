"""The sizes gpufleet accepts, enforced where input is parsed.

Every count that later turns into objects (nodes of a NodePool, GPUs of a node, replicas of a GPU, pods of a
workload) or into work (documents, bytes) is bounded here, so that no input can make ``validate`` or ``plan``
exhaust memory or run for hours: a value above its limit is an error that names the limit and the fix, and the
object is left out like any other invalid object. The limits sit well above real clusters (Kubernetes itself
is tested to 5,000 nodes and 150,000 pods; the largest GPU boards carry 16 GPUs; Kueue caps a Workload at 8
pod sets) and are listed, with the reason for each, in ``docs/limits.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

# --- input -----------------------------------------------------------------------------------------------------
MAX_INPUT_BYTES = 32 * 2**20  # all files of one run together; one file alone counts the same way
MAX_DOCUMENTS = 100_000  # documents of one run, items of `kind: List` included
MAX_DOCUMENT_BYTES = 3 * 2**20  # the API server refuses larger requests; larger documents are counted first
MAX_NODES_PER_DOCUMENT = 500_000  # YAML values (scalars, mappings, lists) of one document
MAX_JSON_DEPTH = 20  # nesting of a JSON annotation such as gpufleet.io/gpus (4 levels used)
MAX_ANNOTATION_BYTES = 256 * 1024  # the API server's limit for all annotations of an object together
MAX_INT_DIGITS = 18  # an integer in text (a label, a quoted field, a CSV cell): always inside int64
MAX_CSV_FIELD_CHARS = 253  # one field of an openb CSV: the longest is a name, at most a Kubernetes name's 253
MAX_CONFIG_BYTES = 2**20  # the node agent's device-plugin config: a ConfigMap holds at most 1 MiB
MAX_RESULT_BYTES = MAX_INPUT_BYTES  # the dashboard's simulation result (32 MiB of `[],` peaks at 840 MiB parsed)
MAX_RESULT_DEPTH = 64  # nesting of a simulation result's JSON (`simulate --json` writes 7 levels)

# --- cluster ---------------------------------------------------------------------------------------------------
MAX_NODES = 5_000  # Nodes of one input, NodePools expanded: Kubernetes' own tested scale
MAX_NODES_PER_POOL = MAX_NODES
MAX_GPUS_PER_NODE = 64
MAX_REPLICAS_PER_GPU = 64  # time-slicing replicas
MAX_DEVICES_PER_NODE = MAX_GPUS_PER_NODE * MAX_REPLICAS_PER_GPU  # advertised GPU devices of any kind
MAX_PODS_PER_NODE = 5_000  # kubelet's --max-pods; 110 by default
MAX_COHORT_DEPTH = 64  # levels of a cohort tree

# --- workloads -------------------------------------------------------------------------------------------------
MAX_PODS_PER_WORKLOAD = 10_000  # a Job's parallelism or completions, a pod set's count, a group's total
MAX_PODS = 150_000  # pods of one input once workloads are expanded: Kubernetes' own tested scale
MAX_GPUS_PER_POD = MAX_DEVICES_PER_NODE  # a pod runs on one node
MAX_DURATION_S = 366 * 86_400  # a timeout or a generated duration longer than a year is a mistake
MAX_RATE_PER_HOUR = 100_000.0  # a WorkloadGenerator class's arrival rate


@dataclass(frozen=True, slots=True)
class Limit:
    """One documented limit: for messages ("at most 64 (gpufleet's limit on GPUs per node)")."""

    value: int
    what: str

    def says(self) -> str:
        return f"at most {self.value:,} ({self.what}; see docs/limits.md)"


GPUS_PER_NODE = Limit(MAX_GPUS_PER_NODE, "gpufleet's limit on GPUs per node")
NODES_PER_POOL = Limit(MAX_NODES_PER_POOL, "gpufleet's limit on nodes per NodePool")
NODES = Limit(MAX_NODES, "gpufleet's limit on nodes per input")
REPLICAS_PER_GPU = Limit(MAX_REPLICAS_PER_GPU, "gpufleet's limit on time-slicing replicas per GPU")
DEVICES_PER_NODE = Limit(MAX_DEVICES_PER_NODE, "gpufleet's limit on GPU devices a node advertises")
PODS_PER_NODE = Limit(MAX_PODS_PER_NODE, "gpufleet's limit on pods per node")
PODS_PER_WORKLOAD = Limit(MAX_PODS_PER_WORKLOAD, "gpufleet's limit on pods per workload")
PODS = Limit(MAX_PODS, "gpufleet's limit on pods per input")
GPUS_PER_POD = Limit(MAX_GPUS_PER_POD, "gpufleet's limit on GPU devices per pod")
COHORT_DEPTH = Limit(MAX_COHORT_DEPTH, "gpufleet's limit on the depth of a cohort tree")
DOCUMENTS = Limit(MAX_DOCUMENTS, "gpufleet's limit on documents per input")
ANNOTATION_BYTES = Limit(MAX_ANNOTATION_BYTES, "the API server's limit on an object's annotations, in bytes")
CSV_FIELD_CHARS = Limit(MAX_CSV_FIELD_CHARS, "gpufleet's limit on the characters of a CSV field")
