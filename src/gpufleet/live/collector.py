"""The cyclic garbage collector, set for a scheduler process: young collections far apart, the synced cache out of
every later one.

A scheduler holds every Node and Pod of the cluster (tens of thousands of JSON objects in the informer cache) and,
from the first cycle on, a world and a policy built from them; a burst of Bindings then makes and drops objects by
the hundred thousand. With CPython's default thresholds (700, 10, 10) the young generation is collected every 700
net allocations and each tenth of its tenth collection may walk everything alive: in bench/kube_binding.py at
5,000 nodes and 20,000 pending pods the process ran ~2,900 young and 10-14 full collections in the burst, 3.9 s of
its ~22 s of CPU (3.1 s the full ones). With young collections every :data:`YOUNG_THRESHOLD` allocations the same
burst ran 31 young collections and no full one, 0.9 s in all.

What this costs: reference cycles that became garbage wait longer to be freed (at most that many allocations; the
scheduler's own structures free their garbage by reference counting). The cache is frozen once synced: raw JSON
holds no reference cycles, so nothing frozen can be cyclic garbage, and an object the cache replaces is still
freed by reference counting; freezing keeps the collector from walking the whole cache at each full collection.

Process-wide, so only for a process the scheduler owns (``gpufleet scheduler``, the benchmarks): a test process
running many schedulers keeps the defaults.
"""

from __future__ import annotations

import gc

# Net allocations between young collections. Large services commonly use 10^4-10^5; here the figure of the
# module docstring.
YOUNG_THRESHOLD = 50_000


def tune() -> None:
    """Young collections every :data:`YOUNG_THRESHOLD` allocations (never more often than set already)."""
    young, middle, old = gc.get_threshold()
    gc.set_threshold(max(young, YOUNG_THRESHOLD), middle, old)


def freeze_synced() -> None:
    """Move everything alive now (the synced informer cache above all) out of every later collection."""
    gc.freeze()
