"""The Kueue core deciding by quota throws away no reference cycles: reference counting frees its garbage as it goes.

bench/kueue_cycles.py keeps Python's cyclic collector off while cycles run (its ``quiet_gc``), which is only
sound while this holds: a cycle of objects made by the core would then stay in memory until the driver
collects. Like the bench, the policy decides by quota alone (no ClusterState: the placement path is not
exercised here). The setups are the nomination memo's (every preemption policy, cohorts, borrowing, partial admission,
fair sharing on or off); the script submits, finishes, evicts, confirms evictions and runs cycles.
"""

from __future__ import annotations

import gc
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.scheduling.kueue import KueuePolicy
from tests.kueue.test_nomination_memo import (
    QueueSpec,
    Shape,
    Step,
    WorkloadSpec,
    drive,
    manifests,
    queue_specs,
    shapes,
    steps,
    workload_specs,
)


def run_script(specs: list[QueueSpec], kinds: list[Shape], jobs: list[WorkloadSpec], script: list[Step],
               fair: bool) -> KueuePolicy:
    m, names = manifests(specs, fair)
    policy = KueuePolicy(m)
    pending = list(enumerate(jobs))
    drive([policy], names, kinds, pending, [("submit", len(pending) // 2), ("cycle", 0), ("cycle", 0), *script],
          lambda _results, _terminating: None)
    policy.pending_report()
    return policy


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(queue_specs(), min_size=1, max_size=3), kinds=st.lists(shapes(), min_size=2, max_size=3),
       jobs=st.lists(workload_specs(), min_size=15, max_size=60), script=steps(), fair=st.booleans())
def test_a_run_of_the_core_leaves_no_cyclic_garbage(specs: list[QueueSpec], kinds: list[Shape],
                                                    jobs: list[WorkloadSpec], script: list[Step],
                                                    fair: bool) -> None:
    gc.collect()
    gc.garbage.clear()  # what earlier tests left there is not this run's
    enabled, debug = gc.isenabled(), gc.get_debug()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds stays in gc.garbage, to be named below
    try:
        # The policy stays referenced: its quota tree links nodes and tree both ways, garbage once it goes.
        policy = run_script(specs, kinds, jobs, script, fair)
        gc.collect()
        del policy
        found = Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage)
    finally:
        gc.set_debug(debug)
        gc.garbage.clear()
        if enabled:
            gc.enable()
    assert not found, f"objects only the cyclic collector frees: {dict(found.most_common(8))}"
