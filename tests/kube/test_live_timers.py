"""Cycles run for work and for timers, not on a clock: a settled cluster with pods that cannot fit costs no cycle
until something changes or a timer falls due (issue 27: "nothing new, no work")."""

from __future__ import annotations

import time
from collections.abc import Callable

from kube_apisim import ApiSim
from live_env import NS, bound_node, fast_settings, node, pod, wait_until

from gpufleet.k8s import resources as r
from gpufleet.k8s.annotations import Intent
from gpufleet.live.scheduler import Scheduler

HOUR = 3600.0


def test_a_settled_cycle_sets_no_timer_and_a_change_wakes_the_next_at_once(
        apisim: ApiSim, live_scheduler: Callable[..., Scheduler]) -> None:
    apisim.create(r.NODES, node("small", gpus=2))
    apisim.create(r.PODS, pod("big", gpus=4))
    sched = live_scheduler(settings=fast_settings(cycle_period=HOUR))
    wait_until(lambda: any(c.pending == 1 for c in sched.reports), what="a cycle that left 'big' pending")
    settled = next(c for c in sched.reports if c.pending == 1)
    # Nothing of the pending pod runs on time: no timer, so only a change (or the hour's resync) runs a cycle.
    assert settled.next_due is None
    apisim.create(r.NODES, node("large", gpus=4))
    wait_until(lambda: bound_node(apisim, "big") == "large", what="'big' bound once a node that fits it appears")


def test_the_next_due_time_is_the_earliest_timer_still_to_come(
        apisim: ApiSim, live_scheduler: Callable[..., Scheduler]) -> None:
    sched = live_scheduler(settings=fast_settings(cycle_period=HOUR), run=False)
    runner = sched.runner
    now = time.time()
    assert runner._next_due([], now) is None
    # Timers already past were acted on by the cycle that saw them: they must not make the loop spin.
    assert runner._next_due([now - 5.0, now + 30.0, now + 20.0], now) == now + 20.0
    runner.shields.add(f"{NS}/victim", now + 10.0)
    assert runner._next_due([now + 20.0], now) == now + 10.0
    runner.assumed.assume(f"{NS}/p", "uid-p", Intent("n0", (), now), now - runner.assumed.ttl + 4.0)
    assert runner._next_due([now + 20.0], now) == now + 4.0
