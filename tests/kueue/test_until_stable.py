"""When cycles stop changing anything (``gpufleet plan --until-stable``; issue 15, item 3).

Kueue (kueue.md §1.9): under BestEffortFIFO a head that cannot be admitted is parked (``inadmissibleWorkloads``)
and the next workload of its ClusterQueue becomes the head in the next cycle; parked workloads return only when
quota is released in their cohort tree. Under StrictFIFO the head goes straight back and blocks its queue. So a
cycle that admitted nothing is the end only when no ClusterQueue has a head it has not tried yet.
"""

from __future__ import annotations

from pathlib import Path

from tests.kueue.scenario import Scenario, job
from tests.kueue.test_cohorts import FLAVOR, cq
from tests.kueue.test_plan_cli import run_json, write

STRICT = "\n  queueingStrategy: StrictFIFO"

# Nominal 4 CPUs, no cohort: "big" (6) can never fit, "mid" (3) fits, "small" (2) no longer fits after "mid".
WORKLOADS = (job("big", "a", cpu="6", created=1) + job("mid", "a", cpu="3", created=2)
             + job("small", "a", cpu="2", created=3))


def test_best_effort_fifo_keeps_going_past_a_parked_head() -> None:
    s = Scenario(FLAVOR + cq("a", 4, cohort=None) + WORKLOADS)
    cycles = s.until_stable()
    # 1: "big" does not fit and is parked; 2: "mid" is the head and is admitted; 3: "small" does not fit and is
    # parked. Nothing is left to try: no release can happen without an admitted workload finishing.
    assert [sorted(a.workload for a in d.admitted) for d in cycles] == [[], ["default/mid"], []]
    assert s.admitted() == {"mid"}
    assert "maximum capacity (4)" in s.pending()["big"]
    assert "insufficient unused quota for cpu in flavor default, 1 more needed" in s.pending()["small"]
    assert s.policy.settled()


def test_strict_fifo_is_stable_after_its_blocked_head_is_tried_once() -> None:
    s = Scenario(FLAVOR + cq("a", 4, cohort=None, spec=STRICT) + WORKLOADS)
    cycles = s.until_stable()
    assert len(cycles) == 1 and not cycles[0]
    assert s.admitted() == set()  # "big" blocks its queue, as StrictFIFO does
    assert "Waiting in ClusterQueue a behind 1 workload(s)" in s.pending()["mid"]


def test_a_cycle_that_admits_is_never_the_last_one() -> None:
    s = Scenario(FLAVOR + cq("a", 4, cohort=None) + job("one", "a", cpu="1"))
    assert not s.policy.settled()  # no cycle has run yet
    s.cycle()
    assert s.admitted() == {"one"} and not s.policy.settled()
    s.cycle()
    assert s.policy.settled()


def test_a_head_with_flavors_left_to_try_is_not_settled() -> None:
    s = Scenario(FLAVOR + cq("a", 4, cohort=None, spec=STRICT) + job("big", "a", cpu="6"))
    s.cycle()
    assert s.policy.settled()
    info = s.policy.info("default/big")
    assert info is not None
    info.last_tried = [{0: 0}]  # as if its last flavor search had stopped at the first of several flavors
    assert not s.policy.settled()


def test_a_release_wakes_parked_workloads_so_the_round_is_not_over() -> None:
    s = Scenario(FLAVOR + cq("a", 4, cohort=None) + job("first", "a", cpu="4", created=1)
                 + job("second", "a", cpu="4", created=2))
    s.until_stable()
    assert s.admitted() == {"first"} and "second" in s.pending()
    s.policy.finish("default/first", s.now)
    assert not s.policy.settled()  # "second" is parked, and quota was just released in its tree
    s.until_stable()
    assert s.admitted() == {"second"}


def test_plan_until_stable_reports_every_cycle_up_to_the_last_untried_head(tmp_path: Path) -> None:
    doc = run_json(write(tmp_path, FLAVOR + cq("a", 4, cohort=None) + WORKLOADS), "--until-stable")
    cycles = doc["cycles"]
    assert isinstance(cycles, list)
    # The trailing cycle that admits nothing is not printed (issue 29): the last one shows the final reasons.
    assert [[a["workload"] for a in c["admitted"]] for c in cycles] == [[], ["default/mid"]]
    assert {p["workload"] for p in cycles[-1]["pending"]} == {"default/big", "default/small"}
    assert doc["usage"] == {"a": {"default": {"cpu": "3"}}}
