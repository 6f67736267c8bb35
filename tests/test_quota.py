"""Quota arithmetic of the cohort tree, checked against numbers computed by hand from the
formulas of the reference (kueue.md §1.3, §1.4, §1.10, §1.13) and against an independent,
naive recursive model of those formulas."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.scheduling.quota import FR, MAX_INT64, QuotaTree, ResourceQuota

CPU: FR = ("default", "cpu")
A100: FR = ("a100", "nvidia.com/gpu")
H100: FR = ("h100", "nvidia.com/gpu")
RQ = ResourceQuota


# ---------------------------------------------------------------------------------------------
# docs worked example (concepts/cluster_queue.md)


def docs_tree(a_bl: int | None = None, b_ll: int = 1) -> QuotaTree:
    t = QuotaTree()
    t.add_cluster_queue("A", "co", {CPU: RQ(9, borrowing_limit=a_bl)})
    t.add_cluster_queue("B", "co", {CPU: RQ(12, lending_limit=b_ll)})
    assert t.finalize() == []
    return t


def test_docs_example_limits() -> None:
    t = docs_tree()
    # Cohort pool = 9 (A) + 1 (B lends 1 of 12); B keeps 11 for itself.
    assert t.cohort("co").subtree_quota(CPU) == 10
    assert t.cluster_queue("B").local_quota(CPU) == 11
    assert t.available("A", CPU) == 10
    assert t.available("B", CPU) == 21
    assert t.potential_available("A", CPU) == 10
    assert t.potential_available("B", CPU) == 21
    assert docs_tree(a_bl=1).available("A", CPU) == 10


def test_docs_example_borrowing_limit_binds_when_more_is_lendable() -> None:
    # B lending 5 would let A reach 14; its borrowing limit of 1 caps it at 9 + 1.
    assert docs_tree(b_ll=5).available("A", CPU) == 14
    t = docs_tree(a_bl=1, b_ll=5)
    assert t.available("A", CPU) == 10
    assert t.potential_available("A", CPU) == 10


def test_docs_example_usage_of_a_only_touches_what_b_lends() -> None:
    t = docs_tree()
    t.add_usage("A", {CPU: 10})
    assert t.is_borrowing("A", CPU)
    assert t.borrowed("A", CPU) == 1
    assert t.usage("co", CPU) == 10
    assert t.available("A", CPU) == 0
    # B's 11 guaranteed cores are untouched; the pool is exhausted.
    assert t.available("B", CPU) == 11
    assert not t.fits("B", {CPU: 12})
    assert t.fits("B", {CPU: 11})
    t.add_usage("B", {CPU: 11})
    assert t.usage("co", CPU) == 10  # B's usage stayed inside its local quota
    assert t.available("B", CPU) == 0


# ---------------------------------------------------------------------------------------------
# borrowing and lending limits, three ClusterQueues


def three_cq_tree() -> QuotaTree:
    t = QuotaTree()
    t.add_cohort("pool")
    t.add_cluster_queue("X", "pool", {CPU: RQ(10, borrowing_limit=1)})
    t.add_cluster_queue("Y", "pool", {CPU: RQ(6, lending_limit=2)})
    t.add_cluster_queue("Z", "pool", {CPU: RQ(8, lending_limit=0)})
    t.finalize()
    return t


def test_three_cqs_empty() -> None:
    t = three_cq_tree()
    # pool = 10 (X) + 2 (Y lends 2 of 6) + 0 (Z lends nothing)
    assert t.cohort("pool").subtree_quota(CPU) == 12
    assert t.available("X", CPU) == 11  # 10 + borrowing limit 1, although the pool has 12
    assert t.available("Y", CPU) == 16  # 4 local + 12 pool
    assert t.available("Z", CPU) == 20  # 8 local + 12 pool
    assert t.potential_available("X", CPU) == 11


def test_three_cqs_usage_reduces_the_others() -> None:
    t = three_cq_tree()
    t.add_usage("Z", {CPU: 10})  # 8 local + 2 from the pool
    assert t.usage("pool", CPU) == 2
    assert (t.available("X", CPU), t.available("Y", CPU), t.available("Z", CPU)) == (10, 14, 10)

    t.add_usage("X", {CPU: 9})
    assert t.usage("pool", CPU) == 11
    assert (t.available("X", CPU), t.available("Y", CPU), t.available("Z", CPU)) == (1, 5, 1)

    t.add_usage("Y", {CPU: 5})  # 4 local + 1 from the pool
    assert t.usage("pool", CPU) == 12
    assert (t.available("X", CPU), t.available("Y", CPU), t.available("Z", CPU)) == (0, 0, 0)

    t.remove_usage("Z", {CPU: 10})
    assert t.usage("pool", CPU) == 10
    # X: pool has 2 left and its borrowing limit allows 11 - 9 = 2.
    assert (t.available("X", CPU), t.available("Y", CPU), t.available("Z", CPU)) == (2, 2, 10)


def test_three_cqs_borrowing_limit_binds_while_pool_has_room() -> None:
    t = three_cq_tree()
    t.add_usage("X", {CPU: 9})
    # pool: 12 - 9 = 3 free, but X may only hold 10 + 1.
    assert t.available("X", CPU) == 2
    assert t.available("Y", CPU) == 4 + 3
    assert t.fits("X", {CPU: 2})
    assert not t.fits("X", {CPU: 3})


# ---------------------------------------------------------------------------------------------
# hierarchical cohorts


#   R (own 10) ─┬─ C (BL 4, LL 6) ─┬─ X (5)
#               │                  └─ Y (5, LL 2)
#               └─ Z (8)
def hierarchy() -> QuotaTree:
    t = QuotaTree()
    t.add_cohort("R", quotas={CPU: RQ(10)})
    t.add_cohort("C", parent="R", quotas={CPU: RQ(0, borrowing_limit=4, lending_limit=6)})
    t.add_cluster_queue("X", "C", {CPU: RQ(5)})
    t.add_cluster_queue("Y", "C", {CPU: RQ(5, lending_limit=2)})
    t.add_cluster_queue("Z", "R", {CPU: RQ(8)})
    assert t.finalize() == []
    return t


def test_hierarchy_quotas_and_heights() -> None:
    t = hierarchy()
    assert t.cluster_queue("Y").local_quota(CPU) == 3
    assert t.cohort("C").subtree_quota(CPU) == 7  # 5 + (5 - 3)
    assert t.cohort("C").local_quota(CPU) == 1  # 7 - LL 6
    assert t.cohort("R").subtree_quota(CPU) == 24  # 10 + (7 - 1) + 8
    assert [t.cluster_queue(n).height for n in "XYZ"] == [0, 0, 0]
    assert (t.cohort("C").height, t.cohort("R").height) == (1, 2)


def test_hierarchy_available_empty() -> None:
    t = hierarchy()
    # C: its local 1 + min(R's 24, what C may hold in R: (7 - 1) + BL 4 = 10) = 11
    assert t.node_available("C", CPU) == 11
    assert t.available("X", CPU) == 11
    assert t.available("Y", CPU) == 3 + 11
    assert t.available("Z", CPU) == 24
    # C's potential: min(1 + 24, 7 + BL 4) = 11
    assert t.node_potential_available("C", CPU) == 11
    assert t.potential_available("X", CPU) == 11
    assert t.potential_available("Y", CPU) == 14
    assert t.potential_available("Z", CPU) == 24


def test_hierarchy_borrowing_level_empty() -> None:
    t = hierarchy()
    assert t.borrowing_level("X", CPU, 5) == 0
    assert t.borrowing_level("X", CPU, 6) == 1  # C holds 6 <= 7
    assert t.borrowing_level("X", CPU, 8) == 2  # 8 - C's local 1 = 7 more in R
    assert t.borrowing_level("X", CPU, 30) is None
    assert t.lowest_subtree_that_fits("X", CPU, 3) == (0, True)
    assert t.lowest_subtree_that_fits("X", CPU, 6) == (1, True)
    assert t.lowest_subtree_that_fits("X", CPU, 8) == (2, False)
    assert t.lowest_subtree_that_fits("X", CPU, 30) == (2, False)
    assert t.borrowing_level("Z", CPU, 9) == 2  # Z's only cohort is R


def test_hierarchy_after_usage() -> None:
    t = hierarchy()
    t.add_usage("X", {CPU: 7})
    # X bubbles 7 into C; C keeps 1 locally and stores 6 in R.
    assert (t.usage("C", CPU), t.usage("R", CPU)) == (7, 6)
    # Y: 3 local + C may take (6 + 4) - 6 = 4 more from R
    assert t.available("Y", CPU) == 7
    assert t.available("X", CPU) == 4
    assert t.available("Z", CPU) == 18
    assert t.borrowing_level("Y", CPU, 4) == 0
    # Y 6: 6 - 3 local = 3 into C; C (7 + 3 > 7) frees nothing locally, R holds 6 + 3.
    assert t.borrowing_level("Y", CPU, 6) == 2

    t.add_usage("X", {CPU: 1})
    assert (t.usage("C", CPU), t.usage("R", CPU)) == (8, 7)
    # C: local 1 all used; min(R: 24 - 7, (7 - 1) - (8 - 1) + 4 = 3)
    assert t.node_available("C", CPU) == 3
    assert t.available("X", CPU) == 3
    assert not t.within_nominal("C", CPU)
    assert t.within_nominal("R", CPU)


def test_hierarchy_borrowing_level_counts_cohort_local_quota() -> None:
    t = hierarchy()
    t.add_usage("Z", {CPU: 17})  # R: 7 left
    assert t.available("X", CPU) == 8  # C's local 1 + R's 7
    # 8 does not fit in C (7); C absorbs its free local 1, and R holds the other 7 exactly.
    assert t.borrowing_level("X", CPU, 8) == 2
    assert t.borrowing_level("X", CPU, 9) is None


def test_hierarchy_root_pool_is_additional_capacity() -> None:
    t = hierarchy()
    t.add_usage("Z", {CPU: 8})
    t.add_usage("X", {CPU: 11})  # at its maximum
    assert t.available("X", CPU) == 0
    # R: 24 - (8 + 10) = 6 free, all from R's own pool and C's stored share.
    assert t.usage("R", CPU) == 18
    assert t.available("Z", CPU) == 6
    assert t.available("Y", CPU) == 3


def test_cluster_queue_without_cohort() -> None:
    t = QuotaTree()
    t.add_cluster_queue("solo", None, {CPU: RQ(4)})
    assert t.available("solo", CPU) == 4
    assert t.borrowing_level("solo", CPU, 4) == 0
    assert t.borrowing_level("solo", CPU, 5) is None
    assert t.lowest_subtree_that_fits("solo", CPU, 5) == (0, False)
    assert t.dominant_resource_share("solo") == (0, None)
    # Limits need a parent to mean anything; without one they are reported and ignored.
    t.add_cluster_queue("solo", None, {CPU: RQ(4, borrowing_limit=2, lending_limit=1)})
    assert any("solo" in p and "ignored" in p for p in t.finalize())
    assert (t.available("solo", CPU), t.potential_available("solo", CPU)) == (4, 4)


def test_undeclared_flavor_resource_is_not_available() -> None:
    t = QuotaTree()
    t.add_cohort("co", quotas={A100: RQ(8)})
    t.add_cluster_queue("q", "co", {CPU: RQ(4)})
    t.add_cluster_queue("g", "co", {CPU: RQ(0), A100: RQ(0)})
    # q does not declare the GPU flavor, so it cannot borrow the cohort's GPUs; g can.
    assert t.available("q", A100) == 0
    assert not t.fits("q", {CPU: 1, A100: 1})
    assert t.fits("q", {CPU: 1, A100: 0})
    assert t.available("g", A100) == 8
    assert t.available("g", CPU) == 4


# ---------------------------------------------------------------------------------------------
# implicit cohorts and cycles


def test_implicit_parent_cohort_is_created_and_filled_in_later() -> None:
    t = QuotaTree()
    t.add_cluster_queue("a", "team", {CPU: RQ(3)})
    t.add_cluster_queue("b", "team", {CPU: RQ(2)})
    t.add_cohort("team", parent="org")
    assert t.finalize() == []
    assert not t.cohort("org").explicit
    assert t.cohort("team").explicit
    assert t.cohort("org").height == 2
    assert t.available("a", CPU) == 5
    t.add_cohort("org", quotas={CPU: RQ(10)})
    assert t.cohort("org").explicit
    assert t.available("a", CPU) == 15


def test_implicit_cohort_named_by_a_cluster_queue_only() -> None:
    t = QuotaTree()
    t.add_cluster_queue("a", "ghost", {CPU: RQ(3)})
    t.add_cluster_queue("b", "ghost", {CPU: RQ(2)})
    assert not t.cohort("ghost").explicit
    assert t.available("b", CPU) == 5


def cyclic_tree() -> QuotaTree:
    t = QuotaTree()
    t.add_cohort("a", parent="b")
    t.add_cohort("b", parent="a")
    t.add_cohort("c", parent="a", quotas={CPU: RQ(100)})
    t.add_cluster_queue("q", "c", {CPU: RQ(5)})
    t.add_cohort("fine")
    t.add_cluster_queue("ok", "fine", {CPU: RQ(5)})
    return t


def test_cohort_cycle_is_reported_and_disables_the_tree() -> None:
    t = cyclic_tree()
    problems = t.finalize()
    assert any("cohort cycle" in p and "a -> b -> a" in p for p in problems)
    assert any("cluster queue q" in p for p in problems)
    assert t.cohort("a").in_cycle and t.cohort("b").in_cycle
    assert not t.cohort("c").in_cycle and t.cohort("c").disabled
    assert t.cluster_queue("q").disabled
    assert t.available("q", CPU) == 0
    assert t.potential_available("q", CPU) == 0
    assert not t.fits("q", {CPU: 1})
    assert t.borrowing_level("q", CPU, 6) is None
    # Usage bookkeeping must not loop through the cycle, and stays reversible.
    t.add_usage("q", {CPU: 7})
    assert t.usage("q", CPU) == 7
    assert t.usage("c", CPU) == 0
    t.remove_usage("q", {CPU: 7})
    assert t.nonzero_usage() == {}
    # An unrelated tree is not affected.
    assert not t.cluster_queue("ok").disabled
    assert t.available("ok", CPU) == 5


def test_breaking_the_cycle_reenables_admission() -> None:
    t = cyclic_tree()
    t.finalize()
    t.add_cohort("b", parent=None)
    assert t.finalize() == []
    assert t.available("q", CPU) == 105
    assert t.cohort("b").height == 3  # b ← a ← c ← q


def test_self_parent_is_a_cycle() -> None:
    t = QuotaTree()
    t.add_cohort("s", parent="s")
    t.add_cluster_queue("q", "s", {CPU: RQ(1)})
    assert any("s -> s" in p for p in t.finalize())
    assert not t.fits("q", {CPU: 1})


# ---------------------------------------------------------------------------------------------
# dominant resource share


def drs_tree() -> QuotaTree:
    t = QuotaTree()
    t.add_cohort("co")
    t.add_cluster_queue("A", "co", {CPU: RQ(10), A100: RQ(3), H100: RQ(2)})
    t.add_cluster_queue("B", "co", {CPU: RQ(10), A100: RQ(3), H100: RQ(2)}, fair_weight=3)
    t.add_cluster_queue("C", "co", {CPU: RQ(10)}, fair_weight=0)
    t.finalize()
    # lendable in co: cpu 30, gpu (a100 + h100) 6 + 4 = 10
    return t


def test_drs_values_ties_and_flavor_sum() -> None:
    t = drs_tree()
    t.add_usage("A", {CPU: 13, A100: 4})  # cpu 3*1000//30 = 100, gpu 1*1000//10 = 100: tie
    t.add_usage("B", {CPU: 11, A100: 4, H100: 3})  # cpu 1000//30 = 33, gpu (1 + 1) -> 200
    assert t.dominant_resource_share("A") == (100, "cpu")
    assert t.dominant_resource_share("B") == (200, "nvidia.com/gpu")
    assert t.dominant_resource_share("A", {CPU: 3}) == (200, "cpu")
    assert t.dominant_resource_share("co") == (0, None)  # root
    assert t.weighted_share("A") == 100.0
    assert t.weighted_share("B") == pytest.approx(200 / 3)
    assert t.weighted_share_status("B") == 67  # ceil
    assert t.dominant_resource_share("C") == (0, None)


def test_drs_truncates_like_integer_division() -> None:
    t = drs_tree()
    t.add_usage("A", {CPU: 11})  # 1000 // 30 = 33
    assert t.dominant_resource_share("A") == (33, "cpu")


def test_zero_weight() -> None:
    t = drs_tree()
    t.add_usage("C", {CPU: 10})
    assert t.weighted_share("C") == 0.0  # not borrowing
    assert math.isinf(t.weighted_share("C", {CPU: 1}))
    t.add_usage("C", {CPU: 1})
    assert t.dominant_resource_share("C") == (33, "cpu")
    assert math.isinf(t.weighted_share("C"))
    assert t.weighted_share_status("C") == MAX_INT64
    t.add_usage("A", {CPU: 19})  # DRS 300, far above C's unweighted 33
    order = sorted("ABC", key=t.fair_sharing_key)
    assert order == ["B", "A", "C"]  # B 0, A 300, zero-weight borrower last


def test_drs_of_a_cohort_uses_its_parent_lendable() -> None:
    t = hierarchy()
    t.add_usage("X", {CPU: 8})
    # C: usage 8 vs subtree 7, R lends potential(R) = 24
    assert t.dominant_resource_share("C") == (1000 // 24, "cpu")
    # X: 3 over nominal; C lends potential(C) = min(1 + 24, 7 + 4) = 11
    assert t.dominant_resource_share("X") == (3000 // 11, "cpu")
    assert t.dominant_resource_share(t.cohort("C")) == (41, "cpu")


def test_drs_lendable_sums_every_flavor_of_the_resource_in_the_tree() -> None:
    t = QuotaTree()
    t.add_cohort("R")
    t.add_cohort("C", parent="R")
    t.add_cluster_queue("X", "C", {A100: RQ(2)})
    t.add_cluster_queue("Y", "C", {A100: RQ(2)})
    t.add_cluster_queue("H", "R", {H100: RQ(6)})
    t.add_usage("X", {A100: 3})
    # C has no H100 itself, but its potential for H100 passes through to R's 6:
    # lendable gpu in C = 4 (a100) + 6 (h100) = 10.
    assert t.dominant_resource_share("X") == (100, "nvidia.com/gpu")


# ---------------------------------------------------------------------------------------------
# checkpoint / rollback


def test_checkpoint_rollback_restores_every_usage() -> None:
    t = hierarchy()
    t.add_usage("X", {CPU: 4})
    t.add_usage("Y", {CPU: 6})
    before = t.nonzero_usage()
    mark = t.checkpoint()
    t.remove_usage("Y", {CPU: 6})
    t.add_usage("Z", {CPU: 12})
    inner = t.checkpoint()
    t.add_usage("X", {CPU: 3})
    t.commit(inner)
    t.add_usage("Y", {CPU: 1})
    assert t.nonzero_usage() != before
    t.rollback(mark)
    assert t.nonzero_usage() == before
    assert t.available("Z", CPU) == hierarchy_with(("X", 4), ("Y", 6)).available("Z", CPU)
    with pytest.raises(KeyError):
        t.rollback(mark)


def hierarchy_with(*usages: tuple[str, int]) -> QuotaTree:
    t = hierarchy()
    for cq, v in usages:
        t.add_usage(cq, {CPU: v})
    return t


def test_nested_rollback_and_commit() -> None:
    t = hierarchy()
    outer = t.checkpoint()
    t.add_usage("X", {CPU: 2})
    inner = t.checkpoint()
    t.add_usage("X", {CPU: 5})
    t.rollback(inner)
    assert t.usage("X", CPU) == 2
    t.commit(outer)
    assert t.usage("X", CPU) == 2
    with t.simulate():
        t.add_usage("Z", {CPU: 20})
        # Z has no local quota, so all 20 land in R, next to the 1 that X's 2 overflowed C by.
        assert t.usage("R", CPU) == 21
    assert t.nonzero_usage() == hierarchy_with(("X", 2)).nonzero_usage()


def test_usage_added_before_finalize_is_derived() -> None:
    early = hierarchy()
    early.add_cohort("R", quotas={CPU: RQ(10)})  # marks the tree for re-derivation
    early.add_usage("X", {CPU: 7})
    early.add_usage("Y", {CPU: 4})
    assert early.finalize() == []
    assert early.nonzero_usage() == hierarchy_with(("X", 7), ("Y", 4)).nonzero_usage()


def test_snapshot_is_independent() -> None:
    t = hierarchy_with(("X", 3))
    snap = t.snapshot()
    snap.add_usage("X", {CPU: 2})
    assert t.usage("X", CPU) == 3
    assert snap.usage("C", CPU) == 5


def test_invalid_quotas_rejected() -> None:
    with pytest.raises(ValueError):
        RQ(-1)
    with pytest.raises(ValueError):
        RQ(1, borrowing_limit=-1)
    with pytest.raises(ValueError):
        QuotaTree().add_cohort("x", fair_weight=-1)


# ---------------------------------------------------------------------------------------------
# property tests against a naive model of the formulas


FRS: list[FR] = [("f1", "cpu"), ("f2", "cpu"), ("f1", "gpu")]


@dataclass
class Spec:
    cohorts: dict[str, tuple[str | None, dict[FR, ResourceQuota]]] = field(default_factory=dict)
    cqs: dict[str, tuple[str | None, dict[FR, ResourceQuota]]] = field(default_factory=dict)

    def build(self) -> QuotaTree:
        t = QuotaTree()
        for name, (parent, quotas) in self.cohorts.items():
            t.add_cohort(name, parent, quotas)
        for name, (cohort, quotas) in self.cqs.items():
            t.add_cluster_queue(name, cohort, quotas)
        assert t.finalize() == []
        return t


class Model:
    """The reference formulas, recomputed from scratch on every question."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.cq_usage: dict[str, dict[FR, int]] = {name: {} for name in spec.cqs}

    def parent(self, kind: str, name: str) -> str | None:
        return (self.spec.cqs if kind == "cq" else self.spec.cohorts)[name][0]

    def quota(self, kind: str, name: str, fr: FR) -> ResourceQuota | None:
        return (self.spec.cqs if kind == "cq" else self.spec.cohorts)[name][1].get(fr)

    def children(self, name: str) -> list[tuple[str, str]]:
        out = [("cohort", c) for c, (p, _) in self.spec.cohorts.items() if p == name]
        return out + [("cq", c) for c, (p, _) in self.spec.cqs.items() if p == name]

    def subtree(self, kind: str, name: str, fr: FR) -> int:
        q = self.quota(kind, name, fr)
        own = q.nominal if q else 0
        if kind == "cq":
            return own
        return own + sum(self.subtree(*ch, fr) - self.local(*ch, fr) for ch in self.children(name))

    def local(self, kind: str, name: str, fr: FR) -> int:
        q = self.quota(kind, name, fr)
        if q is None or q.lending_limit is None:
            return 0
        return max(0, self.subtree(kind, name, fr) - q.lending_limit)

    def usage(self, kind: str, name: str, fr: FR) -> int:
        if kind == "cq":
            return self.cq_usage[name].get(fr, 0)
        return sum(max(0, self.usage(*ch, fr) - self.local(*ch, fr)) for ch in self.children(name))

    def available(self, kind: str, name: str, fr: FR) -> int:
        parent = self.parent(kind, name)
        if parent is None:
            return self.subtree(kind, name, fr) - self.usage(kind, name, fr)
        g, u, s = self.local(kind, name, fr), self.usage(kind, name, fr), self.subtree(kind, name, fr)
        parent_avail = self.available("cohort", parent, fr)
        q = self.quota(kind, name, fr)
        if q is not None and q.borrowing_limit is not None:
            parent_avail = min(parent_avail, (s - g) - max(0, u - g) + q.borrowing_limit)
        return max(0, g - u) + parent_avail

    def potential(self, kind: str, name: str, fr: FR) -> int:
        parent = self.parent(kind, name)
        if parent is None:
            return self.subtree(kind, name, fr)
        p = self.local(kind, name, fr) + self.potential("cohort", parent, fr)
        q = self.quota(kind, name, fr)
        if q is not None and q.borrowing_limit is not None:
            p = min(p, self.subtree(kind, name, fr) + q.borrowing_limit)
        return p

    def root(self, kind: str, name: str) -> tuple[str, str]:
        while (parent := self.parent(kind, name)) is not None:
            kind, name = "cohort", parent
        return kind, name

    def members(self, kind: str, name: str) -> list[str]:
        """ClusterQueues in the subtree of a node."""
        if kind == "cq":
            return [name]
        return [cq for ch in self.children(name) for cq in self.members(*ch)]

    def nominal_sum(self, kind: str, name: str, fr: FR) -> int:
        q = self.quota(kind, name, fr)
        own = q.nominal if q else 0
        if kind == "cq":
            return own
        return own + sum(self.nominal_sum(*ch, fr) for ch in self.children(name))


def quota_st(with_limits: bool) -> st.SearchStrategy[ResourceQuota]:
    limit: st.SearchStrategy[int | None] = st.none() | st.integers(0, 8)
    if not with_limits:
        limit = st.none()
    return st.builds(ResourceQuota, st.integers(0, 10), limit, limit)


@st.composite
def specs(draw: st.DrawFn) -> Spec:
    spec = Spec()
    spec.cohorts["root"] = (None, draw(st.dictionaries(st.sampled_from(FRS), quota_st(False), max_size=2)))
    for k in range(draw(st.integers(0, 2))):
        parent = draw(st.sampled_from(list(spec.cohorts)))
        quotas = draw(st.dictionaries(st.sampled_from(FRS), quota_st(True), max_size=2))
        spec.cohorts[f"c{k}"] = (parent, quotas)
    for k in range(draw(st.integers(1, 5))):
        cohort = draw(st.sampled_from([*spec.cohorts, None]))
        frs = draw(st.lists(st.sampled_from(FRS), min_size=1, max_size=3, unique=True))
        spec.cqs[f"q{k}"] = (cohort, {fr: draw(quota_st(cohort is not None)) for fr in frs})
    return spec


usage_st = st.dictionaries(st.sampled_from(FRS), st.integers(0, 6), min_size=1, max_size=3)
ops_st = st.lists(st.tuples(st.booleans(), st.integers(0, 4), usage_st), min_size=4, max_size=40)


def check_against_model(t: QuotaTree, m: Model) -> None:
    spec = m.spec
    for fr in FRS:
        for name in spec.cohorts:
            assert t.usage(t.cohort(name), fr) == m.usage("cohort", name, fr)
        for name in spec.cqs:
            declared = fr in spec.cqs[name][1]
            avail = t.available(name, fr)
            pot = t.potential_available(name, fr)
            assert avail == (max(0, m.available("cq", name, fr)) if declared else 0)
            assert pot == (m.potential("cq", name, fr) if declared else 0)
            assert 0 <= avail <= pot
            # available is exactly the boundary of fits
            assert t.fits(name, {fr: avail})
            assert not t.fits(name, {fr: avail + 1})
            if declared and avail > 0:
                assert t.borrowing_level(name, fr, avail) is not None
    check_over_quota_index(t, m)


def check_over_quota_index(t: QuotaTree, m: Model) -> None:
    """The incrementally kept over-quota index equals the definition: usage above subtree quota."""
    spec = m.spec
    for fr in FRS:
        over_cqs = {n for n in spec.cqs if m.usage("cq", n, fr) > m.subtree("cq", n, fr)}
        assert {n.name for n in t.cluster_queues_over_quota([fr])} == over_cqs
        for name in spec.cqs:
            assert t.over_quota(t.cluster_queue(name), [fr]) == (name in over_cqs)
        for name in spec.cohorts:
            expected = {(kind, child) for kind, child in m.children(name)
                        if m.usage(kind, child, fr) > m.subtree(kind, child, fr)}
            got = {("cq" if n.is_cluster_queue else "cohort", n.name)
                   for n in t.children_over_quota(t.cohort(name), [fr])}
            assert got == expected, (name, fr)


def check_invariants(t: QuotaTree, m: Model) -> None:
    spec = m.spec
    for fr in FRS:
        for name, (cohort, quotas) in spec.cqs.items():
            q = quotas.get(fr)
            if cohort is not None and q is not None and q.borrowing_limit is not None:
                assert m.usage("cq", name, fr) <= q.nominal + q.borrowing_limit
        for name, (parent, quotas) in spec.cohorts.items():
            u, s = m.usage("cohort", name, fr), m.subtree("cohort", name, fr)
            if parent is None:
                assert u <= s
            elif (q := quotas.get(fr)) is not None and q.borrowing_limit is not None:
                assert u <= s + q.borrowing_limit
        # Lending limits: whatever the others use, a node keeps its unlent part.  With T the total
        # nominal quota of the tree, the capacity a node X holds back below itself is
        # nominal_sum(X) - subtree(X) plus its own local quota.
        nodes = [("cq", n) for n in spec.cqs] + [("cohort", n) for n in spec.cohorts]
        for kind, name in nodes:
            q = m.quota(kind, name, fr)
            if m.parent(kind, name) is None or q is None or q.lending_limit is None:
                continue
            root = m.root(kind, name)
            total = m.nominal_sum(*root, fr)
            inside = set(m.members(kind, name))
            others = sum(m.usage("cq", cq, fr) for cq in m.members(*root) if cq not in inside)
            held_below = m.nominal_sum(kind, name, fr) - m.subtree(kind, name, fr)
            kept = max(m.usage(kind, name, fr), m.local(kind, name, fr)) + held_below
            assert others + kept <= total, (kind, name, fr)


@settings(max_examples=150, deadline=None)
@given(specs(), ops_st)
def test_property_admissions_respect_limits(spec: Spec, ops: list[tuple[bool, int, dict[FR, int]]]) -> None:
    t = spec.build()
    m = Model(spec)
    names = list(spec.cqs)
    admitted: list[tuple[str, dict[FR, int]]] = []
    check_against_model(t, m)
    for is_add, k, usage in ops:
        if is_add or not admitted:
            cq = names[k % len(names)]
            if not t.fits(cq, usage):
                continue
            t.add_usage(cq, usage)
            admitted.append((cq, usage))
            for fr, v in usage.items():
                m.cq_usage[cq][fr] = m.cq_usage[cq].get(fr, 0) + v
        else:
            cq, usage = admitted.pop(k % len(admitted))
            t.remove_usage(cq, usage)
            for fr, v in usage.items():
                m.cq_usage[cq][fr] -= v
        check_against_model(t, m)
        check_invariants(t, m)


def built(spec: Spec, ops: list[tuple[bool, int, dict[FR, int]]]) -> QuotaTree:
    """The spec's tree with the usage of every op added (op: (unused, queue index, usage))."""
    t = spec.build()
    names = list(spec.cqs)
    for _, i, usage in ops:
        t.add_usage(names[i % len(names)], usage)
    return t


def assert_same_over_quota_index(t: QuotaTree, other: QuotaTree, cohorts: Iterable[str]) -> None:
    """The over-quota index of ``t`` (kept incrementally) lists what ``other``'s lists, in the same order."""
    for fr in FRS:
        assert [n.name for n in t.cluster_queues_over_quota([fr])] == [
            n.name for n in other.cluster_queues_over_quota([fr])]
        for name in cohorts:
            assert [n.name for n in t.children_over_quota(t.cohort(name), [fr])] == [
                n.name for n in other.children_over_quota(other.cohort(name), [fr])]


@settings(max_examples=150, deadline=None)
@given(specs(), ops_st, st.integers(0, 4), usage_st)
def test_property_add_remove_and_rollback_are_exact(
    spec: Spec, ops: list[tuple[bool, int, dict[FR, int]]], k: int, extra: dict[FR, int]
) -> None:
    # Arbitrary usage, fitting or not (preemption simulations overcommit transiently).
    t = built(spec, ops)
    names = list(spec.cqs)
    before = t.nonzero_usage()
    cq = names[k % len(names)]
    t.add_usage(cq, extra)
    t.remove_usage(cq, extra)
    assert t.nonzero_usage() == before
    t.remove_usage(cq, extra)
    t.add_usage(cq, extra)
    assert t.nonzero_usage() == before

    mark = t.checkpoint()
    for is_add, i, usage in ops:
        (t.add_usage if is_add else t.remove_usage)(names[i % len(names)], usage)
    t.rollback(mark)
    assert t.nonzero_usage() == before
    # The incremental cohort usage equals a from-scratch derivation.
    rebuilt = built(spec, ops)
    assert rebuilt.nonzero_usage() == before
    # So does the over-quota index, kept incrementally through the adds, removes and rollback.
    assert_same_over_quota_index(t, rebuilt, spec.cohorts)


@settings(max_examples=200, deadline=None)
@given(specs(), ops_st, st.integers(0, 14))
def test_property_assess_is_the_three_queries_it_fuses(
    spec: Spec, ops: list[tuple[bool, int, dict[FR, int]]], val: int
) -> None:
    """Flavor assignment reads ``assess`` in place of potential_available, available and
    lowest_subtree_that_fits: one walk must answer exactly what the three would, for every queue
    and flavor-resource (declared or not, one no column holds, usage fitting or overcommitted)."""
    t = spec.build()
    names = list(spec.cqs)
    for is_add, i, usage in ops:
        cq = names[i % len(names)]
        if is_add or t.fits(cq, usage):
            t.add_usage(cq, usage)
    unknown: FR = ("f9", "gpu")
    for name in names:
        for fr in [*FRS, unknown]:
            expected = (t.potential_available(name, fr), t.available(name, fr),
                        *t.lowest_subtree_that_fits(name, fr, val))
            assert t.assess(name, fr, val) == expected, (name, fr, val)


@settings(max_examples=150, deadline=None)
@given(specs(), ops_st, st.lists(st.tuples(st.integers(0, 2), st.integers(0, 4), usage_st), max_size=40),
       st.integers(0, 40))
def test_property_lasting_usage_outlives_the_checkpoints_around_it(
    spec: Spec, base: list[tuple[bool, int, dict[FR, int]]], steps: list[tuple[int, int, dict[FR, int]]],
    nest_at: int,
) -> None:
    """A cycle charges what it admits with add_lasting_usage while its snapshot checkpoint (and at times a nested
    one) is open: once they are rolled back, the tree is exactly the tree with only the lasting changes made, and
    only the cohort trees they touched have a new generation."""
    t = built(spec, base)
    names = list(spec.cqs)
    before = {name: t.generation(name) for name in names}
    expected = built(spec, base)
    touched: set[int] = set()
    outer = t.checkpoint()
    inner = None
    for k, (kind, i, usage) in enumerate(steps):
        if k == nest_at:
            inner = t.checkpoint()
        cq = names[i % len(names)]
        if kind == 0:
            t.add_usage(cq, usage)  # what the snapshot alone sees: reservations, simulated evictions
        elif kind == 1:
            t.remove_usage(cq, usage)
        else:
            t.add_lasting_usage(cq, usage)
            expected.add_usage(cq, usage)
            touched.add(before[cq][0])
    if inner is not None:
        t.rollback(inner)
    t.rollback(outer)
    assert t.nonzero_usage() == expected.nonzero_usage()
    assert_same_over_quota_index(t, expected, spec.cohorts)
    for name in names:
        assert (t.generation(name) != before[name]) == (before[name][0] in touched), name
    # remove_lasting_usage is its inverse, through checkpoints too.
    mark = t.checkpoint()
    for kind, i, usage in steps:
        if kind == 2:
            t.remove_lasting_usage(names[i % len(names)], usage)
    t.rollback(mark)
    rebuilt = built(spec, base)
    assert t.nonzero_usage() == rebuilt.nonzero_usage()
